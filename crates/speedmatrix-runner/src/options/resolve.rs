//! From options to the configuration a run measures: the tokenizer loaded, the simulator's
//! profile read, the KV capacity predicted from config.json and the engine's flags, the
//! hardware detected; and the capacity grid a plan shows before any server is up.

use std::time::Duration;

use speedmatrix_units::Engine;

use super::labels::{self, HostFacts};
use super::{EngineOptions, RunOptions};
use crate::{
    CapacityHints, MatrixSpec, Preset, RunConfig, RunnerError, Target, TelemetryConfig, VllmInputs,
};

/// An unusable option, in the flag's words.
pub(crate) fn bad(message: impl Into<String>) -> RunnerError {
    RunnerError::BadOption(message.into())
}

/// Reads `T` from a JSON value (a study's `[run]` table, a simulator profile's launch), every
/// key checked: an unknown one is an error naming it, never ignored.
pub fn from_value<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
    let mut unknown = Vec::new();
    let parsed: T = serde_ignored::deserialize(value, |path| unknown.push(path.to_string()))
        .map_err(|e| e.to_string())?;
    match unknown.first() {
        None => Ok(parsed),
        Some(key) => Err(format!(
            "unknown option `{key}`: the keys are `speedmatrix run`'s flags without their dashes (see `speedmatrix run --help`)"
        )),
    }
}

impl RunOptions {
    /// Options from a table of flag names and values (a study's `[run]`), every key checked.
    pub fn from_value(value: serde_json::Value) -> Result<RunOptions, String> {
        from_value(value)
    }

    /// Registers every secret these options hold with the one cleaning path
    /// (`speedmatrix_client::redact`), before anything prints or stores them: the API key,
    /// the URL's credentials, secret-named fields of `--extra-body` and the secrets of
    /// `--launch-command` (`--api-key K`, `HF_TOKEN=K`).
    pub fn register_secrets(&self) {
        use speedmatrix_client::redact;
        if let Some(key) = &self.api_key {
            redact::register(key);
        }
        if let Some(url) = &self.url {
            redact::register_url_credentials(url);
        }
        if let Some(body) = &self.extra_body {
            redact::register_json_secrets(&serde_json::Value::Object(body.0.clone()));
        }
        if let Some(command) = &self.launch_command {
            redact::register_command_secrets(command);
        }
    }

    /// Every local path these options read, by the flag that names it: what a run elsewhere
    /// (a Kubernetes pod) must be given. The tokenizer is among them only when it names an
    /// existing path here (otherwise it is a Hugging Face id, read from the HF cache).
    pub fn named_paths(&self) -> Vec<(&'static str, std::path::PathBuf)> {
        let e = &self.engine_options;
        let mut paths: Vec<(&'static str, std::path::PathBuf)> = [
            ("--model-config", self.model_config.clone()),
            ("--gpu-catalog", e.gpu_catalog.clone()),
            ("--draft-config", e.draft_config.clone()),
            ("--safetensors-index", e.safetensors_index.clone()),
            ("--checkpoint", e.checkpoint.clone()),
            ("--dataset", self.dataset.clone()),
        ]
        .into_iter()
        .filter_map(|(flag, path)| Some((flag, path?)))
        .collect();
        if let Some(t) = &self.tokenizer {
            let path = std::path::PathBuf::from(t);
            if t != "bundled" && path.exists() {
                paths.push(("--tokenizer", path));
            }
        }
        if !self.embedded() {
            return paths;
        }
        let profile = std::path::PathBuf::from(&self.sim_profile);
        if profile.exists() {
            paths.push(("--sim-profile", profile));
        }
        paths
    }

    /// Whether these options measure the built-in simulator (no `--url`).
    pub fn embedded(&self) -> bool {
        self.url.is_none()
    }

    /// The matrix these options ask for: a preset (quick on the simulator, seed against a
    /// server) with each given part overriding it, and the load mode with its flags; flags of
    /// another mode are refused.
    pub fn matrix(&self) -> Result<MatrixSpec, RunnerError> {
        super::load::matrix(self)
    }

    /// The capacity grid these options predict offline (`--model-config` and the engine
    /// flags), `None` without a model config: for plans printed before any server is up.
    pub fn predicted_grid(
        &self,
    ) -> Result<Option<speedmatrix_capacity::CapacityGrid>, RunnerError> {
        let hints = self.capacity_hints()?;
        let Some(prediction) = hints.prediction else {
            return Ok(None);
        };
        let default = Preset::Seed.matrix();
        let spec = speedmatrix_capacity::GridSpec {
            contexts: self.contexts.clone().unwrap_or(default.contexts),
            concurrencies: self.concurrency.clone().unwrap_or(default.concurrencies),
            max_output: self.max_output.unwrap_or(default.max_output),
        };
        speedmatrix_capacity::capacity_grid(
            Some(&prediction),
            None,
            speedmatrix_capacity::ServerLimits::default(),
            &spec,
        )
        .map(Some)
        .map_err(RunnerError::Capacity)
    }

