//! Small conversions between the crates' vocabularies.

use speedmatrix_metrics::{EstimateMethod, TokenSource};
use speedmatrix_report::{TokenCount, TokenCountSource};

/// The report's name for where output token counts came from.
pub(crate) fn token_source(s: Option<TokenSource>) -> TokenCountSource {
    match s {
        Some(s) => source(s),
        None => TokenCountSource::ChunkCount,
    }
}

fn source(s: TokenSource) -> TokenCountSource {
    match s {
        TokenSource::ContinuousUsage => TokenCountSource::UsagePerChunk,
        TokenSource::EngineCount => TokenCountSource::EngineCount,
        TokenSource::FinalUsage => TokenCountSource::FinalUsage,
        TokenSource::Tokenizer => TokenCountSource::Tokenizer,
        TokenSource::ChunkCount => TokenCountSource::ChunkCount,
    }
}

/// The report's account of how a window's tokens were counted.
pub(crate) fn token_count(t: &speedmatrix_metrics::TokenCount) -> TokenCount {
    let c = t.calibration.as_ref();
    TokenCount {
        requests_by_source: t
            .requests_by_source
            .iter()
            .map(|(s, n)| (source(*s).as_str().to_owned(), *n))
            .collect(),
        estimated: t.is_estimated(),
        estimated_share_pct: t.estimated_share * 100.0,
        estimate_method: c.map(|c| match c.method {
            EstimateMethod::Tokenizer => TokenCountSource::Tokenizer,
            EstimateMethod::ChunkCount => TokenCountSource::ChunkCount,
        }),
        calibration_factor: c.filter(|c| c.requests > 0).map(|c| c.factor),
        calibration_requests: c.map_or(0, |c| c.requests),
        uncertainty_pct: t.relative_uncertainty().map(|u| u * 100.0),
    }
}

/// The runner's prefill mode in the report's terms.
pub(crate) fn prefill_mode(mode: crate::PrefillMode) -> speedmatrix_report::PrefillMode {
    match mode {
        crate::PrefillMode::Cold => speedmatrix_report::PrefillMode::Cold,
        crate::PrefillMode::Warmup => speedmatrix_report::PrefillMode::Warmup,
    }
}
