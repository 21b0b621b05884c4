//! The measuring part of a run: every prefill point, then every decode cell,
//! each recorded in the journal as soon as it ends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use speedmatrix_report::{CellStatus, DecodeCell, PrefillRow};
use speedmatrix_units::Tokens;
use speedmatrix_workload::{CacheKey, ChatOverhead, Prompt, PromptBuilder};
use tokio_util::sync::CancellationToken;

use crate::assemble::{
    decode_summary, describe_capacity, excluded_cell, excluded_prefill, exclusion_text,
    prefill_summary, skipped_cell, skipped_prefill,
};
use crate::journal::Journal;
use crate::plan::{Exclusion, Plan, PlannedCell, ZERO_CONTEXT_PROMPT, prompt_len};
use crate::request::RequestShape;
use crate::resume::{Done, JournalRecord, record};
use crate::server::Server;
use crate::{
    Observer, PrefillMode, PromptSharing, RunConfig, RunError, StopReason, decode, prefill,
};

/// What the steps produced.
pub(crate) struct Measured {
    pub(crate) prefill: Vec<PrefillRow>,
    pub(crate) decode: Vec<DecodeCell>,
    pub(crate) notes: Vec<String>,
    pub(crate) stopped: Option<StopReason>,
}

/// Everything the steps share.
pub(crate) struct Session<'a> {
    pub(crate) config: &'a RunConfig,
    pub(crate) server: &'a Server,
    pub(crate) journal: Option<Journal>,
    pub(crate) done: Done,
    pub(crate) observer: &'a dyn Observer,
    pub(crate) cancel: &'a CancellationToken,
    pub(crate) builder: PromptBuilder,
    pub(crate) overhead: Option<ChatOverhead>,
    pub(crate) shape: RequestShape,
    /// Mixed into every cache marker so no prompt of this run was seen before.
    pub(crate) nonce: u64,
    /// The first Content-Type the server sent instead of `text/event-stream`.
    pub(crate) unexpected_content_type: Option<String>,
}

