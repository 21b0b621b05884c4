//! Reading, writing and checking the run document.

use std::collections::BTreeSet;

use speedmatrix_units::{Concurrency, LoadKind, Tokens};

use crate::error::{Problem, ReportError};
use crate::model::{
    CellStatus, DecodeCell, DecodeMeasurements, OLDEST_READABLE_VERSION, Percentiles, PrefillRow,
    Report, SCHEMA_VERSION,
};

/// How far `total_tokens_per_s × measured_s` may stray from `output_tokens`: window-edge
/// interpolation makes them differ by a fraction of a token per stream, never by percents.
const THROUGHPUT_TOLERANCE: f64 = 0.05;

impl Report {
    /// Parses a run document and checks it with [`Report::validate`].
    ///
    /// The version is checked before the shape, so a newer file says so instead of
    /// failing on a field this version does not know. A version 1 document (no
    /// partial cells, no estimated counts, cold prefill) reads as version 2
    /// with those fields at their defaults.
    pub fn from_json(text: &str) -> Result<Report, ReportError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ReportError::Parse {
                detail: e.to_string(),
            })?;
        let version = value.get("schema_version");
        let readable = OLDEST_READABLE_VERSION..=SCHEMA_VERSION;
        if !version
            .and_then(serde_json::Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .is_some_and(|v| readable.contains(&v))
        {
            return Err(ReportError::UnsupportedVersion {
                found: version.map_or_else(|| "missing".to_owned(), ToString::to_string),
                supported: SCHEMA_VERSION,
            });
        }
        // Parsing the text again (not the Value) keeps line and column in errors.
        let mut report: Report = serde_json::from_str(text).map_err(|e| ReportError::Parse {
            detail: e.to_string(),
        })?;
        report.schema_version = SCHEMA_VERSION;
        report.validate()?;
        Ok(report)
    }

    /// The document as pretty-printed JSON, after checking it with [`Report::validate`].
    pub fn to_json(&self) -> Result<String, ReportError> {
        self.validate()?;
        // Unreachable for these types (string map keys only), but not worth a panic.
        serde_json::to_string_pretty(self).map_err(|e| ReportError::Parse {
            detail: e.to_string(),
        })
    }

    /// The JSON Schema (draft 2020-12) of the document, generated from these types.
    pub fn json_schema() -> serde_json::Value {
        serde_json::Value::from(schemars::schema_for!(Report))
    }

    /// Checks that the document agrees with itself: the version, sorted axes, one decode
    /// cell per context × concurrency and one prefill row per prefill context, numbers
    /// where the status promises them and none where it excludes them, finite non-negative
    /// numbers, ordered percentiles, and throughput that matches tokens over time.
    pub fn validate(&self) -> Result<(), ReportError> {
        let mut problems = Problems::default();
        if self.schema_version != SCHEMA_VERSION {
            problems.push(
                "schema_version",
                format!("is {}, expected {SCHEMA_VERSION}", self.schema_version),
            );
        }
        self.check_run(&mut problems);
        self.check_prefill(&mut problems);
        self.check_decode(&mut problems);
        self.check_load(&mut problems);
        problems.into_result()
    }

    /// The decode cell at `context` × `concurrency`, if the document has it.
    pub fn decode_cell(&self, context: Tokens, concurrency: Concurrency) -> Option<&DecodeCell> {
        self.decode
            .iter()
            .find(|c| c.context == context && c.concurrency == concurrency)
    }

    /// The prefill row at `context`, if the document has it.
    pub fn prefill_row(&self, context: Tokens) -> Option<&PrefillRow> {
        self.prefill.iter().find(|r| r.context == context)
    }

    fn check_run(&self, problems: &mut Problems) {
        let run = &self.run;
        check_ascending(problems, "run.contexts", &run.contexts);
        check_ascending(problems, "run.concurrencies", &run.concurrencies);
        check_ascending(problems, "run.prefill_contexts", &run.prefill_contexts);
        if run.contexts.is_empty() && run.prefill_contexts.is_empty() {
            problems.push("run", "has neither decode contexts nor prefill contexts");
        }
        if !run.contexts.is_empty() && run.concurrencies.is_empty() && self.load.is_none() {
            problems.push(
                "run.concurrencies",
                "is empty but decode contexts are given",
            );
        }
        if !(run.window_s.is_finite() && run.window_s > 0.0) {
            problems.push("run.window_s", "must be a positive number of seconds");
        }
        if run.prefill_repeats == 0 && !run.prefill_contexts.is_empty() {
            problems.push("run.prefill_repeats", "must be at least 1");
        }
        for (at, stamp) in [
            ("run.started_at", &run.started_at),
            ("run.finished_at", &run.finished_at),
        ] {
            if !looks_like_rfc3339(stamp) {
                problems.push(at, format!("`{stamp}` is not an RFC 3339 timestamp"));
            }
        }
        // Same-offset RFC 3339 stamps order as text; mixed offsets are left alone.
        if run.started_at.ends_with('Z')
            && run.finished_at.ends_with('Z')
            && run.finished_at < run.started_at
        {
            problems.push("run.finished_at", "is before run.started_at");
        }
    }

    fn check_prefill(&self, problems: &mut Problems) {
        let listed: Vec<Tokens> = self.prefill.iter().map(|r| r.context).collect();
        if listed != self.run.prefill_contexts {
            problems.push(
                "prefill",
                "must have one row per run.prefill_contexts entry, in the same order",
            );
        }
        for (i, row) in self.prefill.iter().enumerate() {
            let at = format!("prefill[{i}]");
            check_status(problems, &at, &row.status);
            let has_numbers = row.prompt_tokens_per_s.is_some() || row.ttft_ms.is_some();
            if row.status.is_valid() {
                if row.prompt_tokens_per_s.is_none() || row.ttft_ms.is_none() {
                    problems.push(&at, "is valid but lacks prompt_tokens_per_s or ttft_ms");
                }
                if row.repeats == 0 {
                    problems.push(format!("{at}.repeats"), "is 0 for a valid row");
                }
            } else if has_numbers && !matches!(row.status, CellStatus::Error { .. }) {
                problems.push(&at, format!("is {} but has numbers", row.status.label()));
            }
            check_number(
                problems,
                &at,
                "prompt_tokens_per_s",
                row.prompt_tokens_per_s,
            );
            check_number(problems, &at, "ttft_ms", row.ttft_ms);
        }
    }

    fn check_decode(&self, problems: &mut Problems) {
        let mut seen = BTreeSet::new();
        for (i, cell) in self.decode.iter().enumerate() {
            let at = format!("decode[{i}]");
            if !self.run.contexts.contains(&cell.context) {
                problems.push(
                    &at,
                    format!("context {} is not in run.contexts", cell.context),
                );
            }
            if !self.run.concurrencies.contains(&cell.concurrency) {
                problems.push(
                    &at,
                    format!(
                        "concurrency {} is not in run.concurrencies",
                        cell.concurrency
                    ),
                );
            }
            if !seen.insert((cell.context, cell.concurrency)) {
                problems.push(
                    &at,
                    format!("repeats cell {} × {}", cell.context, cell.concurrency),
                );
            }
            check_status(problems, &at, &cell.status);
            check_cell_numbers(problems, &at, cell);
        }
        for &context in &self.run.contexts {
            for &concurrency in &self.run.concurrencies {
                if !seen.contains(&(context, concurrency)) {
                    problems.push(
                        "decode",
                        format!("has no cell for context {context} × {concurrency} requests"),
                    );
                }
            }
        }
    }
}

