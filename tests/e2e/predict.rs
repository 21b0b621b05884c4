//! `speedmatrix predict` and `speedmatrix calibrate` through the binary: the
//! seed page's model and GPU predicted, a prediction run on the simulator,
//! and the seed page's own numbers fitted into a profile.

use std::path::PathBuf;

use speedmatrix_report::{CellStatus, Report};
use speedmatrix_units::{Concurrency, Tokens};

use crate::support::{bin, read_report, stderr_after, temp_dir};

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn seed_config() -> PathBuf {
    repo("crates/speedmatrix-capacity/tests/fixtures/agents-a1-4b-fp8.config.json")
}

fn seed_run() -> PathBuf {
    repo("crates/speedmatrix-report/tests/fixtures/seed-run.json")
}

/// The seed's launch flags.
const SEED_FLAGS: [&str; 10] = [
    "--gpu",
    "rtx3090",
    "--gpu-memory-utilization",
    "0.94",
    "--max-model-len",
    "262144",
    "--max-num-seqs",
    "128",
    "--language-model-only",
    "--enable-prefix-caching",
];

#[test]
fn the_seed_pages_grid_is_predicted_exactly_and_its_numbers_within_a_quarter() {
    let dir = temp_dir("predict-seed");
    let out = dir.join("predicted");
    let output = bin()
        .arg("predict")
        .arg("--config")
        .arg(seed_config())
        .args(SEED_FLAGS)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    // The terminal's grid: a row per context, `over` where the cache cannot hold the cell.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("(total output tok/s; over = over capacity)"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.trim_start().starts_with("248K |") && l.contains("over")),
        "{stdout}"
    );
    let predicted = read_report(&out);
    let info = predicted.prediction.as_ref().expect("marked predicted");
    assert!(info.factors.contains_key("bandwidth_efficiency"));
    let seed = Report::from_json(&std::fs::read_to_string(seed_run()).unwrap()).unwrap();
    for cell in &seed.decode {
        let p = predicted
            .decode_cell(cell.context, cell.concurrency)
            .unwrap();
        let fits = |s: &CellStatus| !matches!(s, CellStatus::OverCapacity { .. });
        assert_eq!(
            fits(&p.status),
            fits(&cell.status),
            "{} × {}",
            cell.context,
            cell.concurrency
        );
        if let (Some(a), Some(b)) = (&p.measurements, &cell.measurements) {
            let e = a.total_tokens_per_s / b.total_tokens_per_s - 1.0;
            assert!(
                e.abs() <= 0.25,
                "{} × {}: {e:+.3}",
                cell.context,
                cell.concurrency
            );
        }
    }
    for row in &seed.prefill {
        let p = predicted.prefill_row(row.context).unwrap();
        let e = p.ttft_ms.unwrap() / row.ttft_ms.unwrap() - 1.0;
        assert!(e.abs() <= 0.25, "prefill {}: {e:+.3}", row.context);
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("class=\"banner\""), "the predicted banner");
    let compared = bin()
        .arg("compare")
        .arg(out.join("run.json"))
        .arg(seed_run())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&compared.stdout);
    assert!(text.contains("# Prediction error"), "{text}");
    // The measured page with the prediction beside each cell.
    let page = dir.join("against.html");
    let compared = bin()
        .arg("compare")
        .arg(out.join("run.json"))
        .arg(seed_run())
        .arg("--html")
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    stderr_after(&compared, 0);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Against the prediction"), "the section");
    assert!(
        !html.contains("class=\"banner\""),
        "B's page is the measured one"
    );
    let mut scored = 0;
    for cell in &seed.decode {
        let (Some(p), Some(m)) = (
            predicted
                .decode_cell(cell.context, cell.concurrency)
                .and_then(|c| c.measurements.as_ref()),
            cell.measurements.as_ref(),
        ) else {
            continue;
        };
        let error = format!(
            "error {:+.1} %",
            (p.total_tokens_per_s / m.total_tokens_per_s - 1.0) * 100.0
        )
        .replace("-0.0 %", "+0.0 %");
        assert!(
            html.contains(&error),
            "{} × {}: {error}",
            cell.context,
            cell.concurrency
        );
        scored += 1;
    }
    let placed = ["inside the band", "below the band", "above the band"]
        .iter()
        .map(|w| html.matches(w).count())
        .sum::<usize>();
    assert!(
        scored >= 15 && placed >= scored,
        "{scored} scored, {placed} placed"
    );
    let prefill = seed
        .prefill
        .iter()
        .filter(|r| {
            r.prompt_tokens_per_s.is_some()
                && predicted
                    .prefill_row(r.context)
                    .is_some_and(|p| p.prompt_tokens_per_s.is_some())
        })
        .count();
    let summary = format!("{} cells predicted and measured", scored + prefill);
    assert!(html.contains(&summary), "{summary}");
}

