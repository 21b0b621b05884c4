//! A load run's workload (`--dataset`, `--input-tokens`): a dataset's records sent as given,
//! a text corpus cut into prompts of exact token counts, or the run's own prompts at lengths
//! drawn from a distribution. Read and checked once before the run; each burst or rate cell
//! then takes its prompts from it.
//!
//! A dataset's records are sent in the sample's order, each cell going on where the one
//! before stopped, so that no record is sent twice (and found in the prefix cache) while
//! unsent ones remain; when a run needs more requests than the sample holds it starts again
//! from the first, and says so. Lengths drawn from a distribution are the same sequence in
//! every cell (request k of each cell has the k-th length), so cells differ in load only.

use std::sync::Arc;
use std::time::Duration;

use speedmatrix_client::Message;
use speedmatrix_units::{Api, RequestRate, Tokens};
use speedmatrix_workload::{
    Dataset, DatasetFormat, DatasetPrompt, DatasetRecord, LengthDistribution, ReferenceOutput,
    Tokenizer, Trace, TraceInput,
};

use crate::config::{RateLength, RateSpec};

use crate::options::RunOptions;
use crate::{RunnerError, options::bad};

/// Where a load run's prompts come from, read and checked.
#[derive(Debug, Clone)]
pub struct Workload {
    /// What the result document records of it.
    pub record: speedmatrix_report::Workload,
    pub(crate) source: Source,
    pub(crate) lengths: Option<LengthDistribution>,
    pub(crate) seed: u64,
    /// The cells' row: the prompts' median length.
    pub context: Tokens,
}

#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A dataset's records, in the sample's order.
    Records(Arc<[Item]>),
    /// A text corpus, cut to the drawn lengths.
    Corpus(Arc<Dataset>),
    /// The run's own prompts, at the drawn lengths.
    Synthetic,
    /// A trace's requests, at their times.
    Trace(TraceReplay),
}

/// A trace made ready: its requests and their send times (`--trace-speed` applied).
#[derive(Debug, Clone)]
pub(crate) struct TraceReplay {
    pub(crate) items: Arc<[TraceItem]>,
    pub(crate) schedule: Arc<[Duration]>,
    /// Tokens per `hash_ids` block.
    pub(crate) block: Tokens,
}

/// One trace request: its prompt and its `max_tokens`, when the trace gives one.
#[derive(Debug, Clone)]
pub(crate) struct TraceItem {
    pub(crate) prompt: TracePrompt,
    pub(crate) max_tokens: Option<Tokens>,
}

/// A trace request's prompt: a text sent as written, or one the run builds.
#[derive(Debug, Clone)]
pub(crate) enum TracePrompt {
    Given(Item),
    Built {
        tokens: Tokens,
        /// Its blocks (Mooncake's `hash_ids`): prompts share the blocks their ids share.
        hash_ids: Option<Arc<[u64]>>,
    },
}

/// One dataset record, ready to send.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) body: Body,
    /// Its prompt tokens by the run's tokenizer: with special tokens for completions, the
    /// content alone for a chat message (the template's overhead is added per server);
    /// `None` for messages, whose template the run cannot count exactly.
    pub(crate) tokens: Option<Tokens>,
    /// Content tokens by the run's tokenizer (every message's, for messages): the row's length.
    pub(crate) approx_tokens: Tokens,
    /// The answer length the dataset gives, as `max_tokens`.
    pub(crate) max_tokens: Option<Tokens>,
}

/// What a request sends.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    Text(Arc<str>),
    Messages(Arc<[Message]>),
}

impl Body {
    pub(crate) fn as_prompt(&self) -> crate::request::PromptRef<'_> {
        match self {
            Body::Text(t) => crate::request::PromptRef::Text(t),
            Body::Messages(m) => crate::request::PromptRef::Messages(m),
        }
    }
}

