//! Real public startup logs (`tests/fixtures/startup_logs.json`, each case
//! with the address it was published at): the predictor against what vLLM
//! and SGLang printed.
//!
//! Two checks per case:
//! * **given memory** — the layout arithmetic from the memory the log itself
//!   reports ("Available KV cache memory", SGLang's free memory before and
//!   after the weights). Logs print GiB with two decimals, so the check runs
//!   the arithmetic at both ends of the printed value's rounding interval and
//!   requires every logged figure (blocks, tokens, concurrency, longest
//!   max_model_len) to lie between them: exact up to the log's own precision.
//! * **full prediction** — from the GPU, utilization and flags alone; its
//!   error against the logged figure is reported per case, and at least 80 %
//!   of the cases with a known GPU must land within ±5 %.
//!
//! `cargo test -p speedmatrix-capacity --test suite real_logs -- --nocapture`
//! prints the table.

use serde_json::Value;
use speedmatrix_capacity::{
    EngineFlags, Gpu, KvCacheDtype, ModelConfig, Prediction, SglangFlags, VllmFlags, VllmLayout,
    VllmPrediction, VllmVersion, budget_from_available_gib, capacity_from_stage_budgets, predict,
    sglang_tokens_from_memory,
};

const FIXTURE: &str = include_str!("../fixtures/startup_logs.json");

/// Half of the last printed digit of a GiB figure ("12.13 GiB").
const GIB_ROUNDING: f64 = 0.005;

struct Case<'a> {
    id: &'a str,
    url: &'a str,
    engine: &'a str,
    version: Option<&'a str>,
    gpu: Option<&'a str>,
    config: ModelConfig,
    flags: &'a Value,
    logged: &'a Value,
}

fn cases(root: &Value) -> Vec<Case<'_>> {
    let configs = &root["configs"];
    root["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let key = c["config"].as_str().expect("config key");
            let config = ModelConfig::from_json(&configs[key].to_string())
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            Case {
                id: c["id"].as_str().expect("id"),
                url: c["url"].as_str().expect("url"),
                engine: c["engine"].as_str().expect("engine"),
                version: c["version"].as_str(),
                gpu: c["gpu"].as_str(),
                config,
                flags: &c["flags"],
                logged: &c["logged"],
            }
        })
        .collect()
}

fn vllm_flags(case: &Case<'_>) -> VllmFlags {
    let f = case.flags;
    let u32_of = |k: &str, d: u32| f[k].as_u64().map_or(d, |v| v as u32);
    VllmFlags {
        gpu_memory_utilization: f["gpu_memory_utilization"].as_f64().unwrap_or(0.9),
        max_model_len: f["max_model_len"].as_u64(),
        max_num_seqs: f["max_num_seqs"].as_u64().map(|v| v as u32),
        max_num_batched_tokens: f["max_num_batched_tokens"].as_u64(),
        kv_cache_dtype: match f["kv_cache_dtype"].as_str() {
            None | Some("auto") => KvCacheDtype::Auto,
            Some(s) => KvCacheDtype::parse(s).expect("kv dtype"),
        },
        enable_prefix_caching: f["enable_prefix_caching"].as_bool().unwrap_or(false),
        enforce_eager: f["enforce_eager"].as_bool().unwrap_or(false),
        tensor_parallel_size: u32_of("tensor_parallel_size", 1),
        pipeline_parallel_size: u32_of("pipeline_parallel_size", 1),
        data_parallel_size: u32_of("data_parallel_size", 1),
        enable_expert_parallel: f["enable_expert_parallel"].as_bool().unwrap_or(false),
        version: case.version.map_or(VllmVersion::LATEST, |v| {
            VllmVersion::parse(v).expect("version")
        }),
        ..VllmFlags::default()
    }
}

/// A logged figure, the arithmetic's value at the printed memory, and the
/// range it takes across the printed value's rounding.
struct Within {
    what: &'static str,
    logged: f64,
    at_printed: f64,
    low: f64,
    high: f64,
}

impl Within {
    fn holds(&self) -> bool {
        self.low - 1e-9 <= self.logged && self.logged <= self.high + 1e-9
    }
}

