//! Runs the speedmatrix speed test matrix against a server and builds the
//! versioned result document.
//!
//! One call to [`run`] does the whole job: probe the server, plan the cells
//! (those whose requests would not fit the KV cache are *Over capacity* and
//! not run), measure cold prefill per context, then, per (context,
//! concurrency) cell, warm the prefix cache, keep N streams busy, open a
//! fixed window once every stream produces tokens (and the server reports N
//! running, none waiting, where it exports those gauges), cancel, and wait for
//! the server to drain. Every finished step is appended to a journal at once
//! (see [`Journal`]), so a crash or a dead server loses at most the running
//! cell and [`JournalOptions::resume`] continues a run.
//!
//! The runner never prints and writes no sentence for a user: it reports
//! progress to an [`Observer`] as typed [`Event`]s, returns typed outcomes
//! ([`PrefillOutcome`], [`CellOutcome`], [`Notice`]) beside the report built
//! from them, and stops when its cancellation token fires, returning the
//! partial result ([`StopReason::Cancelled`]).
//!
//! # When the server misbehaves
//!
//! - Nothing is written before the server has been probed and the plan
//!   checked: a wrong URL, an unknown model or a matrix of which nothing can
//!   run (every cell too long for `max_model_len` or over capacity) is a
//!   [`RunError`] and leaves no journal behind.
//! - HTTP 429 and 503 on a request's first response are transient by
//!   definition: the request is sent again after the server's `Retry-After`
//!   (capped at 30 s; 1, 2, 4 s without one), at most 3 times, and the cell
//!   notes how often. Every other failure (other statuses, resets, idle or
//!   header timeouts, malformed chunks, over-long SSE lines, a non-SSE
//!   answer) fails the cell at once: its [`StepStatus`] is `Failed` with a
//!   [`Failure`] (the client's stable error kind as a [`FailureKind`] and its
//!   message, the API key redacted), and the run goes on to the next cell. A
//!   cell in which a stream still ran the whole window is kept as Partial.
//! - After a failed step the runner asks `/v1/models` whether the server is
//!   still there; if not, the run stops ([`StopReason::ServerGone`]), the
//!   running cell is left out of the journal so a resumed run measures it
//!   again, and the partial result is returned.
//! - A server that ends streams early although `ignore_eos` was set shows in
//!   the cell's finish reasons and a [`Notice`]. Tokens are counted from the
//!   server's own counts where its stream carries them; otherwise each
//!   stream's text is tokenized as a whole (`/tokenize` or the configured
//!   tokenizer) and calibrated on the cell's finished requests, and the cell's
//!   [`TokenCounting`] says which (see `docs/metrics.md`).
//! - A journal written for another server, model, tokenizer or matrix is not
//!   continued: [`RunError::ResumeMismatch`] names every difference of the
//!   [`ResumeKey`].
//!
//! ```no_run
//! use speedmatrix_runner::{run, JournalOptions, Preset, RunConfig, Silent, Target};
//! use speedmatrix_runner::{Api, CapacityHints, PromptSharing, RunLabels};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let profile = speedmatrix_sim::Profile::builtin("tiny").ok_or("no such profile")?;
//! let config = RunConfig {
//!     target: Target::Embedded(Box::new(profile)),
//!     api_key: None,
//!     insecure: false,
//!     model: None,
//!     tokenizer: speedmatrix_workload::Tokenizer::bundled()?,
//!     api: Api::Completions,
//!     matrix: Preset::Quick.matrix(),
//!     prompt_sharing: PromptSharing::Unique,
//!     seed: 1,
//!     capacity: CapacityHints::default(),
//!     timeouts: speedmatrix_client::Timeouts::default(),
//!     send_min_tokens: false,
//!     extra_body: Default::default(),
//!     labels: RunLabels::default(),
//!     telemetry: Default::default(),
//! };
//! let outcome = run(config, JournalOptions::default(), &Silent, CancellationToken::new()).await?;
//! assert!(outcome.complete);
//! println!("{}", speedmatrix_report::to_markdown(&outcome.report));
//! # Ok(()) }
//! ```

