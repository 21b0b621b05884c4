//! The server under test: starting the embedded simulator, probing, and
//! reading the scheduler gauges and token counter engines export on `/metrics`.

use std::time::{Duration, Instant};

use speedmatrix_client::{Client, ClientConfig, ServerInfo};
use speedmatrix_engines::{SchedulerState, ServerCounters, generation_tokens};
use speedmatrix_units::Tokens;

use crate::RunnerError;
use crate::config::{RunConfig, Target};

/// Consecutive failed `/metrics` reads after which draining gives up.
const DRAIN_UNANSWERED_LIMIT: u32 = 5;

/// Longest wait for one liveness probe: a server that cannot list its models
/// in this time is not serving.
const ALIVE_PROBE_LIMIT: Duration = Duration::from_secs(10);

/// How waiting for the server to go idle ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drain {
    /// Nothing running or waiting (or no gauges to tell).
    Idle,
    /// Still busy when the limit ran out.
    Busy,
    /// `/metrics` stopped answering.
    Unreachable,
}

/// A connected server and what it said about itself.
pub(crate) struct Server {
    pub(crate) client: Client,
    pub(crate) info: ServerInfo,
    pub(crate) model: String,
    pub(crate) max_model_len: Option<Tokens>,
    /// Keeps the embedded simulator alive for the run.
    #[cfg(feature = "embedded")]
    pub(crate) embedded: Option<speedmatrix_sim::RunningSim>,
}

/// Running and waiting request counts at one instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gauges {
    pub(crate) at: Instant,
    pub(crate) running: f64,
    pub(crate) waiting: f64,
    /// Share of the KV cache in use, when the server says.
    pub(crate) kv_usage: Option<f64>,
}

impl Server {
    /// Starts the embedded simulator if asked, then probes the server.
    pub(crate) async fn connect(config: &RunConfig) -> Result<Server, RunnerError> {
        #[cfg(feature = "embedded")]
        let (url, embedded) = match &config.target {
            Target::Url(url) => (url.clone(), None),
            Target::Embedded(profile) => {
                let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
                let sim = speedmatrix_sim::SimServer::start((**profile).clone(), addr)
                    .await
                    .map_err(RunnerError::Simulator)?;
                (sim.url(), Some(sim))
            }
        };
        #[cfg(not(feature = "embedded"))]
        let Target::Url(url) = &config.target;
        #[cfg(not(feature = "embedded"))]
        let url = url.clone();
        let client_config = ClientConfig::new(url.clone())
            .api_key(config.api_key.clone())
            .timeouts(config.timeouts)
            .insecure(config.insecure);
        let client = Client::new(client_config).map_err(|source| RunnerError::Server {
            url: url.clone(),
            source,
        })?;
        let info = client.probe().await.map_err(|source| RunnerError::Server {
            url: url.clone(),
            source,
        })?;
        let (model, max_model_len) = choose_model(&info, config.model.as_deref())?;
        Ok(Server {
            client,
            info,
            model,
            max_model_len,
            #[cfg(feature = "embedded")]
            embedded,
        })
    }

    /// Whether the server exports an engine's scheduler gauges.
    pub(crate) fn has_gauges(&self) -> bool {
        self.info
            .metrics()
            .and_then(SchedulerState::from_metrics)
            .is_some()
    }

    /// Reads the running/waiting gauges now; `None` when `/metrics` is missing or fails.
    pub(crate) async fn gauges(&self) -> Option<Gauges> {
        let metrics = self.client.metrics().await.ok()??;
        let state = SchedulerState::from_metrics(&metrics)?;
        Some(Gauges {
            at: Instant::now(),
            running: state.running,
            waiting: state.waiting,
            kv_usage: ServerCounters::from_metrics(&metrics).kv_usage,
        })
    }

    /// Whether the server answers `/metrics` at all.
    pub(crate) fn has_metrics(&self) -> bool {
        self.info.metrics().is_some()
    }

    /// Whether the server still answers at all (used after failures to tell a
    /// broken cell from a dead server).
    pub(crate) async fn is_alive(&self) -> bool {
        for _ in 0..3 {
            // Any HTTP answer, an error status included, is a server still there.
            match tokio::time::timeout(ALIVE_PROBE_LIMIT, self.client.models()).await {
                Ok(Ok(_)) => return true,
                Ok(Err(e)) if e.status().is_some() => return true,
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        false
    }

    /// Waits until the server reports nothing running or waiting (bounded).
    /// Without gauges, waits a short fixed pause for aborts to land.
    pub(crate) async fn drain(&self, limit: Duration) -> Drain {
        if !self.has_gauges() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return Drain::Idle;
        }
        let deadline = Instant::now() + limit;
        let mut unanswered = 0;
        while Instant::now() < deadline {
            match self.gauges().await {
                Some(g) if g.running == 0.0 && g.waiting == 0.0 => return Drain::Idle,
                Some(_) => unanswered = 0,
                // A server that stopped answering has nothing to drain;
                // waiting out the limit would only delay the verdict.
                None => {
                    unanswered += 1;
                    if unanswered >= DRAIN_UNANSWERED_LIMIT {
                        return Drain::Unreachable;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Drain::Busy
    }

    /// Whether the server is the simulator in this process (whose CPU is the client's too).
    pub(crate) fn is_embedded(&self) -> bool {
        #[cfg(feature = "embedded")]
        return self.embedded.is_some();
        #[cfg(not(feature = "embedded"))]
        false
    }

    /// Stops the embedded simulator, if any.
    pub(crate) async fn shutdown(self) {
        #[cfg(feature = "embedded")]
        if let Some(sim) = self.embedded {
            sim.shutdown().await;
        }
    }
}

/// One reading of the server's output-token counter (summed over its label
/// sets), taken at the midpoint between sending the scrape and its answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CounterReading {
    pub(crate) at: Instant,
    pub(crate) tokens: f64,
}

/// One scrape of the server's counters at a window's edge: the output-token
/// counter that cross-checks the window, and the counters that explain it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EdgeReading {
    pub(crate) generation: Option<CounterReading>,
    pub(crate) counters: ServerCounters,
}

/// Reads the counters now; `None` when `/metrics` is missing or fails.
pub(crate) async fn read_counters(client: Client) -> Option<EdgeReading> {
    let sent = Instant::now();
    let metrics = client.metrics().await.ok()??;
    let answered = Instant::now();
    let at = sent + (answered - sent) / 2;
    Some(EdgeReading {
        generation: generation_tokens(&metrics).map(|tokens| CounterReading { at, tokens }),
        counters: ServerCounters::from_metrics(&metrics),
    })
}

fn choose_model(
    info: &ServerInfo,
    requested: Option<&str>,
) -> Result<(String, Option<Tokens>), RunnerError> {
    let models = info.models.as_deref().unwrap_or_default();
    match requested {
        Some(name) => match models.iter().find(|m| m.id == name) {
            Some(m) => Ok((m.id.clone(), m.max_model_len)),
            None if models.is_empty() => Ok((name.to_owned(), None)),
            None => Err(RunnerError::ModelNotFound {
                requested: name.to_owned(),
                available: models.iter().map(|m| m.id.clone()).collect(),
            }),
        },
        None => match models.first() {
            Some(m) => Ok((m.id.clone(), m.max_model_len)),
            None => Err(RunnerError::NoModel {
                url: info.base_url.clone(),
            }),
        },
    }
}
