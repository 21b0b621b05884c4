//! A study as Kubernetes manifests: the study file and every file it names in a ConfigMap, a
//! PersistentVolumeClaim for the results, and an Indexed Job whose completion index is the
//! point each pod measures (`speedmatrix study run study.toml --out /results --point-index
//! $(JOB_COMPLETION_INDEX)`, run in the ConfigMap's folder so the study's relative paths read
//! as they do here).
//!
//! Each index runs once: a failed point is recorded by its pod and its index marked failed
//! (`backoffLimitPerIndex: 0`, `maxFailedIndexes` = every point, `podFailurePolicy`), so the
//! other points still run and none is measured twice; a pod evicted before it finished is run
//! again (its run resumes from its journal); exit 2 (bad input, the same in every pod) fails
//! the Job at once. That needs Kubernetes 1.29 or later (per-index backoff and the
//! `FailIndex` action are on by default from 1.29, GA in 1.33); [`K8sOptions::legacy_job`]
//! writes a Job for older clusters whose pods exit 0 when their point's failure is recorded.

mod files;
mod flags;

use std::collections::BTreeMap;

use serde_json::{Value, json};

pub use self::files::{CONFIGMAP_LIMIT, MODEL_CACHE_MOUNT, PackedFile, study_files};
pub use self::flags::{NodeLabel, Quantity, SecretEnv, Toleration};
use crate::{Study, StudyError};

/// The pods' working folder: the ConfigMap, the study file and every file it names.
pub const STUDY_MOUNT: &str = "/study";

/// Where the model cache lives, mounted at [`MODEL_CACHE_MOUNT`] with `HF_HOME` pointing
/// into it, so that no pod downloads the weights again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelCache {
    /// An existing PersistentVolumeClaim (ReadWriteMany or ReadOnlyMany for parallel pods).
    Claim(String),
    /// A folder on every GPU node.
    HostPath(String),
}

/// Choices the study file leaves to the cluster.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct K8sOptions {
    /// The container image: speedmatrix beside the engine the study's command starts
    /// (the repo's Dockerfile, target `with-vllm`).
    pub image: String,
    /// Points measured at once (pods running together).
    pub parallelism: u32,
    /// GPUs each pod asks for; 0 for none.
    pub gpus_per_point: u32,
    /// The extended resource that counts them (`nvidia.com/gpu`, `amd.com/gpu`).
    pub gpu_resource: String,
    /// Labels a node must have: the GPU model's (`nvidia.com/gpu.product=…`) and any other.
    pub node_selector: Vec<NodeLabel>,
    /// Taints the pods tolerate (GPU nodes are usually tainted).
    pub tolerations: Vec<Toleration>,
    /// CPU the pod requests (engine and client together; the client needs a few cores of
    /// its own beside the engine).
    pub cpu: Option<Quantity>,
    /// Memory the pod requests, and its limit.
    pub memory: Option<Quantity>,
    /// Environment variables read from Secrets (`HF_TOKEN`, `OPENAI_API_KEY`), never inlined.
    pub secret_env: Vec<SecretEnv>,
    /// The model cache volume.
    pub model_cache: Option<ModelCache>,
    /// The size of `/dev/shm` (engines share tensors between processes through it).
    pub shm_size: Option<Quantity>,
    /// A Secret that lets the nodes pull the image.
    pub image_pull_secret: Option<String>,
    /// The pods' service account.
    pub service_account: Option<String>,
    /// The results volume's size (`100Gi`).
    pub results_size: String,
    /// Its storage class, when not the cluster's default.
    pub storage_class: Option<String>,
    /// The namespace, when not the current one.
    pub namespace: Option<String>,
    /// A Job for clusters before 1.29: no per-index failure handling, so a pod exits 0 when
    /// its point failed and was recorded, and a pod that died unrecorded is retried.
    pub legacy_job: bool,
}

/// A name Kubernetes accepts (RFC 1123 label: lowercase letters, digits, `-`, at most 63).
fn dns_label(text: &str) -> String {
    let mut s: String = text
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let s = s.trim_matches('-');
    let s: String = s.chars().take(40).collect();
    let s = s.trim_matches('-').to_owned();
    if s.is_empty() { "study".to_owned() } else { s }
}

