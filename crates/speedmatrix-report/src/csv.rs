//! All measurements as CSV (RFC 4180): one row per prefill point and decode cell.

use crate::model::{CellStatus, CellTelemetry, DecodeCell, PrefillRow, Report};

/// Column names of [`to_csv`], in order. Units are in the names; numbers are written at
/// full precision; an empty field means "not measured".
pub const CSV_COLUMNS: [&str; 82] = [
    "phase",
    "context_tokens",
    "concurrency",
    "status",
    "status_detail",
    "total_tokens_per_s",
    "per_request_tokens_per_s",
    "prompt_tokens_per_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "time_between_tokens_p50_ms",
    "time_between_tokens_p90_ms",
    "time_between_tokens_p99_ms",
    "average_active_requests",
    "completed_requests",
    "output_tokens",
    "measured_s",
    "prompt_tokens_requested",
    "prompt_tokens_reported",
    "queueing_detected",
    "prompt_token_mismatches",
    "token_count_source",
    "token_count_estimated",
    "token_count_uncertainty_pct",
    "server_generation_tokens",
    "server_tokens_per_s",
    "client_cpu_cores",
    "client_bound",
    "gpu_utilization_mean_pct",
    "gpu_power_mean_w",
    "gpu_energy_j",
    "joules_per_output_token",
    "gpu_memory_peak_bytes",
    "gpu_sm_clock_min_mhz",
    "gpu_throttled_s",
    "host_cpu_mean_pct",
    "server_kv_usage_max_pct",
    "prefix_cache_hit_rate",
    "spec_acceptance_rate",
    "spec_mean_accepted_length",
    "preemptions",
    "verdicts",
    "injected_prompt_tokens",
    "injected_ttft_alone_ms",
    "injected_ttft_under_load_ms",
    "injection_stall_ms",
    "injection_tokens_lost",
    "request_rate_per_s",
    "requests_sent",
    "unfinished_requests",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p99_ms",
    "tpot_p50_ms",
    "send_lag_p99_ms",
    "achieved_rate_per_s",
    "max_in_flight",
    "slo_met",
    "slo_attainment_pct",
    "goodput_per_s",
    "total_tokens_per_s_ci_low",
    "total_tokens_per_s_ci_high",
    "per_request_tokens_per_s_ci_low",
    "per_request_tokens_per_s_ci_high",
    "ttft_p50_ms_ci_low",
    "ttft_p50_ms_ci_high",
    "time_between_tokens_p50_ms_ci_low",
    "time_between_tokens_p50_ms_ci_high",
    "repeats",
    "total_tokens_per_s_cv",
    "ttfc_p50_ms",
    "output_tokens_per_request_p50",
    "output_tokens_per_request_max",
    "input_tokens_per_request_p50",
    "input_tokens_per_request_max",
    "reasoning_tokens_per_request_p50",
    "reasoning_tokens_per_request_max",
    "reasoning_tokens_per_s_p50",
    "answer_tokens_per_s_p50",
    "predicted_band_low",
    "predicted_band_high",
];

/// Renders every measurement as CSV with a header row ([`CSV_COLUMNS`]): prefill rows
/// (`phase` = `prefill`) first, then decode cells (`decode`) row by row, then burst or
/// rate cells (`burst`, `rate`; their burst size in `concurrency`, their latencies from the
/// intended send time, ITL in the time-between-tokens columns).
pub fn to_csv(report: &Report) -> String {
    let mut out = String::new();
    record(&mut out, CSV_COLUMNS.iter().map(|c| (*c).to_owned()));
    for row in &report.prefill {
        record(&mut out, prefill_fields(row));
    }
    for cell in &report.decode {
        record(&mut out, decode_fields(cell));
    }
    if let Some(load) = &report.load {
        for cell in &load.cells {
            record(&mut out, load_fields(load.mode, cell));
        }
    }
    out
}

