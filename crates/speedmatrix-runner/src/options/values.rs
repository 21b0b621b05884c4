//! The option values that are more than a number or a name: a JSON body, a prefill context
//! or `none`, a percentage, a shared prefix; each parsed from the text a flag takes.

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use speedmatrix_units::Tokens;

use crate::SharedPrefix;

/// A JSON object merged into every request body (`--extra-body`): JSON text on the command
/// line, JSON text or a table in a study file.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct ExtraBody(pub serde_json::Map<String, serde_json::Value>);

impl FromStr for ExtraBody {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(map)) => Ok(ExtraBody(map)),
            Ok(_) => Err("--extra-body must be a JSON object, e.g. '{\"top_k\": 1}'".into()),
            Err(e) => Err(format!("--extra-body is not valid JSON: {e}")),
        }
    }
}

impl<'de> Deserialize<'de> for ExtraBody {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Object(map) => Ok(ExtraBody(map)),
            serde_json::Value::String(text) => text.parse().map_err(serde::de::Error::custom),
            _ => Err(serde::de::Error::custom(
                "--extra-body must be a JSON object (a table) or its JSON text",
            )),
        }
    }
}

/// A prefill context, or `none` (no prefill rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextOrNone(pub Option<Tokens>);

impl FromStr for ContextOrNone {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("none") {
            return Ok(ContextOrNone(None));
        }
        s.parse::<Tokens>()
            .map(|t| ContextOrNone(Some(t)))
            .map_err(|e| e.to_string())
    }
}

/// A share given as `5%` or `5` (0.05), at least 0 % and below 100 %.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percent(pub f64);

impl FromStr for Percent {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let v: f64 = s
            .trim()
            .trim_end_matches('%')
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a percentage such as 5%"))?;
        if !(0.0..100.0).contains(&v) {
            return Err(format!("`{s}` must be at least 0 % and below 100 %"));
        }
        Ok(Percent(v / 100.0))
    }
}

impl FromStr for SharedPrefix {
    type Err = String;

    /// `50%` as a share of the prompt, else a number of tokens (`2k`).
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().ends_with('%') {
            return s.parse::<Percent>().map(|p| SharedPrefix::Share(p.0));
        }
        s.parse::<Tokens>()
            .map(SharedPrefix::Tokens)
            .map_err(|e| format!("{e}; or a share of the prompt such as 50%"))
    }
}
