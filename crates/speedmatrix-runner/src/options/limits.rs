//! Every numeric option's range, in one place: a flag (and the study `[run]` key of the
//! same name) that takes a duration, a count or a rate is read by its [`Limit`] here, so a
//! value out of range is refused where it is parsed, with the flag and the limit named,
//! instead of overflowing a clock or a buffer later. Each flag has a module with its
//! [`Limit`] (`LIMIT`), `parse` for clap's `value_parser`, and `one` / `opt` / `opt_list`
//! for serde's `deserialize_with`.
//!
//! ```
//! use speedmatrix_runner::limits;
//!
//! assert!(limits::window::parse("30s").is_ok());
//! let e = limits::window::parse("10000000000000000000s").unwrap_err();
//! assert_eq!(e, "--duration must be at most 1day, not 10000000000000000000s");
//! assert!(limits::tensor_parallel_size::parse("0").unwrap_err().contains("at least 1"));
//! ```

use std::fmt;
use std::time::Duration;

use speedmatrix_units::{Concurrency, RequestRate, Tokens};

/// The longest prompt or output, in tokens: the longest prompt the workload crate builds
/// ([`speedmatrix_workload::MAX_PROMPT_TOKENS`]), beyond any model's context.
pub const MAX_CONTEXT_TOKENS: u64 = speedmatrix_workload::MAX_PROMPT_TOKENS;

/// The most requests one cell may plan (a burst, the streams of a sustained cell, a rate
/// cell's arrivals, a conversation cell's turns): each is held in memory with its prompt
/// and its record until the cell is summarized.
pub const MAX_REQUESTS_PER_CELL: u64 = 100_000;

/// The longest window or sending time of a cell.
pub const MAX_WINDOW: Duration = Duration::from_secs(24 * 3_600);

/// A value a [`Limit`] can hold: parsed from the flag's text, ordered, and shown as the
/// flag spells it.
pub trait Bounded: Sized + Copy + PartialOrd {
    /// The value of `text`, or why it is not one.
    fn parse_text(text: &str) -> Result<Self, String>;
    /// The value as the flag spells it.
    fn show(&self) -> String;
}

impl Bounded for Duration {
    fn parse_text(text: &str) -> Result<Self, String> {
        humantime::parse_duration(text.trim()).map_err(|e| e.to_string())
    }
    fn show(&self) -> String {
        humantime::format_duration(*self).to_string()
    }
}

macro_rules! bounded_by_from_str {
    ($($ty:ty),*) => {$(
        impl Bounded for $ty {
            fn parse_text(text: &str) -> Result<Self, String> {
                text.trim().parse::<$ty>().map_err(|e| e.to_string())
            }
            fn show(&self) -> String {
                self.to_string()
            }
        }
    )*};
}

bounded_by_from_str!(u32, u64, usize, Tokens, Concurrency, RequestRate);

impl Bounded for f64 {
    fn parse_text(text: &str) -> Result<Self, String> {
        match text.trim().parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            Ok(v) => Err(format!("{v} is not a finite number")),
            Err(e) => Err(e.to_string()),
        }
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

/// The range a flag accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit<T> {
    /// The flag as the command line spells it.
    pub flag: &'static str,
    /// The least value.
    pub min: T,
    /// Whether `min` itself is refused (a share above zero).
    pub min_excluded: bool,
    /// The greatest value.
    pub max: T,
}

impl<T: Bounded> Limit<T> {
    /// The value of `text` when it is one and in range; else why not, naming the flag and
    /// the limit.
    pub fn parse(&self, text: &str) -> Result<T, String> {
        let text = text.trim();
        let v = T::parse_text(text).map_err(|e| format!("{} {text}: {e}", self.flag))?;
        self.judge(v, text)
    }

    /// `v` when it is in range; else why not.
    pub fn check(&self, v: T) -> Result<T, String> {
        self.judge(v, &v.show())
    }

