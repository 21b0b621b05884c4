//! Every sentence `speedmatrix run` says: the runner hands over typed errors,
//! notices, plans and outcomes, and this file puts them into words, naming
//! the flags that fix or change them.

use std::fmt::Write as _;
use std::time::Duration;

use speedmatrix_runner::{
    CapacityPlan, CapacitySourceKind, CellOutcome, ConfigProblem, Exclusion, LoadMode, LoadOutcome,
    MatrixSpec, Notice, Plan, PrefillMode, PrefillOutcome, RateLength, RunnerError, StepStatus,
    measured_source,
};
use speedmatrix_units::{Tokens, group_thousands};

use crate::cmd::UsageError;

/// The runner's error for the user, with the flags that fix it; a server
/// that echoes the API key in an error body does not get it printed.
pub(crate) fn error(e: RunnerError, key: Option<&speedmatrix_client::ApiKey>) -> anyhow::Error {
    // The key registered itself with the one cleaning path when it was made.
    let redact = |text: String| {
        if let Some(k) = key {
            speedmatrix_client::redact::register(k.expose());
        }
        speedmatrix_client::redact::clean(&text).into_owned()
    };
    let usage = |text: String| UsageError(redact(text)).into();
    match e {
        RunnerError::InvalidConfig(p) => usage(config_problem(&p)),
        RunnerError::BadOption(message) => usage(message),
        RunnerError::Busy { .. } => {
            usage(format!("{e}; wait for it to finish, or use another folder"))
        }
        RunnerError::ModelNotFound { .. } => usage(format!("{e}; pass one of them with --model")),
        RunnerError::NoModel { .. } => usage(format!("{e}; name the served model with --model")),
        RunnerError::ResumeMismatch { .. } => usage(format!(
            "{e}; resume without the flags that differ (the journal's are used), or start a new output directory with --out"
        )),
        RunnerError::JournalVersion { .. } => usage(format!(
            "{e}; finish it with the speedmatrix release that started it, or start a new run with another --out"
        )),
        RunnerError::NotAJournal { .. } => usage(format!(
            "{e}; start a new run with another --out instead of --resume"
        )),
        RunnerError::Server { url, source } => usage(server_error_line(&url, &source)),
        other => anyhow::Error::new(other),
    }
}

/// A configuration problem with the flags that fix it.
pub(crate) fn config_problem(p: &ConfigProblem) -> String {
    match p {
        ConfigProblem::NothingToMeasure => {
            "nothing to measure: give at least one decode context (--contexts) or prefill context (--prefill-contexts)".into()
        }
        ConfigProblem::NoConcurrency => {
            "decode contexts were given but no concurrency levels (--concurrency)".into()
        }
        ConfigProblem::NoLoad => {
            "--mode burst needs burst sizes (--requests 1,8,64) and --mode rate needs rates (--request-rate 1,2,4)".into()
        }
        ConfigProblem::ZeroRateLength => {
            "a rate cell must send for a positive --duration or at least one --requests, and --drain must be positive".into()
        }
        ConfigProblem::ZeroWindow => {
            "the measurement window must be longer than zero (e.g. --duration 30s)".into()
        }
        ConfigProblem::ZeroMaxTokens => "--max-tokens must be at least 1".into(),
        ConfigProblem::ZeroPrefillRepeats => "--prefill-repeats must be at least 1".into(),
        ConfigProblem::ZeroPrefillContext => {
            "a prefill context must be at least 1 token (--prefill-contexts)".into()
        }
        ConfigProblem::NothingCanRun { .. } => format!(
            "{p}; lower --contexts, --prefill-contexts or --max-tokens"
        ),
        ConfigProblem::InjectTooLong { .. } => format!("{p}; lower --inject"),
        ConfigProblem::ChatOverheadUnknown { error: Some(_) } => p.to_string(),
        ConfigProblem::ChatOverheadUnknown { error: None } => format!("{p}; use --api completions"),
        ConfigProblem::TooManyRequests { .. } => format!(
            "{p}; lower --request-rate, --duration, --requests, --concurrency or --turns, or split the run"
        ),
        ConfigProblem::TooLong { what, .. } => format!(
            "{p}; lower {}",
            match *what {
                "drain" => "--drain",
                "settle time" => "--inject-settle",
                _ => "--duration",
            }
        ),
        ConfigProblem::NoArrival { .. } => format!(
            "{p}; raise --request-rate or --duration, or send a fixed number with --requests N"
        ),
        _ => p.to_string(),
    }
}

