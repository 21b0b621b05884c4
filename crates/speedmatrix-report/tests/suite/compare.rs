//! `compare` on the seed run and a copy with known changes.

use crate::common;

use speedmatrix_report::{CellStatus, Report, Section, Threshold, Verdict, compare};
use speedmatrix_units::{Concurrency, Tokens};

fn at(r: &mut Report, ctx: u64, n: u32) -> &mut speedmatrix_report::DecodeCell {
    let (ctx, n) = (Tokens::kibi(ctx), Concurrency::new(n).unwrap());
    r.decode
        .iter_mut()
        .find(|c| c.context == ctx && c.concurrency == n)
        .unwrap()
}

/// B = the seed run with: 0×1 tok/s ×0.9, 16K×2 TTFT ×1.2, 32K×4 tok/s ×1.03,
/// 64K×1 tok/s ×1.25, 248K×1 failing, prefill 8K TTFT ×0.5.
fn changed() -> Report {
    let mut b = common::seed();
    let scale_tps = |r: &mut Report, ctx, n, f: f64| {
        let m = at(r, ctx, n).measurements.as_mut().unwrap();
        m.total_tokens_per_s *= f;
        m.output_tokens = Tokens::new((m.output_tokens.get() as f64 * f).round() as u64);
    };
    scale_tps(&mut b, 0, 1, 0.9);
    scale_tps(&mut b, 32, 4, 1.03);
    scale_tps(&mut b, 64, 1, 1.25);
    let ttft = &mut at(&mut b, 16, 2).measurements.as_mut().unwrap().ttft_ms;
    (ttft.p50, ttft.p90, ttft.p99) = (ttft.p50 * 1.2, ttft.p90 * 1.2, ttft.p99 * 1.2);
    let failing = at(&mut b, 248, 1);
    failing.status = CellStatus::Error {
        error_kind: "timeout".into(),
        message: "no token for 60 s".into(),
        failed_requests: 1,
        good_requests: 0,
    };
    failing.measurements = None;
    b.prefill[0].ttft_ms = b.prefill[0].ttft_ms.map(|t| t * 0.5);
    b.engine.version = Some("0.33.0".into());
    b.validate().unwrap();
    b
}

