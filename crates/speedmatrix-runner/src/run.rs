//! One run from start to end: check the configuration, connect and probe, plan, open or
//! resume the journal, measure every step, and build the result ([`run`]); or only plan
//! ([`dry_run`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use speedmatrix_capacity::{MeasuredCapacity, ServerLimits};
use speedmatrix_engines::{EngineHabits as _, ReportedCapacity};
use speedmatrix_report::Report;
use speedmatrix_units::Tokens;
use speedmatrix_workload::{ChatOverhead, PromptBuilder};
use tokio_util::sync::CancellationToken;

use crate::report::{build_report, now_rfc3339};
use crate::request::{self, RequestShape};
use crate::resume::{ResumeKey, open_journal};
use crate::server::Server;
use crate::steps::Session;
use crate::{
    Api, CellOutcome, ConfigProblem, CorruptTail, KneePath, LoadMode, LoadOutcome, Notice,
    Observer, Plan, PrefillOutcome, RateLength, RunConfig, RunnerError, StepId, StopReason,
    capacity_plan, plan, telemetry,
};

/// Where the journal lives and whether to continue it.
#[derive(Debug, Clone, Default)]
pub struct JournalOptions {
    /// The journal file; no journal when `None`.
    pub path: Option<PathBuf>,
    /// Continue the journal at `path` instead of creating it.
    pub resume: bool,
}

/// The result of a run: the typed outcomes, and the document made from them.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The result document (partial when `complete` is false); its notes are
    /// the notices in neutral words.
    pub report: Report,
    /// Every prefill point, in the plan's order.
    pub prefill: Vec<PrefillOutcome>,
    /// Every decode cell, in the plan's order.
    pub decode: Vec<CellOutcome>,
    /// Every burst or rate cell, in the order run (a search's in its order of tries).
    pub load: Vec<LoadOutcome>,
    /// Each context's knee search, when the run searched.
    pub knees: Vec<KneePath>,
    /// Every notice: the cells' in order, then the run's.
    pub notices: Vec<Notice>,
    /// True when every planned step ran (whatever its status).
    pub complete: bool,
    /// Why the run stopped early.
    pub stopped: Option<StopReason>,
    /// The journal's damaged tail found on resume, if any.
    pub journal_damage: Option<CorruptTail>,
    /// The plan the run followed.
    pub plan: Plan,
    /// Every GPU and host sample of the run, when telemetry was on.
    pub telemetry: Option<speedmatrix_telemetry::Recorded>,
    /// Where the simulator profile the run measured was fitted or predicted from: the run
    /// is then a what-if (see [`crate::output::RunDir::write`]).
    #[cfg(feature = "embedded")]
    pub simulated_from: Option<speedmatrix_sim::ProfileOrigin>,
}

impl RunOutcome {
    /// The status of every step in the report: prefill rows, decode cells, load cells.
    pub fn statuses(&self) -> impl Iterator<Item = &speedmatrix_report::CellStatus> {
        let r = &self.report;
        r.prefill
            .iter()
            .map(|p| &p.status)
            .chain(r.decode.iter().map(|c| &c.status))
            .chain(
                r.load
                    .iter()
                    .flat_map(|l| l.cells.iter().map(|c| &c.status)),
            )
    }

    /// Whether the run did its job: every planned step ran, and unless nothing failed,
    /// something was measured (a run of which every step failed did not).
    pub fn succeeded(&self) -> bool {
        let measured = self.statuses().any(|s| s.is_valid());
        let failed = self
            .statuses()
            .any(|s| matches!(s, speedmatrix_report::CellStatus::Error { .. }));
        self.stopped.is_none() && (measured || !failed)
    }
}

