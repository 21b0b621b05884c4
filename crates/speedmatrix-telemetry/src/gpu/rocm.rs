//! AMD's older CLI, `rocm-smi --json`: the fallback where `amd-smi` is not
//! installed (ROCm before 6). One object keyed `card0`, `card1`, … (and
//! sometimes `system`), every value a string under its human label, e.g.
//! `"GPU use (%)": "97"`, `"VRAM Total Memory (B)": "25753026560"`,
//! `"sclk clock speed:": "(1090Mhz)"`. Some hosts print noise before the
//! JSON. The power key is `Current Socket Graphics Package Power (W)` where
//! the socket power is readable (APUs, MI300), `Average Graphics Package
//! Power (W)` otherwise.

use serde_json::{Map, Value};
use speedmatrix_units::ByteSize;

use super::{GpuInfo, GpuSample};
use crate::TelemetryError;

/// The tool's name on PATH.
pub const TOOL: &str = "rocm-smi";

/// The flags of one sample: use, power, VRAM, temperature, clocks.
pub const SAMPLE_ARGS: [&str; 7] = [
    "--showuse",
    "--showpower",
    "--showmeminfo",
    "vram",
    "--showtemp",
    "--showclocks",
    "--json",
];

/// One card's labelled string values.
type Card = Map<String, Value>;

/// The cards of the output, by index, in index order.
fn cards(text: &str) -> Result<Vec<(u32, Card)>, TelemetryError> {
    let bad = |why: String| TelemetryError::Unreadable { what: TOOL, why };
    let start = text
        .find('{')
        .ok_or_else(|| bad("no JSON in the output".into()))?;
    let v: Value = serde_json::from_str(&text[start..]).map_err(|e| bad(e.to_string()))?;
    let Value::Object(top) = v else {
        return Err(bad("not an object of cards".into()));
    };
    let mut found: Vec<(u32, Card)> = top
        .into_iter()
        .filter_map(|(k, v)| {
            let index = k.strip_prefix("card")?.parse().ok()?;
            match v {
                Value::Object(m) => Some((index, m)),
                _ => None,
            }
        })
        .collect();
    found.sort_by_key(|(i, _)| *i);
    Ok(found)
}

/// A number out of a string value: `"97"`, `"19.0"`, `"(1090Mhz)"`.
fn number(card: &Card, key: &str) -> Option<f64> {
    let s = card.get(key)?.as_str()?;
    let digits: String = s
        .trim()
        .trim_start_matches('(')
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits.parse().ok()
}

fn power(card: &Card) -> Option<f64> {
    number(card, "Current Socket Graphics Package Power (W)")
        .or_else(|| number(card, "Average Graphics Package Power (W)"))
}

/// The GPUs of one `rocm-smi … --json` sample.
///
/// # Errors
/// [`TelemetryError::Unreadable`] when the text is not its JSON.
pub fn parse_sample(text: &str) -> Result<Vec<GpuSample>, TelemetryError> {
    Ok(cards(text)?
        .into_iter()
        .map(|(index, c)| GpuSample {
            index,
            utilization_pct: number(&c, "GPU use (%)"),
            memory_used: number(&c, "VRAM Total Used Memory (B)").map(|b| ByteSize::new(b as u64)),
            memory_total: number(&c, "VRAM Total Memory (B)").map(|b| ByteSize::new(b as u64)),
            power_w: power(&c),
            power_limit_w: number(&c, "Max Graphics Package Power (W)"),
            sm_clock_mhz: number(&c, "sclk clock speed:").map(|m| m as u32),
            memory_clock_mhz: number(&c, "mclk clock speed:").map(|m| m as u32),
            temperature_c: number(&c, "Temperature (Sensor junction) (C)")
                .or_else(|| number(&c, "Temperature (Sensor edge) (C)")),
            ..GpuSample::default()
        })
        .collect())
}

/// Static facts from the same output: rocm-smi names no product in it, so
/// a card is `AMD GPU (cardN)` with its VRAM.
///
/// # Errors
/// As [`parse_sample`].
pub fn parse_info(text: &str) -> Result<Vec<GpuInfo>, TelemetryError> {
    Ok(cards(text)?
        .into_iter()
        .map(|(index, c)| GpuInfo {
            index,
            name: format!("AMD GPU (card{index})"),
            memory_total: number(&c, "VRAM Total Memory (B)").map(|b| ByteSize::new(b as u64)),
            power_limit_w: number(&c, "Max Graphics Package Power (W)"),
            ..GpuInfo::default()
        })
        .collect())
}

/// One run of the sample query.
///
/// # Errors
/// [`TelemetryError::NoGpuSource`] when the tool is missing, others when it fails.
pub fn sample_text() -> Result<String, TelemetryError> {
    super::tool::run(TOOL, &SAMPLE_ARGS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 7900 XTX's answer (published in a monitoring tool's issue), with
    /// noise before it as some multi-GPU hosts print.
    const XTX: &str = "Exception caught: map::at\n{\"card0\": {\"Temperature (Sensor edge) (C)\": \"49.0\", \
        \"Temperature (Sensor junction) (C)\": \"51.0\", \"Temperature (Sensor memory) (C)\": \"62.0\", \
        \"Average Graphics Package Power (W)\": \"19.0\", \"GPU use (%)\": \"7\", \
        \"VRAM Total Memory (B)\": \"25753026560\", \"VRAM Total Used Memory (B)\": \"794341376\", \
        \"sclk clock speed:\": \"(1090Mhz)\", \"mclk clock speed:\": \"(96Mhz)\"}, \
        \"card1\": {\"Current Socket Graphics Package Power (W)\": \"140.5\", \"GPU use (%)\": \"N/A\"}, \
        \"system\": {\"Driver version\": \"6.7.0\"}}";

    #[test]
    fn cards_read_with_their_string_values() {
        let s = parse_sample(XTX).unwrap();
        assert_eq!(s.len(), 2, "system is not a card");
        assert_eq!(s[0].utilization_pct, Some(7.0));
        assert_eq!(s[0].power_w, Some(19.0));
        assert_eq!(s[0].memory_total, Some(ByteSize::new(25_753_026_560)));
        assert_eq!(s[0].sm_clock_mhz, Some(1090));
        assert_eq!(s[0].temperature_c, Some(51.0), "junction before edge");
        assert_eq!((s[1].index, s[1].power_w), (1, Some(140.5)));
        assert_eq!(s[1].utilization_pct, None);
        let info = parse_info(XTX).unwrap();
        assert_eq!(info[1].name, "AMD GPU (card1)");
        assert!(parse_sample("no json").is_err());
        assert!(parse_sample("[1, 2]").is_err());
    }
}