impl Report {
    fn check_load(&self, problems: &mut Problems) {
        let Some(load) = &self.load else {
            return;
        };
        if load.mode == LoadKind::Sustained {
            problems.push(
                "load.mode",
                "`sustained` is not a load mode: sustained cells are the document's decode cells",
            );
        }
        if !self.run.concurrencies.is_empty() {
            problems.push(
                "run.concurrencies",
                "must be empty in a load run: its columns are the load cells'",
            );
        }
        for (i, cell) in load.cells.iter().enumerate() {
            let at = format!("load.cells[{i}]");
            if !self.run.contexts.contains(&cell.context) {
                problems.push(
                    &at,
                    format!("context {} is not in run.contexts", cell.context),
                );
            }
            let point_ok = match load.mode {
                LoadKind::Burst | LoadKind::Conversation => {
                    cell.requests.is_some_and(|n| n > 0) && cell.rate_per_s.is_none()
                }
                _ => {
                    cell.requests.is_none()
                        && cell.rate_per_s.is_some_and(|r| r.is_finite() && r > 0.0)
                }
            };
            if !point_ok {
                problems.push(
                    &at,
                    "must name its burst size (burst) or its rate (rate), not both",
                );
            }
            check_status(problems, &at, &cell.status);
            match (&cell.status, &cell.measurements) {
                (CellStatus::Valid | CellStatus::Partial { .. }, None) => {
                    problems.push(&at, "is measured but has no measurements");
                }
                (CellStatus::OverCapacity { .. } | CellStatus::Skipped { .. }, Some(_)) => {
                    problems.push(
                        &at,
                        format!("is {} but has measurements", cell.status.label()),
                    );
                }
                (_, Some(m)) => check_load_numbers(problems, &format!("{at}.measurements"), m),
                _ => {}
            }
        }
    }
}

