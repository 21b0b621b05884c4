//! Leave-one-rig-out cross-validation of the predictor: each rig's figures predicted by
//! factors fitted on every other rig of its engine family (never on itself), the held-out
//! errors summarized per family and phase, and from them each family's and phase's 80 % band:
//! the 10th and 90th percentiles of `ln(predicted / measured)`, every rig weighing the same.
//! The band's own coverage is checked the same way: each rig against the band of the others.

use std::collections::BTreeMap;

use speedmatrix_predict::Factors;

use crate::fit_predict::{FAMILIES, Figure, Rig, fit, log_errors};
use crate::fit_predict_free::Fixed;

/// One family's and phase's band, as data/factors.json stores it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Band {
    /// 10th percentile of ln(predicted / measured) over held-out figures.
    pub(crate) low_log_error: f64,
    /// 90th percentile.
    pub(crate) high_log_error: f64,
    /// Rigs behind it.
    pub(crate) rigs: usize,
    /// Figures behind it.
    pub(crate) figures: usize,
    /// Share of each rig's figures inside the band of the other rigs (leave-one-rig-out).
    pub(crate) coverage: f64,
}

impl Band {
    /// As data/factors.json stores it.
    pub(crate) fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "low_log_error": self.low_log_error,
            "high_log_error": self.high_log_error,
            "rigs": self.rigs,
            "figures": self.figures,
            "coverage": self.coverage,
        })
    }
}

/// A held-out log error: its rig (index), its phase, and the error.
type HeldOut = (usize, &'static str, f64);

fn phase(f: &Figure) -> &'static str {
    match f {
        Figure::Decode { .. } => "decode",
        Figure::Prefill { .. } => "prefill",
    }
}

/// Cross-validates every family and prints the held-out table; the bands by family, phase.
pub(crate) fn cross_validate(
    rigs: &mut [Rig],
    start: Factors,
) -> anyhow::Result<BTreeMap<String, BTreeMap<String, Band>>> {
    let mut held: Vec<HeldOut> = Vec::new();
    for i in 0..rigs.len() {
        let engine = rigs[i].engine.clone();
        let train: Vec<&mut Rig> = rigs
            .iter_mut()
            .enumerate()
            .filter(|(j, r)| *j != i && r.engine == engine)
            .map(|(_, r)| r)
            .collect();
        if train.is_empty() {
            continue;
        }
        let fixed = Fixed::for_rigs(start, train.iter().map(|r| &**r));
        let factors = fit(train, fixed)?;
        let phases: Vec<&'static str> = rigs[i].figures.iter().map(phase).collect();
        let errors = log_errors(&mut rigs[i], factors);
        eprintln!("cross-validated {} ({}/{})", rigs[i].id, i + 1, rigs.len());
        held.extend(phases.into_iter().zip(errors).map(|(p, e)| (i, p, e)));
    }
    print_table(rigs, &held);
    write_held_out(rigs, &held)?;
    let mut bands: BTreeMap<String, BTreeMap<String, Band>> = BTreeMap::new();
    for engine in FAMILIES {
        for p in ["decode", "prefill"] {
            let of = |r: &usize| rigs[*r].engine == engine;
            let cell: Vec<HeldOut> = held
                .iter()
                .filter(|(r, ph, _)| of(r) && *ph == p)
                .copied()
                .collect();
            if let Some(band) = band_of(&cell) {
                bands
                    .entry(engine.to_owned())
                    .or_default()
                    .insert(p.to_owned(), band);
            }
        }
    }
    println!("\n80 % bands (ln(predicted / measured), leave-one-rig-out):");
    for (engine, phases) in &bands {
        for (p, b) in phases {
            println!(
                "  {engine} {p}: measured within predicted × [{:.3}, {:.3}] ({} rigs, {} figures); \
                 held-out coverage {:.0} %",
                (-b.high_log_error).exp(),
                (-b.low_log_error).exp(),
                b.rigs,
                b.figures,
                b.coverage * 100.0
            );
        }
    }
    Ok(bands)
}

/// Every held-out figure with its error, one line each, for finding the rigs the model misses
/// (`target/fit-predict-held-out.tsv`; sort by the last column).
fn write_held_out(rigs: &[Rig], held: &[HeldOut]) -> anyhow::Result<()> {
    let mut out = String::from("rig\tfamily\tvendor\tfigure\terror_percent\n");
    let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
    for (r, _, e) in held {
        let k = seen.entry(*r).or_default();
        let figure = &rigs[*r].figures[*k];
        *k += 1;
        out.push_str(&format!(
            "{}\t{}\t{}\t{figure:?}\t{:+.1}\n",
            rigs[*r].id,
            rigs[*r].engine,
            rigs[*r].vendor,
            (e.exp() - 1.0) * 100.0
        ));
    }
    let path = crate::util::project_root().join("target/fit-predict-held-out.tsv");
    std::fs::write(&path, out)?;
    println!("held-out figures: {}", path.display());
    Ok(())
}

