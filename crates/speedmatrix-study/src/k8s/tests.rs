use super::*;

fn study() -> Study {
    Study::from_toml(
        r#"name = "KV dtype"
[server]
command = "vllm serve m --kv-cache-dtype {kv} --port {port}"
[parameters]
kv = ["auto", "fp8"]
[run]
tokenizer = "m"
contexts = "0"
concurrency = "1"
"#,
    )
    .unwrap()
}

fn options() -> K8sOptions {
    K8sOptions {
        image: "img".into(),
        parallelism: 2,
        gpus_per_point: 1,
        gpu_resource: "nvidia.com/gpu".into(),
        results_size: "10Gi".into(),
        ..K8sOptions::default()
    }
}

fn job(opts: &K8sOptions, files: &[PackedFile]) -> (Value, Value) {
    let out = k8s_manifests(&study(), "name = \"x\"", files, opts).unwrap();
    let doc = |n: &str| -> Value {
        serde_norway::from_str(&out.iter().find(|f| f.0 == n).unwrap().1).unwrap()
    };
    (doc("job.yaml"), doc("configmap.yaml"))
}

#[test]
fn each_index_runs_once_and_a_failed_point_fails_only_its_index() {
    let (job, _) = job(&options(), &[]);
    let spec = &job["spec"];
    assert_eq!(spec["backoffLimitPerIndex"], 0);
    assert_eq!(spec["maxFailedIndexes"], 2);
    assert!(spec.get("backoffLimit").is_none());
    let rules = spec["podFailurePolicy"]["rules"].as_array().unwrap();
    let actions: Vec<&str> = rules
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["FailJob", "Ignore", "FailIndex"]);
    assert_eq!(rules[0]["onExitCodes"]["values"], json!([BAD_INPUT_EXIT]));
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    let legacy = K8sOptions {
        legacy_job: true,
        ..options()
    };
    let (job, _) = self::job(&legacy, &[]);
    assert_eq!(job["spec"]["backoffLimit"], 3);
    assert!(job["spec"].get("podFailurePolicy").is_none());
    let command = job["spec"]["template"]["spec"]["containers"][0]["command"].to_string();
    assert!(command.contains("--recorded-failure-ok"), "{command}");
}

#[test]
fn packed_files_are_mounted_at_their_own_paths_in_the_working_folder() {
    let files = [
        PackedFile {
            path: "configs/config.json".into(),
            bytes: b"{}".to_vec(),
            named_by: "x".into(),
        },
        PackedFile {
            path: "blob.bin".into(),
            bytes: vec![0xff, 0x00, 0x10],
            named_by: "y".into(),
        },
    ];
    let (job, config) = job(&options(), &files);
    assert_eq!(config["data"]["f0-config.json"], "{}");
    assert_eq!(config["binaryData"]["f1-blob.bin"], "/wAQ");
    let pod = &job["spec"]["template"]["spec"];
    let items = pod["volumes"][0]["configMap"]["items"].as_array().unwrap();
    let paths: Vec<&str> = items.iter().map(|i| i["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["study.toml", "configs/config.json", "blob.bin"]);
    assert_eq!(pod["containers"][0]["workingDir"], STUDY_MOUNT);
}

#[test]
fn scheduling_secrets_and_volumes_are_as_asked() {
    let opts = K8sOptions {
        gpus_per_point: 2,
        gpu_resource: "amd.com/gpu".into(),
        node_selector: vec![
            "amd.com/gpu.product-name=AMD-Instinct-MI300X"
                .parse()
                .unwrap(),
        ],
        tolerations: vec!["amd.com/gpu:NoSchedule".parse().unwrap()],
        cpu: Some("8".parse().unwrap()),
        memory: Some("64Gi".parse().unwrap()),
        secret_env: vec!["HF_TOKEN=hf/token".parse().unwrap()],
        model_cache: Some(ModelCache::Claim("models".into())),
        shm_size: Some("16Gi".parse().unwrap()),
        image_pull_secret: Some("regcred".into()),
        service_account: Some("bench".into()),
        ..options()
    };
    let (job, _) = job(&opts, &[]);
    let pod = &job["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["resources"]["limits"]["amd.com/gpu"], "2");
    assert_eq!(c["resources"]["requests"]["amd.com/gpu"], "2");
    assert_eq!(c["resources"]["requests"]["cpu"], "8");
    assert_eq!(c["resources"]["limits"]["memory"], "64Gi");
    assert_eq!(
        pod["nodeSelector"]["amd.com/gpu.product-name"],
        "AMD-Instinct-MI300X"
    );
    assert_eq!(pod["tolerations"][0]["operator"], "Exists");
    let env = c["env"].as_array().unwrap();
    assert_eq!(
        env[0]["valueFrom"]["secretKeyRef"],
        json!({"name": "hf", "key": "token"})
    );
    assert!(env.iter().any(|e| e["name"] == "HF_HOME"));
    assert!(
        !job.to_string().contains("hf_"),
        "no secret value is inlined"
    );
    let volumes = pod["volumes"].as_array().unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v["persistentVolumeClaim"]["claimName"] == "models")
    );
    assert!(volumes.iter().any(|v| v["emptyDir"]["sizeLimit"] == "16Gi"));
    assert_eq!(pod["imagePullSecrets"][0]["name"], "regcred");
    assert_eq!(pod["serviceAccountName"], "bench");
}
