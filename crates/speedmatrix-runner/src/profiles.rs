//! Simulator profiles made from documents, for what-if runs: [`calibrate`] fits the
//! simulator's step-time model to a measured run, [`predicted_profile`] to a prediction. Each
//! profile records its origin, so a run on it is marked a what-if with the cells past what was
//! fitted named.

use std::time::Duration;

use speedmatrix_report::{CellStatus, DecodeCell, Report};
use speedmatrix_sim::fit::{DecodeObservation, FittedCost, PrefillObservation, fit_cost};
use speedmatrix_sim::{OriginKind, Profile, ProfileOrigin};

use crate::RunnerError;
use crate::predicted::PredictedMatrix;

/// A profile fitted to a measured run, and how well it fits.
#[derive(Debug, Clone)]
pub struct CalibratedProfile {
    /// The profile.
    pub profile: Profile,
    /// Each decode cell fitted (`16K × 4`) with its observation, in the run's order.
    pub decode: Vec<(String, DecodeObservation)>,
    /// Each prefill row fitted.
    pub prefill: Vec<PrefillObservation>,
    /// The fit and its residuals.
    pub fit: FittedCost,
}

/// Fits the simulator to the Valid decode cells and prefill rows of a measured `report`:
/// prefill in chunks of `max_num_batched_tokens`, a KV cache of `kv_cache_tokens` (default:
/// the run's measured or predicted capacity, else the smallest pool its Valid cells need).
/// `source` names the document.
pub fn calibrate(
    report: &Report,
    source: &str,
    max_num_batched_tokens: u64,
    kv_cache_tokens: Option<speedmatrix_units::Tokens>,
) -> Result<CalibratedProfile, RunnerError> {
    let bad = |m: String| RunnerError::BadOption(m);
    if report.prediction.is_some() {
        return Err(bad(format!(
            "{source} is a predicted or simulated document, not a measurement: calibrate on a measured run"
        )));
    }
    let decode = decode_observations(report);
    let prefill = prefill_observations(report);
    let observations: Vec<DecodeObservation> = decode.iter().map(|(_, o)| *o).collect();
    let fit = fit_cost(&observations, &prefill, max_num_batched_tokens)
        .map_err(|e| bad(format!("{source}: {e}")))?;
    let mut p = Profile::builtin(speedmatrix_sim::RTX3090_QWEN35_4B_FP8)
        .ok_or_else(|| bad("the built-in profile is missing".into()))?;
    p.name = format!("calibrated from {source}");
    p.served_model_name = report.run.served_model.clone();
    p.cost = fit.cost.clone();
    p.max_num_batched_tokens = u32::try_from(max_num_batched_tokens)
        .map_err(|_| bad("--max-num-batched-tokens is too large".into()))?;
    // A plain pool of 16-token blocks: the fitted profile knows the run's capacity, not its
    // model's layout.
    p.model = None;
    p.state_blocks_per_request = 0;
    p.block_size = 16;
    let capacity = report
        .capacity
        .as_ref()
        .and_then(|c| c.measured.as_ref().or(c.predicted.as_ref()))
        .map(|k| k.kv_cache_tokens.get() / 16);
    let blocks = kv_cache_tokens
        .map(|t| t.get() / 16)
        .or(capacity)
        .or_else(|| grid_blocks(report, 16))
        .ok_or_else(|| {
            bad(
                "the run says nothing of its KV cache (no capacity, no Valid cell): give \
                 --kv-cache-tokens"
                    .into(),
            )
        })?;
    p.num_gpu_blocks = u32::try_from(blocks + 1)
        .map_err(|_| bad("the KV cache is too large for the simulator".into()))?;
    let longest = report
        .run
        .contexts
        .iter()
        .chain(&report.run.prefill_contexts)
        .map(|t| t.get())
        .max()
        .unwrap_or(0)
        + report.run.max_output_tokens.get();
    p.max_model_len = u32::try_from(longest.max(u64::from(p.max_model_len))).unwrap_or(u32::MAX);
    p.origin = Some(calibrated_origin(report));
    p.validate()
        .map_err(|e| bad(format!("the fitted profile: {e}")))?;
    Ok(CalibratedProfile {
        profile: p,
        decode,
        prefill,
        fit,
    })
}

fn calibrated_origin(report: &Report) -> ProfileOrigin {
    let measured = |c: &&DecodeCell| c.status == CellStatus::Valid;
    ProfileOrigin {
        kind: OriginKind::Calibrated,
        source: format!(
            "{} on {}, fitted by speedmatrix calibrate",
            report.run.model,
            report
                .hardware
                .gpus
                .first()
                .map_or("an unnamed machine", |g| g.name.as_str())
        ),
        fitted_concurrency_max: report
            .decode
            .iter()
            .filter(measured)
            .map(|c| c.concurrency.get())
            .max(),
        fitted_context_max: report
            .decode
            .iter()
            .filter(measured)
            .map(|c| c.context.get())
            .max(),
        fitted_prompt_max: report
            .prefill
            .iter()
            .filter(|r| r.status == CellStatus::Valid)
            .map(|r| r.context.get())
            .max(),
    }
}