/// The flags that name a workload, checked against the mode and the other prompt flags.
pub(crate) fn check_flags(o: &RunOptions) -> Result<bool, RunnerError> {
    let given = o.dataset.is_some() || o.input_tokens.is_some();
    if o.trace.is_none() && (o.trace_speed.is_some() || o.trace_block_tokens.is_some()) {
        return Err(bad(
            "--trace-speed and --trace-block-tokens describe a --trace",
        ));
    }
    if !given && o.trace.is_none() {
        if o.dataset_format.is_some() || o.dataset_sample.is_some() {
            return Err(bad(
                "--dataset-format and --dataset-sample describe a --dataset",
            ));
        }
        return Ok(false);
    }
    use speedmatrix_units::LoadKind;
    if o.trace.is_some() {
        if given || o.dataset_format.is_some() || o.dataset_sample.is_some() {
            return Err(bad(
                "--trace gives every request's prompt and time: drop --dataset and --input-tokens",
            ));
        }
        if o.mode != LoadKind::Rate {
            return Err(bad(
                "--trace replays requests at their times: add --mode rate",
            ));
        }
    }
    if !matches!(o.mode, LoadKind::Burst | LoadKind::Rate) {
        return Err(bad(
            "--dataset and --input-tokens shape burst and rate prompts: add --mode burst or --mode rate (the sustained matrix keeps its exact synthetic prompts)",
        ));
    }
    if o.contexts.is_some() {
        return Err(bad(
            "--dataset and --input-tokens set every prompt's length: drop --contexts",
        ));
    }
    if o.shared_prefix.is_some() || o.prompt_sharing == crate::PromptSharing::Shared {
        return Err(bad(
            "--shared-prefix and --prompt-sharing shared shape the run's own prompts; a --dataset or --input-tokens workload sends its own: drop one",
        ));
    }
    if o.search {
        return Err(bad(
            "--search varies the load of one context; with --dataset or --input-tokens measure the loads you name (drop --search)",
        ));
    }
    Ok(true)
}

impl Workload {
    /// Reads the workload the options name, `None` when they name none.
    pub(crate) fn from_options(
        o: &RunOptions,
        tokenizer: &Tokenizer,
        max_output: Tokens,
    ) -> Result<Option<Workload>, RunnerError> {
        if !check_flags(o)? {
            return Ok(None);
        }
        if let Some(path) = &o.trace {
            return Self::from_trace(o, path, tokenizer, max_output).map(Some);
        }
        let seed = o.seed;
        let Some(path) = &o.dataset else {
            let Some(lengths) = o.input_tokens else {
                return Ok(None);
            };
            return Ok(Some(Workload {
                record: speedmatrix_report::Workload {
                    dataset: None,
                    format: None,
                    sha256: None,
                    records: None,
                    skipped_records: None,
                    sample: None,
                    seed,
                    input_tokens: Some(lengths.to_string()),
                    output_tokens_from_dataset: false,
                    trace_speed: None,
                    block_tokens: None,
                },
                context: median_length(&lengths, seed),
                source: Source::Synthetic,
                lengths: Some(lengths),
                seed,
            }));
        };
        let shown = path.display();
        let dataset = Dataset::read(path, o.dataset_format)
            .map_err(|e| bad(format!("--dataset {shown}: {e}")))?;
        let mut record = speedmatrix_report::Workload {
            dataset: path.file_name().map(|n| n.to_string_lossy().into_owned()),
            format: Some(dataset.format().name().to_owned()),
            sha256: Some(dataset.sha256().to_owned()),
            records: None,
            skipped_records: None,
            sample: None,
            seed,
            input_tokens: None,
            output_tokens_from_dataset: false,
            trace_speed: None,
            block_tokens: None,
        };
        if dataset.format() == DatasetFormat::Text {
            let Some(lengths) = o.input_tokens else {
                return Err(bad(format!(
                    "--dataset {shown} is a text corpus: say how long its prompts are with --input-tokens (e.g. 1k or uniform:256..4096)"
                )));
            };
            if o.dataset_sample.is_some() {
                return Err(bad(
                    "--dataset-sample draws records; a text corpus has none (its prompts are cut to --input-tokens)",
                ));
            }
            record.input_tokens = Some(lengths.to_string());
            return Ok(Some(Workload {
                record,
                context: median_length(&lengths, seed),
                source: Source::Corpus(Arc::new(dataset)),
                lengths: Some(lengths),
                seed,
            }));
        }
        if o.input_tokens.is_some() {
            return Err(bad(format!(
                "--dataset {shown} gives its prompts as they are: drop --input-tokens (it sizes the run's own prompts or a text corpus)"
            )));
        }
        let sample = dataset
            .sample(o.dataset_sample, seed)
            .map_err(|e| bad(format!("--dataset {shown}: {e}")))?;
        let items = sample
            .iter()
            .map(|&i| item(&dataset.records()[i], tokenizer, o.api, max_output))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(format!("--dataset {shown}: {e}")))?;
        record.records = Some(dataset.records().len() as u64);
        record.skipped_records = (dataset.skipped() > 0).then_some(dataset.skipped() as u64);
        record.sample = o.dataset_sample.map(|n| n as u64);
        record.output_tokens_from_dataset = items.iter().any(|i| i.max_tokens.is_some());
        let mut lengths: Vec<u64> = items.iter().map(|i| i.approx_tokens.get()).collect();
        lengths.sort_unstable();
        let context = Tokens::new(lengths[lengths.len() / 2].max(1));
        Ok(Some(Workload {
            record,
            context,
            source: Source::Records(items.into()),
            lengths: None,
            seed,
        }))
    }
}

