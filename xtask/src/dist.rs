//! `cargo xtask dist`: what a package of speedmatrix holds — the release
//! binary, its shell completions and man pages (generated from the clap
//! definitions by the hidden `speedmatrix assets`) — in `target/dist/`.

use crate::util::{cargo, project_root, run};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run_dist(_args: &Args) -> anyhow::Result<()> {
    run(&mut cargo(&[
        "build",
        "--release",
        "--locked",
        "-p",
        "speedmatrix",
    ]))?;
    let root = project_root();
    let dist = root.join("target/dist");
    std::fs::create_dir_all(dist.join("bin"))?;
    let bin = root.join("target/release/speedmatrix");
    std::fs::copy(&bin, dist.join("bin/speedmatrix"))?;
    let mut assets = std::process::Command::new(&bin);
    assets.arg("assets").arg("--out").arg(&dist);
    run(&mut assets)?;
    println!(
        "{}: bin/speedmatrix, completions/ (bash, zsh, fish), man/",
        dist.display()
    );
    Ok(())
}