/// The manifests, as `(file name, YAML)`: `files` (from [`study_files`]) are packed into the
/// ConfigMap beside the study file.
pub fn k8s_manifests(
    study: &Study,
    study_text: &str,
    files: &[PackedFile],
    opts: &K8sOptions,
) -> Result<Vec<(String, String)>, StudyError> {
    let points = study.points()?;
    if opts.parallelism == 0 {
        return Err(StudyError::Invalid("parallelism must be at least 1".into()));
    }
    let base = format!("speedmatrix-{}", dns_label(&study.name));
    let meta = |name: &str| {
        let mut m = json!({
            "name": name,
            "labels": {"app.kubernetes.io/name": "speedmatrix", "speedmatrix/study": dns_label(&study.name)},
        });
        if let Some(ns) = &opts.namespace {
            m["namespace"] = json!(ns);
        }
        m
    };
    let (config, items) = config_map(meta(&format!("{base}-study")), study_text, files);
    let mut pvc_spec = json!({
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": opts.results_size}},
    });
    if let Some(class) = &opts.storage_class {
        pvc_spec["storageClassName"] = json!(class);
    }
    let pvc = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(&format!("{base}-results")),
        "spec": pvc_spec,
    });
    let count = u32::try_from(points.len()).unwrap_or(u32::MAX);
    let mut spec = json!({
        "completionMode": "Indexed",
        "completions": count,
        "parallelism": opts.parallelism.min(count),
        "template": {
            "metadata": {"labels": {"app.kubernetes.io/name": "speedmatrix"}},
            "spec": pod_spec(&base, items, opts),
        },
    });
    failure_handling(&mut spec, count, opts.legacy_job);
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(&base),
        "spec": spec,
    });
    [
        ("configmap.yaml", config),
        ("pvc.yaml", pvc),
        ("job.yaml", job),
    ]
    .into_iter()
    .map(|(name, v)| Ok((name.to_owned(), yaml(&v)?)))
    .collect()
}

/// The point's exit code when it failed and its failure was recorded (its `outcome.json`):
/// the index is marked failed, never run again.
pub const POINT_FAILED_EXIT: i32 = 1;
/// The exit code of bad input (a study or file the pod cannot use): the same in every pod.
pub const BAD_INPUT_EXIT: i32 = 2;

/// Each index once: a recorded failure fails its index only, an eviction is retried, bad
/// input fails the Job; or, for clusters before 1.29, a few retries of pods that died before
/// they recorded anything (a recorded failure exits 0 there).
fn failure_handling(spec: &mut Value, count: u32, legacy: bool) {
    if legacy {
        spec["backoffLimit"] = json!(3);
        return;
    }
    spec["backoffLimitPerIndex"] = json!(0);
    spec["maxFailedIndexes"] = json!(count);
    spec["podFailurePolicy"] = json!({"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "point", "operator": "In", "values": [BAD_INPUT_EXIT]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "FailIndex", "onExitCodes": {"containerName": "point", "operator": "NotIn", "values": [0]}}
    ]});
}

/// The ConfigMap and the volume items that mount each key at its path: the study file at
/// `study.toml`, every packed file at its own relative path.
fn config_map(metadata: Value, study_text: &str, files: &[PackedFile]) -> (Value, Vec<Value>) {
    let mut data = BTreeMap::new();
    let mut binary = BTreeMap::new();
    let mut items = vec![json!({"key": "study.toml", "path": "study.toml"})];
    data.insert("study.toml".to_owned(), study_text.to_owned());
    for (i, f) in files.iter().enumerate() {
        // A key is `[-._a-zA-Z0-9]+`: the index keeps two files of one name apart.
        let name = f.path.rsplit('/').next().unwrap_or("file");
        let clean: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-._".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let key = format!("f{i}-{clean}");
        match std::str::from_utf8(&f.bytes) {
            Ok(text) => data.insert(key.clone(), text.to_owned()),
            Err(_) => binary.insert(key.clone(), base64::encode(&f.bytes)),
        };
        items.push(json!({"key": key, "path": f.path}));
    }
    let mut config = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": data,
    });
    if !binary.is_empty() {
        config["binaryData"] = json!(binary);
    }
    (config, items)
}