/// One line saying what went wrong reaching the server and what to do.
fn server_error_line(url: &str, e: &speedmatrix_client::ClientError) -> String {
    use speedmatrix_client::ErrorKind;
    match e.kind() {
        ErrorKind::Config => format!("--url {url}: {e}"),
        ErrorKind::Connect | ErrorKind::TimeoutConnect => format!(
            "cannot reach the server at {url}: {e}; start it (or `speedmatrix sim`), fix --url, or omit --url to use the built-in simulator"
        ),
        _ => format!(
            "the server at {url} did not answer the probe (GET /v1/models, /version, /metrics) properly: {e}; check that --url points at an OpenAI-compatible server"
        ),
    }
}

/// A notice as the report written by the command and its terminal say it:
/// the runner's words, with the flag that changes the behaviour named.
pub(crate) fn notice(n: &Notice) -> String {
    match n {
        Notice::IgnoreEosIgnored { step } => format!(
            "{step}: some requests stopped early (finish_reason \"stop\") although ignore_eos was set; the server seems to ignore it (try --min-tokens)"
        ),
        Notice::ExtraBody { fields } => format!(
            "Every request carried these extra body fields (--extra-body): {}",
            serde_json::Value::Object(fields.clone())
        ),
        Notice::Insecure => "TLS certificate verification was disabled (--insecure).".into(),
        Notice::ClientBound { step, load } => format!(
            "{step}: the client was busy {:.0} % of the time of its {} runtime thread(s) during the window ({:.2} cores), so it may have limited the numbers: rerun with --client-threads {} (and --client-cores away from the engine's)",
            100.0 * load.busy_share(),
            load.threads,
            load.cores(),
            load.threads.saturating_mul(2)
        ),
        other => other.describe(),
    }
}

/// Where the capacity that decides the cells came from, in a sentence.
pub(crate) fn capacity(c: &CapacityPlan) -> String {
    let tokens = |t: Option<Tokens>| t.map_or("unknown".into(), |t| group_thousands(t.get()));
    match c.source {
        CapacitySourceKind::Measured => format!(
            "KV capacity {} tokens, read from the server's {}{}",
            tokens(c.pool_tokens),
            measured_source(c.pool.as_ref()),
            c.predicted_tokens
                .map(|p| format!("; the offline prediction was {} tokens", tokens(Some(p))))
                .unwrap_or_default()
        ),
        CapacitySourceKind::Predicted => format!(
            "KV capacity {} tokens, predicted offline from the model config, GPU and flags (the server does not report it)",
            tokens(c.pool_tokens)
        ),
        CapacitySourceKind::Given => format!(
            "KV capacity {} tokens, as given with --kv-capacity-tokens",
            tokens(c.pool_tokens)
        ),
        CapacitySourceKind::Unknown => "KV capacity unknown (the server does not report it; pass --kv-capacity-tokens or --model-config to plan): every cell runs, and cells where the server queues requests are marked".into(),
    }
}