mod client_load;
mod config;
mod conversation;
mod decode;
mod estimate;
mod journal;
mod load;
mod observer;
mod outcome;
mod plan;
mod prefill;
mod report;
mod request;
mod resume;
mod search;
mod server;
mod steps;
mod stop;
mod telemetry;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use speedmatrix_capacity::{MeasuredCapacity, ServerLimits};
use speedmatrix_engines::ReportedCapacity;
use speedmatrix_report::Report;
use speedmatrix_units::Tokens;
use speedmatrix_workload::{ChatOverhead, PromptBuilder};
use tokio_util::sync::CancellationToken;

pub use crate::client_load::{CLIENT_BOUND, ClientLoad};
pub use crate::config::{
    Api, BurstSpec, CapacityHints, ConversationSpec, InjectSpec, LoadMode, MatrixSpec, PrefillMode,
    Preset, PromptSharing, RateLength, RateSpec, RunConfig, RunLabels, SearchGoal, SearchSpec,
    SharedPrefix, Target, TelemetryConfig, VllmInputs,
};
pub use crate::journal::{CorruptTail, Journal, JournalContents};
pub use crate::observer::{Event, NotRun, Observer, Phase, Silent};
pub use crate::outcome::{
    CellOutcome, CounterIncrease, Exclusion, Failure, FailureKind, Interference, KneePath, KneeTry,
    Latency, LoadOutcome, LoadPoint, LoadResult, Notice, PrefillOutcome, PrefixCacheCheck,
    SkipReason, SloTermVerdict, SloVerdict, StepId, StepStatus, StopReason, TokenCounting, TooLong,
    WindowResult,
};
pub use crate::plan::{
    CapacityPlan, CapacitySourceKind, Plan, PlannedCell, PlannedLoad, ZERO_CONTEXT_PROMPT,
    capacity_plan, plan, prompt_len,
};
pub use crate::report::{capacity_rule, decode_cell, load_cell, measured_source, prefill_row};
pub use crate::resume::{
    JOURNAL_VERSION, JournalStep, KeyDifference, LoadKey, ResumeKey, journal_steps, read_journal,
};
pub use crate::search::{KneeSearch, SearchEnd};

use crate::report::{build_report, now_rfc3339};
use crate::request::RequestShape;
use crate::resume::open_journal;
use crate::server::Server;
use crate::steps::Session;

/// What is wrong with a run's configuration, before any server is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigProblem {
    /// Neither decode contexts nor prefill contexts.
    NothingToMeasure,
    /// Decode contexts but no concurrency levels.
    NoConcurrency,
    /// A burst run with no burst size, or a rate run with no rate.
    NoLoad,
    /// A rate run sending for no time or no request, or draining for no time.
    ZeroRateLength,
    /// A window of zero length.
    ZeroWindow,
    /// `max_tokens` of 0.
    ZeroMaxTokens,
    /// `prefill_repeats` of 0.
    ZeroPrefillRepeats,
    /// A prefill context of 0 tokens.
    ZeroPrefillContext,
    /// Every planned step is excluded on this server; one of them as an example.
    NothingCanRun {
        /// One step and why it is excluded.
        example: Option<(StepId, Exclusion)>,
    },
    /// The interference probe's prompt does not fit the server's `max_model_len`.
    InjectTooLong {
        /// The probe's prompt plus its one output token.
        tokens: Tokens,
        /// The server's limit.
        max_model_len: Tokens,
    },
    /// The chat template's token overhead could not be measured.
    ChatOverheadUnknown {
        /// What the server said, when it failed; `None` when it reported no usage.
        error: Option<String>,
    },
}