#[test]
fn a_prediction_runs_on_the_simulator_as_a_what_if() {
    let dir = temp_dir("predict-simulate");
    let out = dir.join("predicted");
    let output = bin()
        .arg("predict")
        .arg("--config")
        .arg(seed_config())
        .args(SEED_FLAGS)
        .args(["--contexts", "0", "--concurrency", "1,4"])
        .args([
            "--prefill-contexts",
            "none",
            "--duration",
            "2s",
            "--simulate",
        ])
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    assert!(out.join("profile.json").exists());
    let predicted = read_report(&out);
    let simulated = read_report(&out.join("simulated"));
    let info = simulated
        .prediction
        .as_ref()
        .expect("a what-if run says so");
    assert!(info.method.contains("predicted profile"), "{info:?}");
    for cell in &simulated.decode {
        assert_eq!(cell.status, CellStatus::Valid, "{cell:?}");
        let (s, p) = (
            cell.measurements.as_ref().unwrap().total_tokens_per_s,
            predicted
                .decode_cell(cell.context, cell.concurrency)
                .unwrap()
                .measurements
                .as_ref()
                .unwrap()
                .total_tokens_per_s,
        );
        // The simulator runs the prediction's step model (fitted within a
        // few percent) in real time on a shared machine.
        assert!(
            (s / p - 1.0).abs() < 0.15,
            "{} × {}: simulated {s}, predicted {p}",
            cell.context,
            cell.concurrency
        );
    }
}

