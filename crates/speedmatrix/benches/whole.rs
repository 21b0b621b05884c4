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

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;

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

// ---- the loopback server ------------------------------------------------

struct ServerState {
    sent: AtomicU64,
    pace: u32,
    usage_at_end: bool,
    bulk: Mutex<HashMap<u64, Arc<Frames>>>,
}

type Body = BoxBody<Bytes, Infallible>;
/// A prebuilt response: each frame with the tokens it carries.
type Frames = Vec<(Bytes, u64)>;

fn serve(pace: u32, usage_at_end: bool) {
    raise_fd_limit();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap());
        let state = Arc::new(ServerState {
            sent: AtomicU64::new(0),
            pace,
            usage_at_end,
            bulk: Mutex::new(HashMap::new()),
        });
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let _ = socket.set_nodelay(true);
            let state = state.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(req, state.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
}

async fn handle(
    req: hyper::Request<hyper::body::Incoming>,
    state: Arc<ServerState>,
) -> Result<hyper::Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    let full = |status: u16, body: String| {
        hyper::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)).boxed())
            .unwrap()
    };
    Ok(match (req.method().as_str(), path.as_str()) {
        ("GET", "/v1/models") => full(
            200,
            r#"{"object":"list","data":[{"id":"m","object":"model","owned_by":"bench","max_model_len":1048576}]}"#.to_owned(),
        ),
        ("GET", "/stats") => full(200, state.sent.load(Ordering::Relaxed).to_string()),
        ("POST", "/v1/completions") => {
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let max_tokens = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["max_tokens"].as_u64())
                .unwrap_or(16)
                .max(1);
            let body = if state.pace == 0 {
                bulk_body(&state, max_tokens)
            } else {
                paced_body(&state, max_tokens)
            };
            hyper::Response::builder()
                .header("content-type", "text/event-stream")
                .body(body)
                .unwrap()
        }
        _ => full(404, r#"{"error":"not found"}"#.to_owned()),
    })
}

/// Token `i` of `max`; with `usage_at_end`, without the running usage (a
/// proxy that drops `continuous_usage_stats`).
fn token_event(out: &mut String, i: u64, max: u64, usage_at_end: bool) {
    use std::fmt::Write as _;
    let finish = if i + 1 == max { "\"length\"" } else { "null" };
    let _ = write!(
        out,
        "data: {{\"id\":\"cmpl-bench\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":{finish},\"stop_reason\":null}}]"
    );
    if usage_at_end {
        out.push_str("}\n\n");
    } else {
        let _ = write!(
            out,
            ",\"usage\":{{\"prompt_tokens\":8,\"total_tokens\":{},\"completion_tokens\":{}}}}}\n\n",
            8 + i + 1,
            i + 1
        );
    }
}

fn tail(out: &mut String, max: u64) {
    use std::fmt::Write as _;
    let _ = write!(
        out,
        "data: {{\"id\":\"cmpl-bench\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":8,\"total_tokens\":{},\"completion_tokens\":{max}}}}}\n\ndata: [DONE]\n\n",
        8 + max
    );
}

/// The whole response, prebuilt once per length, in frames of 16 events.
fn bulk_body(state: &Arc<ServerState>, max: u64) -> Body {
    let frames = state
        .bulk
        .lock()
        .unwrap()
        .entry(max)
        .or_insert_with(|| {
            let mut frames = Vec::new();
            let mut frame = String::new();
            let mut in_frame = 0;
            for i in 0..max {
                token_event(&mut frame, i, max, state.usage_at_end);
                in_frame += 1;
                if in_frame == EVENTS_PER_FRAME && i + 1 < max {
                    frames.push((Bytes::from(std::mem::take(&mut frame)), in_frame));
                    in_frame = 0;
                }
            }
            tail(&mut frame, max);
            frames.push((Bytes::from(frame), in_frame));
            Arc::new(frames)
        })
        .clone();
    let state = state.clone();
    let items = (0..frames.len()).map(move |i| {
        let (bytes, tokens) = &frames[i];
        state.sent.fetch_add(*tokens, Ordering::Relaxed);
        Ok::<_, Infallible>(Frame::data(bytes.clone()))
    });
    StreamBody::new(futures_util::stream::iter(items)).boxed()
}

