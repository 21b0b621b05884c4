//! `speedmatrix study k8s`: a study as Kubernetes manifests (the study and every file it
//! names in a ConfigMap, a results volume, an Indexed Job of one pod per point), checked as
//! `study run` checks a study, and — with `--check-locally` — each pod's exact command run
//! here from the ConfigMap's own files, the way the cluster would run it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use speedmatrix_study::{
    BAD_INPUT_EXIT, K8sOptions, ModelCache, NodeLabel, POINT_FAILED_EXIT, Quantity, SecretEnv,
    Toleration,
};

use super::CollectArgs;
use crate::cmd::UsageError;
use crate::cmd::run::words;
use crate::out::{say, tell};

/// Flags of `speedmatrix study k8s`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub(super) struct K8sArgs {
    /// The study file.
    #[arg(value_name = "STUDY.toml")]
    study: PathBuf,
    /// Where to write configmap.yaml (the study file and every file it names), pvc.yaml (the
    /// results volume) and job.yaml (an Indexed Job: pod i runs `study run --point-index i`);
    /// apply them with `kubectl apply -f DIR`, then `speedmatrix study collect` on the
    /// volume's contents.
    #[arg(short, long, value_name = "DIR")]
    out: PathBuf,
    /// The image each pod runs: speedmatrix beside the engine the study's command starts
    /// (the repo's Dockerfile, target with-vllm).
    #[arg(long)]
    image: String,
    /// Points measured at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    parallelism: u32,
    /// GPUs each pod asks for.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1_024), help_heading = "Scheduling")]
    gpus_per_point: u32,
    /// The extended resource that counts GPUs: nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915,
    /// or any other a device plugin advertises.
    #[arg(
        long,
        default_value = "nvidia.com/gpu",
        value_name = "NAME",
        help_heading = "Scheduling"
    )]
    gpu_resource: String,
    /// Only nodes with this GPU model, as GPU feature discovery labels it
    /// (nvidia.com/gpu.product for nvidia.com/gpu, amd.com/gpu.product-name for amd.com/gpu),
    /// e.g. NVIDIA-GeForce-RTX-4090: points on mixed cards compare nothing.
    #[arg(long, value_name = "PRODUCT", help_heading = "Scheduling")]
    gpu_product: Option<String>,
    /// A node label every pod's node must have, key=value (repeatable).
    #[arg(long, value_name = "KEY=VALUE", help_heading = "Scheduling")]
    node_selector: Vec<NodeLabel>,
    /// A taint the pods tolerate, `key[=value][:NoSchedule|PreferNoSchedule|NoExecute]`
    /// (repeatable), e.g. nvidia.com/gpu:NoSchedule.
    #[arg(long, value_name = "TAINT", help_heading = "Scheduling")]
    toleration: Vec<Toleration>,
    /// CPU each pod requests (engine and client together: leave the client a few cores),
    /// e.g. 16.
    #[arg(long, value_name = "QUANTITY", help_heading = "Scheduling")]
    cpu: Option<Quantity>,
    /// Memory each pod requests and may use, e.g. 128Gi.
    #[arg(long, value_name = "QUANTITY", help_heading = "Scheduling")]
    memory: Option<Quantity>,
    /// An environment variable read from a Secret, NAME=secret/key (repeatable), e.g.
    /// HF_TOKEN=hf-token/token or OPENAI_API_KEY=bench/key: never written into a manifest.
    #[arg(
        long,
        value_name = "NAME=SECRET/KEY",
        help_heading = "Secrets and volumes"
    )]
    secret_env: Vec<SecretEnv>,
    /// An existing PersistentVolumeClaim holding the model cache, mounted at /models with
    /// HF_HOME=/models/huggingface, so that no pod downloads the weights again.
    #[arg(
        long,
        value_name = "CLAIM",
        conflicts_with = "model_cache_host_path",
        help_heading = "Secrets and volumes"
    )]
    model_cache_pvc: Option<String>,
    /// A folder on every GPU node holding the model cache, mounted likewise.
    #[arg(long, value_name = "PATH", help_heading = "Secrets and volumes")]
    model_cache_host_path: Option<String>,
    /// Size of each pod's /dev/shm (engines share tensors through it), e.g. 16Gi.
    #[arg(long, value_name = "QUANTITY", help_heading = "Secrets and volumes")]
    shm_size: Option<Quantity>,
    /// A Secret that lets the nodes pull --image.
    #[arg(long, value_name = "SECRET", help_heading = "Secrets and volumes")]
    image_pull_secret: Option<String>,
    /// The pods' service account.
    #[arg(long, value_name = "NAME", help_heading = "Secrets and volumes")]
    service_account: Option<String>,
    /// Size of the results volume (ReadWriteMany).
    #[arg(long, default_value = "100Gi", value_name = "QUANTITY")]
    results_size: Quantity,
    /// Storage class of the results volume (default: the cluster's).
    #[arg(long)]
    storage_class: Option<String>,
    /// Namespace of every object (default: kubectl's current one).
    #[arg(long)]
    namespace: Option<String>,
    /// A Job for clusters before Kubernetes 1.29 (no per-index failure handling): a pod exits
    /// 0 once its point's failure is recorded, and a pod that died unrecorded is retried.
    #[arg(long)]
    legacy_job: bool,
    /// After writing the manifests, run each pod's exact command here, in order, from the
    /// ConfigMap's files (unpacked into DIR/local-check/study) into DIR/local-check/results,
    /// then collect them: proves the commands, files and paths agree without a cluster
    /// (Secrets are not read; the server command must run on this machine, e.g. `speedmatrix
    /// sim`).
    #[arg(long)]
    check_locally: bool,
    /// Longest a pod's command may take in --check-locally.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration, value_name = "DURATION")]
    check_timeout: Duration,
    /// Overwrite the output if it already exists (every command's outputs are refused
    /// otherwise).
    #[arg(long)]
    force: bool,
}

