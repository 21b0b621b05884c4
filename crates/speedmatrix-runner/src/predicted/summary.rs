//! The prediction and its calibration as the terminal shows them.

use std::fmt::Write as _;

use speedmatrix_predict::{Observation, RigCalibration};

use super::PredictedMatrix;

/// Each measured figure: measured, calibrated (in sample), and predicted with it left out.
pub fn calibration_summary(cal: &RigCalibration) -> String {
    let mut out = String::from(
        "Calibrated on the measured run (measured, fitted, and predicted with it left out):\n",
    );
    for (fit, held) in cal.fitted.iter().zip(&cal.held_out) {
        let what = match fit.observation {
            Observation::Decode {
                context,
                concurrency,
                ..
            } => format!(
                "decode {:>6} × {:<3}",
                context.to_string(),
                concurrency.get()
            ),
            Observation::Prefill { prompt, .. } => {
                format!("prefill {:>6}      ", prompt.to_string())
            }
        };
        let _ = writeln!(
            out,
            "  {what}: {:>9.1} tok/s measured, {:>+6.1} % fitted, {:>+6.1} % left out",
            fit.observation.measured(),
            fit.error() * 100.0,
            held.error() * 100.0
        );
    }
    let f = &cal.factors;
    let _ = writeln!(
        out,
        "  factors: bandwidth {:.3}, KV bandwidth ×{:.2} (saturating at {:.2} streams), \
         compute {:.3}, step {:.2} ms, per stream {:.1} µs, request {:.1} ms",
        f.bandwidth_efficiency,
        f.kv_bandwidth_ratio,
        f.kv_saturation_streams,
        f.compute_efficiency,
        f.step_overhead_ms,
        f.sequence_overhead_us,
        f.request_overhead_ms
    );
    out
}

impl PredictedMatrix {
    /// The matrix in the terminal: total tok/s per cell, prefill rows.
    pub fn summary(&self) -> String {
        let (report, cost) = (&self.report, &self.cost);
        let mut out = format!(
            "Predicted on {} × {} ({}-bound steps at 1 stream)\n",
            cost.machine.gpu,
            cost.machine.tensor_parallel,
            match cost.decode_step(1, 0).bound {
                speedmatrix_predict::Bound::Memory => "memory",
                speedmatrix_predict::Bound::Compute => "compute",
            }
        );
        for r in &report.prefill {
            if let (Some(t), Some(ms)) = (r.prompt_tokens_per_s, r.ttft_ms) {
                let _ = writeln!(
                    out,
                    "  prefill {:>6}: {t:>9.0} tok/s, TTFT {ms:>9.0} ms",
                    r.context.to_string()
                );
            }
        }
        let _ = write!(out, "  {:>6} |", "ctx");
        for n in &report.run.concurrencies {
            let _ = write!(out, " {:>8}", n.get());
        }
        out.push('\n');
        for &ctx in &report.run.contexts {
            let _ = write!(out, "  {:>6} |", ctx.to_string());
            for n in &report.run.concurrencies {
                let cell = report
                    .decode
                    .iter()
                    .find(|c| c.context == ctx && c.concurrency == *n);
                let text = cell.and_then(|c| c.measurements.as_ref()).map_or_else(
                    || "over".to_owned(),
                    |m| format!("{:.0}", m.total_tokens_per_s),
                );
                let _ = write!(out, " {text:>8}");
            }
            out.push('\n');
        }
        out.push_str("  (total output tok/s; over = over capacity)\n");
        out
    }
}
