//! vLLM versions as vLLM itself numbers and orders them (PEP 440, through
//! setuptools-scm), and the rules that changed between releases.
//!
//! A nightly wheel is `0.20.1rc1.dev16+g1a2b3c4`, a CUDA build `0.21.0+cu130`,
//! a source checkout without tags `0.1.dev16581+g9f8e7d6`. PEP 440 sorts a
//! release candidate and a `.devN` build *below* their release, so the
//! nightly above still behaves like 0.20.0 where 0.20.1 changed something
//! (observed: its "GPU KV cache size" line still used the old formula). The
//! local part (`+cu130`, `+g<sha>`) names a build, not a behaviour, and is
//! ignored.

use std::cmp::Ordering;
use std::fmt;

use serde::Serialize;

use crate::CapacityError;

/// A pre-release kind, in PEP 440 order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PreRelease {
    /// `a`, `alpha`.
    Alpha,
    /// `b`, `beta`.
    Beta,
    /// `rc`, `c`, `pre`, `preview`.
    Rc,
}

/// A vLLM release, for the behaviours that changed between releases.
///
/// ```
/// use speedmatrix_capacity::VllmVersion;
///
/// let v = |s| VllmVersion::parse(s).unwrap();
/// assert!(v("0.20.1rc1.dev16+g1a2b3c4") < v("0.20.1"));
/// assert!(v("0.20.1.dev3") < v("0.20.1rc1"));
/// assert!(v("0.20.1") < v("0.20.1.post1"));
/// assert_eq!(v("v0.21.0+cu130"), v("0.21.0"));
/// assert_eq!(v("nightly"), v("0.32.0").max(v("nightly")));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VllmVersion {
    epoch: u32,
    release: [u32; 4],
    pre: Option<(PreRelease, u32)>,
    post: Option<u32>,
    dev: Option<u32>,
    /// What the text said, when it said no release: `nightly` or a source build.
    stands_for: Option<StandsFor>,
}

/// A version text that names no release, read as the newest known one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum StandsFor {
    /// `nightly`, `main`, `latest`.
    Nightly,
    /// `0.1.devN+g<sha>`: setuptools-scm's number for a checkout without release tags.
    UntaggedSource,
}

impl VllmVersion {
    /// The newest behaviour this crate models (v0.32.0 ≈ main at the time of writing).
    pub const LATEST: VllmVersion = VllmVersion::release(0, 32, 0);

    /// The release `major.minor.patch`.
    pub const fn release(major: u32, minor: u32, patch: u32) -> VllmVersion {
        VllmVersion {
            epoch: 0,
            release: [major, minor, patch, 0],
            pre: None,
            post: None,
            dev: None,
            stands_for: None,
        }
    }

    /// Parses a version as `vllm --version`, `/version` or a startup log
    /// prints it: PEP 440 (`0.32.0`, `v0.20.1rc1`, `0.21.0.dev5+g1a2b3c4`,
    /// `0.8.5.post1`, `0.21.0+cu130`, `1!2.0`), and `nightly`/`main`/`latest`
    /// for the newest known release.
    ///
    /// # Errors
    /// [`CapacityError::BadFlag`] for anything else.
    pub fn parse(text: &str) -> Result<Self, CapacityError> {
        let bad = || CapacityError::BadFlag {
            flag: "vllm version",
            value: text.to_owned(),
            why: "expected a PEP 440 version such as 0.32.0, 0.21.0rc1, 0.20.1.dev16+g1a2b3c4, or nightly",
        };
        let s = text.trim().to_ascii_lowercase();
        if matches!(s.as_str(), "nightly" | "main" | "latest") {
            return Ok(VllmVersion {
                stands_for: Some(StandsFor::Nightly),
                ..VllmVersion::LATEST
            });
        }
        let public = s.split('+').next().unwrap_or_default();
        let public = public.strip_prefix('v').unwrap_or(public);
        let mut v = Pep440::new(public).read().ok_or_else(bad)?;
        // setuptools-scm numbers a checkout without any release tag 0.1.devN.
        if v.release == [0, 1, 0, 0] && v.dev.is_some() && v.pre.is_none() && v.post.is_none() {
            v = VllmVersion {
                stands_for: Some(StandsFor::UntaggedSource),
                ..VllmVersion::LATEST
            };
        }
        Ok(v)
    }

