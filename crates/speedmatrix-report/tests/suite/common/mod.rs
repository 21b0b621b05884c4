//! Fixtures shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use speedmatrix_report::Report;

/// `tests/fixtures/<name>`.
pub(crate) fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The parsed and validated fixture `name`.
pub(crate) fn fixture(name: &str) -> Report {
    let text = std::fs::read_to_string(fixture_path(name)).unwrap();
    Report::from_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The seed page, typed in as a run document.
pub(crate) fn seed() -> Report {
    fixture("seed-run.json")
}

/// A small run with every status, flags and hostile strings.
pub(crate) fn small() -> Report {
    fixture("small-run.json")
}

/// The rows of the first Markdown pipe table whose header line contains `header`,
/// header first, each split into trimmed cells. Text before the first `|` on the
/// header line is ignored (the seed page glues captions to tables).
pub(crate) fn table(markdown: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = markdown.lines().skip_while(|l| !l.contains(header));
    let head = lines
        .next()
        .unwrap_or_else(|| panic!("no table with header {header:?}"));
    let head = &head[head.find('|').unwrap()..];
    let mut rows = vec![cells(head)];
    for line in lines {
        if !line.starts_with('|') {
            break;
        }
        if line.starts_with("|---") {
            continue;
        }
        rows.push(cells(line));
    }
    rows
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_owned()).collect()
}