    /// The configuration a run of these options measures: the tokenizer loaded, the
    /// simulator's profile read (without `--url`), the KV capacity predicted (with
    /// `--model-config`), the hardware detected and `host` recorded. Checked with
    /// [`crate::validate`].
    pub fn resolve(&self, host: &HostFacts) -> Result<RunConfig, RunnerError> {
        self.register_secrets();
        let mut matrix = self.matrix()?;
        let tokenizer = self.load_tokenizer()?;
        let workload = crate::Workload::from_options(self, &tokenizer, matrix.max_output)?;
        if let Some(w) = &workload {
            // One row: the prompts' median length (each request sends its own).
            matrix.contexts = vec![w.context];
            if let crate::config::LoadMode::Rate(r) = &mut matrix.load {
                w.fit_rate_spec(r)?;
            }
        }
        let target = self.target()?;
        let capacity = match (&target, &self.model_config) {
            // A profile that stands for a real model (the built-in seed one, a hybrid) lays its
            // KV cache out as that model would: its layout decides the cells.
            #[cfg(feature = "embedded")]
            (Target::Embedded(p), None) => match &p.model {
                Some(m) => profile_capacity_hints(m)?,
                None => self.capacity_hints()?,
            },
            _ => self.capacity_hints()?,
        };
        if self.telemetry_interval < Duration::from_millis(10) {
            return Err(bad(
                "--telemetry-interval must be at least 10ms; GPU counters do not change faster",
            ));
        }
        if self.metrics_interval < Duration::from_millis(50) {
            return Err(bad(
                "--metrics-interval must be at least 50ms, or the scrapes would load the server",
            ));
        }
        let config = RunConfig {
            labels: labels::labels(self, &target, host),
            target,
            api_key: self.api_key.clone().map(speedmatrix_client::ApiKey::new),
            insecure: self.insecure,
            model: self.model.clone(),
            tokenizer,
            api: self.api,
            matrix,
            prompt_sharing: self.prompt_sharing,
            seed: self.seed,
            capacity,
            timeouts: speedmatrix_client::Timeouts::new(
                self.connect_timeout,
                self.idle_timeout,
                self.idle_timeout,
            ),
            send_min_tokens: self.min_tokens,
            reasoning_parser: self.reasoning_parser,
            extra_body: self.extra_body.clone().unwrap_or_default().0,
            telemetry: TelemetryConfig {
                gpu: self.telemetry,
                interval: self.telemetry_interval,
                metrics_interval: self.metrics_interval,
            },
            workload,
        };
        crate::validate(&config)?;
        Ok(config)
    }

    /// The server to measure: `--url`, else the simulator profile `--sim-profile` names.
    fn target(&self) -> Result<Target, RunnerError> {
        match &self.url {
            Some(url) => Ok(Target::Url(url.clone())),
            #[cfg(feature = "embedded")]
            None => speedmatrix_sim::Profile::load(&self.sim_profile)
                .map(|p| Target::Embedded(Box::new(p)))
                .map_err(|e| bad(format!("--sim-profile {}: {e}", self.sim_profile))),
            #[cfg(not(feature = "embedded"))]
            None => Err(bad(
                "this build has no built-in simulator (the runner's `embedded` feature): give --url",
            )),
        }
    }

    fn load_tokenizer(&self) -> Result<speedmatrix_workload::Tokenizer, RunnerError> {
        let source = match (&self.tokenizer, self.embedded()) {
            (Some(s), _) => s.as_str(),
            (None, true) => speedmatrix_workload::BUNDLED_NAME,
            (None, false) => {
                return Err(bad(
                    "with --url, pass --tokenizer: the served model's tokenizer.json, its model folder, \
                     or its Hugging Face id in the local HF cache, so prompts have exact token counts",
                ));
            }
        };
        speedmatrix_workload::Tokenizer::load(source)
            .map_err(|e| bad(format!("--tokenizer {source}: {e}")))
    }

    /// How the run learns the KV capacity when the server does not say: `--model-config`
    /// with the engine flags, by the rules of `--engine` (vLLM when none is named), and
    /// `--kv-capacity-tokens`.
    pub fn capacity_hints(&self) -> Result<CapacityHints, RunnerError> {
        let Some(path) = &self.model_config else {
            return Ok(CapacityHints {
                prediction: None,
                vllm_inputs: None,
                kv_capacity_tokens: self.kv_capacity_tokens,
            });
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            bad(format!(
                "--model-config {}: cannot read it ({e}); pass the path of the model's config.json",
                path.display()
            ))
        })?;
        let model = speedmatrix_capacity::ModelConfig::from_json(&text)
            .map_err(|e| bad(format!("--model-config {}: {e}", path.display())))?;
        let engine = self.engine.unwrap_or(Engine::Vllm);
        let mut hints = hints_from(model, &self.engine_options, engine)?;
        hints.kv_capacity_tokens = self.kv_capacity_tokens;
        Ok(hints)
    }
}

#[cfg(feature = "embedded")]
/// The capacity hints of a simulator profile that stands for a real model and launch (the
/// built-in seed profile): its KV layout, as `--model-config` and the engine flags would give
/// it against a real server.
fn profile_capacity_hints(
    model: &speedmatrix_sim::ProfileModel,
) -> Result<CapacityHints, RunnerError> {
    let launch: EngineOptions = from_value(serde_json::Value::Object(model.capacity.clone()))
        .map_err(|e| bad(format!("the simulator profile's capacity options: {e}")))?;
    let config = speedmatrix_capacity::ModelConfig::from_json(&model.config.to_string())
        .map_err(|e| bad(format!("the simulator profile's model config: {e}")))?;
    hints_from(config, &launch, Engine::Vllm)
}

fn hints_from(
    model: speedmatrix_capacity::ModelConfig,
    options: &EngineOptions,
    engine: Engine,
) -> Result<CapacityHints, RunnerError> {
    let gpu = options.gpu()?;
    let flags = options.engine_flags(engine)?;
    let p = speedmatrix_capacity::predict(&model, &gpu, &flags)
        .map_err(|e| bad(format!("could not predict the KV capacity: {e}")))?;
    let vllm_inputs = match flags {
        speedmatrix_capacity::EngineFlags::Vllm(vflags) => Some(VllmInputs {
            model,
            gpu,
            flags: vflags,
            version_given: options.vllm_version.is_some(),
        }),
        _ => None,
    };
    Ok(CapacityHints {
        prediction: Some(p),
        vllm_inputs,
        kv_capacity_tokens: None,
    })
}