fn prefill_fields(row: &PrefillRow) -> Vec<String> {
    let completed = row.status.is_valid().then_some(u64::from(row.repeats));
    let mut fields = vec![
        "prefill".to_owned(),
        row.context.get().to_string(),
        "1".to_owned(),
        status_kind(&row.status).to_owned(),
        row.status.detail(),
        String::new(),
        String::new(),
        num(row.prompt_tokens_per_s),
        num(row.ttft_ms),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        int(completed),
        String::new(),
        String::new(),
        row.prompt_tokens_requested.get().to_string(),
        int(row.prompt_tokens_reported.map(|t| t.get())),
    ];
    // The rest are decode-only columns, but for a predicted prompt rate's band.
    fields.resize(CSV_COLUMNS.len(), String::new());
    if let Some(band) = row.prompt_tokens_per_s_band {
        for (name, v) in [
            ("predicted_band_low", band.low),
            ("predicted_band_high", band.high),
        ] {
            if let Some(i) = CSV_COLUMNS.iter().position(|c| *c == name) {
                fields[i] = num(Some(v));
            }
        }
    }
    fields
}

fn load_fields(mode: crate::model::LoadKind, cell: &crate::model::LoadCell) -> Vec<String> {
    let m = cell.measurements.as_ref();
    let p = |get: fn(&crate::model::LoadMeasurements) -> Option<crate::model::Percentiles>,
             pick: fn(crate::model::Percentiles) -> f64| num(m.and_then(get).map(pick));
    let mut fields = vec![String::new(); CSV_COLUMNS.len()];
    let mut set = |name: &str, value: String| {
        if let Some(i) = CSV_COLUMNS.iter().position(|c| *c == name) {
            fields[i] = value;
        }
    };
    set("phase", mode.as_str().to_owned());
    set("context_tokens", cell.context.get().to_string());
    set("concurrency", int(cell.requests));
    set("request_rate_per_s", num(cell.rate_per_s));
    set("status", status_kind(&cell.status).to_owned());
    set("status_detail", cell.status.detail());
    set("total_tokens_per_s", num(m.map(|m| m.output_tokens_per_s)));
    set("ttft_p50_ms", p(|m| m.ttft_ms, |p| p.p50));
    set("ttft_p90_ms", p(|m| m.ttft_ms, |p| p.p90));
    set("ttft_p99_ms", p(|m| m.ttft_ms, |p| p.p99));
    set("time_between_tokens_p50_ms", p(|m| m.itl_ms, |p| p.p50));
    set("time_between_tokens_p90_ms", p(|m| m.itl_ms, |p| p.p90));
    set("time_between_tokens_p99_ms", p(|m| m.itl_ms, |p| p.p99));
    set("completed_requests", int(m.map(|m| m.completed)));
    set("output_tokens", int(m.map(|m| m.output_tokens.get())));
    set("measured_s", num(m.map(|m| m.duration_s)));
    set(
        "token_count_source",
        m.and_then(|m| m.token_count_source)
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
    );
    set("requests_sent", int(m.map(|m| m.sent)));
    set("unfinished_requests", int(m.map(|m| m.unfinished)));
    set("e2e_p50_ms", p(|m| m.e2e_ms, |p| p.p50));
    set("e2e_p90_ms", p(|m| m.e2e_ms, |p| p.p90));
    set("e2e_p99_ms", p(|m| m.e2e_ms, |p| p.p99));
    set("tpot_p50_ms", p(|m| m.tpot_ms, |p| p.p50));
    set("send_lag_p99_ms", p(|m| m.send_lag_ms, |p| p.p99));
    set(
        "achieved_rate_per_s",
        num(m.and_then(|m| m.achieved_rate_per_s)),
    );
    set("max_in_flight", int(m.map(|m| m.max_in_flight)));
    let slo = m.and_then(|m| m.slo.as_ref());
    set(
        "slo_met",
        slo.map(|s| s.met.to_string()).unwrap_or_default(),
    );
    set("slo_attainment_pct", num(slo.map(|s| s.attainment_pct)));
    set("goodput_per_s", num(slo.map(|s| s.goodput_per_s)));
    // With --repeats: the repeats' intervals and spread.
    let repeats = m.and_then(|m| m.repeats.as_ref());
    let interval = |f: Option<&crate::model::RepeatFigure>| f.and_then(|f| f.interval);
    let bounds = [
        (
            "total_tokens_per_s",
            repeats.and_then(|r| interval(Some(&r.total_tokens_per_s))),
        ),
        (
            "ttft_p50_ms",
            repeats.and_then(|r| interval(r.ttft_p50_ms.as_ref())),
        ),
        (
            "time_between_tokens_p50_ms",
            repeats.and_then(|r| interval(r.time_between_tokens_p50_ms.as_ref())),
        ),
    ];
    for (name, i) in bounds {
        set(&format!("{name}_ci_low"), num(i.map(|i| i.low)));
        set(&format!("{name}_ci_high"), num(i.map(|i| i.high)));
    }
    set("repeats", int(repeats.map(|r| u64::from(r.count))));
    set("ttfc_p50_ms", p(|m| m.ttfc_ms, |p| p.p50));
    set(
        "reasoning_tokens_per_s_p50",
        p(|m| m.reasoning_tokens_per_s, |p| p.p50),
    );
    set(
        "answer_tokens_per_s_p50",
        p(|m| m.answer_tokens_per_s, |p| p.p50),
    );
    for (name, lengths) in [
        (
            "output_tokens_per_request",
            m.and_then(|m| m.output_tokens_per_request.as_ref()),
        ),
        (
            "input_tokens_per_request",
            m.and_then(|m| m.input_tokens_per_request.as_ref()),
        ),
        (
            "reasoning_tokens_per_request",
            m.and_then(|m| m.reasoning_tokens_per_request.as_ref()),
        ),
    ] {
        set(&format!("{name}_p50"), num(lengths.map(|l| l.p50)));
        set(&format!("{name}_max"), num(lengths.map(|l| l.max)));
    }
    set(
        "total_tokens_per_s_cv",
        num(repeats.and_then(|r| r.total_tokens_per_s.cv)),
    );
    fields
}