impl std::fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigProblem::NothingToMeasure => {
                f.write_str("nothing to measure: no decode context and no prefill context")
            }
            ConfigProblem::NoConcurrency => {
                f.write_str("decode contexts were given but no concurrency levels")
            }
            ConfigProblem::NoLoad => {
                f.write_str("a burst run needs burst sizes and a rate run needs rates")
            }
            ConfigProblem::ZeroRateLength => f.write_str(
                "a rate cell must send for a positive time or at least one request, and drain for a positive time",
            ),
            ConfigProblem::ZeroWindow => f.write_str("the measurement window must be longer than zero"),
            ConfigProblem::ZeroMaxTokens => f.write_str("max_tokens must be at least 1"),
            ConfigProblem::ZeroPrefillRepeats => f.write_str("prefill repeats must be at least 1"),
            ConfigProblem::ZeroPrefillContext => {
                f.write_str("a prefill context must be at least 1 token")
            }
            ConfigProblem::NothingCanRun { example } => {
                f.write_str("nothing can run on this server: every prefill point and decode cell is excluded")?;
                match example {
                    Some((step, why)) => write!(f, " (e.g. {step}: {why})"),
                    None => Ok(()),
                }
            }
            ConfigProblem::InjectTooLong {
                tokens,
                max_model_len,
            } => write!(
                f,
                "the injected prompt and its token ({tokens}) exceed the server's max_model_len of {max_model_len}"
            ),
            ConfigProblem::ChatOverheadUnknown { error: Some(e) } => {
                write!(f, "could not measure the chat template's token overhead: {e}")
            }
            ConfigProblem::ChatOverheadUnknown { error: None } => f.write_str(
                "the server reported no usage for a chat request, so the chat template's token overhead is unknown",
            ),
        }
    }
}

