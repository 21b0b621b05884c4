//! A point's server: started (directly, or by `sh -c` when the study asks for a shell) in its
//! own process group on a free port, its output
//! in the point's `server.log`, polled until its health path answers, and stopped with the
//! study's signal, then killed after the grace period, group and all.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::{Point, ServerCommand, StopSignal, Study, StudyError};

/// A port free now (the server binds it a moment later).
pub(crate) fn free_port() -> Result<u16, StudyError> {
    let io = |source| StudyError::Io {
        path: PathBuf::from("127.0.0.1:0"),
        action: "bind a free port on",
        source,
    };
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io)?;
    Ok(l.local_addr().map_err(io)?.port())
}

/// A point's server while it runs: its process group is stopped by [`RunningServer::stop`],
/// or killed when this is dropped on any other way out (an error, a panic, a cancelled run).
pub(crate) struct RunningServer {
    child: tokio::process::Child,
    group: Option<rustix::process::Pid>,
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        if let Some(group) = self.group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

impl RunningServer {
    /// The exit status, if the server has exited.
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Asks the server's process group to stop, then kills it after the grace period.
    pub(crate) async fn stop(mut self, study: &Study) {
        let Some(pid) = self.group.take() else {
            return;
        };
        let signal = match study.server.stop_signal {
            StopSignal::Term => rustix::process::Signal::TERM,
            StopSignal::Int => rustix::process::Signal::INT,
        };
        let _ = rustix::process::kill_process_group(pid, signal);
        if tokio::time::timeout(study.server.grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            let _ = self.child.wait().await;
        }
        // Anything it left behind in its group.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Where and how a point's server starts.
pub(crate) struct Launch<'a> {
    /// Its port.
    pub(crate) port: u16,
    /// Its log (stdout and stderr).
    pub(crate) log: &'a Path,
    /// When given, first on its PATH (the folder where `speedmatrix` is the running program).
    pub(crate) program_dir: Option<&'a Path>,
    /// The GPUs it may see (empty: whatever the study's environment shows it).
    pub(crate) gpus: &'a [String],
}

/// Starts `command` for `point` as `launch` says.
pub(crate) fn spawn(
    study: &Study,
    point: &Point,
    command: &ServerCommand,
    launch: &Launch<'_>,
) -> Result<RunningServer, String> {
    let (port, log) = (launch.port, launch.log);
    let out =
        std::fs::File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = match command {
        ServerCommand::Argv(words) => {
            let (program, args) = words.split_first().ok_or("the command has no words")?;
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args);
            cmd
        }
        ServerCommand::Shell(script) => {
            let mut cmd = tokio::process::Command::new("sh");
            cmd.arg("-c").arg(script);
            cmd
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: stopping it stops everything it started.
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = launch.program_dir {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![dir.to_path_buf()];
        dirs.extend(std::env::split_paths(&path));
        if let Ok(joined) = std::env::join_paths(dirs) {
            cmd.env("PATH", joined);
        }
    }
    for (k, v) in &study.server.env {
        cmd.env(k, point.fill(v, port).map_err(|e| e.to_string())?);
    }
    // After the study's own environment: the GPUs a point holds are the only ones it sees,
    // whatever [server.env] says, so that points never share one.
    if !launch.gpus.is_empty() {
        let devices = crate::gpus::visible_devices(launch.gpus);
        for name in crate::GPU_VARIABLES {
            cmd.env(name, &devices);
        }
    }
    let child = cmd.spawn().map_err(|e| e.to_string())?;
    let group = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(i32::try_from(id).ok()?));
    Ok(RunningServer { child, group })
}

/// Polls the health path until it answers 2xx, the server exits, the time is up, or the
/// study is cancelled.
pub(crate) async fn wait_ready(
    server: &mut RunningServer,
    url: &str,
    study: &Study,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<(), String> {
    let client = speedmatrix_client::Client::new(
        speedmatrix_client::ClientConfig::new(url).timeouts(speedmatrix_client::Timeouts::new(
            Duration::from_secs(2),
            Duration::from_secs(5),
            Duration::from_secs(5),
        )),
    )
    .map_err(|e| format!("bad server url {url}: {e}"))?;
    let deadline = Instant::now() + study.server.ready_timeout;
    loop {
        if let Some(status) = server.exited() {
            return Err(format!("the server exited ({status}) before it was ready"));
        }
        if cancel.is_cancelled() {
            return Err("the study was stopped before the server was ready".into());
        }
        if let Ok(r) = client.get_raw(&study.server.health_path).await
            && r.is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{}{} did not answer within {}",
                url,
                study.server.health_path,
                humantime::format_duration(study.server.ready_timeout)
            ));
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
            () = cancel.cancelled() => {}
        }
    }
}