    /// Whether this version has every change that `since` (a release) introduced.
    pub fn has(self, since: VllmVersion) -> bool {
        self >= since
    }

    /// What was assumed about this version, when the text named no release
    /// or a pre-release; `None` for a plain release.
    pub fn assumption(self) -> Option<String> {
        match self.stands_for {
            Some(StandsFor::Nightly) => Some(format!(
                "`nightly` read as the newest release this speedmatrix models (v{})",
                VllmVersion::LATEST
            )),
            Some(StandsFor::UntaggedSource) => Some(format!(
                "0.1.devN is a source build without release tags (setuptools-scm's fallback): \
                 read as the newest release this speedmatrix models (v{}); pass --vllm-version \
                 with the release it was built from if it is older",
                VllmVersion::LATEST
            )),
            None if self.pre.is_some() || self.dev.is_some() => {
                let base = self.base();
                let changed: Vec<&str> = VLLM_RULES
                    .iter()
                    .filter(|r| r.since == base)
                    .map(|r| r.what)
                    .collect();
                Some(if changed.is_empty() {
                    format!(
                        "v{self} is a pre-release of v{base}, which changed none of the modelled \
                         rules: modelled as v{base}"
                    )
                } else {
                    format!(
                        "v{self} is a pre-release: it sorts below v{base} (PEP 440), so what \
                         v{base} introduced is not applied ({}); pass --vllm-version {base} if \
                         this build has it",
                        changed.join("; ")
                    )
                })
            }
            None => None,
        }
    }

    /// The release this version is, or precedes.
    fn base(self) -> VllmVersion {
        VllmVersion {
            epoch: self.epoch,
            release: self.release,
            pre: None,
            post: None,
            dev: None,
            stands_for: None,
        }
    }

    /// PEP 440's sort key: a dev release of a release sorts before its
    /// pre-releases, pre-releases before the release, post-releases after,
    /// and a `.devN` before what it is the dev release of.
    /// A text naming no release sorts just above the release it stands for.
    fn key(&self) -> SortKey {
        let pre = match (self.pre, self.post, self.dev) {
            (None, None, Some(_)) => (0, 0, 0),
            (Some((kind, n)), _, _) => (1, kind as u8, n),
            (None, _, _) => (2, 0, 0),
        };
        let post = self.post.map_or((0, 0), |n| (1, n));
        let dev = self.dev.map_or((1, 0), |n| (0, n));
        let stands_for = match self.stands_for {
            None => 0,
            Some(StandsFor::UntaggedSource) => 1,
            Some(StandsFor::Nightly) => 2,
        };
        (self.epoch, self.release, pre, post, dev, stands_for)
    }
}

/// Epoch, release, pre-release rank, post-release, dev-release, what a text stood for.
type SortKey = (u32, [u32; 4], (u8, u8, u32), (u8, u32), (u8, u32), u8);

impl Ord for VllmVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for VllmVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for VllmVersion {
    /// As its [`fmt::Display`] text: `0.20.1rc1.dev16`, `nightly`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Default for VllmVersion {
    fn default() -> Self {
        VllmVersion::LATEST
    }
}

impl fmt::Display for VllmVersion {
    /// The normalized public version (`0.20.1rc1.dev16`), `nightly` as such.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.stands_for == Some(StandsFor::Nightly) {
            return f.write_str("nightly");
        }
        if self.epoch > 0 {
            write!(f, "{}!", self.epoch)?;
        }
        let [a, b, c, d] = self.release;
        write!(f, "{a}.{b}.{c}")?;
        if d > 0 {
            write!(f, ".{d}")?;
        }
        if let Some((kind, n)) = self.pre {
            let tag = match kind {
                PreRelease::Alpha => "a",
                PreRelease::Beta => "b",
                PreRelease::Rc => "rc",
            };
            write!(f, "{tag}{n}")?;
        }
        if let Some(n) = self.post {
            write!(f, ".post{n}")?;
        }
        if let Some(n) = self.dev {
            write!(f, ".dev{n}")?;
        }
        Ok(())
    }
}

/// A reader of PEP 440's public version grammar, with its normalizations
/// (`-`, `_` or `.` before a pre, post or dev tag; `alpha`, `c`, `pre`,
/// `preview`, `rev`, `r`; an implicit 0; `1.0-1` as a post-release).
struct Pep440<'a> {
    s: &'a str,
}

