//! Profiles: what the simulated engine is (KV cache, limits) and how fast it runs (cost model).

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::SimError;

/// Name of the built-in profile calibrated to the seed matrix (RTX 3090, 4B FP8 model, vLLM 0.32).
pub const RTX3090_QWEN35_4B_FP8: &str = "rtx3090-qwen3.5-4b-fp8";
/// Name of the small, fast built-in profile for tests (millisecond steps, small KV cache).
pub const TINY: &str = "tiny";
/// Name of the built-in profile whose steps take no time at all, for client throughput benchmarks.
pub const FREE_RUNNING: &str = "free-running";

/// A simulated engine: its KV cache, its scheduler limits, its speed and its faults.
///
/// Load one with [`Profile::builtin`], [`Profile::from_file`] (a JSON file) or
/// [`Profile::load`] (either). Every field is public so a what-if run can start from a built-in
/// profile and change one knob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The profile's own name (shown by `speedmatrix sim`).
    pub name: String,
    /// The model id the server answers to (`/v1/models`, the `model` field of requests).
    pub served_model_name: String,
    /// Longest sequence (prompt + output) in tokens; longer prompts get HTTP 400.
    pub max_model_len: u32,
    /// Most requests running at once; more wait in the queue.
    pub max_num_seqs: u32,
    /// Token budget of one engine step (chunked prefill splits long prompts at this size).
    pub max_num_batched_tokens: u32,
    /// Tokens per KV block.
    pub block_size: u32,
    /// KV blocks in the pool, including vLLM's reserved null block (so `num_gpu_blocks - 1` are usable).
    pub num_gpu_blocks: u32,
    /// Whether full prompt blocks are cached and reused across requests.
    pub enable_prefix_caching: bool,
    /// A hybrid model's recurrent state (Gated DeltaNet, Mamba): blocks each running request
    /// holds besides its attention blocks, from the shared pool — one per recurrent KV group,
    /// two with prefix caching in vLLM's `align` mode (the state being written and the last
    /// block-aligned one). Taken when the request is admitted, given back when it finishes
    /// or is preempted. 0 (the default): a full-attention model.
    #[serde(default)]
    pub state_blocks_per_request: u32,
    /// KV groups of full-attention layers (vLLM groups a hybrid model's layers into groups of
    /// equal size, each with its own blocks): a request holds `cdiv(tokens, block_size)` in
    /// each. Default 1.
    #[serde(default = "one_group")]
    pub attention_groups: u32,
    /// KV groups of sliding-window layers (Gemma 2/3, gpt-oss): a request holds at most the
    /// blocks of its last `sliding_window` tokens in each, `min(cdiv(tokens, block_size),
    /// cdiv(sliding_window − 1, block_size) + 1)`. Default 0.
    #[serde(default)]
    pub sliding_groups: u32,
    /// The sliding layers' window in tokens (with `sliding_groups`).
    #[serde(default)]
    pub sliding_window: u32,
    /// The simulated model "ends its answer" (finish reason `stop`) after this many tokens unless the
    /// request sets `ignore_eos`; `None`: it never stops by itself.
    #[serde(default)]
    pub eos_after_tokens: Option<u32>,
    /// How long engine steps take.
    pub cost: CostModel,
    /// Virtual seconds per wall-clock second: 2.0 runs everything twice as fast. Ignored when
    /// `free_running` is set.
    #[serde(default = "one")]
    pub time_scale: f64,
    /// Steps take no time at all: the engine produces tokens as fast as the process can.
    #[serde(default)]
    pub free_running: bool,
    /// The tokenizer prompts are counted with: `bundled` (the default, the one speedmatrix uses
    /// when not told otherwise), a `tokenizer.json` file, a model folder, or a Hugging Face id in
    /// the local cache, as `speedmatrix_workload::Tokenizer::load` accepts.
    #[serde(default)]
    pub tokenizer: Option<String>,
    /// Faults applied to every request, in the `x-sim-fault` header grammar (see [`crate::Fault`]);
    /// a request's own header replaces them.
    #[serde(default)]
    pub faults: Option<String>,
    /// Which engine's endpoint reports the KV capacity (default: vLLM's `/metrics`).
    #[serde(default)]
    pub capacity_api: CapacityApi,
    /// Which engine's stream format the server speaks (default: vLLM's); see [`Dialect`].
    #[serde(default)]
    pub dialect: Dialect,
    /// Tokens each decode step gives a request, cycled step by step (speculative decoding:
    /// the accepted draft tokens plus one, e.g. `[3, 4]`); the first token after prefill is
    /// always one. Default `[1]`.
    #[serde(default = "one_token_per_step")]
    pub tokens_per_step: Vec<u32>,
    /// The model and launch the profile stands for, when it stands for a real one: a client
    /// that predicts capacity (`speedmatrix run` on the embedded simulator) reads its KV layout
    /// from them, as it would from `--model-config` and the engine flags against a real server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ProfileModel>,
    /// Where a profile's speed came from when it was fitted (`speedmatrix
    /// calibrate`) or predicted (`speedmatrix predict --simulate`): a run
    /// against it is a what-if, and cells past what was measured are
    /// extrapolations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<ProfileOrigin>,
    /// Draft tokens proposed per decode step when the engine speculates: `/metrics` then
    /// carries vLLM's `vllm:spec_decode_*` counters, each step one draft of this many tokens
    /// of which `tokens_per_step − 1` are accepted (so every count there is at most this + 1).
    /// `None` (the default): no speculative decoding, no such counters, as vLLM.
    #[serde(default)]
    pub num_speculative_tokens: Option<u32>,
    /// What the simulated model writes (default: words); see [`TextStyle`].
    #[serde(default)]
    pub text_style: TextStyle,
    /// Keep the response body open this many milliseconds after `data: [DONE]` (a server or
    /// proxy that is slow to close); `None`: close at once.
    #[serde(default)]
    pub hold_open_after_done_ms: Option<u64>,
    /// The streams' Content-Type: `None` for `text/event-stream; charset=utf-8`, an empty
    /// string to send none at all, anything else verbatim.
    #[serde(default)]
    pub stream_content_type: Option<String>,
}

