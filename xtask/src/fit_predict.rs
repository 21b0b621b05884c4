//! `cargo xtask fit-predict`: fits the predictor's efficiency factors per
//! engine family on the public measured results in
//! crates/speedmatrix-predict/data/validation.json (its `fit` rigs), prints
//! every rig's errors (`holdout` rigs were not fitted on), and with
//! `--write` stores the factors in data/factors.json.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use argmin::core::CostFunction;
use serde_json::Value;
use speedmatrix_capacity::{Gpu, LlamaCppFlags, ModelConfig, Quantization, VllmFlags};
use speedmatrix_predict::{
    AttentionKernel, CostModel, Factors, Graphs, Restarts, WeightBytes, minimize,
};

use crate::fit_predict_free::{CONSUMER_RATIO, Fixed, START};
use crate::util::project_root;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Write the fitted factors to crates/speedmatrix-predict/data/factors.json.
    #[arg(long)]
    write: bool,
    /// Print every figure: measured, predicted, and what bounds its step.
    #[arg(long)]
    figures: bool,
    /// Also cross-validate, leaving one rig out at a time (a fit per rig: minutes), and
    /// derive each engine family's and phase's 80 % band from the held-out errors; with
    /// `--write` the bands are stored beside the factors.
    #[arg(long)]
    cross_validate: bool,
}

/// One measured figure of a rig and how to predict it.
#[derive(Debug, Clone)]
pub(crate) enum Figure {
    /// Per-request decode tok/s of `n` streams at `context` (mean: prompt plus half the
    /// output). `output`, where the source is a serving benchmark whose requests arrive as
    /// others finish (`vllm bench serve`, `sglang.bench_serving` with `--max-concurrency`),
    /// is the mean output length: each request's time between tokens then also holds the
    /// prefills of the `n − 1` requests that start while it decodes.
    Decode {
        context: u64,
        n: u64,
        output: Option<u64>,
        tok_s: f64,
    },
    /// Prompt tok/s of `prompt` new tokens after `cached` ones.
    Prefill {
        prompt: u64,
        cached: u64,
        tok_s: f64,
    },
}

pub(crate) struct Rig {
    pub(crate) id: String,
    /// The factor family: `llamacpp`, `sglang`, or `vllm` for vLLM, TensorRT-LLM and NIM.
    pub(crate) engine: String,
    /// The engine as the source names it (`vllm`, `sglang`, `trtllm`, `llamacpp`).
    pub(crate) engine_name: String,
    /// The GPU's vendor (`nvidia`, `amd`, `intel`).
    pub(crate) vendor: String,
    holdout: bool,
    pub(crate) cost: CostModel,
    pub(crate) figures: Vec<Figure>,
}

fn data_dir() -> PathBuf {
    project_root().join("crates/speedmatrix-predict/data")
}

/// Rigs left out, with why.
type Skipped = Vec<(String, String)>;

