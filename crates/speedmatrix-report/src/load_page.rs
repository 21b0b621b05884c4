//! The load parts of the pages, shared by Markdown and HTML: the run's
//! setup, one row per burst or rate cell, and what the figures mean.

use crate::format;
use crate::model::{
    LoadCell, LoadKind, LoadMeasurements, LoadRun, Percentiles, Report, TokenLengths,
};
use crate::page;

/// The section's title.
pub(crate) fn title(load: &LoadRun) -> &'static str {
    match load.mode {
        LoadKind::Rate => "Open-loop request rates",
        LoadKind::Conversation => "Multi-turn conversations",
        LoadKind::Burst | LoadKind::Sustained => "Bursts",
    }
}

/// The load setup, for the facts list.
pub(crate) fn facts(load: &LoadRun) -> Vec<(&'static str, String)> {
    let mut facts = Vec::new();
    match (load.mode, &load.arrival) {
        (LoadKind::Rate, Some(a)) => {
            let process = match (a.process.as_str(), a.burstiness) {
                ("gamma", Some(b)) => format!("gamma gaps, burstiness {b}"),
                ("poisson", _) => "Poisson (exponential gaps)".to_owned(),
                ("constant", _) => "constant gaps".to_owned(),
                (other, _) => other.to_owned(),
            };
            facts.push((
                "Arrivals",
                format!("{process}, drawn before each cell from seed {}", a.seed),
            ));
            let length = match (a.duration_s, a.requests) {
                (Some(d), _) => format!("sends for {d} s"),
                (_, Some(n)) => format!("sends {n} requests"),
                _ => "—".to_owned(),
            };
            facts.push(("Each cell", length));
        }
        (LoadKind::Conversation, _) => facts.push((
            "Each cell",
            "runs its conversations at once, each turn's prompt the last one's, its answer and a \
             new question; a conversation's turns follow each other"
                .to_owned(),
        )),
        _ => facts.push((
            "Each cell",
            "sends its requests at once and lasts until the last one ends".to_owned(),
        )),
    }
    if let Some(n) = load.max_in_flight {
        facts.push((
            "In flight",
            format!("at most {n}; a request past it waits, and its wait counts in its latency"),
        ));
    }
    if let Some(slo) = &load.slo {
        facts.push(("Objective", slo.clone()));
    }
    facts
}

/// The table's columns.
pub(crate) fn columns(load: &LoadRun) -> Vec<&'static str> {
    let mut c = vec![
        "Context",
        match load.mode {
            LoadKind::Rate => "Rate",
            LoadKind::Conversation => "Conversations",
            LoadKind::Burst | LoadKind::Sustained => "Requests",
        },
        "Status",
        "Finished / sent",
        "Time",
        "Output tok/s",
        "TTFT p50 / p99",
        "E2E p50 / p99",
        "ITL p50 / p99",
        "TPOT p50",
        "Most in flight",
    ];
    if load.mode == LoadKind::Rate {
        c.extend(["Sent / meant req/s", "Send lag p99"]);
    }
    if load.slo.is_some() {
        c.extend(["SLO", "Goodput"]);
    }
    if shares_prefix(load) {
        c.push("Prefix-cache hits intended / measured");
    }
    if reasons_first(load) {
        c.push("TTFC p50");
    }
    if lengths_vary(load, |m| m.input_tokens_per_request.as_ref()) {
        c.push("Prompt tokens p50 (min–max)");
    }
    if thinks(load) {
        c.push("Thinking tokens p50 (min–max)");
        c.push("Thinking / answer tok/s p50");
    }
    if lengths_vary(load, |m| m.output_tokens_per_request.as_ref()) {
        c.push("Answer tokens p50 (min–max)");
    }
    c
}

/// Whether any cell's first answer token came later than its first token (the model reasoned
/// first): then time to first content gets a column of its own.
fn reasons_first(load: &LoadRun) -> bool {
    load.cells.iter().any(|c| {
        c.measurements
            .as_ref()
            .is_some_and(|m| match (&m.ttfc_ms, &m.ttft_ms) {
                (Some(c), Some(t)) => c.p50 > t.p50 * 1.01,
                _ => false,
            })
    })
}

/// Whether any cell's prompts or answers (`which`) differ in length (a dataset,
/// `--input-tokens`, `--respect-eos`): then their lengths get a column of their own.
fn lengths_vary(
    load: &LoadRun,
    which: impl Fn(&LoadMeasurements) -> Option<&TokenLengths>,
) -> bool {
    load.cells.iter().any(|c| {
        c.measurements
            .as_ref()
            .and_then(&which)
            .is_some_and(|l| l.max > l.min)
    })
}