const AFTER_HELP: &str = "\
Examples:
  speedmatrix study k8s kv.toml -o k8s --image ghcr.io/me/speedmatrix-vllm:0.32 \\
      --gpu-product NVIDIA-GeForce-RTX-4090 --toleration nvidia.com/gpu:NoSchedule \\
      --cpu 16 --memory 96Gi --secret-env HF_TOKEN=hf-token/token --model-cache-pvc models
  speedmatrix study k8s sim.toml -o k8s --image speedmatrix:dev --gpus-per-point 0 --check-locally

Each index runs once: a failed point is recorded and only its index fails (Kubernetes 1.29 or
later: backoffLimitPerIndex and podFailurePolicy; --legacy-job for older clusters). Every file
the study names by a relative path (--model-config, a GPU catalog, a profile the server command
names) is packed into the ConfigMap and mounted at the same path in the pods' working folder;
absolute paths must be on the model cache (/models).";

pub(super) fn k8s(args: &K8sArgs) -> anyhow::Result<ExitCode> {
    let (study, text) = super::load(&args.study)?;
    let opts = options(args)?;
    let base = std::env::current_dir().context("cannot read the current folder")?;
    let files = speedmatrix_study::study_files(&study, &text, &base, opts.model_cache.is_some())
        .map_err(|e| UsageError(format!("{}: {e}", args.study.display())))?;
    let manifests = speedmatrix_study::k8s_manifests(&study, &text, &files, &opts)
        .map_err(|e| UsageError(e.to_string()))?;
    speedmatrix_runner::output::claim_dir(&args.out, "--out", args.force)
        .map_err(|e| words::error(e, None))?;
    for (name, yaml) in &manifests {
        speedmatrix_runner::output::write_file(&args.out, name, yaml)?;
    }
    let packed: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    say!(
        "wrote {}/{{configmap.yaml, pvc.yaml, job.yaml}} ({} points; the ConfigMap holds the \
         study{}): `kubectl apply -f {}`; each pod i runs point i into the results volume; then \
         `speedmatrix study collect` on its contents",
        args.out.display(),
        study.points()?.len(),
        if packed.is_empty() {
            String::new()
        } else {
            format!(" and {}", packed.join(", "))
        },
        args.out.display()
    );
    if args.check_locally {
        return check_locally(args, &manifests);
    }
    Ok(ExitCode::SUCCESS)
}

/// The typed options from the flags; the GPU model becomes its node label.
fn options(args: &K8sArgs) -> anyhow::Result<K8sOptions> {
    let mut node_selector = args.node_selector.clone();
    if let Some(product) = &args.gpu_product {
        let key = match args.gpu_resource.as_str() {
            "nvidia.com/gpu" => "nvidia.com/gpu.product",
            "amd.com/gpu" => "amd.com/gpu.product-name",
            other => {
                return Err(UsageError(format!(
                    "--gpu-product knows the labels of nvidia.com/gpu and amd.com/gpu, not {other}: \
                     give the node label with --node-selector KEY=VALUE"
                ))
                .into());
            }
        };
        node_selector.push(
            format!("{key}={product}")
                .parse()
                .map_err(|e: String| UsageError(format!("--gpu-product: {e}")))?,
        );
    }
    let model_cache = match (&args.model_cache_pvc, &args.model_cache_host_path) {
        (Some(claim), _) => Some(ModelCache::Claim(claim.clone())),
        (None, Some(path)) if path.starts_with('/') => Some(ModelCache::HostPath(path.clone())),
        (None, Some(path)) => {
            return Err(UsageError(format!(
                "--model-cache-host-path {path}: give the node's folder as an absolute path"
            ))
            .into());
        }
        (None, None) => None,
    };
    Ok(K8sOptions {
        image: args.image.clone(),
        parallelism: args.parallelism,
        gpus_per_point: args.gpus_per_point,
        gpu_resource: args.gpu_resource.clone(),
        node_selector,
        tolerations: args.toleration.clone(),
        cpu: args.cpu.clone(),
        memory: args.memory.clone(),
        secret_env: args.secret_env.clone(),
        model_cache,
        shm_size: args.shm_size.clone(),
        image_pull_secret: args.image_pull_secret.clone(),
        service_account: args.service_account.clone(),
        results_size: args.results_size.0.clone(),
        storage_class: args.storage_class.clone(),
        namespace: args.namespace.clone(),
        legacy_job: args.legacy_job,
    })
}

