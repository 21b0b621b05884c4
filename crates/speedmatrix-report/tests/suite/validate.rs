//! Reading documents: clear errors for bad files, `validate` catches contradictions.

use crate::common;

use proptest::prelude::*;
use speedmatrix_report::{CellStatus, Report, ReportError, SCHEMA_VERSION, to_csv, to_markdown};
use speedmatrix_units::Tokens;

fn problems(report: &Report) -> Vec<String> {
    match report.validate() {
        Ok(()) => Vec::new(),
        Err(ReportError::Invalid { problems }) => {
            problems.iter().map(ToString::to_string).collect()
        }
        Err(other) => panic!("unexpected error {other}"),
    }
}

fn assert_problem(report: &Report, needle: &str) {
    let found = problems(report);
    assert!(
        found.iter().any(|p| p.contains(needle)),
        "no problem mentioning {needle:?} in {found:#?}"
    );
}

#[test]
fn fixtures_are_consistent() {
    assert_eq!(problems(&common::seed()), Vec::<String>::new());
    assert_eq!(problems(&common::small()), Vec::<String>::new());
}

#[test]
fn json_round_trips() {
    for report in [common::seed(), common::small()] {
        let json = report.to_json().unwrap();
        assert_eq!(Report::from_json(&json).unwrap(), report);
        assert!(json.contains("\"ttft_ms\""));
        assert!(json.contains("\"window_s\""));
        assert!(json.contains("\"total_tokens_per_s\""));
    }
}

#[test]
fn contradictions_are_named_with_their_path() {
    let mut r = common::seed();
    r.decode.remove(3);
    assert_problem(&r, "decode: has no cell for context 0 × 8 requests");

    let mut r = common::seed();
    r.decode[0].measurements = None;
    assert_problem(&r, "decode[0]: is valid but has no measurements");

    let mut r = common::seed();
    let m = r.decode[0].measurements.clone();
    r.decode[6].measurements = m;
    assert_problem(&r, "decode[6]: is Over capacity but has measurements");

    let mut r = common::small();
    let p = &mut r.decode[0].measurements.as_mut().unwrap().ttft_ms;
    p.p90 = p.p50 - 1.0;
    assert_problem(
        &r,
        "decode[0].measurements.ttft_ms: percentiles must satisfy",
    );

    let mut r = common::small();
    r.decode[1]
        .measurements
        .as_mut()
        .unwrap()
        .total_tokens_per_s = 900.0;
    assert_problem(
        &r,
        "decode[1].measurements.total_tokens_per_s: 900.0 tok/s × 20.0 s = 18000 tokens, but output_tokens is 10800",
    );

    let mut r = common::small();
    r.decode[1]
        .measurements
        .as_mut()
        .unwrap()
        .average_active_requests = 9.0;
    assert_problem(&r, "exceeds the cell's 4 requests");

    let mut r = common::small();
    r.decode[0]
        .measurements
        .as_mut()
        .unwrap()
        .per_request_tokens_per_s = f64::NAN;
    assert_problem(&r, "per_request_tokens_per_s: NaN is not a finite");

    let mut r = common::seed();
    r.run.contexts.swap(0, 1);
    assert_problem(
        &r,
        "run.contexts: must be strictly ascending, but 16K comes before 0",
    );

    let mut r = common::seed();
    r.run.started_at = "yesterday".into();
    assert_problem(
        &r,
        "run.started_at: `yesterday` is not an RFC 3339 timestamp",
    );

    let mut r = common::seed();
    r.run.finished_at = "2025-01-01T00:00:00Z".into();
    assert_problem(&r, "run.finished_at: is before run.started_at");

    let mut r = common::seed();
    r.prefill.pop();
    assert_problem(
        &r,
        "prefill: must have one row per run.prefill_contexts entry",
    );

    let mut r = common::small();
    r.decode[7].status = CellStatus::Error {
        error_kind: "x".into(),
        message: "y".into(),
        failed_requests: 0,
        good_requests: 1,
    };
    assert_problem(&r, "decode[7].status: is an error with 0 failed requests");

    let mut r = common::seed();
    r.decode[0].context = Tokens::new(5);
    assert_problem(&r, "decode[0]: context 5 is not in run.contexts");
}

