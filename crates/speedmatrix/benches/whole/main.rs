//! The whole tool near the reader's limit: `speedmatrix run`, as a whole
//! process, against a loopback server that streams vLLM-shaped chunks, beside
//! a raw reader (a minimal hyper loop that only counts bytes) in the same run.
//! The `final-` scenarios' server sends usage only at the end of each request
//! (a proxy that drops `continuous_usage_stats`), so speedmatrix estimates the
//! streams cancelled at the window's end and calibrates on finished requests.
//!
//! Each client is a child process measured from outside: CPU is utime +
//! stime from `/proc/PID/stat`, read once the process has exited and before
//! it is reaped (a zombie keeps its totals); peak RSS is `VmHWM` from
//! `/proc/PID/status`, sampled while it runs. Tokens are the server's own
//! count of what it sent while the client ran. Post-window CPU is what the
//! client spent after the server's count last grew (summaries, estimates,
//! reports, exit). Bytes retained per token is the slope of peak RSS over
//! window tokens between a short and a long window.
//!
//! `cargo bench -p speedmatrix --bench whole` (or `cargo xtask perf -p speedmatrix`).
//! `SPEEDMATRIX_BASELINE=PATH` also measures another speedmatrix binary in the same
//! run; `WHOLE_SCENARIOS=bulk-1,paced-4096` runs only the scenarios named.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    missing_docs
)]

mod raw;
mod server;

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use raw::{raise_fd_limit, raw_reader};
use server::serve;

/// Tokens per request in the bulk scenarios.
const BULK_TOKENS: u64 = 2_000;
/// Token events per body frame when the server streams as fast as it can
/// (vLLM writes one frame per engine step; a busy server coalesces).
const EVENTS_PER_FRAME: u64 = 1;
/// Tokens per request in the paced scenarios: none ends inside the window.
const PACED_TOKENS: u64 = 8_192;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--serve") => return serve(args[2].parse().unwrap(), args[3].parse().unwrap()),
        Some("--raw") => return raw_reader(&args[2..]),
        _ => {}
    }
    raise_fd_limit();
    let exe = std::env::current_exe().unwrap();
    let ours = PathBuf::from(env!("CARGO_BIN_EXE_speedmatrix"));
    let mut clients = vec![("speedmatrix", ours)];
    if let Some(base) = std::env::var_os("SPEEDMATRIX_BASELINE") {
        clients.push(("baseline", PathBuf::from(base)));
    }
    let only: Option<Vec<String>> = std::env::var("WHOLE_SCENARIOS")
        .ok()
        .map(|s| s.split(',').map(str::to_owned).collect());
    println!("speedmatrix whole-tool benchmark ({} cores)", cores());
    println!(
        "{:<14} {:<12} {:>10} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "scenario",
        "client",
        "tok/s",
        "µs/tok",
        "cores",
        "peak RSS",
        "post CPU",
        "TTFT p50",
        "ITL p50",
        "failed"
    );
    let mut retained: Vec<(String, u64, f64)> = Vec::new();
    for s in scenarios() {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == s.name))
        {
            continue;
        }
        let server = Server::start(&exe, s.pace, s.usage_at_end);
        let raw = measure_raw(&exe, &server, &s);
        print_row(&s, "raw reader", &raw);
        for (name, bin) in &clients {
            let r = measure_speedmatrix(bin, &server, &s);
            print_row(&s, name, &r);
            if s.name.starts_with("bulk-128") {
                retained.push((name.to_string(), r.peak_rss, r.window_tokens));
            }
            if raw.tok_s > 0.0 && raw.sent_tokens > 0 && raw.peak_rss > 0 {
                println!(
                    "{:<14} {name:<12} {:.0} % of the raw reader's tok/s, {:.2}× its CPU per token, {:.2}× its peak RSS",
                    "",
                    r.tok_s / raw.tok_s * 100.0,
                    r.us_per_token() / raw.us_per_token(),
                    r.peak_rss as f64 / raw.peak_rss as f64,
                );
            }
        }
        server.stop();
    }
    for (name, _) in &clients {
        let runs: Vec<_> = retained.iter().filter(|r| &r.0 == name).collect();
        if let [short, long] = runs[..] {
            let bytes = (long.1 as f64 - short.1 as f64) / (long.2 - short.2);
            println!(
                "{name}: {bytes:.1} bytes of peak RSS per window token (bulk-128, 4 s → 8 s windows)"
            );
        }
    }
}

