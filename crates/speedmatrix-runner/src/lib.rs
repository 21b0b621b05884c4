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
//! A front end does not build the [`RunConfig`] by hand: [`options::RunOptions`] holds what a
//! user says (the `speedmatrix run` flags behind the `clap` feature, a study's `[run]` table
//! through serde) and [`options::RunOptions::resolve`] reads the files and makes the config;
//! [`output::run_into`] then runs it into a folder and writes every file. Every result
//! document is built in this crate: a run's, a prediction's ([`predicted`]), and, with the
//! `embedded` feature (on by default: the simulator as a target), simulator profiles from
//! documents ([`profiles`]).
//!
//! # When the server misbehaves
//!
//! - Nothing is written before the server has been probed and the plan
//!   checked: a wrong URL, an unknown model or a matrix of which nothing can
//!   run (every cell too long for `max_model_len` or over capacity) is a
//!   [`RunnerError`] and leaves no journal behind.
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
//!   tokenizer) and calibrated on a bounded random sample of the cell's
//!   finished requests (the text of the others is dropped as each ends), and
//!   the cell's [`TokenCounting`] says which (see `docs/metrics.md`).
//! - A journal written for another server, model, tokenizer or matrix is not
//!   continued: [`RunnerError::ResumeMismatch`] names every difference of the
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
//!     reasoning_parser: Default::default(),
//!     extra_body: Default::default(),
//!     labels: RunLabels::default(),
//!     telemetry: Default::default(),
//!     workload: None,
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
mod error;
mod estimate;
mod eta;
pub mod host;
mod journal;
mod load;
mod negotiate;
mod observer;
pub mod options;
mod outcome;
pub mod output;
mod plan;
pub mod predicted;
mod prefill;
#[cfg(feature = "embedded")]
pub mod profiles;
mod report;
mod request;
mod resume;
mod run;
mod search;
mod server;
mod steps;
mod stop;
mod telemetry;
mod workload;

pub use crate::client_load::{CLIENT_BOUND, ClientLoad};
pub use crate::config::{
    Api, BurstSpec, CapacityHints, ConversationSpec, InjectSpec, LoadKind, LoadMode, MatrixSpec,
    PrefillMode, Preset, PromptSharing, RateLength, RateSpec, RunConfig, RunLabels, SearchGoal,
    SearchSpec, SharedPrefix, Target, TelemetryConfig, VllmInputs,
};
pub use crate::error::{ConfigProblem, RunnerError};
pub use crate::eta::{Eta, step_index};
pub use crate::journal::{CorruptTail, Journal, JournalContents};
pub use crate::observer::{Event, NotRun, Observer, Silent, StepPhase};
pub use crate::options::limits;
pub use crate::outcome::{
    CellOutcome, CounterIncrease, Exclusion, Failure, FailureKind, Interference, KneePath, KneeTry,
    Latency, LoadOutcome, LoadPoint, LoadResult, Notice, PrefillOutcome, PrefixCacheCheck,
    SkipReason, SloTermVerdict, SloVerdict, StepId, StepStatus, StopReason, TokenCounting, TooLong,
    WindowResult,
};
pub use crate::plan::{
    CapacityPlan, CapacitySourceKind, Plan, PlannedCell, PlannedLoad, StepEstimate,
    ZERO_CONTEXT_PROMPT, capacity_plan, plan, prompt_len,
};
pub use crate::report::{capacity_rule, decode_cell, load_cell, measured_source, prefill_row};
pub use crate::resume::{
    InjectKey, JOURNAL_VERSION, JournalStep, KeyDifference, LoadKey, OLDEST_JOURNAL_VERSION,
    ResumeKey, Schedule, journal_provenance, journal_steps, read_journal,
};
pub use crate::run::{JournalOptions, RunOutcome, dry_run, measured_capacity, run, validate};
pub use crate::search::{KneeSearch, SearchEnd};
pub use crate::workload::Workload;