/// The pod: one container that starts the point's server and measures it, in the study's
/// folder, with the GPUs, node, secrets and volumes asked for.
fn pod_spec(base: &str, items: Vec<Value>, opts: &K8sOptions) -> Value {
    let mut command = vec![
        "speedmatrix",
        "study",
        "run",
        "study.toml",
        "--out",
        "/results",
        "--point-index",
        "$(JOB_COMPLETION_INDEX)",
    ];
    if opts.legacy_job {
        command.push("--recorded-failure-ok");
    }
    let mut env: Vec<Value> = opts
        .secret_env
        .iter()
        .map(|s| json!({"name": s.name, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}))
        .collect();
    let mut mounts = vec![
        json!({"name": "study", "mountPath": STUDY_MOUNT, "readOnly": true}),
        json!({"name": "results", "mountPath": "/results"}),
        json!({"name": "shm", "mountPath": "/dev/shm"}),
    ];
    let mut shm = json!({"medium": "Memory"});
    if let Some(size) = &opts.shm_size {
        shm["sizeLimit"] = json!(size.0);
    }
    let mut volumes = vec![
        json!({"name": "study", "configMap": {"name": format!("{base}-study"), "items": items}}),
        json!({"name": "results", "persistentVolumeClaim": {"claimName": format!("{base}-results")}}),
        // Engines share tensors between processes through /dev/shm.
        json!({"name": "shm", "emptyDir": shm}),
    ];
    if let Some(cache) = &opts.model_cache {
        let source = match cache {
            ModelCache::Claim(name) => json!({"persistentVolumeClaim": {"claimName": name}}),
            ModelCache::HostPath(path) => {
                json!({"hostPath": {"path": path, "type": "DirectoryOrCreate"}})
            }
        };
        let mut volume = json!({"name": "models"});
        if let (Some(v), Some(s)) = (volume.as_object_mut(), source.as_object()) {
            v.extend(s.clone());
        }
        volumes.push(volume);
        mounts.push(json!({"name": "models", "mountPath": MODEL_CACHE_MOUNT}));
        env.push(json!({"name": "HF_HOME", "value": format!("{MODEL_CACHE_MOUNT}/huggingface")}));
    }
    let mut container = json!({
        "name": "point",
        "image": opts.image,
        "workingDir": STUDY_MOUNT,
        "command": command,
        "resources": resources(opts),
        "volumeMounts": mounts,
    });
    if !env.is_empty() {
        container["env"] = json!(env);
    }
    let mut pod = json!({
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": volumes,
    });
    if !opts.node_selector.is_empty() {
        let labels: BTreeMap<&str, &str> = opts
            .node_selector
            .iter()
            .map(|l| (l.key.as_str(), l.value.as_str()))
            .collect();
        pod["nodeSelector"] = json!(labels);
    }
    if !opts.tolerations.is_empty() {
        pod["tolerations"] = json!(
            opts.tolerations
                .iter()
                .map(Toleration::to_json)
                .collect::<Vec<_>>()
        );
    }
    if let Some(secret) = &opts.image_pull_secret {
        pod["imagePullSecrets"] = json!([{"name": secret}]);
    }
    if let Some(account) = &opts.service_account {
        pod["serviceAccountName"] = json!(account);
    }
    pod
}

/// GPUs as requests and limits (an extended resource must be both), CPU and memory as
/// requests, memory also as the limit (a pod over it is killed, not the node's others).
fn resources(opts: &K8sOptions) -> Value {
    let mut requests = serde_json::Map::new();
    let mut limits = serde_json::Map::new();
    if opts.gpus_per_point > 0 {
        let gpus = json!(opts.gpus_per_point.to_string());
        requests.insert(opts.gpu_resource.clone(), gpus.clone());
        limits.insert(opts.gpu_resource.clone(), gpus);
    }
    if let Some(cpu) = &opts.cpu {
        requests.insert("cpu".into(), json!(cpu.0));
    }
    if let Some(memory) = &opts.memory {
        requests.insert("memory".into(), json!(memory.0));
        limits.insert("memory".into(), json!(memory.0));
    }
    let mut r = json!({});
    if !requests.is_empty() {
        r["requests"] = Value::Object(requests);
    }
    if !limits.is_empty() {
        r["limits"] = Value::Object(limits);
    }
    r
}

fn yaml(v: &Value) -> Result<String, StudyError> {
    serde_norway::to_string(v).map_err(|e| StudyError::Invalid(format!("YAML: {e}")))
}

#[cfg(test)]
mod tests;