/// Checks a configuration without contacting any server.
pub fn validate(config: &RunConfig) -> Result<(), RunnerError> {
    let m = &config.matrix;
    let no_load = match &m.load {
        LoadMode::Sustained => false,
        LoadMode::Burst(b) => b.requests.iter().all(|&n| n == 0),
        LoadMode::Rate(r) => r.rates.is_empty(),
        LoadMode::Conversation(c) => m.concurrencies.is_empty() || c.turns == 0,
    };
    let zero_length = match &m.load {
        LoadMode::Rate(r) => {
            r.drain.is_zero()
                || matches!(r.length, RateLength::Duration(d) if d.is_zero())
                || matches!(r.length, RateLength::Requests(0))
        }
        _ => false,
    };
    let problem = if m.contexts.is_empty() && m.prefill_contexts.is_empty() {
        Some(ConfigProblem::NothingToMeasure)
    } else if !m.contexts.is_empty() && no_load {
        Some(ConfigProblem::NoLoad)
    } else if zero_length {
        Some(ConfigProblem::ZeroRateLength)
    } else if !m.contexts.is_empty()
        && m.concurrencies.is_empty()
        && matches!(m.load, LoadMode::Sustained)
    {
        Some(ConfigProblem::NoConcurrency)
    } else if m.window.is_zero() {
        Some(ConfigProblem::ZeroWindow)
    } else if m.max_output.get() == 0 {
        Some(ConfigProblem::ZeroMaxTokens)
    } else if m.prefill_repeats == 0 {
        Some(ConfigProblem::ZeroPrefillRepeats)
    } else if m.prefill_contexts.iter().any(|c| c.get() == 0) {
        Some(ConfigProblem::ZeroPrefillContext)
    } else {
        too_long(m)
            .or_else(|| too_many_requests(m))
            .or_else(|| no_arrival(m))
    };
    problem.map_or(Ok(()), |p| Err(RunnerError::InvalidConfig(p)))
}

/// A window, sending time or drain longer than a run allows: the clocks that
/// time them would overflow, and no run needs them.
fn too_long(m: &crate::MatrixSpec) -> Option<ConfigProblem> {
    use crate::limits::{MAX_WINDOW, drain};
    let mut lengths = vec![("window", m.window, MAX_WINDOW)];
    if let LoadMode::Rate(r) = &m.load {
        lengths.push(("drain", r.drain, drain::LIMIT.max));
    }
    if let Some(inject) = &m.inject {
        lengths.push((
            "settle time",
            inject.settle,
            crate::limits::inject_settle::LIMIT.max,
        ));
    }
    lengths
        .into_iter()
        .find(|(_, length, max)| length > max)
        .map(|(what, length, max)| ConfigProblem::TooLong { what, length, max })
}

/// The most requests one cell plans, in words, when it is more than a cell may hold.
fn too_many_requests(m: &crate::MatrixSpec) -> Option<ConfigProblem> {
    use crate::limits::MAX_REQUESTS_PER_CELL as CAP;
    let most_streams = m.concurrencies.iter().map(|c| u64::from(c.get())).max();
    let (cell, requests) = match &m.load {
        LoadMode::Sustained => {
            let n = most_streams?;
            (format!("a sustained cell of {n} streams"), n)
        }
        LoadMode::Burst(b) => {
            let n = b.requests.iter().copied().max().map(u64::from)?;
            (format!("a burst of {n}"), n)
        }
        LoadMode::Conversation(c) => {
            let n = most_streams?;
            let turns = u64::from(c.turns);
            (
                format!("{n} conversations of {turns} turns"),
                n.saturating_mul(turns),
            )
        }
        LoadMode::Rate(r) => match r.length {
            RateLength::Requests(n) => (format!("a rate cell of {n} requests"), n),
            RateLength::Duration(d) => {
                let rate = r.rates.iter().copied().max()?;
                let expected = rate.get() * d.as_secs_f64();
                (
                    format!(
                        "the rate cell {rate} sending for {}",
                        humantime::format_duration(d)
                    ),
                    expected.ceil().min(u64::MAX as f64) as u64,
                )
            }
        },
    };
    (requests > CAP).then_some(ConfigProblem::TooManyRequests {
        cell,
        requests,
        cap: CAP,
    })
}

/// The first rate cell whose seeded schedule sends nothing within its time.
fn no_arrival(m: &crate::MatrixSpec) -> Option<ConfigProblem> {
    let LoadMode::Rate(r) = &m.load else {
        return None;
    };
    let RateLength::Duration(length) = r.length else {
        return None;
    };
    m.contexts.iter().find_map(|&context| {
        r.rates.iter().find_map(|&rate| {
            let first = crate::load::first_arrival(r, context, rate)?;
            (first > length).then_some(ConfigProblem::NoArrival {
                rate,
                context,
                first,
                length,
            })
        })
    })
}