/// Whether any cell's model reasoned before answering: then its thinking tokens get a column.
fn thinks(load: &LoadRun) -> bool {
    load.cells.iter().any(|c| {
        c.measurements.as_ref().is_some_and(|m| {
            m.reasoning_tokens_per_request
                .as_ref()
                .is_some_and(|l| l.max > 0.0)
        })
    })
}

/// `612 (20–3,100)`: a cell's median length and its range.
fn lengths_cell(l: Option<&TokenLengths>) -> String {
    l.map_or_else(
        || format::DASH.to_owned(),
        |l| {
            format!(
                "{} ({}–{})",
                format::grouped(l.p50, 0),
                format::grouped(l.min, 0),
                format::grouped(l.max, 0)
            )
        },
    )
}

fn shares_prefix(load: &LoadRun) -> bool {
    load.cells.iter().any(|c| {
        c.measurements.as_ref().is_some_and(|m| {
            m.prefix_cache_intended_pct.is_some() || m.prefix_cache_measured_pct.is_some()
        })
    })
}

fn pair(p: Option<&Percentiles>) -> String {
    p.map_or_else(
        || format::DASH.to_owned(),
        |p| format!("{} / {}", format::ms_whole(p.p50), format::ms_whole(p.p99)),
    )
}

/// One row per cell.
pub(crate) fn rows(load: &LoadRun) -> Vec<Vec<String>> {
    load.cells.iter().map(|c| row(load, c)).collect()
}

fn row(load: &LoadRun, cell: &LoadCell) -> Vec<String> {
    let dash = || format::DASH.to_owned();
    let point = match (cell.requests, cell.rate_per_s) {
        (Some(n), _) => n.to_string(),
        (_, Some(r)) => format!("{r}/s"),
        _ => dash(),
    };
    let mut status = page::status_text(&cell.status);
    if let Some(r) = cell.measurements.as_ref().and_then(|m| m.repeats.as_ref()) {
        status.push_str(&page::repeats_note(r));
    }
    let mut row = vec![cell.context.to_string(), point, status];
    let columns = columns(load).len();
    let Some(m) = &cell.measurements else {
        row.resize(columns, dash());
        return row;
    };
    row.extend([
        {
            let mut s = format!("{} / {}", m.completed, m.sent);
            if m.unfinished > 0 {
                s.push_str(&format!(" ({} unfinished)", m.unfinished));
            }
            s
        },
        format!("{:.1} s", m.duration_s),
        format::tokens_per_s_pm(
            m.output_tokens_per_s,
            m.repeats
                .as_ref()
                .and_then(|r| r.total_tokens_per_s.interval),
        ),
        pair(m.ttft_ms.as_ref()),
        pair(m.e2e_ms.as_ref()),
        m.itl_ms.as_ref().map_or_else(dash, |p| {
            format!(
                "{} / {}",
                format::ms_tenths(p.p50),
                format::ms_tenths(p.p99)
            )
        }),
        m.tpot_ms
            .as_ref()
            .map_or_else(dash, |p| format::ms_tenths(p.p50)),
        m.max_in_flight.to_string(),
    ]);
    if load.mode == LoadKind::Rate {
        row.push(match (m.achieved_rate_per_s, m.intended_rate_per_s) {
            (Some(a), Some(i)) => format!("{a:.2} / {i:.2}"),
            _ => dash(),
        });
        row.push(
            m.send_lag_ms
                .as_ref()
                .map_or_else(dash, |p| format::ms_tenths(p.p99)),
        );
    }
    if load.slo.is_some() {
        match &m.slo {
            Some(s) => {
                let missed: Vec<&str> = s
                    .terms
                    .iter()
                    .filter(|t| !t.met)
                    .map(|t| t.term.as_str())
                    .collect();
                row.push(if s.met {
                    format!("met ({:.0} % of requests)", s.attainment_pct)
                } else {
                    format!(
                        "missed: {} ({:.0} % of requests)",
                        missed.join(", "),
                        s.attainment_pct
                    )
                });
                row.push(format!("{:.2} req/s", s.goodput_per_s));
            }
            None => row.extend([dash(), dash()]),
        }
    }
    if shares_prefix(load) {
        let pct = |v: Option<f64>| v.map_or_else(dash, |v| format!("{v:.1} %"));
        let both = format!(
            "{} / {}",
            pct(m.prefix_cache_intended_pct),
            pct(m.prefix_cache_measured_pct)
        );
        row.push(match m.shared_prefix_tokens {
            Some(t) => format!("{both} ({t} shared)"),
            None => both,
        });
    }
    if reasons_first(load) {
        row.push(
            m.ttfc_ms
                .as_ref()
                .map_or_else(dash, |p| format::ms_whole(p.p50)),
        );
    }
    if lengths_vary(load, |m| m.input_tokens_per_request.as_ref()) {
        row.push(lengths_cell(m.input_tokens_per_request.as_ref()));
    }
    if thinks(load) {
        row.push(lengths_cell(m.reasoning_tokens_per_request.as_ref()));
        let rate = |p: Option<crate::model::Percentiles>| {
            p.map_or_else(dash, |p| format::tokens_per_s(p.p50))
        };
        row.push(format!(
            "{} / {}",
            rate(m.reasoning_tokens_per_s),
            rate(m.answer_tokens_per_s)
        ));
    }
    if lengths_vary(load, |m| m.output_tokens_per_request.as_ref()) {
        row.push(lengths_cell(m.output_tokens_per_request.as_ref()));
    }
    row
}

