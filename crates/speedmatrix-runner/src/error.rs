//! Why a run could not start or had to stop ([`RunnerError`]), and what is wrong with a
//! configuration before any server is asked ([`ConfigProblem`]).

use std::path::PathBuf;

use speedmatrix_units::Tokens;

use crate::{Exclusion, KeyDifference, StepId};

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
    /// A cell would plan more requests than a cell may hold
    /// ([`crate::limits::MAX_REQUESTS_PER_CELL`]).
    TooManyRequests {
        /// The cell, in words (`rate 1000/s for 1h`, `a burst of 200000`).
        cell: String,
        /// The requests it would plan.
        requests: u64,
        /// The most a cell may plan.
        cap: u64,
    },
    /// A length of time beyond what a run can take.
    TooLong {
        /// What it is: `window`, `drain`, ...
        what: &'static str,
        /// Its length.
        length: std::time::Duration,
        /// The most it may be.
        max: std::time::Duration,
    },
    /// A rate cell whose seeded schedule has no arrival inside its sending time.
    NoArrival {
        /// The cell's rate.
        rate: speedmatrix_units::RequestRate,
        /// The cell's context.
        context: Tokens,
        /// When its first request would be sent.
        first: std::time::Duration,
        /// How long it sends.
        length: std::time::Duration,
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
            ConfigProblem::TooManyRequests {
                cell,
                requests,
                cap,
            } => write!(
                f,
                "{cell} plans {} requests, more than the {} a cell may hold",
                speedmatrix_units::group_thousands(*requests),
                speedmatrix_units::group_thousands(*cap)
            ),
            ConfigProblem::TooLong { what, length, max } => write!(
                f,
                "a {what} of {} is longer than the {} a run allows",
                humantime::format_duration(*length),
                humantime::format_duration(*max)
            ),
            ConfigProblem::NoArrival {
                rate,
                context,
                first,
                length,
            } => write!(
                f,
                "the rate cell {rate} at context {context} draws its first arrival at {:.1} s, after its \
                 {:.1} s of sending: it would send nothing",
                first.as_secs_f64(),
                length.as_secs_f64()
            ),
        }
    }
}

/// Why a run could not start or had to stop. Failures of single requests
/// are not errors: they are recorded in their cell. The messages are neutral
/// (no command-line flags); a front end adds its own advice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// The configuration contradicts itself.
    #[error("invalid run configuration: {0}")]
    InvalidConfig(ConfigProblem),
    /// An option (a `speedmatrix run` flag, a study's `[run]` key) cannot be used: the message
    /// names it as the command line spells it and says why.
    #[error("{0}")]
    BadOption(String),
    /// The server could not be reached or probed.
    #[error("could not use the server at {url}: {source}")]
    Server {
        /// Base URL.
        url: String,
        /// The client's error.
        #[source]
        source: speedmatrix_client::ClientError,
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
    #[cfg(feature = "embedded")]
    #[error("could not start the built-in simulator: {0}")]
    Simulator(#[source] speedmatrix_sim::SimError),
    /// Prompts could not be built.
    #[error("could not build prompts: {0}")]
    Workload(#[source] speedmatrix_workload::WorkloadError),
    /// An open-loop schedule could not be drawn.
    #[error("could not draw the arrival schedule: {0}")]
    Arrivals(#[source] speedmatrix_workload::WorkloadError),
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
        /// [`crate::JOURNAL_VERSION`].
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
    /// The result document does not validate (a bug: the runner builds it).
    #[error("the result document is inconsistent: {0}")]
    Report(#[source] speedmatrix_report::ReportError),
    /// An output file could not be written.
    #[error("could not write {}: {source}", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Another run or study is writing the folder.
    #[error("another speedmatrix{} is writing {}", holder.map(|p| format!(" (process {p})")).unwrap_or_default(), dir.display())]
    Busy {
        /// The folder.
        dir: PathBuf,
        /// The process that holds it, when it said.
        holder: Option<u32>,
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