impl<'a> Pep440<'a> {
    fn new(s: &'a str) -> Self {
        Pep440 { s }
    }

    fn read(mut self) -> Option<VllmVersion> {
        let epoch = match self.s.split_once('!') {
            Some((e, rest)) => {
                self.s = rest;
                e.parse().ok()?
            }
            None => 0,
        };
        let mut release = [0u32; 4];
        let mut parts = 0;
        loop {
            let n = self.number()?;
            if parts < release.len() {
                release[parts] = n;
            } else if n > 0 {
                return None; // five release parts is no vLLM version
            }
            parts += 1;
            if !(self.s.starts_with('.') && self.s[1..].starts_with(|c: char| c.is_ascii_digit())) {
                break;
            }
            self.s = &self.s[1..];
        }
        let pre = self.tag(&[
            ("alpha", PreRelease::Alpha),
            ("a", PreRelease::Alpha),
            ("beta", PreRelease::Beta),
            ("b", PreRelease::Beta),
            ("preview", PreRelease::Rc),
            ("pre", PreRelease::Rc),
            ("rc", PreRelease::Rc),
            ("c", PreRelease::Rc),
        ]);
        let post = match self.s.strip_prefix('-') {
            Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit()) => {
                self.s = rest;
                Some(self.number()?)
            }
            _ => self
                .tag(&[("post", ()), ("rev", ()), ("r", ())])
                .map(|((), n)| n),
        };
        let dev = self.tag(&[("dev", ())]).map(|((), n)| n);
        self.s.is_empty().then_some(VllmVersion {
            epoch,
            release,
            pre,
            post,
            dev,
            stands_for: None,
        })
    }

    fn number(&mut self) -> Option<u32> {
        let end = self
            .s
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(self.s.len());
        let n = self.s[..end].parse().ok()?;
        self.s = &self.s[end..];
        Some(n)
    }

    /// An optional `[-_.]TAG[-_.]N` for one of `tags`; N defaults to 0.
    fn tag<T: Copy>(&mut self, tags: &[(&str, T)]) -> Option<(T, u32)> {
        let rest = self.s.strip_prefix(['-', '_', '.']).unwrap_or(self.s);
        let (value, after) = tags
            .iter()
            .find_map(|(t, v)| rest.strip_prefix(t).map(|after| (*v, after)))?;
        // A tag must not run into letters (`r` of `rc` is not `r`).
        if after.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return None;
        }
        let digits = after.strip_prefix(['-', '_', '.']).unwrap_or(after);
        let mut reader = Pep440 { s: digits };
        let n = if digits.starts_with(|c: char| c.is_ascii_digit()) {
            reader.number()?
        } else {
            reader.s = after;
            0
        };
        self.s = reader.s;
        Some((value, n))
    }
}

/// One vLLM behaviour that changed in a release, with where it is seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VllmRule {
    /// What changed, in a few words.
    pub what: &'static str,
    /// The first release with the change.
    pub since: VllmVersion,
    /// The first release a later rule replaced it in, if any.
    pub until: Option<VllmVersion>,
    /// Where it is in vLLM, and how the release was found.
    pub source: &'static str,
}

