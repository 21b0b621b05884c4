//! The seed page's own numbers render to the seed page's tables, cell by cell.

use crate::common;

use speedmatrix_report::to_markdown;

/// A copy of the seed page (`shared/seed/000_3ee437e8572a3df8.txt`) as text.
const SEED: &str = include_str!("../fixtures/seed-page.txt");

fn assert_same_table(ours: &[Vec<String>], seed: &[Vec<String>], what: &str) {
    assert_eq!(ours.len(), seed.len(), "{what}: row count");
    for (i, (a, b)) in ours.iter().zip(seed).enumerate() {
        assert_eq!(a.len(), b.len(), "{what}: column count of row {i}");
        for (j, (x, y)) in a.iter().zip(b).enumerate() {
            assert_eq!(x, y, "{what}: row {i} column {j} ({})", seed[0][j]);
        }
    }
}

#[test]
fn all_measurements_table_matches_the_seed() {
    let md = to_markdown(&common::seed());
    let ours = common::table(&md, "| Phase | Context |");
    let seed = common::table(SEED, "| Phase | Context |");
    assert_eq!(seed.len(), 1 + 5 + 48, "seed table parsed");
    assert_same_table(&ours, &seed, "All measurements");
}

#[test]
fn decode_matrix_matches_the_seed() {
    let md = to_markdown(&common::seed());
    // Our cells break the line between tok/s and TTFT; the seed page's text lost it.
    let ours: Vec<Vec<String>> = common::table(&md, "| Context | 1 |")
        .into_iter()
        .map(|row| row.into_iter().map(|c| c.replace("<br>", "")).collect())
        .collect();
    let seed = common::table(SEED, "| Context | 1 |");
    assert_eq!(seed.len(), 7, "seed matrix parsed");
    assert_same_table(&ours, &seed, "Sustained decode matrix");
    assert!(md.contains("| 0 | 117.3<br>54 ms TTFT | 225.7<br>71 ms TTFT |"));
}

#[test]
fn seed_footnotes_and_headline_are_kept() {
    let md = to_markdown(&common::seed());
    for sentence in [
        "Over capacity: not run because this many requests at this context would exceed the server's KV cache.",
        "TTFT is measured after the benchmark warms the server's prompt cache, so it mostly excludes prefill.",
        "Latencies are medians. Total tok/s is output across all simultaneous requests.",
    ] {
        assert!(md.contains(sentence), "missing: {sentence}");
        assert!(SEED.contains(sentence), "not on the seed page: {sentence}");
    }
    assert!(md.starts_with("# Speed test matrix\n"));
    assert!(md.contains("**Agents-A1-4B-FP8 on RTX 3090 24 GiB**"));
    assert!(md.contains(
        "vllm · 0.32.0 · FP8 · 6 contexts (0–248K) × 8 concurrency levels (1–128) · prefill at 8K, 16K, 32K, 64K, 128K"
    ));
    for section in [
        "## Hardware",
        "## Engine",
        "## Run",
        "## Launch command",
        "## Prefill",
        "## Sustained decode",
        "## All measurements",
    ] {
        assert!(md.contains(section), "missing section {section}");
    }
    assert!(md.contains("--max-num-seqs 128 --enable-prefix-caching"));
}
