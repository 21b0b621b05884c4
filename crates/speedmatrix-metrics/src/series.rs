//! Levels sampled now and then (a gauge scraped every second, a GPU read
//! every 250 ms) put on the equal parts of a window, for its time series.

/// The mean of the `points` (seconds after the window's start, value) in
/// each of `bins` equal parts of a window `length_s` long.
///
/// A part with no point holds the last reading: a gauge stays where it
/// was until it is read again. Points before the start (the reading just
/// before the window) only set the level the first parts hold; points past
/// the end are ignored. A part before any reading at all is `None`.
///
/// ```
/// use speedmatrix_metrics::binned_levels;
///
/// // Read at −0.2 s, 0.3 s and 0.4 s over a 2 s window cut in 4 parts.
/// let levels = binned_levels(&[(-0.2, 1.0), (0.3, 4.0), (0.4, 6.0)], 2.0, 4);
/// assert_eq!(levels, vec![Some(5.0), Some(6.0), Some(6.0), Some(6.0)]);
/// assert_eq!(binned_levels(&[(1.2, 2.0)], 2.0, 4), vec![None, None, Some(2.0), Some(2.0)]);
/// ```
pub fn binned_levels(points: &[(f64, f64)], length_s: f64, bins: usize) -> Vec<Option<f64>> {
    if bins == 0 || length_s.is_nan() || length_s <= 0.0 {
        return Vec::new();
    }
    let mut sorted: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(t, v)| t.is_finite() && v.is_finite() && *t <= length_s)
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let width = length_s / bins as f64;
    let mut held = sorted
        .iter()
        .take_while(|(t, _)| *t < 0.0)
        .last()
        .map(|&(_, v)| v);
    let mut inside = sorted.iter().skip_while(|(t, _)| *t < 0.0).peekable();
    (0..bins)
        .map(|k| {
            let end = if k + 1 == bins {
                f64::INFINITY
            } else {
                width * (k + 1) as f64
            };
            let (mut sum, mut n) = (0.0, 0u32);
            while let Some(&(_, v)) = inside.next_if(|(t, _)| *t < end) {
                sum += v;
                n += 1;
                held = Some(v);
            }
            if n > 0 {
                Some(sum / f64::from(n))
            } else {
                held
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn one_level_per_part_each_within_the_readings(
            points in prop::collection::vec((-1.0f64..3.0, -50.0f64..50.0), 0..40),
            bins in 1usize..70,
        ) {
            let levels = binned_levels(&points, 2.0, bins);
            prop_assert_eq!(levels.len(), bins);
            let lo = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
            let hi = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
            let mut seen = false;
            for level in levels {
                match level {
                    Some(v) => {
                        seen = true;
                        prop_assert!(v >= lo - 1e-9 && v <= hi + 1e-9);
                    }
                    None => prop_assert!(!seen, "once read, a level is held"),
                }
            }
        }
    }

    #[test]
    fn nothing_to_cut_gives_nothing() {
        assert!(binned_levels(&[(0.1, 1.0)], 0.0, 4).is_empty());
        assert!(binned_levels(&[(0.1, 1.0)], 1.0, 0).is_empty());
        assert_eq!(binned_levels(&[(5.0, 1.0)], 1.0, 2), vec![None, None]);
    }
}
