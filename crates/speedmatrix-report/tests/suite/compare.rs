//! `compare` on the seed run and a copy with known changes.

use crate::common;

use speedmatrix_report::{
    CellStatus, Metric, MetricChoice, Report, Section, Threshold, Verdict, compare, compare_metrics,
};
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
    assert!(text.contains("| Sustained decode | 0 | 1 | 117.3 | 105.6 | 0.900 (-10.0%) | 54 ms | 54 ms | 1.000 (+0.0%) | 1.000 (+0.0%) | **REGRESSION**: tok/s -10.0% |"), "{text}");
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
            repeats: None,
            ttfc_ms: None,
            output_tokens_per_request: None,
            input_tokens_per_request: None,
            reasoning_tokens_per_request: None,
            reasoning_tokens_per_s: None,
            answer_tokens_per_s: None,
        }),
    };
    r.load = Some(LoadRun {
        mode: speedmatrix_report::LoadKind::Burst,
        arrival: None,
        max_in_flight: None,
        slo: None,
        workload: None,
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

/// Repeated burst cells state their repeats' interval: a 10 % drop whose interval reaches
/// back inside the threshold is within noise; with tight repeats it is a regression.
#[test]
fn repeated_bursts_are_judged_against_their_repeats_interval() {
    use speedmatrix_report::{RepeatFigure, Repeats};
    let with_repeats = |r: &mut Report, scale: f64, half: f64| {
        for cell in &mut r.load.as_mut().unwrap().cells {
            let m = cell.measurements.as_mut().unwrap();
            m.output_tokens_per_s *= scale;
            let mean = m.output_tokens_per_s;
            m.repeats = Some(Repeats {
                count: 3,
                total_tokens_per_s: RepeatFigure {
                    values: vec![mean - half, mean, mean + half],
                    mean,
                    interval: speedmatrix_units::Interval::around(mean, half),
                    cv: Some(half / mean),
                },
                per_request_tokens_per_s: None,
                ttft_p50_ms: None,
                time_between_tokens_p50_ms: None,
            });
        }
    };
    let judged = |half_fraction: f64| {
        let (mut a, mut b) = (burst_run(), burst_run());
        with_repeats(&mut a, 1.0, 400.0 * half_fraction);
        with_repeats(&mut b, 0.9, 360.0 * half_fraction);
        compare_metrics(
            &a,
            &b,
            Threshold::from_fraction(0.05).unwrap(),
            MetricChoice::Only(Metric::TokensPerS),
        )
        .cells
        .into_iter()
        .find(|c| c.section == Section::Burst)
        .unwrap()
        .verdict
    };
    assert!(
        matches!(judged(0.001), Verdict::Regressed { .. }),
        "{:?}",
        judged(0.001)
    );
    assert!(
        !matches!(judged(0.08), Verdict::Regressed { .. }),
        "{:?}",
        judged(0.08)
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

/// The seed with 0×1's throughput scaled by `f`, every cell stating a ±`pct` % interval
/// of its throughput and none of its median TTFT.
fn with_intervals(f: f64, pct: f64) -> Report {
    let mut r = common::seed();
    for cell in &mut r.decode {
        if let Some(m) = cell.measurements.as_mut() {
            if cell.context == Tokens::ZERO && cell.concurrency.get() == 1 {
                m.total_tokens_per_s *= f;
            }
            let v = m.total_tokens_per_s;
            m.intervals = Some(speedmatrix_report::DecodeIntervals {
                batches: 10,
                total_tokens_per_s: speedmatrix_units::Interval::around(v, v * pct / 100.0),
                ..Default::default()
            });
        }
    }
    r
}

#[test]
fn a_change_counts_only_when_its_interval_lies_beyond_the_threshold() {
    use speedmatrix_report::{Judgement, Metric};
    let judged = |b: &Report, t: &str| {
        let c = compare(&with_intervals(1.0, 1.0), b, t.parse().unwrap());
        let r = row(&c, Section::Decode, 0, 1).clone();
        let tps = r
            .metrics
            .iter()
            .find(|m| m.metric == Metric::TokensPerS)
            .unwrap();
        let ttft = r.metrics.iter().find(|m| m.metric == Metric::Ttft).unwrap();
        (tps.judgement, ttft.judgement, r.verdict)
    };
    // −10 % with ±1 % on each side: the ratio's interval (≈ 0.887–0.913) is wholly below 0.95.
    let (tps, _, verdict) = judged(&with_intervals(0.9, 1.0), "5%");
    assert_eq!(tps, Judgement::Worse);
    assert!(matches!(verdict, Verdict::Regressed { .. }));
    // The same −10 % with ±8 % intervals: beyond the threshold, not beyond the noise.
    let (tps, _, verdict) = judged(&with_intervals(0.9, 8.0), "5%");
    assert_eq!(tps, Judgement::WithinNoise);
    assert_eq!(verdict, Verdict::Within);
    // −3 % is within a 5 % threshold whatever the noise.
    assert_eq!(judged(&with_intervals(0.97, 0.1), "5%").0, Judgement::Same);
    // +10 % with tight intervals is an improvement.
    assert_eq!(judged(&with_intervals(1.1, 0.5), "5%").0, Judgement::Better);
    // A TTFT the documents could not bound is never judged, whatever its change.
    let mut b = with_intervals(1.0, 1.0);
    at(&mut b, 0, 1).measurements.as_mut().unwrap().ttft_ms.p50 *= 3.0;
    let (_, ttft, verdict) = judged(&b, "5%");
    assert_eq!(ttft, Judgement::Unjudged);
    assert_eq!(verdict, Verdict::Within);
    // Documents without intervals (older versions) are judged on the figures alone.
    for cell in &mut b.decode {
        if let Some(m) = cell.measurements.as_mut() {
            m.intervals = None;
        }
    }
    let c = compare(&common::seed(), &b, "5%".parse().unwrap());
    assert!(matches!(
        row(&c, Section::Decode, 0, 1).verdict,
        Verdict::Regressed { .. }
    ));
}

#[test]
fn a_measurement_is_placed_below_inside_or_above_a_predicted_band() {
    use speedmatrix_report::{BandCheck, BandPlace};
    let band = speedmatrix_units::Interval::new(100.0, 200.0).unwrap();
    assert_eq!(BandCheck::of(0.8, band, 99.9).place, BandPlace::Below);
    assert_eq!(BandCheck::of(0.8, band, 100.0).place, BandPlace::Inside);
    assert_eq!(BandCheck::of(0.8, band, 200.0).place, BandPlace::Inside);
    assert_eq!(BandCheck::of(0.8, band, 200.1).place, BandPlace::Above);
}
