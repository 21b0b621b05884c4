//! What speedmatrix knows about each inference engine, in one place: how to
//! tell which engine answers, where it reports its KV capacity and how to read
//! it, which metrics give its scheduler state and token counters, what its
//! streams count, and the shapes of its error bodies. Everything is mapped to
//! neutral types ([`Engine`], [`ReportedCapacity`], [`SchedulerState`]) that
//! the client, the runner, the simulator and the CLI share.
//!
//! Pure: no I/O. The client fetches the paths in [`PROBE_PATHS`] and hands
//! each answer to [`Endpoints::read`]; everything else is a function of what
//! was read. Each engine has one module (`vllm`, `sglang`, `llamacpp`, `tgi`,
//! `ollama`) with its names and shapes, cited from its source; adding an
//! engine is a module, a variant of `speedmatrix_units::Engine` and a line in
//! [`Endpoints::read`].
//!
//! ```
//! use speedmatrix_engines::{EngineHabits as _, Endpoints, Engine, ReportedCapacity};
//!
//! let mut found = Endpoints::default();
//! found.read("/props", br#"{"default_generation_settings": {"n_ctx": 32768}, "total_slots": 4}"#);
//! assert_eq!(found.engine(), Engine::LlamaCpp);
//! let Some(ReportedCapacity::Slots { pool_tokens, slots, .. }) = found.capacity() else {
//!     panic!("llama.cpp reports slots");
//! };
//! assert_eq!((pool_tokens, slots), (32_768, 4));
//! assert_eq!(Engine::LlamaCpp.stream_fields()["timings_per_token"], true);
//! ```

mod counters;
mod errors;
pub mod llamacpp;
pub mod ollama;
mod prometheus;
pub mod sglang;
pub mod tgi;
pub mod vllm;

use serde_json::{Map, Value};

pub use crate::counters::{CounterDeltas, ServerCounters};
pub use crate::errors::error_message;
pub use crate::prometheus::{MetricType, Sample, ServerMetrics};

pub use speedmatrix_units::Engine;

/// What each engine's streams need and do, beside its name (the name is
/// [`Engine`], defined once in `speedmatrix-units`).
pub trait EngineHabits {
    /// Request fields that make this engine count output tokens on every
    /// chunk, beyond the `stream_options` every request carries: llama.cpp's
    /// `timings_per_token`.
    fn stream_fields(self) -> Map<String, Value>;

    /// Whether every streamed event with `choices` carries exactly one
    /// generated token, so that counting events counts tokens (TGI).
    fn one_event_per_token(self) -> bool;
}

impl EngineHabits for Engine {
    fn stream_fields(self) -> Map<String, Value> {
        let mut fields = Map::new();
        if self == Engine::LlamaCpp {
            fields.insert("timings_per_token".into(), Value::Bool(true));
        }
        fields
    }

    fn one_event_per_token(self) -> bool {
        self == Engine::Tgi
    }
}

/// The paths a probe asks besides `/v1/models`, in no particular order:
/// each engine's own endpoint, `/version` and `/metrics`.
pub const PROBE_PATHS: [&str; 6] = [
    VERSION,
    METRICS,
    llamacpp::PROPS,
    sglang::SERVER_INFO,
    tgi::INFO,
    ollama::VERSION,
];

/// `GET /version`: vLLM's (and look-alikes') engine version.
pub const VERSION: &str = "/version";
/// `GET /metrics`: Prometheus text.
pub const METRICS: &str = "/metrics";

/// What a server answered on the probed paths, parsed. Paths it lacks stay `None`.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Endpoints {
    /// `GET /version`'s `version`.
    pub version: Option<String>,
    /// `GET /metrics`.
    pub metrics: Option<ServerMetrics>,
    /// llama.cpp's `GET /props`.
    pub llamacpp: Option<llamacpp::Props>,
    /// SGLang's `GET /get_server_info`.
    pub sglang: Option<sglang::ServerInfo>,
    /// TGI's `GET /info`.
    pub tgi: Option<tgi::Info>,
    /// Ollama's `GET /api/version`.
    pub ollama_version: Option<String>,
    /// `owned_by` of the models `/v1/models` lists.
    pub model_owners: Vec<String>,
}

/// Why an answer of an engine's endpoint could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The path.
    pub path: &'static str,
    /// What was wrong.
    pub reason: String,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

