//! The checked-in schema is the types', and the repo's example studies are valid.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use speedmatrix_study::Study;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Set `UPDATE_SCHEMA=1` to rewrite the checked-in schema from the types.
#[test]
fn checked_in_schema_is_current() {
    let path = root().join("schema/study.schema.json");
    let fresh = serde_json::to_string_pretty(&Study::json_schema()).unwrap() + "\n";
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "crates/speedmatrix-study/schema/study.schema.json is stale: regenerate it with \
         `UPDATE_SCHEMA=1 cargo test -p speedmatrix-study --test files`"
    );
}

#[test]
fn the_example_studies_are_valid_and_their_templates_fill() {
    let dir = root().join("../../examples/studies");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let study = Study::from_toml(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for p in study.points().unwrap() {
            p.fill(&study.server.command, 8000).unwrap();
            study.run_options(&p, 8000).unwrap();
        }
        seen += 1;
    }
    assert!(
        seen >= 2,
        "examples/studies holds the simulator and vLLM studies"
    );
}

/// The manifests of the example studies validate against the official
/// Kubernetes 1.37 schemas (strict), vendored from kubernetes-validate.
#[test]
fn the_kubernetes_manifests_validate_against_the_official_schemas() {
    use speedmatrix_study::{K8sOptions, k8s_manifests};
    let schema = |kind: &str| {
        let text =
            std::fs::read_to_string(root().join(format!("tests/k8s-schema/{kind}.json"))).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        jsonschema::validator_for(&value).unwrap()
    };
    let text =
        std::fs::read_to_string(root().join("../../examples/studies/vllm-kv-cache.toml")).unwrap();
    let study = Study::from_toml(&text).unwrap();
    let opts = K8sOptions {
        image: "speedmatrix-vllm:latest".into(),
        parallelism: 2,
        gpus_per_point: 1,
        gpu_resource: "nvidia.com/gpu".into(),
        node_selector: vec![
            "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"
                .parse()
                .unwrap(),
        ],
        tolerations: vec!["nvidia.com/gpu:NoSchedule".parse().unwrap()],
        cpu: Some("8".parse().unwrap()),
        memory: Some("64Gi".parse().unwrap()),
        secret_env: vec!["HF_TOKEN=hf-token/token".parse().unwrap()],
        model_cache: Some(speedmatrix_study::ModelCache::Claim("models".into())),
        shm_size: Some("16Gi".parse().unwrap()),
        image_pull_secret: Some("regcred".into()),
        service_account: Some("bench".into()),
        results_size: "50Gi".into(),
        storage_class: Some("nfs".into()),
        namespace: Some("bench".into()),
        legacy_job: false,
    };
    let packed = [speedmatrix_study::PackedFile {
        path: "configs/config.json".into(),
        bytes: b"{}".to_vec(),
        named_by: "test".into(),
    }];
    let files = k8s_manifests(&study, &text, &packed, &opts).unwrap();
    assert_eq!(files.len(), 3);
    for (name, yaml) in &files {
        let doc: serde_json::Value = serde_norway::from_str(yaml).unwrap();
        let kind = match doc["kind"].as_str().unwrap() {
            "Job" => "job",
            "ConfigMap" => "configmap",
            "PersistentVolumeClaim" => "persistentvolumeclaim",
            other => panic!("{other}"),
        };
        let errors: Vec<String> = schema(kind)
            .iter_errors(&doc)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}");
        if kind == "job" {
            assert_eq!(doc["spec"]["completions"], 4, "one completion per point");
            assert_eq!(doc["spec"]["completionMode"], "Indexed");
        }
    }
    // A typo in a field is what a strict schema catches: the check is not vacuous.
    let (_, job) = files.iter().find(|f| f.0 == "job.yaml").unwrap();
    let mut doc: serde_json::Value = serde_norway::from_str(job).unwrap();
    doc["spec"]["parallelizm"] = serde_json::json!(2);
    assert!(!schema("job").is_valid(&doc));
}
