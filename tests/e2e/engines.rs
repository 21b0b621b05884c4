//! Capacity read from each engine's own endpoint: the simulator answers in
//! the shape of vLLM (`/metrics`), llama.cpp (`/props`) or SGLang
//! (`/get_server_info`), and the plan's Over-capacity cells follow that
//! engine's rule for the figures it reported.

use speedmatrix_report::{CellStatus, Report};
use speedmatrix_runner::prompt_len;
use speedmatrix_sim::{CapacityApi, Profile};

use crate::support::{SimProcess, bin, read_report, run_url, stderr_after, temp_dir, test_profile};

const MAX_TOKENS: u64 = 256;

/// A small pool: 128 usable blocks of 16 tokens (2,048 tokens), 4 requests at most.
fn small_pool(dir: &std::path::Path, api: CapacityApi) -> (Profile, std::path::PathBuf) {
    let (mut p, path) = test_profile(dir);
    p.num_gpu_blocks = 129;
    p.max_num_seqs = 4;
    p.capacity_api = api;
    p.validate().unwrap();
    std::fs::write(&path, serde_json::to_string_pretty(&p).unwrap()).unwrap();
    (p, path)
}

fn run(name: &str, api: CapacityApi, contexts: &str, concurrency: &str) -> (Profile, Report) {
    let dir = temp_dir(name);
    let (profile, profile_path) = small_pool(&dir, api);
    let out = dir.join("out");
    let status = bin()
        .args(["run", "--quiet", "--sim-profile"])
        .arg(&profile_path)
        .args(["--contexts", contexts, "--concurrency", concurrency])
        .args(["--prefill-contexts", "512", "--duration", "1s"])
        .args(["--max-tokens", &MAX_TOKENS.to_string(), "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "{name}: run failed: {status}");
    (profile, read_report(&out))
}

/// Shared-pool rule of llama.cpp (`--kv-unified`) and SGLang: at most
/// `slots` requests, and `N × (context + max output)` tokens within the pool.
fn token_pool_fits(profile: &Profile, n: u64, context: speedmatrix_units::Tokens) -> bool {
    let len = prompt_len(context).get() + MAX_TOKENS;
    n <= u64::from(profile.max_num_seqs) && n * len <= profile.usable_kv_tokens()
}

fn check_token_pool_rule(name: &str, api: CapacityApi, source: &str) {
    let (profile, report) = run(name, api, "0,512,1k", "1,2,8");
    let measured = report
        .capacity
        .as_ref()
        .and_then(|c| c.measured.as_ref())
        .expect("capacity was not measured");
    assert_eq!(measured.kv_cache_tokens.get(), profile.usable_kv_tokens());
    assert!(
        measured.source.contains(source),
        "{name}: source {:?}",
        measured.source
    );
    let mut over = 0;
    for cell in &report.decode {
        let n = u64::from(cell.concurrency.get());
        let fits = token_pool_fits(&profile, n, cell.context);
        match &cell.status {
            CellStatus::OverCapacity { .. } => {
                assert!(
                    !fits,
                    "{name}: {} × {n} planned over capacity but fits",
                    cell.context
                );
                over += 1;
            }
            CellStatus::Valid => {
                assert!(fits, "{name}: {} × {n} ran but does not fit", cell.context)
            }
            other => panic!(
                "{name}: {} × {n}: unexpected status {other:?}",
                cell.context
            ),
        }
    }
    // 8 streams exceed the slots in every row; 2 × (1K + 256) exceeds the pool.
    assert!(over >= 4, "{name}: only {over} cells over capacity");
}

#[test]
fn llamacpp_capacity_comes_from_props() {
    check_token_pool_rule("engines-llamacpp", CapacityApi::Llamacpp, "/props");
}

#[test]
fn sglang_capacity_comes_from_get_server_info() {
    check_token_pool_rule("engines-sglang", CapacityApi::Sglang, "/get_server_info");
}

#[test]
fn vllm_windows_carry_the_servers_own_token_count() {
    let (profile, report) = run("engines-vllm", CapacityApi::Vllm, "0,512", "1,2");
    let measured = report
        .capacity
        .as_ref()
        .and_then(|c| c.measured.as_ref())
        .expect("capacity was not measured");
    assert!(
        measured.source.contains("cache_config_info"),
        "{:?}",
        measured.source
    );
    assert_eq!(
        measured.kv_cache_tokens.get(),
        u64::from(profile.num_gpu_blocks) * u64::from(profile.block_size)
    );
    for cell in &report.decode {
        let m = cell.measurements.as_ref().expect("cell not measured");
        let counter = m.server_counter.expect("no server counter over the window");
        // The two scrapes frame the window, so both clocks see the same tokens
        // up to one scrape's latency at each edge.
        assert!(
            (counter.between_scrapes_s - m.measured_s).abs() < 0.5,
            "{counter:?} vs {} s",
            m.measured_s
        );
        let ratio = counter.tokens_per_s() / m.total_tokens_per_s;
        assert!(
            (0.9..=1.1).contains(&ratio),
            "{} × {}: client {:.1} tok/s, server counter {:.1} tok/s",
            cell.context,
            cell.concurrency,
            m.total_tokens_per_s,
            counter.tokens_per_s()
        );
    }
}

/// A strict server (as Hugging Face `transformers serve` is) refuses `ignore_eos` and
/// `min_tokens` with HTTP 422 and answers `/v1/models` with 500: with `--model` named, the
/// run says so once per field and measures without them (outputs may then end at the
/// model's end of text); without `--model`, it asks for it.
#[test]
fn a_server_that_refuses_unknown_fields_is_measured_without_them() {
    let dir = temp_dir("engines-strict");
    let (mut profile, _) = test_profile(&dir);
    profile.refused_fields = vec!["ignore_eos".into(), "min_tokens".into()];
    profile.models_status = Some(500);
    // Nothing names its engine, as transformers serve names none.
    profile.anonymous = true;
    let path = dir.join("strict.json");
    std::fs::write(&path, serde_json::to_string(&profile).unwrap()).unwrap();
    let mut sim = SimProcess::start(&path);
    let out = dir.join("run");
    let output = run_url(&sim.url)
        .args(["--model", "tiny", "--contexts", "0", "--concurrency", "1,2"])
        .args([
            "--prefill-contexts",
            "none",
            "--duration",
            "2s",
            "--max-tokens",
            "512",
            "-o",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = stderr_after(&output, 0);
    let report = read_report(&out);
    let notes = report.notes.join("\n");
    for field in ["`ignore_eos`", "`min_tokens`"] {
        assert!(notes.contains(field), "{notes}");
    }
    assert!(notes.contains("/v1/models"), "{notes}");
    for cell in &report.decode {
        let m = cell.measurements.as_ref().expect("measured");
        assert!(m.total_tokens_per_s > 0.0, "{cell:?}");
        // The tiny model ends its answers after 100 tokens when nothing stops it.
        assert!(
            m.finish_reasons.get("stop").copied().unwrap_or(0) > 0,
            "{m:?}"
        );
    }
    let unnamed = run_url(&sim.url)
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "1",
            "--prefill-contexts",
            "none",
        ])
        .args(["--duration", "1s", "-o"])
        .arg(dir.join("unnamed"))
        .output()
        .unwrap();
    let stderr2 = stderr_after(&unnamed, 2);
    assert!(stderr2.contains("--model"), "{stderr}\n{stderr2}");
    sim.kill();
}