impl Endpoints {
    /// Reads the answer `body` of `path` (one of [`PROBE_PATHS`]). An answer
    /// in another engine's shape is no error, it only means "not this engine";
    /// `/version` and `/props` that are not JSON at all are.
    pub fn read(&mut self, path: &str, body: &[u8]) -> Result<(), Unreadable> {
        if path == METRICS {
            self.metrics = Some(ServerMetrics::parse(&String::from_utf8_lossy(body)));
            return Ok(());
        }
        let json = serde_json::from_slice::<Value>(body);
        let bad = |path: &'static str, e: &dyn std::fmt::Display| Unreadable {
            path,
            reason: format!("the answer is not JSON ({e})"),
        };
        match path {
            VERSION => {
                let v = json.map_err(|e| bad(VERSION, &e))?;
                self.version = v.get("version").and_then(Value::as_str).map(str::to_owned);
            }
            llamacpp::PROPS => {
                let v = json.map_err(|e| bad(llamacpp::PROPS, &e))?;
                self.llamacpp = llamacpp::Props::from_json(&v);
            }
            sglang::SERVER_INFO => {
                let v = json.map_err(|e| bad(sglang::SERVER_INFO, &e))?;
                self.sglang = sglang::ServerInfo::from_json(&v);
            }
            tgi::INFO => self.tgi = json.ok().as_ref().and_then(tgi::Info::from_json),
            ollama::VERSION => {
                self.ollama_version = json.ok().as_ref().and_then(ollama::version_from_json);
            }
            _ => {}
        }
        Ok(())
    }

    /// Which engine answered. Engine-specific endpoints win over the generic
    /// ones, since proxies and look-alikes copy those.
    pub fn engine(&self) -> Engine {
        if self.tgi.is_some() {
            Engine::Tgi
        } else if self.sglang.is_some() {
            Engine::Sglang
        } else if self.llamacpp.is_some() {
            Engine::LlamaCpp
        } else if self.ollama_version.is_some() {
            Engine::Ollama
        } else if self.metrics.as_ref().is_some_and(vllm::is_vllm)
            || self.model_owners.iter().any(|o| o == "vllm")
        {
            Engine::Vllm
        } else {
            Engine::Unknown
        }
    }

    /// The KV capacity the server reports, from whichever engine's endpoint
    /// has it: vLLM's `cache_config_info`, llama.cpp's `/props`, SGLang's
    /// `/get_server_info`.
    pub fn capacity(&self) -> Option<ReportedCapacity> {
        if let Some(cc) = self.metrics.as_ref().and_then(vllm::cache_config)
            && let (Some(num_gpu_blocks), Some(block_size)) = (cc.num_gpu_blocks, cc.block_size)
        {
            return Some(ReportedCapacity::Blocks {
                num_gpu_blocks,
                block_size,
            });
        }
        if let Some(props) = &self.llamacpp {
            return Some(ReportedCapacity::Slots {
                pool_tokens: props.pool_tokens(),
                slots: props.total_slots,
                unified: props.kv_unified.unwrap_or(true),
            });
        }
        let sglang = self.sglang?;
        Some(ReportedCapacity::TokenPool {
            tokens: sglang.max_total_num_tokens.get(),
            max_running_requests: sglang.max_running_requests,
        })
    }
}

/// A KV capacity as an engine reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReportedCapacity {
    /// Paged blocks (vLLM `vllm:cache_config_info`).
    Blocks {
        /// `num_gpu_blocks`, the reserved null block included.
        num_gpu_blocks: u64,
        /// Tokens per block.
        block_size: u64,
    },
    /// Slots sharing (or splitting) a token pool (llama.cpp `/props`).
    Slots {
        /// Tokens of the pool (one slot's window when unified).
        pool_tokens: u64,
        /// Requests served at once.
        slots: u32,
        /// Whether the slots share one pool.
        unified: bool,
    },
    /// A token pool and a cap on running requests (SGLang `/get_server_info`).
    TokenPool {
        /// `max_total_num_tokens`.
        tokens: u64,
        /// `max_running_requests`, when set.
        max_running_requests: Option<u32>,
    },
}

impl ReportedCapacity {
    /// Where the figure comes from, in words.
    pub fn source(&self) -> &'static str {
        match self {
            ReportedCapacity::Blocks { .. } => {
                "/metrics vllm:cache_config_info (num_gpu_blocks × block_size)"
            }
            ReportedCapacity::Slots { .. } => "llama.cpp /props (n_ctx, total_slots)",
            ReportedCapacity::TokenPool { .. } => "SGLang /get_server_info (max_total_num_tokens)",
        }
    }
}

/// Requests an engine's scheduler runs and queues, at one scrape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedulerState {
    /// Requests running.
    pub running: f64,
    /// Requests waiting.
    pub waiting: f64,
}

