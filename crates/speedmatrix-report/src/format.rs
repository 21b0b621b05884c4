//! How numbers look on the page, shared by the Markdown and HTML renderers.
//!
//! The forms follow the seed page: `10.8K` and `9,015.0` tok/s, `1,639 ms` TTFT,
//! `8.5 ms` between tokens, `30.0 s`, `—` for nothing.

use speedmatrix_units::group_thousands;

/// Shown where a cell has no number.
pub(crate) const DASH: &str = "—";

/// Throughput: one decimal with thousands separators below 10,000, else thousands
/// with one decimal and a `K` (`10.8K`, and `10K` rather than `10.0K`).
pub(crate) fn tokens_per_s(v: f64) -> String {
    let tenths = (v * 10.0).round() / 10.0;
    if tenths < 10_000.0 {
        return grouped(v, 1);
    }
    let k = format!("{:.1}", v / 1000.0);
    format!("{}K", k.strip_suffix(".0").unwrap_or(&k))
}

/// Throughput with the half-width of its 95 % interval in the same form,
/// `1,376.2 ± 9.1` or `10.8K ± 0.2K`; the plain figure when the interval is
/// narrower than the figure's last shown digit.
pub(crate) fn tokens_per_s_pm(v: f64, interval: Option<speedmatrix_units::Interval>) -> String {
    let plain = tokens_per_s(v);
    let Some(half) = interval.and_then(|i| {
        let h = (i.high - v).max(v - i.low);
        h.is_finite().then_some(h)
    }) else {
        return plain;
    };
    let shown = if (v * 10.0).round() / 10.0 < 10_000.0 {
        grouped(half, 1)
    } else {
        format!("{:.1}K", half / 1000.0)
    };
    if shown.trim_end_matches('K') == "0.0" {
        plain
    } else {
        format!("{plain} ± {shown}")
    }
}

/// `v` to three significant digits at most, with thousands separators: `1,380`, `58.6`,
/// `5.86`, `13,800`.
pub(crate) fn significant3(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return grouped(v, 0);
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).max(0);
    if decimals > 0 {
        return grouped(v, decimals as usize);
    }
    let unit = 10f64.powi(magnitude - 2);
    grouped((v / unit).round() * unit, 0)
}

/// A predicted figure with its band, three significant digits at most:
/// `≈1,380 (1,150–1,610)`; `≈1,380` without a band.
pub(crate) fn predicted(v: f64, band: Option<speedmatrix_units::Interval>) -> String {
    match band {
        Some(b) => format!(
            "≈{} ({}–{})",
            significant3(v),
            significant3(b.low),
            significant3(b.high)
        ),
        None => format!("≈{}", significant3(v)),
    }
}

/// Whole milliseconds with thousands separators: `1,639 ms`.
pub(crate) fn ms_whole(v: f64) -> String {
    format!("{} ms", grouped(v, 0))
}

/// Milliseconds with one decimal: `8.5 ms`.
pub(crate) fn ms_tenths(v: f64) -> String {
    format!("{} ms", grouped(v, 1))
}

/// Seconds with one decimal: `30.0 s`.
pub(crate) fn seconds(v: f64) -> String {
    format!("{} s", grouped(v, 1))
}

/// A count with thousands separators: `3,517`.
pub(crate) fn count(n: u64) -> String {
    group_thousands(n)
}

/// `v` rounded to `decimals` places with thousands separators in the whole part.
pub(crate) fn grouped(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return DASH.to_owned();
    }
    let text = format!("{:.*}", decimals, v.abs());
    let (whole, frac) = text.split_once('.').unwrap_or((&text, ""));
    let whole = whole
        .parse::<u64>()
        .map_or_else(|_| whole.to_owned(), group_thousands);
    let sign = if v < 0.0 && text.bytes().any(|b| matches!(b, b'1'..=b'9')) {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{frac}")
    }
}

/// A ratio as a signed percentage change: `1.052` → `+5.2%`.
pub(crate) fn percent_change(ratio: f64) -> String {
    let pct = (ratio - 1.0) * 100.0;
    let text = grouped(pct, 1);
    if text.starts_with('-') || !pct.is_finite() {
        format!("{text}%")
    } else {
        format!("+{text}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seed_forms() {
        assert_eq!(tokens_per_s(10_812.0), "10.8K");
        assert_eq!(tokens_per_s(10_024.0), "10K");
        assert_eq!(tokens_per_s(9_015.0), "9,015.0");
        assert_eq!(tokens_per_s(117.34), "117.3");
        assert_eq!(tokens_per_s(9_999.96), "10K");
        assert_eq!(ms_whole(1_639.4), "1,639 ms");
        assert_eq!(ms_whole(23_154.0), "23,154 ms");
        assert_eq!(ms_tenths(8.46), "8.5 ms");
        assert_eq!(seconds(30.0), "30.0 s");
        assert_eq!(count(41_296), "41,296");
        assert_eq!(grouped(1_234_567.25, 1), "1,234,567.2");
        assert_eq!(grouped(-0.01, 1), "0.0");
        assert_eq!(grouped(-1_500.0, 0), "-1,500");
        assert_eq!(grouped(f64::NAN, 1), DASH);
        assert_eq!(percent_change(1.052), "+5.2%");
        assert_eq!(percent_change(0.9), "-10.0%");
    }

    #[test]
    fn predicted_figures_show_three_significant_digits_and_their_band() {
        assert_eq!(significant3(1_376.2), "1,380");
        assert_eq!(significant3(13_812.0), "13,800");
        assert_eq!(significant3(58.63), "58.6");
        assert_eq!(significant3(5.861), "5.86");
        assert_eq!(significant3(0.04567), "0.0457");
        let band = speedmatrix_units::Interval::new(1_150.4, 1_612.0);
        assert_eq!(predicted(1_376.2, band), "≈1,380 (1,150–1,610)");
        assert_eq!(predicted(1_376.2, None), "≈1,380");
    }

    proptest! {
        /// Three significant digits stay within half a unit of the third digit.
        #[test]
        fn three_significant_digits_read_back_close(v in 0.001f64..1e9) {
            let back: f64 = significant3(v).replace(',', "").parse().unwrap();
            prop_assert!((back - v).abs() <= v * 0.005 + 1e-9, "{v} → {back}");
        }

        #[test]
        fn grouped_reads_back_as_the_rounded_number(v in 0.0f64..1e12) {
            let text = grouped(v, 1);
            let back: f64 = text.replace(',', "").parse().unwrap();
            prop_assert!((back - v).abs() <= 0.05 + v * 1e-12);
        }
    }
}