/// The stream format of one engine, from its documented shapes and source (see
/// `docs/metrics.md` for the facts each is built from).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dialect {
    /// vLLM: `continuous_usage_stats` honoured (cumulative usage on every chunk), a final
    /// usage chunk with `choices: []`, a chunk per engine step (several tokens each when the
    /// client reads slower or the engine speculates).
    #[default]
    Vllm,
    /// SGLang: like vLLM on chat; its completions ignore `continuous_usage_stats` and send
    /// usage at the end only. Answers `GET /get_server_info`.
    Sglang,
    /// llama.cpp's `llama-server`: no continuous usage, but `timings.predicted_n` (the running
    /// output count) on every chunk when the request sets `timings_per_token`; incomplete
    /// UTF-8 held back, so a chunk can carry several tokens. Answers `GET /props`.
    Llamacpp,
    /// Hugging Face TGI: one event per token (empty text while a character is incomplete),
    /// `finish_reason: ""` on every completions chunk but the last, usage at the end only.
    /// Answers `GET /info`.
    Tgi,
    /// Ollama: no running count (its completions carry an all-zero `usage` on every chunk),
    /// usage at the end only, incomplete UTF-8 held back. Answers `GET /api/version`.
    Ollama,
    /// An OpenAI-style proxy in front of vLLM that drops `continuous_usage_stats`: vLLM's
    /// chunks with usage at the end only.
    OpenaiProxy,
}

/// What the simulated model writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TextStyle {
    /// A space and a short word per token: any sequence re-tokenizes to the same tokens.
    #[default]
    Words,
    /// Two-byte characters (`é`, `ñ`, …) written as two byte tokens each, so half of every
    /// character is incomplete UTF-8: engines that hold it back send two tokens per chunk.
    /// Needs a byte-level tokenizer (the bundled one is).
    TwoByteChars,
}

fn one_token_per_step() -> Vec<u32> {
    vec![1]
}

/// The endpoint through which the simulator tells its KV capacity, in the shape of one engine.
///
/// The pool itself does not change: `num_gpu_blocks − 1` usable blocks of `block_size` tokens
/// and `max_num_seqs` requests at most, reported as that engine reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CapacityApi {
    /// vLLM: `vllm:cache_config_info` on `/metrics`.
    #[default]
    Vllm,
    /// llama.cpp: `GET /props` with the slot window (`default_generation_settings.n_ctx`, the
    /// usable tokens) and `total_slots` (`max_num_seqs`), like `llama-server --kv-unified`.
    Llamacpp,
    /// SGLang: `GET /get_server_info` with `max_total_num_tokens` (the usable tokens) and
    /// `max_running_requests` (`max_num_seqs`).
    Sglang,
}

