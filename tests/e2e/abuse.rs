//! Held under abuse (issue 25): secrets a server puts anywhere, escape sequences, passwords
//! in the URL, links where outputs go, two runs in one folder, signals other than Ctrl-C, one
//! overwrite policy, and a study that is stopped, cut short or handed a damaged journal.

use std::path::Path;
use std::time::Duration;

use crate::stage::{ESCAPES, Stage, TWO_CELLS, Trouble, run_cmd};
use crate::support::{
    bin, decode_records, read_report, run_sim_profile, stderr_after, temp_dir, test_profile,
    wait_for,
};

const SENTINEL: &str = "sk-ABUSE-5e1d7a90c3f2b8";

/// Every byte under `dir`, with its path.
fn every_file(dir: &Path, f: &mut impl FnMut(&Path, &str)) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            every_file(&path, f);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            f(&path, &String::from_utf8_lossy(&bytes));
        }
    }
}

/// Neither the secret nor an escape character in `text`.
fn clean(what: &str, text: &str, secret: &str) {
    assert!(!text.contains(secret), "the secret is in {what}");
    assert!(!text.contains('\u{1b}'), "an escape sequence is in {what}");
}

#[test]
fn a_key_echoed_at_the_probe_is_printed_nowhere() {
    let dir = temp_dir("abuse-probe");
    let (profile, _) = test_profile(&dir);
    let stage = Stage::new(profile, Trouble::EchoAuthEverywhere);
    for json in [false, true] {
        let mut cmd = bin();
        cmd.args([
            "probe",
            "--telemetry",
            "off",
            "--url",
            &stage.url,
            "--api-key",
            SENTINEL,
        ]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(text.contains("401") || text.contains("denied"), "{text}");
        clean("probe's output", &text, SENTINEL);
    }
}

#[test]
fn a_key_in_the_model_id_and_version_is_stored_nowhere() {
    let dir = temp_dir("abuse-names");
    let (profile, _) = test_profile(&dir);
    let stage = Stage::new(profile, Trouble::KeyInNames);
    let mut cmd = bin();
    cmd.args(["run", "-q", "--tokenizer", "bundled", "--url", &stage.url])
        .args(["--api-key", SENTINEL, "--telemetry", "off"])
        .args(TWO_CELLS);
    let o = run_cmd(cmd, &dir);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    clean("stdout", &o.stdout, SENTINEL);
    clean("stderr", &o.stderr, SENTINEL);
    let mut files = 0;
    every_file(&o.out, &mut |path, text| {
        files += 1;
        clean(&path.display().to_string(), text, SENTINEL);
    });
    assert!(files >= 5);
    // What is recorded says a secret was there.
    let report = read_report(&o.out);
    assert!(
        report.run.served_model.contains("[redacted]"),
        "{}",
        report.run.served_model
    );
    let _ = ESCAPES;
}

#[test]
fn a_password_in_the_url_is_written_and_printed_nowhere() {
    let dir = temp_dir("abuse-password");
    let (profile, _) = test_profile(&dir);
    let stage = Stage::new(profile, Trouble::None);
    let password = "PW-7c2e91ab44d0";
    let url = stage
        .url
        .replace("http://", &format!("http://alice:{password}@"));
    let mut cmd = bin();
    cmd.args([
        "run",
        "-q",
        "--tokenizer",
        "bundled",
        "--url",
        &url,
        "--telemetry",
        "off",
    ])
    .args(TWO_CELLS);
    let o = run_cmd(cmd, &dir);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    clean("stderr", &o.stderr, password);
    every_file(&o.out, &mut |path, text| {
        clean(&path.display().to_string(), text, password)
    });
    let probe = bin()
        .args(["probe", "--json", "--telemetry", "off", "--url", &url])
        .output()
        .unwrap();
    clean(
        "probe --json",
        &String::from_utf8_lossy(&probe.stdout),
        password,
    );
    // The same run can be continued: the journal's key has the URL without its password.
    let again = bin()
        .args([
            "run",
            "-q",
            "--tokenizer",
            "bundled",
            "--url",
            &url,
            "--telemetry",
            "off",
        ])
        .args(TWO_CELLS)
        .arg("--resume")
        .arg(&o.out)
        .output()
        .unwrap();
    stderr_after(&again, 0);
}

#[test]
fn outputs_replace_a_link_instead_of_writing_through_it() {
    let dir = temp_dir("abuse-link");
    let (_, profile) = test_profile(&dir);
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::os::unix::fs::symlink(&victim, out.join("run.json")).unwrap();
    let run = run_sim_profile(&profile)
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "1",
            "--duration",
            "300ms",
        ])
        .args([
            "--prefill-contexts",
            "none",
            "--max-tokens",
            "32",
            "--telemetry",
            "off",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--force")
        .output()
        .unwrap();
    stderr_after(&run, 0);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    let meta = std::fs::symlink_metadata(out.join("run.json")).unwrap();
    assert!(
        meta.file_type().is_file(),
        "run.json is a file of its own now"
    );
}

#[test]
fn two_runs_never_write_one_folder() {
    let dir = temp_dir("abuse-lock");
    let (_, profile) = test_profile(&dir);
    let out = dir.join("out");
    let mut first = run_sim_profile(&profile)
        .args(["--contexts", "0", "--concurrency", "1", "--duration", "20s"])
        .args([
            "--prefill-contexts",
            "none",
            "--max-tokens",
            "512",
            "--telemetry",
            "off",
        ])
        .arg("--out")
        .arg(&out)
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(60), "the first run's journal", || {
        out.join("journal.jsonl").is_file()
    });
    for flags in [&["--force"][..], &[][..]] {
        let mut second = run_sim_profile(&profile);
        second
            .args(["--contexts", "0", "--concurrency", "1", "--duration", "1s"])
            .args(["--prefill-contexts", "none", "--telemetry", "off"]);
        if flags.is_empty() {
            second.arg("--resume").arg(&out);
        } else {
            second.arg("--out").arg(&out).args(flags);
        }
        let stderr = stderr_after(&second.output().unwrap(), 2);
        assert!(stderr.contains("another speedmatrix"), "{stderr}");
        assert!(
            stderr.contains(&first.id().to_string()),
            "names the holder: {stderr}"
        );
    }
    let _ = first.kill();
    let _ = first.wait();
}

