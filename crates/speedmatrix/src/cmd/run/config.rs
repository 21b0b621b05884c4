//! From flags to the runner's configuration: the matrix, the tokenizer, the
//! capacity hints, the labels, the extra body, and the clear-text warning.

use speedmatrix_metrics::TokensPerSecond;
use speedmatrix_report::{ClientSetup, LocalServer};
use speedmatrix_runner::{
    BurstSpec, CapacityHints, ConversationSpec, InjectSpec, LoadMode, MatrixSpec, PrefillMode,
    Preset, RateLength, RateSpec, RunLabels, SearchGoal, SearchSpec,
};
use speedmatrix_workload::ArrivalProcess;

use super::args::{Args, ArrivalArg, ModeArg, PrefillModeArg, PresetArg};
use crate::cmd::UsageError;
use crate::cmd::engine_flags::{EngineArgs, PredictedEngine};
use crate::hardware;

pub(crate) fn matrix(args: &Args, embedded: bool) -> Result<MatrixSpec, UsageError> {
    let preset = args.preset.unwrap_or(if embedded {
        PresetArg::Quick
    } else {
        PresetArg::Seed
    });
    let mut m = match preset {
        PresetArg::Quick => Preset::Quick.matrix(),
        PresetArg::Seed => Preset::Seed.matrix(),
    };
    if let Some(c) = &args.contexts {
        m.contexts = c.clone();
    }
    if let Some(c) = &args.concurrency {
        m.concurrencies = c.clone();
    }
    if let Some(p) = &args.prefill_contexts {
        m.prefill_contexts = p.iter().filter_map(|p| p.0).collect();
    }
    if let Some(r) = args.prefill_repeats {
        m.prefill_repeats = r;
    }
    m.prefill_mode = match args.prefill_mode {
        PrefillModeArg::Cold => PrefillMode::Cold,
        PrefillModeArg::Warmup => PrefillMode::Warmup,
    };
    if let Some(d) = args.duration {
        m.duration = d;
    }
    if let Some(t) = args.max_tokens {
        m.max_tokens = t;
    }
    m.load = load_mode(args, m.duration)?;
    m.slo = args.slo.clone();
    if let Some(prefix) = args.shared_prefix {
        if matches!(args.mode, ModeArg::Sustained | ModeArg::Conversation) {
            return Err(UsageError(
                "--shared-prefix shapes burst and rate prompts: add --mode burst or --mode rate (sustained cells use --prompt-sharing)".into(),
            ));
        }
        if args.prompt_sharing == speedmatrix_units::PromptSharing::Shared {
            return Err(UsageError(
                "--shared-prefix and --prompt-sharing shared contradict each other: pick one"
                    .into(),
            ));
        }
        m.shared_prefix = Some(prefix);
    }
    if let Some(tokens) = args.inject {
        if args.mode != ModeArg::Sustained {
            return Err(UsageError(
                "--inject probes sustained-decode cells: drop --mode or use --mode sustained"
                    .into(),
            ));
        }
        if tokens.get() == 0 || args.inject_settle.is_zero() {
            return Err(UsageError(
                "--inject needs a positive prompt length and --inject-settle a positive time"
                    .into(),
            ));
        }
        m.inject = Some(InjectSpec {
            tokens,
            settle: args.inject_settle,
        });
    }
    if args.search {
        m.search = Some(search_spec(args)?);
    } else if args.search_floor.is_some() {
        return Err(UsageError("--search-floor is a goal of --search".into()));
    }
    Ok(m)
}

/// The search's goal and bounds from `--search` and its flags.
fn search_spec(args: &Args) -> Result<SearchSpec, UsageError> {
    if args.mode == ModeArg::Sustained {
        return Err(UsageError(
            "--search needs a load mode: --mode burst, rate or conversation".into(),
        ));
    }
    let goal = match args.search_floor {
        None if args.slo.is_none() => {
            return Err(UsageError(
                "--search needs an objective (--slo) or a floor of output tok/s (--search-floor)"
                    .into(),
            ));
        }
        None => SearchGoal::MostLoadMeetingSlo,
        Some(f) => match TokensPerSecond::new(f).filter(|f| f.get() > 0.0) {
            Some(floor) => SearchGoal::PerRequestAtFloor { floor },
            None => {
                return Err(UsageError(format!(
                    "--search-floor {f}: give a positive number of output tokens per second"
                )));
            }
        },
    };
    if args.search_steps == 0 {
        return Err(UsageError("--search-steps must be at least 1".into()));
    }
    Ok(SearchSpec {
        max_steps: args.search_steps,
        relative_tolerance: args.search_tolerance,
        goal,
    })
}