fn one() -> f64 {
    1.0
}

fn one_group() -> u32 {
    1
}

/// A real model and launch behind a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileModel {
    /// The model's Hugging Face `config.json`, as is.
    pub config: serde_json::Value,
    /// The launch in `speedmatrix capacity`'s flags (`--gpu rtx3090
    /// --gpu-memory-utilization 0.94 …`).
    pub capacity_flags: Vec<String>,
}

/// The seed page's model: Agents-A1-4B-FP8's config.json (a Qwen3.5 hybrid).
const SEED_CONFIG: &str = include_str!("../data/agents-a1-4b-fp8.config.json");

/// Where a fitted or predicted profile's speed came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileOrigin {
    /// `calibrated` (fitted to a measured run) or `predicted`.
    pub kind: String,
    /// What it came from, in words (the run's model and hardware, or the
    /// prediction's GPU and factors).
    pub source: String,
    /// The most streams of a measured cell it was fitted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted_concurrency_max: Option<u32>,
    /// The longest context of a measured cell it was fitted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted_context_max: Option<u64>,
    /// The longest cold prompt it was fitted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted_prompt_max: Option<u64>,
}

/// How long one engine step takes, as a function of what it computes.
///
/// A step runs prefill chunks and decode tokens together (continuous batching):
///
/// ```text
/// step = step_base
///      + Σ over prefill chunks of n new tokens after c cached ones:
///            n · prefill_per_token + n · (c + n/2) · prefill_per_token_context
///      + d · decode_per_seq + C · decode_per_context_token · d^(−decode_batch_exponent)
/// ```
///
/// where `d` is the number of requests decoding one token in the step and `C` the total context
/// (tokens already in the KV cache) of those requests. The prefill terms are the linear work
/// (weights) and attention over the already-cached context (quadratic over a whole prompt). The
/// decode terms are a fixed per-sequence cost and attention reads of the KV cache, which a larger
/// batch reads more efficiently (an empirical exponent; 0 means no batching gain).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// Fixed cost of any step, microseconds.
    pub step_base_us: f64,
    /// Prefill cost per new prompt token, microseconds.
    pub prefill_per_token_us: f64,
    /// Prefill attention cost per (new token × context token), nanoseconds.
    pub prefill_per_token_context_ns: f64,
    /// Decode cost per sequence in the batch, microseconds.
    pub decode_per_seq_us: f64,
    /// Decode attention cost per context token in the batch, nanoseconds (at batch size 1).
    pub decode_per_context_token_ns: f64,
    /// How much a larger batch reduces the per-context-token decode cost (`d^-exponent`).
    pub decode_batch_exponent: f64,
    /// Time the server's front end spends on each request before the engine sees it
    /// (HTTP, tokenizing, scheduling: vLLM's API server), microseconds. Requests pass the
    /// front end one at a time, so N arriving together reach the engine staggered: this is
    /// what makes a warm request's TTFT grow with the number of requests sent with it.
    #[serde(default)]
    pub frontend_per_request_us: f64,
    /// Front-end time per prompt token (tokenizing, hashing for the prefix cache), nanoseconds.
    #[serde(default)]
    pub frontend_per_prompt_token_ns: f64,
}

impl CostModel {
    /// Time of a prefill chunk of `tokens` new tokens after `cached` tokens already in the cache,
    /// without the step's base cost.
    pub fn prefill_chunk(&self, tokens: u64, cached: u64) -> Duration {
        let n = tokens as f64;
        let attention_pairs = n * (cached as f64 + n / 2.0);
        secs(
            n * self.prefill_per_token_us * 1e-6
                + attention_pairs * self.prefill_per_token_context_ns * 1e-9,
        )
    }

