//! A point's run options: the study's `[run]` table with the point's values filled in, read
//! as the runner's typed [`RunOptions`] (every key one of `speedmatrix run`'s flags, every
//! value checked). A value that is a whole `{parameter}` takes the parameter's own type, so
//! `max-num-seqs = "{seqs}"` is the number 64; inside text a placeholder is replaced as text.

use speedmatrix_runner::options::RunOptions;

use crate::{ParamValue, Point, Study, StudyError};

/// Options the study sets for each point, which `[run]` may not give.
const STUDY_OWNED: [&str; 5] = ["url", "out", "resume", "force", "sim-profile"];

impl Study {
    /// The run options of `point`, its server on `port`: `[run]` filled in, then read and
    /// checked as `speedmatrix run` checks its flags (the matrix and load mode included; files
    /// they name are read when the point runs).
    pub fn run_options(&self, point: &Point, port: u16) -> Result<RunOptions, StudyError> {
        let invalid = |m: String| StudyError::Invalid(format!("point {}: [run] {m}", point.name));
        let table = self.run_table()?;
        let mut object = serde_json::Map::new();
        for (key, value) in table {
            if let Some(owned) = STUDY_OWNED.iter().find(|k| **k == key) {
                return Err(StudyError::Invalid(format!(
                    "[run] gives --{owned}: the study sets it for each point"
                )));
            }
            let filled = fill_value(&value, point, port)?;
            object.insert(key, toml_to_json(filled));
        }
        let mut options =
            RunOptions::from_value(serde_json::Value::Object(object)).map_err(invalid)?;
        options.url = Some(match &self.server.url {
            Some(t) => point.fill(t, port)?,
            None => format!("http://127.0.0.1:{port}"),
        });
        options.matrix().map_err(|e| invalid(e.to_string()))?;
        Ok(options)
    }

    /// `[run]` as keys and values: the table itself, or the older `args = ["--flag", "value",
    /// …]` list read as keys (a flag followed by another flag, or by nothing, is `true`).
    fn run_table(&self) -> Result<toml::Table, StudyError> {
        let Some(args) = self.run.0.get("args") else {
            return Ok(self.run.0.clone());
        };
        if self.run.0.len() > 1 {
            return Err(StudyError::Invalid(
                "[run] gives both `args` (the older list of flags) and option keys: write every option as a key".into(),
            ));
        }
        let Some(list) = args.as_array() else {
            return Err(StudyError::Invalid(
                "[run] args must be a list of flags and values; better, write each option as a key (`max-tokens = 64`)".into(),
            ));
        };
        let words: Vec<String> = list
            .iter()
            .map(|v| match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        legacy_args(&words)
    }
}

/// The older `[run] args` list as a table of options.
fn legacy_args(words: &[String]) -> Result<toml::Table, StudyError> {
    let mut table = toml::Table::new();
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        // A study's runs are always quiet.
        if matches!(word.as_str(), "-q" | "--quiet") {
            i += 1;
            continue;
        }
        let Some(flag) = word.strip_prefix("--") else {
            return Err(StudyError::Invalid(format!(
                "[run] args: `{word}` is not a --flag (short flags and loose values cannot be read); write each option as a key instead"
            )));
        };
        let (key, value) = match flag.split_once('=') {
            Some((k, v)) => (k.to_owned(), toml::Value::String(v.to_owned())),
            None => match words.get(i + 1) {
                Some(next) if !next.starts_with("--") => {
                    i += 1;
                    (flag.to_owned(), toml::Value::String(next.clone()))
                }
                _ => (flag.to_owned(), toml::Value::Boolean(true)),
            },
        };
        table.insert(key, value);
        i += 1;
    }
    Ok(table)
}

fn param_to_toml(v: &ParamValue) -> toml::Value {
    match v {
        ParamValue::Text(s) => toml::Value::String(s.clone()),
        ParamValue::Integer(i) => toml::Value::Integer(*i),
        ParamValue::Float(f) => toml::Value::Float(*f),
        ParamValue::Flag(b) => toml::Value::Boolean(*b),
    }
}

/// `value` with the point's placeholders filled in: a text that is one whole `{parameter}`
/// becomes the parameter's own value; other texts are filled as text; lists and tables too.
fn fill_value(value: &toml::Value, point: &Point, port: u16) -> Result<toml::Value, StudyError> {
    Ok(match value {
        toml::Value::String(s) => {
            let whole = s
                .strip_prefix('{')
                .and_then(|r| r.strip_suffix('}'))
                .filter(|k| !k.contains(['{', '}']));
            match whole.and_then(|k| point.typed.get(k)) {
                Some(v) => param_to_toml(v),
                None => toml::Value::String(point.fill(s, port)?),
            }
        }
        toml::Value::Array(items) => toml::Value::Array(
            items
                .iter()
                .map(|v| fill_value(v, point, port))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(t) => toml::Value::Table(
            t.iter()
                .map(|(k, v)| Ok((k.clone(), fill_value(v, point, port)?)))
                .collect::<Result<_, StudyError>>()?,
        ),
        other => other.clone(),
    })
}

fn toml_to_json(v: toml::Value) -> serde_json::Value {
    match v {
        toml::Value::String(s) => serde_json::Value::String(s),
        toml::Value::Integer(i) => serde_json::Value::from(i),
        toml::Value::Float(f) => serde_json::Value::from(f),
        toml::Value::Boolean(b) => serde_json::Value::Bool(b),
        toml::Value::Datetime(d) => serde_json::Value::String(d.to_string()),
        toml::Value::Array(a) => {
            serde_json::Value::Array(a.into_iter().map(toml_to_json).collect())
        }
        toml::Value::Table(t) => {
            serde_json::Value::Object(t.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect())
        }
    }
}

/// The options as `speedmatrix run` flags, for a plan printed before anything runs.
pub fn shown_flags(study: &Study, point: &Point) -> Result<String, StudyError> {
    let table = study.run_table()?;
    let mut words = Vec::new();
    for (key, value) in table {
        let filled = match &value {
            toml::Value::String(s) => toml::Value::String(point.fill_shown(s)?),
            other => other.clone(),
        };
        match filled {
            toml::Value::Boolean(true) => words.push(format!("--{key}")),
            toml::Value::Boolean(false) => {}
            toml::Value::String(s) => words.push(format!("--{key} {}", shell_word(&s))),
            toml::Value::Array(items) => {
                let parts: Vec<String> = items
                    .iter()
                    .map(|v| match v {
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                words.push(format!("--{key} {}", shell_word(&parts.join(","))));
            }
            other => words.push(format!("--{key} {other}")),
        }
    }
    Ok(words.join(" "))
}

/// `s` quoted for a shell when it needs it.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,/:=%+{}".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}