/// What the table's figures are.
pub(crate) fn note(load: &LoadRun) -> String {
    let mut s = String::from(
        "Latencies are of the finished requests and start at each request's intended send \
         time (a burst's start; an open-loop cell's drawn arrival time), so a client that sends \
         late cannot hide queueing. Time runs from the first intended send to the last \
         request's end; output tok/s is every request's output tokens over it. ITL is every \
         token interval; TPOT each request's mean time per output token after the first.",
    );
    if load.mode == LoadKind::Rate {
        s.push_str(
            " Sent req/s is the requests sent over the time to the last send, meant req/s the \
             schedule's; send lag is actual minus intended send time. Requests still running \
             when the cell's drain time ran out were cancelled and are counted as unfinished.",
        );
    }
    if load.mode == LoadKind::Conversation {
        s.push_str(
            " Each request is measured from its own send (a conversation waits for its last \
             answer). The intended prefix-cache hit rate counts, for every turn after the first, \
             the previous turn's prompt and answer (the server's counts) in whole KV blocks over \
             all prompt tokens; the measured one is the server's counters over the cell.",
        );
    } else if shares_prefix(load) {
        s.push_str(
            " Every request's prompt began with the cell's shared prefix, cached by one request \
             sent before the cell: the intended hit rate is the prefix's full KV blocks over \
             the prompt (never its last token), the measured one the server's prefix-cache \
             hits over lookups across the cell (counter differences).",
        );
    }
    if let Some(w) = &load.workload {
        s.push_str(&format!(
            " Prompts: {}, each used as given (a corpus cut to exact token counts); the \
             context column is their median length and the prompt-token column what the \
             server counted per request.",
            w.describe()
        ));
    }
    if load.slo.is_some() {
        s.push_str(
            " SLO: met when every term's percentile over the cell is within its limit; the \
             share is of requests that meet every term on their own figures (failed and \
             unfinished ones do not), and goodput is those requests per second of the cell's \
             time.",
        );
    }
    s
}

/// Each context's search in words: the path and what it found.
pub(crate) fn searches(load: &LoadRun) -> Vec<String> {
    let unit = |v: f64| {
        if load.mode == LoadKind::Rate {
            format!("{v}/s")
        } else {
            format!("{v}")
        }
    };
    load.searches
        .iter()
        .map(|k| {
            let floor = k.floor_tokens_per_s;
            let path: Vec<String> = k
                .path
                .iter()
                .map(|s| {
                    let mark = if s.met { "✓" } else { "✗" };
                    match (floor, s.total_tokens_per_s, s.per_request_tokens_per_s) {
                        (Some(_), Some(t), p) => format!(
                            "{} {mark} ({} tok/s, {} per request)",
                            unit(s.load),
                            format::grouped(t, 0),
                            p.map_or("–".to_owned(), |p| format::grouped(p, 1))
                        ),
                        _ => format!("{} {mark}", unit(s.load)),
                    }
                })
                .collect();
            let found = match (floor, k.knee, k.end.as_deref()) {
                (Some(f), Some(v), _) => {
                    let best = k.path.iter().find(|s| s.load == v && s.met);
                    format!(
                        "fastest requests at ≥ {} tok/s: {} ({} tok/s per request)",
                        format::grouped(f, 0),
                        unit(v),
                        best.and_then(|s| s.per_request_tokens_per_s)
                            .map_or("–".to_owned(), |p| format::grouped(p, 1))
                    )
                }
                (Some(f), None, Some("floor_not_reached")) => {
                    format!("no load allowed reached {} tok/s", format::grouped(f, 0))
                }
                (Some(f), None, _) => format!(
                    "no load reached {} tok/s within the objective",
                    format::grouped(f, 0)
                ),
                (None, Some(v), Some("max_met")) => {
                    format!("met up to {}, the highest load allowed", unit(v))
                }
                (None, Some(v), Some("step_limit")) => {
                    format!("highest met {} (the step budget ran out first)", unit(v))
                }
                (None, Some(v), _) => format!("knee {}", unit(v)),
                (None, None, Some("nothing_met")) => "no load met the objective".to_owned(),
                (None, None, _) => "nothing met yet".to_owned(),
            };
            format!("{}: {} → {found}", k.context, path.join(" → "))
        })
        .collect()
}

