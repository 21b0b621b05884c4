//! Resuming a run: the journal's versioned records, the key a journal must match
//! (`key.rs`; layout 1's in `v1.rs`), and which finished steps a resumed run reuses.

mod key;
mod v1;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use speedmatrix_report::Provenance;
use speedmatrix_units::{Concurrency, Tokens};

use crate::journal::{self, CorruptTail, Journal, JournalContents};
use crate::outcome::{CellOutcome, LoadOutcome, LoadPoint, PrefillOutcome, StepStatus};
use crate::{JournalOptions, RunnerError};

pub use self::key::{InjectKey, LoadKey, ResumeKey, Schedule};
use self::v1::ResumeKeyV1;

/// The layout of the journal's records this runner writes.
///
/// Bump it on any change an older runner would misread; the reader refuses
/// versions it does not know with [`RunnerError::JournalVersion`]. Layout 2 types
/// every field of the key (layout 1 wrote some as words); layout 1 is still read.
pub const JOURNAL_VERSION: u32 = 2;

/// The oldest layout a journal may have and still be continued.
pub const OLDEST_JOURNAL_VERSION: u32 = 1;

/// A start record's key, in the layout the journal was written in.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum KeyOnDisk {
    /// Layout 2 (this runner's).
    Current(Box<ResumeKey>),
    /// Layout 1.
    V1(Box<ResumeKeyV1>),
}

impl KeyOnDisk {
    /// Every field in which this key and `now` differ.
    fn differences(&self, now: &ResumeKey) -> Vec<KeyDifference> {
        match self {
            KeyOnDisk::Current(k) => k.differences(now),
            KeyOnDisk::V1(k) => k.differences(now),
        }
    }
}

/// One field in which a journal's key and this run's differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDifference {
    /// The field, as [`ResumeKey`] names it.
    pub field: String,
    /// Its value in the journal (JSON).
    pub journal: String,
    /// Its value in this run (JSON).
    pub now: String,
}

/// Every top-level field whose JSON differs between `journal` and `now`.
fn json_differences<T: Serialize>(journal: &T, now: &T) -> Vec<KeyDifference> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(journal), serde_json::to_value(now))
    else {
        return Vec::new();
    };
    let mut fields: Vec<&String> = a.keys().chain(b.keys()).collect();
    fields.sort();
    fields.dedup();
    fields
        .into_iter()
        .filter(|field| a.get(*field) != b.get(*field))
        .map(|field| KeyDifference {
            field: field.clone(),
            journal: a
                .get(field)
                .map_or_else(|| "null".into(), ToString::to_string),
            now: b
                .get(field)
                .map_or_else(|| "null".into(), ToString::to_string),
        })
        .collect()
}

/// One journal line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub(crate) enum JournalRecord {
    /// What the run measures, first line of every journal.
    Start {
        journal_version: u32,
        key: Box<KeyOnDisk>,
        /// How the run was started: what `--resume DIR` alone continues with. Absent in
        /// journals of runs whose caller recorded none (and before provenance was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provenance: Option<Box<Provenance>>,
    },
    /// A finished prefill point.
    Prefill {
        journal_version: u32,
        outcome: PrefillOutcome,
    },
    /// A finished decode cell.
    Decode {
        journal_version: u32,
        outcome: Box<CellOutcome>,
    },
    /// A finished burst or rate cell.
    Load {
        journal_version: u32,
        outcome: Box<LoadOutcome>,
    },
}

impl JournalRecord {
    pub(crate) fn start(key: ResumeKey, provenance: Option<Provenance>) -> JournalRecord {
        JournalRecord::Start {
            journal_version: JOURNAL_VERSION,
            key: Box::new(KeyOnDisk::Current(Box::new(key))),
            provenance: provenance.map(Box::new),
        }
    }

    pub(crate) fn prefill(outcome: PrefillOutcome) -> JournalRecord {
        JournalRecord::Prefill {
            journal_version: JOURNAL_VERSION,
            outcome,
        }
    }

    pub(crate) fn decode(outcome: CellOutcome) -> JournalRecord {
        JournalRecord::Decode {
            journal_version: JOURNAL_VERSION,
            outcome: Box::new(outcome),
        }
    }

