//! The matrix and its load mode from the options: a preset with each given part overriding
//! it, and the flags of the chosen mode, refusing those of another.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use speedmatrix_metrics::TokensPerSecond;
use speedmatrix_units::{Api, LoadKind, PromptSharing};
use speedmatrix_workload::ArrivalProcess;

use super::{RunOptions, bad};
use crate::{
    BurstSpec, ConversationSpec, InjectSpec, LoadMode, MatrixSpec, Preset, RateLength, RateSpec,
    RunnerError, SearchGoal, SearchSpec,
};

/// How open-loop arrivals are spaced (`--arrival`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum ArrivalKind {
    /// Exponential gaps: arrivals at random.
    #[default]
    Poisson,
    /// Equal gaps.
    Constant,
    /// Gamma gaps of shape --burstiness (below 1 burstier than Poisson).
    Gamma,
}

pub(super) fn matrix(o: &RunOptions) -> Result<MatrixSpec, RunnerError> {
    let preset = o.preset.unwrap_or(if o.embedded() {
        Preset::Quick
    } else {
        Preset::Seed
    });
    let mut m = preset.matrix();
    crate::workload::check_flags(o)?;
    if let Some(c) = &o.contexts {
        m.contexts = c.clone();
    }
    if let Some(c) = &o.concurrency {
        m.concurrencies = c.clone();
    }
    if let Some(p) = &o.prefill_contexts {
        m.prefill_contexts = p.iter().filter_map(|p| p.0).collect();
    }
    if let Some(r) = o.prefill_repeats {
        m.prefill_repeats = r;
    }
    if let Some(r) = o.repeats {
        if r > 1 && o.mode == LoadKind::Conversation {
            return Err(bad(
                "--repeats measures sustained, burst and rate cells; conversation cells are measured once (drop --repeats)",
            ));
        }
        m.repeats = r;
    }
    m.prefill_mode = o.prefill_mode;
    if let Some(d) = o.window {
        m.window = d;
    }
    if let Some(t) = o.max_output {
        m.max_output = t;
    }
    m.load = load_mode(o, m.window)?;
    m.slo = o.slo.clone();
    if let Some(prefix) = o.shared_prefix {
        if matches!(o.mode, LoadKind::Sustained | LoadKind::Conversation) {
            return Err(bad(
                "--shared-prefix shapes burst and rate prompts: add --mode burst or --mode rate (sustained cells use --prompt-sharing)",
            ));
        }
        if o.prompt_sharing == PromptSharing::Shared {
            return Err(bad(
                "--shared-prefix and --prompt-sharing shared contradict each other: pick one",
            ));
        }
        m.shared_prefix = Some(prefix);
    }
    if o.respect_eos {
        if o.mode == LoadKind::Sustained {
            return Err(bad(
                "--respect-eos lets burst, rate and conversation answers end early: add --mode burst, rate or conversation (sustained cells run to --max-tokens, the matrix method)",
            ));
        }
        if o.min_tokens {
            return Err(bad(
                "--respect-eos and --min-tokens contradict each other: min_tokens keeps answers to --max-tokens",
            ));
        }
        m.respect_eos = true;
    }
    if let Some(tokens) = o.inject {
        if o.mode != LoadKind::Sustained {
            return Err(bad(
                "--inject probes sustained-decode cells: drop --mode or use --mode sustained",
            ));
        }
        if tokens.get() == 0 || o.inject_settle.is_zero() {
            return Err(bad(
                "--inject needs a positive prompt length and --inject-settle a positive time",
            ));
        }
        m.inject = Some(InjectSpec {
            tokens,
            settle: o.inject_settle,
        });
    }
    if o.search {
        m.search = Some(search_spec(o)?);
    } else if o.search_floor.is_some() {
        return Err(bad("--search-floor is a goal of --search"));
    }
    Ok(m)
}

/// The search's goal and bounds from `--search` and its flags.
fn search_spec(o: &RunOptions) -> Result<SearchSpec, RunnerError> {
    if o.mode == LoadKind::Sustained {
        return Err(bad(
            "--search needs a load mode: --mode burst, rate or conversation",
        ));
    }
    let goal = match o.search_floor {
        None if o.slo.is_none() => {
            return Err(bad(
                "--search needs an objective (--slo) or a floor of output tok/s (--search-floor)",
            ));
        }
        None => SearchGoal::MostLoadMeetingSlo,
        Some(f) => match TokensPerSecond::new(f).filter(|f| f.get() > 0.0) {
            Some(floor) => SearchGoal::PerRequestAtFloor { floor },
            None => {
                return Err(bad(format!(
                    "--search-floor {f}: give a positive number of output tokens per second"
                )));
            }
        },
    };
    if o.search_steps == 0 {
        return Err(bad("--search-steps must be at least 1"));
    }
    Ok(SearchSpec {
        max_steps: o.search_steps,
        relative_tolerance: o.search_tolerance.0,
        goal,
    })
}