/// The load mode from `--mode` and its flags, refusing flags of another mode.
fn load_mode(args: &Args, duration: std::time::Duration) -> Result<LoadMode, UsageError> {
    let bad = |why: &str| Err(UsageError(why.to_owned()));
    let sustained_axes = matches!(args.mode, ModeArg::Sustained | ModeArg::Conversation);
    let cap = match args.concurrency.as_deref() {
        Some([one]) if !sustained_axes => Some(*one),
        Some(_) if !sustained_axes => {
            return bad(
                "in burst and rate modes --concurrency is one number: the cap on requests in flight",
            );
        }
        _ => None,
    };
    if args.mode != ModeArg::Rate
        && (args.request_rate.is_some() || args.burstiness.is_some() || args.arrival_seed.is_some())
    {
        return bad("--request-rate, --burstiness and --arrival-seed belong to --mode rate");
    }
    if sustained_axes && (args.requests.is_some() || args.warm_cache) {
        return bad("--requests and --warm-cache belong to --mode burst or rate");
    }
    if args.mode == ModeArg::Sustained && args.slo.is_some() {
        return bad("--slo judges burst and rate cells: add --mode burst or --mode rate");
    }
    match args.mode {
        ModeArg::Sustained => Ok(LoadMode::Sustained),
        ModeArg::Conversation => {
            if args.turns == 0 {
                return bad("--turns must be at least 1");
            }
            if args.api == speedmatrix_units::Api::Chat {
                return bad(
                    "--mode conversation sends each turn as one completions prompt: use --api completions",
                );
            }
            Ok(LoadMode::Conversation(ConversationSpec {
                turns: args.turns,
                question: args.question_tokens,
            }))
        }
        ModeArg::Burst => {
            let Some(requests) = &args.requests else {
                return bad("--mode burst needs --requests, e.g. --requests 1,8,64");
            };
            Ok(LoadMode::Burst(BurstSpec {
                requests: requests.iter().map(|n| n.get()).collect(),
                max_concurrency: cap,
                warm_cache: args.warm_cache,
            }))
        }
        ModeArg::Rate => {
            let Some(rates) = &args.request_rate else {
                return bad("--mode rate needs --request-rate, e.g. --request-rate 1,2,4");
            };
            let length = match args.requests.as_deref() {
                None => RateLength::Duration(duration),
                Some([n]) => RateLength::Requests(u64::from(n.get())),
                Some(_) => {
                    return bad(
                        "with --mode rate, --requests is one number: the requests each rate cell sends",
                    );
                }
            };
            let arrival = match (args.arrival, args.burstiness) {
                (ArrivalArg::Gamma, Some(b)) => ArrivalProcess::Gamma { burstiness: b },
                (ArrivalArg::Gamma, None) => {
                    return bad("--arrival gamma needs --burstiness, e.g. --burstiness 0.5");
                }
                (_, Some(_)) => return bad("--burstiness shapes --arrival gamma only"),
                (ArrivalArg::Poisson, None) => ArrivalProcess::Poisson,
                (ArrivalArg::Constant, None) => ArrivalProcess::Constant,
            };
            if let ArrivalProcess::Gamma { burstiness } = arrival
                && !(burstiness.is_finite() && burstiness > 0.0)
            {
                return bad("--burstiness must be a positive number (1 is Poisson)");
            }
            if args.drain.is_zero() {
                return bad("--drain must be longer than zero");
            }
            Ok(LoadMode::Rate(RateSpec {
                rates: rates.clone(),
                arrival,
                seed: args.arrival_seed.unwrap_or(args.seed),
                length,
                max_in_flight: cap,
                drain: args.drain,
                warm_cache: args.warm_cache,
            }))
        }
    }
}