/// A Valid decode cell's step time at the mean context of its window: the
/// streams' contexts grow a token a step, so the middle of the window stands
/// for it.
fn decode_observations(report: &Report) -> Vec<(String, DecodeObservation)> {
    let mut obs = Vec::new();
    for cell in &report.decode {
        let (CellStatus::Valid, Some(m)) = (&cell.status, &cell.measurements) else {
            continue;
        };
        if !(m.per_request_tokens_per_s.is_finite() && m.per_request_tokens_per_s > 0.0) {
            continue;
        }
        let grown = m.per_request_tokens_per_s * m.measured_s / 2.0;
        obs.push((
            format!("{} × {}", cell.context, cell.concurrency),
            DecodeObservation {
                batch: u64::from(cell.concurrency.get()),
                context: cell.context.get() + grown as u64,
                step: Duration::from_secs_f64(1.0 / m.per_request_tokens_per_s),
                warm_ttft: (m.ttft_ms.p50.is_finite() && m.ttft_ms.p50 > 0.0).then(|| {
                    (
                        cell.context.get(),
                        Duration::from_secs_f64(m.ttft_ms.p50 / 1e3),
                    )
                }),
            },
        ));
    }
    obs
}

fn prefill_observations(report: &Report) -> Vec<PrefillObservation> {
    report
        .prefill
        .iter()
        .filter(|r| r.status == CellStatus::Valid)
        .filter_map(|r| {
            let ms = r.ttft_ms.filter(|t| t.is_finite() && *t > 0.0)?;
            Some(PrefillObservation {
                prompt: r.context.get(),
                ttft: Duration::from_secs_f64(ms / 1e3),
            })
        })
        .collect()
}

/// The smallest pool of `block`-token blocks in which every Valid cell of
/// the run fits: its requests' blocks at the widest one.
fn grid_blocks(report: &Report, block: u64) -> Option<u64> {
    let output = report.run.max_output_tokens.get();
    report
        .decode
        .iter()
        .filter(|c| c.status == CellStatus::Valid)
        .map(|c| u64::from(c.concurrency.get()) * (c.context.get() + output).div_ceil(block))
        .max()
}

/// A prediction as a simulator profile: the step model fitted to the predicted cells, the
/// predicted KV pool in 16-token blocks. `name` names what was predicted (the config file).
/// Returns the profile and the fit's worst relative error over every cell.
pub fn predicted_profile(
    predicted: &PredictedMatrix,
    name: &str,
) -> Result<(Profile, f64), RunnerError> {
    let bad = |m: String| RunnerError::BadOption(m);
    let report = &predicted.report;
    let window = report.run.window_s;
    let obs: Vec<DecodeObservation> = predicted
        .decode
        .iter()
        .filter(|(_, v)| v.fits)
        .map(|(e, _)| DecodeObservation {
            batch: u64::from(e.concurrency.get()),
            context: e.context.get() + (e.per_request_tokens_per_s * window / 2.0) as u64,
            step: Duration::from_secs_f64(1.0 / e.per_request_tokens_per_s.max(1e-9)),
            // The prediction's decode-cell TTFT is no estimate to fit a front end on.
            warm_ttft: None,
        })
        .collect();
    let pre: Vec<PrefillObservation> = predicted
        .prefill
        .iter()
        .map(|p| PrefillObservation {
            prompt: p.context.get(),
            ttft: p.ttft,
        })
        .collect();
    let cost = &predicted.cost;
    let fit = fit_cost(&obs, &pre, cost.chunk).map_err(|e| bad(e.to_string()))?;
    let mut p = Profile::builtin(speedmatrix_sim::TINY)
        .ok_or_else(|| bad("the built-in profile is missing".into()))?;
    p.name = format!("predicted: {name} on {}", cost.machine.gpu);
    p.served_model_name = "predicted".into();
    p.cost = fit.cost;
    p.max_num_batched_tokens = u32::try_from(cost.chunk).unwrap_or(u32::MAX);
    p.block_size = 16;
    p.num_gpu_blocks = u32::try_from(predicted.grid.pool_tokens / 16 + 1).unwrap_or(u32::MAX);
    let (max_len, max_seqs) = match &predicted.capacity {
        speedmatrix_capacity::Prediction::Vllm(v) => (v.max_model_len, v.max_num_seqs),
        _ => (
            report
                .run
                .contexts
                .iter()
                .map(|c| c.get())
                .max()
                .unwrap_or(0)
                + report.run.max_output_tokens.get(),
            256,
        ),
    };
    p.max_model_len = u32::try_from(max_len).unwrap_or(u32::MAX);
    p.max_num_seqs = max_seqs;
    p.eos_after_tokens = None;
    p.origin = Some(ProfileOrigin {
        kind: OriginKind::Predicted,
        source: format!(
            "speedmatrix predict for {name} on {} × {}",
            cost.machine.gpu, cost.machine.tensor_parallel
        ),
        fitted_concurrency_max: None,
        fitted_context_max: None,
        fitted_prompt_max: None,
    });
    p.validate()
        .map_err(|e| bad(format!("the predicted profile: {e}")))?;
    let worst = fit
        .decode_errors
        .iter()
        .chain(&fit.prefill_errors)
        .fold(0.0f64, |w, e| w.max(e.abs()));
    Ok((p, worst))
}
