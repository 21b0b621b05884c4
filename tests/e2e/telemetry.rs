//! GPU telemetry through the vendors' command-line tools, faked on PATH:
//! scripts that answer as `nvidia-smi` and `amd-smi` document they do, so
//! the whole chain (probe, sampling loop, window summary, verdict, report,
//! raw samples file) runs without a GPU.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::support::{SimProcess, read_report, run_url, stderr_after, temp_dir, test_profile};

/// `nvidia-smi` as driver 550 answers: the banner, the static query, one
/// sample, or a sample every `-lms` milliseconds. The GPU draws 400 W and
/// is held at its software power cap (mask 0x4). With `old_driver`, the
/// throttle field is refused as drivers do for a field they do not know.
fn fake_nvidia_smi(dir: &Path, old_driver: bool) {
    let refuse = if old_driver {
        r#"case "$1" in *clocks_throttle_reasons*)
  echo 'Field "clocks_throttle_reasons.active" is not a valid field to query.'; exit 2;; esac
line="0, 97, 70213, 81559, 400.00, 700.00, 1755, 2619, 71""#
    } else {
        r#"line="0, 97, 70213, 81559, 400.00, 700.00, 1755, 2619, 71, 0x0000000000000004""#
    };
    let script = format!(
        r#"#!/bin/sh
case "$1" in
  --query-gpu=index,name,*)
    echo "0, NVIDIA H100 80GB HBM3, GPU-3a1f9e02-4c11-4b8a-9e2d-7f6b1c0a55e1, 550.90.07, 81559, 700.00, 5, 16"
    exit 0;;
  --query-gpu=*) ;;
  *) echo "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |"; exit 0;;
esac
{refuse}
if [ "$3" = "-lms" ]; then
  while echo "$line"; do sleep 0.1; done
  exit 0
fi
echo "$line"
"#
    );
    write_tool(dir, "nvidia-smi", &script);
}

/// `amd-smi` 26's JSON: an MI300X at 140 W whose energy counter counts
/// 140 J a second of wall time, with package power tracking active.
fn fake_amd_smi(dir: &Path) {
    let script = r#"#!/bin/sh
case "$1" in
  static)
    echo '{"gpu_data": [{"gpu": 0, "asic": {"market_name": "AMD Instinct MI300X"},
      "vram": {"size": {"value": 196592, "unit": "MB"}}, "driver": {"name": "amdgpu", "version": "6.10.5"},
      "limit": {"socket_power": {"value": 750, "unit": "W"}}}]}';;
  metric)
    joules=$(awk -v ns="$(date +%s%N)" 'BEGIN { printf "%.3f", ns / 1e9 * 140 }')
    echo "{\"gpu_data\": [{\"gpu\": 0,
      \"usage\": {\"gfx_activity\": {\"value\": 88, \"unit\": \"%\"}},
      \"power\": {\"socket_power\": {\"value\": 140, \"unit\": \"W\"}},
      \"clock\": {\"gfx_0\": {\"clk\": {\"value\": 1320, \"unit\": \"MHz\"}}},
      \"energy\": {\"total_energy_consumption\": {\"value\": $joules, \"unit\": \"J\"}},
      \"mem_usage\": {\"total_vram\": {\"value\": 196592, \"unit\": \"MB\"}, \"used_vram\": {\"value\": 150000, \"unit\": \"MB\"}},
      \"throttle\": {\"ppt_violation_status\": \"ACTIVE\"}}]}";;
  *) exit 1;;
esac
"#;
    write_tool(dir, "amd-smi", script);
}

