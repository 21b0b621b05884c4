//! Files an earlier release wrote (`tests/fixtures/compat/`, journal layout 1, report schema
//! 4) are still read: a layout-1 journal is continued by `--resume` with the flags that began
//! it (its finished steps reused, nothing measured again), refused with other flags, and the
//! run's report is rewritten in the current schema.

use std::path::{Path, PathBuf};

use crate::support::{bin, stderr_after, temp_dir};

const M: [&str; 10] = [
    "--tokenizer",
    "bundled",
    "--sim-profile",
    "tiny",
    "--telemetry",
    "off",
    "--max-tokens",
    "32",
    "--prefill-contexts",
    "256",
];

/// A copy of a compat folder's journal, for a run to continue.
fn copy_of(name: &str) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/compat")
        .join(name);
    let dir = temp_dir(&format!("compat-{name}"));
    std::fs::copy(from.join("journal.jsonl"), dir.join("journal.jsonl")).unwrap();
    dir
}

fn resume(dir: &Path, flags: &[&str]) -> std::process::Output {
    bin()
        .args(["run", "-q"])
        .args(M)
        .args(flags)
        .arg("--resume")
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn layout_1_journals_are_continued_with_their_flags() {
    let cases: [(&str, &[&str]); 3] = [
        (
            "sustained",
            &[
                "--contexts",
                "0,256",
                "--concurrency",
                "1,2",
                "--duration",
                "1s",
                "--inject",
                "128",
                "--inject-settle",
                "500ms",
            ],
        ),
        (
            "rate",
            &[
                "--contexts",
                "256",
                "--mode",
                "rate",
                "--request-rate",
                "4",
                "--duration",
                "1s",
                "--shared-prefix",
                "50%",
            ],
        ),
        (
            "burst",
            &[
                "--contexts",
                "256",
                "--mode",
                "burst",
                "--requests",
                "2,4",
                "--shared-prefix",
                "64",
            ],
        ),
    ];
    for (name, flags) in cases {
        let dir = copy_of(name);
        let before = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap();
        assert!(
            before.contains("\"journal_version\":1"),
            "{name} is a layout-1 journal"
        );
        stderr_after(&resume(&dir, flags), 0);
        // Every step was reused: the journal gained no line, and the report is current.
        let after = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap();
        assert_eq!(after, before, "{name}: nothing was measured again");
        let report = crate::support::read_report(&dir);
        assert_eq!(report.schema_version, speedmatrix_report::SCHEMA_VERSION);
        let measured = report.prefill.iter().all(|p| p.status.is_valid())
            && report.decode.iter().all(|c| c.status.is_valid())
            && report
                .load
                .iter()
                .flat_map(|l| &l.cells)
                .all(|c| c.status.is_valid());
        assert!(
            measured,
            "{name}: every step of the journal is in the report"
        );
    }
}

#[test]
fn a_layout_1_journal_is_refused_for_another_run_naming_the_difference() {
    let dir = copy_of("rate");
    let out = resume(
        &dir,
        &[
            "--contexts",
            "256",
            "--mode",
            "rate",
            "--request-rate",
            "4",
            "--duration",
            "1s",
            "--shared-prefix",
            "25%",
        ],
    );
    let stderr = stderr_after(&out, 2);
    assert!(
        stderr.contains("written for a different run") && stderr.contains("Share(0.25)"),
        "{stderr}"
    );
}