/// The first release whose "GPU KV cache size" counts blocks per KV group.
pub(super) const LOG_PER_GROUP: VllmVersion = VllmVersion::release(0, 9, 0);
/// The first release whose profiling snapshot is taken after NCCL starts, so
/// NCCL's own buffers are no longer charged as non-torch memory.
pub(super) const SNAPSHOT_AFTER_NCCL: VllmVersion = VllmVersion::release(0, 11, 0);
/// The first release whose sampler warm-up always takes the PyTorch sort path.
pub(super) const SAMPLER_NATIVE_SORT: VllmVersion = VllmVersion::release(0, 11, 0);
/// The first release that turned the hybrid KV cache manager off for
/// chunked local attention by default (Llama 4's chunked layers then cost
/// full attention).
pub(super) const CHUNKED_HMA_OFF: VllmVersion = VllmVersion::release(0, 10, 1);
/// The first release that turned it back on by default.
pub(super) const CHUNKED_HMA_ON: VllmVersion = VllmVersion::release(0, 14, 0);
/// The first release that unifies unequal attention page sizes by giving the
/// smaller page a larger block size (before: a startup error).
pub(super) const PAGE_UNIFICATION: VllmVersion = VllmVersion::release(0, 12, 0);
/// The first release whose top-k/top-p warm-up runs the Triton kernel (no sort).
pub(super) const SAMPLER_TRITON: VllmVersion = VllmVersion::release(0, 17, 0);
/// The first release whose Mamba2 conv state keeps `num_speculative_tokens` more rows.
pub(super) const MAMBA2_SPEC_ROWS: VllmVersion = VllmVersion::release(0, 17, 0);
/// The first release that groups layers when the larger bucket is < 1.5× the
/// smaller (1.25× from 0.12).
pub(super) const GROUP_RATIO_1_5: VllmVersion = VllmVersion::release(0, 18, 0);
/// The first release that budgets CUDA-graph memory before the KV cache.
pub(super) const CUDAGRAPH_BUDGET: VllmVersion = VllmVersion::release(0, 20, 0);
/// The first release whose "GPU KV cache size" is concurrency × max_model_len.
pub(super) const LOG_CONCURRENCY: VllmVersion = VllmVersion::release(0, 20, 1);
/// The first release whose sampler warm-up uses FlashInfer's sampler by default.
pub(super) const SAMPLER_FLASHINFER: VllmVersion = VllmVersion::release(0, 21, 0);
/// The first release whose sliding-window and chunked groups hold
/// `max_in_flight_tokens` (two scheduled batches with async scheduling).
pub(super) const IN_FLIGHT_TOKENS: VllmVersion = VllmVersion::release(0, 26, 0);
/// The first release with a third batch-default tier for GPUs of 160 GiB and more.
pub(super) const BATCH_TIER_160: VllmVersion = VllmVersion::release(0, 28, 0);
/// The first release that passes Cohere 2 its `sliding_window + 1`.
pub(super) const COHERE2_WINDOW_PLUS_ONE: VllmVersion = VllmVersion::release(0, 29, 0);