fn write_tool(dir: &Path, name: &str, script: &str) {
    let path = dir.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// PATH with the fake tools first and only the system's own directories
/// after (for `sh`, `sleep`, `awk`, `date`), so no real vendor tool is found.
fn path_with(tools: &Path) -> String {
    format!("{}:/usr/bin:/bin", tools.display())
}

/// A 2-second, one-cell run against a simulator process (a URL run, so
/// the hardware is whatever telemetry finds) with `--telemetry smi` and the
/// fake tools in `tools`.
fn run_with_tools(name: &str, tools: &Path) -> (PathBuf, speedmatrix_report::Report) {
    let dir = temp_dir(name);
    let (_, profile) = test_profile(&dir);
    let sim = SimProcess::start(&profile);
    let out = dir.join("out");
    let output = run_url(&sim.url)
        .env("PATH", path_with(tools))
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "2",
            "--prefill-contexts",
            "none",
        ])
        .args(["--duration", "2s", "--max-tokens", "64"])
        .args([
            "--telemetry",
            "smi",
            "--telemetry-interval",
            "100ms",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let report = read_report(&out);
    (out, report)
}

#[test]
fn nvidia_smi_samples_explain_the_cell_and_a_power_cap_is_a_verdict() {
    let tools = temp_dir("fake-nvidia-smi");
    fake_nvidia_smi(&tools, false);
    let (out, report) = run_with_tools("telemetry-nvidia", &tools);

    let setup = report.telemetry.as_ref().expect("the telemetry setup");
    assert_eq!(setup.gpu_source.as_deref(), Some("nvidia-smi"));
    let gpu = &setup.gpus[0];
    assert_eq!(gpu.name, "NVIDIA H100 80GB HBM3");
    assert_eq!(
        gpu.runtime_version.as_deref(),
        Some("12.4"),
        "from the banner"
    );
    assert_eq!((gpu.pcie_generation, gpu.pcie_width), (Some(5), Some(16)));
    let hardware = report
        .hardware
        .gpus
        .first()
        .expect("the GPU fills the hardware facts");
    assert!(hardware.name.contains("H100"), "{hardware:?}");

    let m = report.decode[0].measurements.as_ref().unwrap();
    let t = m.telemetry.as_ref().expect("the cell's telemetry");
    let g = &t.gpus[0];
    assert!(
        g.samples >= 10,
        "a sample every 100 ms over 2 s: {}",
        g.samples
    );
    let close = |v: Option<f64>, want: f64| v.is_some_and(|v| (v - want).abs() < 1e-9);
    assert!(
        close(g.utilization_mean_pct, 97.0),
        "{:?}",
        g.utilization_mean_pct
    );
    assert_eq!(g.sm_clock_min_mhz, Some(1755));
    assert_eq!(g.energy_source.as_deref(), Some("integrated_power"));
    // 400 W over the measured window, integrated from the samples.
    let expected = 400.0 * m.measured_s;
    let energy = t.energy_j.unwrap();
    assert!(
        (energy - expected).abs() / expected < 0.1,
        "{energy} J vs {expected} J"
    );
    let per_token = t.joules_per_output_token.unwrap();
    assert!((per_token - energy / m.output_tokens.get() as f64).abs() < 1e-9);
    let throttled = g.throttled.unwrap();
    assert!(throttled.power_cap_s > 0.9 * m.measured_s, "{throttled:?}");
    let verdict = t
        .verdicts
        .iter()
        .find(|v| v.kind == "throttled")
        .expect("throttled");
    assert!(verdict.why.contains("power cap"), "{}", verdict.why);
    assert!(
        t.server.as_ref().is_some_and(|s| s.scrapes > 0),
        "the simulator's /metrics"
    );

    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("nvidia-smi, sampled every 100 ms"), "{md}");
    let raw = std::fs::read_to_string(out.join("telemetry.jsonl")).unwrap();
    let gpu_lines = raw.lines().filter(|l| l.contains("\"gpu\":0,")).count();
    assert!(
        gpu_lines >= g.samples as usize,
        "every raw sample is kept: {gpu_lines}"
    );
}

#[test]
fn an_old_driver_without_the_throttle_field_still_gives_power_and_no_throttle_verdict() {
    let tools = temp_dir("fake-nvidia-smi-old");
    fake_nvidia_smi(&tools, true);
    let (_, report) = run_with_tools("telemetry-nvidia-old", &tools);
    let t = report.decode[0]
        .measurements
        .as_ref()
        .and_then(|m| m.telemetry.as_ref())
        .unwrap();
    let g = &t.gpus[0];
    assert!(
        (g.power_mean_w.unwrap() - 400.0).abs() < 1e-9,
        "{:?}",
        g.power_mean_w
    );
    assert_eq!(g.throttled, None, "the driver did not say");
    assert!(t.verdicts.iter().all(|v| v.kind != "throttled"));
}