#[test]
fn calibrating_on_the_seed_page_fits_every_cell_within_five_percent() {
    let dir = temp_dir("calibrate-seed");
    let profile = dir.join("profile.json");
    let output = bin()
        .arg("calibrate")
        .arg(seed_run())
        .arg("-o")
        .arg(&profile)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let text = String::from_utf8_lossy(&output.stdout);
    let errors: Vec<f64> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("decode") || l.trim_start().starts_with("prefill"))
        .filter_map(|l| l.split_whitespace().rev().nth(1)?.parse().ok())
        .collect();
    assert_eq!(errors.len(), 21 + 5, "{text}");
    assert!(errors.iter().all(|e: &f64| e.abs() <= 5.0), "{text}");
    let p = speedmatrix_sim::Profile::from_file(&profile).unwrap();
    assert_eq!(p.origin.as_ref().unwrap().fitted_concurrency_max, Some(32));

    // A what-if past what was measured: 64 streams, with a bigger cache.
    let bigger = dir.join("bigger.json");
    let output = bin()
        .arg("calibrate")
        .arg(seed_run())
        .args(["--kv-cache-tokens", "2M", "-o"])
        .arg(&bigger)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let out = dir.join("what-if");
    let output = bin()
        .args(["run", "--quiet", "--sim-profile"])
        .arg(&bigger)
        .args(["--contexts", "0", "--concurrency", "64", "--duration", "2s"])
        .args(["--prefill-contexts", "none", "--telemetry", "off", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let report = read_report(&out);
    assert_eq!(report.decode[0].status, CellStatus::Valid);
    let info = report.prediction.expect("a what-if run is marked");
    assert!(
        info.assumptions
            .iter()
            .any(|a| a.contains("Extrapolated") && a.contains("0 × 64")),
        "{info:?}"
    );
}

#[test]
fn bad_predict_and_calibrate_input_is_a_usage_error() {
    let dir = temp_dir("predict-bad");
    let missing = bin()
        .args(["predict", "--config"])
        .arg(dir.join("nope.json"))
        .output()
        .unwrap();
    assert!(stderr_after(&missing, 2).contains("cannot read --config"));
    let gguf = bin()
        .arg("predict")
        .arg("--config")
        .arg(seed_config())
        .args(["--gguf-type", "q3_bogus", "-o"])
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(stderr_after(&gguf, 2).contains("--gguf-type q3_bogus"));
    // A predicted document is no measurement to calibrate on.
    let out = dir.join("p");
    let ok = bin()
        .arg("predict")
        .arg("--config")
        .arg(seed_config())
        .args(SEED_FLAGS)
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "1",
            "--prefill-contexts",
            "none",
            "-o",
        ])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&ok, 0);
    let refused = bin()
        .arg("calibrate")
        .arg(out.join("run.json"))
        .arg("-o")
        .arg(dir.join("x.json"))
        .output()
        .unwrap();
    assert!(stderr_after(&refused, 2).contains("not a measurement"));
    let calibrated = bin()
        .arg("predict")
        .arg("--config")
        .arg(seed_config())
        .args(SEED_FLAGS)
        .arg("--calibrate-from")
        .arg(&out)
        .arg("-o")
        .arg(dir.join("c"))
        .output()
        .unwrap();
    assert!(stderr_after(&calibrated, 2).contains("not a measurement"));
}

/// The seed page cut to four measured decode cells (and its prefill rows), as a partial run
/// of `--contexts 0,16k,64k --concurrency 1,4,16` would hold them.
fn partial_seed_run(path: &std::path::Path) {
    let mut run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(seed_run()).unwrap()).unwrap();
    let (contexts, concurrencies) = ([0u64, 16_384, 65_536], [1u64, 4, 16]);
    let measured = [(0, 1), (0, 16), (65_536, 1), (16_384, 4)];
    let cells: Vec<serde_json::Value> = run["decode"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            contexts.contains(&c["context"].as_u64().unwrap())
                && concurrencies.contains(&c["concurrency"].as_u64().unwrap())
        })
        .cloned()
        .map(|mut c| {
            let at = (
                c["context"].as_u64().unwrap(),
                c["concurrency"].as_u64().unwrap(),
            );
            if !measured.contains(&at) && c["status"]["kind"] == "valid" {
                c["status"] = serde_json::json!({"kind": "skipped", "reason": "not measured"});
                c["measurements"] = serde_json::Value::Null;
            }
            c
        })
        .collect();
    run["decode"] = cells.into();
    run["run"]["contexts"] = contexts.to_vec().into();
    run["run"]["concurrencies"] = concurrencies.to_vec().into();
    std::fs::write(path, run.to_string()).unwrap();
}

