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
//! The runner never prints: it reports progress to an [`Observer`] and stops
//! when its cancellation token fires, returning the partial result.
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
//!   answer) fails the cell at once: it is recorded as
//!   [`CellStatus::Error`](speedmatrix_report::CellStatus::Error) with the client's stable error kind and message
//!   (the API key redacted), and the run goes on to the next cell.
//! - After a failed step the runner asks `/v1/models` whether the server is
//!   still there; if not, the run stops ([`StopReason::ServerGone`]), the
//!   running cell is left out of the journal so `--resume` measures it again,
//!   and the partial result is returned.
//! - A server that ends streams early although `ignore_eos` was set shows in
//!   the cell's `finish_reasons` and a note; one that sends no usage has its
//!   tokens counted one per chunk, and the cell's `token_count_source` says so.
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
//! };
//! let outcome = run(config, JournalOptions::default(), &Silent, CancellationToken::new()).await?;
//! assert!(outcome.complete);
//! println!("{}", speedmatrix_report::to_markdown(&outcome.report));
//! # Ok(()) }
//! ```

mod assemble;
mod config;
mod convert;
mod decode;
mod estimate;
mod journal;
mod observer;
mod plan;
mod prefill;
mod request;
mod resume;
mod server;
mod steps;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use speedmatrix_capacity::{MeasuredCapacity, ServerLimits};
use speedmatrix_engines::ReportedCapacity;
use speedmatrix_report::Report;
use speedmatrix_units::Tokens;
use speedmatrix_workload::{ChatOverhead, PromptBuilder};
use tokio_util::sync::CancellationToken;

pub use crate::assemble::describe_plan;
pub use crate::config::{
    Api, CapacityHints, MatrixSpec, PrefillMode, Preset, PromptSharing, RunConfig, RunLabels,
    Target,
};
pub use crate::journal::{CorruptTail, Journal, JournalContents, read_journal};
pub use crate::observer::{Observer, Silent};
pub use crate::plan::{
    CapacityPlan, CapacitySourceKind, Exclusion, Plan, PlannedCell, ZERO_CONTEXT_PROMPT,
    capacity_plan, plan, prompt_len,
};

use crate::assemble::{build_report, exclusion_text, now_rfc3339};
use crate::request::RequestShape;
use crate::resume::{Done, open_journal};
pub use crate::resume::{JournalStep, journal_steps};
use crate::server::Server;
use crate::steps::Session;

/// Why a run could not start or had to stop. Failures of single requests
/// are not errors: they are recorded in their cell.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The configuration contradicts itself.
    #[error("invalid run configuration: {0}")]
    InvalidConfig(String),
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
    #[error("the server does not serve model `{requested}`; it serves: {}; pass one of them with --model", available.join(", "))]
    ModelNotFound {
        /// What was asked for.
        requested: String,
        /// What the server lists.
        available: Vec<String>,
    },
    /// The server lists no model and none was given.
    #[error("the server at {url} lists no model in /v1/models; name the served model with --model")]
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
    /// The journal belongs to a run with other settings.
    #[error("the journal {} was written for a different run ({what}); resume with the same flags or start a new output directory", path.display())]
    ResumeMismatch {
        /// The journal file.
        path: PathBuf,
        /// What differs.
        what: String,
    },
    /// The file given to resume is not a journal at all (not even its first line reads).
    #[error("{} is not a speedmatrix journal (line {line}: {reason}); start a new run with another --out instead of --resume", path.display())]
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

/// Where the journal lives and whether to continue it.
#[derive(Debug, Clone, Default)]
pub struct JournalOptions {
    /// The journal file; no journal when `None`.
    pub path: Option<PathBuf>,
    /// Continue the journal at `path` instead of creating it.
    pub resume: bool,
}

/// Why a run ended before measuring every planned step.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The cancellation token fired (Ctrl-C).
    Cancelled,
    /// The server stopped answering.
    ServerGone(String),
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Cancelled => f.write_str("interrupted"),
            StopReason::ServerGone(why) => write!(f, "the server stopped answering ({why})"),
        }
    }
}

