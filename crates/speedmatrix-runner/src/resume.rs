//! Resuming a run: the journal's record types, the settings a journal must
//! match, and which finished steps a resumed run reuses.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use speedmatrix_report::{CellStatus, DecodeCell, PrefillRow};
use speedmatrix_units::{Concurrency, Tokens};

use crate::journal::{self, CorruptTail, Journal, JournalContents, read_journal};
use crate::{Api, JournalOptions, PrefillMode, RunConfig, RunError};

/// One journal line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub(crate) enum JournalRecord {
    /// The run's settings, first line of every journal.
    Start { matrix: MatrixKey, model: String },
    /// A finished prefill point.
    Prefill { row: PrefillRow },
    /// A finished decode cell.
    Decode { cell: DecodeCell },
}

/// One step a journal holds, as [`journal_steps`] reads it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum JournalStep {
    /// The line that names the run's settings.
    Start,
    /// A finished prefill point.
    Prefill(PrefillRow),
    /// A finished decode cell.
    Decode(DecodeCell),
}

/// Reads a journal from bytes in memory the way `--resume` reads the file:
/// the steps of its valid prefix and, if its end is damaged, where.
/// Never fails on any bytes (the journal fuzz target checks exactly that).
///
/// ```
/// let steps = speedmatrix_runner::journal_steps(b"{\"record\":\"start\"\n");
/// assert!(steps.records.is_empty());
/// assert_eq!(steps.corrupt_tail.unwrap().line, 1);
/// ```
pub fn journal_steps(bytes: &[u8]) -> JournalContents<JournalStep> {
    let contents = match journal::read_records::<JournalRecord, _>(bytes) {
        Ok(c) => c,
        // Reading from memory cannot fail; keep the signature honest anyway.
        Err(e) => JournalContents {
            records: Vec::new(),
            corrupt_tail: Some(CorruptTail {
                line: 1,
                offset: 0,
                dropped_bytes: bytes.len() as u64,
                reason: e.to_string(),
                saved_to: None,
            }),
        },
    };
    JournalContents {
        records: contents
            .records
            .into_iter()
            .map(|r| match r {
                JournalRecord::Start { .. } => JournalStep::Start,
                JournalRecord::Prefill { row } => JournalStep::Prefill(row),
                JournalRecord::Decode { cell } => JournalStep::Decode(cell),
            })
            .collect(),
        corrupt_tail: contents.corrupt_tail,
    }
}

/// The settings a journal must match to be resumed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MatrixKey {
    contexts: Vec<Tokens>,
    concurrencies: Vec<Concurrency>,
    prefill_contexts: Vec<Tokens>,
    duration_s: f64,
    max_tokens: Tokens,
    api: Api,
    /// Journals written before prefill modes existed measured cold.
    #[serde(default)]
    prefill_mode: PrefillMode,
}

impl MatrixKey {
    pub(crate) fn of(config: &RunConfig) -> MatrixKey {
        let m = &config.matrix;
        MatrixKey {
            contexts: m.contexts.clone(),
            concurrencies: m.concurrencies.clone(),
            prefill_contexts: m.prefill_contexts.clone(),
            duration_s: m.duration.as_secs_f64(),
            max_tokens: m.max_tokens,
            api: config.api,
            prefill_mode: m.prefill_mode,
        }
    }
}

/// Steps already in the journal, keyed by what they measured.
#[derive(Default)]
pub(crate) struct Done {
    pub(crate) prefill: BTreeMap<Tokens, PrefillRow>,
    pub(crate) decode: BTreeMap<(Tokens, Concurrency), DecodeCell>,
}

pub(crate) fn open_journal(
    options: &JournalOptions,
    config: &RunConfig,
) -> Result<(Option<Journal>, Done, Option<CorruptTail>), RunError> {
    let Some(path) = &options.path else {
        return Ok((None, Done::default(), None));
    };
    let key = MatrixKey::of(config);
    if !options.resume {
        let mut j = Journal::create(path)?;
        j.append(&JournalRecord::Start {
            matrix: key,
            model: config.model.clone().unwrap_or_default(),
        })?;
        return Ok((Some(j), Done::default(), None));
    }
    // A file of which not even the first line reads is not a damaged
    // journal but something else: refuse rather than cut it to nothing.
    let peek = read_journal::<JournalRecord>(path)?;
    if let (true, Some(tail)) = (peek.records.is_empty(), peek.corrupt_tail) {
        return Err(RunError::NotAJournal {
            path: path.clone(),
            line: tail.line,
            reason: tail.reason,
        });
    }
    let (mut j, contents) = Journal::resume::<JournalRecord>(path)?;
    let mut done = Done::default();
    let mut started = false;
    for record in contents.records {
        match record {
            JournalRecord::Start { matrix, .. } => {
                if matrix != key {
                    return Err(RunError::ResumeMismatch {
                        path: path.clone(),
                        what: "contexts, concurrencies, window, max tokens, API or prefill mode differ"
                            .into(),
                    });
                }
                started = true;
            }
            // Only results worth keeping are reused; failed steps run again.
            JournalRecord::Prefill { row } if row.status.is_valid() => {
                done.prefill.insert(row.context, row);
            }
            JournalRecord::Decode { cell }
                if matches!(
                    cell.status,
                    CellStatus::Valid
                        | CellStatus::Partial { .. }
                        | CellStatus::OverCapacity { .. }
                ) =>
            {
                done.decode.insert((cell.context, cell.concurrency), cell);
            }
            JournalRecord::Prefill { .. } | JournalRecord::Decode { .. } => {}
        }
    }
    if !started {
        j.append(&JournalRecord::Start {
            matrix: key,
            model: config.model.clone().unwrap_or_default(),
        })?;
    }
    Ok((Some(j), done, contents.corrupt_tail))
}

pub(crate) fn record(journal: &mut Option<Journal>, r: &JournalRecord) -> Result<(), RunError> {
    match journal {
        Some(j) => j.append(r),
        None => Ok(()),
    }
}