/// `predict --calibrate-from` with four measured cells: the rest of the seed page within
/// ±7 %, every figure with the calibration's band, and the document saying what it was
/// calibrated on.
#[test]
fn four_measured_cells_calibrate_the_rest_of_the_seed_page() {
    let dir = temp_dir("predict-calibrated");
    let partial = dir.join("partial.json");
    partial_seed_run(&partial);
    let out = dir.join("predicted");
    let output = bin()
        .arg("predict")
        .arg("--config")
        .arg(seed_config())
        .args(SEED_FLAGS)
        .arg("--calibrate-from")
        .arg(&partial)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("left out"), "{stdout}");
    // One line per measured figure: the four decode cells and the prefill rows.
    let figures = stdout
        .lines()
        .filter(|l| l.contains("tok/s measured"))
        .count();
    assert_eq!(figures, 4 + 5, "{stdout}");
    let predicted = read_report(&out);
    let info = predicted.prediction.as_ref().unwrap();
    assert!(
        info.fitted_on.contains("partial.json"),
        "{}",
        info.fitted_on
    );
    assert!(
        info.assumptions
            .iter()
            .any(|a| a.starts_with("Calibrated on 9 measured figures")),
        "{:?}",
        info.assumptions
    );
    assert!(
        info.factors["kv_bandwidth_ratio"] > 1.0,
        "{:?}",
        info.factors
    );
    let seed = Report::from_json(&std::fs::read_to_string(seed_run()).unwrap()).unwrap();
    let mut checked = 0;
    for cell in &seed.decode {
        let p = predicted
            .decode_cell(cell.context, cell.concurrency)
            .unwrap();
        let (Some(a), Some(b)) = (&p.measurements, &cell.measurements) else {
            continue;
        };
        let e = a.total_tokens_per_s / b.total_tokens_per_s - 1.0;
        assert!(
            e.abs() <= 0.07,
            "{} × {}: {e:+.3}",
            cell.context,
            cell.concurrency
        );
        let band = a.band.as_ref().expect("a calibrated band");
        assert!(band.total_tokens_per_s.low < a.total_tokens_per_s);
        assert!(band.total_tokens_per_s.high > a.total_tokens_per_s);
        checked += 1;
    }
    assert_eq!(checked, 21);
}