    /// Time of the decode part of a step: `batch` sequences with `context_tokens` tokens of KV
    /// cache between them, without the step's base cost.
    pub fn decode(&self, batch: u64, context_tokens: u64) -> Duration {
        if batch == 0 {
            return Duration::ZERO;
        }
        let d = batch as f64;
        let attention = context_tokens as f64
            * self.decode_per_context_token_ns
            * 1e-9
            * d.powf(-self.decode_batch_exponent);
        secs(d * self.decode_per_seq_us * 1e-6 + attention)
    }

    /// The front end's time on one request of `prompt` tokens.
    pub fn frontend(&self, prompt: u64) -> Duration {
        secs(
            self.frontend_per_request_us * 1e-6
                + prompt as f64 * self.frontend_per_prompt_token_ns * 1e-9,
        )
    }

    /// The fixed cost of a step.
    pub fn step_base(&self) -> Duration {
        secs(self.step_base_us * 1e-6)
    }

    /// Time of one decode step (base included) for `batch` sequences of `context` tokens each.
    pub fn decode_step(&self, batch: u64, context: u64) -> Duration {
        self.step_base() + self.decode(batch, batch * context)
    }

    /// Time to prefill a `prompt`-token prompt alone, in chunks of `chunk` tokens, base included:
    /// the simulated TTFT of one request on an idle server with a cold cache.
    pub fn prefill(&self, prompt: u64, chunk: u64) -> Duration {
        let chunk = chunk.max(1);
        let mut done = 0;
        let mut total = Duration::ZERO;
        while done < prompt {
            let n = chunk.min(prompt - done);
            total += self.step_base() + self.prefill_chunk(n, done);
            done += n;
        }
        total
    }

