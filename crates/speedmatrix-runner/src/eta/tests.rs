//! The estimator on recorded step timelines.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use speedmatrix_units::{Concurrency, Tokens};

use super::{Eta, scale, step_index};
use crate::outcome::{LoadPoint, StepId};
use crate::plan::StepEstimate;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// One moment of a replayed run.
#[derive(Debug)]
struct Sample {
    /// Seconds since the run began.
    at: f64,
    /// Steps ended or skipped before this moment.
    done: usize,
    /// Whether a step starts or ends at this moment.
    edge: bool,
    /// What the run really had left, in seconds.
    truth: f64,
    /// What the estimator said.
    eta: Option<Duration>,
    /// The plan's own time left.
    plan_left: Duration,
    /// The estimator's slowdown.
    slowdown: f64,
    /// The largest ratio of time taken to estimate among the steps started
    /// so far (at least 1): the slowdown, a mediant of them and 1, is at most this.
    worst: f64,
}

/// Replays a recorded run from its step timeline: step `i` was planned at
/// `estimates[i]` seconds and took `took[i]` (`None`: skipped, as an
/// excluded or journaled step is), one after another. Samples the ETA at the
/// start, at every step's start and end, and every `every` seconds inside a step.
fn replay(estimates: &[f64], took: &[Option<f64>], every: f64) -> Vec<Sample> {
    let t0 = Instant::now();
    let total: f64 = took.iter().flatten().sum();
    let planned: Vec<Duration> = estimates.iter().map(|&e| secs(e)).collect();
    let mut eta = Eta::new(&planned);
    let mut samples = Vec::new();
    let mut worst = 1.0_f64;
    let mut at = 0.0;
    let mut look = |eta: &Eta, at: f64, done: usize, worst: f64, edge: bool| {
        let now = t0 + secs(at);
        samples.push(Sample {
            at,
            done,
            edge,
            truth: total - at,
            eta: eta.remaining(now),
            plan_left: eta.remaining_plan(now),
            slowdown: eta.slowdown(now),
            worst,
        });
    };
    look(&eta, at, 0, worst, true);
    for (i, t) in took.iter().enumerate() {
        let Some(t) = *t else {
            eta.step_skipped(i);
            look(&eta, at, i + 1, worst, true);
            continue;
        };
        let ratio = |elapsed: f64| match estimates[i] {
            e if e > 0.0 => elapsed / e,
            _ if elapsed > 0.0 => f64::INFINITY,
            _ => 1.0,
        };
        eta.step_started(i, t0 + secs(at));
        look(&eta, at, i, worst, true);
        let mut inside = every;
        while inside < t {
            look(&eta, at + inside, i, worst.max(ratio(inside)), false);
            inside += every;
        }
        at += t;
        worst = worst.max(ratio(t));
        eta.step_finished(i, t0 + secs(at));
        look(&eta, at, i + 1, worst, true);
    }
    samples
}

fn shown(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_owned(), |d| format!("{:.1}s", d.as_secs_f64()))
}

/// The run: 2 prefill points and 9 decode cells (contexts 0/1K/4K ×
/// 1/4/16 streams, 8 s windows), planned at 1m 44s by the plan's own
/// estimates (prefill at 8,000 tok/s, warm-up + window + 2 s per cell), done
/// in 78 s. A per-step average showed "10/11 steps ETA 7m" on the last step.
const PLANNED_78: [f64; 11] = [
    0.512, 1.024, 10.0, 10.0, 10.0, 10.128, 10.512, 12.048, 10.512, 12.048, 18.192,
];
const TOOK_78: [f64; 11] = [0.7, 1.1, 8.3, 8.3, 8.4, 8.3, 8.4, 8.6, 8.3, 8.5, 9.1];

