//! The measuring part of a run: every prefill point, then every decode cell,
//! each recorded in the journal as soon as it ends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use speedmatrix_units::{Concurrency, Tokens};
use speedmatrix_workload::{CacheKey, ChatOverhead, Prompt, PromptBuilder};
use tokio_util::sync::CancellationToken;

use crate::config::{ConversationSpec, SearchSpec};
use crate::journal::Journal;
use crate::observer::{Event, NotRun, StepPhase};
use crate::outcome::{
    CellOutcome, Exclusion, KneePath, LoadOutcome, Notice, PrefillOutcome, SkipReason, StepId,
    StepStatus, StopReason,
};
use crate::plan::{
    Plan, PlannedCell, PlannedLoad, ZERO_CONTEXT_PROMPT, load_exclusion, prompt_len,
};
use crate::request::RequestShape;
use crate::resume::{Done, JournalRecord, record};
use crate::search::{
    KneeSearch, below_boundary, judge, knee_of, load_units, point_of, upper_bound,
};
use crate::server::Server;
use crate::telemetry::RunTelemetry;
use crate::{Observer, PrefillMode, PromptSharing, RunConfig, RunnerError, decode, prefill};

mod load_cell;
mod repeats;

/// What the steps produced.
pub(crate) struct Measured {
    pub(crate) prefill: Vec<PrefillOutcome>,
    pub(crate) decode: Vec<CellOutcome>,
    pub(crate) load: Vec<LoadOutcome>,
    /// Each context's knee search, when the run searched.
    pub(crate) knees: Vec<KneePath>,
    /// The run's own notices (the cells keep theirs).
    pub(crate) notices: Vec<Notice>,
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
    /// GPUs, host and server counters beside the windows.
    pub(crate) telemetry: &'a RunTelemetry,
    /// The server's KV block size, when it reports one.
    pub(crate) block_tokens: Option<u64>,
    /// Request fields the server refused, dropped before the first step.
    pub(crate) field_notices: Vec<Notice>,
    /// The next dataset record a load cell sends (`--dataset`): cells go on where the one
    /// before stopped.
    pub(crate) workload_next: usize,
}

