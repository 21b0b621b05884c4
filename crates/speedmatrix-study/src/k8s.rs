//! A study as Kubernetes manifests: the study file in a ConfigMap, a
//! PersistentVolumeClaim for the results, and an Indexed Job whose
//! completion index is the point each pod measures
//! (`speedmatrix study run /study/study.toml --out /results --point-index $(JOB_COMPLETION_INDEX)`).

use serde_json::{Value, json};

use crate::{Study, StudyError};

/// Choices the study file leaves to the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct K8sOptions {
    /// The container image: speedmatrix beside the engine the study's command starts
    /// (the repo's Dockerfile, target `with-vllm`).
    pub image: String,
    /// Points measured at once (pods running together).
    pub parallelism: u32,
    /// GPUs each pod asks for (`nvidia.com/gpu`); 0 for none.
    pub gpus_per_point: u32,
    /// The results volume's size (`100Gi`).
    pub results_size: String,
    /// Its storage class, when not the cluster's default.
    pub storage_class: Option<String>,
    /// The namespace, when not the current one.
    pub namespace: Option<String>,
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

/// The manifests, as `(file name, YAML)`.
pub fn k8s_manifests(
    study: &Study,
    study_text: &str,
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
    let config = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(&format!("{base}-study")),
        "data": {"study.toml": study_text},
    });
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
    let mut resources = json!({});
    if opts.gpus_per_point > 0 {
        let gpus = opts.gpus_per_point.to_string();
        resources =
            json!({"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}});
    }
    let count = u32::try_from(points.len()).unwrap_or(u32::MAX);
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(&base),
        "spec": {
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": opts.parallelism.min(count),
            // A failed point is recorded in its outcome file; the pod still succeeds.
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "speedmatrix"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "point",
                        "image": opts.image,
                        "command": [
                            "speedmatrix", "study", "run", "/study/study.toml",
                            "--out", "/results", "--point-index", "$(JOB_COMPLETION_INDEX)"
                        ],
                        "resources": resources,
                        "volumeMounts": [
                            {"name": "study", "mountPath": "/study", "readOnly": true},
                            {"name": "results", "mountPath": "/results"},
                            {"name": "shm", "mountPath": "/dev/shm"}
                        ],
                    }],
                    "volumes": [
                        {"name": "study", "configMap": {"name": format!("{base}-study")}},
                        {"name": "results", "persistentVolumeClaim": {"claimName": format!("{base}-results")}},
                        // Engines share tensors between processes through /dev/shm.
                        {"name": "shm", "emptyDir": {"medium": "Memory"}}
                    ],
                },
            },
        },
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

fn yaml(v: &Value) -> Result<String, StudyError> {
    serde_norway::to_string(v).map_err(|e| StudyError::Invalid(format!("YAML: {e}")))
}