#[test]
fn an_unequal_78_s_run_counts_each_step_by_its_own_estimate() {
    let took: Vec<Option<f64>> = TOOK_78.iter().map(|&t| Some(t)).collect();
    let samples = replay(&PLANNED_78, &took, 1.0);
    let end = samples.last().unwrap();
    assert_eq!((end.done, end.eta), (11, None));
    assert!((end.at - 78.0).abs() < 1e-6);
    // The ETA as each step ends (and the next starts), as the bar shows it.
    let mut printed = None;
    for s in samples.iter().filter(|s| s.edge) {
        if printed.replace(s.done) == Some(s.done) {
            continue;
        }
        let truth = format!("{:.1}s", s.truth);
        let eta = shown(s.eta);
        eprintln!(
            "{:>5.1}s {:>2}/11 ETA {eta:>6} (really {truth})",
            s.at, s.done
        );
    }
    let first = samples[0].eta.unwrap();
    assert!(first.abs_diff(secs(104.976)) < Duration::from_millis(1));
    for s in samples.iter().filter(|s| s.done < 11) {
        let eta = s.eta.unwrap().as_secs_f64();
        assert!(eta >= 1.0, "never 0 s before the end: {s:?}");
        // The plan is a quarter too slow (more so for the cells with long
        // warm-ups still to come): the two short prefill points that took
        // longer than planned move the ETA by a few % only...
        let plan = s.plan_left.as_secs_f64();
        assert!(eta <= 1.05 * plan + 1.0, "{s:?}");
        // ...and once a cell ended, it is nearer the truth than the plan.
        if s.at >= 10.0 {
            assert!((eta - s.truth).abs() <= (plan - s.truth).abs(), "{s:?}");
        }
        if s.done == 10 {
            assert!(eta <= 15.0, "the last step is not minutes: {s:?}");
        }
    }
}

#[test]
fn a_run_twice_as_slow_as_planned_grows_its_eta_in_proportion() {
    let planned = [10.0; 10];
    let took = [Some(20.0); 10];
    let samples = replay(&planned, &took, 0.5);
    for s in &samples {
        let Some(eta) = s.eta else {
            assert_eq!(s.done, 10);
            continue;
        };
        assert!(eta >= Eta::FLOOR, "{s:?}");
        let twice = scale(s.plan_left, 2.0).max(Eta::FLOOR);
        assert!(eta <= twice + Duration::from_millis(1), "{s:?}");
    }
    // Halfway: 100 s of plan left would really take 200 s; the ETA has grown
    // to most of that, and stays within 2× the plan.
    let half = samples
        .iter()
        .find(|s| s.done == 5 && s.plan_left == secs(50.0))
        .unwrap();
    let eta = half.eta.unwrap().as_secs_f64();
    assert!((85.0..=100.0).contains(&eta), "{half:?}");
}

#[test]
fn skipped_steps_take_no_time_and_are_no_evidence_of_speed() {
    let planned = [10.0; 6];
    let took = [None, None, None, Some(10.0), Some(10.0), Some(10.0)];
    let samples = replay(&planned, &took, 1.0);
    let after_skips = samples.iter().find(|s| s.done == 3).unwrap();
    assert_eq!(after_skips.eta, Some(secs(30.0)));
    assert_eq!(after_skips.slowdown, 1.0);
    for s in samples.iter().filter(|s| (3..6).contains(&s.done)) {
        let eta = s.eta.unwrap().as_secs_f64();
        assert!((eta - s.truth).abs() < 1e-6 || eta == 1.0, "{s:?}");
    }
    // A step that ends without having been seen to start (a prefill point
    // measured on a decode cell's warm-up) counts as skipped too.
    let t0 = Instant::now();
    let mut eta = Eta::new(&[secs(10.0), secs(10.0)]);
    eta.step_finished(0, t0 + secs(60.0));
    assert_eq!(eta.slowdown(t0 + secs(60.0)), 1.0);
    assert_eq!(eta.remaining(t0 + secs(60.0)), Some(secs(10.0)));
}

#[test]
fn an_empty_plan_stray_indices_and_a_clock_going_back_are_harmless() {
    let t0 = Instant::now();
    for mut eta in [Eta::new(&[]), Eta::default()] {
        eta.step_started(3, t0);
        eta.step_finished(3, t0);
        eta.step_skipped(usize::MAX);
        assert!(eta.is_empty() && eta.is_done());
        assert_eq!(eta.remaining(t0), None);
        assert_eq!(eta.slowdown(t0), 1.0);
    }
    let mut eta = Eta::new(&[secs(10.0), secs(10.0)]);
    eta.step_started(0, t0 + secs(10.0));
    assert_eq!(eta.remaining(t0), Some(secs(20.0)), "no time has passed");
    eta.step_finished(0, t0 + secs(5.0));
    let left = eta.remaining(t0).unwrap();
    assert!(left >= Eta::FLOOR && left <= secs(10.0), "{left:?}");
    let mut huge = Eta::new(&[Duration::MAX, Duration::MAX]);
    huge.step_started(0, t0);
    huge.step_finished(0, t0 + Duration::from_secs(u64::from(u32::MAX)));
    assert!(huge.remaining(t0).unwrap() > secs(1e15));
}

