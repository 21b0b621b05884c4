//! Burst and open-loop rate cells through the binary, against a simulator
//! whose queue keeps its own record.

use std::io::{Read as _, Write as _};
use std::path::Path;

use speedmatrix_report::{CellStatus, LoadRun};

use crate::support::{SimProcess, bin, read_report, run_url, stderr_after, temp_dir, test_profile};

/// `GET /metrics` of the simulator at `url`, as text.
fn metrics(url: &str) -> String {
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// The value of the sample `name` (label sets summed).
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn load_of(out: &Path) -> LoadRun {
    read_report(out).load.expect("a load section")
}

/// The journal's load records.
fn load_records(out: &Path) -> usize {
    crate::support::journal_lines(out)
        .iter()
        .filter(|r| r["record"] == "load")
        .count()
}

/// Cuts the journal after its first `keep` load records, as a run killed
/// there would have left it.
fn keep_loads(out: &Path, keep: usize) {
    let path = out.join("journal.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut seen = 0;
    let kept: Vec<&str> = text
        .lines()
        .take_while(|l| {
            if l.contains("\"record\":\"load\"") {
                seen += 1;
            }
            seen <= keep
        })
        .collect();
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
}

/// Resumes the run in `out` with the same flags; exit 0.
fn resume(url: &str, flags: &[&str], out: &Path) {
    let again = run_url(url)
        .args(flags)
        .arg("--resume")
        .arg(out)
        .output()
        .unwrap();
    stderr_after(&again, 0);
}

#[test]
fn a_burst_sends_every_request_at_once_and_resumes_from_its_journal() {
    let dir = temp_dir("load-burst");
    let (_, profile) = test_profile(&dir);
    let sim = SimProcess::start(&profile);
    let out = dir.join("out");
    let flags = [
        "--mode",
        "burst",
        "--requests",
        "1,4",
        "--contexts",
        "256",
        "--max-tokens",
        "32",
        "--prefill-contexts",
        "none",
        "--telemetry",
        "off",
    ];
    let output = run_url(&sim.url)
        .args(flags)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let load = load_of(&out);
    assert_eq!(load.mode.as_str(), "burst");
    assert_eq!(load.cells.len(), 2);
    for (cell, n) in load.cells.iter().zip([1u64, 4]) {
        assert_eq!(cell.requests, Some(n));
        assert_eq!(cell.status, CellStatus::Valid);
        let m = cell.measurements.as_ref().unwrap();
        assert_eq!((m.sent, m.completed), (n, n));
        // ignore_eos: every request gives exactly max_tokens.
        assert_eq!(m.output_tokens.get(), 32 * n);
        assert_eq!(m.max_in_flight, n, "all at once");
        let (ttft, e2e) = (m.ttft_ms.unwrap(), m.e2e_ms.unwrap());
        assert!(e2e.p50 > ttft.p99, "{ttft:?} {e2e:?}");
        assert!(m.duration_s * 1e3 >= e2e.p99 - 1.0);
        assert!(m.send_lag_ms.unwrap().p99 < 500.0, "sent at once");
    }
    let csv = std::fs::read_to_string(out.join("measurements.csv")).unwrap();
    assert_eq!(
        csv.lines().filter(|l| l.starts_with("burst,256,")).count(),
        2
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Bursts"), "{md}");

    // A resumed run finds both cells in the journal and measures nothing.
    let again = run_url(&sim.url)
        .args(flags)
        .arg("--resume")
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&again, 0);
    let records = crate::support::journal_lines(&out);
    let loads = records.iter().filter(|r| r["record"] == "load").count();
    assert_eq!(loads, 2, "nothing was measured again");
    assert_eq!(load_of(&out).cells, load.cells);
}

#[test]
fn constant_arrivals_are_sent_on_time_and_counted() {
    let dir = temp_dir("load-rate");
    let (_, profile) = test_profile(&dir);
    let sim = SimProcess::start(&profile);
    let out = dir.join("out");
    let flags = [
        "--mode",
        "rate",
        "--request-rate",
        "4",
        "--arrival",
        "constant",
        "--contexts",
        "256",
        "--max-tokens",
        "16",
        "--duration",
        "2s",
        "--prefill-contexts",
        "none",
        "--telemetry",
        "off",
        "--slo",
        "ttft_p99=1s,itl_p99=1s",
    ];
    let output = run_url(&sim.url)
        .args(flags)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let load = load_of(&out);
    let arrival = load.arrival.as_ref().unwrap();
    assert_eq!(
        (arrival.process.as_str(), arrival.duration_s),
        ("constant", Some(2.0))
    );
    let m = load.cells[0].measurements.as_ref().unwrap();
    // Every 250 ms up to 2 s: eight requests.
    assert_eq!((m.sent, m.completed, m.unfinished), (8, 8, 0));
    assert_eq!(m.intended_rate_per_s, Some(4.0));
    let achieved = m.achieved_rate_per_s.unwrap();
    assert!((achieved - 4.0).abs() < 0.2, "{achieved}");
    let slo = m.slo.as_ref().unwrap();
    assert!(slo.met, "an unloaded server meets a 1 s objective: {slo:?}");
    assert_eq!(slo.attainment_pct, 100.0);
    assert!((slo.goodput_per_s - 8.0 / m.duration_s).abs() < 1e-9);

    // A resume finds the rate cell (its arrival settings in the journal's
    // key) and measures nothing again.
    resume(&sim.url, &flags, &out);
    assert_eq!(load_records(&out), 1);
    assert_eq!(load_of(&out).cells, load.cells);
    // Another arrival process is another run: the journal refuses it.
    let mut other = flags;
    other[5] = "poisson";
    let refused = run_url(&sim.url)
        .args(other)
        .arg("--resume")
        .arg(&out)
        .output()
        .unwrap();
    assert_ne!(refused.status.code(), Some(0));
}

#[test]
fn latency_from_the_intended_time_grows_with_the_servers_own_queue() {
    let dir = temp_dir("load-overload");
    let (mut p, _) = test_profile(&dir);
    // Two seats: about 7 requests a second of 32 tokens; they arrive at 16.
    p.max_num_seqs = 2;
    p.validate().unwrap();
    let profile = dir.join("two-seats.json");
    std::fs::write(&profile, serde_json::to_string(&p).unwrap()).unwrap();
    let sim = SimProcess::start(&profile);
    let before = metrics(&sim.url);
    let out = dir.join("out");
    let output = run_url(&sim.url)
        .args([
            "--mode",
            "rate",
            "--request-rate",
            "16",
            "--arrival",
            "constant",
        ])
        .args([
            "--contexts",
            "256",
            "--max-tokens",
            "32",
            "--duration",
            "2s",
        ])
        .args(["--prefill-contexts", "none", "--telemetry", "off"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let after = metrics(&sim.url);
    let m = load_of(&out).cells[0].measurements.clone().unwrap();
    let count = sample(&after, "vllm:request_queue_time_seconds_count")
        - sample(&before, "vllm:request_queue_time_seconds_count");
    let sum = sample(&after, "vllm:request_queue_time_seconds_sum")
        - sample(&before, "vllm:request_queue_time_seconds_sum");
    assert_eq!(count as u64, m.sent, "the run's requests are the queue's");
    let queue_ms = sum / count * 1e3;
    let ttft = m.ttft_ms.unwrap();
    eprintln!("queue mean {queue_ms:.0} ms, TTFT from intended {ttft:?}");
    // The queue grows steadily: its mean is near the median TTFT measured
    // from the intended send time, which adds only the prefill and the lag.
    assert!(queue_ms > 500.0, "the server queued: {queue_ms} ms");
    assert!(ttft.p50 >= queue_ms * 0.8, "{} vs {queue_ms}", ttft.p50);
    assert!(
        ttft.p50 <= queue_ms * 1.25 + 100.0,
        "{} vs {queue_ms}",
        ttft.p50
    );
    assert!(ttft.p99 > 2.0 * ttft.p50.min(queue_ms) * 0.9);
}

#[test]
fn load_flags_of_the_wrong_mode_are_usage_errors() {
    for (args, says) in [
        (vec!["--mode", "rate"], "--mode rate needs --request-rate"),
        (vec!["--mode", "burst"], "--mode burst needs --requests"),
        (vec!["--request-rate", "2"], "belong to --mode rate"),
        (
            vec!["--slo", "ttft_p99=1s"],
            "--slo judges burst and rate cells",
        ),
        (
            vec![
                "--mode",
                "rate",
                "--request-rate",
                "2",
                "--arrival",
                "gamma",
            ],
            "--arrival gamma needs --burstiness",
        ),
        (
            vec!["--mode", "burst", "--requests", "4", "--slo", "ttft=1s"],
            "names no percentile",
        ),
        (
            vec!["--mode", "rate", "--request-rate", "0"],
            "request rate",
        ),
        (
            vec!["--search-floor", "100"],
            "--search-floor is a goal of --search",
        ),
        (
            vec!["--mode", "burst", "--requests", "4", "--search"],
            "--search needs an objective (--slo) or a floor",
        ),
        (
            vec![
                "--mode",
                "burst",
                "--requests",
                "4",
                "--search",
                "--search-floor",
                "0",
            ],
            "--search-floor must be above 0, not 0",
        ),
    ] {
        let output = bin()
            .args(["run", "--quiet", "--dry-run"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = stderr_after(&output, 2);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn the_knee_search_finds_the_simulators_seat_count() {
    // Six seats: a burst of up to six starts at once (TTFT one or two prefill
    // steps); a seventh waits for a whole request (32 steps of ~8 ms). With a
    // 150 ms TTFT objective the analytic knee is six requests.
    let dir = temp_dir("load-knee");
    let (mut p, _) = test_profile(&dir);
    p.max_num_seqs = 6;
    p.validate().unwrap();
    let profile = dir.join("six-seats.json");
    std::fs::write(&profile, serde_json::to_string(&p).unwrap()).unwrap();
    let sim = SimProcess::start(&profile);
    let out = dir.join("out");
    let output = run_url(&sim.url)
        .args(["--mode", "burst", "--requests", "1,64", "--search"])
        .args(["--slo", "ttft_p99=150ms", "--search-tolerance", "0%"])
        .args([
            "--contexts",
            "256",
            "--max-tokens",
            "32",
            "--prefill-contexts",
            "none",
        ])
        .args(["--telemetry", "off", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let load = load_of(&out);
    let search = &load.searches[0];
    let path: Vec<(f64, bool)> = search.path.iter().map(|s| (s.load, s.met)).collect();
    assert_eq!(search.knee, Some(6.0), "{path:?}");
    assert_eq!(search.end.as_deref(), Some("converged"));
    assert_eq!(
        path,
        [
            (1.0, true),
            (2.0, true),
            (4.0, true),
            (8.0, false),
            (6.0, true),
            (7.0, false)
        ]
    );
    assert_eq!(load.cells.len(), path.len(), "each try is a cell");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("### Knee search"), "{md}");

    // Killed after three tries, the search resumes: it replays them from the
    // journal, measures only the other three, and ends where it did.
    keep_loads(&out, 3);
    let flags = [
        "--mode",
        "burst",
        "--requests",
        "1,64",
        "--search",
        "--slo",
        "ttft_p99=150ms",
        "--search-tolerance",
        "0%",
        "--contexts",
        "256",
        "--max-tokens",
        "32",
        "--prefill-contexts",
        "none",
        "--telemetry",
        "off",
    ];
    resume(&sim.url, &flags, &out);
    assert_eq!(load_records(&out), 6, "three replayed, three measured");
    let resumed = load_of(&out);
    let walked = |l: &LoadRun| {
        let k = &l.searches[0];
        let path: Vec<(f64, bool)> = k.path.iter().map(|s| (s.load, s.met)).collect();
        (path, k.knee, k.end.clone())
    };
    assert_eq!(walked(&resumed), walked(&load));
    assert_eq!(resumed.cells[..3], load.cells[..3], "replayed as measured");
}

#[test]
fn the_floor_search_finds_the_lowest_burst_that_reaches_the_floor() {
    // A step costs 8 ms plus 1 ms per sequence, so a burst of N decodes at
    // N / (8 + N) tokens per ms in all and 1 / (8 + N) per request: totals
    // 111, 200, 273, 333 tok/s for N = 1…4. A 300 tok/s floor is first
    // reached at four requests, whose requests run at ~83 tok/s each.
    let dir = temp_dir("load-floor");
    let (mut p, _) = test_profile(&dir);
    p.cost.decode_per_seq_us = 1_000.0;
    p.validate().unwrap();
    let profile = dir.join("slow-seats.json");
    std::fs::write(&profile, serde_json::to_string(&p).unwrap()).unwrap();
    let sim = SimProcess::start(&profile);
    let out = dir.join("out");
    let output = run_url(&sim.url)
        .args(["--mode", "burst", "--requests", "1,64", "--search"])
        .args(["--search-floor", "300", "--search-tolerance", "0%"])
        .args([
            "--contexts",
            "256",
            "--max-tokens",
            "32",
            "--prefill-contexts",
            "none",
        ])
        .args(["--telemetry", "off", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let load = load_of(&out);
    let search = &load.searches[0];
    let path: Vec<(f64, bool)> = search.path.iter().map(|s| (s.load, s.met)).collect();
    assert_eq!(search.goal.as_deref(), Some("per_request_at_floor"));
    assert_eq!(search.floor_tokens_per_s, Some(300.0));
    assert_eq!(
        path,
        [(1.0, false), (2.0, false), (4.0, true), (3.0, false)],
        "{:?}",
        search.path
    );
    assert_eq!(search.knee, Some(4.0));
    assert_eq!(search.end.as_deref(), Some("converged"));
    let best = search.path.iter().find(|s| s.load == 4.0).unwrap();
    let per_request = best.per_request_tokens_per_s.unwrap();
    assert!(
        (per_request - 1000.0 / 12.0).abs() < 1000.0 / 12.0 * 0.05,
        "{per_request}"
    );
    let totals: Vec<f64> = [1.0, 2.0, 3.0, 4.0]
        .iter()
        .map(|l| {
            let s = search.path.iter().find(|s| s.load == *l).unwrap();
            s.total_tokens_per_s.unwrap()
        })
        .collect();
    assert!(totals.windows(2).all(|w| w[0] < w[1]), "{totals:?}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("fastest requests at ≥ 300 tok/s: 4"), "{md}");
}

#[test]
fn an_injected_prompt_stalls_the_streams_as_long_as_the_cost_model_prefills_it() {
    // A slow prefill (50 µs a token) so that the stall is long next to a step.
    let dir = temp_dir("load-inject");
    let (mut p, _) = test_profile(&dir);
    p.cost.prefill_per_token_us = 50.0;
    p.max_model_len = 8_192;
    p.validate().unwrap();
    let profile = dir.join("slow-prefill.json");
    std::fs::write(&profile, serde_json::to_string(&p).unwrap()).unwrap();
    let sim = SimProcess::start(&profile);
    let out = dir.join("out");
    let output = run_url(&sim.url)
        .args([
            "--contexts",
            "256",
            "--concurrency",
            "4",
            "--prefill-contexts",
            "none",
        ])
        .args([
            "--duration",
            "2s",
            "--max-tokens",
            "1024",
            "--inject",
            "4096",
        ])
        .args(["--inject-settle", "1s", "--telemetry", "off", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let report = read_report(&out);
    let m = report.decode[0].measurements.as_ref().unwrap();
    let i = m.interference.as_ref().expect("the probe's figures");
    assert_eq!(i.failure, None);
    // The engine schedules the four decoding streams first; the prompt gets
    // the rest of each step's token budget, one chunk a step, and each chunk
    // lengthens its step by its prefill cost: that is the stall.
    let budget = u64::from(p.max_num_batched_tokens) - 4;
    let (mut done, mut expected) = (0u64, std::time::Duration::ZERO);
    while done < 4096 {
        let n = budget.min(4096 - done);
        expected += p.cost.prefill_chunk(n, done);
        done += n;
    }
    let expected_ms = expected.as_secs_f64() * 1e3;
    eprintln!(
        "stall {} ms, cost model {expected_ms:.0} ms: {i:?}",
        i.stall_ms
    );
    assert!(
        (i.stall_ms - expected_ms).abs() <= 0.1 * expected_ms,
        "stall {} ms vs the cost model's {expected_ms} ms",
        i.stall_ms
    );
    let (alone, loaded) = (i.ttft_alone_ms.unwrap(), i.ttft_under_load_ms.unwrap());
    assert!(
        loaded > alone,
        "the streams' decode steps share its prefill steps"
    );
    assert!(i.tokens_per_s_during < 0.5 * i.tokens_per_s_before);
    assert!(
        i.tokens_per_s_after > 0.8 * i.tokens_per_s_before,
        "they recover"
    );
    // The timeline: before the send the streams run at their window's
    // rate; some part between send and first token falls below half of it.
    let before: Vec<f64> = i
        .timeline
        .iter()
        .filter(|p| p.t_ms < -100.0)
        .map(|p| p.tokens_per_s)
        .collect();
    assert!(!before.is_empty(), "{:?}", i.timeline);
    let mean_before = before.iter().sum::<f64>() / before.len() as f64;
    assert!(
        (mean_before - i.tokens_per_s_before).abs() < 0.25 * i.tokens_per_s_before,
        "{mean_before} vs {}",
        i.tokens_per_s_before
    );
    assert!(
        i.timeline
            .iter()
            .filter(|p| p.t_ms >= 0.0 && p.t_ms < loaded)
            .any(|p| p.tokens_per_s < 0.5 * i.tokens_per_s_before),
        "{:?}",
        i.timeline
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Prefill under load"), "{md}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("Streams&#39; tok/s around the injected prompt")
            || html.contains("Streams' tok/s around the injected prompt"),
        "the timeline chart"
    );
}

#[test]
fn a_shared_prefix_gives_the_hit_rate_it_intends_on_the_servers_counters() {
    let dir = temp_dir("load-prefix");
    let (_, profile) = test_profile(&dir);
    let sim = SimProcess::start(&profile);
    let out = dir.join("out");
    // 200 shared tokens of 512: 12 whole 16-token blocks hit, 192 of 512.
    let output = run_url(&sim.url)
        .args([
            "--mode",
            "burst",
            "--requests",
            "4",
            "--shared-prefix",
            "200",
        ])
        .args([
            "--contexts",
            "512",
            "--max-tokens",
            "16",
            "--prefill-contexts",
            "none",
        ])
        .args(["--telemetry", "off", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let m = load_of(&out).cells[0].measurements.clone().unwrap();
    assert_eq!(m.shared_prefix_tokens.map(|t| t.get()), Some(200));
    assert_eq!(m.prefix_cache_intended_pct, Some(192.0 / 512.0 * 100.0));
    assert_eq!(
        m.prefix_cache_measured_pct, m.prefix_cache_intended_pct,
        "the simulator caches as vLLM does"
    );
    assert!(
        bin()
            .args(["run", "--quiet", "--dry-run", "--shared-prefix", "50%"])
            .output()
            .unwrap()
            .status
            .code()
            == Some(2),
        "sustained cells use --prompt-sharing"
    );
}

#[test]
fn conversations_grow_their_prompts_turn_by_turn_and_hit_the_cache() {
    let dir = temp_dir("load-conversation");
    let (mut p, _) = test_profile(&dir);
    // A slow prefill (50 µs a token): a cold 512-token turn takes ~25 ms more
    // than a warm one that prefills only its ~100 new tokens.
    p.cost.prefill_per_token_us = 50.0;
    p.validate().unwrap();
    let profile = dir.join("slow-prefill.json");
    std::fs::write(&profile, serde_json::to_string(&p).unwrap()).unwrap();
    let sim = SimProcess::start(&profile);
    let out = dir.join("out");
    let output = run_url(&sim.url)
        .args([
            "--mode",
            "conversation",
            "--turns",
            "3",
            "--question-tokens",
            "64",
        ])
        .args([
            "--contexts",
            "512",
            "--concurrency",
            "2",
            "--max-tokens",
            "32",
        ])
        .args(["--prefill-contexts", "none", "--telemetry", "off", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let load = load_of(&out);
    assert_eq!(load.mode.as_str(), "conversation");
    let m = load.cells[0].measurements.clone().unwrap();
    assert_eq!((m.sent, m.completed), (6, 6), "2 conversations × 3 turns");
    assert_eq!(m.turns.len(), 3);
    let prompt = |t: usize| m.turns[t].prompt_tokens_mean.unwrap();
    assert_eq!(prompt(0), 512.0);
    // Each turn carries the last prompt, its 32-token answer and a 64-token
    // question (a join may merge a token or two when it is tokenized again).
    for t in 1..3 {
        let grew = prompt(t) - prompt(t - 1);
        assert!((grew - 96.0).abs() <= 3.0, "turn {}: +{grew}", t + 1);
    }
    // A warm later turn prefills only its new text: much sooner than the cold first.
    let ttft = |t: usize| m.turns[t].ttft_ms.unwrap().p50;
    assert!(ttft(1) < ttft(0) && ttft(2) < ttft(0), "{:?}", m.turns);
    let (intended, measured) = (
        m.prefix_cache_intended_pct.unwrap(),
        m.prefix_cache_measured_pct.unwrap(),
    );
    assert!(intended > 50.0, "{intended}");
    // The joins can cost a block a turn, never more.
    assert!(
        measured <= intended + 1e-9 && measured >= intended - 3.0,
        "{measured} vs {intended}"
    );
    // A resume finds the conversation cell and measures nothing again.
    resume(
        &sim.url,
        &[
            "--mode",
            "conversation",
            "--turns",
            "3",
            "--question-tokens",
            "64",
            "--contexts",
            "512",
            "--concurrency",
            "2",
            "--max-tokens",
            "32",
            "--prefill-contexts",
            "none",
            "--telemetry",
            "off",
        ],
        &out,
    );
    assert_eq!(load_records(&out), 1);
    assert_eq!(load_of(&out).cells, load.cells);
}

/// `--respect-eos` lets a burst's answers end where the model ends them (the tiny model after
/// 100 tokens) and the cell says how long they were; without it every answer runs to
/// `--max-tokens`. Sustained cells refuse it.
#[test]
fn respect_eos_lets_answers_end_and_reports_their_lengths() {
    let dir = temp_dir("load-eos");
    let (_, path) = test_profile(&dir);
    let mut sim = SimProcess::start(&path);
    let burst = |name: &str, extra: &[&str]| {
        let out = dir.join(name);
        let o = run_url(&sim.url)
            .args(["--mode", "burst", "--requests", "4", "--contexts", "0"])
            .args(["--prefill-contexts", "none", "--max-tokens", "160", "-o"])
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        stderr_after(&o, 0);
        let load = load_of(&out);
        let m = load.cells[0].measurements.clone().unwrap();
        (m, std::fs::read_to_string(out.join("report.md")).unwrap())
    };
    let (full, _) = burst("full", &[]);
    let lengths = full.output_tokens_per_request.unwrap();
    assert_eq!(
        (lengths.min, lengths.max),
        (160.0, 160.0),
        "ignore_eos keeps every answer"
    );
    let (ended, page) = burst("eos", &["--respect-eos"]);
    let lengths = ended.output_tokens_per_request.unwrap();
    assert_eq!(
        (lengths.min, lengths.max),
        (100.0, 100.0),
        "the model ends after 100"
    );
    assert!(ended.ttfc_ms.is_some());
    assert_eq!(ended.output_tokens.get(), 400);
    let _ = page;
    let refused = run_url(&sim.url)
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "1",
            "--respect-eos",
            "--dry-run",
        ])
        .output()
        .unwrap();
    assert!(stderr_after(&refused, 2).contains("--respect-eos"));
    sim.kill();
}

/// A reasoning model (the simulator's first 20 tokens of each chat answer stream as
/// `reasoning_content`): TTFT is its first thinking token, TTFC its first answer token, about
/// 20 decode steps later, and the page gives TTFC a column of its own.
#[test]
fn a_model_that_thinks_first_has_its_time_to_first_content_apart() {
    let dir = temp_dir("load-ttfc");
    let (mut profile, _) = test_profile(&dir);
    profile.reasoning_tokens = 20;
    let path = dir.join("thinking.json");
    std::fs::write(&path, serde_json::to_string(&profile).unwrap()).unwrap();
    let mut sim = SimProcess::start(&path);
    let out = dir.join("run");
    let o = run_url(&sim.url)
        .args([
            "--api",
            "chat",
            "--mode",
            "burst",
            "--requests",
            "2",
            "--contexts",
            "0",
        ])
        .args(["--prefill-contexts", "none", "--max-tokens", "64", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&o, 0);
    sim.kill();
    let m = load_of(&out).cells[0].measurements.clone().unwrap();
    let (ttft, ttfc) = (m.ttft_ms.unwrap().p50, m.ttfc_ms.unwrap().p50);
    // 19 more decode steps of at least the profile's 8 ms base.
    assert!(ttfc >= ttft + 19.0 * 8.0, "TTFT {ttft} ms, TTFC {ttfc} ms");
    assert_eq!(
        m.output_tokens.get(),
        128,
        "thinking tokens are output tokens"
    );
    let thought = m.reasoning_tokens_per_request.unwrap();
    assert_eq!(
        (thought.min, thought.max),
        (20.0, 20.0),
        "20 thinking tokens each"
    );
    // Thinking and answering run at the profile's step rate: about 120 tok/s each.
    let (thinking, answering) = (
        m.reasoning_tokens_per_s.unwrap().p50,
        m.answer_tokens_per_s.unwrap().p50,
    );
    assert!((40.0..130.0).contains(&thinking), "{thinking} tok/s");
    assert!(
        (thinking / answering - 1.0).abs() < 0.25,
        "{thinking} vs {answering} tok/s"
    );
    let page = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(page.contains("TTFC p50"), "{page}");
    assert!(page.contains("Thinking tokens p50"), "{page}");
    assert!(page.contains("Thinking / answer tok/s p50"), "{page}");
}

#[test]
fn think_tags_in_the_answer_are_reasoning_only_with_a_reasoning_parser() {
    let dir = temp_dir("load-think-tags");
    let (mut profile, _) = test_profile(&dir);
    profile.reasoning_tokens = 20;
    profile.reasoning_inline = true;
    let path = dir.join("think-tags.json");
    std::fs::write(&path, serde_json::to_string(&profile).unwrap()).unwrap();
    let mut sim = SimProcess::start(&path);
    let run = |name: &str, parser: &str| {
        let out = dir.join(name);
        let o = run_url(&sim.url)
            .args(["--api", "chat", "--mode", "burst", "--requests", "2"])
            .args(["--contexts", "0", "--prefill-contexts", "none"])
            .args(["--max-tokens", "64", "--reasoning-parser", parser, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        stderr_after(&o, 0);
        load_of(&out).cells[0].measurements.clone().unwrap()
    };
    let plain = run("plain", "none");
    let split = run("split", "think");
    let r1 = run("r1", "deepseek-r1");
    sim.kill();
    // Without a parser the tags are answer text: no reasoning, content from the first token.
    assert!(plain.reasoning_tokens_per_request.is_none(), "{plain:?}");
    let (ttft, ttfc) = (plain.ttft_ms.unwrap().p50, plain.ttfc_ms.unwrap().p50);
    assert!((ttfc - ttft).abs() < 1.0, "TTFT {ttft} ms, TTFC {ttfc} ms");
    for m in [split, r1] {
        let thought = m.reasoning_tokens_per_request.clone().unwrap();
        // The tags are two of the 20 thinking tokens.
        assert_eq!((thought.min, thought.max), (20.0, 20.0), "{m:?}");
        let (ttft, ttfc) = (m.ttft_ms.unwrap().p50, m.ttfc_ms.unwrap().p50);
        assert!(ttfc >= ttft + 19.0 * 8.0, "TTFT {ttft} ms, TTFC {ttfc} ms");
        assert_eq!(
            m.output_tokens.get(),
            128,
            "thinking tokens are output tokens"
        );
    }
    let bad = run_url("http://127.0.0.1:9")
        .args(["--reasoning-parser", "qwen9", "--dry-run"])
        .output()
        .unwrap();
    let stderr = stderr_after(&bad, 2);
    assert!(stderr.contains("deepseek-r1"), "{stderr}");
}