#[test]
fn bad_files_say_what_is_wrong_and_what_to_do() {
    let err = Report::from_json("{\"schema_version\": 1,\n \"hardware\": [").unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ReportError::Parse { .. }));
    assert!(text.contains("line 2"), "{text}");
    assert!(text.contains("speedmatrix run"), "{text}");

    // A version newer than this reader's.
    let newer = SCHEMA_VERSION + 1;
    let err = Report::from_json(&format!("{{\"schema_version\": {newer}}}")).unwrap_err();
    assert_eq!(
        err,
        ReportError::UnsupportedVersion {
            found: newer.to_string(),
            supported: SCHEMA_VERSION
        }
    );
    assert!(
        err.to_string()
            .contains("use the speedmatrix release that wrote the file")
    );
    let err = Report::from_json("[]").unwrap_err();
    assert!(err.to_string().contains("schema_version missing"), "{err}");

    let mut doc: serde_json::Value =
        serde_json::from_str(&common::small().to_json().unwrap()).unwrap();
    doc["run"]["windw_duration_s"] = 5.into();
    let err = Report::from_json(&doc.to_string()).unwrap_err().to_string();
    assert!(err.contains("unknown field `windw_duration_s`"), "{err}");

    let mut r = common::small();
    r.decode[0].measurements = None;
    let err = Report::from_json(&serde_json::to_string(&r).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("run document is inconsistent (1 problem): decode[0]"),
        "{err}"
    );
}

proptest! {
    /// Any consistent scaling of the numbers stays valid and renders one row per cell.
    #[test]
    fn scaled_reports_stay_valid_and_render_every_cell(
        speed in 0.01f64..1000.0,
        latency in 0.01f64..1000.0,
    ) {
        let mut r = common::small();
        for cell in &mut r.decode {
            if let Some(m) = &mut cell.measurements {
                m.total_tokens_per_s *= speed;
                m.per_request_tokens_per_s *= speed;
                m.output_tokens = Tokens::new((m.total_tokens_per_s * m.measured_s).round() as u64);
                for p in [&mut m.ttft_ms, &mut m.time_between_tokens_ms] {
                    (p.p50, p.p90, p.p99) = (p.p50 * latency, p.p90 * latency, p.p99 * latency);
                }
            }
        }
        prop_assert!(r.validate().is_ok(), "{:?}", r.validate());
        let md = to_markdown(&r);
        let rows = common::table(&md, "| Phase | Context |");
        prop_assert_eq!(rows.len(), 1 + r.prefill.len() + r.decode.len());
        prop_assert!(rows.iter().all(|row| row.len() == 12));
        prop_assert_eq!(to_csv(&r).lines().count(), 1 + r.prefill.len() + r.decode.len());
    }
}

#[test]
fn version_1_documents_still_read_as_the_current_version() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small-run.json"),
    )
    .unwrap();
    assert!(
        text.contains("\"schema_version\": 1"),
        "the fixture is a version 1 file"
    );
    let r = Report::from_json(&text).unwrap();
    assert_eq!(r.schema_version, SCHEMA_VERSION);
    assert_eq!(r.run.prefill_mode, speedmatrix_report::PrefillMode::Cold);
    assert!(r.decode.iter().all(|c| {
        c.measurements
            .as_ref()
            .is_none_or(|m| m.token_count.is_none())
    }));
}

/// Documents of schema version 4 (the last to call the window `window_duration_s`),
/// written by a real earlier release (`tests/fixtures/compat/README.md`).
#[test]
fn version_4_documents_still_read_as_the_current_version() {
    let compat =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/compat");
    for (run, window, mode) in [
        ("sustained", "1.0", None),
        ("rate", "1.0", Some(speedmatrix_report::LoadKind::Rate)),
        ("burst", "10.0", Some(speedmatrix_report::LoadKind::Burst)),
    ] {
        let text = std::fs::read_to_string(compat.join(run).join("run.json")).unwrap();
        assert!(
            text.contains("\"schema_version\": 4"),
            "{run} is a version 4 file"
        );
        assert!(
            text.contains(&format!("\"window_duration_s\": {window}")),
            "{run}"
        );
        let r = Report::from_json(&text).unwrap();
        assert_eq!(r.schema_version, SCHEMA_VERSION, "{run}");
        assert_eq!(
            r.run.window_s.to_string(),
            window.trim_end_matches(".0"),
            "{run}"
        );
        assert_eq!(r.load.as_ref().map(|l| l.mode), mode, "{run}");
        // Written again, it is a current document that reads back the same.
        let again = r.to_json().unwrap();
        assert!(
            again.contains(&format!("\"window_s\": {window}"))
                && !again.contains("window_duration_s")
        );
        assert_eq!(Report::from_json(&again).unwrap(), r, "{run}");
    }
}
