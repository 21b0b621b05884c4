//! A cell's result from its recorded requests: the failure rule (Partial or
//! Error), token estimates and their calibration, the window's numbers and
//! what the cell has to tell.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use speedmatrix_metrics::{
    GaugeSample, MetricsError, Outcome, Timestamp, Window, WindowMetrics, average_gauges,
    window_metrics,
};
use tokio_util::sync::CancellationToken;

use super::streams::SlotRecord;
use super::{DecodeCellSpec, DecodeOutcome, InjectRecord, failed};
use crate::Observer;
use crate::estimate::{calibration_requests, tokenize_texts};
use crate::observer::{Event, StepPhase};
use crate::outcome::{
    CellOutcome, Failure, FailureKind, Interference, Latency, Notice, StepStatus, TokenCounting,
    WindowResult,
};
use crate::request::Recorded;
use crate::server::{Gauges, Server};

/// What summarizing a cell needs to know besides its requests.
pub(super) struct Cell<'s, 'a> {
    pub(super) spec: &'s DecodeCellSpec<'a>,
    pub(super) epoch: Instant,
    pub(super) window_opened: bool,
    pub(super) queueing: bool,
    pub(super) inject: Option<InjectRecord>,
}

impl Cell<'_, '_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn summarize(
        &self,
        server: &Server,
        observer: &dyn Observer,
        cancel: &CancellationToken,
        window: Window,
        recorded: Vec<SlotRecord>,
        gauges: &[Gauges],
        mut notices: Vec<Notice>,
    ) -> DecodeOutcome {
        let spec = self.spec;
        let retried: u32 = recorded.iter().map(|r| r.record.retries).sum();
        if retried > 0 {
            notices.push(Notice::Retried {
                step: spec.step,
                times: retried,
                per_request: crate::request::MAX_RETRIES,
            });
        }
        let unexpected_content_type = recorded
            .iter()
            .find_map(|r| r.record.unexpected_content_type.clone());
        let health = Health::of(&recorded, window, self.window_opened);
        if let Some(status) = health.error() {
            let mut out = failed(spec, status, notices);
            out.unexpected_content_type = unexpected_content_type;
            return out;
        }
        let mut recorded: Vec<Recorded> = recorded.into_iter().map(|r| r.record).collect();
        recorded = tokenize_texts(spec.tokenizer, recorded).await;
        let metrics_failed = |e: MetricsError, notices| {
            let status = StepStatus::Failed {
                failure: Failure {
                    kind: FailureKind::Metrics,
                    message: e.to_string(),
                },
                failed: 1,
                good: health.good,
            };
            failed(spec, status, notices)
        };
        let mut m = match metrics_of(&recorded, window) {
            Ok(m) => m,
            Err(e) => return metrics_failed(e, notices),
        };
        // The cell's own finished requests calibrate estimates when they can;
        // else a few requests run to their end now, after the window.
        if m.token_count.calibration.is_some_and(|c| c.requests < 2) && !cancel.is_cancelled() {
            observer.event(Event::Phase {
                step: spec.step,
                phase: StepPhase::Calibrating,
            });
            let extra = calibration_requests(
                server,
                &spec.shape,
                &spec.prompts,
                spec.concurrency,
                self.epoch,
                cancel,
            )
            .await;
            recorded.extend(tokenize_texts(spec.tokenizer, extra).await);
            m = match metrics_of(&recorded, window) {
                Ok(again) => again,
                Err(e) => return metrics_failed(e, notices),
            };
        }
        let mut outcome = self.measured(&recorded, &m, gauges, notices);
        if let Some(status) = health.partial() {
            outcome.cell.status = status;
        }
        outcome.unexpected_content_type = unexpected_content_type;
        outcome
    }

    fn measured(
        &self,
        recorded: &[Recorded],
        m: &WindowMetrics,
        gauges: &[Gauges],
        mut notices: Vec<Notice>,
    ) -> DecodeOutcome {
        let spec = self.spec;
        let step = spec.step;
        let samples: Vec<GaugeSample> = gauges
            .iter()
            .map(|g| GaugeSample {
                at: Timestamp::from_instant(self.epoch, g.at),
                running: g.running,
                waiting: g.waiting,
            })
            .collect();
        let averages = average_gauges(&samples, m.window).ok().flatten();
        let mut queueing = self.queueing;
        if averages.is_some_and(|a| a.shows_queueing(spec.concurrency.get())) {
            queueing = true;
            notices.push(Notice::QueueingDuringWindow { step });
        }
        let mismatches = recorded
            .iter()
            .filter(|r| {
                r.prompt_tokens_reported
                    .is_some_and(|p| p != spec.expected_prompt_tokens)
            })
            .count() as u64;
        if mismatches > 0 {
            notices.push(Notice::PromptMismatch {
                step,
                requests: mismatches,
                sent: spec.expected_prompt_tokens,
            });
        }
        let finish_reasons = finish_reasons(recorded);
        if finish_reasons.contains_key("stop") {
            notices.push(Notice::IgnoreEosIgnored { step });
        }
        if let Some(c) = &m.token_count.calibration {
            notices.push(Notice::Estimated {
                step,
                share: m.token_count.estimated_share,
                method: c.method,
                calibration_requests: c.requests,
                finished_requests: c.finished,
                factor: c.factor,
                uncertainty: m.token_count.relative_uncertainty(),
                sample_widening: c.sample_widening,
            });
        }
        let latency = |s: Option<speedmatrix_metrics::Summary<Duration>>| {
            s.map(|s| Latency {
                p50: s.p50,
                p90: s.p90,
                p99: s.p99,
            })
        };
        let (Some(ttft), Some(time_between_tokens)) =
            (latency(m.ttft), latency(m.time_between_tokens))
        else {
            let status = StepStatus::Failed {
                failure: Failure {
                    kind: FailureKind::NoTokens,
                    message: "no output token arrived inside the measurement window".into(),
                },
                failed: 1,
                good: recorded.len() as u64,
            };
            return failed(spec, status, notices);
        };
        let window = WindowResult {
            total_tokens_per_s: m.total_output_rate.get(),
            per_request_tokens_per_s: m.per_request_rate.map_or(0.0, |r| r.get()),
            ttft,
            time_between_tokens,
            average_active_requests: m.average_active_requests,
            completed_requests: m.completed_requests,
            output_tokens: m.output_tokens,
            measured: m.window.duration(),
            queueing_detected: queueing,
            prompt_token_mismatches: mismatches,
            token_count: TokenCounting::of(&m.token_count, m.token_source),
            finish_reasons,
            server_counter: None,
            client: None,
            telemetry: None,
            output_rate_series: m.output_rate_series.iter().map(|r| r.get()).collect(),
            interference: self
                .inject
                .as_ref()
                .map(|probe| interference(probe, recorded, m, self.epoch)),
            intervals: Some(intervals(&m.intervals)),
            repeats: None,
        };
        DecodeOutcome {
            cell: CellOutcome {
                context: spec.context,
                concurrency: spec.concurrency,
                status: StepStatus::Measured,
                window: Some(window),
                notices,
            },
            first_warmup: None,
            unexpected_content_type: None,
        }
    }
}

