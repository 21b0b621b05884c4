//! The plan: which prefill points and decode cells run, which are excluded
//! and why, and how long the run should take.

use std::time::Duration;

use speedmatrix_capacity::{
    CapacityGrid, CellVerdict, GridSpec, KvPool, MeasuredCapacity, ServerLimits, TokenPool,
    capacity_grid,
};
use speedmatrix_units::{Concurrency, Tokens};

use crate::RunnerError;
use crate::config::{CapacityHints, LoadMode, MatrixSpec, RateLength};
use crate::outcome::{Exclusion, LoadPoint, StepId, TooLong};

/// Where the capacity that decides the cells came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapacitySourceKind {
    /// The server's own figure (vLLM `/metrics` `vllm:cache_config_info`).
    Measured,
    /// Predicted offline from config.json, GPU and flags.
    Predicted,
    /// Stated by the user (`--kv-capacity-tokens`).
    Given,
    /// Nobody knows: every cell runs and queueing at the server is watched for.
    Unknown,
}

/// The capacity decision for the run.
#[derive(Debug, Clone)]
pub struct CapacityPlan {
    /// Where the deciding figure came from.
    pub source: CapacitySourceKind,
    /// The pool that decides cells, when known.
    pub pool: Option<KvPool>,
    /// The pool in tokens, when known.
    pub pool_tokens: Option<Tokens>,
    /// The server's figure, when it reported one.
    pub measured_tokens: Option<Tokens>,
    /// The offline prediction, when one was given.
    pub predicted_tokens: Option<Tokens>,
    /// Which engine release's rules the prediction followed, and why.
    pub predicted_for: Option<String>,
}

/// One sustained-decode cell of the plan.
#[derive(Debug, Clone)]
pub struct PlannedCell {
    /// Context length of every stream's prompt.
    pub context: Tokens,
    /// Streams kept busy at once.
    pub concurrency: Concurrency,
    /// `Some` when the cell is not run.
    pub excluded: Option<Exclusion>,
}

/// One burst or rate cell of the plan.
#[derive(Debug, Clone)]
pub struct PlannedLoad {
    /// Context length of every request's prompt.
    pub context: Tokens,
    /// The burst's size or the rate.
    pub point: LoadPoint,
    /// `Some` when the cell is not run.
    pub excluded: Option<Exclusion>,
}

/// The whole plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Capacity decision.
    pub capacity: CapacityPlan,
    /// Prefill contexts and whether each is excluded.
    pub prefill: Vec<(Tokens, Option<Exclusion>)>,
    /// Decode cells in run order (context-major, as the seed page lists them).
    pub cells: Vec<PlannedCell>,
    /// Burst or rate cells in run order (context-major), in those modes.
    pub load: Vec<PlannedLoad>,
    /// Every step in run order (prefill points, decode cells, load cells)
    /// with its rough duration; an excluded step's is zero.
    pub steps: Vec<StepEstimate>,
    /// A rough duration estimate for the whole run: the sum of the steps'.
    pub estimated: Duration,
}

/// One step of the plan and roughly how long it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepEstimate {
    /// Which step.
    pub step: StepId,
    /// Its rough duration, before anything is measured; zero when excluded.
    /// With a knee search, a context's one load step stands for every try.
    pub estimate: Duration,
}

impl Plan {
    /// Each step's rough duration, in run order (see [`Plan::steps`]).
    pub fn step_estimates(&self) -> Vec<Duration> {
        self.steps.iter().map(|s| s.estimate).collect()
    }
}

/// Prompt length sent for the "0" context row: the smallest prompt that still
/// carries a unique cache marker.
pub const ZERO_CONTEXT_PROMPT: Tokens = Tokens::new(16);

/// The prompt length actually sent for a context.
pub fn prompt_len(context: Tokens) -> Tokens {
    context.max(ZERO_CONTEXT_PROMPT)
}

