//! Shared helpers: temp dirs, profiles, a simulator process, the binary.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use speedmatrix_report::Report;
use speedmatrix_sim::Profile;

pub fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_speedmatrix"));
    cmd.env_remove("OPENAI_API_KEY");
    cmd
}

/// `speedmatrix run --quiet --sim-profile PROFILE`; the caller adds the rest.
pub fn run_sim_profile(profile: &Path) -> Command {
    let mut cmd = bin();
    cmd.args(["run", "--quiet", "--sim-profile"]).arg(profile);
    cmd
}

/// `speedmatrix run --quiet --tokenizer bundled --url URL`; the caller adds the rest.
pub fn run_url(url: &str) -> Command {
    let mut cmd = bin();
    cmd.args(["run", "--quiet", "--tokenizer", "bundled", "--url", url]);
    cmd
}

/// The command's stderr, once its exit code is checked to be `code`.
pub fn stderr_after(output: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    stderr
}

/// A port on 127.0.0.1 that was free a moment ago: nothing listens there.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh, empty folder for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("speedmatrix-e2e-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The tiny profile slowed to ~100 tok/s per stream so that a request of
/// `max_tokens` 512 outlives a short window, written to `dir`.
pub fn test_profile(dir: &Path) -> (Profile, PathBuf) {
    let mut p = Profile::builtin("tiny").unwrap();
    p.cost.step_base_us = 8_000.0;
    p.cost.decode_per_seq_us = 50.0;
    p.name = "e2e".into();
    p.validate().unwrap();
    let path = dir.join("profile.json");
    std::fs::write(&path, serde_json::to_string_pretty(&p).unwrap()).unwrap();
    (p, path)
}

pub fn read_report(dir: &Path) -> Report {
    let text = std::fs::read_to_string(dir.join("run.json")).unwrap();
    Report::from_json(&text).unwrap()
}

pub fn journal_lines(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub fn decode_records(dir: &Path) -> usize {
    journal_lines(dir)
        .iter()
        .filter(|l| l["record"] == "decode")
        .count()
}

/// Waits until `cond` holds, failing the test after `limit`.
pub fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `speedmatrix sim` process; killed on drop.
pub struct SimProcess {
    pub child: Child,
    pub url: String,
}

impl SimProcess {
    pub fn start(profile: &Path) -> SimProcess {
        SimProcess::start_on(profile, 0)
    }

    /// The simulator on `port` (0: any free one), as a server restarted at
    /// the same address.
    pub fn start_on(profile: &Path, port: u16) -> SimProcess {
        let mut child = bin()
            .args(["sim", "--port", &port.to_string(), "--profile"])
            .arg(profile)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("sim exited before printing its URL")
                .unwrap();
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().unwrap().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        SimProcess { child, url }
    }

    /// The port the simulator listens on.
    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
