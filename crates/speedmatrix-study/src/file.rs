//! The study file: a server command template, the points to run it at, the
//! matrix to measure at each, and how to tell the server is up and to stop it.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::StudyError;

/// A study (`speedmatrix study run STUDY.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Study {
    /// The study's name, shown on its pages.
    pub name: String,
    /// Free-form labels of the whole study (`gpu = "RTX 3090"`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// How to start, check and stop the server of a point.
    pub server: ServerSpec,
    /// Every combination of these values is a point (`kv = ["auto", "fp8"]`).
    #[serde(default)]
    pub parameters: BTreeMap<String, Vec<ParamValue>>,
    /// Points given one by one instead of (or besides) the grid: tables of
    /// parameter values, each with an optional `name`.
    #[serde(default)]
    pub points: Vec<BTreeMap<String, ParamValue>>,
    /// The point's name from its values (default: `key=value` pairs joined by `_`).
    #[serde(default)]
    pub point_name: Option<String>,
    /// What to measure at each point.
    pub run: RunSpec,
}

/// A parameter's value: written as a string, a number or a boolean.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ParamValue {
    /// Text.
    Text(String),
    /// A whole number.
    Integer(i64),
    /// A number.
    Float(f64),
    /// A flag.
    Flag(bool),
}

impl ParamValue {
    /// The value as it goes into a template.
    pub fn render(&self) -> String {
        match self {
            ParamValue::Text(s) => s.clone(),
            ParamValue::Integer(i) => i.to_string(),
            ParamValue::Float(f) => f.to_string(),
            ParamValue::Flag(b) => b.to_string(),
        }
    }
}

/// How a point's server starts, comes up and goes down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// The command, with `{parameter}`, `{port}` and `{point}` filled in: `vllm serve
    /// {model} --kv-cache-dtype {kv} --port {port}`. It is split into words once, as `sh`
    /// would split it (quotes, backslashes), and started directly in its own process group,
    /// each filled-in value one argument: a value with spaces or JSON stays whole, and
    /// none runs as a command.
    pub command: String,
    /// Run the command by `sh -c` instead (for pipes, `&&`, `$VAR`): every value is then
    /// single-quoted for the shell before it is put in.
    #[serde(default)]
    pub shell: bool,
    /// The base URL the matrix is measured at (default `http://127.0.0.1:{port}`).
    #[serde(default)]
    pub url: Option<String>,
    /// The path that answers 2xx once the server is ready (default `/v1/models`).
    #[serde(default = "default_health")]
    pub health_path: String,
    /// How long the server may take to come up (`10m`).
    #[serde(default = "default_ready", with = "duration_text")]
    #[schemars(with = "String")]
    pub ready_timeout: Duration,
    /// The signal that asks it to stop: `SIGTERM` or `SIGINT`.
    #[serde(default = "default_signal")]
    pub stop_signal: StopSignal,
    /// How long it may take to stop before it is killed (`30s`).
    #[serde(default = "default_grace", with = "duration_text")]
    #[schemars(with = "String")]
    pub grace: Duration,
    /// Environment variables of the command (templates too).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// The signal a server is asked to stop with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StopSignal {
    /// SIGTERM.
    #[serde(rename = "SIGTERM")]
    Term,
    /// SIGINT (Ctrl-C).
    #[serde(rename = "SIGINT")]
    Int,
}

/// What each point measures: `speedmatrix run`'s options, each flag a key without its dashes
/// (`contexts = "0,16k"`, `max-tokens = 64`, `kv-cache-dtype = "{kv}"`, `enable-prefix-caching =
/// true`), templates too; no `url`, `out`, `resume` or `sim-profile`: the study gives those.
/// The older form, `args = ["--contexts", "0,16k", …]`, is still read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunSpec(pub toml::Table);

impl JsonSchema for RunSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RunOptions".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <speedmatrix_runner::options::RunOptions as JsonSchema>::json_schema(generator)
    }
}

fn default_health() -> String {
    "/v1/models".to_owned()
}

fn default_ready() -> Duration {
    Duration::from_secs(600)
}

fn default_grace() -> Duration {
    Duration::from_secs(30)
}

fn default_signal() -> StopSignal {
    StopSignal::Term
}

/// Durations written as humantime text (`90s`, `10m`).
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!("`{text}` is not a duration like 90s or 10m: {e}"))
        })
    }
}

impl Study {
    /// Parses and checks a study file's TOML text.
    pub fn from_toml(text: &str) -> Result<Study, StudyError> {
        let study: Study = toml::from_str(text).map_err(|e| StudyError::Parse(e.to_string()))?;
        study.check()?;
        Ok(study)
    }

    fn check(&self) -> Result<(), StudyError> {
        let invalid = |m: String| Err(StudyError::Invalid(m));
        if self.name.trim().is_empty() {
            return invalid("`name` is empty".into());
        }
        if self.server.command.trim().is_empty() {
            return invalid("[server] `command` is empty".into());
        }
        if !self.server.shell {
            crate::command::template_words(&self.server.command)?;
        }
        if !self.server.health_path.starts_with('/') {
            return invalid(format!(
                "[server] health_path `{}` must start with /",
                self.server.health_path
            ));
        }
        for (k, v) in &self.parameters {
            if v.is_empty() {
                return invalid(format!("parameter `{k}` has no values"));
            }
            if k == "port" || k == "point" || k == "name" {
                return invalid(format!(
                    "`{k}` is filled in by the study: name the parameter otherwise"
                ));
            }
        }
        if self.parameters.is_empty() && self.points.is_empty() {
            return invalid(
                "no points: give [parameters] (every combination) or [[points]]".into(),
            );
        }
        // Every point's run options must read, before anything starts (a grid too large to
        // hold and points whose names clash are refused by `points`, which every use of the
        // study calls first).
        for point in self.points().unwrap_or_default() {
            self.run_options(&point, 0)?;
        }
        Ok(())
    }

    /// The JSON Schema of study files (their TOML read as JSON).
    pub fn json_schema() -> schemars::Schema {
        schemars::schema_for!(Study)
    }
}