/// Builds the capacity decision from what the server said and the user's hints.
pub fn capacity_plan(
    measured: Option<&MeasuredCapacity>,
    hints: &CapacityHints,
    limits: ServerLimits,
    spec: &MatrixSpec,
) -> Result<(CapacityPlan, Option<CapacityGrid>), RunnerError> {
    let predicted = hints.prediction.as_ref();
    if measured.is_some() || predicted.is_some() {
        let grid_spec = GridSpec {
            contexts: spec.contexts.iter().map(|&c| prompt_len(c)).collect(),
            concurrencies: spec.concurrencies.clone(),
            max_output: spec.max_output,
        };
        let grid = capacity_grid(predicted, measured, limits, &grid_spec)
            .map_err(RunnerError::Capacity)?;
        let source = if measured.is_some() {
            CapacitySourceKind::Measured
        } else {
            CapacitySourceKind::Predicted
        };
        let plan = CapacityPlan {
            source,
            pool: Some(grid.pool.clone()),
            pool_tokens: Some(Tokens::new(grid.pool_tokens)),
            measured_tokens: grid
                .comparison
                .as_ref()
                .map(|c| Tokens::new(c.measured_tokens))
                .or(measured.map(|_| Tokens::new(grid.pool_tokens))),
            predicted_tokens: grid
                .comparison
                .as_ref()
                .map(|c| Tokens::new(c.predicted_tokens))
                .or(predicted.map(|_| Tokens::new(grid.pool_tokens))),
            predicted_for: None,
        };
        return Ok((plan, Some(grid)));
    }
    if let Some(tokens) = hints.kv_capacity_tokens {
        let pool = KvPool::Tokens(TokenPool {
            tokens: tokens.get(),
            page_size: 1,
            max_running_requests: limits.max_num_seqs,
            state_slots: None,
            max_model_len: limits.max_model_len,
        });
        let plan = CapacityPlan {
            source: CapacitySourceKind::Given,
            pool: Some(pool),
            pool_tokens: Some(tokens),
            measured_tokens: None,
            predicted_tokens: None,
            predicted_for: None,
        };
        return Ok((plan, None));
    }
    Ok((
        CapacityPlan {
            source: CapacitySourceKind::Unknown,
            pool: None,
            pool_tokens: None,
            measured_tokens: None,
            predicted_tokens: None,
            predicted_for: None,
        },
        None,
    ))
}

/// The capacity hints under the vLLM release the prediction should follow:
/// the caller's, else the one the server reports on `/version` (predicted
/// again), else the newest modelled; with that choice in words.
pub(crate) fn hints_for(
    hints: &CapacityHints,
    reported: Option<&str>,
) -> (CapacityHints, Option<String>) {
    let Some(inputs) = &hints.vllm_inputs else {
        return (hints.clone(), None);
    };
    let assumed = inputs.flags.version;
    let from_server = reported
        .filter(|_| !inputs.version_given)
        .and_then(|v| speedmatrix_capacity::VllmVersion::parse(v).ok())
        .filter(|v| *v != assumed);
    let Some(version) = from_server else {
        let parsed = reported.and_then(|v| speedmatrix_capacity::VllmVersion::parse(v).ok());
        let why = match (inputs.version_given, reported, parsed) {
            (true, _, _) => "as given".to_owned(),
            (false, Some(_), Some(_)) => "the version /version reports".to_owned(),
            (false, Some(v), None) => {
                format!("assumed: /version's {v:?} is not a vLLM version and none was given")
            }
            (false, None, _) => "assumed: the server reports no version and none was given".into(),
        };
        return (hints.clone(), Some(format!("vLLM {assumed} rules ({why})")));
    };
    let flags = speedmatrix_capacity::VllmFlags {
        version,
        ..inputs.flags.clone()
    };
    let engine = speedmatrix_capacity::EngineFlags::Vllm(flags);
    match speedmatrix_capacity::predict(&inputs.model, &inputs.gpu, &engine) {
        Ok(p) => (
            CapacityHints {
                prediction: Some(p),
                ..hints.clone()
            },
            Some(format!(
                "vLLM {version} rules (the version /version reports)"
            )),
        ),
        Err(e) => (
            hints.clone(),
            Some(format!(
                "vLLM {assumed} rules (the server reports {version}, under whose rules the \
                 prediction failed: {e})"
            )),
        ),
    }
}

