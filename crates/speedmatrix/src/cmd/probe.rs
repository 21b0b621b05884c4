//! `speedmatrix probe`: what a server says about itself.

use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use speedmatrix_capacity::MeasuredCapacity;
use speedmatrix_client::{
    ApiKey, Client, ClientConfig, ClientError, ModelInfo, ServerInfo, Timeouts,
};
use speedmatrix_engines::vllm;
use speedmatrix_telemetry::{GpuInfo, TelemetryMode};
use speedmatrix_units::{Tokens, group_thousands};

use crate::cmd::UsageError;
use crate::out::{say, say_raw, tell};

/// Flags of `speedmatrix probe`.
///
/// Asks the server for `GET /v1/models` and every engine's own endpoints
/// (`/version`, `/metrics`, `/props`, `/get_server_info`, `/info`,
/// `/api/version`) and prints which engine it is, the served models with
/// their context limit (max_model_len), the engine version, and the KV cache
/// as the engine reports it (vLLM's `vllm:cache_config_info`, llama.cpp's
/// `/props`, SGLang's `/get_server_info`). Endpoints the server lacks are
/// reported as "not exposed". It also lists this machine's GPUs as the
/// telemetry sources see them (NVML, nvidia-smi, amd-smi, rocm-smi), with why none
/// was found when none was. Exits 1 when the server cannot be reached or
/// lists no models endpoint, 2 on a bad flag.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Server root URL (a trailing /v1 is accepted).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8000")]
    url: String,

    /// API key sent as `Authorization: Bearer`; defaults to $OPENAI_API_KEY. Never printed.
    #[arg(
        long,
        value_name = "KEY",
        env = "OPENAI_API_KEY",
        hide_env_values = true
    )]
    api_key: Option<ApiKey>,

    /// Skip TLS certificate verification (only for self-signed test servers: anyone
    /// on the path could read and change the traffic).
    #[arg(long)]
    insecure: bool,

    /// Seconds to wait for connecting, for each answer, and between body reads.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    timeout: f64,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,

    /// Where to look for this machine's GPUs: auto (NVML, else nvidia-smi, else amd-smi,
    /// else rocm-smi), nvml, smi (the command-line tools only), off.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    telemetry: TelemetryMode,
}

