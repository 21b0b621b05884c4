//! The versioned speedmatrix result model and its renderers.
//!
//! A run of the speed test matrix is one [`Report`]: the hardware, the engine, the run
//! settings, the KV-cache capacity, the cold prefill rows and the sustained-decode cells,
//! each with a [`CellStatus`] and, when measured, its numbers. It serializes to one
//! versioned JSON document ([`SCHEMA_VERSION`]; schema in `schema/run.schema.json`) and
//! renders, as pure functions returning `String`, to Markdown laid out like the seed
//! page ([`to_markdown`]), CSV ([`to_csv`]) and a self-contained HTML page with SVG
//! charts ([`to_html`]). [`compare()`] puts two runs side by side.
//!
//! The crate does no I/O and no metric math: the caller detects hardware, measures,
//! computes the numbers and hands them over.
//!
//! The schema file is checked by a test; after changing the types, regenerate it with
//! `UPDATE_SCHEMA=1 cargo test -p speedmatrix-report --test suite schema`. To see the HTML page
//! in a real browser, `cargo xtask screenshot [RUN.json] [-o OUT.png]` renders it and takes a
//! screenshot with headless Chromium (`apt-get install -y chromium`).
//!
//! ```
//! use speedmatrix_report::{
//!     compare, to_markdown, Api, CellStatus, DecodeCell, DecodeMeasurements, EngineInfo,
//!     Hardware, Percentiles, PrefillMode, Report, RunSettings, Threshold, TokenCount,
//!     TokenCountSource, Tool, SCHEMA_VERSION,
//! };
//! use speedmatrix_units::{Concurrency, Tokens};
//!
//! let measured = DecodeMeasurements {
//!     total_tokens_per_s: 117.3,
//!     per_request_tokens_per_s: 117.5,
//!     ttft_ms: Percentiles { p50: 54.0, p90: 61.0, p99: 70.0 },
//!     time_between_tokens_ms: Percentiles { p50: 8.5, p90: 9.1, p99: 12.0 },
//!     average_active_requests: 1.0,
//!     completed_requests: 0,
//!     output_tokens: Tokens::new(3_519),
//!     measured_s: 30.0,
//!     queueing_detected: false,
//!     prompt_token_mismatches: 0,
//!     token_count_source: TokenCountSource::UsagePerChunk,
//!     token_count: Some(TokenCount::exact(TokenCountSource::UsagePerChunk, 1)),
//!     finish_reasons: Default::default(),
//!     server_counter: None,
//!     client: None,
//!     telemetry: None,
//!     interference: None,
//!     intervals: None,
//!     repeats: None,
//!     band: None,
//! };
//! let report = Report {
//!     schema_version: SCHEMA_VERSION,
//!     hardware: Hardware::default(),
//!     engine: EngineInfo { name: "vllm".into(), version: Some("0.32.0".into()), ..EngineInfo::default() },
//!     run: RunSettings {
//!         model: "org/Model-4B".into(),
//!         served_model: "bench".into(),
//!         revision: None,
//!         api: Api::Chat,
//!         prompt_mode: "unique".into(),
//!         tokenizer: None,
//!         tool: Tool { name: "speedmatrix".into(), version: "0.1.0".into(), commit: None, build_profile: None },
//!         contexts: vec![Tokens::ZERO],
//!         concurrencies: vec![Concurrency::ONE],
//!         prefill_contexts: vec![],
//!         prefill_repeats: 1,
//!         prefill_mode: PrefillMode::Cold,
//!         window_s: 30.0,
//!         max_output_tokens: Tokens::new(8_192),
//!         decode_cache_warmed: true,
//!         started_at: "2026-11-30T07:00:00Z".into(),
//!         finished_at: "2026-11-30T07:01:00Z".into(),
//!     },
//!     client: None,
//!     telemetry: None,
//!     capacity: None,
//!     load: None,
//!     prefill: vec![],
//!     decode: vec![DecodeCell {
//!         context: Tokens::ZERO,
//!         concurrency: Concurrency::ONE,
//!         status: CellStatus::Valid,
//!         measurements: Some(measured),
//!     }],
//!     notes: vec![],
//!     prediction: None,
//!     provenance: None,
//! };
//! report.validate()?;
//! let json = report.to_json()?;
//! assert_eq!(Report::from_json(&json)?, report);
//! assert!(to_markdown(&report).contains("| 0 | 117.3<br>54 ms TTFT |"));
//! assert!(!compare(&report, &report, Threshold::DEFAULT).has_regressions());
//! # Ok::<(), speedmatrix_report::ReportError>(())
//! ```

mod compare;
mod csv;
mod document;
mod error;
mod format;
mod html;
mod load_page;
mod markdown;
mod model;
mod page;
mod site;
mod telemetry_page;

pub use crate::compare::{
    BandCheck, BandPlace, CellComparison, Comparison, Judgement, Metric, MetricChoice,
    MetricComparison, Noise, Pair, Section, Threshold, Verdict, compare, compare_metrics,
    workload_difference,
};
pub use crate::csv::{CSV_COLUMNS, to_csv};
pub use crate::error::{Problem, ReportError};
pub use crate::html::to_html;
pub use crate::markdown::to_markdown;
pub use crate::model::{
    Api, Capacity, CellSeries, CellStatus, CellTelemetry, CellVerdict, ClientCpu, ClientHost,
    ClientSetup, DecodeCell, DecodeIntervals, DecodeMeasurements, EngineInfo, Gpu, GpuDetail,
    GpuUse, Hardware, HostUse, Interference, KvCapacity, LocalServer, MAX_PLAIN_UNCERTAINTY_PCT,
    OLDEST_READABLE_VERSION, Percentiles, PredictionBand, PredictionInfo, PrefillMode, PrefillRow,
    Provenance, RepeatFigure, Repeats, Report, RunSettings, SCHEMA_VERSION, ServerCounter,
    ServerStats, TelemetrySetup, ThrottledSeconds, TimelinePoint, TokenCount, TokenCountSource,
    Tool, VerdictThresholds,
};
pub use crate::model::{
    ArrivalSetup, KneeResult, KneeStep, LengthBin, LoadCell, LoadKind, LoadMeasurements, LoadRun,
    SloResult, SloTermResult, TokenLengths, TurnStats, Workload,
};
pub use crate::site::{SiteInput, SitePoint, site};