/// Decides every prefill point and decode cell.
pub fn plan(capacity: CapacityPlan, spec: &MatrixSpec, max_model_len: Option<Tokens>) -> Plan {
    let too_long = |len: Tokens, what: TooLong| {
        let limit = max_model_len?;
        (len > limit).then_some(Exclusion::TooLong {
            what,
            tokens: len,
            max_model_len: limit,
        })
    };
    let prefill: Vec<(Tokens, Option<Exclusion>)> = spec
        .prefill_contexts
        .iter()
        .map(|&c| {
            let need = Tokens::new(c.get().saturating_add(1));
            let excluded = too_long(need, TooLong::PromptPlusOneToken).or_else(|| {
                let pool = capacity.pool.as_ref()?;
                over_capacity(&pool.check(c, Concurrency::ONE, Tokens::new(1)))
            });
            (c, excluded)
        })
        .collect();
    let mut cells = Vec::new();
    let sustained = matches!(spec.load, LoadMode::Sustained);
    for &context in spec.contexts.iter().filter(|_| sustained) {
        for &concurrency in &spec.concurrencies {
            let len = prompt_len(context)
                .get()
                .saturating_add(spec.max_output.get());
            let excluded =
                too_long(Tokens::new(len), TooLong::ContextPlusMaxOutput).or_else(|| {
                    let pool = capacity.pool.as_ref()?;
                    over_capacity(&pool.check(prompt_len(context), concurrency, spec.max_output))
                });
            cells.push(PlannedCell {
                context,
                concurrency,
                excluded,
            });
        }
    }
    let load = load_cells(&capacity, spec, max_model_len);
    let steps = step_estimates(spec, &prefill, &cells, &load);
    let estimated = steps
        .iter()
        .fold(Duration::ZERO, |sum, s| sum.saturating_add(s.estimate));
    Plan {
        capacity,
        prefill,
        cells,
        load,
        steps,
        estimated,
    }
}

/// Every step's estimate in the order `Session::measure` runs them: prefill
/// points, decode cells, load cells. An excluded step takes no time.
fn step_estimates(
    spec: &MatrixSpec,
    prefill: &[(Tokens, Option<Exclusion>)],
    cells: &[PlannedCell],
    load: &[PlannedLoad],
) -> Vec<StepEstimate> {
    let unless_excluded = |excluded: bool, d: Duration| if excluded { Duration::ZERO } else { d };
    let prefill = prefill.iter().map(|(context, ex)| StepEstimate {
        step: StepId::Prefill { context: *context },
        estimate: unless_excluded(ex.is_some(), estimate_prefill(spec, *context)),
    });
    let cells = cells.iter().map(|c| StepEstimate {
        step: StepId::Decode {
            context: c.context,
            concurrency: c.concurrency,
        },
        estimate: unless_excluded(c.excluded.is_some(), estimate_decode(spec, c)),
    });
    let load = load.iter().map(|c| StepEstimate {
        step: StepId::Load {
            context: c.context,
            point: c.point,
        },
        estimate: unless_excluded(c.excluded.is_some(), estimate_load(spec, c)),
    });
    prefill.chain(cells).chain(load).collect()
}

/// The burst or rate cells: every given load per context, or, with a knee
/// search, where each context's search starts (the lowest given load).
fn load_cells(
    capacity: &CapacityPlan,
    spec: &MatrixSpec,
    max_model_len: Option<Tokens>,
) -> Vec<PlannedLoad> {
    let mut points: Vec<LoadPoint> = match &spec.load {
        LoadMode::Sustained => return Vec::new(),
        LoadMode::Burst(b) => b
            .requests
            .iter()
            .filter_map(|&n| Concurrency::new(n))
            .map(|requests| LoadPoint::Burst { requests })
            .collect(),
        LoadMode::Rate(r) => r
            .rates
            .iter()
            .map(|&rate| LoadPoint::Rate { rate })
            .collect(),
        LoadMode::Conversation(_) => spec
            .concurrencies
            .iter()
            .map(|&count| LoadPoint::Conversations { count })
            .collect(),
    };
    if spec.search.is_some() {
        points.sort();
        points.truncate(1);
    }
    let mut cells = Vec::new();
    for &context in &spec.contexts {
        for &point in &points {
            cells.push(PlannedLoad {
                context,
                point,
                excluded: load_exclusion(capacity, spec, max_model_len, context, point),
            });
        }
    }
    cells
}