    fn judge(&self, v: T, shown: &str) -> Result<T, String> {
        let (bound, limit) = if v < self.min || (self.min_excluded && v == self.min) {
            let bound = if self.min_excluded {
                "above"
            } else {
                "at least"
            };
            (bound, &self.min)
        } else if v > self.max {
            ("at most", &self.max)
        } else {
            return Ok(v);
        };
        Err(format!(
            "{} must be {bound} {}, not {shown}",
            self.flag,
            limit.show()
        ))
    }
}

impl<T: Bounded> fmt::Display for Limit<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let low = if self.min_excluded { "above" } else { "from" };
        write!(
            f,
            "{}: {low} {} to {}",
            self.flag,
            self.min.show(),
            self.max.show()
        )
    }
}

macro_rules! limits {
    ($(
        $(#[$doc:meta])*
        $name:ident: $ty:ty = ($flag:literal, $min:expr, $max:expr $(, $excluded:ident)?);
    )*) => {$(
        $(#[$doc])*
        pub mod $name {
            #[allow(unused_imports, reason = "not every limit needs every unit")]
            use super::*;

            /// The range.
            pub const LIMIT: Limit<$ty> = Limit {
                flag: $flag,
                min: $min,
                min_excluded: limits!(@excluded $($excluded)?),
                max: $max,
            };

            /// The flag's text, checked (clap's `value_parser`).
            pub fn parse(text: &str) -> Result<$ty, String> {
                LIMIT.parse(text)
            }

            /// A required value (serde's `deserialize_with`).
            pub fn one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                crate::options::text::one_with(d, parse)
            }

            /// An optional value (serde's `deserialize_with`).
            pub fn opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<$ty>, D::Error> {
                one(d).map(Some)
            }

            /// An optional list (serde's `deserialize_with`).
            pub fn opt_list<'de, D: serde::Deserializer<'de>>(
                d: D,
            ) -> Result<Option<Vec<$ty>>, D::Error> {
                crate::options::text::list_with(d, parse).map(Some)
            }
        }
    )*};
    (@excluded excluded) => { true };
    (@excluded) => { false };
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const HOUR: Duration = Duration::from_secs(3_600);

const fn concurrency(n: u32) -> Concurrency {
    match Concurrency::new(n) {
        Some(c) => c,
        None => Concurrency::ONE,
    }
}

const fn rate_milli(n: u64) -> RequestRate {
    match RequestRate::from_milli(n) {
        Some(r) => r,
        None => panic!("a rate limit is above zero"),
    }
}

/// The most requests a cell may plan, as a count of requests.
const MAX_REQUESTS: u32 = MAX_REQUESTS_PER_CELL as u32;

limits! {
    /// `--duration`: the measurement window of a cell (and a rate cell's sending time).
    window: Duration = ("--duration", ms(1), MAX_WINDOW);
    /// `--drain`: how long a rate cell waits for its last requests.
    drain: Duration = ("--drain", ms(1), secs(24 * 3_600));
    /// `--telemetry-interval`: between GPU and host samples.
    telemetry_interval: Duration = (
        "--telemetry-interval",
        speedmatrix_telemetry::MIN_INTERVAL,
        speedmatrix_telemetry::MAX_INTERVAL
    );
    /// `--metrics-interval`: between scrapes of the server's /metrics in a window.
    metrics_interval: Duration = ("--metrics-interval", ms(50), HOUR);
    /// `--inject-settle`: how long the streams are watched after an injected prompt.
    inject_settle: Duration = ("--inject-settle", ms(1), HOUR);
    /// `--connect-timeout`.
    connect_timeout: Duration = ("--connect-timeout", ms(1), HOUR);
    /// `--idle-timeout`: also the allowance for a response to start, in every deadline.
    idle_timeout: Duration = ("--idle-timeout", ms(1), secs(24 * 3_600));

    /// `--contexts`: decode context lengths.
    contexts: Tokens = ("--contexts", Tokens::ZERO, Tokens::new(MAX_CONTEXT_TOKENS));
    /// `--max-tokens`: output tokens of every decode request.
    max_tokens: Tokens = ("--max-tokens", Tokens::new(1), Tokens::new(MAX_CONTEXT_TOKENS));
    /// `--inject`: the injected prompt's length.
    inject: Tokens = ("--inject", Tokens::new(1), Tokens::new(MAX_CONTEXT_TOKENS));
    /// `--question-tokens`: each later question of a conversation.
    question_tokens: Tokens = ("--question-tokens", Tokens::ZERO, Tokens::new(MAX_CONTEXT_TOKENS));
    /// `--kv-capacity-tokens`: the KV cache, when the server does not say.
    kv_capacity_tokens: Tokens = ("--kv-capacity-tokens", Tokens::new(1), Tokens::new(1 << 40));
    /// `--concurrency`: requests at once (streams, conversations, or the in-flight cap).
    concurrency: Concurrency = ("--concurrency", Concurrency::ONE, concurrency(MAX_REQUESTS));
    /// `--requests`: burst sizes, or the requests each rate cell sends.
    requests: Concurrency = ("--requests", Concurrency::ONE, concurrency(MAX_REQUESTS));
    /// `--request-rate`: requests per second of a rate cell.
    request_rate: RequestRate = ("--request-rate", rate_milli(1), rate_milli(100_000_000));
    /// `--prefill-repeats`: cold prefill requests per context.
    prefill_repeats: u32 = ("--prefill-repeats", 1, 10_000);
    /// `--repeats`: measurements of each sustained-decode cell.
    repeats: u32 = ("--repeats", 1, 100);
    /// `--turns`: turns of each conversation.
    turns: u32 = ("--turns", 1, 1_000);
    /// `--search-steps`: cells of a context's search.
    search_steps: usize = ("--search-steps", 1, 1_000);
    /// `--trace-speed`: how much faster a trace is replayed.
    trace_speed: f64 = ("--trace-speed", 0.001, 1_000.0);
    /// `--trace-block-tokens`: tokens per `hash_ids` block of a trace.
    trace_block_tokens: Tokens = ("--trace-block-tokens", Tokens::new(1), Tokens::new(1 << 20));
    /// `--burstiness`: the gamma shape of `--arrival gamma`.
    burstiness: f64 = ("--burstiness", 0.01, 100.0);
    /// `--search-floor`: output tok/s a searched cell must reach.
    search_floor: f64 = ("--search-floor", 0.0, 1e9, excluded);

    /// `--gpu-memory-utilization` (vLLM).
    gpu_memory_utilization: f64 = ("--gpu-memory-utilization", 0.0, 1.0, excluded);
    /// `--mem-fraction-static` (SGLang).
    mem_fraction_static: f64 = ("--mem-fraction-static", 0.0, 1.0, excluded);
    /// `--max-model-len`.
    max_model_len: Tokens = ("--max-model-len", Tokens::new(1), Tokens::new(MAX_CONTEXT_TOKENS));
    /// `--max-num-seqs` (vLLM).
    max_num_seqs: u32 = ("--max-num-seqs", 1, 1 << 20);
    /// `--max-num-batched-tokens` (vLLM).
    max_num_batched_tokens: u64 = ("--max-num-batched-tokens", 1, MAX_CONTEXT_TOKENS);
    /// `--block-size` (vLLM).
    block_size: u64 = ("--block-size", 1, 1 << 20);
    /// `--tensor-parallel-size`.
    tensor_parallel_size: u32 = ("--tensor-parallel-size", 1, 4_096);
    /// `--pipeline-parallel-size` (vLLM).
    pipeline_parallel_size: u32 = ("--pipeline-parallel-size", 1, 4_096);
    /// `--data-parallel-size` (vLLM).
    data_parallel_size: u32 = ("--data-parallel-size", 1, 4_096);
    /// `--num-speculative-tokens`.
    num_speculative_tokens: u64 = ("--num-speculative-tokens", 0, 1_024);
    /// `--cpu-kvcache-space-gib` (vLLM's CPU backend).
    cpu_kvcache_space_gib: u64 = ("--cpu-kvcache-space-gib", 1, 1 << 20);
    /// `--chunked-prefill-size` (SGLang).
    chunked_prefill_size: u64 = ("--chunked-prefill-size", 1, MAX_CONTEXT_TOKENS);
    /// `--page-size` (SGLang).
    page_size: u64 = ("--page-size", 1, 1 << 20);
    /// `--max-running-requests` (SGLang).
    max_running_requests: u32 = ("--max-running-requests", 1, 1 << 20);
    /// `--ctx-size` (llama.cpp; 0 is the model's training context).
    ctx_size: u64 = ("--ctx-size", 0, MAX_CONTEXT_TOKENS);
    /// `--parallel` (llama.cpp).
    parallel: u32 = ("--parallel", 1, 1 << 16);
    /// `--ubatch-size` (llama.cpp).
    ubatch_size: u64 = ("--ubatch-size", 1, MAX_CONTEXT_TOKENS);
}

/// `--prefill-contexts`: cold prefill prompt lengths, or `none`.
pub mod prefill_contexts {
    use super::*;
    use crate::options::ContextOrNone;

    /// The range of a length.
    pub const LIMIT: Limit<Tokens> = Limit {
        flag: "--prefill-contexts",
        min: Tokens::new(1),
        min_excluded: false,
        max: Tokens::new(MAX_CONTEXT_TOKENS),
    };

    /// A length in range, or `none` (clap's `value_parser`).
    pub fn parse(text: &str) -> Result<ContextOrNone, String> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(ContextOrNone(None));
        }
        LIMIT.parse(text).map(|t| ContextOrNone(Some(t)))
    }

    /// An optional list (serde's `deserialize_with`).
    pub fn opt_list<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<ContextOrNone>>, D::Error> {
        crate::options::text::list_with(d, parse).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_flag_names_itself_and_its_limit() {
        assert_eq!(window::parse(" 2m ").unwrap(), Duration::from_secs(120));
        for (text, why) in [
            (
                "10000000000000000000s",
                "--duration must be at most 1day, not 10000000000000000000s",
            ),
            ("0s", "--duration must be at least 1ms, not 0s"),
            ("soon", "--duration soon:"),
        ] {
            let e = window::parse(text).unwrap_err();
            assert!(e.starts_with(why), "{e}");
        }
        let e = drain::parse("18446744073709551615s").unwrap_err();
        assert!(e.contains("--drain") && e.contains("at most 1day"), "{e}");
        let e = telemetry_interval::parse("18446744073709551615s").unwrap_err();
        assert!(
            e.contains("--telemetry-interval") && e.contains("at most 1h"),
            "{e}"
        );
        assert!(
            telemetry_interval::parse("5ms")
                .unwrap_err()
                .contains("at least 10ms")
        );
        assert_eq!(tensor_parallel_size::parse("8"), Ok(8));
        let e = tensor_parallel_size::parse("0").unwrap_err();
        assert_eq!(e, "--tensor-parallel-size must be at least 1, not 0");
        let e = gpu_memory_utilization::parse("0").unwrap_err();
        assert!(e.contains("must be above 0"), "{e}");
        assert!(gpu_memory_utilization::parse("NaN").is_err());
        assert!(gpu_memory_utilization::parse("1").is_ok());
        let e = concurrency::parse("4294967295").unwrap_err();
        assert!(e.contains("at most 100000"), "{e}");
        let e = max_tokens::parse("18446744073709551615").unwrap_err();
        assert!(e.contains("at most 16,384K"), "{e}");
        assert_eq!(prefill_contexts::parse("None").unwrap().0, None);
        assert!(
            prefill_contexts::parse("0")
                .unwrap_err()
                .contains("at least 1")
        );
    }

    #[test]
    fn the_limits_are_ordered() {
        fn ordered<T: Bounded>(l: Limit<T>) {
            assert!(l.min <= l.max, "{}", l.flag);
            assert!(l.check(l.max).is_ok() && l.check(l.min).is_ok() != l.min_excluded);
        }
        ordered(window::LIMIT);
        ordered(drain::LIMIT);
        ordered(telemetry_interval::LIMIT);
        ordered(metrics_interval::LIMIT);
        ordered(concurrency::LIMIT);
        ordered(requests::LIMIT);
        ordered(request_rate::LIMIT);
        ordered(trace_speed::LIMIT);
        ordered(trace_block_tokens::LIMIT);
        ordered(search_floor::LIMIT);
        ordered(gpu_memory_utilization::LIMIT);
        ordered(ctx_size::LIMIT);
    }
}