/// One event per frame, `pace` per second, the first at once.
fn paced_body(state: &Arc<ServerState>, max: u64) -> Body {
    let period = Duration::from_secs_f64(1.0 / f64::from(state.pace));
    let start = tokio::time::Instant::now();
    let state = state.clone();
    let stream = futures_util::stream::unfold(0u64, move |i| {
        let state = state.clone();
        async move {
            if i > max {
                return None;
            }
            let u32_i = u32::try_from(i).unwrap_or(u32::MAX);
            tokio::time::sleep_until(start + period * u32_i).await;
            let mut text = String::new();
            if i == max {
                tail(&mut text, max);
            } else {
                token_event(&mut text, i, max, state.usage_at_end);
                state.sent.fetch_add(1, Ordering::Relaxed);
            }
            Some((Ok::<_, Infallible>(Frame::data(Bytes::from(text))), i + 1))
        }
    });
    StreamBody::new(stream).boxed()
}

// ---- the raw reader -----------------------------------------------------

#[derive(Default)]
struct RawStats {
    tokens: u64,
    failed: u64,
    ttft_us: Vec<u32>,
    itl_us: Vec<u32>,
}

/// `--raw URL STREAMS SECONDS MAX_TOKENS PACE`: keeps STREAMS connections
/// busy for SECONDS and prints what it counted as one JSON line.
fn raw_reader(args: &[String]) {
    raise_fd_limit();
    let addr = args[0].trim_start_matches("http://").to_owned();
    let streams: u32 = args[1].parse().unwrap();
    let window = Duration::from_secs_f64(args[2].parse().unwrap());
    let max_tokens: u64 = args[3].parse().unwrap();
    let latency = args[4] != "0";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stats = runtime.block_on(async move {
        let body = Bytes::from(format!(
            r#"{{"model":"m","prompt":"hi","max_tokens":{max_tokens},"stream":true,"stream_options":{{"include_usage":true,"continuous_usage_stats":true}}}}"#
        ));
        // Connect every stream before the window opens, as a benchmark's warm-up does.
        let mut senders = Vec::new();
        for _ in 0..streams {
            let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let (sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp))
                .await
                .unwrap();
            tokio::spawn(conn);
            senders.push(sender);
        }
        let start = Instant::now();
        let deadline = start + window;
        let tasks: Vec<_> = senders
            .into_iter()
            .map(|sender| tokio::spawn(raw_stream(sender, body.clone(), deadline, latency)))
            .collect();
        let mut all = RawStats::default();
        for t in tasks {
            let s = t.await.unwrap_or_default();
            all.tokens += s.tokens;
            all.failed += s.failed;
            all.ttft_us.extend(s.ttft_us);
            all.itl_us.extend(s.itl_us);
        }
        all
    });
    let median_ms = |mut v: Vec<u32>| {
        if v.is_empty() {
            return serde_json::Value::Null;
        }
        v.sort_unstable();
        serde_json::json!(f64::from(v[v.len() / 2]) / 1e3)
    };
    println!(
        "{}",
        serde_json::json!({
            "tokens": stats.tokens,
            "failed": stats.failed,
            "ttft_p50_ms": median_ms(stats.ttft_us),
            "itl_p50_ms": median_ms(stats.itl_us),
        })
    );
}

async fn raw_stream(
    mut sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    body: Bytes,
    deadline: Instant,
    latency: bool,
) -> RawStats {
    let mut stats = RawStats::default();
    let finder = memchr::memmem::Finder::new(b"\n\n");
    while Instant::now() < deadline {
        let req = hyper::Request::post("/v1/completions")
            .header("host", "bench")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .unwrap();
        let sent = Instant::now();
        let Ok(resp) = sender.send_request(req).await else {
            stats.failed += 1;
            return stats;
        };
        let mut body = resp.into_body();
        let mut last: Option<Instant> = None;
        loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                () = tokio::time::sleep_until(deadline.into()) => return stats,
            };
            let Some(frame) = frame else { break };
            let Ok(frame) = frame else {
                stats.failed += 1;
                break;
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let now = Instant::now();
            if now > deadline {
                return stats;
            }
            let mut events = finder.find_iter(&data).count() as u64;
            if data.ends_with(b"data: [DONE]\n\n") {
                events = events.saturating_sub(2);
            }
            if events == 0 {
                continue;
            }
            stats.tokens += events;
            if latency {
                match last {
                    None => stats.ttft_us.push(micros(now - sent)),
                    Some(prev) => {
                        let gap = micros(now - prev) / events as u32;
                        stats
                            .itl_us
                            .extend(std::iter::repeat_n(gap, events as usize));
                    }
                }
            }
            last = Some(now);
        }
    }
    stats
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Raises the soft open-files limit to the hard one (4,096 streams need
/// more than the usual 1,024).
fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}