/// The band of a family's and phase's held-out errors, and its coverage of each rig by the
/// band of the others; `None` with fewer than three rigs.
fn band_of(cell: &[HeldOut]) -> Option<Band> {
    let rigs: Vec<usize> = {
        let mut r: Vec<usize> = cell.iter().map(|h| h.0).collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    if rigs.len() < 3 {
        return None;
    }
    let (low, high) = weighted_band(cell)?;
    let (mut inside, mut total) = (0.0, 0.0);
    for r in &rigs {
        let others: Vec<HeldOut> = cell.iter().filter(|h| h.0 != *r).copied().collect();
        let Some((lo, hi)) = weighted_band(&others) else {
            continue;
        };
        let own: Vec<f64> = cell.iter().filter(|h| h.0 == *r).map(|h| h.2).collect();
        // Each rig weighs the same here too.
        inside += own.iter().filter(|e| **e >= lo && **e <= hi).count() as f64 / own.len() as f64;
        total += 1.0;
    }
    Some(Band {
        low_log_error: low,
        high_log_error: high,
        rigs: rigs.len(),
        figures: cell.len(),
        coverage: if total > 0.0 { inside / total } else { 0.0 },
    })
}

/// The band's tails, each rig's figures together weighing one: the errors at the levels that
/// give a new rig an 80 % chance of falling inside when rigs are exchangeable (split-conformal
/// ranks: with `n` rigs the `k`-th from each end, `k = ⌊0.1 (n + 1)⌋`). With many rigs these
/// are the 10th and 90th percentiles; with few the band widens (seven rigs: their extremes),
/// since plain percentiles of a handful of rigs cover fewer than 80 % of the next one.
fn weighted_band(cell: &[HeldOut]) -> Option<(f64, f64)> {
    let mut per_rig: BTreeMap<usize, usize> = BTreeMap::new();
    for h in cell {
        *per_rig.entry(h.0).or_default() += 1;
    }
    let mut weighted: Vec<(f64, f64)> = cell
        .iter()
        .filter(|h| h.2.is_finite())
        .map(|h| (h.2, 1.0 / per_rig[&h.0] as f64))
        .collect();
    if weighted.is_empty() {
        return None;
    }
    weighted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = weighted.iter().map(|w| w.1).sum();
    let at = |q: f64| {
        let mut seen = 0.0;
        for (e, w) in &weighted {
            seen += w;
            if seen >= q * total {
                return *e;
            }
        }
        weighted[weighted.len() - 1].0
    };
    let n = per_rig.len() as f64;
    let tail = (0.1 * (n + 1.0)).floor() / n;
    Some((at(tail), at(1.0 - tail)))
}

/// The held-out errors per family and phase, per GPU vendor and per engine, and over all:
/// median |error|, within ±25 % and ±50 %.
fn print_table(rigs: &[Rig], held: &[HeldOut]) {
    println!(
        "\n| Held out (leave-one-rig-out) | Rigs | Figures | Median |error| | Within ±25 % | Within ±50 % |"
    );
    println!("|---|---|---|---|---|---|");
    let row = |label: String, keep: &dyn Fn(&Rig, &str) -> bool| {
        let chosen: Vec<&HeldOut> = held.iter().filter(|h| keep(&rigs[h.0], h.1)).collect();
        let mut e: Vec<f64> = chosen
            .iter()
            .map(|h| (h.2.exp() - 1.0).abs() * 100.0)
            .collect();
        if e.is_empty() {
            return;
        }
        let mut ids: Vec<usize> = chosen.iter().map(|h| h.0).collect();
        ids.sort_unstable();
        ids.dedup();
        e.sort_by(f64::total_cmp);
        let within = |t: f64| e.iter().filter(|x| **x <= t).count() as f64 / e.len() as f64;
        println!(
            "| {label} | {} | {} | {:.0} % | {:.0} % | {:.0} % |",
            ids.len(),
            e.len(),
            e[e.len() / 2],
            within(25.0) * 100.0,
            within(50.0) * 100.0
        );
    };
    for family in FAMILIES {
        for p in ["decode", "prefill", "all"] {
            row(format!("{family} family, {p}"), &|r, ph| {
                r.engine == family && (p == "all" || ph == p)
            });
        }
    }
    let mut engines: Vec<&str> = rigs.iter().map(|r| r.engine_name.as_str()).collect();
    engines.sort_unstable();
    engines.dedup();
    for engine in engines {
        row(format!("engine {engine}"), &|r, _| r.engine_name == engine);
    }
    let mut vendors: Vec<&str> = rigs.iter().map(|r| r.vendor.as_str()).collect();
    vendors.sort_unstable();
    vendors.dedup();
    for vendor in vendors {
        for p in ["decode", "prefill"] {
            row(format!("{vendor} GPUs, {p}"), &|r, ph| {
                r.vendor == vendor && ph == p
            });
        }
    }
    for p in ["decode", "prefill", "all"] {
        row(format!("every rig, {p}"), &|_, ph| p == "all" || ph == p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rig_weighs_the_same_in_a_band() {
        // Rig 0 has many figures at +1, rigs 1–4 one each at 0: unweighted, rig 0 would
        // own the band; weighted, the 10th percentile is 0.
        let mut cell: Vec<HeldOut> = (0..20).map(|_| (0, "decode", 1.0)).collect();
        cell.extend((1..5).map(|r| (r, "decode", 0.0)));
        let (low, high) = weighted_band(&cell).unwrap();
        assert_eq!((low, high), (0.0, 1.0));
        let band = band_of(&cell).unwrap();
        assert_eq!(band.rigs, 5);
        assert!(band.coverage > 0.0 && band.coverage <= 1.0);
        assert!(band_of(&cell[..21]).is_none(), "two rigs make no band");
    }
}
