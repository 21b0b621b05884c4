//! What can be wrong with a study.

/// Why a study file cannot be used.
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
}