#[test]
fn amd_smi_energy_counter_gives_the_cells_joules() {
    let tools = temp_dir("fake-amd-smi");
    fake_amd_smi(&tools);
    let (_, report) = run_with_tools("telemetry-amd", &tools);
    let setup = report.telemetry.as_ref().unwrap();
    assert_eq!(setup.gpu_source.as_deref(), Some("amd-smi"));
    assert!(
        setup.gpu_unavailable.is_none(),
        "{:?}",
        setup.gpu_unavailable
    );
    assert_eq!(setup.gpus[0].name, "AMD Instinct MI300X");
    let m = report.decode[0].measurements.as_ref().unwrap();
    let t = m.telemetry.as_ref().unwrap();
    let g = &t.gpus[0];
    assert_eq!(g.energy_source.as_deref(), Some("counter"));
    // The counter runs at 140 J/s; amd-smi is read once a second, so the
    // window's edges are the samples nearest them.
    let energy = t.energy_j.unwrap();
    let expected = 140.0 * m.measured_s;
    assert!(
        (energy - expected).abs() / expected < 0.35,
        "{energy} J vs {expected} J"
    );
    assert!(t.verdicts.iter().any(|v| v.kind == "throttled"));
}

#[test]
fn without_any_gpu_tool_the_report_says_why_and_still_measures() {
    let tools = temp_dir("no-gpu-tools");
    let (_, report) = run_with_tools("telemetry-none", &tools);
    let setup = report.telemetry.as_ref().unwrap();
    assert_eq!(setup.gpu_source, None);
    let why = setup.gpu_unavailable.as_deref().unwrap();
    assert!(
        why.contains("nvidia-smi") && why.contains("amd-smi"),
        "{why}"
    );
    let t = report.decode[0]
        .measurements
        .as_ref()
        .and_then(|m| m.telemetry.as_ref())
        .unwrap();
    assert!(t.gpus.is_empty());
    assert!(
        t.missing.iter().any(|m| m.starts_with("GPU:")),
        "{:?}",
        t.missing
    );
    assert!(t.host.is_some(), "the host is read from /proc regardless");
}

#[test]
fn probe_lists_the_local_gpus_or_says_why_there_are_none() {
    let dir = temp_dir("probe-gpus");
    let (_, profile) = test_profile(&dir);
    let sim = SimProcess::start(&profile);
    let tools = temp_dir("probe-fake-nvidia-smi");
    fake_nvidia_smi(&tools, false);
    let probe = |tools: &Path, extra: &[&str]| {
        let output = crate::support::bin()
            .env("PATH", path_with(tools))
            .args(["probe", "--url", &sim.url])
            .args(extra)
            .output()
            .unwrap();
        stderr_after(&output, 0);
        String::from_utf8(output.stdout).unwrap()
    };
    let text = probe(&tools, &["--telemetry", "smi"]);
    assert!(
        text.contains(
            "local gpus      0: NVIDIA H100 80GB HBM3, 79.65 GiB, driver 550.90.07, CUDA 12.4, \
             power limit 700 W, PCIe gen 5 ×16 (from nvidia-smi)"
        ),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&probe(&tools, &["--telemetry", "smi", "--json"])).unwrap();
    assert_eq!(json["local_gpus"]["source"], "nvidia-smi");
    assert_eq!(
        json["local_gpus"]["gpus"][0]["name"],
        "NVIDIA H100 80GB HBM3"
    );
    let none = probe(&temp_dir("probe-no-tools"), &["--telemetry", "smi"]);
    assert!(
        none.contains("local gpus      none found (nvidia-smi: "),
        "{none}"
    );
}

/// A simulator that speculates (drafts of 4, 3 tokens a step: 2 accepted)
/// behind a URL, changed by `edit`, and the report of one short cell of
/// 512-token prompts against it.
fn speculating_run(
    name: &str,
    edit: impl FnOnce(&mut speedmatrix_sim::Profile),
) -> speedmatrix_report::Report {
    speculating_run_of(name, "48", edit)
}