fn load() -> anyhow::Result<(Vec<Rig>, Skipped)> {
    let path = data_dir().join("validation.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let root: Value = serde_json::from_str(&text)?;
    let mut rigs = Vec::new();
    let mut skipped = Vec::new();
    for r in root["rigs"].as_array().context("no rigs")? {
        let id = r["id"].as_str().unwrap_or("?").to_owned();
        if r["role"].as_str() == Some("excluded") {
            skipped.push((id, r["why"].as_str().unwrap_or("excluded").to_owned()));
            continue;
        }
        match rig(r) {
            Ok(rig) => rigs.push(rig),
            Err(e) => skipped.push((id, e.to_string())),
        }
    }
    Ok((rigs, skipped))
}

fn rig(r: &Value) -> anyhow::Result<Rig> {
    let engine_name = r["engine"].as_str().context("engine")?.to_owned();
    let label = r["engine_label"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_lowercase();
    // SGLang has its own set (its attention and scheduler scale differently); earlier rigs
    // wrote it as "vllm" with the label "sglang".
    let engine = match engine_name.as_str() {
        "llamacpp" => "llamacpp",
        "sglang" => "sglang",
        "vllm" if label.starts_with("sglang") => "sglang",
        "vllm" | "trtllm" | "nim" => "vllm",
        other => bail!("unknown engine {other}"),
    }
    .to_owned();
    let engine_name = if engine == "sglang" {
        engine.clone()
    } else if label.contains("tensorrt") {
        "trtllm".to_owned()
    } else if label.contains("nim") {
        "nim".to_owned()
    } else {
        engine_name
    };
    let mut model = ModelConfig::from_json(&r["config"].to_string())?;
    check_size(&model, r["params_b"].as_f64())?;
    let w = &r["weights"];
    // An unknown type is refused, never priced as the config's dtype.
    let gguf = match w["gguf"].as_str() {
        Some(t) => Some(WeightBytes::gguf(t).with_context(|| format!("unknown GGUF type {t}"))?),
        None => None,
    };
    model.quantization = match w["quant"].as_str() {
        Some("fp8") => Quantization::Fp8,
        Some("nvfp4") => Quantization::Nvfp4,
        Some("mxfp4") => Quantization::Mxfp4Experts,
        Some("int4" | "awq" | "gptq") => Quantization::Int {
            bits: 4,
            group_size: 128,
        },
        Some("none") | None => Quantization::None,
        Some(other) => bail!("unknown quantization {other}"),
    };
    let gpu = Gpu::lookup(r["gpu"].as_str().context("gpu")?)?;
    let tp = u32::try_from(r["tp"].as_u64().unwrap_or(1))?;
    let flags = VllmFlags {
        tensor_parallel_size: tp,
        // `--enforce-eager`: no step replays a CUDA graph.
        enforce_eager: r["enforce_eager"].as_bool().unwrap_or(false),
        ..VllmFlags::default()
    };
    let mut cost = CostModel::new(&model, &gpu, &flags, Factors::builtin("vllm")?)?;
    if let Some(bytes) = gguf {
        cost = cost.with_weight_bytes(bytes);
    }
    if engine == "llamacpp" {
        // llama.cpp prefills in micro-batches of n_ubatch: 512 unless the source ran `-ub`.
        // Its CUDA backend replays a graph for one-token steps only.
        cost.graphs = Graphs::SingleToken;
        let ubatch = r["ubatch"].as_u64().unwrap_or(512).max(1);
        cost.chunk = ubatch;
        // One sequence a stream (llama-bench; llama-batched-bench without `-kvu`).
        cost = cost.with_window_cache(&LlamaCppFlags {
            n_ubatch: ubatch,
            ..LlamaCppFlags::default()
        });
        // llama-bench without `-fa 1` (mid-2024 and older builds: no "fa" column in its
        // table) writes the attention scores to memory.
        if r["flash_attn"].as_bool() == Some(false) {
            cost.attention = AttentionKernel::Materialized;
        }
    }
    let mut figures = Vec::new();
    for m in r["measurements"].as_array().context("measurements")? {
        let num = |k: &str| m[k].as_f64();
        match m["kind"].as_str() {
            Some("decode") => figures.push(Figure::Decode {
                context: m["context"].as_u64().unwrap_or(0),
                n: m["concurrency"].as_u64().unwrap_or(1),
                output: match &m["output"] {
                    Value::Null => None,
                    v => Some(v.as_u64().filter(|&o| o > 0).with_context(|| {
                        format!("output {v}: the mean output tokens, a positive integer")
                    })?),
                },
                tok_s: num("per_request_tok_s").context("per_request_tok_s")?,
            }),
            Some("prefill") if !r["prefill_suspect"].as_bool().unwrap_or(false) => {
                let prompt = m["prompt"].as_u64().context("prompt")?;
                let tok_s = num("prompt_tok_s")
                    .or_else(|| num("ttft_ms").map(|t| prompt as f64 / (t / 1e3)))
                    .context("prefill rate")?;
                figures.push(Figure::Prefill {
                    prompt,
                    cached: m["cached"].as_u64().unwrap_or(0),
                    tok_s,
                });
            }
            _ => {}
        }
    }
    if figures.is_empty() {
        bail!("no usable figure");
    }
    Ok(Rig {
        id: r["id"].as_str().unwrap_or("?").to_owned(),
        holdout: r["role"].as_str() == Some("holdout"),
        engine,
        engine_name,
        vendor: gpu.vendor.clone(),
        cost,
        figures,
    })
}

/// The predicted value of `f` under the rig's current factors.
/// A config that counts to far from the model's published size is a transcription error
/// (a description where a list belongs, a missing field): every figure of the rig would be
/// priced on the wrong model. `params_b` is required.
fn check_size(model: &ModelConfig, published_b: Option<f64>) -> anyhow::Result<()> {
    let published = published_b.context("no params_b (the model's published size, billions)")?;
    let w = model.estimate_weights(true, 1);
    let counted = (w.linear_params + w.embedding_params) as f64 / 1e9;
    let off = counted / published - 1.0;
    if off.abs() > SIZE_TOLERANCE {
        bail!(
            "its config counts to {counted:.2} B parameters, {:+.0} % off the published \
             {published} B: check the config's fields",
            off * 100.0
        );
    }
    Ok(())
}

/// How far a config's count may stray from the published size (rounded names, vision
/// towers left out of the count).
const SIZE_TOLERANCE: f64 = 0.10;

fn predict(cost: &CostModel, f: &Figure) -> f64 {
    match *f {
        Figure::Decode {
            context, n, output, ..
        } => {
            let per_token =
                cost.decode_step(n, context).total.as_secs_f64() / cost.tokens_per_step();
            // Arrivals: while one request emits its `output` tokens, each of the other
            // `n − 1` slots finishes a request and prefills the next one's prompt, and
            // that prefill holds every running stream's next token back.
            let stalls = output.filter(|_| n > 1).map_or(0.0, |o| {
                let prompt = context.saturating_sub(o / 2);
                (n - 1) as f64 * prefill_time(cost, prompt, 0) / o as f64
            });
            1.0 / (per_token + stalls).max(1e-12)
        }
        Figure::Prefill { prompt, cached, .. } => {
            let t = cost.factors.request_overhead_ms * 1e-3 + prefill_time(cost, prompt, cached);
            prompt as f64 / t.max(1e-12)
        }
    }
}

/// GPU time to prefill `prompt` new tokens after `cached` ones, in the engine's chunks.
fn prefill_time(cost: &CostModel, prompt: u64, cached: u64) -> f64 {
    let mut t = 0.0;
    let mut done = 0;
    while done < prompt {
        let n = cost.chunk.max(1).min(prompt - done);
        t += cost
            .prefill_chunk(n, cached + done, done + n >= prompt)
            .total
            .as_secs_f64();
        done += n;
    }
    t
}

fn measured(f: &Figure) -> f64 {
    match *f {
        Figure::Decode { tok_s, .. } | Figure::Prefill { tok_s, .. } => tok_s,
    }
}

/// Log errors of one rig's figures under `factors`.
pub(crate) fn log_errors(rig: &mut Rig, factors: Factors) -> Vec<f64> {
    rig.cost.factors = factors;
    rig.figures
        .iter()
        .map(|f| (predict(&rig.cost, f) / measured(f)).ln())
        .collect()
}

/// The factors from the optimizer's free parameters (logs, so every factor stays positive;
/// an offset keeps a factor that may be 0 finite) and the fixed ones.
fn factors_of(p: &[f64], fixed: &Fixed) -> Factors {
    let mut v = fixed.start.to_vec();
    v[6] = CONSUMER_RATIO;
    if fixed.no_requests {
        v[5] = 0.0;
    }
    for ((index, offset), x) in fixed.free().into_iter().zip(p) {
        v[index] = x.exp() - offset;
    }
    // No kernel beats the peak: efficiencies at most 1 (GeForce parts' documented 2× is
    // `consumer_compute_ratio`'s); the ratios within what a backend can plausibly reach.
    v[0] = v[0].min(1.0);
    v[1] = v[1].min(1.0);
    for i in [2, 3, 4, 5, 13, 21, 24] {
        v[i] = v[i].max(0.0);
    }
    v[9] = v[9].clamp(0.0, 4096.0);
    v[22] = v[22].clamp(0.1, 1.5);
    // A family without MoE rigs cannot show routing or expert reads: neutral, not the start.
    if !fixed.moe {
        (v[21], v[22]) = (0.0, 1.0);
    }
    v[23] = v[23].clamp(0.1, 1.5);
    v[10] = v[10].clamp(0.05, 2.0);
    // AMD parts reach at most NVIDIA's share of their peaks (the finding, and
    // every AMD rig here): the ratios stay at or below 1.
    for x in &mut v[11..13] {
        *x = x.clamp(0.1, 1.0);
    }
    v[14] = v[14].clamp(0.25, 10.0);
    v[15] = v[15].clamp(0.05, 1.0);
    for (index, free, held, (low, high)) in fixed.kernel_terms() {
        v[index] = if free {
            v[index].clamp(low, high)
        } else {
            held
        };
    }
    // The cache terms are per rig (`predict --calibrate-from`): across rigs the data has
    // too few long-context cells at batch to tell them from the weights' efficiency.
    (v[7], v[8]) = (1.0, 0.0);
    Factors::from_vec(v)
}

/// Soft-L1 on log errors: quadratic for small errors, linear past ~25 %,
/// so one odd rig cannot drag every factor.
fn robust(e: f64) -> f64 {
    const C: f64 = 0.25;
    2.0 * ((1.0 + (e / C).powi(2)).sqrt() - 1.0)
}

struct Loss<'a> {
    rigs: std::cell::RefCell<Vec<&'a mut Rig>>,
    fixed: Fixed,
    /// The starting point, in the fit's coordinates: a weak pull toward it keeps a factor
    /// that only one or two rigs can see from running to a bound.
    start: Vec<f64>,
}

/// Weight of the pull toward the starting factors, per factor, for a move of a factor of 4.
const PRIOR_WEIGHT: f64 = 0.02;

impl CostFunction for &Loss<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    /// Each rig weighs the same, whatever its number of figures.
    fn cost(&self, p: &Self::Param) -> Result<f64, argmin::core::Error> {
        let factors = factors_of(p, &self.fixed);
        let data = data_loss(&mut self.rigs.borrow_mut(), factors);
        let prior: f64 = p
            .iter()
            .zip(&self.start)
            .map(|(x, x0)| ((x - x0) / 4f64.ln()).powi(2))
            .sum();
        Ok(data + PRIOR_WEIGHT * prior)
    }
}

