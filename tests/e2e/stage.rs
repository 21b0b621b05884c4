//! A stage for reliability tests: the simulator in this process, optionally
//! behind a forwarding proxy that misbehaves on purpose, and a helper that
//! runs the real binary against it and collects everything it left behind.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use speedmatrix_report::{CellStatus, DecodeCell, Report};
use speedmatrix_sim::{Profile, RunningSim, SimServer};
use tokio::runtime::Runtime;

use crate::support::{read_report, run_url, temp_dir, test_profile};

/// How the proxy misbehaves. Only generation requests (`…/completions`) are
/// touched; `/v1/models`, `/metrics` and the rest pass through untouched, so
/// the runner's liveness checks see a healthy server.
#[derive(Debug, Clone)]
pub enum Trouble {
    /// Pass everything through.
    None,
    /// Add `x-sim-fault: SPEC` to generation requests whose body is longer
    /// than `min_body` bytes (the long-context row); with `decode_only`, only
    /// to requests asking for more than one token (not cache warm-ups).
    Fault {
        spec: String,
        min_body: usize,
        decode_only: bool,
    },
    /// Add `x-sim-fault: SPEC` to the decode requests (more than one token)
    /// whose order of arrival, counting from 0, is in `nth`.
    FaultNth { spec: String, nth: &'static [usize] },
    /// Remove these top-level fields from every generation request body.
    Strip(&'static [&'static str]),
    /// Answer generation requests 200 with an HTML page (a login portal, say).
    Html,
    /// Answer the first `n` decode requests (more than one token) with
    /// 429 and `Retry-After: 1`.
    Throttle(usize),
    /// Answer generation requests longer than `min_body` with 401 and an
    /// error message that echoes the `Authorization` header and some HTML,
    /// as a careless server might.
    EchoAuth { min_body: usize },
    /// Answer every path (the probe's too) 401 with a body that echoes the `Authorization`
    /// header between terminal escape sequences.
    EchoAuthEverywhere,
    /// Put the bearer token and escape sequences into the server's own names: the engine
    /// version on `/version` and each model id on `/v1/models` (generation requests get the
    /// model's true id back).
    KeyInNames,
}

/// What [`Trouble::KeyInNames`] and [`Trouble::EchoAuthEverywhere`] wrap around echoed text:
/// a screen clear and a colour, as a hostile server might send.
pub const ESCAPES: (&str, &str) = ("\u{1b}[2J\u{1b}[31m", "\u{1b}[0m");

/// The simulator (and proxy) running on a private runtime.
pub struct Stage {
    pub url: String,
    rt: Runtime,
    sim: Option<RunningSim>,
}

impl Stage {
    pub fn new(profile: Profile, trouble: Trouble) -> Stage {
        let rt = Runtime::new().unwrap();
        let (sim, url) = rt.block_on(async {
            let sim = SimServer::start(profile, SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .unwrap();
            let url = match trouble {
                Trouble::None => sim.url(),
                t => format!("http://{}", start_proxy(sim.addr(), t).await),
            };
            (sim, url)
        });
        Stage {
            url,
            rt,
            sim: Some(sim),
        }
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if let Some(sim) = self.sim.take() {
            self.rt.block_on(sim.shutdown());
        }
    }
}

/// What one `speedmatrix run` left behind.
pub struct Outcome {
    pub code: Option<i32>,
    pub stderr: String,
    pub stdout: String,
    pub out: PathBuf,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn report(&self) -> Report {
        read_report(&self.out)
    }

    pub fn cell(&self, context: u64) -> DecodeCell {
        let report = self.report();
        report
            .decode
            .iter()
            .find(|c| c.context.get() == context)
            .unwrap()
            .clone()
    }

    /// The decode cells in the journal, as the report shows them.
    pub fn journal_cells(&self) -> Vec<DecodeCell> {
        speedmatrix_runner::read_journal(&self.out.join("journal.jsonl"))
            .expect("a journal")
            .records
            .into_iter()
            .filter_map(|step| match step {
                speedmatrix_runner::JournalStep::Decode(cell) => {
                    Some(speedmatrix_runner::decode_cell(&cell))
                }
                _ => None,
            })
            .collect()
    }

    /// Every finished (not skipped) cell of the report is in the journal with
    /// the same status: nothing measured was lost.
    pub fn assert_nothing_lost(&self) {
        let journal = self.journal_cells();
        for cell in self.report().decode {
            if matches!(cell.status, CellStatus::Skipped { .. }) {
                continue;
            }
            let j = journal
                .iter()
                .find(|j| j.context == cell.context && j.concurrency == cell.concurrency)
                .unwrap_or_else(|| {
                    panic!(
                        "cell {} × {} is not in the journal",
                        cell.context, cell.concurrency
                    )
                });
            assert_eq!(j.status, cell.status);
            assert_eq!(j.measurements, cell.measurements);
        }
        for file in [
            "run.json",
            "report.md",
            "report.html",
            "measurements.csv",
            "journal.jsonl",
        ] {
            assert!(
                self.out.join(file).is_file(),
                "{file} missing; stderr: {}",
                self.stderr
            );
        }
    }

