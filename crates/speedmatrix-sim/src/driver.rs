//! The engine task: one tokio task that owns the [`Engine`], steps it in (scaled) real time and
//! hands each request's tokens to that request's channel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::engine::{Engine, Event, FinishReason, NewRequest, ReqId, Snapshot, Usage};
use crate::profile::Profile;

/// What a request's channel carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    Token(u32),
    Done(FinishReason, Usage),
}

enum Command {
    Add(NewRequest, mpsc::UnboundedSender<Output>),
    Abort(ReqId),
}

/// How far behind its schedule the engine may fall and still catch up. A
/// loaded test machine starves the driver for tens of milliseconds at a time;
/// catching up keeps the tokens per second of wall time exact (the tests'
/// ground truth), at the price of a short burst. Past this the schedule
/// restarts from now, so a long stop never turns into a flood.
const MAX_LAG: Duration = Duration::from_millis(500);

/// The server's handle on the engine task.
#[derive(Debug, Clone)]
pub(crate) struct EngineHandle {
    commands: mpsc::UnboundedSender<Command>,
    snapshot: Arc<Mutex<Snapshot>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Add(req, _) => write!(f, "Add({})", req.id),
            Command::Abort(id) => write!(f, "Abort({id})"),
        }
    }
}

impl EngineHandle {
    /// Starts the engine task; it ends when `shutdown` changes or every handle is gone.
    pub(crate) fn spawn(
        profile: &Profile,
        output_vocab: Arc<[u32]>,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        let engine = Engine::new(profile, output_vocab);
        let snapshot = Arc::new(Mutex::new(engine.snapshot()));
        let pace = Pace::new(profile);
        tokio::spawn(run(engine, rx, snapshot.clone(), pace, shutdown));
        EngineHandle { commands, snapshot }
    }

    /// Queues a request; its outputs arrive on the returned channel.
    pub(crate) fn submit(&self, req: NewRequest) -> Option<mpsc::UnboundedReceiver<Output>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.commands.send(Command::Add(req, tx)).ok()?;
        Some(rx)
    }

    /// Aborts a request (no-op when it already finished).
    pub(crate) fn abort(&self, id: ReqId) {
        let _ = self.commands.send(Command::Abort(id));
    }

    /// The engine's state after its latest step.
    pub(crate) fn snapshot(&self) -> Snapshot {
        *self.snapshot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Turns virtual step durations into wall-clock ones.
#[derive(Debug, Clone, Copy)]
struct Pace {
    free_running: bool,
    time_scale: f64,
}

impl Pace {
    fn new(profile: &Profile) -> Self {
        Pace {
            free_running: profile.free_running,
            time_scale: profile.time_scale,
        }
    }

    fn wall(self, step: Duration) -> Duration {
        if self.free_running {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(step.as_secs_f64() / self.time_scale)
                .unwrap_or(Duration::MAX)
        }
    }
}

struct Task {
    engine: Engine,
    channels: HashMap<ReqId, mpsc::UnboundedSender<Output>>,
    snapshot: Arc<Mutex<Snapshot>>,
}

impl Task {
    fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::Add(req, tx) => {
                self.channels.insert(req.id, tx);
                self.engine.add(req);
            }
            Command::Abort(id) => {
                self.channels.remove(&id);
                self.engine.abort(id);
            }
        }
    }

    fn deliver(&mut self, events: Vec<Event>) {
        for ev in events {
            let (id, out) = match ev {
                Event::Token { id, token } => (id, Output::Token(token)),
                Event::Finished { id, reason, usage } => (id, Output::Done(reason, usage)),
            };
            let gone = self
                .channels
                .get(&id)
                .is_none_or(|tx| tx.send(out).is_err());
            if matches!(out, Output::Done(..)) {
                self.channels.remove(&id);
            } else if gone {
                // Nobody is listening any more: free the blocks now.
                self.channels.remove(&id);
                self.engine.abort(id);
            }
        }
    }

    fn publish(&self) {
        *self.snapshot.lock().unwrap_or_else(PoisonError::into_inner) = self.engine.snapshot();
    }
}

async fn run(
    engine: Engine,
    mut rx: mpsc::UnboundedReceiver<Command>,
    snapshot: Arc<Mutex<Snapshot>>,
    pace: Pace,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut task = Task {
        engine,
        channels: HashMap::new(),
        snapshot,
    };
    let mut deadline = Instant::now();
    loop {
        while let Ok(cmd) = rx.try_recv() {
            task.apply(cmd);
        }
        if task.engine.is_idle() {
            task.publish();
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(cmd) => task.apply(cmd),
                    None => return,
                },
                _ = shutdown.changed() => return,
            }
            deadline = Instant::now();
            continue;
        }
        let Some(out) = task.engine.step() else {
            // Waiting requests that cannot be scheduled yet; wait for a command.
            task.publish();
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(cmd) => task.apply(cmd),
                    None => return,
                },
                _ = shutdown.changed() => return,
            }
            continue;
        };
        let wall = pace.wall(out.duration);
        if wall.is_zero() {
            tokio::task::yield_now().await;
        } else {
            deadline += wall;
            let now = Instant::now();
            if deadline + MAX_LAG < now {
                deadline = now;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {}
                _ = shutdown.changed() => return,
            }
        }
        task.deliver(out.events);
        task.publish();
    }
}