/// The layout arithmetic at both ends of the logged memory's rounding.
fn vllm_given_memory(case: &Case<'_>) -> Vec<Within> {
    let flags = vllm_flags(case);
    let max_len = flags
        .max_model_len
        .or(case.config.max_position_embeddings)
        .expect("max_model_len");
    let stage_gib: Vec<f64> = match case.logged.get("available_kv_gib_per_stage") {
        Some(v) => v
            .as_array()
            .expect("per stage")
            .iter()
            .filter_map(Value::as_f64)
            .collect(),
        None => case.logged["available_kv_gib"]
            .as_f64()
            .into_iter()
            .collect(),
    };
    if stage_gib.is_empty() {
        return Vec::new();
    }
    let at = |delta: f64| -> VllmPrediction {
        let mut f = flags.clone();
        f.max_num_batched_tokens = Some(f.max_num_batched_tokens.unwrap_or(2048));
        let layout = VllmLayout::plan(&case.config, &f).expect("layout");
        let budgets = stage_gib
            .iter()
            .map(|g| budget_from_available_gib(g + delta))
            .collect();
        capacity_from_stage_budgets(layout, budgets, max_len, 256, &f)
    };
    let (lo, mid, hi) = (at(-GIB_ROUNDING), at(0.0), at(GIB_ROUNDING));
    let mut checks = Vec::new();
    let mut add = |what, key: &str, figure: &dyn Fn(&VllmPrediction) -> f64, widen: f64| {
        if let Some(logged) = case.logged.get(key).and_then(Value::as_f64) {
            checks.push(Within {
                what,
                logged,
                at_printed: figure(&mid),
                low: figure(&lo) - widen,
                high: figure(&hi) + widen,
            });
        }
    };
    add("blocks", "num_gpu_blocks", &|p| p.num_blocks as f64, 0.0);
    add(
        "tokens",
        "kv_cache_size_tokens",
        &|p| p.kv_cache_size_tokens as f64,
        0.0,
    );
    // Printed with two decimals.
    add(
        "concurrency",
        "max_concurrency",
        &|p| p.max_concurrency,
        0.005,
    );
    add(
        "longest max_model_len",
        "estimated_max_model_len",
        &|p| p.startup.estimated_max_model_len as f64,
        0.0,
    );
    checks
}

/// SGLang's token count from the log's own free memory before and after the weights.
fn sglang_given_memory(case: &Case<'_>) -> Vec<Within> {
    let (Some(before), Some(after)) = (
        case.logged["free_before_weights_gib"].as_f64(),
        case.logged["free_after_weights_gib"].as_f64(),
    ) else {
        return Vec::new();
    };
    let flags = sglang_flags(case);
    let tokens = |b: f64, a: f64| {
        sglang_tokens_from_memory(&case.config, &flags, b, a).expect("sglang arithmetic") as f64
    };
    let mut checks = Vec::new();
    if let Some(logged) = case.logged["max_total_num_tokens"].as_f64() {
        checks.push(Within {
            what: "tokens",
            logged,
            at_printed: tokens(before, after),
            // Less free memory before the weights leaves more for the pool.
            low: tokens(before + GIB_ROUNDING, after - GIB_ROUNDING),
            high: tokens(before - GIB_ROUNDING, after + GIB_ROUNDING),
        });
    }
    checks
}

fn sglang_flags(case: &Case<'_>) -> SglangFlags {
    SglangFlags {
        mem_fraction_static: case.flags["mem_fraction_static"].as_f64(),
        tensor_parallel_size: case.flags["tensor_parallel_size"].as_u64().unwrap_or(1) as u32,
        ..SglangFlags::default()
    }
}

