//! A decode cell's repeats (`--repeats`): the same cell measured again on
//! the prompts its first measurement warmed, each window kept beside the first.

use std::sync::Arc;

use speedmatrix_units::Tokens;

use super::{Session, unless_cancelled};
use crate::RunnerError;
use crate::decode::{self, DecodeCellSpec};
use crate::outcome::{StepId, StepStatus, StopReason, WindowResult};
use crate::plan::PlannedCell;

impl Session<'_> {
    /// The spec of measurement `repeat` (0: the first) of decode cell `i`,
    /// as a repeat runs it: no warm-up, no prefill measurement and no
    /// interference probe, which the first measurement adds.
    pub(super) fn cell_spec(
        &self,
        i: usize,
        repeat: u32,
        planned: &PlannedCell,
        prompts: Vec<Arc<str>>,
        len: Tokens,
    ) -> DecodeCellSpec<'_> {
        let seed = self.config.seed.rotate_left(32) ^ i as u64;
        DecodeCellSpec {
            step: StepId::Decode {
                context: planned.context,
                concurrency: planned.concurrency,
            },
            prompts,
            expected_prompt_tokens: len,
            concurrency: planned.concurrency,
            context: planned.context,
            shape: self.shape.clone(),
            window: self.config.matrix.window,
            measure_first_warmup: false,
            tokenizer: &self.config.tokenizer,
            metrics_interval: self.config.telemetry.metrics_interval,
            block_tokens: self.block_tokens,
            seed: seed.wrapping_add(u64::from(repeat)),
            inject: None,
            warm: false,
        }
    }

    /// Measures a cell, whose first window is measured, `repeats − 1` times
    /// more without the warm-up (the prefix cache holds its prompts): the
    /// repeats' windows. A repeat that fails ends the repeats: the cell keeps
    /// those measured, and says how many. `None` when the run was cancelled
    /// meanwhile.
    pub(super) async fn repeat_cell(
        &mut self,
        i: usize,
        planned: &PlannedCell,
        prompts: &[Arc<str>],
        len: Tokens,
        stopped: &mut Option<StopReason>,
    ) -> Result<Option<Vec<WindowResult>>, RunnerError> {
        let mut windows = Vec::new();
        for r in 1..self.config.matrix.repeats {
            let spec = self.cell_spec(i, r, planned, prompts.to_vec(), len);
            let ran = decode::run_cell(
                self.server,
                spec,
                self.telemetry,
                self.observer,
                self.cancel,
            );
            let Some(again) = unless_cancelled(ran.await, stopped)? else {
                return Ok(None);
            };
            match (&again.cell.status, again.cell.window) {
                (StepStatus::Measured, Some(w)) => windows.push(w),
                _ => break,
            }
        }
        Ok(Some(windows))
    }
}
