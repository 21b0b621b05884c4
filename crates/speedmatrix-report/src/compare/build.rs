//! Building a [`Comparison`]: each cell of two runs paired and judged, the prediction
//! band checked, the runs' settings compared.

use super::*;

/// Compares run `b` against run `a` cell by cell on every metric
/// ([`compare_metrics`] with [`MetricChoice::All`]).
pub fn compare(a: &Report, b: &Report, threshold: Threshold) -> Comparison {
    compare_metrics(a, b, threshold, MetricChoice::All)
}

/// Compares run `b` against run `a` cell by cell, judging the `metric`s.
///
/// A cell regresses when a judged figure got worse beyond `threshold` and
/// beyond its noise (see the module's docs), or when a cell A measured is
/// over capacity or failed in B.
pub fn compare_metrics(
    a: &Report,
    b: &Report,
    threshold: Threshold,
    metric: MetricChoice,
) -> Comparison {
    let judge_with = |section, ctx, n, x, y| judge(section, ctx, n, x, y, threshold, metric);
    let mut cells = Vec::new();
    for ctx in union(&a.run.prefill_contexts, &b.run.prefill_contexts) {
        let side = |r: &Report| {
            let stated = states_intervals(r);
            r.prefill_row(ctx).map(|row| Side {
                status: row.status.clone(),
                tokens_per_s: row
                    .prompt_tokens_per_s
                    .map(|v| (v, Noise::of(stated, None))),
                ttft_ms: row.ttft_ms.map(|v| (v, Noise::of(stated, None))),
                itl_ms: None,
            })
        };
        let mut cell = judge_with(Section::Prefill, ctx, Concurrency::ONE, side(a), side(b));
        cell.band = match (a.prefill_row(ctx), b.prefill_row(ctx)) {
            (Some(x), Some(y)) => x
                .prompt_tokens_per_s_band
                .zip(y.prompt_tokens_per_s.filter(|_| y.status.is_measured()))
                .map(|(band, v)| BandCheck::of(PREDICTION_BAND_LEVEL, band, v)),
            _ => None,
        };
        cells.push(cell);
    }
    let keys = |r: &Report| -> Vec<(Tokens, Concurrency)> {
        r.decode
            .iter()
            .map(|c| (c.context, c.concurrency))
            .collect()
    };
    for (ctx, n) in union(&keys(a), &keys(b)) {
        let side = |r: &Report| {
            let stated = states_intervals(r);
            r.decode_cell(ctx, n).map(|c| {
                let m = c.measurements.as_ref();
                let fig = |v: fn(&crate::model::DecodeMeasurements) -> f64,
                           i: fn(&crate::model::DecodeMeasurements) -> Option<Interval>| {
                    m.map(|m| (v(m), Noise::of(stated, i(m))))
                };
                Side {
                    status: c.status.clone(),
                    tokens_per_s: fig(
                        |m| m.total_tokens_per_s,
                        |m| m.total_tokens_per_s_interval(),
                    ),
                    ttft_ms: fig(|m| m.ttft_ms.p50, |m| m.ttft_p50_interval()),
                    itl_ms: fig(
                        |m| m.time_between_tokens_ms.p50,
                        |m| m.time_between_tokens_p50_interval(),
                    ),
                }
            })
        };
        let mut cell = judge_with(Section::Decode, ctx, n, side(a), side(b));
        cell.band = decode_band_check(a, b, ctx, n);
        cells.push(cell);
    }
    compare_load(a, b, threshold, metric, &mut cells);
    Comparison {
        threshold,
        metric,
        cells,
        differences: differences(a, b),
        commands: [command(a), command(b)],
        a_predicted: a.prediction.is_some(),
    }
}

/// The level of a prediction's prompt-rate band (a prefill row stores the interval only).
const PREDICTION_BAND_LEVEL: f64 = 0.8;

/// Where B's measured throughput of a decode cell fell in A's predicted band.
fn decode_band_check(a: &Report, b: &Report, ctx: Tokens, n: Concurrency) -> Option<BandCheck> {
    let band = a.decode_cell(ctx, n)?.measurements.as_ref()?.band?;
    let measured = b.decode_cell(ctx, n)?;
    let m = measured
        .measurements
        .as_ref()
        .filter(|_| measured.status.is_measured())?;
    Some(BandCheck::of(
        band.level,
        band.total_tokens_per_s,
        m.total_tokens_per_s,
    ))
}