impl Workload {
    /// A `--trace` read and made ready: its text prompts counted, its block chains checked
    /// against `--trace-block-tokens`, its times scaled by `--trace-speed`.
    fn from_trace(
        o: &RunOptions,
        path: &std::path::Path,
        tokenizer: &Tokenizer,
        max_output: Tokens,
    ) -> Result<Workload, RunnerError> {
        let shown = path.display();
        let trace = Trace::read(path).map_err(|e| bad(format!("--trace {shown}: {e}")))?;
        let block = o
            .trace_block_tokens
            .unwrap_or(Tokens::new(Trace::MOONCAKE_BLOCK_TOKENS));
        trace
            .check_blocks(block)
            .map_err(|e| bad(format!("--trace {shown}: {e}")))?;
        let speed = o.trace_speed.unwrap_or(1.0);
        let mut items = Vec::with_capacity(trace.records().len());
        for r in trace.records() {
            // A prompt the trace writes out is read as a dataset record is.
            let given = |prompt: DatasetPrompt| {
                let record = DatasetRecord {
                    prompt,
                    output: ReferenceOutput::None,
                    line: r.line,
                };
                item(&record, tokenizer, o.api, max_output)
                    .map(TracePrompt::Given)
                    .map_err(|e| bad(format!("--trace {shown}: {e}")))
            };
            let prompt = match &r.input {
                TraceInput::Text(t) => given(DatasetPrompt::Text(t.clone()))?,
                TraceInput::Messages(m) => given(DatasetPrompt::Messages(m.clone()))?,
                TraceInput::Tokens { tokens, hash_ids } => TracePrompt::Built {
                    tokens: *tokens,
                    hash_ids: hash_ids.clone(),
                },
            };
            items.push(TraceItem {
                prompt,
                max_tokens: r.output_tokens.map(|t| t.min(max_output)),
            });
        }
        let mut lengths: Vec<u64> = items
            .iter()
            .map(|i| match &i.prompt {
                TracePrompt::Given(item) => item.approx_tokens.get(),
                TracePrompt::Built { tokens, .. } => tokens.get(),
            })
            .collect();
        lengths.sort_unstable();
        let has_blocks = trace.has_blocks();
        let record = speedmatrix_report::Workload {
            dataset: path.file_name().map(|n| n.to_string_lossy().into_owned()),
            format: Some(if has_blocks { "mooncake" } else { "trace" }.to_owned()),
            sha256: Some(trace.sha256().to_owned()),
            records: Some(items.len() as u64),
            skipped_records: None,
            sample: None,
            seed: o.seed,
            input_tokens: None,
            output_tokens_from_dataset: items.iter().any(|i| i.max_tokens.is_some()),
            trace_speed: Some(speed),
            block_tokens: has_blocks.then_some(block.get()),
        };
        Ok(Workload {
            record,
            context: Tokens::new(lengths[lengths.len() / 2].max(1)),
            source: Source::Trace(TraceReplay {
                items: items.into(),
                schedule: trace.schedule(speed).into(),
                block,
            }),
            lengths: None,
            seed: o.seed,
        })
    }

