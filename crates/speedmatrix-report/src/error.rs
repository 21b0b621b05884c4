//! The one error type of this crate.

use std::fmt;

/// Why a run document could not be read or is not consistent.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The text is not JSON, or not shaped like a run document.
    #[error(
        "not a speedmatrix run document: {detail}; write it with `speedmatrix run`, \
         or check it against crates/speedmatrix-report/schema/run.schema.json"
    )]
    Parse {
        /// What the JSON parser said, with line and column.
        detail: String,
    },
    /// The document has no `schema_version`, or one this version cannot read.
    #[error(
        "run document schema_version {found} is not supported: this speedmatrix reads version \
         {supported}; use the speedmatrix release that wrote the file"
    )]
    UnsupportedVersion {
        /// The version found, or `missing`.
        found: String,
        /// The version this crate reads.
        supported: u32,
    },
    /// A regression threshold that is not a percentage in [0, 100).
    #[error("`{text}` is not a regression threshold: give a percentage such as 5% or 2.5%")]
    InvalidThreshold {
        /// The text given.
        text: String,
    },
    /// A comparison metric that is not one of those known.
    #[error("`{text}` is not a comparison metric: give tok/s, ttft, itl or all")]
    InvalidMetric {
        /// The text given.
        text: String,
    },
    /// The document parsed but contradicts itself.
    #[error(
        "run document is inconsistent ({} problem{}): {}; fix or regenerate the file",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" },
        ProblemList(problems)
    )]
    Invalid {
        /// Every problem found.
        problems: Vec<Problem>,
    },
}

/// One inconsistency found by [`crate::Report::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where, as a JSON path, e.g. `decode[3].measurements.ttft_ms`.
    pub at: String,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.what)
    }
}

struct ProblemList<'a>(&'a [Problem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}
