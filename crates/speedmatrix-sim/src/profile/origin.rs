//! Where a fitted or predicted profile's speed came from, so a run against it reads as a what-if.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a fitted or predicted profile's speed came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileOrigin {
    /// How the speed was found: fitted to a measured run or predicted.
    pub kind: OriginKind,
    /// What it came from, in words (the run's model and hardware, or the
    /// prediction's GPU and factors).
    pub source: String,
    /// The most streams of a measured cell it was fitted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted_concurrency_max: Option<u32>,
    /// The longest context of a measured cell it was fitted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted_context_max: Option<u64>,
    /// The longest cold prompt it was fitted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted_prompt_max: Option<u64>,
}

/// How a profile's speed was found; `calibrated` or `predicted` in JSON and in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OriginKind {
    /// Fitted to a measured run (`speedmatrix calibrate`).
    Calibrated,
    /// Predicted from a model and a GPU (`speedmatrix predict --simulate`).
    Predicted,
}

impl OriginKind {
    /// The kind in one word, as the profile's JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            OriginKind::Calibrated => "calibrated",
            OriginKind::Predicted => "predicted",
        }
    }
}

impl fmt::Display for OriginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_read_and_write_the_words_profiles_have_always_used() {
        for (kind, word) in [
            (OriginKind::Calibrated, "calibrated"),
            (OriginKind::Predicted, "predicted"),
        ] {
            assert_eq!(kind.to_string(), word);
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{word}\""));
            let json =
                format!(r#"{{"kind": "{word}", "source": "a run", "fitted_context_max": 8192}}"#);
            let origin: ProfileOrigin = serde_json::from_str(&json).unwrap();
            assert_eq!(origin.kind, kind);
            assert_eq!(origin.fitted_context_max, Some(8_192));
            let back = serde_json::to_value(&origin).unwrap();
            assert_eq!(back["kind"], word);
        }
        assert!(serde_json::from_str::<OriginKind>("\"measured\"").is_err());
    }
}