    /// With a trace: its one rate cell's rate (its requests over its span, as replayed) and,
    /// when no `--requests` or `--duration` limits it, its length (every request).
    pub(crate) fn fit_rate_spec(&self, r: &mut RateSpec) -> Result<(), RunnerError> {
        let Source::Trace(t) = &self.source else {
            return Ok(());
        };
        let n = t.schedule.len() as u64;
        if r.length == RateLength::Requests(u64::MAX) {
            let cap = crate::limits::MAX_REQUESTS_PER_CELL;
            if n > cap {
                return Err(bad(format!(
                    "the trace has {n} requests, more than a cell sends (at most {cap}): replay part of it with --requests N or --duration D"
                )));
            }
            r.length = RateLength::Requests(n);
        }
        let span = t.schedule.last().copied().unwrap_or_default().as_secs_f64();
        // A trace sent all at once has no rate of its own: call it one per millisecond.
        let per_s = if n < 2 || span <= 0.0 {
            1_000.0
        } else {
            (n - 1) as f64 / span
        };
        let milli = (per_s * 1_000.0).round().clamp(1.0, 1e11) as u64;
        if let Some(rate) = RequestRate::from_milli(milli) {
            r.rates = vec![rate];
        }
        Ok(())
    }

    /// With a trace: the send times of the requests `length` lets through.
    pub(crate) fn trace_schedule(&self, length: RateLength) -> Option<Vec<Duration>> {
        let Source::Trace(t) = &self.source else {
            return None;
        };
        Some(match length {
            RateLength::Duration(d) => t
                .schedule
                .iter()
                .copied()
                .take_while(|&at| at < d)
                .collect(),
            RateLength::Requests(n) => t
                .schedule
                .iter()
                .copied()
                .take(usize::try_from(n).unwrap_or(usize::MAX))
                .collect(),
        })
    }
}

/// The median of a distribution's first 1,001 draws: the row a cell is shown on.
fn median_length(lengths: &LengthDistribution, seed: u64) -> Tokens {
    let mut drawn = lengths.draw(1_001, seed);
    drawn.sort_unstable();
    drawn[500]
}

/// A record made ready: its text or messages, its token counts and its answer length.
fn item(
    r: &speedmatrix_workload::DatasetRecord,
    tokenizer: &Tokenizer,
    api: Api,
    max_output: Tokens,
) -> Result<Item, String> {
    let content = tokenizer.clone().with_add_special_tokens(false);
    let count = |t: &Tokenizer, text: &str| {
        t.encode_count(text)
            .map(|n| Tokens::new(n as u64))
            .map_err(|e| format!("record at line {}: {e}", r.line))
    };
    let (body, tokens, approx) = match &r.prompt {
        DatasetPrompt::Text(t) => {
            let tokens = match api {
                Api::Completions => count(tokenizer, t)?,
                Api::Chat => count(&content, t)?,
            };
            (Body::Text(t.as_str().into()), Some(tokens), tokens)
        }
        DatasetPrompt::Messages(m) => {
            if api != Api::Chat {
                return Err(format!(
                    "the record at line {} has chat messages: add --api chat (a completions prompt is one text)",
                    r.line
                ));
            }
            let mut approx = 0;
            for msg in m {
                approx += count(&content, &msg.content)?.get();
            }
            let messages: Vec<Message> = m
                .iter()
                .map(|m| Message::new(m.role.clone(), m.content.clone()))
                .collect();
            (Body::Messages(messages.into()), None, Tokens::new(approx))
        }
    };
    let max_tokens = match &r.output {
        ReferenceOutput::None => None,
        ReferenceOutput::Tokens(n) => Some(Tokens::new(u64::from(*n))),
        ReferenceOutput::Text(t) => Some(count(&content, t)?),
    }
    // An answer of no tokens cannot be asked for; none longer than --max-tokens is.
    .map(|t| t.max(Tokens::new(1)).min(max_output));
    Ok(Item {
        body,
        tokens,
        approx_tokens: approx,
        max_tokens,
    })
}
