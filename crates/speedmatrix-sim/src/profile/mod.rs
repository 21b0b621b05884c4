//! Profiles: what the simulated engine is (KV cache, limits, stream shape), read and checked.

mod builtin;
mod cost;
mod origin;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::SimError;

pub use builtin::{FREE_RUNNING, RTX3090_QWEN35_4B_FP8, TINY};
pub use cost::StepCost;
pub use origin::{OriginKind, ProfileOrigin};

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
    pub cost: StepCost,
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
    /// Request fields the server refuses, as a strict OpenAI-compatible server does (Hugging
    /// Face `transformers serve`): a request carrying one is answered HTTP 422
    /// `{"detail": "Unexpected fields in the request: {'ignore_eos'}"}`. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_fields: Vec<String>,
    /// The status `GET /v1/models` answers with, when not 200 (`transformers serve` answers
    /// 500 without a Hugging Face cache folder). Default: 200 and the model list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models_status: Option<u16>,
    /// Answer no endpoint that names an engine (`/version`, `/metrics`, `/tokenize`, …: 404),
    /// as a generic OpenAI-compatible server or gateway does. Default: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anonymous: bool,
    /// A reasoning model: the first this many output tokens of each chat answer stream as
    /// `delta.reasoning_content` (vLLM's reasoning parser), the rest as `content`. vLLM and
    /// proxy dialects; default 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u32,
    /// Stream those reasoning tokens as answer text between `<think>` and `</think>` (the
    /// first and last of them), as a server run without a reasoning parser does. Default:
    /// false (in `delta.reasoning_content`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning_inline: bool,
    /// Append every generation request to this file as one JSON line (`api`, the `prompt`
    /// text or `messages` as received, `max_tokens`, `ignore_eos`): what a test checks a run
    /// sent. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_log: Option<std::path::PathBuf>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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

pub(super) fn one_token_per_step() -> Vec<u32> {
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
    /// The launch as `speedmatrix capacity`'s engine flags, each a key without its dashes
    /// (`{"gpu": "rtx3090", "gpu-memory-utilization": 0.94, "enable-prefix-caching": true}`),
    /// read by the runner's `EngineOptions` with every key checked.
    pub capacity: serde_json::Map<String, serde_json::Value>,
}

impl Profile {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