/// The data's part of the loss: each rig's mean robust log error, averaged over rigs (each
/// rig weighs the same, whatever its number of figures).
pub(crate) fn data_loss(rigs: &mut [&mut Rig], factors: Factors) -> f64 {
    let n = rigs.len().max(1) as f64;
    let total: f64 = rigs
        .iter_mut()
        .map(|r| {
            let e = log_errors(r, factors);
            e.iter().map(|x| robust(*x)).sum::<f64>() / e.len().max(1) as f64
        })
        .sum();
    total / n
}

/// A family's factors from `rigs`. Rigs that launch every step without a CUDA graph (vLLM
/// under `--enforce-eager`) show one term the others cannot: it is fitted on them after the
/// rest, with the rest held, so that one such rig cannot move the family's other factors.
pub(crate) fn fit(rigs: Vec<&mut Rig>, fixed: Fixed) -> anyhow::Result<Factors> {
    let (mut eager, rest): (Vec<&mut Rig>, Vec<&mut Rig>) = rigs
        .into_iter()
        .partition(|r| r.cost.graphs == Graphs::Never);
    if eager.is_empty() || rest.is_empty() {
        return fit_jointly(eager.into_iter().chain(rest).collect(), fixed);
    }
    let held = Fixed::for_rigs(fixed.start, rest.iter().map(|r| &**r));
    let factors = fit_jointly(rest, held)?;
    if held.eager {
        // The rest already show the term (llama.cpp's batched decode).
        return Ok(factors);
    }
    Ok(fit_eager_term(&mut eager, factors, fixed.start))
}