/// Why a burst or rate cell does not run: too long for `max_model_len` as
/// decode cells are; a burst over capacity when the requests in flight at
/// once (the burst, or the cap) do not fit by the engine's rule. A rate cell
/// is never over capacity: how many requests it keeps in flight is what it
/// measures (the server queues the rest), unless an in-flight cap says.
pub(crate) fn load_exclusion(
    capacity: &CapacityPlan,
    spec: &MatrixSpec,
    max_model_len: Option<Tokens>,
    context: Tokens,
    point: LoadPoint,
) -> Option<Exclusion> {
    // A conversation's last turn carries every earlier answer and question.
    let earlier = match &spec.load {
        LoadMode::Conversation(c) => u64::from(c.turns.saturating_sub(1))
            .saturating_mul(spec.max_output.get().saturating_add(c.question.get())),
        _ => 0,
    };
    let prompt = Tokens::new(prompt_len(context).get().saturating_add(earlier));
    let len = Tokens::new(prompt.get().saturating_add(spec.max_output.get()));
    if let Some(limit) = max_model_len
        && len > limit
    {
        return Some(Exclusion::TooLong {
            what: TooLong::ContextPlusMaxOutput,
            tokens: len,
            max_model_len: limit,
        });
    }
    let at_once = match (&spec.load, point) {
        (LoadMode::Burst(b), LoadPoint::Burst { requests }) => {
            Some(b.max_concurrency.map_or(requests, |cap| requests.min(cap)))
        }
        (LoadMode::Rate(r), _) => r.max_in_flight,
        (LoadMode::Conversation(_), LoadPoint::Conversations { count }) => Some(count),
        _ => None,
    }?;
    let pool = capacity.pool.as_ref()?;
    over_capacity(&pool.check(prompt, at_once, spec.max_output))
}

/// Rough time of a load cell: each request's prefill at the assumed speed,
/// then its output at an assumed 30 tok/s, a burst's requests at once; a
/// rate cell its sending time plus one request's time; each repeat as long.
fn estimate_load(spec: &MatrixSpec, cell: &PlannedLoad) -> Duration {
    let one = |context: Tokens| {
        context.get() as f64 / ASSUMED_PREFILL_TOKENS_PER_S + spec.max_output.get() as f64 / 30.0
    };
    let sending = match (&spec.load, cell.point) {
        (LoadMode::Rate(r), LoadPoint::Rate { rate }) => match r.length {
            RateLength::Duration(d) => d.as_secs_f64(),
            RateLength::Requests(n) => n as f64 / rate.get(),
        },
        // Turns run one after another.
        (LoadMode::Conversation(conv), _) => {
            f64::from(conv.turns.saturating_sub(1)) * one(cell.context)
        }
        _ => 0.0,
    };
    // Burst and rate cells are measured `--repeats` times, whole (conversations refuse it).
    let repeats = match spec.load {
        LoadMode::Conversation(_) => 1.0,
        _ => f64::from(spec.repeats.max(1)),
    };
    seconds(repeats * (sending + one(cell.context) + CELL_OVERHEAD.as_secs_f64()))
}

fn over_capacity(v: &CellVerdict) -> Option<Exclusion> {
    (!v.fits).then(|| Exclusion::OverCapacity {
        concurrency: v.concurrency,
        request_tokens: v.request_tokens,
        needed: v.needed,
        limit: v.limit,
        unit: v.rule.unit().to_owned(),
        rule: v.rule.describe().to_owned(),
    })
}

/// Prefill speed assumed for estimates only, before anything is measured.
const ASSUMED_PREFILL_TOKENS_PER_S: f64 = 8_000.0;
/// Fixed cost per decode cell: connection setup, readiness, drain.
const CELL_OVERHEAD: Duration = Duration::from_secs(2);

/// Rough time of a cold prefill point: its prompt at the assumed speed, as
/// many times as it is repeated.
fn estimate_prefill(spec: &MatrixSpec, context: Tokens) -> Duration {
    seconds(context.get() as f64 / ASSUMED_PREFILL_TOKENS_PER_S * f64::from(spec.prefill_repeats))
}