/// The probe's figures from the streams' token curves: the window's rate
/// before it, and the rates over its prefill and the settle time after.
fn interference(
    probe: &InjectRecord,
    recorded: &[Recorded],
    m: &WindowMetrics,
    epoch: Instant,
) -> Interference {
    let ttft = |r: &Recorded| {
        r.error
            .is_none()
            .then(|| speedmatrix_metrics::request_metrics(&r.timeline).ok()?.ttft)?
    };
    let failure = probe
        .loaded
        .error
        .clone()
        .or_else(|| probe.alone.error.clone());
    let prompt_tokens = probe.tokens;
    let rate_before = m.total_output_rate.get();
    let sent = probe.loaded.timeline.sent_at;
    let first = ttft(&probe.loaded).and_then(|d| sent.checked_add(d));
    let streams: Vec<&Recorded> = recorded.iter().collect();
    let over = |from: Timestamp, to: Timestamp| {
        let w = Window::new(from, to.saturating_since(from)).ok()?;
        window_metrics(&streams, w).ok()
    };
    let settle_end = Timestamp::from_instant(epoch, probe.settle_end);
    let during = first.and_then(|f| over(sent, f));
    let after = first.and_then(|f| over(f, settle_end));
    let during_s = first.map_or(0.0, |f| f.saturating_since(sent).as_secs_f64());
    let produced = during
        .as_ref()
        .map_or(0.0, |d| d.total_output_rate.get() * during_s);
    let tokens_lost = (rate_before * during_s - produced).max(0.0);
    let stall = if rate_before > 0.0 {
        Duration::from_secs_f64(tokens_lost / rate_before)
    } else {
        Duration::ZERO
    };
    Interference {
        prompt_tokens,
        ttft_alone: ttft(&probe.alone),
        ttft_under_load: ttft(&probe.loaded),
        rate_before,
        rate_during: during.as_ref().map_or(0.0, |d| d.total_output_rate.get()),
        rate_after: after.as_ref().map_or(0.0, |a| a.total_output_rate.get()),
        itl_during: during
            .as_ref()
            .and_then(|d| d.time_between_tokens)
            .map(|s| Latency {
                p50: s.p50,
                p90: s.p90,
                p99: s.p99,
            }),
        tokens_lost,
        stall,
        timeline: timeline(&streams, sent, settle_end),
        failure,
    }
}

