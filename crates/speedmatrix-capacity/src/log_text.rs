//! Reading figures out of engines' startup logs: the words that open a
//! figure, wherever the logger's prefix puts them, and the number after.

use crate::vllm::LoggedFigure;

/// What follows `words` in `line`, if they are in it.
pub(crate) fn after<'a>(line: &'a str, words: &str) -> Option<&'a str> {
    line.find(words).map(|i| &line[i + words.len()..])
}

/// The whole number at the start of `s`, thousands separators allowed.
pub(crate) fn count(s: &str) -> Option<u64> {
    let digits: String = s
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// A decimal figure at the start of `s` followed by `unit` (`6.37 GiB`, `0.09GB`).
pub(crate) fn amount(s: &str, unit: &str) -> Option<f64> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    s[end..]
        .trim_start()
        .starts_with(unit)
        .then(|| s[..end].parse().ok())
        .flatten()
}

/// Gathers the figures a log has beside their predictions.
#[derive(Debug, Default)]
pub(crate) struct Beside(pub(crate) Vec<LoggedFigure>);

impl Beside {
    /// Adds `figure` when the log has it.
    pub(crate) fn push(&mut self, figure: &'static str, predicted: f64, logged: Option<f64>) {
        if let Some(logged) = logged {
            self.0.push(LoggedFigure {
                figure,
                predicted,
                logged,
            });
        }
    }
}

/// Bytes as GiB (what both engines' logs print, SGLang calling it "GB").
pub(crate) fn gib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_read_after_their_words() {
        assert_eq!(after("x [a.py:1] Add 3 padding", "Add "), Some("3 padding"));
        assert_eq!(count("1,234,567 tokens"), Some(1_234_567));
        assert_eq!(count("tokens"), None);
        assert_eq!(amount("6.37 GiB", "GiB"), Some(6.37));
        assert_eq!(amount("0.09GB, ssm", "GB"), Some(0.09));
        assert_eq!(amount("6.37 GB", "GiB"), None);
        assert_eq!(amount("lots", "GiB"), None);
    }
}