/// Each engine's running and waiting gauges.
const SCHEDULER_GAUGES: [(Engine, &str, &str); 4] = [
    (Engine::Vllm, vllm::RUNNING, vllm::WAITING),
    (Engine::Sglang, sglang::RUNNING, sglang::WAITING),
    (Engine::LlamaCpp, llamacpp::RUNNING, llamacpp::WAITING),
    (Engine::Tgi, tgi::RUNNING, tgi::WAITING),
];

impl SchedulerState {
    /// Running and waiting from the first engine whose gauges the page has
    /// (summed over label sets), whatever engine serves it: a proxy or a
    /// look-alike may export another engine's names.
    pub fn from_metrics(metrics: &ServerMetrics) -> Option<SchedulerState> {
        SCHEDULER_GAUGES.iter().find_map(|(_, running, waiting)| {
            Some(SchedulerState {
                running: metrics.sum(running)?,
                waiting: metrics.sum(waiting)?,
            })
        })
    }
}

/// The server's own count of output tokens so far, from a counter that moves
/// as tokens are generated (vLLM's `vllm:generation_tokens_total`, summed over
/// label sets). Counters that move only when requests end (llama.cpp's) are
/// not used: they cannot frame a window.
pub fn generation_tokens(metrics: &ServerMetrics) -> Option<f64> {
    metrics.sum(vllm::GENERATION_TOKENS)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(path: &str, body: &Value) -> Endpoints {
        let mut e = Endpoints::default();
        e.read(path, body.to_string().as_bytes()).unwrap();
        e
    }

    #[test]
    fn engines_are_told_by_their_own_endpoints() {
        assert_eq!(Endpoints::default().engine(), Engine::Unknown);
        let mut e = Endpoints::default();
        e.read(METRICS, b"vllm:num_requests_running 0\n").unwrap();
        assert_eq!(e.engine(), Engine::Vllm);
        assert_eq!(
            read(ollama::VERSION, &ollama::version_json("0.12")).engine(),
            Engine::Ollama
        );
        assert_eq!(
            read(llamacpp::PROPS, &llamacpp::props_json(8, 1, "m", "b1")).engine(),
            Engine::LlamaCpp
        );
        assert_eq!(
            read(tgi::INFO, &tgi::info_json("m", 8, 1, "3")).engine(),
            Engine::Tgi
        );
        assert_eq!(
            read(
                sglang::SERVER_INFO,
                &sglang::server_info_json(8, 1, 8, "m", "0.5")
            )
            .engine(),
            Engine::Sglang
        );
        // Another engine's page on the same path is "not this engine", not an error.
        assert_eq!(
            read(tgi::INFO, &json!({"name": "x"})).engine(),
            Engine::Unknown
        );
        let mut e = Endpoints::default();
        assert!(e.read(VERSION, b"<html>").is_err());
        assert!(e.read(ollama::VERSION, b"<html>").is_ok());
    }

    #[test]
    fn capacity_comes_from_whichever_engine_reports_it() {
        let mut e = Endpoints::default();
        e.read(
            METRICS,
            b"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\"} 1\n",
        )
        .unwrap();
        assert_eq!(
            e.capacity(),
            Some(ReportedCapacity::Blocks {
                num_gpu_blocks: 100,
                block_size: 16
            })
        );
        let s = read(
            sglang::SERVER_INFO,
            &sglang::server_info_json(9_000, 8, 8, "m", "0"),
        );
        assert_eq!(
            s.capacity(),
            Some(ReportedCapacity::TokenPool {
                tokens: 9_000,
                max_running_requests: Some(8)
            })
        );
        assert!(s.capacity().unwrap().source().contains("get_server_info"));
    }

    #[test]
    fn scheduler_gauges_are_read_by_any_engines_names() {
        let vllm = ServerMetrics::parse(
            "vllm:num_requests_running{engine=\"0\"} 3\nvllm:num_requests_running{engine=\"1\"} 1\nvllm:num_requests_waiting 2\n",
        );
        assert_eq!(
            SchedulerState::from_metrics(&vllm),
            Some(SchedulerState {
                running: 4.0,
                waiting: 2.0
            })
        );
        let llama =
            ServerMetrics::parse("llamacpp:requests_processing 2\nllamacpp:requests_deferred 5\n");
        assert_eq!(SchedulerState::from_metrics(&llama).unwrap().waiting, 5.0);
        assert!(SchedulerState::from_metrics(&ServerMetrics::parse("x 1\n")).is_none());
        assert_eq!(
            generation_tokens(&ServerMetrics::parse("vllm:generation_tokens_total 7\n")),
            Some(7.0)
        );
    }
}