/// Runs the matrix. See the crate docs for the protocol.
///
/// The server is probed and the plan checked before the journal is touched,
/// so a wrong URL, a wrong model or a matrix of which nothing can run leaves
/// no half-started run behind.
pub async fn run(
    config: RunConfig,
    journal: JournalOptions,
    observer: &dyn Observer,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunnerError> {
    validate(&config)?;
    let started_at = now_rfc3339();
    let server = Server::connect(&config).await?;
    let result = plan_and_run(&config, &server, &journal, observer, &cancel, started_at).await;
    server.shutdown().await;
    result
}

async fn plan_and_run(
    config: &RunConfig,
    server: &Server,
    journal: &JournalOptions,
    observer: &dyn Observer,
    cancel: &CancellationToken,
    started_at: String,
) -> Result<RunOutcome, RunnerError> {
    let the_plan = plan_for(config, server)?;
    ensure_something_runs(&the_plan)?;
    let key = ResumeKey::of(config, &server.model, server.info.version());
    let (journal, done, journal_damage) =
        open_journal(journal, key, config.labels.provenance.as_ref())?;
    let (shape, field_notices) =
        crate::negotiate::accepted_shape(server, measuring_shape(server, config)).await;
    for n in &field_notices {
        observer.event(crate::Event::Notice(n));
    }
    let overhead = match config.api {
        Api::Chat => Some(chat_overhead(server, config, shape.stream_options).await?),
        Api::Completions => None,
    };
    let telemetry = telemetry::RunTelemetry::start(config.telemetry);
    let session = Session {
        config,
        server,
        journal,
        done,
        observer,
        cancel,
        builder: PromptBuilder::new(config.tokenizer.clone()),
        overhead,
        shape,
        field_notices,
        workload_next: 0,
        nonce: run_nonce(),
        unexpected_content_type: None,
        telemetry: &telemetry,
        block_tokens: match server.info.capacity() {
            Some(ReportedCapacity::Blocks { block_size, .. }) => Some(block_size),
            _ => None,
        },
    };
    let measured = session.measure(&the_plan).await;
    let (telemetry_setup, samples) = telemetry.finish();
    let measured = measured?;
    let notices: Vec<Notice> = measured
        .decode
        .iter()
        .flat_map(|c| c.notices.iter().cloned())
        .chain(measured.load.iter().flat_map(|c| c.notices.iter().cloned()))
        .chain(measured.notices.iter().cloned())
        .collect();
    let mut report = build_report(config, server, &the_plan, &measured, &notices, started_at);
    if config.telemetry.gpu != speedmatrix_telemetry::TelemetryMode::Off {
        fill_hardware(&mut report.hardware, &telemetry_setup);
        report.telemetry = Some(telemetry_setup);
    }
    Ok(RunOutcome {
        report,
        prefill: measured.prefill,
        decode: measured.decode,
        load: measured.load,
        knees: measured.knees,
        notices,
        complete: measured.stopped.is_none(),
        stopped: measured.stopped,
        journal_damage,
        plan: the_plan,
        telemetry: samples,
        #[cfg(feature = "embedded")]
        simulated_from: crate::output::simulated_from(&config.target),
    })
}

/// The report's GPUs from what the telemetry source read, when the caller
/// gave none: identical GPUs are one entry with a count.
fn fill_hardware(
    hardware: &mut speedmatrix_report::Hardware,
    setup: &speedmatrix_report::TelemetrySetup,
) {
    if !hardware.gpus.is_empty() || setup.gpus.is_empty() {
        return;
    }
    for g in &setup.gpus {
        match hardware
            .gpus
            .iter_mut()
            .find(|h| h.name == g.name && h.memory_bytes == g.memory_bytes)
        {
            Some(h) => h.count += 1,
            None => hardware.gpus.push(speedmatrix_report::Gpu {
                name: g.name.clone(),
                memory_bytes: g.memory_bytes,
                count: 1,
            }),
        }
    }
    hardware.kind = Some("Discrete GPU".into());
}

/// Probes the server and plans the run without measuring anything.
pub async fn dry_run(config: &RunConfig) -> Result<Plan, RunnerError> {
    validate(config)?;
    let server = Server::connect(config).await?;
    let planned = plan_for(config, &server);
    server.shutdown().await;
    planned
}

fn plan_for(config: &RunConfig, server: &Server) -> Result<Plan, RunnerError> {
    if let (Some(inject), Some(limit)) = (config.matrix.inject, server.max_model_len) {
        let tokens = Tokens::new(inject.tokens.get().saturating_add(1));
        if tokens > limit {
            return Err(RunnerError::InvalidConfig(ConfigProblem::InjectTooLong {
                tokens,
                max_model_len: limit,
            }));
        }
    }
    let measured = server.info.capacity().and_then(measured_capacity);
    let limits = ServerLimits {
        max_num_seqs: None,
        max_model_len: server.max_model_len.map(Tokens::get),
    };
    let (hints, predicted_for) = plan::hints_for(&config.capacity, server.info.version());
    let (mut capacity, _grid) = capacity_plan(measured.as_ref(), &hints, limits, &config.matrix)?;
    capacity.predicted_for = predicted_for;
    Ok(plan(capacity, &config.matrix, server.max_model_len))
}

/// A run of which every step is excluded would only produce an empty
/// report: that is a mistake in the configuration, said before anything is written.
fn ensure_something_runs(the_plan: &Plan) -> Result<(), RunnerError> {
    let prefill = the_plan
        .prefill
        .iter()
        .map(|(context, ex)| (StepId::Prefill { context: *context }, ex.as_ref()));
    let cells = the_plan.cells.iter().map(|c| {
        let step = StepId::Decode {
            context: c.context,
            concurrency: c.concurrency,
        };
        (step, c.excluded.as_ref())
    });
    let load = the_plan.load.iter().map(|c| {
        let step = StepId::Load {
            context: c.context,
            point: c.point,
        };
        (step, c.excluded.as_ref())
    });
    let mut steps = prefill.chain(cells).chain(load);
    if steps.clone().any(|(_, ex)| ex.is_none()) {
        return Ok(());
    }
    let example = steps
        .next()
        .and_then(|(step, ex)| Some((step, ex?.clone())));
    Err(RunnerError::InvalidConfig(ConfigProblem::NothingCanRun {
        example,
    }))
}

/// A number that makes this run's cache markers differ from every earlier run's,
/// so "cold" prefill requests really are cold on a long-running server.
fn run_nonce() -> u64 {
    let t = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
}

/// The server's own account of its KV cache, from whichever engine's
/// endpoint answered (see `speedmatrix_engines::Endpoints::capacity`), in
/// the capacity crate's terms; `None` for an account it has no terms for.
pub fn measured_capacity(reported: ReportedCapacity) -> Option<MeasuredCapacity> {
    Some(match reported {
        ReportedCapacity::Blocks {
            num_gpu_blocks,
            block_size,
        } => MeasuredCapacity::Vllm {
            num_gpu_blocks,
            block_size,
        },
        ReportedCapacity::Slots {
            pool_tokens,
            slots,
            unified,
        } => MeasuredCapacity::LlamaCpp {
            n_ctx: pool_tokens,
            n_parallel: slots,
            unified,
        },
        ReportedCapacity::TokenPool {
            tokens,
            max_running_requests,
        } => MeasuredCapacity::Sglang {
            max_total_num_tokens: tokens,
            max_running_requests,
        },
        _ => return None,
    })
}

/// Every measuring request's shape, before the server says which fields it refuses.
fn measuring_shape(server: &Server, config: &RunConfig) -> RequestShape {
    RequestShape {
        model: server.model.clone(),
        api: config.api,
        max_tokens: config.matrix.max_output,
        ignore_eos: true,
        min_tokens: config.send_min_tokens,
        stream_options: true,
        secret: secret_of(config),
        extra: Arc::new(request_fields(server, config)),
        one_event_per_token: server.info.engine().one_event_per_token(),
        reasoning_parser: config.reasoning_parser,
        keep_text: false,
        first_token_allowance: first_token_allowance(config),
        sent_together: 1,
    }
}

async fn chat_overhead(
    server: &Server,
    config: &RunConfig,
    stream_options: bool,
) -> Result<ChatOverhead, RunnerError> {
    use speedmatrix_client::{Message, TokenizeRequest};
    let messages = vec![Message::user(ChatOverhead::PROBE)];
    let req = TokenizeRequest::chat(server.model.clone(), messages);
    let count = match server.client.tokenize(&req).await {
        Ok(Some(t)) => Some(t.count),
        _ => None,
    };
    let count = match count {
        Some(c) => c.get(),
        None => {
            let shape = RequestShape {
                model: server.model.clone(),
                api: Api::Chat,
                max_tokens: Tokens::new(1),
                ignore_eos: false,
                min_tokens: false,
                stream_options,
                secret: secret_of(config),
                extra: Arc::new(request_fields(server, config)),
                one_event_per_token: false,
                reasoning_parser: Default::default(),
                keep_text: false,
                first_token_allowance: first_token_allowance(config),
                sent_together: 1,
            };
            let r = request::record_one(
                &server.client,
                &shape,
                ChatOverhead::PROBE,
                std::time::Instant::now(),
                &CancellationToken::new(),
                None,
            )
            .await;
            match (r.prompt_tokens_reported, r.error) {
                (Some(n), _) => n.get(),
                (None, error) => {
                    return Err(RunnerError::InvalidConfig(
                        ConfigProblem::ChatOverheadUnknown {
                            error: error.map(|f| f.message),
                        },
                    ));
                }
            }
        }
    };
    ChatOverhead::from_probe(&config.tokenizer, count).map_err(RunnerError::Workload)
}

/// The fields merged into every request body: those that make the engine
/// count tokens on every chunk, then the user's `--extra-body`, which wins.
pub(crate) fn request_fields(
    server: &Server,
    config: &RunConfig,
) -> serde_json::Map<String, serde_json::Value> {
    let mut fields = server.info.engine().stream_fields();
    fields.extend(config.extra_body.clone());
    fields
}

/// How long a request may wait for its answer to start before its prefill is
/// counted in its deadline: the headers timeout (`--idle-timeout`), else the
/// client's default.
fn first_token_allowance(config: &RunConfig) -> std::time::Duration {
    config
        .timeouts
        .headers
        .or(speedmatrix_client::Timeouts::default().headers)
        .unwrap_or(std::time::Duration::from_secs(300))
}

fn secret_of(config: &RunConfig) -> Option<Arc<str>> {
    config.api_key.as_ref().map(|k| Arc::from(k.expose()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{BurstSpec, Preset, RateSpec};

    fn rate(rate: &str, length: RateLength) -> crate::MatrixSpec {
        let mut m = Preset::Quick.matrix();
        m.contexts = vec![Tokens::ZERO];
        m.load = LoadMode::Rate(RateSpec {
            rates: vec![rate.parse().unwrap()],
            arrival: speedmatrix_workload::ArrivalProcess::Constant,
            seed: 0,
            length,
            max_in_flight: None,
            drain: Duration::from_secs(60),
            warm_cache: false,
        });
        m
    }

    #[test]
    fn a_cell_planning_more_requests_than_a_cell_holds_is_refused() {
        let hour = RateLength::Duration(Duration::from_secs(3_600));
        let p = too_many_requests(&rate("1000", hour)).unwrap();
        assert_eq!(
            p.to_string(),
            "the rate cell 1000/s sending for 1h plans 3,600,000 requests, more than the 100,000 a cell may hold"
        );
        assert_eq!(too_many_requests(&rate("10", hour)), None);
        let mut burst = Preset::Quick.matrix();
        burst.load = LoadMode::Burst(BurstSpec {
            requests: vec![8, 200_000],
            max_concurrency: None,
            warm_cache: false,
        });
        assert!(matches!(
            too_many_requests(&burst),
            Some(ConfigProblem::TooManyRequests {
                requests: 200_000,
                ..
            })
        ));
    }

    #[test]
    fn a_rate_cell_with_no_arrival_in_its_time_and_a_window_past_a_day_are_refused() {
        let two = RateLength::Duration(Duration::from_secs(2));
        match no_arrival(&rate("0.001", two)) {
            Some(ConfigProblem::NoArrival { first, length, .. }) => {
                assert_eq!(first, Duration::from_secs(1_000));
                assert_eq!(length, Duration::from_secs(2));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(no_arrival(&rate("1", two)), None);
        assert_eq!(no_arrival(&rate("0.001", RateLength::Requests(1))), None);
        let mut m = rate("1", two);
        m.window = Duration::from_secs(10_000_000_000);
        assert!(matches!(
            too_long(&m),
            Some(ConfigProblem::TooLong { what: "window", .. })
        ));
    }
}
