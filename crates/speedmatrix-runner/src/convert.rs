//! Small conversions between the crates' vocabularies.

use speedmatrix_metrics::TokenSource;
use speedmatrix_report::TokenCountSource;

/// The report's name for where output token counts came from.
pub(crate) fn token_source(s: Option<TokenSource>) -> TokenCountSource {
    match s {
        Some(TokenSource::ContinuousUsage) => TokenCountSource::UsagePerChunk,
        Some(TokenSource::FinalUsage) => TokenCountSource::FinalUsage,
        Some(TokenSource::ChunkCount) | None => TokenCountSource::ChunkCount,
    }
}

/// The runner's API choice in the report's terms.
pub(crate) fn api(api: crate::Api) -> speedmatrix_report::Api {
    match api {
        crate::Api::Completions => speedmatrix_report::Api::Completions,
        crate::Api::Chat => speedmatrix_report::Api::Chat,
    }
}