/// Rough time of a decode cell: the cache warm-up (every stream's prompt at
/// the assumed prefill speed), then a window and the fixed overhead for each
/// repeat (the repeats after the first skip the warm-up).
fn estimate_decode(spec: &MatrixSpec, cell: &PlannedCell) -> Duration {
    let warm = cell.context.get() as f64 * f64::from(cell.concurrency.get())
        / ASSUMED_PREFILL_TOKENS_PER_S;
    let each = spec.window.as_secs_f64() + CELL_OVERHEAD.as_secs_f64();
    seconds(warm + f64::from(spec.repeats.max(1)) * each)
}

/// Seconds as a duration; a negative, NaN or huge estimate is clamped, not a panic.
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Preset;

    fn given(tokens: u64) -> CapacityPlan {
        let hints = CapacityHints {
            prediction: None,
            vllm_inputs: None,
            kv_capacity_tokens: Some(Tokens::new(tokens)),
        };
        capacity_plan(
            None,
            &hints,
            ServerLimits::default(),
            &Preset::Seed.matrix(),
        )
        .unwrap()
        .0
    }

    #[test]
    fn seed_matrix_with_a_given_token_capacity_matches_the_seed_pattern() {
        let spec = Preset::Seed.matrix();
        let p = plan(given(450_000), &spec, Some(Tokens::new(262_144)));
        let valid: Vec<(u64, u32)> = p
            .cells
            .iter()
            .filter(|c| c.excluded.is_none())
            .map(|c| (c.context.get() / 1024, c.concurrency.get()))
            .collect();
        let expect_max = [(0, 32), (16, 16), (32, 8), (64, 4), (128, 2), (248, 1)];
        for (ctx, max_n) in expect_max {
            let ns: Vec<u32> = valid.iter().filter(|v| v.0 == ctx).map(|v| v.1).collect();
            assert_eq!(ns.iter().max(), Some(&max_n), "context {ctx}K");
        }
        assert_eq!(valid.len(), 6 + 5 + 4 + 3 + 2 + 1);
    }

    #[test]
    fn max_model_len_excludes_long_cells_and_unknown_capacity_runs_everything() {
        let spec = Preset::Seed.matrix();
        let unknown = capacity_plan(
            None,
            &CapacityHints::default(),
            ServerLimits::default(),
            &spec,
        )
        .unwrap()
        .0;
        assert_eq!(unknown.source, CapacitySourceKind::Unknown);
        let p = plan(unknown, &spec, Some(Tokens::kibi(64)));
        for c in &p.cells {
            let too_long = c.context.get() + 8192 > 65_536;
            assert_eq!(
                matches!(c.excluded, Some(Exclusion::TooLong { .. })),
                too_long,
                "{}",
                c.context
            );
        }
        assert!(matches!(p.prefill[4].1, Some(Exclusion::TooLong { .. })));
        assert!(p.estimated > Duration::from_secs(30));
    }

    #[test]
    fn bursts_are_over_capacity_by_what_is_in_flight_and_rates_never_are() {
        use crate::config::{BurstSpec, RateSpec};
        let mut spec = Preset::Quick.matrix();
        spec.contexts = vec![Tokens::kibi(1)];
        spec.max_output = Tokens::new(1_024);
        spec.load = LoadMode::Burst(BurstSpec {
            requests: vec![1, 8, 64],
            max_concurrency: None,
            warm_cache: false,
        });
        // 2K tokens a request: 20K hold 10 at once.
        let p = plan(given(20_480), &spec, None);
        assert!(p.cells.is_empty(), "a burst run has no sustained cells");
        let over: Vec<bool> = p.load.iter().map(|c| c.excluded.is_some()).collect();
        assert_eq!(over, [false, false, true]);
        spec.load = LoadMode::Burst(BurstSpec {
            requests: vec![1, 8, 64],
            max_concurrency: Concurrency::new(4),
            warm_cache: false,
        });
        let capped = plan(given(20_480), &spec, None);
        assert!(
            capped.load.iter().all(|c| c.excluded.is_none()),
            "4 in flight fit"
        );
        spec.load = LoadMode::Rate(RateSpec {
            rates: vec!["100".parse().unwrap()],
            arrival: speedmatrix_workload::ArrivalProcess::Poisson,
            seed: 0,
            length: RateLength::Duration(Duration::from_secs(10)),
            max_in_flight: None,
            drain: Duration::from_secs(60),
            warm_cache: false,
        });
        let rates = plan(given(20_480), &spec, Some(Tokens::kibi(32)));
        assert!(rates.load[0].excluded.is_none());
        // Sending for 10 s, then one request's time: at least 10 s.
        assert!(rates.estimated >= Duration::from_secs(10));
    }

    #[test]
    fn each_step_has_an_estimate_in_run_order_and_a_decode_cell_counts_its_repeats() {
        let mut spec = Preset::Quick.matrix();
        // 4K cells with 8K of output are too long; everything else runs.
        let once = plan(given(10_000_000), &spec, Some(Tokens::kibi(10)));
        assert_eq!(once.steps.len(), once.prefill.len() + once.cells.len());
        assert!(matches!(once.steps[0].step, StepId::Prefill { .. }));
        assert!(matches!(once.steps[2].step, StepId::Decode { .. }));
        assert_eq!(
            once.step_estimates().iter().sum::<Duration>(),
            once.estimated
        );
        for (planned, step) in once.cells.iter().zip(&once.steps[2..]) {
            assert_eq!(
                planned.excluded.is_some(),
                step.estimate.is_zero(),
                "{:?}",
                step.step
            );
        }
        spec.repeats = 3;
        let thrice = plan(given(10_000_000), &spec, Some(Tokens::kibi(10)));
        for (a, b) in once.steps.iter().zip(&thrice.steps) {
            assert_eq!(a.step, b.step);
            let added = b.estimate.saturating_sub(a.estimate);
            let expect = match a.step {
                // Two more windows and their overhead; no second warm-up.
                StepId::Decode { .. } if !a.estimate.is_zero() => 2 * (spec.window + CELL_OVERHEAD),
                _ => Duration::ZERO,
            };
            assert!(
                added.abs_diff(expect) < Duration::from_millis(1),
                "{:?}: {added:?}",
                a.step
            );
        }
    }

    fn vllm_hints(version_given: bool) -> CapacityHints {
        let model = speedmatrix_capacity::ModelConfig::from_json(
            r#"{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336,
            "vocab_size": 128256, "max_position_embeddings": 32768}"#,
        )
        .unwrap();
        let gpu = speedmatrix_capacity::Gpu::lookup("h100").unwrap();
        let flags = speedmatrix_capacity::VllmFlags::default();
        let engine = speedmatrix_capacity::EngineFlags::Vllm(flags.clone());
        CapacityHints {
            prediction: Some(speedmatrix_capacity::predict(&model, &gpu, &engine).unwrap()),
            vllm_inputs: Some(crate::config::VllmInputs {
                model,
                gpu,
                flags,
                version_given,
            }),
            kv_capacity_tokens: None,
        }
    }

    fn blocks(h: &CapacityHints) -> u64 {
        match &h.prediction {
            Some(speedmatrix_capacity::Prediction::Vllm(p)) => p.num_blocks,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_prediction_follows_the_release_the_server_reports_unless_one_was_given() {
        let hints = vllm_hints(false);
        // v0.19 did not yet take CUDA-graph memory out of the KV budget: more blocks.
        let (again, why) = hints_for(&hints, Some("0.19.0"));
        assert!(blocks(&again) > blocks(&hints));
        assert_eq!(
            why.as_deref(),
            Some("vLLM 0.19.0 rules (the version /version reports)")
        );
        let (same, why) = hints_for(&hints, None);
        assert_eq!(blocks(&same), blocks(&hints));
        assert!(why.unwrap().contains("assumed"));
        let given = vllm_hints(true);
        let (kept, why) = hints_for(&given, Some("0.19.0"));
        assert_eq!(blocks(&kept), blocks(&given));
        assert!(why.unwrap().contains("as given"));
        let (unparsed, why) = hints_for(&hints, Some("not-a-version"));
        assert_eq!(blocks(&unparsed), blocks(&hints));
        assert!(why.unwrap().contains("is not a vLLM version"));
    }
}