#[test]
fn a_step_past_its_estimate_keeps_a_floor_and_grows_what_follows() {
    let t0 = Instant::now();
    let mut eta = Eta::new(&[secs(10.0), secs(10.0)]);
    eta.step_started(0, t0);
    eta.step_finished(0, t0 + secs(10.0));
    eta.step_started(1, t0 + secs(10.0));
    // The last step runs 3× its estimate: never 0 s, never more than a floor.
    for t in [19.0, 20.0, 25.0, 40.0] {
        assert_eq!(eta.remaining(t0 + secs(t)), Some(Eta::FLOOR), "{t}");
    }
    let mut eta = Eta::new(&[secs(10.0), secs(10.0), secs(10.0)]);
    eta.step_started(0, t0);
    // The first step drags: what follows is expected to drag as well.
    let at = |t: f64| eta.remaining(t0 + secs(t)).unwrap();
    assert_eq!(at(10.0), secs(20.0));
    assert!(at(30.0) > secs(25.0), "{:?}", at(30.0));
    assert!(at(30.0) < at(60.0));
}

#[test]
fn a_knee_search_counts_every_try_against_its_context() {
    let burst = |n| LoadPoint::Burst {
        requests: Concurrency::new(n).unwrap(),
    };
    let load = |k, n| StepId::Load {
        context: Tokens::kibi(k),
        point: burst(n),
    };
    let steps = [load(1, 1), load(4, 1)].map(|step| StepEstimate {
        step,
        estimate: secs(10.0),
    });
    assert_eq!(step_index(&steps, load(4, 1)), Some(1));
    assert_eq!(step_index(&steps, load(1, 16)), Some(0));
    let prefill = StepId::Prefill {
        context: Tokens::kibi(1),
    };
    assert_eq!(step_index(&steps, prefill), None);
    let t0 = Instant::now();
    let mut eta = Eta::new(&[secs(10.0), secs(10.0)]);
    eta.step_started(0, t0);
    eta.step_finished(0, t0 + secs(10.0));
    eta.step_started(0, t0 + secs(10.0));
    eta.step_finished(0, t0 + secs(30.0));
    // 30 s against 10 s planned, damped by the prior (a tenth of the plan,
    // 2 s): (30 + 2) / (10 + 2).
    let slowdown = eta.slowdown(t0 + secs(30.0));
    assert!((slowdown - 32.0 / 12.0).abs() < 1e-9, "{slowdown}");
}

/// A recorded step: its estimate and what it took (`None`: skipped), in ms.
fn timeline() -> impl Strategy<Value = Vec<(u64, Option<u64>)>> {
    let step = (
        prop_oneof![Just(0_u64), 0..120_000_u64],
        prop_oneof![1 => Just(None), 4 => (0..300_000_u64).prop_map(Some)],
    );
    proptest::collection::vec(step, 0..12)
}

proptest! {
    #[test]
    fn the_eta_is_never_zero_before_the_end_nor_past_the_slowdown_times_the_plan(
        steps in timeline(),
    ) {
        let estimates: Vec<f64> = steps.iter().map(|(e, _)| *e as f64 / 1000.0).collect();
        let took: Vec<Option<f64>> =
            steps.iter().map(|(_, t)| t.map(|t| t as f64 / 1000.0)).collect();
        for s in replay(&estimates, &took, 1.7) {
            prop_assert_eq!(s.eta.is_some(), s.done < steps.len(), "{:?}", s);
            prop_assert!((Eta::MIN_SLOWDOWN..=Eta::MAX_SLOWDOWN).contains(&s.slowdown));
            let Some(eta) = s.eta else { continue };
            prop_assert!(eta >= Eta::FLOOR, "{:?}", s);
            let bound = scale(s.plan_left, s.slowdown).max(Eta::FLOOR);
            prop_assert!(eta <= bound, "{:?}", s);
            // The slowdown is a mediant of 1 and every step's ratio: a
            // bound of its own (the test's times are rounded to the ns).
            let worst = s.worst.min(Eta::MAX_SLOWDOWN) * (1.0 + 1e-6);
            let bound = scale(s.plan_left, worst).max(Eta::FLOOR);
            prop_assert!(eta <= bound + Duration::from_micros(1), "{:?}", s);
        }
    }
}