/// Lead of the interference timeline before the injected send.
const TIMELINE_LEAD: Duration = Duration::from_secs(1);
/// Parts of the interference timeline.
const TIMELINE_PARTS: u32 = 60;
/// Narrowest part: a part shorter than a few token gaps is noise.
const TIMELINE_MIN_PART: Duration = Duration::from_millis(20);

/// The streams' total tok/s in equal parts around the injected send.
fn timeline(streams: &[&Recorded], sent: Timestamp, end: Timestamp) -> Vec<(f64, f64)> {
    let from = Timestamp::from_offset(sent.offset().saturating_sub(TIMELINE_LEAD));
    let span = end.saturating_since(from);
    let part = (span / TIMELINE_PARTS).max(TIMELINE_MIN_PART);
    let mut out = Vec::new();
    let mut at = from;
    // Whole parts only: the streams are cancelled at the end, so a part
    // reaching past it would show a drop that is ours.
    while let Some(next) = at.checked_add(part).filter(|n| *n <= end) {
        let Some(m) = Window::new(at, part)
            .ok()
            .and_then(|w| window_metrics(streams, w).ok())
        else {
            break;
        };
        let offset_ms = (at.offset().as_secs_f64() - sent.offset().as_secs_f64()) * 1e3;
        out.push((offset_ms, m.total_output_rate.get()));
        at = next;
    }
    out
}

fn metrics_of(recorded: &[Recorded], window: Window) -> Result<WindowMetrics, MetricsError> {
    window_metrics(recorded, window)
}

fn finish_reasons(recorded: &[Recorded]) -> BTreeMap<String, u64> {
    let mut reasons = BTreeMap::new();
    for r in recorded {
        if let Outcome::Finished { finish_reason } = &r.timeline.outcome {
            let key = finish_reason.clone().unwrap_or_else(|| "none".into());
            *reasons.entry(key).or_insert(0u64) += 1;
        }
    }
    reasons
}

/// Failed and good requests of a cell, and whether any stream slot ran the
/// whole window without a failure.
struct Health {
    failed: u64,
    good: u64,
    kinds: BTreeMap<FailureKind, u64>,
    first: Option<Failure>,
    clean_slot: bool,
}

impl Health {
    fn of(recorded: &[SlotRecord], w: Window, window_opened: bool) -> Health {
        let mut kinds = BTreeMap::new();
        let mut first = None;
        let mut failed = 0;
        for r in recorded {
            if let Some(f) = &r.record.error {
                failed += 1;
                *kinds.entry(f.kind).or_insert(0) += 1;
                first.get_or_insert_with(|| f.clone());
            }
        }
        let slots: BTreeSet<usize> = recorded.iter().map(|r| r.slot).collect();
        let clean_slot = window_opened
            && slots.iter().any(|&s| {
                let mine = || recorded.iter().filter(move |r| r.slot == s);
                let in_flight_at = |t: Timestamp| {
                    mine().any(|r| {
                        r.record.error.is_none()
                            && r.record.timeline.sent_at <= t
                            && r.record.timeline.ended_at >= t
                    })
                };
                let failed_inside = mine().any(|r| {
                    r.record.error.is_some()
                        && r.record.timeline.ended_at > w.start()
                        && r.record.timeline.sent_at < w.end()
                });
                !failed_inside && in_flight_at(w.start()) && in_flight_at(w.end())
            });
        Health {
            failed,
            good: recorded.len() as u64 - failed,
            kinds,
            first,
            clean_slot,
        }
    }

    /// The cell's status when requests failed and no stream ran the whole window.
    fn error(&self) -> Option<StepStatus> {
        if self.failed == 0 || self.clean_slot {
            return None;
        }
        Some(StepStatus::Failed {
            failure: self.first.clone()?,
            failed: self.failed,
            good: self.good,
        })
    }

    /// The partial status when requests failed but a stream ran the whole window.
    fn partial(&self) -> Option<StepStatus> {
        let first = self.first.clone().filter(|_| self.clean_slot)?;
        Some(StepStatus::Partial {
            failed: self.failed,
            good: self.good,
            kinds: self.kinds.clone(),
            first,
        })
    }
}

/// The window's intervals in the report's units (durations in milliseconds).
fn intervals(i: &speedmatrix_metrics::WindowIntervals) -> speedmatrix_report::DecodeIntervals {
    let ms = |x: Option<speedmatrix_units::Interval>| x.and_then(|x| x.scaled(1_000.0));
    speedmatrix_report::DecodeIntervals {
        batches: u32::try_from(i.batches).unwrap_or(u32::MAX),
        total_tokens_per_s: i.total_output_rate,
        per_request_tokens_per_s: i.per_request_rate,
        ttft_p50_ms: ms(i.ttft_p50),
        time_between_tokens_p50_ms: ms(i.time_between_tokens_p50),
    }
}
