//! What can be wrong with a study, or stop one.

use std::path::PathBuf;

/// Why a study file cannot be used, or a study cannot go on. A point that fails is no error:
/// it is recorded, and the study goes on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StudyError {
    /// The file is not TOML of the study's shape.
    #[error("the study file is not a valid study: {0}")]
    Parse(String),
    /// The file parses but describes no runnable study.
    #[error("the study file: {0}")]
    Invalid(String),
    /// A template names a placeholder no parameter gives.
    #[error(
        "`{template}` names {{{name}}}, which is neither a parameter nor one of {{port}}, {{point}}: \
         add `{name}` under [parameters] or remove it"
    )]
    UnknownPlaceholder {
        /// The template.
        template: String,
        /// The placeholder.
        name: String,
    },
    /// A journal line could not be read.
    #[error("study journal line {line}: {reason}")]
    Journal {
        /// 1-based line.
        line: usize,
        /// What was wrong.
        reason: String,
    },
    /// A file or folder of the study could not be used.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The runner could not record the study (its journal).
    #[error("{0}")]
    Run(#[source] speedmatrix_runner::RunnerError),
}