fn check_load_numbers(problems: &mut Problems, at: &str, m: &crate::model::LoadMeasurements) {
    if m.completed + m.failed + m.unfinished != m.sent {
        problems.push(at, "completed + failed + unfinished must equal sent");
    }
    for (name, value) in [
        ("duration_s", Some(m.duration_s)),
        ("output_tokens_per_s", Some(m.output_tokens_per_s)),
        ("intended_rate_per_s", m.intended_rate_per_s),
        ("achieved_rate_per_s", m.achieved_rate_per_s),
    ] {
        check_number(problems, at, name, value);
    }
    for (name, p) in [
        ("ttft_ms", m.ttft_ms),
        ("e2e_ms", m.e2e_ms),
        ("itl_ms", m.itl_ms),
        ("tpot_ms", m.tpot_ms),
        ("send_lag_ms", m.send_lag_ms),
    ] {
        if let Some(p) = p {
            check_percentiles(problems, &format!("{at}.{name}"), p);
        }
    }
    let expected = m.output_tokens_per_s * m.duration_s;
    let counted = m.output_tokens.get() as f64;
    if m.duration_s > 0.0 && (expected - counted).abs() > THROUGHPUT_TOLERANCE * counted.max(1.0) {
        problems.push(
            format!("{at}.output_tokens_per_s"),
            format!(
                "{} tok/s × {} s is not the {counted} output tokens",
                m.output_tokens_per_s, m.duration_s
            ),
        );
    }
    if let Some(s) = &m.slo
        && !(0.0..=100.0).contains(&s.attainment_pct)
    {
        problems.push(format!("{at}.slo.attainment_pct"), "must be 0–100");
    }
}

fn check_cell_numbers(problems: &mut Problems, at: &str, cell: &DecodeCell) {
    match (&cell.status, &cell.measurements) {
        (CellStatus::Valid, None) => problems.push(at, "is valid but has no measurements"),
        (CellStatus::Partial { .. }, None) => {
            problems.push(at, "is partial but has no measurements");
        }
        (CellStatus::OverCapacity { .. } | CellStatus::Skipped { .. }, Some(_)) => problems.push(
            at,
            format!("is {} but has measurements", cell.status.label()),
        ),
        (_, Some(m)) => check_measurements(problems, &format!("{at}.measurements"), cell, m),
        _ => {}
    }
}

