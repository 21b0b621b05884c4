//! A run against a fitted or predicted simulator profile is a what-if: its
//! report says so, and names the cells past what the profile was fitted on.

use std::collections::BTreeMap;

use speedmatrix_report::{CellStatus, PredictionInfo, Report};
use speedmatrix_sim::ProfileOrigin;

/// Marks `report` as simulated from `origin` and lists its extrapolated cells.
pub(crate) fn mark(report: &mut Report, origin: &ProfileOrigin) {
    let beyond = |context: u64, n: u32| {
        origin.fitted_context_max.is_some_and(|c| context > c)
            || origin.fitted_concurrency_max.is_some_and(|m| n > m)
    };
    let extrapolated: Vec<String> = report
        .decode
        .iter()
        .filter(|c| matches!(c.status, CellStatus::Valid | CellStatus::Partial { .. }))
        .filter(|c| beyond(c.context.get(), c.concurrency.get()))
        .map(|c| format!("{} × {}", c.context, c.concurrency))
        .collect();
    let long_prompts: Vec<String> = report
        .prefill
        .iter()
        .filter(|r| {
            origin
                .fitted_prompt_max
                .is_some_and(|m| r.context.get() > m)
        })
        .map(|r| r.context.to_string())
        .collect();
    let mut assumptions = vec![format!(
        "A simulated run: the simulator ran a profile {} from {}.",
        origin.kind, origin.source
    )];
    let fitted = [
        origin
            .fitted_concurrency_max
            .map(|n| format!("up to {n} streams")),
        origin
            .fitted_context_max
            .map(|c| format!("contexts up to {}", speedmatrix_units::Tokens::new(c))),
        origin
            .fitted_prompt_max
            .map(|p| format!("cold prompts up to {}", speedmatrix_units::Tokens::new(p))),
    ];
    let fitted: Vec<String> = fitted.into_iter().flatten().collect();
    if !fitted.is_empty() {
        assumptions.push(format!("Fitted on {}.", fitted.join(", ")));
    }
    if !extrapolated.is_empty() {
        assumptions.push(format!(
            "Extrapolated past what was fitted: decode cells {}.",
            extrapolated.join(", ")
        ));
    }
    if !long_prompts.is_empty() {
        assumptions.push(format!(
            "Extrapolated past what was fitted: prefill rows {}.",
            long_prompts.join(", ")
        ));
    }
    report.prediction = Some(PredictionInfo {
        method: format!("the built-in simulator running a {} profile", origin.kind),
        factors: BTreeMap::new(),
        fitted_on: origin.source.clone(),
        assumptions,
    });
}
