//! A burst or rate cell: its requests sent on their schedule (all at once, or drawn at a
//! rate), measured `--repeats` times with prompts of its own each time.

use std::sync::Arc;
use std::time::Duration;

use speedmatrix_units::{Concurrency, Tokens};
use speedmatrix_workload::CacheKey;

use super::{Session, load_without_numbers, skipped_load, unless_cancelled};
use crate::config::LoadMode;
use crate::load::LoadPrompt;
use crate::observer::{Event, NotRun, StepPhase};
use crate::outcome::{
    LoadOutcome, LoadPoint, SkipReason, StepId, StepStatus, StopReason, load_with_repeats,
};
use crate::plan::{PlannedLoad, prompt_len};
use crate::resume::{JournalRecord, record};
use crate::workload::{Source, TracePrompt, Workload};
use crate::{PromptSharing, RunnerError};

impl Session<'_> {
    /// Runs one burst or rate cell.
    pub(super) async fn load_cell(
        &mut self,
        i: usize,
        planned: &PlannedLoad,
        stopped: &mut Option<StopReason>,
    ) -> Result<LoadOutcome, RunnerError> {
        let step = StepId::Load {
            context: planned.context,
            point: planned.point,
        };
        if let Some(cell) = self.done.load.remove(&(planned.context, planned.point)) {
            // A resumed run sends the records the journaled cells did not.
            self.workload_next += cell.result.as_ref().map_or(0, |r| r.sent as usize);
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
            let cell = load_without_numbers(planned, StepStatus::Excluded(ex.clone()));
            record(&mut self.journal, &JournalRecord::load(cell.clone()))?;
            return Ok(cell);
        }
        let m = &self.config.matrix;
        if let (LoadMode::Conversation(conv), LoadPoint::Conversations { count }) =
            (&m.load, planned.point)
        {
            return self
                .conversation_cell(i, planned, *conv, count, stopped)
                .await;
        }
        let (schedule, max_in_flight, drain, warm_cache) = match (&m.load, planned.point) {
            (LoadMode::Burst(b), LoadPoint::Burst { requests }) => (
                vec![Duration::ZERO; requests.get() as usize],
                b.max_concurrency,
                crate::load::BURST_DRAIN,
                b.warm_cache,
            ),
            (LoadMode::Rate(r), LoadPoint::Rate { rate }) => (
                match self
                    .config
                    .workload
                    .as_ref()
                    .and_then(|w| w.trace_schedule(r.length))
                {
                    Some(times) => times,
                    None => crate::load::rate_schedule(r, planned.context, rate)?,
                },
                r.max_in_flight,
                r.drain,
                r.warm_cache,
            ),
            _ => return Ok(skipped_load(planned, SkipReason::RunStopped)),
        };
        self.observer.event(Event::StepStarted {
            step,
            expected: (schedule.last().copied().unwrap_or_default() + Duration::from_secs(2))
                * m.repeats.max(1),
        });
        self.observer.event(Event::Phase {
            step,
            phase: StepPhase::BuildingPrompts,
        });
        let mut runs = Vec::new();
        for repeat in 0..m.repeats.max(1) {
            let how = LoadHow {
                schedule: &schedule,
                max_in_flight,
                drain,
                warm_cache,
            };
            let Some(cell) = self.load_once(i, planned, repeat, how, stopped).await? else {
                return Ok(skipped_load(planned, SkipReason::Interrupted));
            };
            let measured = cell.status.is_measured();
            runs.push(cell);
            // A repeat that failed ends the cell: it fails as that repeat did.
            if !measured {
                break;
            }
        }
        let Some(cell) = load_with_repeats(runs) else {
            return Ok(skipped_load(planned, SkipReason::Interrupted));
        };
        for n in &cell.notices {
            self.observer.event(Event::Notice(n));
        }
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

    /// One measurement of a burst or rate cell (`repeat` of `--repeats`); `None` when the
    /// run was stopped during it.
    async fn load_once(
        &mut self,
        i: usize,
        planned: &PlannedLoad,
        repeat: u32,
        how: LoadHow<'_>,
        stopped: &mut Option<StopReason>,
    ) -> Result<Option<LoadOutcome>, RunnerError> {
        let LoadHow {
            schedule,
            max_in_flight,
            drain,
            warm_cache,
        } = how;
        let m = &self.config.matrix;
        let step = StepId::Load {
            context: planned.context,
            point: planned.point,
        };
        let len = prompt_len(planned.context);
        // Each repeat sends prompts of its own: none finds another's in the prefix cache.
        let cell_id = self
            .nonce
            .wrapping_add(1_000_000 + i as u64)
            .wrapping_add(u64::from(repeat) << 40);
        let shared = m.shared_prefix.map(|s| s.tokens_of(len));
        let prefix = match shared {
            Some(shared) => Some(crate::load::PrefixWarm {
                // A prompt of the cell's own prefix and a suffix no request has.
                prompt: self
                    .prompt(len, CacheKey::shared_prefix(cell_id, shared, u64::MAX, 0))?
                    .text
                    .into(),
                shared_tokens: shared,
                intended_hit_rate: self.block_tokens.and_then(|b| {
                    speedmatrix_metrics::intended_prefix_hit_rate(len.get(), shared.get(), b)
                }),
            }),
            None => None,
        };
        let mut notices = Vec::new();
        let prompts = if let Some(w) = &self.config.workload {
            self.workload_prompts(w, schedule.len(), cell_id, step, &mut notices)?
        } else {
            self.own_prompts(len, cell_id, shared, schedule.len())?
        };
        let spec = crate::load::LoadCellSpec {
            prefix,
            step,
            context: planned.context,
            point: planned.point,
            prompts,
            schedule: schedule.to_vec(),
            shape: self.load_shape(),
            lengths_vary: self.config.workload.is_some(),
            max_in_flight,
            drain,
            warm_cache,
            slo: m.slo.as_ref(),
            tokenizer: &self.config.tokenizer,
        };
        let ran = crate::load::run_load_cell(self.server, spec, self.observer, self.cancel);
        let cell = unless_cancelled(ran.await, stopped)?;
        Ok(cell.map(|mut c| {
            c.notices.extend(notices);
            c
        }))
    }

    /// The run's own prompts of a cell: `len` tokens each, unique, shared, or with a shared
    /// prefix.
    fn own_prompts(
        &self,
        len: Tokens,
        cell_id: u64,
        shared: Option<Tokens>,
        n: usize,
    ) -> Result<Vec<LoadPrompt>, RunnerError> {
        let prompts = match (self.config.prompt_sharing, shared) {
            (_, Some(shared)) => (0..n as u64)
                .map(|k| {
                    self.prompt(len, CacheKey::shared_prefix(cell_id, shared, k, 0))
                        .map(|p| Arc::<str>::from(p.text))
                })
                .collect::<Result<Vec<_>, _>>()?,
            (PromptSharing::Unique, None) => (0..n as u64)
                .map(|k| {
                    self.prompt(len, CacheKey::unique(cell_id, k, 0))
                        .map(|p| Arc::<str>::from(p.text))
                })
                .collect::<Result<Vec<_>, _>>()?,
            (PromptSharing::Shared, None) => {
                let p: Arc<str> = self.prompt(len, CacheKey::shared(cell_id))?.text.into();
                vec![p; n]
            }
        };
        Ok(prompts
            .into_iter()
            .map(|p| LoadPrompt::text(p, len))
            .collect())
    }

    /// A cell's `n` prompts from the run's workload: the dataset's next records, a corpus
    /// cut to the drawn lengths, or the run's own prompts at them (request k of every cell
    /// has the k-th length).
    fn workload_prompts(
        &mut self,
        w: &Workload,
        n: usize,
        cell_id: u64,
        step: StepId,
        notices: &mut Vec<crate::outcome::Notice>,
    ) -> Result<Vec<LoadPrompt>, RunnerError> {
        let overhead = self.overhead.map_or(0, |o| o.0.get());
        match &w.source {
            Source::Records(items) => {
                let start = self.workload_next;
                self.workload_next = start + n;
                if start + n > items.len() {
                    notices.push(crate::outcome::Notice::DatasetReused {
                        step,
                        records: items.len() as u64,
                    });
                }
                Ok((start..start + n)
                    .map(|k| {
                        let item = &items[k % items.len()];
                        LoadPrompt {
                            body: item.body.clone(),
                            expected_tokens: item.tokens.map(|t| Tokens::new(t.get() + overhead)),
                            max_tokens: item.max_tokens,
                        }
                    })
                    .collect())
            }
            Source::Corpus(dataset) => {
                let lengths = w.lengths.map(|l| l.draw(n, w.seed)).unwrap_or_default();
                // A chat prompt's content is its length less the template's tokens.
                let tokenizer = match self.overhead {
                    Some(_) => self.config.tokenizer.clone().with_add_special_tokens(false),
                    None => self.config.tokenizer.clone(),
                };
                let content: Vec<Tokens> = lengths
                    .iter()
                    .map(|t| Tokens::new(t.get().saturating_sub(overhead).max(1)))
                    .collect();
                let texts = dataset
                    .corpus_prompts(&tokenizer, &content, w.seed ^ cell_id)
                    .map_err(RunnerError::Workload)?;
                Ok(texts
                    .into_iter()
                    .zip(content)
                    .map(|(t, c)| LoadPrompt::text(t, Tokens::new(c.get() + overhead)))
                    .collect())
            }
            Source::Trace(t) => self.trace_prompts(t, n, cell_id),
            Source::Synthetic => {
                let lengths = w.lengths.map(|l| l.draw(n, w.seed)).unwrap_or_default();
                lengths
                    .into_iter()
                    .enumerate()
                    .map(|(k, len)| {
                        let p = self.prompt(len, CacheKey::unique(cell_id, k as u64, 0))?;
                        Ok(LoadPrompt::text(p.text, len))
                    })
                    .collect()
            }
        }
    }
}

