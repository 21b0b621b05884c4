//! Nelder–Mead restarted from its best point: in eight or more dimensions one run stalls on a
//! degenerate simplex long before the minimum, and a fresh simplex around the best point moves
//! on. Both the families' fit (`cargo xtask fit-predict`) and a rig's calibration use it.

use argmin::core::{CostFunction, Executor};
use argmin::solver::neldermead::NelderMead;

/// How the restarts run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Restarts {
    /// Each simplex's edge along every axis, in the parameters' units.
    pub step: f64,
    /// A run stops when its simplex's costs spread less than this.
    pub sd_tolerance: f64,
    /// Iterations a run may take.
    pub max_iters: u64,
    /// Runs at most.
    pub rounds: usize,
    /// A run that lowers the cost by less than this ends the restarts.
    pub min_gain: f64,
}

/// Minimizes `problem` from `x0`; returns the best point and its cost. `on_round` hears each
/// run's starting cost, its result and its iterations (the fit prints them).
///
/// # Errors
/// Whatever the cost function or the solver returns.
pub fn minimize<P>(
    problem: &P,
    x0: Vec<f64>,
    how: Restarts,
    mut on_round: impl FnMut(f64, f64, u64),
) -> Result<(Vec<f64>, f64), argmin::core::Error>
where
    for<'a> &'a P: CostFunction<Param = Vec<f64>, Output = f64>,
{
    let mut loss = problem.cost(&x0)?;
    let mut best = x0;
    for _ in 0..how.rounds {
        let simplex: Vec<Vec<f64>> = std::iter::once(best.clone())
            .chain((0..best.len()).map(|i| {
                let mut v = best.clone();
                v[i] += how.step;
                v
            }))
            .collect();
        let solver = NelderMead::new(simplex).with_sd_tolerance(how.sd_tolerance)?;
        let result = Executor::new(problem, solver)
            .configure(|s| s.max_iters(how.max_iters))
            .run()?;
        let round_loss = result.state.best_cost;
        on_round(loss, round_loss, result.state.iter);
        let improved = round_loss < loss - how.min_gain;
        if round_loss < loss
            && let Some(point) = result.state.best_param
        {
            (best, loss) = (point, round_loss);
        }
        if !improved {
            break;
        }
    }
    Ok((best, loss))
}