pub(crate) fn extra_body(
    text: Option<&str>,
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let Some(text) = text else {
        return Ok(serde_json::Map::new());
    };
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(UsageError(
            "--extra-body must be a JSON object, e.g. '{\"top_k\": 1}'".into(),
        )
        .into()),
        Err(e) => Err(UsageError(format!("--extra-body is not valid JSON: {e}")).into()),
    }
}

pub(crate) fn load_tokenizer(
    args: &Args,
    embedded: bool,
) -> anyhow::Result<speedmatrix_workload::Tokenizer> {
    let source = match (&args.tokenizer, embedded) {
        (Some(s), _) => s.as_str(),
        (None, true) => speedmatrix_workload::BUNDLED_NAME,
        (None, false) => {
            return Err(UsageError(
                "with --url, pass --tokenizer: the served model's tokenizer.json, its model folder, \
                 or its Hugging Face id in the local HF cache, so prompts have exact token counts"
                    .into(),
            )
            .into());
        }
    };
    speedmatrix_workload::Tokenizer::load(source)
        .map_err(|e| UsageError(format!("--tokenizer {source}: {e}")).into())
}

pub(crate) fn capacity_hints(args: &Args) -> anyhow::Result<CapacityHints> {
    let Some(path) = &args.model_config else {
        return Ok(CapacityHints {
            prediction: None,
            vllm_inputs: None,
            kv_capacity_tokens: args.kv_capacity_tokens,
        });
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError(format!(
            "--model-config {}: cannot read it ({e}); pass the path of the model's config.json",
            path.display()
        ))
    })?;
    let model = speedmatrix_capacity::ModelConfig::from_json(&text)
        .map_err(|e| UsageError(format!("--model-config {}: {e}", path.display())))?;
    let engine = args
        .engine
        .as_deref()
        .and_then(PredictedEngine::from_name)
        .unwrap_or(PredictedEngine::Vllm);
    let mut hints = hints_from(model, &args.engine_flags, engine)?;
    hints.kv_capacity_tokens = args.kv_capacity_tokens;
    Ok(hints)
}

/// The capacity hints of a simulator profile that stands for a real model
/// and launch (the built-in seed profile): its KV layout, as `--model-config`
/// and the engine flags would give it against a real server.
pub(crate) fn profile_capacity_hints(
    model: &speedmatrix_sim::ProfileModel,
) -> anyhow::Result<CapacityHints> {
    #[derive(clap::Parser)]
    struct Launch {
        #[command(flatten)]
        flags: EngineArgs,
    }
    let launch = <Launch as clap::Parser>::try_parse_from(
        std::iter::once("profile").chain(model.capacity_flags.iter().map(String::as_str)),
    )
    .map_err(|e| UsageError(format!("the simulator profile's capacity_flags: {e}")))?;
    let config = speedmatrix_capacity::ModelConfig::from_json(&model.config.to_string())
        .map_err(|e| UsageError(format!("the simulator profile's model config: {e}")))?;
    hints_from(config, &launch.flags, PredictedEngine::Vllm)
}

fn hints_from(
    model: speedmatrix_capacity::ModelConfig,
    engine_flags: &EngineArgs,
    engine: PredictedEngine,
) -> anyhow::Result<CapacityHints> {
    let gpu = engine_flags.gpu()?;
    let flags = engine_flags.engine_flags(engine)?;
    let p = speedmatrix_capacity::predict(&model, &gpu, &flags)
        .map_err(|e| UsageError(format!("could not predict the KV capacity: {e}")))?;
    let vllm_inputs = match flags {
        speedmatrix_capacity::EngineFlags::Vllm(vflags) => Some(speedmatrix_runner::VllmInputs {
            model,
            gpu,
            flags: vflags,
            version_given: engine_flags.vllm_version.is_some(),
        }),
        _ => None,
    };
    Ok(CapacityHints {
        prediction: Some(p),
        vllm_inputs,
        kv_capacity_tokens: None,
    })
}

