//! The one error type of this crate.

/// Why a telemetry source could not be used. Never fatal to a run: the run
/// records what was missing and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// A file or a tool's output could not be read or understood.
    #[error("{what}: {why}")]
    Unreadable {
        /// The file or tool.
        what: &'static str,
        /// What was wrong.
        why: String,
    },
    /// No GPU source could be opened (no driver library, no tool on PATH).
    #[error("no GPU telemetry: {0}")]
    NoGpuSource(String),
    /// A tool ran past its time limit and was killed.
    #[error("{tool} did not answer within {after:?} and was stopped (a hung driver or tool)")]
    ToolTimedOut {
        /// The tool.
        tool: &'static str,
        /// The limit.
        after: std::time::Duration,
    },
    /// A tool ran but failed.
    #[error("{tool} failed: {why}")]
    ToolFailed {
        /// The tool.
        tool: &'static str,
        /// Its exit status or error output.
        why: String,
    },
}