/// The plan as text: capacity source, every step with its verdict, and the
/// estimated duration (`--dry-run`).
pub(crate) fn plan(plan: &Plan, matrix: &MatrixSpec) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", capacity(&plan.capacity));
    match matrix.prefill_mode {
        PrefillMode::Cold => {
            let _ = writeln!(
                out,
                "\nPrefill (cold, max_tokens 1, {} repeat(s)):",
                matrix.prefill_repeats
            );
        }
        PrefillMode::Warmup => {
            let _ = writeln!(
                out,
                "\nPrefill (the first, cold warm-up request of each context's first decode cell; \
                 cold requests for contexts without a decode row):"
            );
        }
    }
    for (c, ex) in &plan.prefill {
        let verdict = ex.as_ref().map_or("run".to_owned(), verdict);
        let _ = writeln!(out, "  {:>6}  {verdict}", c.to_string());
    }
    if !plan.load.is_empty() {
        return load_plan(out, plan, matrix);
    }
    let _ = writeln!(
        out,
        "\nSustained decode ({} s window, max_tokens {}):",
        matrix.window.as_secs_f64(),
        matrix.max_output
    );
    for cell in &plan.cells {
        let verdict = cell.excluded.as_ref().map_or("run".to_owned(), verdict);
        let _ = writeln!(
            out,
            "  {:>6} × {:<4} {verdict}",
            cell.context.to_string(),
            cell.concurrency.to_string()
        );
    }
    let runs = plan.cells.iter().filter(|c| c.excluded.is_none()).count();
    let _ = write!(
        out,
        "\n{runs} decode cells to run; estimated duration {}",
        humantime::format_duration(Duration::from_secs(plan.estimated.as_secs()))
    );
    out
}

/// The burst or rate cells of a plan.
fn load_plan(mut out: String, plan: &Plan, matrix: &MatrixSpec) -> String {
    let heading = match &matrix.load {
        LoadMode::Burst(b) => format!(
            "Bursts (every request at once{}, max_tokens {}, {} cache):",
            b.max_concurrency
                .map(|c| format!(", at most {c} in flight"))
                .unwrap_or_default(),
            matrix.max_output,
            if b.warm_cache { "warm" } else { "cold" }
        ),
        LoadMode::Rate(r) => format!(
            "Open-loop rates ({} arrivals, seed {}, {}, max_tokens {}{}):",
            r.arrival,
            r.seed,
            match r.length {
                RateLength::Duration(d) => format!("sending for {} s", d.as_secs_f64()),
                RateLength::Requests(n) => format!("{n} requests a cell"),
            },
            matrix.max_output,
            r.max_in_flight
                .map(|c| format!(", at most {c} in flight"))
                .unwrap_or_default()
        ),
        LoadMode::Conversation(c) => format!(
            "Multi-turn conversations ({} turns, new questions of {} tokens, max_tokens {}):",
            c.turns, c.question, matrix.max_output
        ),
        LoadMode::Sustained => String::new(),
    };
    let _ = writeln!(out, "\n{heading}");
    if let Some(s) = &matrix.search {
        let goal = match s.goal {
            speedmatrix_runner::SearchGoal::MostLoadMeetingSlo => {
                "the highest load that meets the objective".to_owned()
            }
            speedmatrix_runner::SearchGoal::PerRequestAtFloor { floor } => {
                format!("the load with the fastest requests whose output reaches {floor}")
            }
        };
        let _ = writeln!(
            out,
            "  searching each context for {goal}, from the load below, at most {} cells, to \
             within {:.0} %:",
            s.max_steps,
            s.relative_tolerance * 100.0
        );
    }
    for cell in &plan.load {
        let verdict = cell.excluded.as_ref().map_or("run".to_owned(), verdict);
        let _ = writeln!(
            out,
            "  {:>6} × {:<14} {verdict}",
            cell.context.to_string(),
            cell.point.to_string()
        );
    }
    let runs = plan.load.iter().filter(|c| c.excluded.is_none()).count();
    let _ = write!(
        out,
        "\n{runs} {} cells to run; estimated duration {}",
        matrix.load.kind(),
        humantime::format_duration(Duration::from_secs(plan.estimated.as_secs()))
    );
    out
}