impl Session<'_> {
    /// Runs the plan's steps in order; after a stop, the rest are recorded as skipped.
    pub(crate) async fn measure(mut self, the_plan: &Plan) -> Result<Measured, RunError> {
        let capacity_note = describe_capacity(&the_plan.capacity);
        self.observer.notice(&capacity_note);
        let mut out = Measured {
            prefill: Vec::new(),
            decode: Vec::new(),
            notes: vec![capacity_note],
            stopped: None,
        };
        self.observer.planned(
            the_plan.prefill.len() + the_plan.cells.len(),
            the_plan.estimated,
        );
        let from_warmup = self.prefill_from_warmup(the_plan);
        let mut rows = BTreeMap::new();
        for (i, (context, excluded)) in the_plan.prefill.iter().enumerate() {
            if from_warmup.values().any(|c| c == context) {
                continue;
            }
            let row = match out.stopped {
                Some(_) => skipped_prefill(*context, "the run stopped before this step"),
                None => {
                    self.prefill_point(i, *context, excluded.as_ref(), &mut out.stopped)
                        .await?
                }
            };
            rows.insert(*context, row);
        }
        for (i, planned) in the_plan.cells.iter().enumerate() {
            let prefill = from_warmup.get(&i).copied();
            let cell = match out.stopped {
                Some(_) => skipped_cell(planned, "the run stopped before this cell"),
                None => {
                    self.decode_cell(i, planned, prefill, &mut rows, &mut out)
                        .await?
                }
            };
            out.decode.push(cell);
        }
        // Rows in the plan's order; a warm-up the run never reached is skipped.
        out.prefill = the_plan
            .prefill
            .iter()
            .map(|(context, _)| {
                rows.remove(context).unwrap_or_else(|| {
                    skipped_prefill(*context, "the run stopped before this step")
                })
            })
            .collect();
        out.notes.extend(self.closing_notes(out.stopped.as_ref()));
        Ok(out)
    }

    /// With `--prefill-mode warmup`: for each prefill context that has a
    /// decode row of the same prompt length, the index of the row's first
    /// cell that will run, whose first warm-up request is its measurement.
    /// Contexts already in the journal, excluded or without such a cell are
    /// measured cold as usual.
    fn prefill_from_warmup(&self, the_plan: &Plan) -> BTreeMap<usize, Tokens> {
        if self.config.matrix.prefill_mode != PrefillMode::Warmup {
            return BTreeMap::new();
        }
        the_plan
            .prefill
            .iter()
            .filter(|(context, excluded)| {
                excluded.is_none()
                    && prompt_len(*context) == *context
                    && !self.done.prefill.contains_key(context)
            })
            .filter_map(|(context, _)| {
                let i = the_plan.cells.iter().position(|c| {
                    c.context == *context
                        && c.excluded.is_none()
                        && !self.done.decode.contains_key(&(c.context, c.concurrency))
                })?;
                Some((i, *context))
            })
            .collect()
    }

    fn prompt(&self, n: Tokens, key: CacheKey) -> Result<Prompt, RunError> {
        let p = match self.overhead {
            Some(o) => self.builder.chat_prompt(n, self.config.seed, &key, o),
            None => self.builder.prompt(n, self.config.seed, &key),
        };
        p.map_err(RunError::Workload)
    }

    async fn prefill_point(
        &mut self,
        i: usize,
        context: Tokens,
        excluded: Option<&Exclusion>,
        stopped: &mut Option<StopReason>,
    ) -> Result<PrefillRow, RunError> {
        let label = format!("prefill {context}");
        if let Some(row) = self.done.prefill.remove(&context) {
            self.observer.step_skipped(&label, "already in the journal");
            return Ok(row);
        }
        if let Some(ex) = excluded {
            self.observer.step_skipped(&label, &exclusion_text(ex));
            let row = excluded_prefill(context, ex);
            record(
                &mut self.journal,
                &JournalRecord::Prefill { row: row.clone() },
            )?;
            return Ok(row);
        }
        self.observer.step_started(
            &label,
            Duration::from_secs_f64(context.get() as f64 / 8_000.0),
        );
        let prompts = (0..self.config.matrix.prefill_repeats)
            .map(|r| {
                let key = CacheKey::unique(self.nonce.wrapping_add(i as u64), 0, u64::from(r));
                self.prompt(context, key).map(|p| p.text)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let row =
            match prefill::run_prefill(self.server, &self.shape, context, &prompts, self.cancel)
                .await
            {
                Ok((row, content_type)) => {
                    self.note_content_type(content_type);
                    row
                }
                Err(RunError::Cancelled) => {
                    *stopped = Some(StopReason::Cancelled);
                    return Ok(skipped_prefill(context, "interrupted"));
                }
                Err(e) => return Err(e),
            };
        self.observer.step_finished(&label, &prefill_summary(&row));
        record(
            &mut self.journal,
            &JournalRecord::Prefill { row: row.clone() },
        )?;
        if !row.status.is_valid() && !self.server.is_alive().await {
            *stopped = Some(StopReason::ServerGone(row.status.detail()));
        }
        Ok(row)
    }

    fn note_content_type(&mut self, content_type: Option<String>) {
        if self.unexpected_content_type.is_none() {
            self.unexpected_content_type = content_type;
        }
    }

    /// Runs one decode cell; with `prefill`, its first warm-up request is
    /// also that context's prefill row, journaled before the cell.
    async fn decode_cell(
        &mut self,
        i: usize,
        planned: &PlannedCell,
        prefill: Option<Tokens>,
        rows: &mut BTreeMap<Tokens, PrefillRow>,
        out: &mut Measured,
    ) -> Result<DecodeCell, RunError> {
        let label = format!("decode {} × {}", planned.context, planned.concurrency);
        if let Some(cell) = self
            .done
            .decode
            .remove(&(planned.context, planned.concurrency))
        {
            self.observer.step_skipped(&label, "already in the journal");
            return Ok(cell);
        }
        if let Some(ex) = &planned.excluded {
            self.observer.step_skipped(&label, &exclusion_text(ex));
            let cell = excluded_cell(planned, ex);
            record(
                &mut self.journal,
                &JournalRecord::Decode { cell: cell.clone() },
            )?;
            return Ok(cell);
        }
        self.observer
            .step_started(&label, self.config.matrix.duration);
        self.observer.step_phase(&label, "building prompts");
        let len = prompt_len(planned.context);
        let spec = decode::DecodeCellSpec {
            label: &label,
            prompts: self.cell_prompts(self.nonce.wrapping_add(1_000 + i as u64), planned, len)?,
            expected_prompt_tokens: len,
            concurrency: planned.concurrency,
            context: planned.context,
            shape: self.shape.clone(),
            duration: self.config.matrix.duration,
            measure_first_warmup: prefill.is_some(),
            tokenizer: &self.config.tokenizer,
        };
        let result = match decode::run_cell(self.server, spec, self.observer, self.cancel).await {
            Ok(result) => result,
            Err(RunError::Cancelled) => {
                out.stopped = Some(StopReason::Cancelled);
                return Ok(skipped_cell(planned, "interrupted"));
            }
            Err(e) => return Err(e),
        };
        self.note_content_type(result.unexpected_content_type.clone());
        if let (Some(context), Some(first)) = (prefill, &result.first_warmup) {
            let row = prefill::row_from(context, std::slice::from_ref(first), 1)?;
            let label = format!("prefill {context}");
            self.observer.step_finished(
                &label,
                &format!("{} (decode warm-up)", prefill_summary(&row)),
            );
            record(
                &mut self.journal,
                &JournalRecord::Prefill { row: row.clone() },
            )?;
            rows.insert(context, row);
        }
        for n in &result.notices {
            self.observer.notice(n);
        }
        out.notes.extend(result.notices);
        if matches!(result.status, CellStatus::Error { .. }) && !self.server.is_alive().await {
            // The server died under this cell: the cell is not its fault and
            // is left out of the journal so --resume measures it again.
            out.stopped = Some(StopReason::ServerGone(result.status.detail()));
            return Ok(skipped_cell(
                planned,
                "the server stopped answering during this cell",
            ));
        }
        let cell = DecodeCell {
            context: planned.context,
            concurrency: planned.concurrency,
            status: result.status,
            measurements: result.measurements,
        };
        self.observer.step_finished(&label, &decode_summary(&cell));
        record(
            &mut self.journal,
            &JournalRecord::Decode { cell: cell.clone() },
        )?;
        Ok(cell)
    }

    /// One prompt per stream, or one shared by all streams of the cell.
    fn cell_prompts(
        &self,
        cell_id: u64,
        planned: &PlannedCell,
        len: Tokens,
    ) -> Result<Vec<Arc<str>>, RunError> {
        let keys: Vec<CacheKey> = match self.config.prompt_sharing {
            PromptSharing::Unique => (0..planned.concurrency.get())
                .map(|s| CacheKey::unique(cell_id, u64::from(s), 0))
                .collect(),
            PromptSharing::Shared => vec![CacheKey::shared(cell_id)],
        };
        keys.into_iter()
            .map(|key| self.prompt(len, key).map(|p| Arc::<str>::from(p.text)))
            .collect()
    }

    fn closing_notes(&self, stopped: Option<&StopReason>) -> Vec<String> {
        let mut notes = Vec::new();
        if self.config.matrix.contexts.contains(&Tokens::ZERO) {
            notes.push(format!(
                "The context 0 row sends a {ZERO_CONTEXT_PROMPT}-token prompt (a unique cache marker) so that no two streams share a KV block."
            ));
        }
        if !self.config.extra_body.is_empty() {
            notes.push(format!(
                "Every request carried these extra body fields (--extra-body): {}",
                serde_json::Value::Object(self.config.extra_body.clone())
            ));
        }
        let engine = self.server.info.engine();
        let engine_fields = engine.stream_fields();
        if !engine_fields.is_empty() {
            notes.push(format!(
                "Every request to this {} server carried {} so that it reports its running output-token count on every chunk.",
                engine.name(),
                serde_json::Value::Object(engine_fields)
            ));
        }
        if let Some(ct) = &self.unexpected_content_type {
            let sent = if ct.is_empty() {
                "no Content-Type".to_owned()
            } else {
                format!("Content-Type `{ct}`")
            };
            notes.push(format!(
                "The server answered streaming requests with {sent} instead of text/event-stream; \
                 the bodies were event streams and were read as such."
            ));
        }
        if self.config.insecure {
            notes.push("TLS certificate verification was disabled (--insecure).".into());
        }
        match stopped {
            Some(StopReason::ServerGone(why)) => {
                notes.push(format!(
                    "The run stopped early: the server stopped answering ({why})."
                ));
            }
            Some(StopReason::Cancelled) => {
                notes.push("The run was interrupted before every step ran.".into());
            }
            None => {}
        }
        notes
    }
}