impl Session<'_> {
    /// Runs the plan's steps in order; after a stop, the rest are recorded as skipped.
    pub(crate) async fn measure(mut self, the_plan: &Plan) -> Result<Measured, RunnerError> {
        self.observer.event(Event::Planned {
            capacity: &the_plan.capacity,
            steps: the_plan.steps.len(),
            estimated: the_plan.estimated,
            estimates: &the_plan.steps,
        });
        let mut stopped = None;
        let from_warmup = self.prefill_from_warmup(the_plan);
        let mut rows = BTreeMap::new();
        for (i, (context, excluded)) in the_plan.prefill.iter().enumerate() {
            if from_warmup.values().any(|c| c == context) {
                continue;
            }
            let row = match stopped {
                Some(_) => skipped_prefill(*context, SkipReason::RunStopped),
                None => {
                    self.prefill_point(i, *context, excluded.as_ref(), &mut stopped)
                        .await?
                }
            };
            rows.insert(*context, row);
        }
        let mut decode = Vec::new();
        for (i, planned) in the_plan.cells.iter().enumerate() {
            let prefill = from_warmup.get(&i).copied();
            let cell = match stopped {
                Some(_) => skipped_cell(planned, SkipReason::RunStopped),
                None => {
                    self.decode_cell(i, planned, prefill, &mut rows, &mut stopped)
                        .await?
                }
            };
            decode.push(cell);
        }
        let mut load = Vec::new();
        let mut knees = Vec::new();
        if let Some(search) = self.config.matrix.search {
            for planned in &the_plan.load {
                let knee = self
                    .search_knee(the_plan, planned, search, &mut load, &mut stopped)
                    .await?;
                knees.push(knee);
            }
        } else {
            for (i, planned) in the_plan.load.iter().enumerate() {
                let cell = match stopped {
                    Some(_) => skipped_load(planned, SkipReason::RunStopped),
                    None => self.load_cell(i, planned, &mut stopped).await?,
                };
                load.push(cell);
            }
        }
        // Rows in the plan's order; a warm-up the run never reached is skipped.
        let prefill = the_plan
            .prefill
            .iter()
            .map(|(context, _)| {
                rows.remove(context)
                    .unwrap_or_else(|| skipped_prefill(*context, SkipReason::RunStopped))
            })
            .collect();
        let notices = self.run_notices(stopped.as_ref());
        for n in &notices {
            self.observer.event(Event::Notice(n));
        }
        Ok(Measured {
            prefill,
            decode,
            load,
            knees,
            notices,
            stopped,
        })
    }

    /// With prefill mode `warmup`: for each prefill context that has a
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

    /// The shape of burst, rate and conversation requests: the run's, except that with
    /// `--respect-eos` nothing keeps answers to `max_tokens`.
    fn load_shape(&self) -> RequestShape {
        let mut shape = self.shape.clone();
        if self.config.matrix.respect_eos {
            shape.ignore_eos = false;
            shape.min_tokens = false;
        }
        shape
    }

    fn prompt(&self, n: Tokens, key: CacheKey) -> Result<Prompt, RunnerError> {
        let p = match self.overhead {
            Some(o) => self.builder.chat_prompt(n, self.config.seed, &key, o),
            None => self.builder.prompt(n, self.config.seed, &key),
        };
        p.map_err(RunnerError::Workload)
    }

    fn note_content_type(&mut self, content_type: Option<String>) {
        if self.unexpected_content_type.is_none() {
            self.unexpected_content_type = content_type;
        }
    }

    async fn prefill_point(
        &mut self,
        i: usize,
        context: Tokens,
        excluded: Option<&Exclusion>,
        stopped: &mut Option<StopReason>,
    ) -> Result<PrefillOutcome, RunnerError> {
        let step = StepId::Prefill { context };
        if let Some(row) = self.done.prefill.remove(&context) {
            self.observer.event(Event::StepNotRun {
                step,
                why: NotRun::InJournal,
            });
            return Ok(row);
        }
        if let Some(ex) = excluded {
            self.observer.event(Event::StepNotRun {
                step,
                why: NotRun::Excluded(ex),
            });
            let row = PrefillOutcome::without_numbers(context, StepStatus::Excluded(ex.clone()), 0);
            record(&mut self.journal, &JournalRecord::prefill(row.clone()))?;
            return Ok(row);
        }
        self.observer.event(Event::StepStarted {
            step,
            expected: Duration::from_secs_f64(context.get() as f64 / 8_000.0),
        });
        let prompts = (0..self.config.matrix.prefill_repeats)
            .map(|r| {
                let key = CacheKey::unique(self.nonce.wrapping_add(i as u64), 0, u64::from(r));
                self.prompt(context, key).map(|p| p.text)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ran = prefill::run_prefill(self.server, &self.shape, context, &prompts, self.cancel);
        let Some((row, content_type)) = unless_cancelled(ran.await, stopped)? else {
            return Ok(skipped_prefill(context, SkipReason::Interrupted));
        };
        self.note_content_type(content_type);
        self.observer.event(Event::PrefillFinished(&row));
        record(&mut self.journal, &JournalRecord::prefill(row.clone()))?;
        if let StepStatus::Failed { failure, .. } = &row.status
            && !self.server.is_alive().await
        {
            *stopped = Some(StopReason::ServerGone(failure.message.clone()));
        }
        Ok(row)
    }

    /// Runs one decode cell; with `prefill`, its first warm-up request is
    /// also that context's prefill outcome, journaled before the cell.
    async fn decode_cell(
        &mut self,
        i: usize,
        planned: &PlannedCell,
        prefill: Option<Tokens>,
        rows: &mut BTreeMap<Tokens, PrefillOutcome>,
        stopped: &mut Option<StopReason>,
    ) -> Result<CellOutcome, RunnerError> {
        let step = StepId::Decode {
            context: planned.context,
            concurrency: planned.concurrency,
        };
        if let Some(cell) = self
            .done
            .decode
            .remove(&(planned.context, planned.concurrency))
        {
            self.observer.event(Event::StepNotRun {
                step,
                why: NotRun::InJournal,
            });
            return Ok(cell);
        }
        if let Some(ex) = &planned.excluded {
            self.observer.event(Event::StepNotRun {
                step,
                why: NotRun::Excluded(ex),
            });
            let cell = excluded_cell(planned, ex);
            record(&mut self.journal, &JournalRecord::decode(cell.clone()))?;
            return Ok(cell);
        }
        self.observer.event(Event::StepStarted {
            step,
            expected: self.config.matrix.window,
        });
        self.observer.event(Event::Phase {
            step,
            phase: StepPhase::BuildingPrompts,
        });
        let len = prompt_len(planned.context);
        let prompts = self.cell_prompts(self.nonce.wrapping_add(1_000 + i as u64), planned, len)?;
        let spec = decode::DecodeCellSpec {
            measure_first_warmup: prefill.is_some(),
            inject: match self.config.matrix.inject {
                Some(inject) => {
                    let cell_id = self.nonce.wrapping_add(2_000_000 + i as u64);
                    let cold = |k: u64| {
                        self.prompt(inject.tokens, CacheKey::unique(cell_id, k, 0))
                            .map(|p| Arc::<str>::from(p.text))
                    };
                    Some(decode::CellInject {
                        tokens: inject.tokens,
                        alone: cold(0)?,
                        loaded: cold(1)?,
                        settle: inject.settle,
                    })
                }
                None => None,
            },
            warm: true,
            ..self.cell_spec(i, 0, planned, prompts.clone(), len)
        };
        let ran = decode::run_cell(
            self.server,
            spec,
            self.telemetry,
            self.observer,
            self.cancel,
        );
        let Some(mut result) = unless_cancelled(ran.await, stopped)? else {
            return Ok(skipped_cell(planned, SkipReason::Interrupted));
        };
        if result.cell.status == StepStatus::Measured {
            let Some(repeats) = self.repeat_cell(i, planned, &prompts, len, stopped).await? else {
                return Ok(skipped_cell(planned, SkipReason::Interrupted));
            };
            if !repeats.is_empty() {
                result.cell = crate::outcome::with_repeats(result.cell, repeats);
            }
        }
        self.note_content_type(result.unexpected_content_type.clone());
        if let (Some(context), Some(first)) = (prefill, &result.first_warmup) {
            let mut row = prefill::outcome_of(context, std::slice::from_ref(first), 1);
            row.from_warmup = true;
            self.observer.event(Event::PrefillFinished(&row));
            record(&mut self.journal, &JournalRecord::prefill(row.clone()))?;
            rows.insert(context, row);
        }
        for n in &result.cell.notices {
            self.observer.event(Event::Notice(n));
        }
        if let StepStatus::Failed { failure, .. } = &result.cell.status
            && !self.server.is_alive().await
        {
            // The server died under this cell: the cell is not its fault and
            // is left out of the journal so a resume measures it again.
            *stopped = Some(StopReason::ServerGone(failure.message.clone()));
            return Ok(skipped_cell(planned, SkipReason::ServerStopped));
        }
        self.observer.event(Event::CellFinished(&result.cell));
        record(
            &mut self.journal,
            &JournalRecord::decode(result.cell.clone()),
        )?;
        Ok(result.cell)
    }

    /// Searches one context for the highest load that meets the objective,
    /// from `start` (the plan's cell) up to the highest given load, each try
    /// an ordinary journaled cell (so a resumed search replays its path).
    async fn search_knee(
        &mut self,
        the_plan: &Plan,
        start: &PlannedLoad,
        spec: SearchSpec,
        cells: &mut Vec<LoadOutcome>,
        stopped: &mut Option<StopReason>,
    ) -> Result<KneePath, RunnerError> {
        let m = &self.config.matrix;
        let first = load_units(start.point);
        let max = upper_bound(m, first);
        let mut search = KneeSearch::new(first, max, 1, spec.relative_tolerance, spec.max_steps);
        let mut path = Vec::new();
        while let Some(u) = search.next() {
            let Some(point) = point_of(start.point, u) else {
                break;
            };
            if stopped.is_some() {
                break;
            }
            let planned = PlannedLoad {
                context: start.context,
                point,
                excluded: load_exclusion(
                    &the_plan.capacity,
                    m,
                    self.server.max_model_len,
                    start.context,
                    point,
                ),
            };
            let cell = self.load_cell(cells.len(), &planned, stopped).await?;
            let tried = judge(point, &cell, spec.goal);
            let interrupted = matches!(cell.status, StepStatus::Skipped(_));
            cells.push(cell);
            if interrupted {
                break;
            }
            search.record(u, below_boundary(spec.goal, &tried));
            path.push(tried);
        }
        let knee = knee_of(spec.goal, &search, start.point, &path);
        Ok(KneePath {
            context: start.context,
            goal: spec.goal,
            knee,
            end: search.end(),
            path,
        })
    }

    /// Runs one conversation cell: `count` conversations of `conv.turns` turns.
    async fn conversation_cell(
        &mut self,
        i: usize,
        planned: &PlannedLoad,
        conv: ConversationSpec,
        count: Concurrency,
        stopped: &mut Option<StopReason>,
    ) -> Result<LoadOutcome, RunnerError> {
        let step = StepId::Load {
            context: planned.context,
            point: planned.point,
        };
        self.observer.event(Event::StepStarted {
            step,
            expected: Duration::from_secs(u64::from(conv.turns) * 2),
        });
        self.observer.event(Event::Phase {
            step,
            phase: StepPhase::BuildingPrompts,
        });
        let len = prompt_len(planned.context);
        let cell_id = self.nonce.wrapping_add(3_000_000 + i as u64);
        let text = |n: Tokens, k: u64, turn: u64| {
            self.prompt(n, CacheKey::unique(cell_id, k, turn))
                .map(|p| Arc::<str>::from(p.text))
        };
        let conversations = u64::from(count.get());
        let openings = (0..conversations)
            .map(|k| text(len, k, 0))
            .collect::<Result<Vec<_>, _>>()?;
        let questions = (0..conversations)
            .map(|k| {
                (1..u64::from(conv.turns))
                    .map(|turn| text(conv.question, k, turn))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let spec = crate::conversation::ConversationCellSpec {
            step,
            context: planned.context,
            point: planned.point,
            openings,
            questions,
            shape: self.load_shape(),
            tokenizer: &self.config.tokenizer,
            slo: self.config.matrix.slo.as_ref(),
            block_tokens: self.block_tokens,
        };
        let ran = crate::conversation::run_conversation_cell(
            self.server,
            spec,
            self.observer,
            self.cancel,
        );
        let Some(cell) = unless_cancelled(ran.await, stopped)? else {
            return Ok(skipped_load(planned, SkipReason::Interrupted));
        };
        if let StepStatus::Failed { failure, .. } = &cell.status
            && !self.server.is_alive().await
        {
            *stopped = Some(StopReason::ServerGone(failure.message.clone()));
            return Ok(skipped_load(planned, SkipReason::ServerStopped));
        }
        self.observer.event(Event::LoadFinished(&cell));
        record(&mut self.journal, &JournalRecord::load(cell.clone()))?;
        Ok(cell)
    }

    /// One prompt per stream, or one shared by all streams of the cell.
    fn cell_prompts(
        &self,
        cell_id: u64,
        planned: &PlannedCell,
        len: Tokens,
    ) -> Result<Vec<Arc<str>>, RunnerError> {
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

    /// What the whole run has to tell, after its steps.
    fn run_notices(&self, stopped: Option<&StopReason>) -> Vec<Notice> {
        let mut notices = Vec::new();
        if self.config.matrix.contexts.contains(&Tokens::ZERO) {
            notices.push(Notice::ZeroContextPrompt {
                tokens: ZERO_CONTEXT_PROMPT,
            });
        }
        if !self.config.extra_body.is_empty() {
            notices.push(Notice::ExtraBody {
                fields: self.config.extra_body.clone(),
            });
        }
        let engine = self.server.info.engine();
        let fields = speedmatrix_engines::EngineHabits::stream_fields(engine);
        if !fields.is_empty() {
            notices.push(Notice::EngineFields {
                engine: engine.name().to_owned(),
                fields,
            });
        }
        if let Some(ct) = &self.unexpected_content_type {
            notices.push(Notice::UnexpectedContentType {
                content_type: ct.clone(),
            });
        }
        notices.extend(self.field_notices.iter().cloned());
        notices.extend(
            self.server
                .info
                .warnings
                .iter()
                .map(|w| Notice::ProbeWarning { warning: w.clone() }),
        );
        if self.config.insecure {
            notices.push(Notice::Insecure);
        }
        if let Some(why) = stopped {
            notices.push(Notice::Stopped { why: why.clone() });
        }
        notices
    }
}

/// A step's result, or `None` when the run was cancelled during the step:
/// `stopped` then says so, and the caller records the step as interrupted.
fn unless_cancelled<T>(
    result: Result<T, RunnerError>,
    stopped: &mut Option<StopReason>,
) -> Result<Option<T>, RunnerError> {
    match result {
        Err(RunnerError::Cancelled) => {
            *stopped = Some(StopReason::Cancelled);
            Ok(None)
        }
        other => other.map(Some),
    }
}

fn load_without_numbers(planned: &PlannedLoad, status: StepStatus) -> LoadOutcome {
    LoadOutcome {
        context: planned.context,
        point: planned.point,
        status,
        result: None,
        notices: Vec::new(),
    }
}

fn skipped_load(planned: &PlannedLoad, why: SkipReason) -> LoadOutcome {
    load_without_numbers(planned, StepStatus::Skipped(why))
}

fn skipped_prefill(context: Tokens, why: SkipReason) -> PrefillOutcome {
    PrefillOutcome::without_numbers(context, StepStatus::Skipped(why), 0)
}

fn excluded_cell(planned: &PlannedCell, ex: &Exclusion) -> CellOutcome {
    cell_without_numbers(planned, StepStatus::Excluded(ex.clone()))
}

fn skipped_cell(planned: &PlannedCell, why: SkipReason) -> CellOutcome {
    cell_without_numbers(planned, StepStatus::Skipped(why))
}

fn cell_without_numbers(planned: &PlannedCell, status: StepStatus) -> CellOutcome {
    CellOutcome {
        context: planned.context,
        concurrency: planned.concurrency,
        status,
        window: None,
        notices: Vec::new(),
    }
}