pub(crate) fn labels(args: &Args, embedded: bool) -> RunLabels {
    let mut hardware = hardware::detect(args.telemetry);
    if embedded {
        // The numbers are the profile's, not this machine's GPU's: say so where
        // the page names the hardware.
        hardware.kind = Some("Simulated engine (speedmatrix-sim) on this machine's CPU".into());
        hardware.gpus = vec![speedmatrix_report::Gpu {
            name: format!("{} (simulated)", args.sim_profile),
            memory_bytes: None,
            count: 1,
        }];
    }
    if let Some(gpu) = &args.hardware_gpu {
        hardware.gpus = vec![speedmatrix_report::Gpu {
            name: gpu.clone(),
            memory_bytes: None,
            count: 1,
        }];
    }
    RunLabels {
        hardware,
        model: None,
        launch_command: args.launch_command.clone().or_else(|| {
            embedded.then(|| format!("speedmatrix sim --profile {}", args.sim_profile))
        }),
        quantization: args.quantization.clone(),
        engine: args.engine.clone(),
        revision: None,
        tokenizer: args.tokenizer.clone(),
        client: Some(client_setup(args)),
    }
}

/// How the client runs, for the report: its runtime threads and cores, and
/// the cores of a server listening on this host (see [`crate::client_host`]).
fn client_setup(args: &Args) -> ClientSetup {
    use crate::client_host::{Cores, allowed_cores, local_listener, loopback_port};
    let threads = tokio::runtime::Handle::try_current().map_or(1, |h| h.metrics().num_workers());
    let cores = allowed_cores();
    let local_server = args
        .url
        .as_deref()
        .and_then(loopback_port)
        .and_then(local_listener)
        .map(|(pid, server)| {
            let shared = cores
                .as_ref()
                .map(|c| c.0.intersection(&server.0).copied().collect());
            LocalServer {
                pid,
                cores: server.to_string(),
                shared_cores: shared
                    .filter(|s: &std::collections::BTreeSet<usize>| !s.is_empty())
                    .map(|s| Cores(s).to_string()),
            }
        });
    ClientSetup {
        runtime_threads: u32::try_from(threads).unwrap_or(u32::MAX),
        cores: cores.map(|c| c.to_string()),
        pinned: args.client_cores.is_some(),
        local_server,
    }
}

/// Warns before any connection is made when an API key would cross the
/// network in clear text.
pub(crate) fn warn_plain_http_with_key(args: &Args) {
    let (Some(url), Some(_)) = (&args.url, &args.api_key) else {
        return;
    };
    if let Some(host) = plain_http_host(url)
        && !is_loopback(host)
    {
        eprintln!(
            "warning: sending an API key over plain http:// to {host}; anyone on the path can read it (use https://)"
        );
    }
}

/// The host of an `http://` URL (brackets kept for IPv6), `None` for other schemes.
fn plain_http_host(url: &str) -> Option<&str> {
    let scheme_end = url.find("://")?;
    if !url[..scheme_end].eq_ignore_ascii_case("http") {
        return None;
    }
    let rest = &url[scheme_end + 3..];
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => &host_port[..v6.find(']').map_or(host_port.len(), |i| i + 2)],
        None => host_port.split(':').next().unwrap_or_default(),
    };
    (!host.is_empty()).then_some(host)
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::{is_loopback, plain_http_host};

    #[test]
    fn plain_http_hosts_are_found_and_loopback_is_recognised() {
        assert_eq!(plain_http_host("http://10.0.0.5:8000/v1"), Some("10.0.0.5"));
        assert_eq!(
            plain_http_host("HTTP://user:pw@gpu-box:8000"),
            Some("gpu-box")
        );
        assert_eq!(plain_http_host("http://[::1]:8000"), Some("[::1]"));
        assert_eq!(plain_http_host("https://gpu-box"), None);
        assert_eq!(plain_http_host("gpu-box:8000"), None);
        assert!(is_loopback("[::1]") && is_loopback("127.0.0.2") && is_loopback("LOCALHOST"));
        assert!(
            !is_loopback("10.0.0.5") && !is_loopback("gpu-box") && !is_loopback("127.example.com")
        );
    }
}