/// Every version-dependent rule the predictor follows, oldest first. Release
/// boundaries come from reading vLLM's published wheels of each release (the
/// commit of each is in its `vllm/_version.py`), unless a rule says otherwise.
pub const VLLM_RULES: &[VllmRule] = &[
    VllmRule {
        what: "\"GPU KV cache size\" = num_blocks // KV groups × smallest group block size",
        since: LOG_PER_GROUP,
        until: Some(LOG_CONCURRENCY),
        source: "vllm/v1/core/kv_cache_utils.py (hybrid KV groups); before it, one group: num_blocks × block_size (PR #13596); release boundary observed in logs, approximate",
    },
    VllmRule {
        what: "chunked local attention (Llama 4) planned as full attention: the hybrid KV cache manager is off by default for it",
        since: CHUNKED_HMA_OFF,
        until: Some(CHUNKED_HMA_ON),
        source: "vllm/envs.py VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE default \"0\" and vllm/config/vllm.py VllmConfig.__post_init__ (v0.10.1 @aab549870 to v0.13.0 @72506c983)",
    },
    VllmRule {
        what: "the memory snapshot is taken after NCCL starts: NCCL buffers are not non-torch memory",
        since: SNAPSHOT_AFTER_NCCL,
        until: None,
        source: "vllm/v1/worker/gpu_worker.py Worker.init_device (v0.11.0 @f71952c1c; v0.10.2 @26b999c71 took it before init_worker_distributed_environment)",
    },
    VllmRule {
        what: "sampler warm-up on the PyTorch sort path (about 38.5 B per logit); before, FlashInfer's sampler when installed",
        since: SAMPLER_NATIVE_SORT,
        until: Some(SAMPLER_TRITON),
        source: "vllm/v1/sample/ops/topk_topp_sampler.py (VLLM_USE_FLASHINFER_SAMPLER default None from v0.11.0 @f71952c1c); 38.5-39.8 B/logit fitted on four public profiling logs",
    },
    VllmRule {
        what: "unequal attention pages share a pool: the smaller page gets a proportionally larger block size",
        since: PAGE_UNIFICATION,
        until: None,
        source: "vllm/v1/core/kv_cache_utils.py unify_kv_cache_spec_page_size (v0.12.0 @4fd9d6a85; v0.11.2 raised NotImplementedError)",
    },
    VllmRule {
        what: "chunked local attention keeps its own KV group again (hybrid KV cache manager on by default)",
        since: CHUNKED_HMA_ON,
        until: None,
        source: "vllm/envs.py VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE default \"1\" (v0.14.0 @b17039bcc)",
    },
    VllmRule {
        what: "sampler warm-up's top-k/top-p on the Triton kernel (about 15.3 B per logit)",
        since: SAMPLER_TRITON,
        until: Some(SAMPLER_FLASHINFER),
        source: "vllm/v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p (v0.17.0 @b31e9326a); 15.2-15.5 B/logit in the llm-d planner's v0.17-v0.19 H100 profiling table",
    },
    VllmRule {
        what: "Mamba2 conv state keeps conv_kernel − 1 + num_speculative_tokens rows",
        since: MAMBA2_SPEC_ROWS,
        until: None,
        source: "vllm/model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator.mamba2_state_shape (PR #33726, v0.17.0 @b31e9326a)",
    },
    VllmRule {
        what: "layers form one group size when the larger bucket is under 1.5× the smaller (1.25× before)",
        since: GROUP_RATIO_1_5,
        until: None,
        source: "vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size (v0.18.0 @bcf2be961)",
    },
    VllmRule {
        what: "CUDA-graph memory is estimated while profiling and taken out of the KV budget",
        since: CUDAGRAPH_BUDGET,
        until: None,
        source: "vllm/envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default \"1\" from v0.20.0 @b8160878f (opt-in since v0.18.0; the log line says \"default since v0.21.0\"); gpu_model_runner.py profile_cudagraph_memory (PR #30515)",
    },
    VllmRule {
        what: "\"GPU KV cache size\" = int(max concurrency × max_model_len)",
        since: LOG_CONCURRENCY,
        until: None,
        source: "vllm/v1/core/kv_cache_utils.py get_kv_cache_capacity; observed old in 0.20.1rc1.dev16 nightly and new in 0.20.1 (club-3090 discussions #46 and #91)",
    },
    VllmRule {
        what: "sampler warm-up on FlashInfer's sampler by default (about 34 B per logit, fitted on vllm#52872)",
        since: SAMPLER_FLASHINFER,
        until: None,
        source: "vllm/envs.py VLLM_USE_FLASHINFER_SAMPLER default True (v0.21.0 @ad7125a43)",
    },
    VllmRule {
        what: "sliding-window and chunked groups hold max_in_flight_tokens = 2 × max_num_batched_tokens (async scheduling)",
        since: IN_FLIGHT_TOKENS,
        until: None,
        source: "vllm/v1/kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes, vllm/config/vllm.py max_in_flight_tokens (v0.26.0 @ffd46bfab)",
    },
    VllmRule {
        what: "GPUs of 160 GiB and more default to max_num_batched_tokens 16384",
        since: BATCH_TIER_160,
        until: None,
        source: "vllm/engine/arg_utils.py get_batch_defaults (v0.28.0 @2cf0a6915)",
    },
    VllmRule {
        what: "Cohere 2 sliding layers see sliding_window + 1 tokens",
        since: COHERE2_WINDOW_PLUS_ONE,
        until: None,
        source: "vllm/model_executor/models/commandr.py CohereAttention (v0.29.0 @98dff2a81)",
    },
];

/// Whether a rule applied to the version a prediction was made for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleUse {
    /// The rule.
    pub rule: VllmRule,
    /// Whether the version has it.
    pub applied: bool,
}