/// Conversation cells' TTFT by turn: the columns (one per turn) and rows.
pub(crate) fn turn_table(load: &LoadRun) -> Option<(Vec<String>, Vec<Vec<String>>)> {
    let most = load
        .cells
        .iter()
        .filter_map(|c| c.measurements.as_ref())
        .map(|m| m.turns.len())
        .max()
        .filter(|n| *n > 0)?;
    let mut header = vec!["Context".to_owned(), "Conversations".to_owned()];
    header.extend((1..=most).map(|t| format!("Turn {t} TTFT p50 / p99")));
    let rows = load
        .cells
        .iter()
        .filter_map(|c| Some((c, c.measurements.as_ref()?)))
        .map(|(c, m)| {
            let mut row = vec![
                c.context.to_string(),
                c.requests
                    .map_or_else(|| format::DASH.to_owned(), |n| n.to_string()),
            ];
            row.extend((0..most).map(|i| {
                m.turns.get(i).map_or_else(
                    || format::DASH.to_owned(),
                    |t| {
                        let mut s = pair(t.ttft_ms.as_ref());
                        if let Some(p) = t.prompt_tokens_mean {
                            s.push_str(&format!(" ({} prompt)", format::grouped(p, 0)));
                        }
                        s
                    },
                )
            }));
            row
        })
        .collect();
    Some((header, rows))
}

/// The load run of a report, when it has one with cells.
pub(crate) fn of(report: &Report) -> Option<&LoadRun> {
    report.load.as_ref().filter(|l| !l.cells.is_empty())
}

/// The interference table's columns.
pub(crate) const INTERFERENCE_COLUMNS: [&str; 9] = [
    "Context",
    "Concurrency",
    "Injected prompt",
    "TTFT alone",
    "TTFT under load",
    "Streams tok/s before / during / after",
    "Streams ITL during p50 / p99",
    "Stall",
    "Tokens lost",
];

/// One row per cell with an interference probe.
pub(crate) fn interference_rows(report: &Report) -> Vec<Vec<String>> {
    let dash = || format::DASH.to_owned();
    report
        .decode
        .iter()
        .filter_map(|c| Some((c, c.measurements.as_ref()?.interference.as_ref()?)))
        .map(|(c, i)| {
            let ms = |v: Option<f64>| v.map_or_else(dash, format::ms_whole);
            vec![
                c.context.to_string(),
                c.concurrency.to_string(),
                i.prompt_tokens.to_string(),
                ms(i.ttft_alone_ms),
                ms(i.ttft_under_load_ms),
                format!(
                    "{} / {} / {}",
                    format::tokens_per_s(i.tokens_per_s_before),
                    format::tokens_per_s(i.tokens_per_s_during),
                    format::tokens_per_s(i.tokens_per_s_after)
                ),
                i.itl_during_ms.as_ref().map_or_else(dash, |p| {
                    format!(
                        "{} / {}",
                        format::ms_tenths(p.p50),
                        format::ms_tenths(p.p99)
                    )
                }),
                match &i.failure {
                    Some(f) => format!("probe failed: {f}"),
                    None => format::ms_whole(i.stall_ms),
                },
                format!("{:.0}", i.tokens_lost),
            ]
        })
        .collect()
}

/// What the interference table's figures are.
pub(crate) const INTERFERENCE_NOTE: &str = "After each cell's window, one cold prompt of the \
    injected length (max_tokens 1, nothing cached) is sent into the running streams; the same \
    length was sent alone before the streams started. During is its send to its first token, \
    after the settle time following it. Tokens lost are what the streams would have produced at \
    the window's rate during it less what they produced; the stall is those tokens as time at \
    that rate: how long decoding stood still while the prompt was prefilled.";