/// `factors` with the eager layer time alone fitted on `rigs` (a golden-section search on
/// its log, with the same weak pull toward `start` as the joint fit).
fn fit_eager_term(rigs: &mut [&mut Rig], factors: Factors, start: Factors) -> Factors {
    const OFFSET: f64 = 1.0;
    let with = |x: f64| {
        let mut v = factors.to_vec();
        v[24] = (x.exp() - OFFSET).max(0.0);
        Factors::from_vec(v)
    };
    let x0 = (start.eager_layer_overhead_us + OFFSET).ln();
    let mut loss =
        |x: f64| data_loss(rigs, with(x)) + PRIOR_WEIGHT * ((x - x0) / 4f64.ln()).powi(2);
    let (mut a, mut b) = (OFFSET.ln(), (10_000.0 + OFFSET).ln());
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let (mut c, mut d) = (b - ratio * (b - a), a + ratio * (b - a));
    let (mut fc, mut fd) = (loss(c), loss(d));
    while b - a > 1e-6 {
        if fc < fd {
            (b, d, fd) = (d, c, fc);
            c = b - ratio * (b - a);
            fc = loss(c);
        } else {
            (a, c, fc) = (c, d, fd);
            d = a + ratio * (b - a);
            fd = loss(d);
        }
    }
    with((a + b) / 2.0)
}

fn fit_jointly(rigs: Vec<&mut Rig>, fixed: Fixed) -> anyhow::Result<Factors> {
    let start = fixed.start.to_vec();
    let x0: Vec<f64> = fixed
        .free()
        .into_iter()
        .map(|(i, offset)| (start[i] + offset).max(1e-3).ln())
        .collect();
    let problem = Loss {
        rigs: std::cell::RefCell::new(rigs),
        fixed,
        start: x0.clone(),
    };
    let how = Restarts {
        step: 0.5,
        sd_tolerance: 1e-9,
        max_iters: 6_000,
        rounds: 8,
        min_gain: 1e-7,
    };
    let (best, _) = minimize(&problem, x0, how, |from, to, iters| {
        eprintln!("fit round: loss {from:.5} -> {to:.5} after {iters} iterations");
    })?;
    Ok(factors_of(&best, &fixed))
}