/// A finished burst or rate cell's one-line summary.
pub(crate) fn load_summary(c: &LoadOutcome) -> String {
    let Some(r) = &c.result else {
        return status_summary(&c.status);
    };
    let ms = |l: Option<speedmatrix_runner::Latency>,
              pick: fn(&speedmatrix_runner::Latency) -> std::time::Duration| {
        l.map_or_else(
            || "—".to_owned(),
            |l| format!("{:.0} ms", pick(&l).as_secs_f64() * 1e3),
        )
    };
    let mut line = format!(
        "{}/{} finished in {:.1} s, {:.1} tok/s, TTFT p50 {} p99 {}, e2e p50 {}",
        r.completed,
        r.sent,
        r.span.as_secs_f64(),
        r.output_tokens_per_s,
        ms(r.ttft, |l| l.p50),
        ms(r.ttft, |l| l.p99),
        ms(r.e2e, |l| l.p50)
    );
    if let (Some(meant), Some(sent)) = (r.intended_rate_per_s, r.achieved_rate_per_s) {
        let _ = write!(line, ", {sent:.2} of {meant:.2} req/s sent");
    }
    if r.unfinished > 0 {
        let _ = write!(line, ", {} unfinished", r.unfinished);
    }
    if let Some(v) = &r.slo {
        let _ = write!(
            line,
            ", SLO {} ({}/{} requests, {:.2} good/s)",
            if v.met { "met" } else { "missed" },
            v.good_requests,
            v.requests,
            v.goodput_per_s
        );
    }
    if let StepStatus::Partial { failed, good, .. } = &c.status {
        let _ = write!(line, " [Partial: {failed} failed, {good} good requests]");
    }
    line
}

/// Why a step does not run, as the plan and progress say it.
pub(crate) fn verdict(ex: &Exclusion) -> String {
    match ex {
        Exclusion::OverCapacity { .. } => format!("Over capacity: {ex}"),
        Exclusion::TooLong { .. } => format!("Skipped: {ex}"),
    }
}

/// The run's time left, to the second: "about 3m 10s left".
pub(crate) fn time_left(left: Duration) -> String {
    let secs = left.as_secs() + u64::from(left.subsec_millis() >= 500);
    format!(
        "about {} left",
        humantime::format_duration(Duration::from_secs(secs))
    )
}

/// How far the run is, after a step: "3/11 steps, about 1m 2s left".
pub(crate) fn steps_done(done: usize, steps: usize, left: Option<Duration>) -> String {
    match left {
        Some(left) => format!("{done}/{steps} steps, {}", time_left(left)),
        None => format!("{done}/{steps} steps"),
    }
}

/// A finished step's one-line summary.
pub(crate) fn prefill_summary(p: &PrefillOutcome) -> String {
    let how = if p.from_warmup {
        " (decode warm-up)"
    } else {
        ""
    };
    match (p.prompt_tokens_per_s, p.ttft) {
        (Some(rate), Some(ttft)) => format!(
            "{rate:.0} prompt tok/s, TTFT {:.0} ms{how}",
            ttft.as_secs_f64() * 1e3
        ),
        _ => status_summary(&p.status),
    }
}

/// A finished cell's one-line summary, its status when not plainly valid.
pub(crate) fn cell_summary(c: &CellOutcome) -> String {
    let Some(w) = &c.window else {
        return status_summary(&c.status);
    };
    let mut line = format!(
        "{:.1} tok/s total, {:.1} per request, TTFT {:.0} ms, {:.1} ms between tokens",
        w.total_tokens_per_s,
        w.per_request_tokens_per_s,
        w.ttft.p50.as_secs_f64() * 1e3,
        w.time_between_tokens.p50.as_secs_f64() * 1e3
    );
    if let StepStatus::Partial { failed, good, .. } = &c.status {
        let _ = write!(line, " [Partial: {failed} failed, {good} good requests]");
    }
    if w.token_count.is_estimated() {
        let u = w.token_count.relative_uncertainty.map_or_else(
            || "uncalibrated".to_owned(),
            |u| format!("±{:.1} %", u * 100.0),
        );
        let _ = write!(line, " [estimated tokens, {u}]");
    }
    line
}

fn status_summary(s: &StepStatus) -> String {
    match s {
        StepStatus::Measured => "Valid".into(),
        StepStatus::Partial { failed, good, .. } => {
            format!("Partial: {failed} failed, {good} good requests")
        }
        StepStatus::Failed {
            failure,
            failed,
            good,
        } => format!(
            "Error: {}: {} ({failed} failed, {good} good requests)",
            failure.kind, failure.message
        ),
        StepStatus::Excluded(ex) => verdict(ex),
        StepStatus::Skipped(why) => format!("Skipped: {why}"),
    }
}