#[test]
fn requests_sent_together_pass_the_simulated_front_end_one_at_a_time() {
    // 50 ms of front end per request: a burst of four reaches the engine at
    // 50, 100, 150 and 200 ms, so its TTFTs are staggered by the front end.
    let dir = temp_dir("sim-frontend");
    let (mut p, _) = crate::support::test_profile(&dir);
    p.cost.frontend_per_request_us = 50_000.0;
    p.validate().unwrap();
    let profile = dir.join("frontend.json");
    std::fs::write(&profile, serde_json::to_string(&p).unwrap()).unwrap();
    let sim = crate::support::SimProcess::start(&profile);
    let out = dir.join("out");
    let output = crate::support::run_url(&sim.url)
        .args(["--mode", "burst", "--requests", "4", "--contexts", "256"])
        .args([
            "--max-tokens",
            "8",
            "--prefill-contexts",
            "none",
            "--telemetry",
            "off",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let load = read_report(&out).load.unwrap();
    let ttft = load.cells[0]
        .measurements
        .as_ref()
        .unwrap()
        .ttft_ms
        .unwrap();
    // Type-7 median of 50/100/150/200 ms plus a step or two: 125 ms and up.
    assert!(ttft.p50 >= 115.0 && ttft.p50 < 260.0, "{ttft:?}");
    assert!(
        ttft.p99 >= 195.0,
        "the last waits for three before it: {ttft:?}"
    );
}

#[test]
fn the_built_in_seed_profile_lays_out_the_seeds_hybrid_model() {
    // Two max-length requests' attention blocks fit the 1,002 usable blocks (994), their
    // recurrent state does not (1,006): the seed page's 248K row has one Valid cell.
    let output = bin()
        .args([
            "run",
            "--dry-run",
            "--contexts",
            "248k",
            "--concurrency",
            "1,2",
        ])
        .args(["--prefill-contexts", "none"])
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("248K × 1    run"), "{text}");
    assert!(
        text.contains("248K × 2    Over capacity") && text.contains("1,006 blocks > 1,002"),
        "{text}"
    );
    assert!(text.contains("Σ groups"), "the hybrid rule decides: {text}");
}

/// Every predicted figure carries its 80 % band, the page shows it to three significant
/// digits, a cell too long for `max_model_len` says so (it is not over capacity), and
/// `compare` of the prediction against a measurement says where each measurement fell.
#[test]
fn predicted_cells_carry_bands_and_compare_says_where_measurements_fell() {
    let dir = temp_dir("predict-bands");
    let out = dir.join("predicted");
    let output = bin()
        .arg("predict")
        .arg("--config")
        .arg(seed_config())
        .args(["--gpu", "rtx3090", "--max-model-len", "24576"])
        .args(["--contexts", "0,16k,32k", "--concurrency", "1,2"])
        .args(["--prefill-contexts", "8k,32k", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let predicted = read_report(&out);
    for cell in &predicted.decode {
        match &cell.status {
            CellStatus::Valid => {
                let m = cell.measurements.as_ref().unwrap();
                let band = m.band.expect("a band on every predicted cell");
                assert!(
                    band.total_tokens_per_s.contains(m.total_tokens_per_s),
                    "{band:?}"
                );
                assert!(band.level > 0.79 && band.level < 0.81);
            }
            CellStatus::Skipped { reason } => {
                assert!(reason.contains("max_model_len"), "{reason}");
                assert!(cell.context.get() >= 16 * 1024, "{cell:?}");
            }
            other => panic!("{other:?}"),
        }
    }
    let long = predicted
        .prefill_row(speedmatrix_units::Tokens::kibi(32))
        .unwrap();
    assert!(
        matches!(&long.status, CellStatus::Skipped { reason } if reason.contains("max_model_len"))
    );
    let short = predicted
        .prefill_row(speedmatrix_units::Tokens::kibi(8))
        .unwrap();
    assert!(
        short
            .prompt_tokens_per_s_band
            .unwrap()
            .contains(short.prompt_tokens_per_s.unwrap())
    );
    let page = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(page.contains("Bands (decode): 80 %"), "{page}");
    assert!(page.contains(" (") && page.contains("≈"), "{page}");
    let csv = std::fs::read_to_string(out.join("measurements.csv")).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with("predicted_band_low,predicted_band_high")
    );

    // A measurement of two of its cells, on the simulator.
    let measured = dir.join("measured");
    let output = bin()
        .args(["run", "--quiet", "--preset", "seed", "--contexts", "0"])
        .args([
            "--concurrency",
            "1,2",
            "--prefill-contexts",
            "8k",
            "--duration",
            "2s",
            "-o",
        ])
        .arg(&measured)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let json = dir.join("cmp.json");
    let output = bin()
        .args(["compare", "--json", "-o"])
        .arg(&json)
        .arg(out.join("run.json"))
        .arg(measured.join("run.json"))
        .output()
        .unwrap();
    assert!(matches!(output.status.code(), Some(0 | 1)), "{output:?}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let checked: Vec<&serde_json::Value> = doc["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c.get("band").is_some())
        .collect();
    assert_eq!(
        checked.len(),
        3,
        "two decode cells and one prefill row: {doc}"
    );
    for c in checked {
        let place = c["band"]["place"].as_str().unwrap();
        assert!(["below", "inside", "above"].contains(&place), "{c}");
    }
}

#[test]
fn speculative_decoding_is_priced_from_an_acceptance_rate() {
    let dir = temp_dir("predict-speculation");
    let run = |extra: &[&str], out: &str| {
        bin()
            .arg("predict")
            .arg("--config")
            .arg(seed_config())
            .args(SEED_FLAGS)
            .args(["--contexts", "0", "--concurrency", "1,8"])
            .args(["--prefill-contexts", "none"])
            .args(extra)
            .arg("-o")
            .arg(dir.join(out))
            .output()
            .unwrap()
    };
    let mtp = r#"{"method": "mtp", "num_speculative_tokens": 2}"#;
    stderr_after(&run(&[], "plain"), 0);
    stderr_after(
        &run(
            &["--speculative-config", mtp, "--acceptance-rate", "70%"],
            "spec",
        ),
        0,
    );
    stderr_after(&run(&["--speculative-config", mtp], "unpriced"), 0);
    let tok_s = |out: &str, n: u32| {
        read_report(&dir.join(out))
            .decode_cell(Tokens::ZERO, Concurrency::new(n).unwrap())
            .and_then(|c| c.measurements.clone())
            .unwrap()
            .total_tokens_per_s
    };
    for n in [1, 8] {
        let gain = tok_s("spec", n) / tok_s("plain", n);
        // 1 + 0.7 × 2 = 2.4 tokens a step, for a dearer step.
        assert!(gain > 1.4 && gain < 2.4, "{n} streams: × {gain:.2}");
    }
    let says = |out: &str| read_report(&dir.join(out)).prediction.unwrap().assumptions;
    assert!(
        says("spec")
            .iter()
            .any(|a| a.contains("2 tokens drafted") && a.contains("2.40 tokens a step")),
        "{:?}",
        says("spec")
    );
    assert!(says("unpriced").iter().any(|a| a.contains("is not priced")));
    // Bad rates and lengths, and a rate with nothing drafted, are the user's to fix.
    for (args, says) in [
        (
            vec!["--speculative-config", mtp, "--acceptance-rate", "1.2"],
            "within 0–1",
        ),
        (
            vec!["--speculative-config", mtp, "--acceptance-length", "4"],
            "between 1 and 3",
        ),
        (
            vec!["--acceptance-rate", "0.5"],
            "give --speculative-config",
        ),
    ] {
        let out = run(&args, "bad");
        let text = stderr_after(&out, 2);
        assert!(text.contains(says), "{args:?}: {text}");
    }
}

/// The seed's model as a Q4_K_M GGUF under llama.cpp on an RTX 3090, one cold prefill of
/// `prompt` tokens predicted with `flags`: the report's assumptions and the TTFT in ms.
fn llama_cpp_prefill(dir: &std::path::Path, prompt: &str, flags: &[&str]) -> (Vec<String>, f64) {
    let out = dir.join(format!("{prompt}{}", flags.join("")));
    let output = bin()
        .arg("predict")
        .arg("--config")
        .arg(seed_config())
        .args([
            "--engine",
            "llama.cpp",
            "--gpu",
            "rtx3090",
            "--gguf-type",
            "q4_k_m",
        ])
        .args(flags)
        .args("--contexts 0 --concurrency 1 --prefill-contexts".split(' '))
        .arg(prompt)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let report = read_report(&out);
    (
        report.prediction.unwrap().assumptions,
        report.prefill[0].ttft_ms.unwrap(),
    )
}

#[test]
fn llama_cpp_prefills_in_chunks_of_its_ubatch_size() {
    let dir = temp_dir("predict-ubatch");
    let ttft = |ubatch: &str| {
        let (says, ttft) = llama_cpp_prefill(&dir, "8k", &["--ubatch-size", ubatch]);
        assert!(
            says.iter()
                .any(|a| a.contains(&format!("prefill in chunks of {ubatch} tokens"))),
            "{says:?}"
        );
        ttft
    };
    // Four times fewer chunks: three fewer steps' fixed time a 2,048-token stretch.
    assert!(ttft("2048") < ttft("512"));
}

#[test]
fn llama_cpp_without_flash_attention_prefills_long_prompts_slower() {
    let dir = temp_dir("predict-fa");
    let ttft = |fa: &str, prompt: &str| {
        let (says, ttft) = llama_cpp_prefill(&dir, prompt, &["--flash-attn", fa]);
        let priced = says.iter().any(|a| a.contains("without flash kernels"));
        assert_eq!(priced, fa == "off", "{says:?}");
        ttft
    };
    // The score matrix grows with the square of the prompt: a 16K prompt loses more to it
    // than a 1K one.
    let slowdown = |prompt| ttft("off", prompt) / ttft("auto", prompt);
    let (short, long) = (slowdown("1k"), slowdown("16k"));
    assert!(short >= 1.0 && long > short * 1.1, "{short} {long}");
    let bad = bin()
        .arg("predict")
        .arg("--config")
        .arg(seed_config())
        .args(["--engine", "llama.cpp", "--flash-attn", "sometimes"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
}

/// The assumption lines of a one-cell prediction of `config` under `engine` on `gpu`.
fn page_lines(
    dir: &std::path::Path,
    config: &std::path::Path,
    engine: &str,
    gpu: &str,
    extra: &[&str],
) -> Vec<String> {
    one_cell(dir, config, engine, gpu, extra)
        .prediction
        .unwrap()
        .assumptions
}

/// A one-cell prediction (0 × 1, prefill at 1K) of `config` under `engine` on `gpu`.
fn one_cell(
    dir: &std::path::Path,
    config: &std::path::Path,
    engine: &str,
    gpu: &str,
    extra: &[&str],
) -> Report {
    let stem = config.file_stem().unwrap().display();
    let out = dir.join(format!(
        "{engine}-{gpu}-{stem}-{}",
        extra.join("").replace('-', "")
    ));
    let output = bin()
        .arg("predict")
        .arg("--config")
        .arg(config)
        .args(["--engine", engine, "--gpu", gpu])
        .args(extra)
        .args("--contexts 0 --concurrency 1 --prefill-contexts 1k -o".split(' '))
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    read_report(&out)
}

/// The kernel terms fitted on llama.cpp say so on the page where they bind: the bandwidth
/// cap per multiprocessor and the Hopper ratio on an H100 PCIe, neither under vLLM.
#[test]
fn llama_cpp_kernel_terms_are_named_where_they_bind() {
    let dir = temp_dir("predict-kernels");
    let says = |engine: &str, gpu: &str, gguf: &[&str]| {
        page_lines(&dir, &seed_config(), engine, gpu, gguf)
    };
    let q4 = ["--gguf-type", "q4_k_m"];
    let h100 = says("llama.cpp", "h100-pcie", &q4);
    let has = |says: &[String], what: &str| says.iter().any(|a| a.starts_with(what));
    assert!(has(&h100, "Bandwidth: "), "{h100:?}");
    assert!(has(&h100, "Hopper: "), "{h100:?}");
    assert!(has(&h100, "Quantized products "), "{h100:?}");
    // An H100 PCIe's 756 dense TFLOPS against its 350 W: the power limit binds.
    assert!(has(&h100, "Power: "), "{h100:?}");
    assert!(has(&h100, "Decode: "), "{h100:?}");
    let ada = says("llama.cpp", "rtx-6000-ada", &q4);
    assert!(!has(&ada, "Hopper: "), "{ada:?}");
    let vllm = says("vllm", "h100-pcie", &[]);
    for what in ["Bandwidth: ", "Hopper: ", "Quantized products ", "Decode: "] {
        assert!(!has(&vllm, what), "{vllm:?}");
    }
}

/// A MoE model's page names the routing and expert-read terms with its MoE layer count; a
/// dense model's does not.
#[test]
fn expert_terms_are_named_for_moe_models_only() {
    let dir = temp_dir("predict-experts");
    let moe = dir.join("moe.config.json");
    std::fs::write(
        &moe,
        r#"{"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "torch_dtype": "bfloat16", "vocab_size": 151936, "intermediate_size": 6144,
        "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
        "max_position_embeddings": 262144}"#,
    )
    .unwrap();
    let says =
        |config: &std::path::Path, engine: &str| page_lines(&dir, config, engine, "h100-sxm", &[]);
    for engine in ["vllm", "sglang"] {
        let lines = says(&moe, engine);
        assert!(
            lines
                .iter()
                .any(|a| a.starts_with("Experts: ") && a.contains(" 48 MoE layers")),
            "{engine}: {lines:?}"
        );
        let dense = says(&seed_config(), engine);
        assert!(
            !dense.iter().any(|a| a.starts_with("Experts: ")),
            "{dense:?}"
        );
        // The seed's model is FP8: on an H100 no AMD term applies.
        assert!(
            !dense.iter().any(|a| a.starts_with("FP8 on AMD: ")),
            "{dense:?}"
        );
    }
}

/// An FP8 model on an MI300X names the AMD FP8 term where the family's factor is not 1.
#[test]
fn amd_fp8_term_is_named_on_amd_parts() {
    let dir = temp_dir("predict-amd-fp8");
    let lines = page_lines(&dir, &seed_config(), "sglang", "mi300x", &[]);
    assert!(
        lines.iter().any(|a| a.starts_with("FP8 on AMD: ")),
        "{lines:?}"
    );
}

/// Which steps launch without a CUDA graph is on the page: llama.cpp's batched steps, every
/// step under vLLM's `--enforce-eager` (which now slows its decode), none under vLLM's default.
#[test]
fn eager_launches_are_priced_and_named() {
    let dir = temp_dir("predict-eager");
    let config = seed_config();
    let graphs = |lines: &[String], prefix: &str| lines.iter().any(|a| a.starts_with(prefix));
    let llama = page_lines(&dir, &config, "llamacpp", "rtx4090", &[]);
    assert!(graphs(&llama, "CUDA graphs: "), "{llama:?}");
    let vllm = one_cell(&dir, &config, "vllm", "h100-sxm", &[]);
    let eager = one_cell(&dir, &config, "vllm", "h100-sxm", &["--enforce-eager"]);
    let lines = |r: &Report| r.prediction.clone().unwrap().assumptions;
    assert!(!graphs(&lines(&vllm), "CUDA graphs: "));
    assert!(!graphs(&lines(&vllm), "--enforce-eager: "));
    assert!(
        graphs(&lines(&eager), "--enforce-eager: "),
        "{:?}",
        lines(&eager)
    );
    assert!(
        lines(&vllm).iter().all(|a| !a.contains("enforce-eager")),
        "{:?}",
        lines(&vllm)
    );
    let rate = |r: &Report| {
        r.decode[0]
            .measurements
            .as_ref()
            .unwrap()
            .total_tokens_per_s
    };
    assert!(
        rate(&eager) < rate(&vllm),
        "{} vs {}",
        rate(&eager),
        rate(&vllm)
    );
}

/// A latent-attention model's page names the MLA layers' extra time and what it rests on;
/// a grouped-query model's does not.
#[test]
fn latent_attention_layers_are_priced_and_named() {
    let dir = temp_dir("predict-mla");
    // DeepSeek-V2-Lite's shape: 27 MLA layers, the first with a dense MLP.
    let config = dir.join("deepseek-v2-lite.json");
    std::fs::write(
        &config,
        r#"{"model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27,
        "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512,
        "q_lora_rank": null, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
        "v_head_dim": 128, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 2,
        "first_k_dense_replace": 1, "vocab_size": 102400, "torch_dtype": "bfloat16",
        "max_position_embeddings": 163840}"#,
    )
    .unwrap();
    let named = |r: &Report| {
        r.prediction
            .clone()
            .unwrap()
            .assumptions
            .into_iter()
            .find(|a| a.starts_with("Latent attention (MLA): "))
    };
    let mla = one_cell(&dir, &config, "vllm", "h100-sxm", &[]);
    let line = named(&mla).expect("the MLA model's page names its latent layers");
    assert!(line.contains("each of the 27 MLA layers adds"), "{line}");
    let gqa = one_cell(&dir, &seed_config(), "vllm", "h100-sxm", &[]);
    assert_eq!(named(&gqa), None);
}
