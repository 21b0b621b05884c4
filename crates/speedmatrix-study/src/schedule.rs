//! Points run one after another, or several at once (`parallel`), each on its own port with
//! GPUs no other running point holds. The points' futures are polled together in the study's
//! task (their measurement streams are tasks of their own on the shared runtime); the journal
//! has one writer, this loop, which appends each point's record as it ends: in the order points
//! end, which with several at once may differ from the study's.

use std::collections::{BTreeSet, VecDeque};

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use speedmatrix_runner::Journal;

use crate::attempt::{Attempt, Slot};
use crate::gpus::GpuPool;
use crate::server::free_port;
use crate::{Point, PointOutcome, PointRecord, StudyError};

/// Tries at a port no running point holds: the system hands out a just-freed port rarely.
const PORT_TRIES: usize = 20;

/// Runs `pending` (each with its index in the study) `attempt.settings.slots()` at a time,
/// journaling each record as its point ends; returns the records with their indices. Once the
/// study is cancelled no point starts, and the running ones stop their servers and end as
/// interrupted (never journaled). An error returns at once: the running points' futures are
/// dropped, which kills their servers' process groups.
pub(crate) async fn run_points(
    attempt: Attempt<'_>,
    pending: Vec<(usize, &Point)>,
    mut gpus: Option<GpuPool>,
    journal: &mut Journal,
) -> Result<Vec<(usize, PointRecord)>, StudyError> {
    let slots = attempt.settings.slots();
    let mut queue: VecDeque<(usize, &Point)> = pending.into();
    let mut running = FuturesUnordered::new();
    let mut ports = BTreeSet::new();
    let mut records = Vec::new();
    loop {
        while running.len() < slots && !attempt.cancel.is_cancelled() {
            let Some(&(index, point)) = queue.front() else {
                break;
            };
            let held = match gpus.as_mut().map(GpuPool::take) {
                None => Vec::new(),
                Some(Some(held)) => held,
                // No more points than the GPUs allow run at once (StudySettings::gpu_pool), so
                // a point waits here only for a running one to give its GPUs back.
                Some(None) if !running.is_empty() => break,
                Some(None) => {
                    return Err(StudyError::Invalid(
                        "--gpus: no GPU is free for a point, and none is running".into(),
                    ));
                }
            };
            queue.pop_front();
            let port = unused_port(&ports)?;
            ports.insert(port);
            let slot = Slot {
                index,
                point,
                port,
                gpus: held,
            };
            running.push(async move {
                let result = attempt.run(&slot).await;
                (slot, result)
            });
        }
        let Some((slot, result)) = running.next().await else {
            break;
        };
        ports.remove(&slot.port);
        if let Some(pool) = gpus.as_mut() {
            pool.give_back(&slot.gpus);
        }
        let ended = result?;
        attempt.ended(slot.index, &ended);
        if ended.record.outcome != PointOutcome::Interrupted {
            journal.append(&ended.record).map_err(StudyError::Run)?;
        }
        records.push((slot.index, ended.record));
    }
    Ok(records)
}

/// A free port that no running point's server was given.
fn unused_port(taken: &BTreeSet<u16>) -> Result<u16, StudyError> {
    let mut port = free_port()?;
    for _ in 1..PORT_TRIES {
        if !taken.contains(&port) {
            break;
        }
        port = free_port()?;
    }
    Ok(port)
}