/// The load mode from `--mode` and its flags, refusing flags of another mode.
fn load_mode(o: &RunOptions, window: Duration) -> Result<LoadMode, RunnerError> {
    let sustained_axes = matches!(o.mode, LoadKind::Sustained | LoadKind::Conversation);
    let cap = match o.concurrency.as_deref() {
        Some([one]) if !sustained_axes => Some(*one),
        Some(_) if !sustained_axes => {
            return Err(bad(
                "in burst and rate modes --concurrency is one number: the cap on requests in flight",
            ));
        }
        _ => None,
    };
    if o.mode != LoadKind::Rate
        && (o.request_rate.is_some() || o.burstiness.is_some() || o.arrival_seed.is_some())
    {
        return Err(bad(
            "--request-rate, --burstiness and --arrival-seed belong to --mode rate",
        ));
    }
    if sustained_axes && (o.requests.is_some() || o.warm_cache) {
        return Err(bad(
            "--requests and --warm-cache belong to --mode burst or rate",
        ));
    }
    if o.mode == LoadKind::Sustained && o.slo.is_some() {
        return Err(bad(
            "--slo judges burst and rate cells: add --mode burst or --mode rate",
        ));
    }
    match o.mode {
        LoadKind::Sustained => Ok(LoadMode::Sustained),
        LoadKind::Conversation => {
            if o.turns == 0 {
                return Err(bad("--turns must be at least 1"));
            }
            if o.api == Api::Chat {
                return Err(bad(
                    "--mode conversation sends each turn as one completions prompt: use --api completions",
                ));
            }
            Ok(LoadMode::Conversation(ConversationSpec {
                turns: o.turns,
                question: o.question_tokens,
            }))
        }
        LoadKind::Burst => {
            let Some(requests) = &o.requests else {
                return Err(bad("--mode burst needs --requests, e.g. --requests 1,8,64"));
            };
            Ok(LoadMode::Burst(BurstSpec {
                requests: requests.iter().map(|n| n.get()).collect(),
                max_concurrency: cap,
                warm_cache: o.warm_cache,
            }))
        }
        LoadKind::Rate => rate_mode(o, window, cap),
    }
}

fn rate_mode(
    o: &RunOptions,
    window: Duration,
    cap: Option<speedmatrix_units::Concurrency>,
) -> Result<LoadMode, RunnerError> {
    if o.trace.is_some() {
        return trace_mode(o, cap);
    }
    let Some(rates) = &o.request_rate else {
        return Err(bad(
            "--mode rate needs --request-rate (e.g. --request-rate 1,2,4) or a --trace to replay",
        ));
    };
    let length = match o.requests.as_deref() {
        None => RateLength::Duration(window),
        Some([n]) => RateLength::Requests(u64::from(n.get())),
        Some(_) => {
            return Err(bad(
                "with --mode rate, --requests is one number: the requests each rate cell sends",
            ));
        }
    };
    let arrival = match (o.arrival, o.burstiness) {
        (ArrivalKind::Gamma, Some(b)) => ArrivalProcess::Gamma { burstiness: b },
        (ArrivalKind::Gamma, None) => {
            return Err(bad(
                "--arrival gamma needs --burstiness, e.g. --burstiness 0.5",
            ));
        }
        (_, Some(_)) => return Err(bad("--burstiness shapes --arrival gamma only")),
        (ArrivalKind::Poisson, None) => ArrivalProcess::Poisson,
        (ArrivalKind::Constant, None) => ArrivalProcess::Constant,
    };
    if let ArrivalProcess::Gamma { burstiness } = arrival
        && !(burstiness.is_finite() && burstiness > 0.0)
    {
        return Err(bad("--burstiness must be a positive number (1 is Poisson)"));
    }
    if o.drain.is_zero() {
        return Err(bad("--drain must be longer than zero"));
    }
    Ok(LoadMode::Rate(RateSpec {
        rates: rates.clone(),
        arrival,
        seed: o.arrival_seed.unwrap_or(o.seed),
        length,
        max_in_flight: cap,
        drain: o.drain,
        warm_cache: o.warm_cache,
    }))
}

/// Rate mode replaying `--trace`: one cell at the trace's own times. Its rate and, without
/// `--requests` or `--duration`, its length (every request) are the trace's, set once it is
/// read ([`crate::Workload::fit_rate_spec`]); here they hold their places.
fn trace_mode(
    o: &RunOptions,
    cap: Option<speedmatrix_units::Concurrency>,
) -> Result<LoadMode, RunnerError> {
    if o.request_rate.is_some() || o.burstiness.is_some() || o.arrival_seed.is_some() {
        return Err(bad(
            "--trace sends each request at its own time: drop --request-rate, --burstiness and --arrival-seed (--trace-speed compresses the trace's time)",
        ));
    }
    if o.drain.is_zero() {
        return Err(bad("--drain must be longer than zero"));
    }
    let length = match (o.requests.as_deref(), o.window) {
        (Some([n]), _) => RateLength::Requests(u64::from(n.get())),
        (Some(_), _) => {
            return Err(bad(
                "with --trace, --requests is one number: the trace's first N requests",
            ));
        }
        (None, Some(d)) => RateLength::Duration(d),
        (None, None) => RateLength::Requests(u64::MAX),
    };
    Ok(LoadMode::Rate(RateSpec {
        rates: vec![
            speedmatrix_units::RequestRate::from_milli(1_000)
                .ok_or_else(|| bad("1 request/s is a rate"))?,
        ],
        arrival: ArrivalProcess::Constant,
        seed: o.seed,
        length,
        max_in_flight: cap,
        drain: o.drain,
        warm_cache: o.warm_cache,
    }))
}
