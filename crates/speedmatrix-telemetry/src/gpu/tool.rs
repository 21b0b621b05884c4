//! Running a GPU tool (`nvidia-smi`, `amd-smi`, `rocm-smi`) once, with a time
//! limit: a tool that hangs (a wedged driver does that) is killed with its
//! whole process group when the limit passes, and the source is recorded as
//! unavailable with why; nothing that calls a tool ever waits longer. A tool
//! that hung once is not run again by this process (a wedged driver stays
//! wedged): later calls fail at once with the same error.

use std::io::Read as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError, mpsc};
use std::time::Duration;

use crate::TelemetryError;

/// How long one run of a tool may take: `nvidia-smi` takes seconds on a
/// host without persistence mode while the driver initializes every GPU;
/// longer is a hung tool.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a killed tool gets to be reaped before it is left behind (a
/// process stuck in the driver cannot die until the driver lets it).
const REAP_GRACE: Duration = Duration::from_secs(1);

/// Most output read from one run: every tool answers in kilobytes.
const MAX_OUTPUT_BYTES: u64 = 16 << 20;

/// Runs `tool args` with [`TOOL_TIMEOUT`]; its standard output on success.
///
/// # Errors
/// [`TelemetryError::NoGpuSource`] when the tool cannot be started (not on
/// PATH), [`TelemetryError::ToolTimedOut`] when it ran past the limit (it is
/// killed), [`TelemetryError::ToolFailed`] when it exits with an error.
pub(crate) fn run(tool: &'static str, args: &[&str]) -> Result<String, TelemetryError> {
    run_within(tool, args, TOOL_TIMEOUT)
}

/// Tools that ran past their limit in this process, with the limit.
static HUNG: Mutex<Vec<(&'static str, Duration)>> = Mutex::new(Vec::new());

/// [`run`] with a limit of `limit`.
pub(crate) fn run_within(
    tool: &'static str,
    args: &[&str],
    limit: Duration,
) -> Result<String, TelemetryError> {
    let hung = |after| TelemetryError::ToolTimedOut { tool, after };
    let earlier = HUNG
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(t, _)| *t == tool)
        .map(|(_, after)| *after);
    if let Some(after) = earlier {
        return Err(hung(after));
    }
    let mut cmd = Command::new(tool);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        // Its own group: killing the group also stops anything it started
        // that holds its output open.
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| TelemetryError::NoGpuSource(format!("{tool}: {e}")))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("{tool}-run"))
        .spawn(move || {
            let _ = tx.send(read_and_wait(&mut child));
        });
    if let Err(e) = spawned {
        kill_group(pid);
        return Err(TelemetryError::ToolFailed {
            tool,
            why: e.to_string(),
        });
    }
    let (status, out) = match rx.recv_timeout(limit) {
        Ok(done) => done,
        Err(_) => {
            kill_group(pid);
            // Reaped by the thread if it can die; else left to the thread.
            let _ = rx.recv_timeout(REAP_GRACE);
            HUNG.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((tool, limit));
            return Err(hung(limit));
        }
    };
    let status = status.map_err(|why| TelemetryError::ToolFailed { tool, why })?;
    let text = String::from_utf8_lossy(&out).into_owned();
    if !status.success() {
        return Err(TelemetryError::ToolFailed {
            tool,
            why: format!("{status}: {}", snippet(&text)),
        });
    }
    Ok(text)
}

/// Reads the child's output to its end, then reaps it.
fn read_and_wait(child: &mut Child) -> (Result<ExitStatus, String>, Vec<u8>) {
    let mut out = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = stdout.take(MAX_OUTPUT_BYTES).read_to_end(&mut out);
    }
    (child.wait().map_err(|e| e.to_string()), out)
}

/// Kills the tool's process group (the tool is its leader).
fn kill_group(pid: u32) {
    #[cfg(unix)]
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// Kills a long-running tool and reaps it without waiting on a process that
/// cannot die yet: that one is reaped by a thread of its own.
pub(crate) fn stop(mut child: Child) {
    kill_group(child.id());
    let _ = child.kill();
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("gpu-tool-reaper".into())
        .spawn(move || {
            let _ = child.wait();
        });
}

/// The start of a tool's output, for an error message.
fn snippet(text: &str) -> &str {
    let t = text.trim();
    match t.char_indices().nth(300) {
        Some((i, _)) => &t[..i],
        None => t,
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_tool_that_hangs_is_killed_at_the_limit_with_what_it_started() {
        let start = Instant::now();
        // The shell's child keeps the output open: only killing the group ends it.
        // `env` runs the shell, so that the other test's `sh` is not marked hung.
        let e = run_within(
            "env",
            &["sh", "-c", "sleep 30; echo late"],
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert_eq!(
            e,
            TelemetryError::ToolTimedOut {
                tool: "env",
                after: Duration::from_millis(300)
            }
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert!(e.to_string().contains("did not answer within"), "{e}");
        // Not run again: the same answer at once.
        let again = Instant::now();
        assert_eq!(run("env", &["echo", "fine"]), Err(e));
        assert!(again.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn a_tool_that_answers_or_fails_says_so() {
        assert_eq!(run("sh", &["-c", "echo 0, 42"]).unwrap().trim(), "0, 42");
        let e = run("sh", &["-c", "echo no driver; exit 9"]).unwrap_err();
        assert!(
            matches!(&e, TelemetryError::ToolFailed { why, .. } if why.contains("no driver")),
            "{e}"
        );
        let e = run("speedmatrix-no-such-tool", &[]).unwrap_err();
        assert!(matches!(e, TelemetryError::NoGpuSource(_)), "{e}");
    }
}
