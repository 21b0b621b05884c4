//! The vLLM OpenAI-compatible server as a child process, stopped by PID (children included).

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::net::Net;

/// How the server is started.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The venv's Python, which has vLLM.
    pub(crate) python: PathBuf,
    /// The model folder.
    pub(crate) model_dir: PathBuf,
    /// `VLLM_CPU_KVCACHE_SPACE`, whole GiB.
    pub(crate) kv_cache_gib: u64,
    /// `--max-model-len`.
    pub(crate) max_model_len: u64,
    /// Where the server's stdout and stderr go.
    pub(crate) log_path: PathBuf,
}

/// A running server. Dropping it stops it.
#[derive(Debug)]
pub(crate) struct Server {
    child: Option<Child>,
    url: String,
    log_path: PathBuf,
    config: Config,
}

/// The name the tiny model is served under.
pub(crate) const SERVED_MODEL: &str = "tiny";

/// `vllm serve` fails for the `vllm-cpu` distribution (it looks up a package named `vllm`);
/// this module takes the same flags.
pub(crate) const ENTRY_POINT: &str = "vllm.entrypoints.openai.api_server";

/// The server's command-line flags.
pub(crate) fn server_args(model: &str, port: &str, config: &Config) -> Vec<String> {
    let flags = [
        "--model",
        model,
        "--served-model-name",
        SERVED_MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        port,
        "--max-model-len",
        &config.max_model_len.to_string(),
        "--dtype",
        "bfloat16",
    ];
    flags.into_iter().map(str::to_owned).collect()
}

/// The server's environment: a fixed KV size, OpenMP bound by vLLM, nothing fetched from outside.
pub(crate) fn server_env(config: &Config) -> Vec<(&'static str, String)> {
    [
        ("VLLM_CPU_KVCACHE_SPACE", config.kv_cache_gib.to_string()),
        ("VLLM_CPU_OMP_THREADS_BIND", "auto".into()),
        ("VLLM_HOST_IP", "127.0.0.1".into()),
        ("HF_HUB_OFFLINE", "1".into()),
        ("TRANSFORMERS_OFFLINE", "1".into()),
        ("VLLM_NO_USAGE_STATS", "1".into()),
        ("DO_NOT_TRACK", "1".into()),
    ]
    .into()
}

/// The start command as a person would type it (model folder and port left as placeholders).
pub(crate) fn describe(config: &Config) -> String {
    let env: Vec<String> = server_env(config)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!(
        "{} python -m {ENTRY_POINT} {}",
        env.join(" "),
        server_args("<tiny model>", "<free port>", config).join(" ")
    )
}

impl Server {
    /// Starts the server on a free loopback port; it is not ready yet (see [`Self::wait_ready`]).
    pub(crate) fn start(config: &Config) -> anyhow::Result<Self> {
        let port = free_port()?;
        let log = File::create(&config.log_path)
            .with_context(|| format!("creating {}", config.log_path.display()))?;
        let log_err = log.try_clone().context("duplicating the log file handle")?;
        let mut cmd = Command::new(&config.python);
        cmd.args(["-m", ENTRY_POINT])
            .args(server_args(
                &config.model_dir.to_string_lossy(),
                &port.to_string(),
                config,
            ))
            .envs(server_env(config));
        cmd.stdin(Stdio::null()).stdout(log).stderr(log_err);
        eprintln!(
            "vllm-e2e: starting vLLM on 127.0.0.1:{port}, log in {}",
            config.log_path.display()
        );
        let child = cmd.spawn().context("could not start the vLLM server")?;
        Ok(Self {
            child: Some(child),
            url: format!("http://127.0.0.1:{port}"),
            log_path: config.log_path.clone(),
            config: config.clone(),
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:38211`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Where the server logs.
    pub(crate) fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// How the server was started.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The server's log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Polls `/health` until it answers 200; returns the time since the start was requested.
    pub(crate) fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let net = Net::new(&self.url)?;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait().context("polling the server process")?
            {
                bail!(
                    "the server exited with {status} before it was ready; last log lines:\n{}",
                    tail(&self.log(), 30)
                );
            }
            if net.get("/health").is_ok_and(|r| r.status == 200) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                bail!(
                    "the server was not ready after {timeout:?}; last log lines:\n{}",
                    tail(&self.log(), 30)
                );
            }
            sleep(Duration::from_millis(250));
        }
    }

    /// Pins the EngineCore process and all its threads to `cpus` (a taskset list such as `0`
    /// or `0-1`); returns its PID.
    ///
    /// On two cores the engine core busy-polls and starves the HTTP server, so tokens reach
    /// clients in one burst at the end; with the engine on one core they stream.
    pub(crate) fn pin_engine_core(&self, cpus: &str) -> anyhow::Result<u32> {
        let root = self.pid().context("the server is not running")?;
        let pid = descendants(root)
            .into_iter()
            .find(|&p| cmdline(p).contains("EngineCore"))
            .context("no EngineCore process among the server's children")?;
        let status = Command::new("taskset")
            .args(["-a", "-pc", cpus, &pid.to_string()])
            .stdout(Stdio::null())
            .status()
            .context("could not run taskset (util-linux)")?;
        if !status.success() {
            bail!("taskset -a -pc {cpus} {pid} failed with {status}");
        }
        Ok(pid)
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the server and every process it started: SIGTERM, then SIGKILL after 20 s.
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let root = child.id();
        let mut pids = descendants(root);
        pids.push(root);
        signal("TERM", &pids);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && pids.iter().any(|&p| alive(p)) {
            // Reaps the root as soon as it exits, so it stops counting as alive.
            let _ = child.try_wait();
            sleep(Duration::from_millis(200));
        }
        let left: Vec<u32> = pids.into_iter().filter(|&p| alive(p)).collect();
        if !left.is_empty() {
            eprintln!("vllm-e2e: killing processes that ignored SIGTERM: {left:?}");
            signal("KILL", &left);
        }
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a probe socket")?;
    Ok(listener
        .local_addr()
        .context("reading the probe port")?
        .port())
}

pub(crate) fn signal(name: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let mut cmd = Command::new("kill");
    cmd.arg(format!("-{name}"))
        .args(pids.iter().map(u32::to_string))
        .stderr(Stdio::null());
    // A process may exit between listing and signalling; that is not an error here.
    let _ = cmd.status();
}

/// All processes below `root` (children, grandchildren, …), from `/proc`.
pub(crate) fn descendants(root: u32) -> Vec<u32> {
    let table = process_table();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &table {
            if ppid == parent && !found.contains(&pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

/// `(pid, parent pid)` of every process.
fn process_table() -> Vec<(u32, u32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, parse_stat(&stat)?.1))
        })
        .collect()
}

/// State and parent PID from a `/proc/PID/stat` line; the command name may hold spaces and `)`.
fn parse_stat(stat: &str) -> Option<(char, u32)> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether `pid` exists and is not a zombie.
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| parse_stat(&s))
        .is_some_and(|(state, _)| state != 'Z' && state != 'X')
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let stat = "4242 (VLLM::Engine Core)) S 4200 4200 4200 0 -1 4194560";
        assert_eq!(parse_stat(stat), Some(('S', 4200)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_test_is_a_descendant_of_its_parent() {
        let me = std::process::id();
        let table = process_table();
        let parent = table.iter().find(|(p, _)| *p == me).map(|(_, pp)| *pp);
        let parent = parent.unwrap();
        assert!(descendants(parent).contains(&me));
        assert!(alive(me));
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