fn decode_fields(cell: &DecodeCell) -> Vec<String> {
    let m = cell.measurements.as_ref();
    let f = |get: fn(&crate::model::DecodeMeasurements) -> f64| num(m.map(get));
    [
        "decode".to_owned(),
        cell.context.get().to_string(),
        cell.concurrency.get().to_string(),
        status_kind(&cell.status).to_owned(),
        cell.status.detail(),
        f(|m| m.total_tokens_per_s),
        f(|m| m.per_request_tokens_per_s),
        String::new(),
        f(|m| m.ttft_ms.p50),
        f(|m| m.ttft_ms.p90),
        f(|m| m.ttft_ms.p99),
        f(|m| m.time_between_tokens_ms.p50),
        f(|m| m.time_between_tokens_ms.p90),
        f(|m| m.time_between_tokens_ms.p99),
        f(|m| m.average_active_requests),
        int(m.map(|m| m.completed_requests)),
        int(m.map(|m| m.output_tokens.get())),
        f(|m| m.measured_s),
        String::new(),
        String::new(),
        m.map(|m| m.queueing_detected.to_string())
            .unwrap_or_default(),
        int(m.map(|m| m.prompt_token_mismatches)),
        m.map(|m| m.token_count_source.as_str().to_owned())
            .unwrap_or_default(),
        m.map(|m| m.is_estimated().to_string()).unwrap_or_default(),
        num(m.and_then(|m| match &m.token_count {
            Some(t) => t.uncertainty_pct,
            None => (!m.token_count_source.is_estimate()).then_some(0.0),
        })),
        int(m
            .and_then(|m| m.server_counter)
            .map(|c| c.generation_tokens.get())),
        num(m.and_then(|m| m.server_counter).map(|c| c.tokens_per_s())),
        num(m.and_then(|m| m.client).map(|c| c.cpu_cores)),
        m.and_then(|m| m.client)
            .map(|c| c.client_bound.to_string())
            .unwrap_or_default(),
    ]
    .into_iter()
    .chain(telemetry_fields(m.and_then(|m| m.telemetry.as_ref())))
    .chain(interference_fields(m.and_then(|m| m.interference.as_ref())))
    .chain(std::iter::repeat_n(String::new(), LOAD_ONLY_COLUMNS))
    .chain(uncertainty_fields(m))
    // Load-only: TTFC, answer, prompt and reasoning lengths per request, thinking and
    // answer tok/s.
    .chain(std::iter::repeat_n(String::new(), 9))
    .chain(band_fields(m.and_then(|m| m.band.as_ref())))
    .collect()
}

/// A predicted cell's 80 % band of total tok/s (the prediction's, not a measurement's).
fn band_fields(band: Option<&crate::model::PredictionBand>) -> [String; 2] {
    let b = band.map(|b| b.total_tokens_per_s);
    [num(b.map(|b| b.low)), num(b.map(|b| b.high))]
}