/// The full prediction's figure that the log also printed, and the logged one.
fn full_prediction(case: &Case<'_>) -> Option<(&'static str, f64, f64)> {
    let gpu = Gpu::lookup(case.gpu?).expect("gpu in catalog");
    let logged = case.logged;
    match case.engine {
        "vllm" => {
            let flags = vllm_flags(case);
            let p = match predict(&case.config, &gpu, &EngineFlags::Vllm(flags)) {
                Ok(Prediction::Vllm(p)) => p,
                Ok(_) => unreachable!("a vLLM prediction"),
                // Predicting no KV memory at all is a miss of 100 %.
                Err(_) => return Some(("available KV GiB", 0.0, first_logged(logged)?)),
            };
            let pairs = [
                (
                    "tokens",
                    p.kv_cache_size_tokens as f64,
                    logged["kv_cache_size_tokens"].as_f64(),
                ),
                (
                    "concurrency",
                    p.max_concurrency,
                    logged["max_concurrency"].as_f64(),
                ),
                (
                    "available KV GiB",
                    p.budget.available_kv.as_gib_f64(),
                    logged["available_kv_gib"].as_f64(),
                ),
                (
                    "longest max_model_len",
                    p.startup.estimated_max_model_len as f64,
                    logged["estimated_max_model_len"].as_f64(),
                ),
            ];
            pairs
                .into_iter()
                .find_map(|(what, predicted, logged)| Some((what, predicted, logged?)))
        }
        "sglang" => {
            let p = match predict(&case.config, &gpu, &EngineFlags::Sglang(sglang_flags(case))) {
                Ok(Prediction::Sglang(p)) => p,
                _ => return Some(("tokens", 0.0, logged["max_total_num_tokens"].as_f64()?)),
            };
            Some((
                "tokens",
                p.max_total_num_tokens as f64,
                logged["max_total_num_tokens"].as_f64()?,
            ))
        }
        other => panic!("unknown engine {other}"),
    }
}

fn first_logged(logged: &Value) -> Option<f64> {
    [
        "kv_cache_size_tokens",
        "max_concurrency",
        "available_kv_gib",
        "estimated_max_model_len",
    ]
    .iter()
    .find_map(|k| logged[*k].as_f64())
}

#[test]
fn real_startup_logs_are_reproduced() {
    let root: Value = serde_json::from_str(FIXTURE).expect("fixture is JSON");
    let cases = cases(&root);
    assert!(cases.len() >= 25, "{} cases", cases.len());
    let mut given_failures = Vec::new();
    let mut worst_given = (0.0f64, "");
    let mut full = Vec::new();
    eprintln!(
        "{:<46} {:<24} {:>14} {:>14} {:>8}  given memory",
        "case", "full prediction of", "predicted", "logged", "error"
    );
    for case in &cases {
        assert!(case.url.starts_with("https://"), "{}: cite it", case.id);
        let given = match case.engine {
            "sglang" => sglang_given_memory(case),
            _ => vllm_given_memory(case),
        };
        let given_text = if given.is_empty() {
            "-".to_owned()
        } else {
            given
                .iter()
                .map(|w| {
                    let mark = if w.holds() { "ok" } else { "MISS" };
                    format!(
                        "{} {} in [{:.2}, {:.2}] {mark} ({:+.3} % at the printed memory)",
                        w.what,
                        w.logged,
                        w.low,
                        w.high,
                        (w.at_printed - w.logged) / w.logged * 100.0
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        for w in &given {
            let error = ((w.at_printed - w.logged) / w.logged).abs();
            if error > worst_given.0 {
                worst_given = (error, case.id);
            }
        }
        given_failures.extend(given.iter().filter(|w| !w.holds()).map(|w| {
            format!(
                "{}: {} {} not in [{}, {}]",
                case.id, w.what, w.logged, w.low, w.high
            )
        }));
        let (what, predicted, logged, error) = match full_prediction(case) {
            Some((what, predicted, logged)) => {
                let error = (predicted - logged) / logged;
                full.push(error);
                (
                    what,
                    format!("{predicted:.2}"),
                    format!("{logged:.2}"),
                    format!("{:+.1}%", error * 100.0),
                )
            }
            None => ("(GPU unknown)", "-".into(), "-".into(), "-".into()),
        };
        eprintln!(
            "[figures] {:<46} {:<24} {:>14} {:>14} {:>8}  {given_text}",
            case.id, what, predicted, logged, error
        );
    }
    let within = full.iter().filter(|e| e.abs() <= 0.05).count();
    eprintln!(
        "[figures] given memory: {} cases, {} misses, largest error at the printed memory {:.3} % \
         ({}); full prediction within ±5 %: {within} of {}",
        cases.len(),
        given_failures.len(),
        worst_given.0 * 100.0,
        worst_given.1,
        full.len()
    );
    assert!(given_failures.is_empty(), "{given_failures:#?}");
    assert!(
        within * 5 >= full.len() * 4,
        "only {within} of {} full predictions within ±5 %",
        full.len()
    );
}