#[test]
fn sigterm_and_sighup_leave_a_partial_report_as_ctrl_c_does() {
    for signal in ["-TERM", "-HUP"] {
        let dir = temp_dir(&format!("abuse{signal}"));
        let (_, profile) = test_profile(&dir);
        let out = dir.join("out");
        let mut run = run_sim_profile(&profile)
            .args([
                "--contexts",
                "0,256",
                "--concurrency",
                "1",
                "--duration",
                "1s",
            ])
            .args([
                "--prefill-contexts",
                "none",
                "--max-tokens",
                "512",
                "--telemetry",
                "off",
            ])
            .arg("--out")
            .arg(&out)
            .spawn()
            .unwrap();
        wait_for(Duration::from_secs(60), "a finished cell", || {
            decode_records(&out) >= 1
        });
        let kill = std::process::Command::new("kill")
            .args([signal, &run.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        assert_eq!(run.wait().unwrap().code(), Some(1), "{signal}");
        let report = read_report(&out);
        assert!(
            report.decode.iter().any(|c| c.status.is_valid()),
            "{signal}"
        );
    }
}

#[test]
fn every_command_refuses_to_overwrite_without_force() {
    let dir = temp_dir("abuse-overwrite");
    let config = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../speedmatrix-sim/data/agents-a1-4b-fp8.config.json");
    let predict = |force: bool| {
        let mut cmd = bin();
        cmd.args(["predict", "--config"])
            .arg(&config)
            .args([
                "--contexts",
                "0",
                "--concurrency",
                "1",
                "--prefill-contexts",
                "none",
            ])
            .arg("--out")
            .arg(dir.join("predicted"));
        if force {
            cmd.arg("--force");
        }
        cmd.output().unwrap()
    };
    stderr_after(&predict(false), 0);
    let stderr = stderr_after(&predict(false), 2);
    assert!(stderr.contains("--force"), "{stderr}");
    stderr_after(&predict(true), 0);
    let run_json = dir.join("predicted/run.json");
    let report_out = dir.join("page.md");
    std::fs::write(&report_out, "mine").unwrap();
    let r = bin()
        .args(["report"])
        .arg(&run_json)
        .arg("--output")
        .arg(&report_out)
        .output()
        .unwrap();
    stderr_after(&r, 2);
    assert_eq!(std::fs::read_to_string(&report_out).unwrap(), "mine");
}

/// A one-point study of the slowed simulator whose server writes its pid to `DIR/server.pid`.
fn study_file(dir: &Path, profile: &Path, window: &str) -> std::path::PathBuf {
    let file = dir.join("study.toml");
    std::fs::write(
        &file,
        format!(
            r#"name = "abuse"
[server]
command = "echo $$ > {pid} && exec speedmatrix sim --profile {profile} --port {{port}}"
shell = true
ready_timeout = "30s"
grace = "5s"
[[points]]
name = "only"
[run]
tokenizer = "bundled"
contexts = [0, 256]
concurrency = [1]
duration = "{window}"
max-tokens = 512
prefill-contexts = "none"
telemetry = "off"
"#,
            pid = dir.join("server.pid").display(),
            profile = profile.display(),
        ),
    )
    .unwrap();
    file
}

#[test]
fn a_stopped_study_stops_its_server_records_nothing_and_resumes() {
    let dir = temp_dir("abuse-study");
    let (_, profile) = test_profile(&dir);
    let file = study_file(&dir, &profile, "2s");
    let out = dir.join("study");
    let mut study = bin()
        .args(["study", "run"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .env("PATH", "/usr/bin:/bin")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let run_dir = out.join("only/run");
    wait_for(Duration::from_secs(60), "a finished cell", || {
        decode_records(&run_dir) >= 1
    });
    let pid: u32 = std::fs::read_to_string(dir.join("server.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &study.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert_eq!(study.wait().unwrap().code(), Some(1));
    wait_for(Duration::from_secs(10), "the server to be gone", || {
        !Path::new(&format!("/proc/{pid}")).exists()
    });
    let journal = std::fs::read_to_string(out.join("study.jsonl")).unwrap_or_default();
    assert!(
        journal.trim().is_empty(),
        "an interrupted point is not recorded: {journal}"
    );
    // Resumed, the point runs again on another port and its run continues from its journal.
    let before = decode_records(&run_dir);
    let resumed = bin()
        .args(["study", "run"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .arg("--resume")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let stderr = stderr_after(&resumed, 0);
    assert!(!stderr.contains("different run"), "{stderr}");
    assert_eq!(
        decode_records(&run_dir),
        2,
        "the second cell only was measured"
    );
    assert!(before >= 1);
    assert!(
        std::fs::read_to_string(out.join("study.jsonl"))
            .unwrap()
            .contains("\"measured\"")
    );
}

#[test]
fn a_damaged_study_journal_keeps_its_good_records_and_says_which_line() {
    let dir = temp_dir("abuse-journal");
    let (_, profile) = test_profile(&dir);
    let file = study_file(&dir, &profile, "300ms");
    let out = dir.join("study");
    let first = bin()
        .args(["study", "run"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    stderr_after(&first, 0);
    let journal = out.join("study.jsonl");
    let good = std::fs::read_to_string(&journal).unwrap();
    std::fs::write(&journal, format!("garbage\n{good}")).unwrap();
    let collect = bin().args(["study", "collect"]).arg(&out).output().unwrap();
    let stderr = stderr_after(&collect, 0);
    assert!(stderr.contains("line 1"), "{stderr}");
    assert!(String::from_utf8_lossy(&collect.stdout).contains("measured"));
    let resumed = bin()
        .args(["study", "run"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .arg("--resume")
        .output()
        .unwrap();
    let stderr = stderr_after(&resumed, 0);
    assert!(
        stderr.contains("skipped") && stderr.contains("line 1"),
        "{stderr}"
    );
}

#[test]
fn a_point_name_no_folder_can_hold_is_refused_before_anything_starts() {
    let dir = temp_dir("abuse-name");
    let file = dir.join("study.toml");
    std::fs::write(
        &file,
        format!(
            "name = \"n\"\n[server]\ncommand = \"true\"\n[[points]]\nname = \"{}\"\n[run]\ntokenizer = \"bundled\"\n",
            "x".repeat(300)
        ),
    )
    .unwrap();
    let out = bin()
        .args(["study", "run"])
        .arg(&file)
        .args(["--out"])
        .arg(dir.join("s"))
        .arg("--dry-run")
        .output()
        .unwrap();
    let stderr = stderr_after(&out, 2);
    assert!(stderr.contains("255"), "{stderr}");
}
