//! Shell completions and man pages, generated from the clap definitions
//! (`speedmatrix assets --out DIR`, run by `cargo xtask dist`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::out::say;
use anyhow::Context as _;
use clap_complete::Shell;

/// Flags of the hidden `speedmatrix assets`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where to write completions/ (bash, zsh, fish) and man/ (speedmatrix.1 and one page per
    /// subcommand).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Writes the completions and man pages of `cli`.
pub(crate) fn write(mut cli: clap::Command, args: &Args) -> anyhow::Result<ExitCode> {
    let completions = args.out.join("completions");
    let man = args.out.join("man");
    for dir in [&completions, &man] {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
    }
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cli, "speedmatrix", &completions)
            .with_context(|| format!("writing {shell} completions"))?;
    }
    cli.build();
    page(&cli, "speedmatrix", &man)?;
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("speedmatrix-{}", sub.get_name());
        page(sub, &name, &man)?;
    }
    say!("wrote {}/{{completions, man}}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

fn page(cmd: &clap::Command, name: &str, dir: &Path) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone().bin_name(name.to_owned()))
        .title(name)
        .render(&mut buf)
        .with_context(|| format!("rendering the {name} man page"))?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, buf).with_context(|| format!("could not write {}", path.display()))
}