/// One load shape.
struct Scenario {
    name: &'static str,
    streams: u32,
    /// Tokens per second per stream; 0 streams as fast as the socket takes.
    pace: u32,
    window: Duration,
    /// The server reports usage only at the end of a request.
    usage_at_end: bool,
}

impl Scenario {
    fn max_tokens(&self) -> u64 {
        if self.pace == 0 {
            BULK_TOKENS
        } else {
            PACED_TOKENS
        }
    }
}

fn scenarios() -> Vec<Scenario> {
    let s = |name, streams, pace, secs| Scenario {
        name,
        streams,
        pace,
        window: Duration::from_secs(secs),
        usage_at_end: false,
    };
    vec![
        s("bulk-128", 128, 0, 4),
        s("bulk-128-long", 128, 0, 8),
        s("bulk-1", 1, 0, 4),
        Scenario {
            usage_at_end: true,
            ..s("final-128", 128, 0, 10)
        },
        s("paced-128", 128, 100, 5),
        s("paced-4096", 4096, 10, 10),
    ]
}

/// What one client did in one scenario.
#[derive(Debug, Default)]
struct Figures {
    tok_s: f64,
    window_tokens: f64,
    cpu_s: f64,
    wall_s: f64,
    sent_tokens: u64,
    peak_rss: u64,
    /// CPU seconds after the server's count last grew.
    post_cpu_s: f64,
    ttft_p50_ms: Option<f64>,
    itl_p50_ms: Option<f64>,
    failed: u64,
}

impl Figures {
    fn us_per_token(&self) -> f64 {
        self.cpu_s / self.sent_tokens.max(1) as f64 * 1e6
    }
}

fn print_row(s: &Scenario, client: &str, f: &Figures) {
    let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2} ms"));
    println!(
        "{:<14} {client:<12} {:>10.0} {:>8.2} {:>6.2} {:>7.0} MiB {:>7.2} s {:>9} {:>9} {:>7}",
        s.name,
        f.tok_s,
        f.us_per_token(),
        f.cpu_s / f.wall_s.max(1e-9),
        f.peak_rss as f64 / (1024.0 * 1024.0),
        f.post_cpu_s,
        ms(f.ttft_p50_ms),
        ms(f.itl_p50_ms),
        f.failed,
    );
    if s.pace > 0 {
        println!(
            "{:<14} {client:<12} truth: ITL {:.2} ms",
            "",
            1e3 / f64::from(s.pace)
        );
    }
}