/// The factor families, each fitted on its own rigs.
pub(crate) const FAMILIES: [&str; 3] = ["vllm", "sglang", "llamacpp"];

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let (mut rigs, skipped) = load()?;
    for (id, why) in &skipped {
        println!("skipped {id}: {why}");
    }
    let mut fitted: Vec<(&str, Factors, usize, usize)> = Vec::new();
    for engine in FAMILIES {
        let fixed = Fixed::for_rigs(
            START,
            rigs.iter().filter(|r| r.engine == engine && !r.holdout),
        );
        let train: Vec<&mut Rig> = rigs
            .iter_mut()
            .filter(|r| r.engine == engine && !r.holdout)
            .collect();
        let count = train.len();
        let figures: usize = train.iter().map(|r| r.figures.len()).sum();
        let factors = fit(train, fixed)?;
        let mut train: Vec<&mut Rig> = rigs
            .iter_mut()
            .filter(|r| r.engine == engine && !r.holdout)
            .collect();
        let loss = data_loss(&mut train, factors);
        println!(
            "\n{engine}: fitted on {count} rigs, {figures} figures (data loss {loss:.4}): {factors:?}"
        );
        fitted.push((engine, factors, count, figures));
    }
    println!("\n| rig | engine | role | figures | median error | worst error |");
    println!("|---|---|---|---|---|---|");
    let mut summary: Vec<(String, bool, Vec<f64>)> = Vec::new();
    for rig in &mut rigs {
        let Some((_, factors, ..)) = fitted.iter().find(|f| f.0 == rig.engine) else {
            continue;
        };
        let mut e: Vec<f64> = log_errors(rig, *factors)
            .into_iter()
            .map(|x| (x.exp() - 1.0) * 100.0)
            .collect();
        if args.figures {
            for (f, err) in rig.figures.iter().zip(&e) {
                println!(
                    "    {f:?} predicted {:.1} ({err:+.0} %)",
                    predict(&rig.cost, f)
                );
            }
        }
        e.sort_by(|a, b| a.abs().total_cmp(&b.abs()));
        let median = e[e.len() / 2];
        let worst = e[e.len() - 1];
        println!(
            "| {} | {} | {} | {} | {median:+.0} % | {worst:+.0} % |",
            rig.id,
            rig.engine,
            if rig.holdout { "holdout" } else { "fit" },
            e.len()
        );
        summary.push((rig.engine.clone(), rig.holdout, e));
    }
    for (engine, holdout) in FAMILIES.iter().flat_map(|f| [(*f, false), (*f, true)]) {
        let mut all: Vec<f64> = summary
            .iter()
            .filter(|s| s.0 == engine && s.1 == holdout)
            .flat_map(|s| s.2.iter().map(|x| x.abs()))
            .collect();
        if all.is_empty() {
            continue;
        }
        all.sort_by(f64::total_cmp);
        let within = |t: f64| all.iter().filter(|x| **x <= t).count() as f64 / all.len() as f64;
        println!(
            "{engine} {}: {} figures, median |error| {:.0} %, within ±25 %: {:.0} %, within ±50 %: {:.0} %",
            if holdout { "holdout" } else { "fit" },
            all.len(),
            all[all.len() / 2],
            within(25.0) * 100.0,
            within(50.0) * 100.0
        );
    }
    let bands = if args.cross_validate {
        Some(crate::fit_predict_cv::cross_validate(&mut rigs, START)?)
    } else {
        None
    };
    if args.write {
        let engines: Vec<Value> = fitted
            .iter()
            .map(|(engine, f, count, figures)| {
                let mut entry = serde_json::json!({
                    "engine": engine,
                    "fitted_on": format!(
                        "{count} public rigs, {figures} measured figures (data/validation.json, role fit)"
                    ),
                    "factors": f,
                });
                if let Some(b) = bands.as_ref().and_then(|b| b.get(*engine)) {
                    let phases: serde_json::Map<String, Value> =
                        b.iter().map(|(p, band)| (p.clone(), band.to_json())).collect();
                    entry["bands"] = Value::Object(phases);
                }
                entry
            })
            .collect();
        let file = serde_json::json!({
            "note": "Written by `cargo xtask fit-predict --write` from data/validation.json; see docs/predict.md.",
            "engines": engines,
        });
        let path = data_dir().join("factors.json");
        std::fs::write(&path, serde_json::to_string_pretty(&file)? + "\n")?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