/// The 95 % intervals (the repeats' when the cell was repeated, else the
/// window's), the repeats and their coefficient of variation.
fn uncertainty_fields(m: Option<&crate::model::DecodeMeasurements>) -> [String; 10] {
    let bounds =
        |i: Option<speedmatrix_units::Interval>| [num(i.map(|i| i.low)), num(i.map(|i| i.high))];
    let per_request = m.and_then(|m| match &m.repeats {
        Some(r) => r.per_request_tokens_per_s.as_ref().and_then(|f| f.interval),
        None => m.intervals.and_then(|i| i.per_request_tokens_per_s),
    });
    let [a, b] = bounds(m.and_then(|m| m.total_tokens_per_s_interval()));
    let [c, d] = bounds(per_request);
    let [e, f] = bounds(m.and_then(|m| m.ttft_p50_interval()));
    let [g, h] = bounds(m.and_then(|m| m.time_between_tokens_p50_interval()));
    let repeats = m.and_then(|m| m.repeats.as_ref());
    [
        a,
        b,
        c,
        d,
        e,
        f,
        g,
        h,
        int(repeats.map(|r| u64::from(r.count))),
        num(repeats.and_then(|r| r.total_tokens_per_s.cv)),
    ]
}

/// The interference probe's columns.
fn interference_fields(i: Option<&crate::model::Interference>) -> [String; 5] {
    [
        int(i.map(|i| i.prompt_tokens.get())),
        num(i.and_then(|i| i.ttft_alone_ms)),
        num(i.and_then(|i| i.ttft_under_load_ms)),
        num(i.filter(|i| i.failure.is_none()).map(|i| i.stall_ms)),
        num(i.filter(|i| i.failure.is_none()).map(|i| i.tokens_lost)),
    ]
}

/// The trailing columns only burst and rate rows fill.
const LOAD_ONLY_COLUMNS: usize = 13;

/// The telemetry columns: GPU figures are the mean over GPUs (energy and
/// throttled seconds their sum and maximum), empty where nothing was sampled.
fn telemetry_fields(t: Option<&CellTelemetry>) -> [String; 14] {
    let gpus = t.map(|t| t.gpus.as_slice()).unwrap_or_default();
    let mean = |f: fn(&crate::model::GpuUse) -> Option<f64>| {
        let v: Vec<f64> = gpus.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let server = t.and_then(|t| t.server.as_ref());
    [
        num(mean(|g| g.utilization_mean_pct)),
        num(mean(|g| g.power_mean_w)),
        num(t.and_then(|t| t.energy_j)),
        num(t.and_then(|t| t.joules_per_output_token)),
        int(gpus
            .iter()
            .filter_map(|g| g.memory_peak_bytes.map(|b| b.get()))
            .max()),
        int(gpus
            .iter()
            .filter_map(|g| g.sm_clock_min_mhz)
            .min()
            .map(u64::from)),
        num(gpus
            .iter()
            .filter_map(|g| g.throttled.map(|s| s.any_s))
            .reduce(f64::max)),
        num(t.and_then(|t| t.host.as_ref()).map(|h| h.cpu_mean_pct)),
        num(server.and_then(|s| s.kv_usage_max_pct)),
        num(server.and_then(|s| s.prefix_cache_hit_rate)),
        num(server.and_then(|s| s.spec_acceptance_rate)),
        num(server.and_then(|s| s.spec_mean_accepted_length)),
        num(server.and_then(|s| s.preemptions)),
        t.map(|t| {
            t.verdicts
                .iter()
                .map(|v| v.kind.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default(),
    ]
}

/// The status as its JSON `kind`.
fn status_kind(status: &CellStatus) -> &'static str {
    match status {
        CellStatus::Valid => "valid",
        CellStatus::Partial { .. } => "partial",
        CellStatus::OverCapacity { .. } => "over_capacity",
        CellStatus::Error { .. } => "error",
        CellStatus::Skipped { .. } => "skipped",
    }
}

fn num(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn int(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// Appends one record, quoting fields that hold a comma, quote or line break.
fn record(out: &mut String, fields: impl IntoIterator<Item = String>) {
    for (i, field) in fields.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if field.contains([',', '"', '\n', '\r']) {
            out.push('"');
            out.push_str(&field.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(&field);
        }
    }
    out.push('\n');
}
