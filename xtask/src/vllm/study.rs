//! The study stage: `speedmatrix study run` with two real vLLM CPU servers
//! that differ only in their KV cache (1 and 2 GiB). Each point's capacity is
//! read from its server and must equal the offline prediction, and the cell
//! the smaller cache cannot hold (32 streams of 16K tokens) must be over
//! capacity there and measured on the larger one.

use std::path::Path;

use anyhow::{Context as _, ensure};
use speedmatrix_report::{CellStatus, Report};
use speedmatrix_units::{Concurrency, Tokens};

use super::server::{Config, ENTRY_POINT, server_args, server_env};

/// Writes the study file, runs it, and checks both points.
pub(crate) fn run(config: &Config, model_dir: &Path, out: &Path) -> anyhow::Result<()> {
    let bin = super::matrix::binary()?;
    let mut args = server_args(&model_dir.display().to_string(), "{port}", config);
    // The study fills in the port; the KV size is the parameter.
    args.iter_mut().for_each(|a| *a = shell_word(a));
    let env: Vec<String> = server_env(config)
        .into_iter()
        .map(|(k, v)| {
            let v = if k == "VLLM_CPU_KVCACHE_SPACE" {
                "{kv}".to_owned()
            } else {
                v
            };
            format!("{k} = \"{v}\"")
        })
        .collect();
    let study = format!(
        r#"name = "vllm-e2e: KV cache size"
[server]
command = "{python} -m {ENTRY_POINT} {args}"
health_path = "/health"
ready_timeout = "10m"
grace = "30s"
[server.env]
{env}
[parameters]
kv = [1, 2]
[run]
tokenizer = "{model}"
api = "completions"
contexts = [0]
concurrency = [1, 32]
max-tokens = 16384
duration = "3s"
prefill-contexts = "none"
telemetry = "off"
model-config = "{model}/config.json"
cpu-kvcache-space-gib = "{{kv}}"
max-model-len = {max_len}
"#,
        python = config.python.display(),
        args = args.join(" "),
        env = env.join("\n"),
        model = model_dir.display(),
        max_len = config.max_model_len,
    );
    let dir = out.join("study");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(out)?;
    let file = out.join("study.toml");
    std::fs::write(&file, study)?;
    let status = std::process::Command::new(&bin)
        .args(["study", "run"])
        .arg(&file)
        .arg("--out")
        .arg(&dir)
        .env_remove("OPENAI_API_KEY")
        .status()
        .context("running `speedmatrix study run`")?;
    ensure!(
        status.success(),
        "the study failed ({status}); see {}",
        dir.display()
    );
    let report = |point: &str| -> anyhow::Result<Report> {
        let path = dir.join(point).join("run/run.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
        Ok(Report::from_json(&text)?)
    };
    let (small, large) = (report("kv=1")?, report("kv=2")?);
    let tokens = |r: &Report| -> anyhow::Result<(u64, u64)> {
        let c = r.capacity.as_ref().context("no capacity")?;
        let m = c
            .measured
            .as_ref()
            .context("no measured capacity")?
            .kv_cache_tokens
            .get();
        let p = c
            .predicted
            .as_ref()
            .context("no predicted capacity")?
            .kv_cache_tokens
            .get();
        Ok((m, p))
    };
    let ((m1, p1), (m2, p2)) = (tokens(&small)?, tokens(&large)?);
    eprintln!(
        "vllm-e2e: study capacity 1 GiB {m1} tokens (predicted {p1}), 2 GiB {m2} (predicted {p2})"
    );
    ensure!(
        m1 == p1 && m2 == p2,
        "measured capacity differs from the prediction"
    );
    ensure!(
        m2 == 2 * m1,
        "twice the cache should hold twice the tokens: {m1} vs {m2}"
    );
    let wide = |r: &Report| {
        r.decode_cell(
            Tokens::ZERO,
            Concurrency::new(32).unwrap_or(Concurrency::ONE),
        )
        .map(|c| c.status.clone())
    };
    ensure!(
        matches!(wide(&small), Some(CellStatus::OverCapacity { .. })),
        "0 × 32 should be over the 1 GiB cache: {:?}",
        wide(&small)
    );
    ensure!(
        matches!(wide(&large), Some(CellStatus::Valid)),
        "0 × 32 should be measured on the 2 GiB cache: {:?}",
        wide(&large)
    );
    eprintln!("vllm-e2e: study ok: 0 × 32 over capacity at 1 GiB, measured at 2 GiB, as predicted");
    Ok(())
}

/// A word as `sh -c` reads it back unchanged (quoted when it holds anything but
/// plain characters; `{port}` stays a template).
fn shell_word(w: &str) -> String {
    if w.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./=:{}".contains(c))
    {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}
