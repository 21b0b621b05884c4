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
//!   [`CellStatus::Error`] with the client's stable error kind and message
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
//!     target: Target::Embedded(profile),
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
//!     labels: RunLabels::default(),
//! };
//! let outcome = run(config, JournalOptions::default(), &Silent, CancellationToken::new()).await?;
//! assert!(outcome.complete);
//! println!("{}", speedmatrix_report::to_markdown(&outcome.report));
//! # Ok(()) }
//! ```

mod config;
mod convert;
mod decode;
mod journal;
mod observer;
mod plan;
mod prefill;
mod request;
mod server;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use speedmatrix_capacity::{KvPool, MeasuredCapacity, ServerLimits};
use speedmatrix_report::{
    Capacity, CellStatus, DecodeCell, Engine, KvCapacity, PrefillRow, Report, RunSettings,
    SCHEMA_VERSION, Tool,
};
use speedmatrix_units::{Concurrency, Tokens};
use speedmatrix_workload::{CacheKey, ChatOverhead, PromptBuilder};
use tokio_util::sync::CancellationToken;

pub use crate::config::{
    Api, CapacityHints, MatrixSpec, Preset, PromptSharing, RunConfig, RunLabels, Target,
};
pub use crate::journal::{CorruptTail, Journal, JournalContents, read_journal};
pub use crate::observer::{Observer, Silent};
pub use crate::plan::{
    CapacityPlan, CapacitySourceKind, Exclusion, Plan, PlannedCell, ZERO_CONTEXT_PROMPT,
    capacity_plan, plan, prompt_len,
};

use crate::request::RequestShape;
use crate::server::Server;

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

/// One journal line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum JournalRecord {
    /// The run's settings, first line of every journal.
    Start { matrix: MatrixKey, model: String },
    /// A finished prefill point.
    Prefill { row: PrefillRow },
    /// A finished decode cell.
    Decode { cell: DecodeCell },
}

/// One step a journal holds, as [`journal_steps`] reads it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum JournalStep {
    /// The line that names the run's settings.
    Start,
    /// A finished prefill point.
    Prefill(PrefillRow),
    /// A finished decode cell.
    Decode(DecodeCell),
}

/// Reads a journal from bytes in memory the way `--resume` reads the file:
/// the steps of its valid prefix and, if its end is damaged, where.
/// Never fails on any bytes (the journal fuzz target checks exactly that).
///
/// ```
/// let steps = speedmatrix_runner::journal_steps(b"{\"record\":\"start\"\n");
/// assert!(steps.records.is_empty());
/// assert_eq!(steps.corrupt_tail.unwrap().line, 1);
/// ```
pub fn journal_steps(bytes: &[u8]) -> JournalContents<JournalStep> {
    let contents = match journal::read_records::<JournalRecord, _>(bytes) {
        Ok(c) => c,
        // Reading from memory cannot fail; keep the signature honest anyway.
        Err(e) => JournalContents {
            records: Vec::new(),
            corrupt_tail: Some(CorruptTail {
                line: 1,
                offset: 0,
                dropped_bytes: bytes.len() as u64,
                reason: e.to_string(),
                saved_to: None,
            }),
        },
    };
    JournalContents {
        records: contents
            .records
            .into_iter()
            .map(|r| match r {
                JournalRecord::Start { .. } => JournalStep::Start,
                JournalRecord::Prefill { row } => JournalStep::Prefill(row),
                JournalRecord::Decode { cell } => JournalStep::Decode(cell),
            })
            .collect(),
        corrupt_tail: contents.corrupt_tail,
    }
}

/// The settings a journal must match to be resumed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct MatrixKey {
    contexts: Vec<Tokens>,
    concurrencies: Vec<Concurrency>,
    prefill_contexts: Vec<Tokens>,
    duration_s: f64,
    max_tokens: Tokens,
    api: Api,
}

