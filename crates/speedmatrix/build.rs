//! Names the commit the binary is built from, for `speedmatrix --version`.

use std::process::Command;

fn main() {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let commit =
        git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown commit".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
    let text = if dirty {
        format!("{commit}, modified")
    } else {
        commit
    };
    println!("cargo:rustc-env=SPEEDMATRIX_COMMIT={text}");
    // `debug` or `release` (a custom profile builds on one of them).
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=SPEEDMATRIX_PROFILE={profile}");
    // Rebuilt when the checked-out commit moves.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