/// [`speculating_run`] with `max_tokens` output tokens a request.
fn speculating_run_of(
    name: &str,
    max_tokens: &str,
    edit: impl FnOnce(&mut speedmatrix_sim::Profile),
) -> speedmatrix_report::Report {
    let dir = temp_dir(name);
    let (mut p, _) = test_profile(&dir);
    p.tokens_per_step = vec![3];
    p.num_speculative_tokens = Some(4);
    edit(&mut p);
    p.validate().unwrap();
    let profile = dir.join("spec.json");
    std::fs::write(&profile, serde_json::to_string(&p).unwrap()).unwrap();
    let sim = SimProcess::start(&profile);
    let out = dir.join("out");
    let output = run_url(&sim.url)
        .env("PATH", path_with(&temp_dir(&format!("{name}-no-tools"))))
        .args([
            "--contexts",
            "512",
            "--concurrency",
            "2",
            "--prefill-contexts",
            "none",
        ])
        .args([
            "--duration",
            "2s",
            "--max-tokens",
            max_tokens,
            "--metrics-interval",
            "200ms",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    read_report(&out)
}

#[test]
fn the_servers_speculative_and_prefix_cache_counters_are_the_simulators_truth() {
    let report = speculating_run("telemetry-server", |_| {});
    let t = report.decode[0]
        .measurements
        .as_ref()
        .and_then(|m| m.telemetry.clone())
        .unwrap();
    let s = t.server.clone().expect("the simulator's counters");
    // Every step drafts 4 and accepts 2: the rates are exact, whatever the window.
    assert_eq!(s.spec_acceptance_rate, Some(0.5));
    assert_eq!(s.spec_mean_accepted_length, Some(3.0));
    assert!(s.spec_drafts.is_some_and(|d| d > 0.0));
    assert!(!s.counted_at_finish, "vLLM counts as it goes");
    assert!(
        s.scrapes >= 5,
        "a scrape every 200 ms over 2 s: {}",
        s.scrapes
    );
    assert_eq!(s.preemptions, Some(0.0));
    let kv = s.kv_usage_max_pct.unwrap();
    assert!(kv > 0.0 && kv < 100.0, "{kv}");
    // The warmed prefix: each 512-token prompt looks up 512 tokens and, by
    // vLLM's rule (whole 16-token blocks, the last token always computed),
    // finds 31 blocks of them.
    let queries = s.prefix_cache_queries.unwrap();
    assert!(queries > 0.0 && queries % 512.0 == 0.0, "{queries}");
    assert_eq!(s.prefix_cache_hits, Some(queries / 512.0 * 496.0));
    assert_eq!(s.prefix_cache_hit_rate, Some(496.0 / 512.0));
    // Short requests make the running gauge dip at each replacement, which a
    // loaded machine can stretch: only the verdicts this server cannot earn.
    assert!(
        t.verdicts
            .iter()
            .all(|v| !["throttled", "preempted", "cache_cold"].contains(&v.kind.as_str())),
        "{:?}",
        t.verdicts
    );
}

#[test]
fn a_server_that_caches_nothing_gets_the_cache_cold_verdict() {
    let report = speculating_run("telemetry-cold", |p| p.enable_prefix_caching = false);
    let t = report.decode[0]
        .measurements
        .as_ref()
        .and_then(|m| m.telemetry.clone())
        .unwrap();
    assert_eq!(t.server.unwrap().prefix_cache_hit_rate, Some(0.0));
    let cold = t
        .verdicts
        .iter()
        .find(|v| v.kind == "cache_cold")
        .expect("cache cold");
    assert!(
        cold.why
            .contains("hit rate 0 % where the prompts should give 97 %"),
        "{}",
        cold.why
    );
}

#[test]
fn the_hit_rate_counts_the_cells_first_requests_when_none_starts_inside_the_window() {
    // 1,500 tokens at about 300 tok/s a stream: both outlive the 2 s window.
    let report = speculating_run_of("telemetry-long", "1500", |_| {});
    let m = report.decode[0].measurements.as_ref().unwrap();
    assert_eq!(m.completed_requests, 0, "no stream was replaced");
    let s = m.telemetry.as_ref().and_then(|t| t.server.clone()).unwrap();
    assert_eq!(
        (s.prefix_cache_queries, s.prefix_cache_hits),
        (Some(2.0 * 512.0), Some(2.0 * 496.0)),
        "the two requests that started before the window"
    );
}