fn measure_speedmatrix(bin: &Path, server: &Server, s: &Scenario) -> Figures {
    let out = std::env::temp_dir().join(format!(
        "speedmatrix-whole-{}-{}",
        std::process::id(),
        s.name
    ));
    let mut cmd = Command::new(bin);
    cmd.args([
        "run",
        "--url",
        &server.url,
        "--model",
        "m",
        "--tokenizer",
        "bundled",
        "--contexts",
        "0",
    ])
    .args(["--concurrency", &s.streams.to_string()])
    .args([
        "--prefill-contexts",
        "none",
        "--max-tokens",
        &s.max_tokens().to_string(),
    ])
    .args(["--duration", &format!("{}s", s.window.as_secs())])
    .args(["--quiet", "--force", "--out"])
    .arg(&out);
    let before = server.sent();
    let (_, proc) = run_measured(cmd, server);
    let sent_tokens = server.sent() - before;
    let report: serde_json::Value = std::fs::read(out.join("run.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let cell = &report["decode"][0];
    let m = &cell["measurements"];
    let failed = match cell["status"]["kind"].as_str() {
        Some("valid") => 0,
        Some("partial") => cell["status"]["failed"].as_u64().unwrap_or(0),
        other => {
            eprintln!("{}: speedmatrix cell status {other:?}", s.name);
            u64::from(s.streams)
        }
    };
    if let Some(t) = m["token_count"]
        .as_object()
        .filter(|t| t["estimated"] == true)
    {
        println!(
            "{:<14} {:<12} estimated {:.2} % of the tokens by {}, × {:.4} from {} finished requests, ±{} %",
            s.name,
            "",
            t["estimated_share_pct"].as_f64().unwrap_or(0.0),
            t["estimate_method"].as_str().unwrap_or("?"),
            t["calibration_factor"].as_f64().unwrap_or(1.0),
            t["calibration_requests"],
            t["uncertainty_pct"]
                .as_f64()
                .map_or("?".to_owned(), |u| format!("{u:.4}")),
        );
    }
    let _ = std::fs::remove_dir_all(&out);
    Figures {
        tok_s: m["total_tokens_per_s"].as_f64().unwrap_or(0.0),
        window_tokens: m["output_tokens"].as_f64().unwrap_or(0.0),
        cpu_s: proc.cpu_s,
        wall_s: proc.wall_s,
        sent_tokens,
        peak_rss: proc.peak_rss,
        post_cpu_s: proc.post_cpu_s,
        ttft_p50_ms: m["ttft_ms"]["p50"].as_f64(),
        itl_p50_ms: m["time_between_tokens_ms"]["p50"].as_f64(),
        failed,
    }
}

fn measure_raw(exe: &Path, server: &Server, s: &Scenario) -> Figures {
    let mut cmd = Command::new(exe);
    cmd.arg("--raw").args([
        server.url.clone(),
        s.streams.to_string(),
        s.window.as_secs_f64().to_string(),
        s.max_tokens().to_string(),
        s.pace.to_string(),
    ]);
    let before = server.sent();
    let (stdout, proc) = run_measured(cmd, server);
    let sent_tokens = server.sent() - before;
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_default();
    let tokens = r["tokens"].as_f64().unwrap_or(0.0);
    Figures {
        tok_s: tokens / s.window.as_secs_f64(),
        window_tokens: tokens,
        cpu_s: proc.cpu_s,
        wall_s: proc.wall_s,
        sent_tokens,
        peak_rss: proc.peak_rss,
        post_cpu_s: proc.post_cpu_s,
        ttft_p50_ms: r["ttft_p50_ms"].as_f64(),
        itl_p50_ms: r["itl_p50_ms"].as_f64(),
        failed: r["failed"].as_u64().unwrap_or(0),
    }
}

/// A child process's totals, read from outside.
struct ProcTotals {
    cpu_s: f64,
    wall_s: f64,
    peak_rss: u64,
    /// CPU after the server's token count last grew.
    post_cpu_s: f64,
}

fn run_measured(mut cmd: Command, server: &Server) -> (String, ProcTotals) {
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the client");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let pid = child.id();
    let mut peak_rss = 0;
    // The client's CPU time when the server's count was last seen to grow.
    let (mut sent, mut cpu_at_last_token) = (server.sent(), 0.0);
    let cpu_s = loop {
        if let Some(hwm) = vm_hwm(pid) {
            peak_rss = peak_rss.max(hwm);
        }
        match proc_stat(pid) {
            Some(('Z', cpu)) => break cpu,
            Some((_, cpu)) => {
                let now = server.sent();
                if now != sent {
                    (sent, cpu_at_last_token) = (now, cpu);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            None => break 0.0,
        }
    };
    let wall_s = start.elapsed().as_secs_f64();
    let status = child.wait().unwrap();
    if !status.success() {
        eprintln!("client exited with {status}");
    }
    (
        reader.join().unwrap_or_default(),
        ProcTotals {
            cpu_s,
            wall_s,
            peak_rss,
            post_cpu_s: (cpu_s - cpu_at_last_token).max(0.0),
        },
    )
}

/// State and utime + stime (seconds) of a process, from `/proc/PID/stat`.
fn proc_stat(pid: u32) -> Option<(char, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // proc(5): field 3 is the state, 14 and 15 utime and stime; `fields[0]` is field 3.
    let state = fields.first()?.chars().next()?;
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((state, ticks / clock_ticks_per_second()))
}

fn vm_hwm(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The loopback server, a child process.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(exe: &Path, pace: u32, usage_at_end: bool) -> Server {
        let mut child = Command::new(exe)
            .args(["--serve", &pace.to_string(), &usage_at_end.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Server {
            child,
            url: format!("http://{}", line.trim()),
        }
    }

    /// Tokens the server has sent so far.
    fn sent(&self) -> u64 {
        let addr = self.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET /stats HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let text = std::io::read_to_string(s).unwrap_or_default();
        text.rsplit("\r\n\r\n")
            .next()
            .and_then(|b| b.trim().parse().ok())
            .unwrap_or(0)
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