/// Unpacks the ConfigMap as the pods see it, runs each pod's command with its index from
/// the folder the pod works in, reads each exit as the Job's failure policy would, and
/// collects the results.
fn check_locally(args: &K8sArgs, manifests: &[(String, String)]) -> anyhow::Result<ExitCode> {
    let doc = |name: &str| -> anyhow::Result<serde_json::Value> {
        let (_, yaml) = manifests
            .iter()
            .find(|(n, _)| n == name)
            .with_context(|| format!("no {name} was written"))?;
        Ok(serde_norway::from_str(yaml)?)
    };
    let (config, job) = (doc("configmap.yaml")?, doc("job.yaml")?);
    // Absolute: the pods' commands run from the study's folder, not from here.
    let root = std::path::absolute(args.out.join("local-check"))
        .context("cannot name the local check's folder")?;
    let (study_dir, results) = (root.join("study"), root.join("results"));
    unpack(&config, &job, &study_dir)?;
    std::fs::create_dir_all(&results)?;
    let spec = &job["spec"];
    let container = &spec["template"]["spec"]["containers"][0];
    let command: Vec<String> = container["command"]
        .as_array()
        .context("the Job's container has no command")?
        .iter()
        .filter_map(|w| w.as_str().map(str::to_owned))
        .collect();
    let completions = spec["completions"].as_u64().unwrap_or(0);
    let program = std::env::current_exe().context("cannot find this program")?;
    let (mut job_failed, mut failed_indexes) = (false, 0);
    for index in 0..completions {
        let argv = pod_argv(&command, index, &results);
        tell!("pod {index}: {}", argv.join(" "));
        let code = run_pod(&program, &argv[1..], &study_dir, index, args.check_timeout)?;
        let meaning = match code {
            Some(0) => "succeeded".to_owned(),
            Some(c) if c == BAD_INPUT_EXIT && !args.legacy_job => {
                job_failed = true;
                "bad input: the Job would fail at once (podFailurePolicy FailJob)".to_owned()
            }
            Some(c) if c == POINT_FAILED_EXIT => {
                "its point failed and was recorded: its index is marked failed, the others run"
                    .to_owned()
            }
            Some(c) => format!("exited {c}: its index is marked failed"),
            None => "killed: its index is marked failed".to_owned(),
        };
        tell!("pod {index}: {meaning}");
        failed_indexes += usize::from(code != Some(0));
        if job_failed {
            break;
        }
    }
    super::folder::collect(&CollectArgs { dir: results })?;
    if job_failed || failed_indexes > 0 {
        tell!(
            "local check: {}",
            if job_failed {
                "the Job would fail (bad input)".to_owned()
            } else {
                format!("{failed_indexes} of {completions} indexes failed; the others ran")
            }
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The ConfigMap's keys written where the pod's volume items mount them.
fn unpack(config: &serde_json::Value, job: &serde_json::Value, dir: &Path) -> anyhow::Result<()> {
    let pod = &job["spec"]["template"]["spec"];
    let items = pod["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "study"))
        .and_then(|v| v["configMap"]["items"].as_array())
        .context("the Job mounts no study ConfigMap")?;
    let mut bytes: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (key, value) in config["data"].as_object().into_iter().flatten() {
        bytes.insert(
            key.clone(),
            value.as_str().unwrap_or_default().as_bytes().to_vec(),
        );
    }
    for (key, value) in config["binaryData"].as_object().into_iter().flatten() {
        let decoded = base64::decode(value.as_str().unwrap_or_default())
            .with_context(|| format!("binaryData {key} is not base64"))?;
        bytes.insert(key.clone(), decoded);
    }
    for item in items {
        let (Some(key), Some(path)) = (item["key"].as_str(), item["path"].as_str()) else {
            continue;
        };
        let content = bytes
            .get(key)
            .with_context(|| format!("the ConfigMap has no key {key}"))?;
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, content)?;
    }
    Ok(())
}

/// The pod's command with its index and this machine's results folder.
fn pod_argv(command: &[String], index: u64, results: &Path) -> Vec<String> {
    command
        .iter()
        .map(|w| match w.as_str() {
            "$(JOB_COMPLETION_INDEX)" => index.to_string(),
            "/results" => results.display().to_string(),
            other => other.to_owned(),
        })
        .collect()
}

/// Runs one pod's command (this program, from the study's folder, as the pod's working
/// folder is `/study`) within `limit`; its exit code, `None` when it was killed.
fn run_pod(
    program: &Path,
    args: &[String],
    dir: &Path,
    index: u64,
    limit: Duration,
) -> anyhow::Result<Option<i32>> {
    let mut child = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("JOB_COMPLETION_INDEX", index.to_string())
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))?;
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status.code());
        }
        if Instant::now() > deadline {
            tell!(
                "pod {index}: still running after {}; stopped (--check-timeout)",
                humantime::format_duration(limit)
            );
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