/// The rules of [`VLLM_RULES`] as `version` has them.
pub fn rules_for(version: VllmVersion) -> Vec<RuleUse> {
    VLLM_RULES
        .iter()
        .map(|rule| RuleUse {
            rule: *rule,
            applied: version.has(rule.since) && !rule.until.is_some_and(|u| version.has(u)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn v(s: &str) -> VllmVersion {
        VllmVersion::parse(s).unwrap()
    }

    #[test]
    fn pep_440_order_of_the_versions_vllm_ships() {
        let ordered = [
            "0.8.5",
            "0.8.5.post1",
            "0.9.0.dev3",
            "0.9.0a1",
            "0.9.0b2",
            "0.9.0rc1.dev4",
            "0.9.0rc1",
            "0.9.0rc2",
            "0.9.0",
            "0.9.0.post1.dev2",
            "0.9.0.post1",
            "0.9.1",
            "0.20.1rc1.dev16+g1a2b3c4",
            "0.20.1",
            "1!0.1.0",
        ];
        for pair in ordered.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
        }
    }

    #[test]
    fn spellings_normalize_as_pep_440_says() {
        assert_eq!(v("0.20.1-RC.1"), v("0.20.1rc1"));
        assert_eq!(v("0.20.1c1"), v("0.20.1rc1"));
        assert_eq!(v("0.20.1preview"), v("0.20.1rc0"));
        assert_eq!(v("0.8.5-1"), v("0.8.5.post1"));
        assert_eq!(v("0.8.5rev2"), v("0.8.5.post2"));
        assert_eq!(v("0.21"), v("0.21.0"));
        assert_eq!(v(" V0.21.0+cu130 "), v("0.21.0"));
        assert_eq!(v("0.21.0.dev"), v("0.21.0.dev0"));
        assert_eq!(v("0.20.1rc1.dev16+g1a2b3c4").to_string(), "0.20.1rc1.dev16");
        for bad in ["", "x", "0.21.0-foo", "0..1", "0.21.0rc1rc2", "1.2.3.4.5"] {
            assert!(VllmVersion::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn versions_naming_no_release_read_as_the_newest_and_say_so() {
        assert_eq!(v("nightly").release, VllmVersion::LATEST.release);
        assert!(v("nightly").assumption().unwrap().contains("nightly"));
        let source = v("0.1.dev16581+g9f8e7d6");
        assert!(source.has(VllmVersion::release(0, 21, 0)));
        assert!(source.assumption().unwrap().contains("source build"));
        assert!(v("0.32.0").assumption().is_none());
    }

    #[test]
    fn a_pre_release_lacks_its_releases_rules_and_says_so() {
        let nightly = v("0.20.1rc1.dev16+g1a2b3c4");
        let applied = |version: VllmVersion, since: VllmVersion| {
            rules_for(version)
                .iter()
                .find(|r| r.rule.since == since)
                .unwrap()
                .applied
        };
        assert!(applied(nightly, LOG_PER_GROUP));
        assert!(
            applied(nightly, CUDAGRAPH_BUDGET),
            "0.20.0's rule is in 0.20.1's nightly"
        );
        assert!(
            !applied(nightly, LOG_CONCURRENCY),
            "0.20.1's log formula is not in its nightly"
        );
        assert!(
            nightly
                .assumption()
                .unwrap()
                .contains("sorts below v0.20.1")
        );
        assert!(applied(v("0.20.1"), LOG_CONCURRENCY));
        assert!(
            rules_for(v("0.29.0"))
                .iter()
                .all(|r| r.applied || r.rule.until.is_some()),
            "every modelled rule is older than 0.29: applied there unless replaced"
        );
    }

    fn version_text() -> impl Strategy<Value = String> {
        let pre = prop::option::of((prop::sample::select(vec!["a", "b", "rc"]), 0u32..5));
        (
            0u32..2,
            2u32..40,
            0u32..4,
            pre,
            prop::option::of(0u32..3),
            prop::option::of(0u32..20),
        )
            .prop_map(|(a, b, c, pre, post, dev)| {
                let mut s = format!("{a}.{b}.{c}");
                if let Some((tag, n)) = pre {
                    s.push_str(&format!("{tag}{n}"));
                }
                if let Some(n) = post {
                    s.push_str(&format!(".post{n}"));
                }
                if let Some(n) = dev {
                    s.push_str(&format!(".dev{n}"));
                }
                s
            })
    }

    proptest! {
        #[test]
        fn printing_and_parsing_agree(text in version_text()) {
            let parsed = v(&text);
            prop_assert_eq!(v(&parsed.to_string()), parsed);
        }

        #[test]
        fn a_rule_applies_from_its_release_until_a_later_one_replaces_it(
            a in version_text(),
            b in version_text(),
        ) {
            let (a, b) = (v(&a), v(&b));
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            for (l, h) in rules_for(lo).iter().zip(rules_for(hi)) {
                let replaced = h.rule.until.is_some_and(|u| hi.has(u));
                prop_assert!(!l.applied || h.applied || replaced);
                // A replaced rule's successor applies wherever it stops.
                if l.applied && replaced {
                    let until = h.rule.until.unwrap();
                    prop_assert!(rules_for(hi).iter().any(|r| r.rule.since == until && r.applied
                        || r.rule.until.is_some_and(|u| hi.has(u))));
                }
            }
        }
    }
}