/// Whether a document states its figures' uncertainty: written by a
/// version that computes intervals, and measured (a prediction's band is
/// not an interval of this kind).
fn states_intervals(r: &Report) -> bool {
    r.prediction.is_none()
        && r.decode.iter().any(|c| {
            c.measurements
                .as_ref()
                .is_some_and(|m| m.intervals.is_some())
        })
}

/// The burst or rate cells of two runs, matched by context and load (a
/// burst's size, a rate), compared on output tok/s and median TTFT.
fn compare_load(
    a: &Report,
    b: &Report,
    threshold: Threshold,
    metric: MetricChoice,
    cells: &mut Vec<CellComparison>,
) {
    let load = |r: &Report| r.load.as_ref().map(|l| l.cells.clone()).unwrap_or_default();
    let (la, lb) = (load(a), load(b));
    // Rates as thousandths, so that they can key a match exactly.
    let key = |c: &crate::model::LoadCell| {
        (
            c.context,
            c.requests,
            c.rate_per_s.map(|r| (r * 1e3).round() as u64),
        )
    };
    let mut keys: Vec<_> = la.iter().map(key).collect();
    for k in lb.iter().map(key) {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    // A load cell states an interval only when it was repeated (`--repeats`): one without,
    // in a document that states intervals, is unbounded, and so not judged on its numbers.
    let stated = states_intervals(a) || states_intervals(b);
    for k in keys {
        let side = |cells: &[crate::model::LoadCell]| {
            cells.iter().find(|c| key(c) == k).map(|c| {
                let m = c.measurements.as_ref();
                let repeats = m.and_then(|m| m.repeats.as_ref());
                let stated = stated || repeats.is_some();
                let noise = |f: Option<&crate::model::RepeatFigure>| {
                    Noise::of(stated, f.and_then(|f| f.interval))
                };
                let tps = noise(repeats.map(|r| &r.total_tokens_per_s));
                let ttft = noise(repeats.and_then(|r| r.ttft_p50_ms.as_ref()));
                let itl = noise(repeats.and_then(|r| r.time_between_tokens_p50_ms.as_ref()));
                Side {
                    status: c.status.clone(),
                    tokens_per_s: m.map(|m| (m.output_tokens_per_s, tps)),
                    ttft_ms: m.and_then(|m| m.ttft_ms.map(|p| (p.p50, ttft))),
                    itl_ms: m.and_then(|m| m.itl_ms.map(|p| (p.p50, itl))),
                }
            })
        };
        let (context, requests, milli) = k;
        let conversation = [a, b].iter().any(|r| {
            r.load
                .as_ref()
                .is_some_and(|l| l.mode == LoadKind::Conversation)
        });
        let section = match (milli, conversation) {
            (Some(_), _) => Section::Rate,
            (None, true) => Section::Conversation,
            (None, false) => Section::Burst,
        };
        let n = requests
            .and_then(|n| Concurrency::new(u32::try_from(n).unwrap_or(u32::MAX)))
            .unwrap_or(Concurrency::ONE);
        let mut row = judge(section, context, n, side(&la), side(&lb), threshold, metric);
        row.rate_per_s = milli.map(|m| m as f64 / 1e3);
        cells.push(row);
    }
}

/// What one run says about one cell: each figure and its noise.
struct Side {
    status: CellStatus,
    tokens_per_s: Option<(f64, Noise)>,
    ttft_ms: Option<(f64, Noise)>,
    itl_ms: Option<(f64, Noise)>,
}

fn judge(
    section: Section,
    context: Tokens,
    concurrency: Concurrency,
    a: Option<Side>,
    b: Option<Side>,
    threshold: Threshold,
    metric: MetricChoice,
) -> CellComparison {
    let mut row = CellComparison {
        section,
        context,
        concurrency,
        rate_per_s: None,
        tokens_per_s: None,
        ttft_ms: None,
        itl_ms: None,
        metrics: Vec::new(),
        verdict: Verdict::Within,
        band: None,
    };
    let (a, b) = match (a, b) {
        (Some(a), Some(b)) => (a, b),
        (a, _) => {
            let only = if a.is_some() {
                "only in A"
            } else {
                "only in B"
            };
            row.verdict = Verdict::Unmeasured {
                why: only.to_owned(),
            };
            return row;
        }
    };
    let pair = |x: Option<(f64, Noise)>, y: Option<(f64, Noise)>| {
        let ((a, a_noise), (b, b_noise)) = (x?, y?);
        Some(Pair {
            a,
            b,
            a_noise,
            b_noise,
        })
    };
    row.tokens_per_s = pair(a.tokens_per_s, b.tokens_per_s);
    row.ttft_ms = pair(a.ttft_ms, b.ttft_ms);
    row.itl_ms = pair(a.itl_ms, b.itl_ms);
    row.metrics = [
        (Metric::TokensPerS, row.tokens_per_s),
        (Metric::Ttft, row.ttft_ms),
        (Metric::Itl, row.itl_ms),
    ]
    .into_iter()
    .filter(|(m, _)| metric.includes(*m))
    .filter_map(|(m, p)| MetricComparison::judge(m, p?, threshold))
    .collect();
    row.verdict = match (a.status.is_measured(), b.status.is_measured()) {
        (true, true) => verdict_of(&row.metrics),
        (true, false) if !matches!(b.status, CellStatus::Skipped { .. }) => Verdict::Regressed {
            why: format!("measured in A, {} in B", page::status_text(&b.status)),
        },
        (false, true) => Verdict::Improved,
        _ => Verdict::Unmeasured {
            why: format!(
                "A: {}, B: {}",
                page::status_text(&a.status),
                page::status_text(&b.status)
            ),
        },
    };
    row
}

/// Regressed when any judged figure got worse for real, improved when
/// some got better and none worse, within otherwise.
fn verdict_of(metrics: &[MetricComparison]) -> Verdict {
    let worse: Vec<String> = metrics
        .iter()
        .filter(|m| m.judgement == Judgement::Worse)
        .map(|m| format!("{} {}", m.metric.name(), format::percent_change(m.ratio)))
        .collect();
    if !worse.is_empty() {
        return Verdict::Regressed {
            why: worse.join(", "),
        };
    }
    if metrics.iter().any(|m| m.judgement == Judgement::Better) {
        Verdict::Improved
    } else {
        Verdict::Within
    }
}

/// Items of `a` in order, then those only `b` has.
fn union<T: PartialEq + Copy>(a: &[T], b: &[T]) -> Vec<T> {
    let mut all = a.to_vec();
    all.extend(b.iter().filter(|x| !a.contains(x)));
    all
}

fn differences(a: &Report, b: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let mut diff = |what: &str, x: String, y: String| {
        if x != y {
            out.push(format!("{what}: {x} → {y}"));
        }
    };
    let opt = |s: &Option<String>| s.clone().unwrap_or_else(|| format::DASH.to_owned());
    diff("model", a.run.model.clone(), b.run.model.clone());
    diff("engine", a.engine.name.clone(), b.engine.name.clone());
    diff(
        "engine version",
        opt(&a.engine.version),
        opt(&b.engine.version),
    );
    diff(
        "quantization",
        opt(&a.engine.quantization),
        opt(&b.engine.quantization),
    );
    diff("hardware", page::machine(a), page::machine(b));
    diff("API", a.run.api.to_string(), b.run.api.to_string());
    diff(
        "prompt mode",
        a.run.prompt_mode.clone(),
        b.run.prompt_mode.clone(),
    );
    diff(
        "time per measurement",
        format::seconds(a.run.window_s),
        format::seconds(b.run.window_s),
    );
    diff(
        "max output tokens",
        format::count(a.run.max_output_tokens.get()),
        format::count(b.run.max_output_tokens.get()),
    );
    diff(
        "decode prompts pre-warmed",
        a.run.decode_cache_warmed.to_string(),
        b.run.decode_cache_warmed.to_string(),
    );
    diff(
        "benchmark tool",
        page::tool(&a.run.tool),
        page::tool(&b.run.tool),
    );
    if let (Some(pa), Some(pb)) = (&a.provenance, &b.provenance) {
        let names: std::collections::BTreeSet<&String> =
            pa.options.keys().chain(pb.options.keys()).collect();
        for name in names {
            let text = |o: &BTreeMap<String, serde_json::Value>| match o.get(name) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => format::DASH.to_owned(),
            };
            diff(&format!("--{name}"), text(&pa.options), text(&pb.options));
        }
    }
    out
}

/// The command line that started a run, when it records one.
fn command(r: &Report) -> Option<String> {
    r.provenance.as_ref()?.invocations.first().cloned()
}