    pub(crate) fn load(outcome: LoadOutcome) -> JournalRecord {
        JournalRecord::Load {
            journal_version: JOURNAL_VERSION,
            outcome: Box::new(outcome),
        }
    }
}

/// One step a journal holds, as [`journal_steps`] reads it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum JournalStep {
    /// The line that names what the run measures.
    Start,
    /// A finished prefill point.
    Prefill(PrefillOutcome),
    /// A finished decode cell.
    Decode(Box<CellOutcome>),
    /// A finished burst or rate cell.
    Load(Box<LoadOutcome>),
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
    match journal::read_records::<JournalRecord, _>(bytes) {
        Ok(c) => steps_of(c),
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
    }
}

/// Reads the journal at `path` the way `resume` does, without changing it:
/// the steps of its valid prefix and, if its end is damaged, where.
pub fn read_journal(path: &Path) -> Result<JournalContents<JournalStep>, RunnerError> {
    journal::read_file::<JournalRecord>(path).map(steps_of)
}

fn steps_of(contents: JournalContents<JournalRecord>) -> JournalContents<JournalStep> {
    JournalContents {
        records: contents
            .records
            .into_iter()
            .map(|r| match r {
                JournalRecord::Start { .. } => JournalStep::Start,
                JournalRecord::Prefill { outcome, .. } => JournalStep::Prefill(outcome),
                JournalRecord::Decode { outcome, .. } => JournalStep::Decode(outcome),
                JournalRecord::Load { outcome, .. } => JournalStep::Load(outcome),
            })
            .collect(),
        corrupt_tail: contents.corrupt_tail,
    }
}

/// How the run whose journal is at `path` was started (its command line and every flag), as
/// its first line records it: what `speedmatrix run --resume DIR` alone continues with.
/// `None` when the journal records none (a run started by a caller that kept none).
pub fn journal_provenance(path: &Path) -> Result<Option<Provenance>, RunnerError> {
    check_version(path)?;
    let contents = journal::read_file::<JournalRecord>(path)?;
    Ok(contents.records.into_iter().find_map(|r| match r {
        JournalRecord::Start { provenance, .. } => provenance.map(|p| *p),
        _ => None,
    }))
}

/// FNV-1a over `bytes`: a stable fingerprint, not a cryptographic hash.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Steps already in the journal, keyed by what they measured.
#[derive(Default)]
pub(crate) struct Done {
    pub(crate) prefill: BTreeMap<Tokens, PrefillOutcome>,
    pub(crate) decode: BTreeMap<(Tokens, Concurrency), CellOutcome>,
    pub(crate) load: BTreeMap<(Tokens, LoadPoint), LoadOutcome>,
}