impl Session<'_> {
    /// A trace cell's first `n` prompts: texts as the trace gives them, the rest built to
    /// their lengths, Mooncake's block chains block by block (one memo for the cell, so
    /// requests share exactly the blocks their ids share; a new cell, or repeat, shares
    /// nothing with the one before).
    fn trace_prompts(
        &self,
        t: &crate::workload::TraceReplay,
        n: usize,
        cell_id: u64,
    ) -> Result<Vec<LoadPrompt>, RunnerError> {
        let overhead = self.overhead.map_or(0, |o| o.0.get());
        let seed = self.config.seed ^ cell_id.rotate_left(29);
        let mut memo = speedmatrix_workload::BlockMemo::default();
        let mut prompts = Vec::with_capacity(n);
        for (k, item) in t.items.iter().take(n).enumerate() {
            let prompt = match &item.prompt {
                TracePrompt::Given(given) => LoadPrompt {
                    body: given.body.clone(),
                    expected_tokens: given.tokens.map(|t| Tokens::new(t.get() + overhead)),
                    max_tokens: None,
                },
                TracePrompt::Built {
                    tokens,
                    hash_ids: None,
                } => {
                    let p = self.prompt(*tokens, CacheKey::unique(cell_id, k as u64, 0))?;
                    LoadPrompt::text(p.text, *tokens)
                }
                TracePrompt::Built {
                    tokens,
                    hash_ids: Some(ids),
                } => {
                    let p = self
                        .builder
                        .block_prompt(ids, *tokens, t.block, seed, self.overhead, &mut memo)
                        .map_err(RunnerError::Workload)?;
                    LoadPrompt::text(p.text, *tokens)
                }
            };
            prompts.push(LoadPrompt {
                max_tokens: item.max_tokens,
                ..prompt
            });
        }
        Ok(prompts)
    }
}

/// How a burst or rate cell sends its requests.
#[derive(Clone, Copy)]
struct LoadHow<'s> {
    schedule: &'s [Duration],
    max_in_flight: Option<Concurrency>,
    drain: Duration,
    warm_cache: bool,
}