impl MatrixKey {
    fn of(config: &RunConfig) -> MatrixKey {
        let m = &config.matrix;
        MatrixKey {
            contexts: m.contexts.clone(),
            concurrencies: m.concurrencies.clone(),
            prefill_contexts: m.prefill_contexts.clone(),
            duration_s: m.duration.as_secs_f64(),
            max_tokens: m.max_tokens,
            api: config.api,
        }
    }
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
    let (mut journal, done, journal_damage) = open_journal(journal, config)?;
    let mut outcome = run_on(
        config,
        server,
        &mut journal,
        done,
        the_plan,
        observer,
        cancel,
        started_at,
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

/// The plan as text: capacity source, every step with its verdict, and the
/// estimated duration.
pub fn describe_plan(plan: &Plan, matrix: &MatrixSpec) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{}", describe_capacity(&plan.capacity));
    let _ = writeln!(
        out,
        "\nPrefill (cold, max_tokens 1, {} repeat(s)):",
        matrix.prefill_repeats
    );
    for (c, ex) in &plan.prefill {
        let verdict = ex.as_ref().map_or("run".to_owned(), exclusion_text);
        let _ = writeln!(out, "  {:>6}  {verdict}", c.to_string());
    }
    let _ = writeln!(
        out,
        "\nSustained decode ({} s window, max_tokens {}):",
        matrix.duration.as_secs_f64(),
        matrix.max_tokens
    );
    for cell in &plan.cells {
        let verdict = match &cell.excluded {
            None => "run".to_owned(),
            Some(Exclusion::OverCapacity(r)) => format!("Over capacity: {r}"),
            Some(Exclusion::TooLong(r)) => format!("Skipped: {r}"),
        };
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

/// Steps already in the journal, keyed by what they measured.
#[derive(Default)]
struct Done {
    prefill: BTreeMap<Tokens, PrefillRow>,
    decode: BTreeMap<(Tokens, Concurrency), DecodeCell>,
}

fn open_journal(
    options: &JournalOptions,
    config: &RunConfig,
) -> Result<(Option<Journal>, Done, Option<CorruptTail>), RunError> {
    let Some(path) = &options.path else {
        return Ok((None, Done::default(), None));
    };
    let key = MatrixKey::of(config);
    if !options.resume {
        let mut j = Journal::create(path)?;
        j.append(&JournalRecord::Start {
            matrix: key,
            model: config.model.clone().unwrap_or_default(),
        })?;
        return Ok((Some(j), Done::default(), None));
    }
    // A file of which not even the first line reads is not a damaged
    // journal but something else: refuse rather than cut it to nothing.
    let peek = read_journal::<JournalRecord>(path)?;
    if let (true, Some(tail)) = (peek.records.is_empty(), peek.corrupt_tail) {
        return Err(RunError::NotAJournal {
            path: path.clone(),
            line: tail.line,
            reason: tail.reason,
        });
    }
    let (mut j, contents) = Journal::resume::<JournalRecord>(path)?;
    let mut done = Done::default();
    let mut started = false;
    for record in contents.records {
        match record {
            JournalRecord::Start { matrix, .. } => {
                if matrix != key {
                    return Err(RunError::ResumeMismatch {
                        path: path.clone(),
                        what: "contexts, concurrencies, window, max tokens or API differ".into(),
                    });
                }
                started = true;
            }
            // Only results worth keeping are reused; failed steps run again.
            JournalRecord::Prefill { row } if row.status.is_valid() => {
                done.prefill.insert(row.context, row);
            }
            JournalRecord::Decode { cell }
                if matches!(
                    cell.status,
                    CellStatus::Valid | CellStatus::OverCapacity { .. }
                ) =>
            {
                done.decode.insert((cell.context, cell.concurrency), cell);
            }
            JournalRecord::Prefill { .. } | JournalRecord::Decode { .. } => {}
        }
    }
    if !started {
        j.append(&JournalRecord::Start {
            matrix: key,
            model: config.model.clone().unwrap_or_default(),
        })?;
    }
    Ok((Some(j), done, contents.corrupt_tail))
}

/// A number that makes this run's cache markers differ from every earlier run's,
/// so "cold" prefill requests really are cold on a long-running server.
fn run_nonce() -> u64 {
    let t = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

#[allow(clippy::too_many_arguments)]
async fn run_on(
    config: &RunConfig,
    server: &Server,
    journal: &mut Option<Journal>,
    mut done: Done,
    the_plan: Plan,
    observer: &dyn Observer,
    cancel: &CancellationToken,
    started_at: String,
) -> Result<RunOutcome, RunError> {
    let mut notes = Vec::new();
    let capacity_note = describe_capacity(&the_plan.capacity);
    observer.notice(&capacity_note);
    notes.push(capacity_note);
    let steps = the_plan.prefill.len() + the_plan.cells.len();
    observer.planned(steps, the_plan.estimated);

    let builder = Arc::new(PromptBuilder::new(config.tokenizer.clone()));
    let overhead = match config.api {
        Api::Chat => Some(chat_overhead(server, config).await?),
        Api::Completions => None,
    };
    let shape = RequestShape {
        model: server.model.clone(),
        api: config.api,
        max_tokens: config.matrix.max_tokens,
        ignore_eos: true,
        min_tokens: config.send_min_tokens,
        secret: secret_of(config),
    };
    let nonce = run_nonce();
    let make_prompt =
        |n: Tokens, key: CacheKey| -> Result<speedmatrix_workload::Prompt, RunError> {
            let p = match overhead {
                Some(o) => builder.chat_prompt(n, config.seed, &key, o),
                None => builder.prompt(n, config.seed, &key),
            };
            p.map_err(RunError::Workload)
        };

    let mut stopped = None;
    let mut prefill_rows = Vec::new();
    for (i, (context, excluded)) in the_plan.prefill.iter().enumerate() {
        let label = format!("prefill {context}");
        if stopped.is_some() {
            prefill_rows.push(skipped_prefill(
                *context,
                "the run stopped before this step",
            ));
            continue;
        }
        if let Some(row) = done.prefill.remove(context) {
            observer.step_skipped(&label, "already in the journal");
            prefill_rows.push(row);
            continue;
        }
        let row = match excluded {
            Some(ex) => {
                observer.step_skipped(&label, &exclusion_text(ex));
                excluded_prefill(*context, ex)
            }
            None => {
                observer.step_started(
                    &label,
                    Duration::from_secs_f64(context.get() as f64 / 8_000.0),
                );
                let prompts = (0..config.matrix.prefill_repeats)
                    .map(|r| {
                        let key = CacheKey::unique(nonce.wrapping_add(i as u64), 0, u64::from(r));
                        make_prompt(*context, key).map(|p| p.text)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                match prefill::run_prefill(server, &shape, *context, &prompts, cancel).await {
                    Ok(row) => row,
                    Err(RunError::Cancelled) => {
                        stopped = Some(StopReason::Cancelled);
                        prefill_rows.push(skipped_prefill(*context, "interrupted"));
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        observer.step_finished(&label, &prefill_summary(&row));
        record(journal, &JournalRecord::Prefill { row: row.clone() })?;
        if !row.status.is_valid() && excluded.is_none() && !server.is_alive().await {
            stopped = Some(StopReason::ServerGone(row.status.detail()));
        }
        prefill_rows.push(row);
    }

    let mut cells = Vec::new();
    for (i, planned) in the_plan.cells.iter().enumerate() {
        let label = format!("decode {} × {}", planned.context, planned.concurrency);
        let key = (planned.context, planned.concurrency);
        if stopped.is_some() {
            cells.push(skipped_cell(planned, "the run stopped before this cell"));
            continue;
        }
        if let Some(cell) = done.decode.remove(&key) {
            observer.step_skipped(&label, "already in the journal");
            cells.push(cell);
            continue;
        }
        if let Some(ex) = &planned.excluded {
            observer.step_skipped(&label, &exclusion_text(ex));
            let cell = excluded_cell(planned, ex);
            record(journal, &JournalRecord::Decode { cell: cell.clone() })?;
            cells.push(cell);
            continue;
        }
        observer.step_started(&label, config.matrix.duration);
        observer.step_phase(&label, "building prompts");
        let n_prompts = match config.prompt_sharing {
            PromptSharing::Unique => planned.concurrency.get(),
            PromptSharing::Shared => 1,
        };
        let cell_id = nonce.wrapping_add(1_000 + i as u64);
        let len = prompt_len(planned.context);
        let prompts = (0..n_prompts)
            .map(|s| {
                let key = match config.prompt_sharing {
                    PromptSharing::Unique => CacheKey::unique(cell_id, u64::from(s), 0),
                    PromptSharing::Shared => CacheKey::shared(cell_id),
                };
                make_prompt(len, key).map(|p| Arc::<str>::from(p.text))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let spec = decode::DecodeCellSpec {
            label: &label,
            prompts,
            expected_prompt_tokens: len,
            concurrency: planned.concurrency,
            context: planned.context,
            shape: shape.clone(),
            duration: config.matrix.duration,
        };
        let out = match decode::run_cell(server, spec, observer, cancel).await {
            Ok(out) => out,
            Err(RunError::Cancelled) => {
                stopped = Some(StopReason::Cancelled);
                cells.push(skipped_cell(planned, "interrupted"));
                continue;
            }
            Err(e) => return Err(e),
        };
        for n in &out.notices {
            observer.notice(n);
        }
        notes.extend(out.notices);
        let is_error = matches!(out.status, CellStatus::Error { .. });
        if is_error && (out.server_suspect || !server.is_alive().await) && !server.is_alive().await
        {
            // The server died under this cell: the cell is not its fault and
            // is left out of the journal so --resume measures it again.
            stopped = Some(StopReason::ServerGone(out.status.detail()));
            cells.push(skipped_cell(
                planned,
                "the server stopped answering during this cell",
            ));
            continue;
        }
        let cell = DecodeCell {
            context: planned.context,
            concurrency: planned.concurrency,
            status: out.status,
            measurements: out.measurements,
        };
        observer.step_finished(&label, &decode_summary(&cell));
        record(journal, &JournalRecord::Decode { cell: cell.clone() })?;
        cells.push(cell);
    }

    if config.matrix.contexts.contains(&Tokens::ZERO) {
        notes.push(format!(
            "The context 0 row sends a {ZERO_CONTEXT_PROMPT}-token prompt (a unique cache marker) so that no two streams share a KV block."
        ));
    }
    if config.insecure {
        notes.push("TLS certificate verification was disabled (--insecure).".into());
    }
    if let Some(StopReason::ServerGone(why)) = &stopped {
        notes.push(format!(
            "The run stopped early: the server stopped answering ({why})."
        ));
    }
    if stopped == Some(StopReason::Cancelled) {
        notes.push("The run was interrupted before every step ran.".into());
    }
    let report = build_report(
        config,
        server,
        &the_plan,
        prefill_rows,
        cells,
        notes,
        started_at,
    );
    Ok(RunOutcome {
        report,
        complete: stopped.is_none(),
        stopped,
        journal_damage: None,
        plan: the_plan,
    })
}

fn record(journal: &mut Option<Journal>, r: &JournalRecord) -> Result<(), RunError> {
    match journal {
        Some(j) => j.append(r),
        None => Ok(()),
    }
}

/// The server's own account of its KV cache, from whichever engine's
/// endpoint answered: vLLM's `/metrics` `cache_config_info`, llama.cpp's
/// `/props`, SGLang's `/get_server_info`.
fn measured_capacity(server: &Server) -> Option<MeasuredCapacity> {
    let info = &server.info;
    if let Some(cc) = info.cache_config()
        && let (Some(num_gpu_blocks), Some(block_size)) = (cc.num_gpu_blocks, cc.block_size)
    {
        return Some(MeasuredCapacity::Vllm {
            num_gpu_blocks,
            block_size,
        });
    }
    if let Some(props) = info.llamacpp_props {
        // `/props` gives one slot's window. With `--kv-unified` (llama-server's
        // default when it picks the slot count) the slots share that window, so
        // it is the whole pool; a split cache reports `kv_unified: false` only
        // on servers that say so, otherwise sharing is the cautious reading.
        let unified = props.kv_unified.unwrap_or(true);
        let n_ctx = if unified {
            props.slot_n_ctx.get()
        } else {
            props.slot_n_ctx.get() * u64::from(props.total_slots)
        };
        return Some(MeasuredCapacity::LlamaCpp {
            n_ctx,
            n_parallel: props.total_slots,
            unified,
        });
    }
    let sglang = info.sglang?;
    Some(MeasuredCapacity::Sglang {
        max_total_num_tokens: sglang.max_total_num_tokens.get(),
        max_running_requests: sglang.max_running_requests,
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

fn secret_of(config: &RunConfig) -> Option<Arc<str>> {
    config.api_key.as_ref().map(|k| Arc::from(k.expose()))
}

/// The endpoint a measured pool of this kind was read from.
fn measured_source(pool: Option<&KvPool>) -> &'static str {
    match pool {
        Some(KvPool::Slots(_)) => "llama.cpp /props (n_ctx, total_slots)",
        Some(KvPool::Tokens(_)) => "SGLang /get_server_info (max_total_num_tokens)",
        _ => "/metrics vllm:cache_config_info (num_gpu_blocks × block_size)",
    }
}

fn describe_capacity(c: &CapacityPlan) -> String {
    let tokens = |t: Option<Tokens>| {
        t.map_or("unknown".into(), |t| {
            speedmatrix_units::group_thousands(t.get())
        })
    };
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
        CapacitySourceKind::Unknown => "KV capacity unknown (the server does not report it and no prediction was given): every cell runs, and cells where the server queues requests are marked".into(),
    }
}

fn exclusion_text(ex: &Exclusion) -> String {
    match ex {
        Exclusion::OverCapacity(s) | Exclusion::TooLong(s) => s.clone(),
    }
}

fn excluded_prefill(context: Tokens, ex: &Exclusion) -> PrefillRow {
    let status = match ex {
        Exclusion::OverCapacity(reason) => CellStatus::OverCapacity {
            reason: reason.clone(),
        },
        Exclusion::TooLong(reason) => CellStatus::Skipped {
            reason: reason.clone(),
        },
    };
    PrefillRow {
        context,
        status,
        prompt_tokens_per_s: None,
        ttft_ms: None,
        prompt_tokens_requested: context,
        prompt_tokens_reported: None,
        repeats: 0,
    }
}

fn skipped_prefill(context: Tokens, reason: &str) -> PrefillRow {
    excluded_prefill(context, &Exclusion::TooLong(reason.to_owned()))
}

fn excluded_cell(planned: &PlannedCell, ex: &Exclusion) -> DecodeCell {
    let status = match ex {
        Exclusion::OverCapacity(reason) => CellStatus::OverCapacity {
            reason: reason.clone(),
        },
        Exclusion::TooLong(reason) => CellStatus::Skipped {
            reason: reason.clone(),
        },
    };
    DecodeCell {
        context: planned.context,
        concurrency: planned.concurrency,
        status,
        measurements: None,
    }
}

fn skipped_cell(planned: &PlannedCell, reason: &str) -> DecodeCell {
    excluded_cell(planned, &Exclusion::TooLong(reason.to_owned()))
}

fn prefill_summary(row: &PrefillRow) -> String {
    match (row.prompt_tokens_per_s, row.ttft_ms) {
        (Some(rate), Some(ttft)) => format!("{rate:.0} prompt tok/s, TTFT {ttft:.0} ms"),
        _ => format!("{}: {}", row.status.label(), row.status.detail()),
    }
}

fn decode_summary(cell: &DecodeCell) -> String {
    match &cell.measurements {
        Some(m) => format!(
            "{:.1} tok/s total, {:.1} per request, TTFT {:.0} ms, {:.1} ms between tokens",
            m.total_tokens_per_s,
            m.per_request_tokens_per_s,
            m.ttft_ms.p50,
            m.time_between_tokens_ms.p50
        ),
        None => format!("{}: {}", cell.status.label(), cell.status.detail()),
    }
}

#[allow(clippy::too_many_arguments)]
fn build_report(
    config: &RunConfig,
    server: &Server,
    the_plan: &Plan,
    prefill: Vec<PrefillRow>,
    decode: Vec<DecodeCell>,
    notes: Vec<String>,
    started_at: String,
) -> Report {
    let embedded = matches!(config.target, Target::Embedded(_));
    let engine_name = config.labels.engine.clone().unwrap_or_else(|| {
        if embedded {
            "speedmatrix-sim".into()
        } else if server.has_gauges() {
            "vllm".into()
        } else {
            "unknown".into()
        }
    });
    let c = &the_plan.capacity;
    let capacity = Capacity {
        measured: c.measured_tokens.map(|t| KvCapacity {
            kv_cache_tokens: t,
            source: format!("server {}", measured_source(c.pool.as_ref())),
        }),
        predicted: c
            .predicted_tokens
            .or(if c.source == CapacitySourceKind::Given {
                c.pool_tokens
            } else {
                None
            })
            .map(|t| KvCapacity {
                kv_cache_tokens: t,
                source: match c.source {
                    CapacitySourceKind::Given => "given with --kv-capacity-tokens".into(),
                    _ => "predicted offline from config.json, GPU and flags".into(),
                },
            }),
        rule: capacity_rule(c),
    };
    let m = &config.matrix;
    Report {
        schema_version: SCHEMA_VERSION,
        hardware: config.labels.hardware.clone(),
        engine: Engine {
            name: engine_name,
            version: server.info.version.clone(),
            quantization: config.labels.quantization.clone(),
            launch_command: config.labels.launch_command.clone(),
            ..Engine::default()
        },
        run: RunSettings {
            model: config
                .labels
                .model
                .clone()
                .unwrap_or_else(|| server.model.clone()),
            served_model: server.model.clone(),
            revision: config.labels.revision.clone(),
            api: convert::api(config.api),
            prompt_mode: match config.prompt_sharing {
                PromptSharing::Unique => "unique".into(),
                PromptSharing::Shared => "shared".into(),
            },
            tokenizer: config
                .labels
                .tokenizer
                .clone()
                .or_else(|| Some(config.tokenizer.name().to_owned())),
            tool: Tool {
                name: "speedmatrix".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            contexts: m.contexts.clone(),
            concurrencies: m.concurrencies.clone(),
            prefill_contexts: m.prefill_contexts.clone(),
            prefill_repeats: m.prefill_repeats,
            window_duration_s: m.duration.as_secs_f64(),
            max_output_tokens: m.max_tokens,
            decode_cache_warmed: true,
            started_at,
            finished_at: now_rfc3339(),
        },
        capacity: (c.source != CapacitySourceKind::Unknown).then_some(capacity),
        prefill,
        decode,
        notes,
    }
}

fn capacity_rule(c: &CapacityPlan) -> String {
    use speedmatrix_capacity::KvPool;
    match &c.pool {
        Some(KvPool::Blocks(_)) => {
            "vLLM block rule: N × blocks(context + max output) ≤ num_gpu_blocks − 1".into()
        }
        Some(KvPool::Tokens(_)) => {
            "token rule: N × (context + max output) ≤ KV cache tokens".into()
        }
        Some(KvPool::Slots(_)) => {
            "llama.cpp slot rule: N ≤ n_parallel and context + max output fits a slot".into()
        }
        Some(_) => "the engine's KV-cache rule".into(),
        None => "unknown".into(),
    }
}