/// Opens the journal: a new one starting with `key`, or the one at the
/// path to resume, whose key must equal `key` and whose finished steps are
/// reused (failed ones run again).
pub(crate) fn open_journal(
    options: &JournalOptions,
    key: ResumeKey,
    provenance: Option<&Provenance>,
) -> Result<(Option<Journal>, Done, Option<CorruptTail>), RunnerError> {
    let Some(path) = &options.path else {
        return Ok((None, Done::default(), None));
    };
    if !options.resume {
        let mut j = Journal::create(path)?;
        j.append(&JournalRecord::start(key, provenance.cloned()))?;
        return Ok((Some(j), Done::default(), None));
    }
    check_version(path)?;
    // A file of which not even the first line reads is not a damaged
    // journal but something else: refuse rather than cut it to nothing.
    let peek = journal::read_file::<JournalRecord>(path)?;
    if let (true, Some(tail)) = (peek.records.is_empty(), peek.corrupt_tail) {
        return Err(RunnerError::NotAJournal {
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
            JournalRecord::Start { key: theirs, .. } => {
                let differences = theirs.differences(&key);
                if !differences.is_empty() {
                    return Err(RunnerError::ResumeMismatch {
                        path: path.clone(),
                        differences,
                    });
                }
                started = true;
            }
            // Only results worth keeping are reused; failed steps run again.
            JournalRecord::Prefill { outcome, .. } if outcome.status.is_measured() => {
                done.prefill.insert(outcome.context, outcome);
            }
            JournalRecord::Decode { outcome, .. }
                if outcome.status.is_measured()
                    || matches!(outcome.status, StepStatus::Excluded(_)) =>
            {
                done.decode
                    .insert((outcome.context, outcome.concurrency), *outcome);
            }
            JournalRecord::Load { outcome, .. }
                if outcome.status.is_measured()
                    || matches!(outcome.status, StepStatus::Excluded(_)) =>
            {
                done.load.insert((outcome.context, outcome.point), *outcome);
            }
            JournalRecord::Prefill { .. }
            | JournalRecord::Decode { .. }
            | JournalRecord::Load { .. } => {}
        }
    }
    if !started {
        j.append(&JournalRecord::start(key, provenance.cloned()))?;
    }
    Ok((Some(j), done, contents.corrupt_tail))
}

/// Refuses a journal written in another layout, before anything else reads it.
fn check_version(path: &Path) -> Result<(), RunnerError> {
    let text = std::fs::read_to_string(path).map_err(|source| RunnerError::Journal {
        path: path.to_owned(),
        action: "read",
        source,
    })?;
    let Some(first) = text.lines().next() else {
        return Ok(());
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(first) else {
        return Ok(());
    };
    if value.get("record").is_none() {
        return Ok(());
    }
    match value
        .get("journal_version")
        .and_then(serde_json::Value::as_u64)
    {
        Some(v)
            if (u64::from(OLDEST_JOURNAL_VERSION)..=u64::from(JOURNAL_VERSION)).contains(&v) =>
        {
            Ok(())
        }
        found => Err(RunnerError::JournalVersion {
            path: path.to_owned(),
            found: found.and_then(|v| u32::try_from(v).ok()),
            supported: JOURNAL_VERSION,
        }),
    }
}

pub(crate) fn record(journal: &mut Option<Journal>, r: &JournalRecord) -> Result<(), RunnerError> {
    match journal {
        Some(j) => j.append(r),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use speedmatrix_units::{Api, PrefillMode, PromptSharing};

    use super::*;

    fn key() -> ResumeKey {
        ResumeKey {
            server: "http://127.0.0.1:8000".into(),
            served_model: "m".into(),
            engine_version: Some("0.32.0".into()),
            tokenizer: "bundled".into(),
            tokenizer_hash: "00".into(),
            api: Api::Completions,
            seed: 0,
            prompt_sharing: PromptSharing::Unique,
            extra_body_hash: "11".into(),
            contexts: vec![Tokens::ZERO],
            concurrencies: vec![Concurrency::ONE],
            prefill_contexts: vec![],
            prefill_repeats: 1,
            repeats: 1,
            prefill_mode: PrefillMode::Cold,
            window_ns: 1_000_000_000,
            max_output_tokens: Tokens::new(256),
            min_tokens: false,
            load: None,
            inject: None,
            workload: None,
        }
    }

    #[test]
    fn differences_name_every_field_that_changed() {
        let a = key();
        assert!(a.differences(&a).is_empty());
        let mut b = key();
        b.seed = 7;
        b.served_model = "other".into();
        b.prompt_sharing = PromptSharing::Shared;
        let fields: Vec<String> = a.differences(&b).into_iter().map(|d| d.field).collect();
        assert_eq!(fields, ["prompt_sharing", "seed", "served_model"]);
        let d = &a.differences(&b)[1];
        assert_eq!((d.journal.as_str(), d.now.as_str()), ("0", "7"));
    }

    /// Coverage-guided under `cargo xtask fuzz`: any bytes read as a journal
    /// keep a valid prefix, account for every byte and never panic.
    #[test]
    fn fuzz_journal() {
        bolero::check!().for_each(|data: &[u8]| {
            let c = journal_steps(data);
            if let Some(t) = &c.corrupt_tail {
                assert_eq!(t.offset + t.dropped_bytes, data.len() as u64);
                assert!(t.line >= 1 && t.line <= c.records.len() + 1);
            }
        });
    }

    #[test]
    fn the_fingerprint_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