/// Runs `speedmatrix probe`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = build_client(&args)?;
    let info = client.probe().await?;
    let mut report = ProbeReport::from_info(&info);
    report.local_gpus = Some(LocalGpus::probe(args.telemetry));
    if args.json {
        say!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        say_raw!("{}", report.render());
    }
    if info.models.is_none() {
        tell!(
            "error: {} has no /v1/models endpoint; is it an OpenAI-compatible server?",
            info.base_url
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn build_client(args: &Args) -> anyhow::Result<Client> {
    if !(args.timeout.is_finite() && args.timeout > 0.0 && args.timeout < 1e9) {
        return Err(UsageError(format!(
            "--timeout must be a positive number of seconds, got {}",
            args.timeout
        ))
        .into());
    }
    let limit = Duration::from_secs_f64(args.timeout);
    let config = ClientConfig::new(&args.url)
        .api_key(
            args.api_key
                .clone()
                .filter(|k| !k.expose().trim().is_empty()),
        )
        .insecure(args.insecure)
        .timeouts(Timeouts::new(limit, limit, limit));
    Client::new(config).map_err(|err| match err {
        ClientError::InvalidConfig { reason } => UsageError(reason).into(),
        other => anyhow::Error::new(other),
    })
}

/// What `probe` prints, as JSON or as a table.
#[derive(Debug, Serialize)]
struct ProbeReport {
    base_url: String,
    engine: &'static str,
    version: Option<String>,
    models: Option<Vec<ModelInfo>>,
    kv_cache: Option<KvCache>,
    metrics_exposed: bool,
    warnings: Vec<String>,
    local_gpus: Option<LocalGpus>,
}

/// This machine's GPUs, as the telemetry sources see them.
#[derive(Debug, Serialize)]
struct LocalGpus {
    source: Option<&'static str>,
    gpus: Vec<GpuInfo>,
    unavailable: Option<String>,
}

impl LocalGpus {
    fn probe(mode: TelemetryMode) -> LocalGpus {
        match speedmatrix_telemetry::probe_gpus(mode) {
            Ok((source, gpus)) => LocalGpus {
                source: Some(source.name()),
                gpus,
                unavailable: None,
            },
            Err(why) => LocalGpus {
                source: None,
                gpus: Vec::new(),
                unavailable: Some(why),
            },
        }
    }

    fn lines(&self) -> Vec<String> {
        if self.gpus.is_empty() {
            let why = self
                .unavailable
                .as_deref()
                .unwrap_or("the source listed none");
            return vec![format!("none found ({why})")];
        }
        let source = self.source.unwrap_or("?");
        self.gpus
            .iter()
            .map(|g| {
                let mut parts = vec![format!("{}: {}", g.index, g.name)];
                if let Some(m) = g.memory_total {
                    parts.push(m.to_string());
                }
                if let Some(d) = &g.driver_version {
                    parts.push(format!("driver {d}"));
                }
                if let Some(r) = &g.runtime_version {
                    parts.push(format!("CUDA {r}"));
                }
                if let Some(p) = g.power_limit_w {
                    parts.push(format!("power limit {p:.0} W"));
                }
                if let (Some(gen_), Some(w)) = (g.pcie_generation, g.pcie_width) {
                    parts.push(format!("PCIe gen {gen_} ×{w}"));
                }
                format!("{} (from {source})", parts.join(", "))
            })
            .collect()
    }
}

/// The KV capacity as the engine reports it.
#[derive(Debug, Serialize)]
struct KvCache {
    /// Where the figure came from.
    source: &'static str,
    kv_cache_tokens: Option<Tokens>,
    num_gpu_blocks: Option<u64>,
    block_size: Option<u64>,
    slots: Option<u32>,
    max_running_requests: Option<u32>,
    cache_dtype: Option<String>,
    gpu_memory_utilization: Option<f64>,
}

impl KvCache {
    /// The engine's own account, read as the runner reads it to plan.
    fn of(info: &ServerInfo) -> Option<Self> {
        let reported = info.capacity()?;
        let vllm = info.metrics().and_then(vllm::cache_config);
        let measured = speedmatrix_runner::measured_capacity(reported);
        let (num_gpu_blocks, block_size, slots, max_running_requests) = match measured {
            Some(MeasuredCapacity::Vllm {
                num_gpu_blocks,
                block_size,
            }) => (Some(num_gpu_blocks), Some(block_size), None, None),
            Some(MeasuredCapacity::LlamaCpp { n_parallel, .. }) => {
                (None, None, Some(n_parallel), None)
            }
            Some(MeasuredCapacity::Sglang {
                max_running_requests,
                ..
            }) => (None, None, None, max_running_requests),
            _ => (None, None, None, None),
        };
        Some(KvCache {
            source: reported.source(),
            kv_cache_tokens: measured.and_then(|m| m.tokens()).map(Tokens::new),
            num_gpu_blocks,
            block_size,
            slots,
            max_running_requests,
            cache_dtype: vllm.as_ref().and_then(|c| c.cache_dtype.clone()),
            gpu_memory_utilization: vllm.as_ref().and_then(|c| c.gpu_memory_utilization),
        })
    }
}

impl ProbeReport {
    fn from_info(info: &ServerInfo) -> Self {
        ProbeReport {
            base_url: info.base_url.clone(),
            engine: info.engine().name(),
            version: info.version().map(str::to_owned),
            models: info.models.clone(),
            kv_cache: KvCache::of(info),
            metrics_exposed: info.metrics().is_some(),
            warnings: info.warnings.clone(),
            local_gpus: None,
        }
    }

    fn render(&self) -> String {
        let mut out = format!("server          {}\n", self.base_url);
        out.push_str(&format!("engine          {}\n", self.engine));
        let version = self
            .version
            .as_deref()
            .unwrap_or("not exposed (no /version)");
        out.push_str(&format!("engine version  {version}\n"));
        match &self.models {
            None => out.push_str("models          not exposed (no /v1/models)\n"),
            Some(models) if models.is_empty() => out.push_str("models          none listed\n"),
            Some(models) => {
                for (i, model) in models.iter().enumerate() {
                    let label = if i == 0 { "models" } else { "" };
                    let len = model
                        .max_model_len
                        .map_or("max_model_len not reported".to_owned(), |n| {
                            format!("max_model_len {}", group_thousands(n.get()))
                        });
                    out.push_str(&format!("{label:<16}{}  ({len})\n", model.id));
                }
            }
        }
        out.push_str(&format!("kv cache        {}\n", self.kv_cache_line()));
        if let Some(local) = &self.local_gpus {
            for (i, line) in local.lines().iter().enumerate() {
                let label = if i == 0 { "local gpus" } else { "" };
                out.push_str(&format!("{label:<16}{line}\n"));
            }
        }
        for warning in &self.warnings {
            out.push_str(&format!("warning         {warning}\n"));
        }
        out
    }

    fn kv_cache_line(&self) -> String {
        let Some(cache) = &self.kv_cache else {
            return if self.metrics_exposed {
                "not exposed (no engine's capacity endpoint answered, and /metrics has no vllm:cache_config_info)".to_owned()
            } else {
                "not exposed (no engine's capacity endpoint answered, no /metrics)".to_owned()
            };
        };
        let tokens = cache
            .kv_cache_tokens
            .map_or("?".to_owned(), |t| group_thousands(t.get()));
        let mut line = match (cache.num_gpu_blocks, cache.block_size) {
            (Some(blocks), Some(block)) => format!(
                "{} blocks × {} tokens = {tokens} tokens",
                group_thousands(blocks),
                group_thousands(block)
            ),
            _ => format!("{tokens} tokens"),
        };
        if let Some(slots) = cache.slots {
            line.push_str(&format!(", {slots} slots"));
        }
        if let Some(n) = cache.max_running_requests {
            line.push_str(&format!(", at most {n} running requests"));
        }
        if let Some(dtype) = &cache.cache_dtype {
            line.push_str(&format!(", dtype {dtype}"));
        }
        if let Some(util) = cache.gpu_memory_utilization {
            line.push_str(&format!(", gpu_memory_utilization {util}"));
        }
        line.push_str(&format!(" (from {})", cache.source));
        line
    }
}