    fn check(&self) -> Result<(), String> {
        let fields = [
            ("step_base_us", self.step_base_us),
            ("prefill_per_token_us", self.prefill_per_token_us),
            (
                "prefill_per_token_context_ns",
                self.prefill_per_token_context_ns,
            ),
            ("decode_per_seq_us", self.decode_per_seq_us),
            (
                "decode_per_context_token_ns",
                self.decode_per_context_token_ns,
            ),
            ("decode_batch_exponent", self.decode_batch_exponent),
            ("frontend_per_request_us", self.frontend_per_request_us),
            (
                "frontend_per_prompt_token_ns",
                self.frontend_per_prompt_token_ns,
            ),
        ];
        for (name, value) in fields {
            if !value.is_finite() || value < 0.0 {
                return Err(format!(
                    "cost.{name} must be a finite number ≥ 0, got {value}"
                ));
            }
        }
        Ok(())
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

impl Profile {
    /// The names of the built-in profiles.
    pub const BUILTIN_NAMES: [&'static str; 3] = [RTX3090_QWEN35_4B_FP8, TINY, FREE_RUNNING];

    /// A built-in profile by name, or `None`.
    ///
    /// - `rtx3090-qwen3.5-4b-fp8`: calibrated to the seed matrix (RTX 3090 24 GB, vLLM 0.32,
    ///   `--max-model-len 262144 --max-num-seqs 128`, prefix caching on; the seed's hybrid model
    ///   laid out as vLLM does: 1,003 blocks of 528 tokens, six of state per request).
    /// - `tiny`: 2,048-token context, 65,536 KV tokens, 2–3 ms steps, for tests.
    /// - `free-running`: `tiny` whose steps take no time, for client throughput benchmarks.
    pub fn builtin(name: &str) -> Option<Profile> {
        match name {
            RTX3090_QWEN35_4B_FP8 => Some(rtx3090()),
            TINY => Some(tiny()),
            FREE_RUNNING => Some(Profile {
                name: FREE_RUNNING.to_owned(),
                free_running: true,
                ..tiny()
            }),
            _ => None,
        }
    }

    /// Reads a profile from a JSON file.
    pub fn from_file(path: &Path) -> Result<Profile, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::ProfileRead {
            path: path.to_owned(),
            source,
        })?;
        Profile::from_json(&text).map_err(|err| match err {
            SimError::ProfileParse { source, .. } => SimError::ProfileParse {
                origin: path.display().to_string(),
                source,
            },
            other => other,
        })
    }

    /// Parses a profile from JSON text and checks it.
    pub fn from_json(text: &str) -> Result<Profile, SimError> {
        let profile: Profile =
            serde_json::from_str(text).map_err(|source| SimError::ProfileParse {
                origin: "JSON text".to_owned(),
                source,
            })?;
        profile.validate()?;
        Ok(profile)
    }

    /// A built-in name or else a path to a JSON profile file.
    pub fn load(name_or_path: &str) -> Result<Profile, SimError> {
        if let Some(profile) = Profile::builtin(name_or_path) {
            return Ok(profile);
        }
        let path = Path::new(name_or_path);
        if path.exists() {
            return Profile::from_file(path);
        }
        Err(SimError::UnknownProfile {
            name: name_or_path.to_owned(),
        })
    }

    /// Checks that the profile describes an engine that can serve a `max_model_len` request.
    pub fn validate(&self) -> Result<(), SimError> {
        let invalid = |reason: String| {
            Err(SimError::InvalidProfile {
                name: self.name.clone(),
                reason,
            })
        };
        if self.served_model_name.is_empty() {
            return invalid("served_model_name is empty".to_owned());
        }
        for (field, value) in [
            ("max_model_len", self.max_model_len),
            ("max_num_seqs", self.max_num_seqs),
            ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("block_size", self.block_size),
        ] {
            if value == 0 {
                return invalid(format!("{field} must be at least 1"));
            }
        }
        if self.num_gpu_blocks < 2 {
            return invalid(
                "num_gpu_blocks must be at least 2 (one is the reserved null block)".to_owned(),
            );
        }
        if self.attention_groups == 0 {
            return invalid(
                "attention_groups must be at least 1 (the full-attention group holds the prefix cache)"
                    .to_owned(),
            );
        }
        if self.sliding_groups > 0 && self.sliding_window == 0 {
            return invalid("sliding_groups needs a sliding_window in tokens".to_owned());
        }
        let needed = self.blocks_per_request(u64::from(self.max_model_len));
        if needed > self.usable_blocks() {
            return invalid(format!(
                "one max_model_len request needs {needed} KV blocks but only {} are usable; \
                 raise num_gpu_blocks or lower max_model_len",
                self.usable_blocks()
            ));
        }
        if !self.time_scale.is_finite() || self.time_scale <= 0.0 {
            return invalid(format!(
                "time_scale must be a positive number, got {}",
                self.time_scale
            ));
        }
        if let Err(reason) = self.cost.check() {
            return invalid(reason);
        }
        if let Some(spec) = &self.faults {
            crate::fault::Fault::parse(spec)?;
        }
        if self.tokens_per_step.is_empty() || self.tokens_per_step.contains(&0) {
            return invalid(format!(
                "tokens_per_step must list at least one count, each at least 1, got {:?}",
                self.tokens_per_step
            ));
        }
        if let Some(k) = self.num_speculative_tokens
            && self
                .tokens_per_step
                .iter()
                .any(|&t| t > k.saturating_add(1))
        {
            return invalid(format!(
                "tokens_per_step {:?} accepts more than num_speculative_tokens ({k}) allows: \
                 a step gives at most the draft plus one",
                self.tokens_per_step
            ));
        }
        Ok(())
    }

    /// The mean tokens a decode step gives a request (after its first token).
    pub fn mean_tokens_per_step(&self) -> f64 {
        let n = self.tokens_per_step.len().max(1) as f64;
        self.tokens_per_step
            .iter()
            .map(|&k| f64::from(k))
            .sum::<f64>()
            / n
    }

    /// KV blocks a request can use (the pool minus the reserved null block).
    pub fn usable_blocks(&self) -> u64 {
        u64::from(self.num_gpu_blocks).saturating_sub(1)
    }

    /// Tokens the pool holds for requests: every block but vLLM's reserved null block.
    pub fn usable_kv_tokens(&self) -> u64 {
        u64::from(self.num_gpu_blocks.saturating_sub(1)) * u64::from(self.block_size)
    }

    /// The KV cache size in tokens as vLLM ≥ 0.20.1 reports it (`kv_cache_size_tokens`): the
    /// number of `max_model_len` requests that fit, times `max_model_len`.
    pub fn kv_cache_size_tokens(&self) -> u64 {
        let per_request = self.blocks_per_request(u64::from(self.max_model_len));
        if per_request == 0 {
            return 0;
        }
        u64::from(self.num_gpu_blocks) * u64::from(self.max_model_len) / per_request
    }

    /// Whether `n` simultaneous requests of `tokens` tokens each (prompt + output) fit in the KV
    /// cache at once, by vLLM's block accounting.
    pub fn fits(&self, n: u64, tokens: u64) -> bool {
        n <= u64::from(self.max_num_seqs)
            && n * self.blocks_per_request(tokens) <= self.usable_blocks()
    }

    /// Blocks one request of `tokens` tokens holds: its attention blocks and the rest.
    pub fn blocks_per_request(&self, tokens: u64) -> u64 {
        tokens.div_ceil(u64::from(self.block_size.max(1))) + self.extra_blocks(tokens)
    }

    /// Blocks a request of `tokens` tokens holds besides the first full-attention group's
    /// (whose blocks carry the prefix cache): the other groups' and its recurrent state.
    pub fn extra_blocks(&self, tokens: u64) -> u64 {
        let bs = u64::from(self.block_size.max(1));
        let full = tokens.div_ceil(bs);
        let window = u64::from(self.sliding_window.max(1));
        let sliding = full.min((window - 1).div_ceil(bs) + 1);
        u64::from(self.attention_groups.saturating_sub(1)) * full
            + u64::from(self.sliding_groups) * sliding
            + u64::from(self.state_blocks_per_request)
    }
}

fn rtx3090() -> Profile {
    Profile {
        name: RTX3090_QWEN35_4B_FP8.to_owned(),
        served_model_name: "bench".to_owned(),
        max_model_len: 262_144,
        max_num_seqs: 128,
        // vLLM's default for `vllm serve` on GPUs under 70 GiB.
        max_num_batched_tokens: 2_048,
        // The seed's model is a hybrid (24 Gated DeltaNet and 8 full-attention layers): vLLM
        // raises the attention block to 528 tokens so one page holds a layer's recurrent state,
        // and lays the layers out as three state groups and one attention group of eight
        // (`speedmatrix capacity --config … --gpu rtx3090 --gpu-memory-utilization 0.94
        // --max-model-len 262144 --language-model-only --enable-prefix-caching`).
        block_size: 528,
        num_gpu_blocks: 1_003,
        enable_prefix_caching: true,
        // Prefix caching puts the state groups in `align` mode: two blocks each.
        state_blocks_per_request: 6,
        attention_groups: 1,
        sliding_groups: 0,
        sliding_window: 0,
        eos_after_tokens: Some(1_000),
        // `speedmatrix calibrate` on the seed page (tests/fixtures/seed-run.json of the report
        // crate); `calibration.rs` checks every cell.
        cost: CostModel {
            step_base_us: 8_272.5,
            prefill_per_token_us: 80.90,
            prefill_per_token_context_ns: 1.376,
            decode_per_seq_us: 191.16,
            decode_per_context_token_ns: 37.575,
            decode_batch_exponent: 0.27,
            frontend_per_request_us: 31_332.0,
            frontend_per_prompt_token_ns: 1_324.2,
        },
        time_scale: 1.0,
        free_running: false,
        tokenizer: None,
        faults: None,
        capacity_api: CapacityApi::Vllm,
        dialect: Dialect::Vllm,
        tokens_per_step: one_token_per_step(),
        num_speculative_tokens: None,
        origin: None,
        model: serde_json::from_str(SEED_CONFIG)
            .ok()
            .map(|config| ProfileModel {
                config,
                capacity_flags: [
                    "--gpu",
                    "rtx3090",
                    "--gpu-memory-utilization",
                    "0.94",
                    "--max-model-len",
                    "262144",
                    "--max-num-seqs",
                    "128",
                    "--language-model-only",
                    "--enable-prefix-caching",
                    "--vllm-version",
                    "0.32.0",
                ]
                .map(str::to_owned)
                .to_vec(),
            }),
        text_style: TextStyle::Words,
        hold_open_after_done_ms: None,
        stream_content_type: None,
    }
}

fn tiny() -> Profile {
    Profile {
        name: TINY.to_owned(),
        served_model_name: "tiny".to_owned(),
        max_model_len: 2_048,
        max_num_seqs: 256,
        max_num_batched_tokens: 1_024,
        block_size: 16,
        num_gpu_blocks: 4_097,
        enable_prefix_caching: true,
        state_blocks_per_request: 0,
        attention_groups: 1,
        sliding_groups: 0,
        sliding_window: 0,
        eos_after_tokens: Some(100),
        cost: CostModel {
            step_base_us: 2_000.0,
            prefill_per_token_us: 1.0,
            prefill_per_token_context_ns: 0.5,
            decode_per_seq_us: 5.0,
            decode_per_context_token_ns: 2.0,
            decode_batch_exponent: 0.0,
            frontend_per_request_us: 0.0,
            frontend_per_prompt_token_ns: 0.0,
        },
        time_scale: 1.0,
        free_running: false,
        tokenizer: None,
        faults: None,
        capacity_api: CapacityApi::Vllm,
        dialect: Dialect::Vllm,
        tokens_per_step: one_token_per_step(),
        num_speculative_tokens: None,
        origin: None,
        model: None,
        text_style: TextStyle::Words,
        hold_open_after_done_ms: None,
        stream_content_type: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid_and_round_trip_through_json() {
        for name in Profile::BUILTIN_NAMES {
            let p = Profile::builtin(name).unwrap();
            p.validate().unwrap();
            let back = Profile::from_json(&serde_json::to_string(&p).unwrap()).unwrap();
            assert_eq!(back, p);
        }
        assert!(Profile::builtin("nope").is_none());
    }

    #[test]
    fn files_load_and_bad_profiles_say_what_is_wrong() {
        let dir =
            std::env::temp_dir().join(format!("speedmatrix-sim-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.json");
        let mut p = Profile::builtin(TINY).unwrap();
        p.name = "mine".to_owned();
        std::fs::write(&path, serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(Profile::load(path.to_str().unwrap()).unwrap().name, "mine");
        std::fs::write(&path, "{\"name\": 3}").unwrap();
        assert!(matches!(
            Profile::from_file(&path),
            Err(SimError::ProfileParse { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(
            Profile::load("no/such/profile.json"),
            Err(SimError::UnknownProfile { .. })
        ));

        let mut small = Profile::builtin(TINY).unwrap();
        small.num_gpu_blocks = 10;
        let err = small.validate().unwrap_err().to_string();
        assert!(
            err.contains("needs 128 KV blocks but only 9 are usable"),
            "{err}"
        );
        let mut negative = Profile::builtin(TINY).unwrap();
        negative.cost.decode_per_seq_us = -1.0;
        assert!(negative.validate().is_err());
        let mut faulty = Profile::builtin(TINY).unwrap();
        faulty.faults = Some("explode=1".to_owned());
        assert!(matches!(faulty.validate(), Err(SimError::BadFault { .. })));
        let mut greedy = Profile::builtin(TINY).unwrap();
        greedy.tokens_per_step = vec![2, 4];
        greedy.num_speculative_tokens = Some(2);
        let err = greedy.validate().unwrap_err().to_string();
        assert!(
            err.contains("accepts more than num_speculative_tokens (2)"),
            "{err}"
        );
        greedy.num_speculative_tokens = Some(3);
        greedy.validate().unwrap();
    }

    #[test]
    fn capacity_follows_vllm_block_accounting() {
        let p = Profile::builtin(RTX3090_QWEN35_4B_FP8).unwrap();
        assert_eq!(p.blocks_per_request(262_144), 497 + 6);
        assert_eq!(p.kv_cache_size_tokens(), 1_003 * 262_144 / 503);
        assert!(p.fits(1, 262_144));
        // Two max-length requests' attention blocks fit (994 of 1,002); their state does not.
        assert!(!p.fits(2, 262_144));
        assert!(p.fits(16, 24_576));
        assert!(!p.fits(129, 16), "max_num_seqs bounds concurrency");
    }

    #[test]
    fn cost_model_terms() {
        let c = Profile::builtin(RTX3090_QWEN35_4B_FP8).unwrap().cost;
        assert_eq!(c.decode(0, 1_000), Duration::ZERO);
        assert!(
            c.decode(2, 2_000) < c.decode(1, 1_000) * 2,
            "batching amortizes attention reads"
        );
        let one_chunk = c.prefill(2_048, 2_048);
        assert_eq!(one_chunk, c.step_base() + c.prefill_chunk(2_048, 0));
        assert!(
            c.prefill(4_096, 2_048) > one_chunk * 2,
            "later chunks attend to more context"
        );
    }
}