    /// The cell's error kind and message; fails the test when it is not an error.
    pub fn error_of(&self, context: u64) -> (String, String) {
        match self.cell(context).status {
            CellStatus::Error {
                error_kind,
                message,
                failed_requests,
                ..
            } => {
                assert!(failed_requests >= 1);
                (error_kind, message)
            }
            other => panic!(
                "cell {context}: expected an error, got {other:?}; stderr: {}",
                self.stderr
            ),
        }
    }

    /// Exit 2 with a one-line message.
    pub fn assert_one_line_exit_2(&self) {
        assert_eq!(self.code, Some(2), "{}", self.stderr);
        assert_eq!(self.stderr.trim().lines().count(), 1, "{}", self.stderr);
    }

    pub fn assert_no_panic(&self) {
        assert!(
            !self.stderr.contains("panicked"),
            "the binary panicked: {}",
            self.stderr
        );
    }
}

/// Two cells: context 0 (short prompts, untouched by `Trouble::Fault` with
/// a 600-byte threshold) and context 256 (long prompts), one stream each,
/// 1 s windows, 256-token answers (longer than a window on the test profile).
pub const TWO_CELLS: [&str; 10] = [
    "--contexts",
    "0,256",
    "--concurrency",
    "1",
    "--prefill-contexts",
    "none",
    "--duration",
    "1s",
    "--max-tokens",
    "256",
];

/// One decode cell at context 0: `concurrency` streams, a `duration` window,
/// `max_tokens` per request, no prefill.
pub fn one_cell(concurrency: u32, duration: &str, max_tokens: u32) -> Vec<String> {
    [
        "--contexts",
        "0",
        "--concurrency",
        &concurrency.to_string(),
        "--prefill-contexts",
        "none",
        "--duration",
        duration,
        "--max-tokens",
        &max_tokens.to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The byte threshold that tells the 256-token row from the 0 row.
pub const LONG_BODY: usize = 600;

/// Runs `speedmatrix run --quiet --tokenizer bundled --url URL ARGS --out DIR/out`.
pub fn run_against(url: &str, dir: &Path, args: &[&str]) -> Outcome {
    let mut cmd = run_url(url);
    cmd.args(args);
    run_cmd(cmd, dir)
}

/// Runs `args` against the test profile behind `trouble`, in a fresh folder `name`.
pub fn run_staged(name: &str, trouble: Trouble, args: &[&str]) -> Outcome {
    let dir = temp_dir(name);
    let (profile, _) = test_profile(&dir);
    let stage = Stage::new(profile, trouble);
    run_against(&stage.url, &dir, args)
}

/// Runs a prepared command with `--out DIR/out`, capturing its output.
pub fn run_cmd(mut cmd: Command, dir: &Path) -> Outcome {
    let out = dir.join("out");
    let start = Instant::now();
    let output = cmd
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Outcome {
        code: output.status.code(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        out,
        elapsed: start.elapsed(),
    }
}

/// A profile file with the test profile's speed and the given changes.
pub fn profile_with(dir: &Path, change: impl FnOnce(&mut Profile)) -> (Profile, PathBuf) {
    let (mut p, path) = crate::support::test_profile(dir);
    change(&mut p);
    p.validate().unwrap();
    std::fs::write(&path, serde_json::to_string_pretty(&p).unwrap()).unwrap();
    (p, path)
}

async fn start_proxy(upstream: SocketAddr, trouble: Trouble) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = Arc::new((trouble, AtomicUsize::new(0)));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    forward(upstream, Arc::clone(&state), req)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

type Body = BoxBody<Bytes, hyper::Error>;

fn full(status: u16, content_type: &str, text: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("retry-after", "1")
        .body(
            Full::new(text.into())
                .map_err(|never| match never {})
                .boxed(),
        )
        .unwrap()
}

async fn forward(
    upstream: SocketAddr,
    state: Arc<(Trouble, AtomicUsize)>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Body>, hyper::Error> {
    let (parts, body) = req.into_parts();
    let mut body = body.collect().await?.to_bytes();
    let generation = parts.uri.path().ends_with("completions");
    let models_path = parts.uri.path() == "/v1/models";
    let auth = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim_start_matches("Bearer ")
        .to_owned();
    if matches!(state.0, Trouble::EchoAuthEverywhere) {
        let msg = serde_json::json!({"error": {
            "message": format!("denied {}{auth}{}", ESCAPES.0, ESCAPES.1),
            "type": "AuthenticationError", "code": 401,
        }});
        return Ok(full(401, "application/json", msg.to_string()));
    }
    if matches!(state.0, Trouble::KeyInNames) && parts.uri.path() == "/version" {
        let v = serde_json::json!({"version": format!("0.32.0-{}{auth}{}", ESCAPES.0, ESCAPES.1)});
        return Ok(full(200, "application/json", v.to_string()));
    }
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let decode = json["max_tokens"].as_u64().unwrap_or(0) > 1;
    let mut fault = None;
    if generation {
        match &state.0 {
            Trouble::None => {}
            Trouble::Fault {
                spec,
                min_body,
                decode_only,
            } => {
                if body.len() > *min_body && (decode || !decode_only) {
                    fault = Some(spec.clone());
                }
            }
            Trouble::FaultNth { spec, nth } => {
                if decode && nth.contains(&state.1.fetch_add(1, Ordering::SeqCst)) {
                    fault = Some(spec.clone());
                }
            }
            Trouble::Strip(fields) => {
                let mut json = json.clone();
                for f in *fields {
                    json.as_object_mut().unwrap().remove(*f);
                }
                body = Bytes::from(serde_json::to_vec(&json).unwrap());
            }
            Trouble::Html => {
                return Ok(full(
                    200,
                    "text/html; charset=utf-8",
                    "<!doctype html><html><body><h1>Please log in</h1></body></html>",
                ));
            }
            Trouble::EchoAuth { min_body } if body.len() > *min_body => {
                let auth = parts
                    .headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let msg = serde_json::json!({"error": {
                    "message": format!("invalid credentials {auth} <script>alert('err')</script>"),
                    "type": "AuthenticationError", "code": 401,
                }});
                return Ok(full(401, "application/json", msg.to_string()));
            }
            Trouble::EchoAuth { .. } | Trouble::EchoAuthEverywhere => {}
            Trouble::KeyInNames => {
                // The model id the client learnt carries the token: give the server its own.
                let mut json = json.clone();
                if let Some(m) = json["model"].as_str() {
                    let own = m.split('-').next().unwrap_or(m).to_owned();
                    json["model"] = serde_json::Value::String(own);
                }
                body = Bytes::from(serde_json::to_vec(&json).unwrap());
            }
            Trouble::Throttle(n) => {
                if decode && state.1.fetch_add(1, Ordering::SeqCst) < *n {
                    let msg = r#"{"error":{"message":"rate limit exceeded","type":"RateLimitError","code":429}}"#;
                    return Ok(full(429, "application/json", msg));
                }
            }
        }
    }
    let stream = match tokio::net::TcpStream::connect(upstream).await {
        Ok(s) => s,
        Err(_) => return Ok(full(502, "text/plain", "upstream gone")),
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut builder = Request::builder().method(parts.method).uri(parts.uri);
    for (k, v) in &parts.headers {
        if k != "content-length" {
            builder = builder.header(k, v);
        }
    }
    if let Some(spec) = fault {
        builder = builder.header("x-sim-fault", spec);
    }
    let resp = sender
        .send_request(builder.body(Full::new(body)).unwrap())
        .await?;
    if matches!(state.0, Trouble::KeyInNames) && models_path {
        let (head, body) = resp.into_parts();
        let mut json: serde_json::Value =
            serde_json::from_slice(&body.collect().await?.to_bytes()).unwrap_or_default();
        if let Some(models) = json["data"].as_array_mut() {
            for m in models {
                let id = m["id"].as_str().unwrap_or_default().to_owned();
                m["id"] =
                    serde_json::Value::String(format!("{id}-{}{auth}{}", ESCAPES.0, ESCAPES.1));
            }
        }
        let mut head = head;
        head.headers.remove("content-length");
        return Ok(Response::from_parts(
            head,
            Full::new(Bytes::from(json.to_string()))
                .map_err(|never| match never {})
                .boxed(),
        ));
    }
    Ok(resp.map(|b| b.boxed()))
}

/// A TLS terminator with the self-signed test certificate
/// (tests/fixtures/tls) in front of `upstream`; returns its port.
pub fn start_tls(stage: &Stage, upstream: &str) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tls");
    let certs = CertificateDer::pem_file_iter(fixtures.join("cert.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(fixtures.join("key.pem")).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let upstream = upstream.trim_start_matches("http://").to_owned();
    stage.rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    // A client that refuses the certificate ends the handshake here.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        port
    })
}
