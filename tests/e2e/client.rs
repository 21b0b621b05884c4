//! The client's share of the machine: threads, cores, open files, its CPU
//! use per cell and a server on the same host.

use std::process::Command;

use crate::support::{SimProcess, bin, read_report, run_url, stderr_after, temp_dir, test_profile};

/// The first core this process may run on, from its own status.
fn first_allowed_core() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_owned();
    list.split([',', '-']).next().unwrap().parse().unwrap()
}

#[test]
fn a_url_run_records_its_threads_cores_cpu_and_the_local_server_it_shares_cores_with() {
    let dir = temp_dir("client-setup");
    let (_, profile_path) = test_profile(&dir);
    let sim = SimProcess::start(&profile_path);
    let core = first_allowed_core();
    let out = dir.join("out");
    let output = run_url(&sim.url)
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "2",
            "--prefill-contexts",
            "none",
        ])
        .args([
            "--duration",
            "1s",
            "--max-tokens",
            "64",
            "--client-threads",
            "2",
        ])
        .args(["--client-cores", &core.to_string(), "--out"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let report = read_report(&out);
    let client = report.client.clone().expect("the client setup is recorded");
    assert_eq!(client.runtime_threads, 2);
    assert!(client.pinned);
    assert_eq!(client.cores.as_deref(), Some(core.to_string().as_str()));
    // The simulator runs beside it, free to use every core: they share the pinned one.
    let server = client.local_server.expect("the local simulator is found");
    assert_eq!(server.pid, sim.child.id());
    assert_eq!(
        server.shared_cores.as_deref(),
        Some(core.to_string().as_str())
    );

    let m = report.decode[0].measurements.as_ref().unwrap();
    let cpu = m.client.expect("the client's CPU use is measured per cell");
    assert_eq!(cpu.runtime_threads, 2);
    assert!(cpu.cpu_cores > 0.0 && cpu.cpu_cores < 3.0, "{cpu:?}");

    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("**Client:** 2 runtime threads pinned to cores"),
        "{md}"
    );
    assert!(
        md.contains(&format!("shared cores {core} with the server process")),
        "{md}"
    );
    let csv = std::fs::read_to_string(out.join("measurements.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(
        header.contains(",client_cpu_cores,client_bound,"),
        "the client columns follow each other: {header}"
    );
}

#[test]
fn bad_client_flags_and_too_few_open_files_are_usage_errors_that_say_what_to_do() {
    let backwards = bin()
        .args(["run", "--quiet", "--dry-run", "--client-cores", "3-1"])
        .output()
        .unwrap();
    assert!(stderr_after(&backwards, 2).contains("runs backwards"));
    let zero = bin()
        .args(["run", "--quiet", "--dry-run", "--client-threads", "0"])
        .output()
        .unwrap();
    stderr_after(&zero, 2);

    // A hard limit of 200 open files cannot hold 500 streams (1,000 sockets
    // with the built-in simulator's ends): the error names `ulimit -n`.
    let output = Command::new("sh")
        .args(["-c", "ulimit -n 200 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_speedmatrix"))
        .args(["run", "--quiet", "--dry-run", "--concurrency", "500"])
        .output()
        .unwrap();
    let stderr = stderr_after(&output, 2);
    assert!(
        stderr.contains("ulimit -Hn 2048 && ulimit -n 2048"),
        "{stderr}"
    );
}