fn row(
    c: &speedmatrix_report::Comparison,
    section: Section,
    ctx: u64,
    n: u32,
) -> &speedmatrix_report::CellComparison {
    c.cells
        .iter()
        .find(|r| {
            r.section == section && r.context == Tokens::kibi(ctx) && r.concurrency.get() == n
        })
        .unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn ratios_and_verdicts_at_five_percent() {
    let (a, b) = (common::seed(), changed());
    let c = compare(&a, &b, Threshold::DEFAULT);
    assert_eq!(c.cells.len(), 5 + 48);
    let r = row(&c, Section::Decode, 0, 1);
    assert!(close(r.tokens_per_s.unwrap().ratio().unwrap(), 0.9));
    assert!(close(r.ttft_ms.unwrap().ratio().unwrap(), 1.0));
    assert_eq!(
        r.verdict,
        Verdict::Regressed {
            why: "tok/s -10.0%".into()
        }
    );
    let r = row(&c, Section::Decode, 16, 2);
    assert!(close(r.ttft_ms.unwrap().ratio().unwrap(), 1.2));
    assert_eq!(
        r.verdict,
        Verdict::Regressed {
            why: "TTFT +20.0%".into()
        }
    );
    let r = row(&c, Section::Decode, 32, 4);
    assert!(close(r.tokens_per_s.unwrap().ratio().unwrap(), 1.03));
    assert_eq!(r.verdict, Verdict::Within);
    assert_eq!(row(&c, Section::Decode, 64, 1).verdict, Verdict::Improved);
    let r = row(&c, Section::Decode, 248, 1);
    assert_eq!(
        r.verdict,
        Verdict::Regressed {
            why: "measured in A, Error: timeout in B".into()
        }
    );
    assert_eq!(r.tokens_per_s, None);
    let r = row(&c, Section::Prefill, 8, 1);
    assert!(close(r.ttft_ms.unwrap().ratio().unwrap(), 0.5));
    assert_eq!(r.verdict, Verdict::Improved);
    assert!(matches!(
        row(&c, Section::Decode, 0, 128).verdict,
        Verdict::Unmeasured { .. }
    ));
    assert_eq!(c.regressions().count(), 3);
    assert_eq!(
        c.differences,
        vec!["engine version: 0.32.0 → 0.33.0".to_owned()]
    );
    let text = c.to_markdown();
    assert!(text.contains("| Sustained decode | 0 | 1 | 117.3 | 105.6 | 0.900 (-10.0%) | 54 ms | 54 ms | 1.000 (+0.0%) | **REGRESSION**: tok/s -10.0% |"), "{text}");
    assert!(
        text.contains("26 compared, 3 regressed beyond 5%, 2 improved, 27 not comparable."),
        "{text}"
    );
}

#[test]
fn a_wider_threshold_forgives_small_changes() {
    let c = compare(&common::seed(), &changed(), "15%".parse().unwrap());
    let regressed: Vec<(Tokens, u32)> = c
        .regressions()
        .map(|r| (r.context, r.concurrency.get()))
        .collect();
    assert_eq!(
        regressed,
        vec![(Tokens::kibi(16), 2), (Tokens::kibi(248), 1)]
    );
}

#[test]
fn a_run_against_itself_has_no_change() {
    let a = common::seed();
    let c = compare(&a, &a, Threshold::from_fraction(0.0).unwrap());
    assert!(!c.has_regressions());
    assert!(c.differences.is_empty());
    assert!(
        c.cells
            .iter()
            .all(|r| matches!(r.verdict, Verdict::Within | Verdict::Unmeasured { .. }))
    );
}

#[test]
fn cells_only_in_one_run_are_reported() {
    let a = common::small();
    let mut b = common::small();
    b.run.contexts.pop();
    b.decode.retain(|c| c.context != Tokens::kibi(64));
    b.validate().unwrap();
    let c = compare(&a, &b, Threshold::DEFAULT);
    let only_a = c
        .cells
        .iter()
        .filter(|r| {
            r.verdict
                == Verdict::Unmeasured {
                    why: "only in A".into(),
                }
        })
        .count();
    assert_eq!(only_a, 3);
    let reverse = compare(&b, &a, Threshold::DEFAULT);
    assert_eq!(reverse.cells.len(), c.cells.len());
    assert!(reverse.cells.iter().any(|r| r.verdict
        == Verdict::Unmeasured {
            why: "only in B".into()
        }));
}

#[test]
fn thresholds_parse_as_percentages() {
    assert_eq!("5%".parse::<Threshold>().unwrap().fraction(), 0.05);
    assert_eq!(" 2.5 % ".parse::<Threshold>().unwrap().fraction(), 0.025);
    assert_eq!("10".parse::<Threshold>().unwrap().to_string(), "10%");
    for bad in ["", "%", "-1%", "100%", "five", "NaN%"] {
        let err = bad.parse::<Threshold>().unwrap_err().to_string();
        assert!(err.contains("percentage such as 5%"), "{bad}: {err}");
    }
}

/// A burst run of two cells at 1K (4 and 16 requests).
fn burst_run() -> Report {
    use speedmatrix_report::{LoadCell, LoadMeasurements, LoadRun, Percentiles};
    let mut r = common::small();
    r.decode.clear();
    r.run.concurrencies.clear();
    r.run.contexts = vec![Tokens::kibi(1)];
    let cell = |n: u64, tps: f64, ttft: f64| LoadCell {
        context: Tokens::kibi(1),
        requests: Some(n),
        rate_per_s: None,
        status: CellStatus::Valid,
        measurements: Some(LoadMeasurements {
            sent: n,
            completed: n,
            failed: 0,
            unfinished: 0,
            duration_s: 10.0,
            intended_rate_per_s: None,
            achieved_rate_per_s: None,
            max_in_flight: n,
            output_tokens: Tokens::new((tps * 10.0) as u64),
            output_tokens_per_s: tps,
            ttft_ms: Some(Percentiles {
                p50: ttft,
                p90: ttft,
                p99: ttft,
            }),
            e2e_ms: None,
            itl_ms: None,
            tpot_ms: None,
            send_lag_ms: None,
            token_count_source: None,
            slo: None,
            shared_prefix_tokens: None,
            prefix_cache_intended_pct: None,
            prefix_cache_measured_pct: None,
            turns: Vec::new(),
        }),
    };
    r.load = Some(LoadRun {
        mode: speedmatrix_report::LoadKind::Burst,
        arrival: None,
        max_in_flight: None,
        slo: None,
        cells: vec![cell(4, 400.0, 100.0), cell(16, 1_200.0, 300.0)],
        searches: Vec::new(),
    });
    r.validate().unwrap();
    r
}

#[test]
fn bursts_compare_by_size_on_output_rate_and_ttft() {
    let a = burst_run();
    let mut b = burst_run();
    let cells = &mut b.load.as_mut().unwrap().cells;
    cells[1].measurements.as_mut().unwrap().ttft_ms = Some(speedmatrix_report::Percentiles {
        p50: 450.0,
        p90: 450.0,
        p99: 450.0,
    });
    let c = compare(&a, &b, Threshold::DEFAULT);
    let bursts: Vec<_> = c
        .cells
        .iter()
        .filter(|r| r.section == Section::Burst)
        .collect();
    assert_eq!(bursts.len(), 2);
    assert_eq!(bursts[0].verdict, Verdict::Within);
    assert!(matches!(&bursts[1].verdict, Verdict::Regressed { why } if why.contains("TTFT")));
    assert!(
        c.to_markdown().contains("| Burst | 1K | 16 |"),
        "{}",
        c.to_markdown()
    );
}

#[test]
fn conversation_cells_compare_as_conversations() {
    let conversations = || {
        let mut r = burst_run();
        r.load.as_mut().unwrap().mode = speedmatrix_report::LoadKind::Conversation;
        r
    };
    let a = conversations();
    let mut b = conversations();
    b.load.as_mut().unwrap().cells[0]
        .measurements
        .as_mut()
        .unwrap()
        .output_tokens_per_s = 300.0;
    let c = compare(&a, &b, Threshold::DEFAULT);
    let rows: Vec<_> = c
        .cells
        .iter()
        .filter(|r| r.section == Section::Conversation)
        .collect();
    assert_eq!(rows.len(), 2, "no burst rows: {:?}", c.cells);
    assert!(matches!(&rows[0].verdict, Verdict::Regressed { .. }));
    assert!(c.to_markdown().contains("| Conversations | 1K | 4 |"));
}