fn check_measurements(
    problems: &mut Problems,
    at: &str,
    cell: &DecodeCell,
    m: &DecodeMeasurements,
) {
    for (name, value) in [
        ("total_tokens_per_s", m.total_tokens_per_s),
        ("per_request_tokens_per_s", m.per_request_tokens_per_s),
        ("average_active_requests", m.average_active_requests),
        ("measured_s", m.measured_s),
    ] {
        check_number(problems, at, name, Some(value));
    }
    check_percentiles(problems, &format!("{at}.ttft_ms"), m.ttft_ms);
    check_percentiles(
        problems,
        &format!("{at}.time_between_tokens_ms"),
        m.time_between_tokens_ms,
    );
    if m.measured_s <= 0.0 {
        problems.push(format!("{at}.measured_s"), "must be positive");
    }
    // A little slack: the time-weighted mean can exceed the target while a finished
    // stream's replacement overlaps it for a moment.
    if m.average_active_requests > f64::from(cell.concurrency.get()) * 1.05 {
        problems.push(
            format!("{at}.average_active_requests"),
            format!(
                "{} exceeds the cell's {} requests",
                m.average_active_requests, cell.concurrency
            ),
        );
    }
    let expected = m.total_tokens_per_s * m.measured_s;
    let counted = m.output_tokens.get() as f64;
    if m.measured_s > 0.0 && (expected - counted).abs() > THROUGHPUT_TOLERANCE * counted.max(1.0) {
        problems.push(
            format!("{at}.total_tokens_per_s"),
            format!(
                "{:.1} tok/s × {:.1} s = {expected:.0} tokens, but output_tokens is {counted}",
                m.total_tokens_per_s, m.measured_s
            ),
        );
    }
}

fn check_percentiles(problems: &mut Problems, at: &str, p: Percentiles) {
    for (name, value) in [("p50", p.p50), ("p90", p.p90), ("p99", p.p99)] {
        check_number(problems, at, name, Some(value));
    }
    if !(p.p50 <= p.p90 && p.p90 <= p.p99) {
        problems.push(at, "percentiles must satisfy p50 ≤ p90 ≤ p99");
    }
}

fn check_status(problems: &mut Problems, at: &str, status: &CellStatus) {
    match status {
        CellStatus::Error {
            failed_requests: 0, ..
        } => problems.push(format!("{at}.status"), "is an error with 0 failed requests"),
        CellStatus::Partial {
            failed_requests,
            good_requests,
            error_kinds,
            ..
        } => {
            if *failed_requests == 0 || *good_requests == 0 {
                problems.push(
                    format!("{at}.status"),
                    "is partial but has no failed or no good requests",
                );
            }
            if error_kinds.values().sum::<u64>() != *failed_requests {
                problems.push(
                    format!("{at}.status.error_kinds"),
                    "do not add up to failed_requests",
                );
            }
        }
        _ => {}
    }
}

fn check_number(problems: &mut Problems, at: &str, name: &str, value: Option<f64>) {
    if let Some(v) = value
        && !(v.is_finite() && v >= 0.0)
    {
        problems.push(
            format!("{at}.{name}"),
            format!("{v} is not a finite, non-negative number"),
        );
    }
}

fn check_ascending<T: Ord + std::fmt::Display>(problems: &mut Problems, at: &str, items: &[T]) {
    if let Some(pair) = items.windows(2).find(|w| w[0] >= w[1]) {
        problems.push(
            at,
            format!(
                "must be strictly ascending, but {} comes before {}",
                pair[0], pair[1]
            ),
        );
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`: enough to catch a wrong field, not a calendar.
fn looks_like_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    let shape = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b't' | b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shape {
        return false;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    match rest.as_bytes() {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()),
        _ => false,
    }
}

#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn push(&mut self, at: impl Into<String>, what: impl Into<String>) {
        self.0.push(Problem {
            at: at.into(),
            what: what.into(),
        });
    }

    fn into_result(self) -> Result<(), ReportError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ReportError::Invalid { problems: self.0 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::looks_like_rfc3339;

    #[test]
    fn rfc3339_shapes() {
        for good in [
            "2026-11-30T07:30:00Z",
            "2026-11-30T07:30:00.123456Z",
            "2026-11-30T07:30:00+02:00",
            "2026-11-30 07:30:00-05:30",
        ] {
            assert!(looks_like_rfc3339(good), "{good}");
        }
        for bad in [
            "",
            "2026-11-30",
            "2026-11-30T07:30:00",
            "2026-11-30T07:30:00.Z",
            "2026-11-30T07:30:00+0200",
            "yesterday at noon, roughly",
            "2026-11-30T07:30:00Zjunk",
        ] {
            assert!(!looks_like_rfc3339(bad), "{bad}");
        }
    }
}