/// The result of a run: the document, complete or partial.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The result document (partial when `complete` is false).
    pub report: Report,
    /// True when every planned step ran (whatever its status).
    pub complete: bool,
    /// Why the run stopped early.
    pub stopped: Option<StopReason>,
    /// The journal's damaged tail found on resume, if any.
    pub journal_damage: Option<CorruptTail>,
    /// The plan the run followed.
    pub plan: Plan,
}

/// Checks a configuration without contacting any server.
pub fn validate(config: &RunConfig) -> Result<(), RunError> {
    let m = &config.matrix;
    let bad = |s: &str| Err(RunError::InvalidConfig(s.to_owned()));
    if m.contexts.is_empty() && m.prefill_contexts.is_empty() {
        return bad("nothing to measure: give at least one decode context or prefill context");
    }
    if !m.contexts.is_empty() && m.concurrencies.is_empty() {
        return bad("decode contexts were given but no concurrency levels");
    }
    if m.duration.is_zero() {
        return bad("the measurement window must be longer than zero (e.g. --duration 30s)");
    }
    if m.max_tokens.get() == 0 {
        return bad("--max-tokens must be at least 1");
    }
    if m.prefill_repeats == 0 {
        return bad("--prefill-repeats must be at least 1");
    }
    if m.prefill_contexts.iter().any(|c| c.get() == 0) {
        return bad("a prefill context must be at least 1 token");
    }
    Ok(())
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
    let (journal, done, journal_damage) = open_journal(journal, config)?;
    let mut outcome = run_on(
        config, server, journal, done, the_plan, observer, cancel, started_at,
    )
    .await?;
    outcome.journal_damage = journal_damage;
    Ok(outcome)
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
    let measured = measured_capacity(server);
    let limits = ServerLimits {
        max_num_seqs: None,
        max_model_len: server.max_model_len.map(Tokens::get),
    };
    let (capacity, _grid) =
        capacity_plan(measured.as_ref(), &config.capacity, limits, &config.matrix)?;
    Ok(plan(capacity, &config.matrix, server.max_model_len))
}

/// A run of which every step is excluded would only produce an empty
/// report: that is a mistake in the flags, said before anything is written.
fn ensure_something_runs(the_plan: &Plan) -> Result<(), RunError> {
    let prefill = the_plan.prefill.iter().map(|(_, ex)| ex.as_ref());
    let mut exclusions = prefill.chain(the_plan.cells.iter().map(|c| c.excluded.as_ref()));
    if exclusions.clone().any(|ex| ex.is_none()) {
        return Ok(());
    }
    let first = exclusions
        .next()
        .flatten()
        .map_or_else(String::new, exclusion_text);
    Err(RunError::InvalidConfig(format!(
        "nothing can run on this server: every prefill point and decode cell is excluded (e.g. {first}); \
         lower --contexts, --prefill-contexts or --max-tokens"
    )))
}

/// A number that makes this run's cache markers differ from every earlier run's,
/// so "cold" prefill requests really are cold on a long-running server.
fn run_nonce() -> u64 {
    let t = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
}

/// Measures the plan's steps and assembles the result document.
#[allow(clippy::too_many_arguments)]
async fn run_on(
    config: &RunConfig,
    server: &Server,
    journal: Option<Journal>,
    done: Done,
    the_plan: Plan,
    observer: &dyn Observer,
    cancel: &CancellationToken,
    started_at: String,
) -> Result<RunOutcome, RunError> {
    let overhead = match config.api {
        Api::Chat => Some(chat_overhead(server, config).await?),
        Api::Completions => None,
    };
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
        },
        nonce: run_nonce(),
        unexpected_content_type: None,
    };
    let measured = session.measure(&the_plan).await?;
    let report = build_report(
        config,
        server,
        &the_plan,
        measured.prefill,
        measured.decode,
        measured.notes,
        started_at,
    );
    Ok(RunOutcome {
        report,
        complete: measured.stopped.is_none(),
        stopped: measured.stopped,
        journal_damage: None,
        plan: the_plan,
    })
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
                (None, Some((_, msg))) => {
                    return Err(RunError::InvalidConfig(format!(
                        "could not measure the chat template's token overhead: {msg}"
                    )));
                }
                (None, None) => {
                    return Err(RunError::InvalidConfig(
                        "the server reported no usage for a chat request, so the chat template's \
                         token overhead is unknown; use --api completions"
                            .into(),
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
