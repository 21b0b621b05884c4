//! The crate's error type.

use std::path::PathBuf;

/// Why the simulator could not start or a profile could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// Neither a built-in profile name nor an existing file.
    #[error("no profile named `{name}`: use a built-in name ({}) or the path of a JSON profile file", crate::Profile::BUILTIN_NAMES.join(", "))]
    UnknownProfile {
        /// The name given.
        name: String,
    },
    /// The profile file could not be read.
    #[error("cannot read profile file {}: {source}", path.display())]
    ProfileRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The profile is not valid JSON of the right shape.
    #[error("cannot parse profile from {origin}: {source}")]
    ProfileParse {
        /// Where the text came from.
        origin: String,
        /// The JSON error, with line and column.
        source: serde_json::Error,
    },
    /// A cost model could not be fitted to the figures given.
    #[error("cannot fit a cost model: {0}")]
    Fit(String),
    /// The profile's values do not describe a working engine.
    #[error("profile `{name}` is invalid: {reason}")]
    InvalidProfile {
        /// The profile's name.
        name: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A fault specification (profile `faults` or `x-sim-fault` header) does not parse.
    #[error("bad fault specification `{spec}`: {reason}")]
    BadFault {
        /// The specification given.
        spec: String,
        /// What is wrong.
        reason: String,
    },
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The profile's request log could not be opened for appending.
    #[error("cannot open the request log {path}: {source}")]
    RequestLog {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A virtual-time run ([`crate::VirtualRun`]) asked for something it cannot do.
    #[error("cannot run the cell in virtual time: {reason}")]
    InvalidVirtualRun {
        /// What is wrong.
        reason: String,
    },
    /// The tokenizer could not be loaded or used.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
}