/// Why a run could not start or had to stop. Failures of single requests
/// are not errors: they are recorded in their cell. The messages are neutral
/// (no command-line flags); a front end adds its own advice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The configuration contradicts itself.
    #[error("invalid run configuration: {0}")]
    InvalidConfig(ConfigProblem),
    /// The server could not be reached or probed.
    #[error("could not use the server at {url}: {source}")]
    Server {
        /// Base URL.
        url: String,
        /// The client's error.
        #[source]
        source: speedmatrix_client::Error,
    },
    /// The requested model is not served.
    #[error("the server does not serve model `{requested}`; it serves: {}", available.join(", "))]
    ModelNotFound {
        /// What was asked for.
        requested: String,
        /// What the server lists.
        available: Vec<String>,
    },
    /// The server lists no model and none was given.
    #[error("the server at {url} lists no model in /v1/models and none was named")]
    NoModel {
        /// Base URL.
        url: String,
    },
    /// The embedded simulator could not start.
    #[error("could not start the built-in simulator: {0}")]
    Simulator(#[source] speedmatrix_sim::SimError),
    /// Prompts could not be built.
    #[error("could not build prompts: {0}")]
    Workload(#[source] speedmatrix_workload::Error),
    /// An open-loop schedule could not be drawn.
    #[error("could not draw the arrival schedule: {0}")]
    Arrivals(#[source] speedmatrix_workload::ArrivalError),
    /// The capacity figures are unusable.
    #[error("could not decide KV capacity: {0}")]
    Capacity(#[source] speedmatrix_capacity::CapacityError),
    /// A metric could not be computed.
    #[error("could not compute metrics: {0}")]
    Metrics(#[source] speedmatrix_metrics::MetricsError),
    /// The journal could not be written or read.
    #[error("could not {action} the journal {}: {source}", path.display())]
    Journal {
        /// The journal file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The journal belongs to a run that measures something else.
    #[error("the journal {} was written for a different run: {}", path.display(), describe_differences(differences))]
    ResumeMismatch {
        /// The journal file.
        path: PathBuf,
        /// Every field that differs.
        differences: Vec<KeyDifference>,
    },
    /// The journal's layout is not the one this runner reads.
    #[error("the journal {} is in layout {} but this speedmatrix reads layout {supported}", path.display(), found.map_or_else(|| "0 (before journal versions)".to_owned(), |v| v.to_string()))]
    JournalVersion {
        /// The journal file.
        path: PathBuf,
        /// Its `journal_version`, `None` for journals before versions.
        found: Option<u32>,
        /// [`JOURNAL_VERSION`].
        supported: u32,
    },
    /// The file given to resume is not a journal at all (not even its first line reads).
    #[error("{} is not a speedmatrix journal (line {line}: {reason})", path.display())]
    NotAJournal {
        /// The file.
        path: PathBuf,
        /// The unreadable line.
        line: usize,
        /// Why it could not be read.
        reason: String,
    },
    /// The run was cancelled (Ctrl-C).
    #[error("the run was interrupted")]
    Cancelled,
}

fn describe_differences(differences: &[KeyDifference]) -> String {
    differences
        .iter()
        .map(|d| format!("{} was {} and is now {}", d.field, d.journal, d.now))
        .collect::<Vec<_>>()
        .join("; ")
}

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
}

/// Checks a configuration without contacting any server.
pub fn validate(config: &RunConfig) -> Result<(), RunError> {
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
    } else if m.duration.is_zero() {
        Some(ConfigProblem::ZeroWindow)
    } else if m.max_tokens.get() == 0 {
        Some(ConfigProblem::ZeroMaxTokens)
    } else if m.prefill_repeats == 0 {
        Some(ConfigProblem::ZeroPrefillRepeats)
    } else if m.prefill_contexts.iter().any(|c| c.get() == 0) {
        Some(ConfigProblem::ZeroPrefillContext)
    } else {
        None
    };
    problem.map_or(Ok(()), |p| Err(RunError::InvalidConfig(p)))
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
) -> Result<RunOutcome, RunError> {
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
) -> Result<RunOutcome, RunError> {
    let the_plan = plan_for(config, server)?;
    ensure_something_runs(&the_plan)?;
    let key = ResumeKey::of(config, &server.model, server.info.version());
    let (journal, done, journal_damage) = open_journal(journal, key)?;
    let overhead = match config.api {
        Api::Chat => Some(chat_overhead(server, config).await?),
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
        shape: RequestShape {
            model: server.model.clone(),
            api: config.api,
            max_tokens: config.matrix.max_tokens,
            ignore_eos: true,
            min_tokens: config.send_min_tokens,
            secret: secret_of(config),
            extra: Arc::new(request_fields(server, config)),
            one_event_per_token: server.info.engine().one_event_per_token(),
            keep_text: false,
        },
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
pub async fn dry_run(config: &RunConfig) -> Result<Plan, RunError> {
    validate(config)?;
    let server = Server::connect(config).await?;
    let planned = plan_for(config, &server);
    server.shutdown().await;
    planned
}

fn plan_for(config: &RunConfig, server: &Server) -> Result<Plan, RunError> {
    if let (Some(inject), Some(limit)) = (config.matrix.inject, server.max_model_len) {
        let tokens = Tokens::new(inject.tokens.get().saturating_add(1));
        if tokens > limit {
            return Err(RunError::InvalidConfig(ConfigProblem::InjectTooLong {
                tokens,
                max_model_len: limit,
            }));
        }
    }
    let measured = measured_capacity(server);
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
fn ensure_something_runs(the_plan: &Plan) -> Result<(), RunError> {
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
    Err(RunError::InvalidConfig(ConfigProblem::NothingCanRun {
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
/// the capacity crate's terms.
fn measured_capacity(server: &Server) -> Option<MeasuredCapacity> {
    Some(match server.info.capacity()? {
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

async fn chat_overhead(server: &Server, config: &RunConfig) -> Result<ChatOverhead, RunError> {
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
                secret: secret_of(config),
                extra: Arc::new(request_fields(server, config)),
                one_event_per_token: false,
                keep_text: false,
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
                    return Err(RunError::InvalidConfig(
                        ConfigProblem::ChatOverheadUnknown {
                            error: error.map(|f| f.message),
                        },
                    ));
                }
            }
        }
    };
    ChatOverhead::from_probe(&config.tokenizer, count).map_err(RunError::Workload)
}

/// The fields merged into every request body: those that make the engine
/// count tokens on every chunk, then the user's `--extra-body`, which wins.
fn request_fields(
    server: &Server,
    config: &RunConfig,
) -> serde_json::Map<String, serde_json::Value> {
    let mut fields = server.info.engine().stream_fields();
    fields.extend(config.extra_body.clone());
    fields
}

fn secret_of(config: &RunConfig) -> Option<Arc<str>> {
    config.api_key.as_ref().map(|k| Arc::from(k.expose()))
}
