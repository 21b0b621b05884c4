//! The study site: links, the baseline's ratios with regressions flagged,
//! the Pareto view, capacity grids, and no asset from outside the page.

use std::collections::BTreeMap;

use speedmatrix_report::{SiteInput, SitePoint, site};

use crate::common;

fn input() -> SiteInput {
    let base = common::small();
    let mut slower = common::small();
    for c in &mut slower.decode {
        if let Some(m) = c.measurements.as_mut() {
            m.total_tokens_per_s *= 0.8;
        }
    }
    let point = |name: &str, report| SitePoint {
        name: name.into(),
        values: BTreeMap::from([("kv".to_owned(), name.to_owned())]),
        status: "measured".into(),
        report,
    };
    SiteInput {
        name: "KV <dtype>".into(),
        labels: BTreeMap::from([("gpu".to_owned(), "RTX 3090".to_owned())]),
        points: vec![
            point("auto", Some(base)),
            point("fp8", Some(slower)),
            SitePoint {
                status: "failed: the server exited".into(),
                ..point("nvfp4", None)
            },
        ],
        baseline: 0,
        threshold: 0.05,
    }
}

#[test]
fn the_index_links_each_measured_point_and_flags_what_fell_behind_the_baseline() {
    let files = site(&input());
    let names: Vec<&str> = files.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(names, ["index.html", "points/auto.html", "points/fp8.html"]);
    let index = &files[0].1;
    assert!(index.contains("<a href=\"points/auto.html\">auto</a>"));
    assert!(
        !index.contains("points/nvfp4.html"),
        "a failed point has no page"
    );
    assert!(index.contains("failed: the server exited"));
    assert!(index.contains("KV &lt;dtype&gt;"), "names are escaped");
    // fp8 runs at 0.8 of auto in every cell: flagged below 0.95.
    assert!(index.contains("<h3>fp8 / auto</h3>"));
    assert!(
        index.contains("class=\"regressed\" style=\"background:rgb(255,216,216)\">0.800 ▼"),
        "{index}"
    );
    assert!(index.contains("aria-label=\"Total tok/s by per-request tok/s, per point\""));
    assert!(index.contains("<h2>Capacity</h2>"));
    // Self-contained: nothing loads from elsewhere, no script.
    for page in files.iter().map(|f| &f.1) {
        assert!(!page.contains("<script"), "no script");
        assert!(!page.contains("src=\"http"), "no remote asset");
        assert!(!page.contains("<link "), "no stylesheet link");
    }
}
