//! Runs that meet trouble: a server that dies, Ctrl-C, a cell whose requests fail.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use speedmatrix_report::CellStatus;

use crate::support::{
    SimProcess, decode_records, read_report, run_sim_profile, run_url, temp_dir, test_profile,
    wait_for,
};

const CELLS: [&str; 8] = [
    "--contexts",
    "0,256",
    "--concurrency",
    "1,2,4",
    "--prefill-contexts",
    "none",
    "--max-tokens",
    "512",
];

/// `run` against `url` over [`CELLS`] with 1 s windows; the caller adds the rest.
fn run_cells(url: &str) -> std::process::Command {
    let mut cmd = run_url(url);
    cmd.args(["--duration", "1s"]).args(CELLS);
    cmd
}

#[test]
fn a_dead_server_loses_no_finished_cell_and_resume_completes_the_run() {
    let dir = temp_dir("dead-server");
    let (_, profile) = test_profile(&dir);
    let out = dir.join("out");
    let mut sim = SimProcess::start(&profile);
    let run = run_cells(&sim.url)
        .arg("--out")
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(60), "two finished cells", || {
        decode_records(&out) >= 2
    });
    sim.kill();
    let output = run.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1), "a run cut short must exit 1");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("stopped early"),
        "unclear message: {stderr}"
    );
    assert!(
        stderr.contains("--resume"),
        "no hint how to continue: {stderr}"
    );
    let partial = read_report(&out);
    let finished = partial
        .decode
        .iter()
        .filter(|c| c.status.is_valid())
        .count();
    assert!(finished >= 2, "finished cells lost: {finished}");
    assert!(decode_records(&out) >= finished);

    // The server comes back at the same address (the resume key names it).
    let port = sim.port();
    let sim = SimProcess::start_on(&profile, port);
    let status = run_cells(&sim.url)
        .arg("--resume")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let full = read_report(&out);
    assert_eq!(full.decode.len(), 6);
    assert!(
        full.decode.iter().all(|c| c.status.is_valid()),
        "{:?}",
        full.decode
    );
    // The cells measured before the crash were kept, not measured again.
    for before in partial.decode.iter().filter(|c| c.status.is_valid()) {
        let after = full
            .decode
            .iter()
            .find(|c| c.context == before.context && c.concurrency == before.concurrency)
            .unwrap();
        assert_eq!(after.measurements, before.measurements);
    }
}

#[test]
fn ctrl_c_leaves_a_valid_partial_report() {
    let dir = temp_dir("sigint");
    let (_, profile) = test_profile(&dir);
    let out = dir.join("out");
    let mut run = run_sim_profile(&profile)
        .args(["--duration", "1s"])
        .args(CELLS)
        .arg("--out")
        .arg(&out)
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(60), "a finished cell", || {
        decode_records(&out) >= 1
    });
    let kill = std::process::Command::new("kill")
        .args(["-INT", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let report = read_report(&out);
    report.validate().unwrap();
    assert!(report.decode.iter().any(|c| c.status.is_valid()));
    assert!(
        report
            .decode
            .iter()
            .any(|c| matches!(c.status, CellStatus::Skipped { .. }))
    );
    assert!(
        std::fs::read_to_string(out.join("report.md"))
            .unwrap()
            .contains("interrupted")
    );
}

#[test]
fn a_cell_whose_requests_fail_is_an_error_and_the_others_are_valid() {
    let dir = temp_dir("500");
    let (_, profile) = test_profile(&dir);
    let sim = SimProcess::start(&profile);
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Requests with a long prompt (the 256-token row) get HTTP 500 from the proxy.
    let proxy = rt.block_on(proxy::start(sim.url.clone(), 600));
    let out = dir.join("out");
    let status = run_cells(&format!("http://{proxy}"))
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "the run itself completes: {status}");
    let report = read_report(&out);
    for cell in &report.decode {
        match cell.context.get() {
            0 => assert!(cell.status.is_valid(), "{:?}", cell.status),
            _ => match &cell.status {
                CellStatus::Error {
                    error_kind,
                    message,
                    ..
                } => {
                    assert_eq!(error_kind, "http_status");
                    assert!(message.contains("500"), "{message}");
                }
                other => panic!("expected an error, got {other:?}"),
            },
        }
    }
}

/// A forwarding proxy that answers 500 to generation requests with bodies
/// longer than a threshold.
mod proxy {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper::{Request, Response};
    use hyper_util::rt::TokioIo;

    pub async fn start(upstream: String, max_body: usize) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        forward(upstream.clone(), req, max_body)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        addr
    }

    async fn forward(
        upstream: String,
        req: Request<hyper::body::Incoming>,
        max_body: usize,
    ) -> Result<Response<http_body_util::combinators::BoxBody<Bytes, hyper::Error>>, hyper::Error>
    {
        let (parts, body) = req.into_parts();
        let body = body.collect().await?.to_bytes();
        if parts.uri.path().contains("completions") && body.len() > max_body {
            let msg = r#"{"error":{"message":"injected failure","type":"InternalServerError","code":500}}"#;
            let resp = Response::builder()
                .status(500)
                .header("content-type", "application/json")
                .body(
                    Full::new(Bytes::from(msg))
                        .map_err(|never| match never {})
                        .boxed(),
                )
                .unwrap();
            return Ok(resp);
        }
        let host = upstream.trim_start_matches("http://").to_owned();
        let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let mut builder = Request::builder().method(parts.method).uri(parts.uri);
        for (k, v) in &parts.headers {
            builder = builder.header(k, v);
        }
        let resp = sender
            .send_request(builder.body(Full::new(body)).unwrap())
            .await?;
        Ok(resp.map(|b| b.boxed()))
    }
}
