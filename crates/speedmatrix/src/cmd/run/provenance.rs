//! How a run was made, from its command line: the line itself with its secrets removed, every
//! run flag's value (given or default) by the name a study's `[run]` table spells it, and which
//! were given. The run records it in run.json and its journal; `--resume DIR` alone continues
//! with the flags the journal recorded, each flag given now overriding its own.

use std::collections::BTreeMap;

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args as _};
use serde_json::Value;
use speedmatrix_client::redact;
use speedmatrix_report::{Provenance, Tool};
use speedmatrix_runner::options::RunOptions;

use crate::cmd::UsageError;

/// The flag never recorded: its value is the secret itself (and it may come from the
/// environment, which a resumed run reads again).
const API_KEY: &str = "api-key";

/// One command line's run flags.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Invocation {
    /// The command line, shell-quoted (secrets are removed when it is recorded).
    pub(crate) line: String,
    /// Every run flag with a value, given or default, as text (or a bool for a switch).
    pub(crate) options: BTreeMap<String, Value>,
    /// The flags of `options` given on the command line.
    pub(crate) given: Vec<String>,
}

/// The run flags of `matches` (the `run` subcommand's) and the process's command line.
pub(crate) fn from_matches(matches: &ArgMatches) -> Invocation {
    let line = std::env::args_os()
        .map(|a| shell_quoted(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    let mut options = BTreeMap::new();
    let mut given = Vec::new();
    for arg in RunOptions::augment_args(clap::Command::new("run")).get_arguments() {
        let (id, Some(name)) = (arg.get_id().as_str(), arg.get_long()) else {
            continue;
        };
        if name == API_KEY {
            continue;
        }
        let Some(value) = value_of(matches, id, arg.get_action()) else {
            continue;
        };
        if matches.value_source(id) == Some(ValueSource::CommandLine) {
            given.push(name.to_owned());
        }
        options.insert(name.to_owned(), value);
    }
    Invocation {
        line,
        options,
        given,
    }
}

/// A flag's value as a study's `[run]` table writes it: a switch as a bool, anything else as
/// its text (a list's items joined by commas).
fn value_of(matches: &ArgMatches, id: &str, action: &ArgAction) -> Option<Value> {
    if matches!(action, ArgAction::SetTrue | ArgAction::SetFalse) {
        return matches
            .try_get_one::<bool>(id)
            .ok()
            .flatten()
            .map(|b| Value::Bool(*b));
    }
    let raw = matches.try_get_raw(id).ok().flatten()?;
    let items: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
    (!items.is_empty()).then(|| Value::String(items.join(",")))
}

/// `word` as a POSIX shell reads it back: bare when it is plain, else single-quoted.
fn shell_quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:=,@%+-".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The tool that measures: this binary's version, commit and build profile.
pub(crate) fn tool() -> Tool {
    let commit = env!("SPEEDMATRIX_COMMIT");
    Tool {
        name: "speedmatrix".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        commit: (commit != "unknown commit").then(|| commit.to_owned()),
        build_profile: Some(env!("SPEEDMATRIX_PROFILE").to_owned()),
    }
}

/// What the run records of `now`, secrets removed (`options` must have registered its own
/// first), continuing `earlier` (a resumed run's journal) when given.
pub(crate) fn record(now: &Invocation, earlier: Option<&Provenance>) -> Provenance {
    let clean = |text: &str| redact::clean(text).into_owned();
    let mut invocations: Vec<String> = earlier.map(|p| p.invocations.clone()).unwrap_or_default();
    invocations.push(clean(&now.line));
    let options = now
        .options
        .iter()
        .map(|(name, value)| (name.clone(), cleaned(value)))
        .collect();
    Provenance {
        invocations,
        options,
        given: now.given.clone(),
        host: None,
    }
}

fn cleaned(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(redact::clean(s).into_owned()),
        other => other.clone(),
    }
}

/// The flags a resumed run continues with: the journal's given ones, each flag given `now`
/// replacing its own; every other flag at its default. A recorded value whose secret was
/// removed (a URL's password, a secret field of `--extra-body`) must be given again.
pub(crate) fn resumed(earlier: &Provenance, now: &Invocation) -> Result<Invocation, UsageError> {
    let mut options = now.options.clone();
    let mut given = now.given.clone();
    for name in &earlier.given {
        if now.given.contains(name) {
            continue;
        }
        let Some(value) = earlier.options.get(name) else {
            continue;
        };
        // A label keeps its redacted text: the report would show no more of it anyway.
        let label = name == "launch-command";
        if !label && value.as_str().is_some_and(|s| s.contains(redact::REDACTED)) {
            return Err(UsageError(format!(
                "the run's --{name} held a secret that was not recorded; give --{name} again with --resume"
            )));
        }
        options.insert(name.clone(), value.clone());
        given.push(name.clone());
    }
    given.sort();
    Ok(Invocation {
        line: now.line.clone(),
        options,
        given,
    })
}

/// The run options of `invocation`'s given flags (the rest at their defaults), with the API
/// key of this command line or environment.
pub(crate) fn options(
    invocation: &Invocation,
    api_key: Option<String>,
) -> Result<RunOptions, UsageError> {
    let table: serde_json::Map<String, Value> = invocation
        .given
        .iter()
        .filter_map(|name| Some((name.clone(), invocation.options.get(name)?.clone())))
        .collect();
    let mut options = RunOptions::from_value(Value::Object(table))
        .map_err(|e| UsageError(format!("the journal's flags do not read: {e}")))?;
    options.api_key = api_key;
    Ok(options)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, FromArgMatches as _, Parser};

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunOptions,
    }

    fn invocation(args: &[&str]) -> (RunOptions, Invocation) {
        let matches = Cli::command()
            .try_get_matches_from(std::iter::once("run").chain(args.iter().copied()))
            .unwrap();
        let cli = Cli::from_arg_matches(&matches).unwrap();
        (cli.run, from_matches(&matches))
    }

    /// Every flag the command line takes reads back from the recorded table as the same
    /// options: what `--resume DIR` alone relies on.
    #[test]
    fn recorded_flags_read_back_as_the_same_options() {
        let cases: &[&[&str]] = &[
            &[],
            &[
                "--contexts",
                "0,16k",
                "--concurrency",
                "1,4",
                "--duration",
                "5s",
                "--repeats",
                "3",
                "--min-tokens",
                "--extra-body",
                r#"{"chat_template_kwargs": {"enable_thinking": false}}"#,
                "--prefill-contexts",
                "none",
                "--seed",
                "7",
                "--telemetry",
                "off",
                "--max-tokens",
                "256",
            ],
            &[
                "--url",
                "http://127.0.0.1:8000",
                "--tokenizer",
                "bundled",
                "--mode",
                "rate",
                "--request-rate",
                "1,2.5",
                "--slo",
                "ttft_p99=2s,itl_p99=100ms",
                "--api",
                "chat",
                "--kv-capacity-tokens",
                "100000",
            ],
            &[
                "--mode",
                "burst",
                "--requests",
                "1,8",
                "--contexts",
                "1k",
                "--model-config",
                "config.json",
                "--gpu-memory-utilization",
                "0.8",
                "--engine",
                "llama.cpp",
            ],
        ];
        for args in cases {
            let (parsed, recorded) = invocation(args);
            let back = options(&recorded, parsed.api_key.clone()).unwrap();
            assert_eq!(back, parsed, "{args:?}");
            // Every flag with a value reads back too, defaults included.
            let all = Invocation {
                given: recorded.options.keys().cloned().collect(),
                ..recorded.clone()
            };
            assert_eq!(
                options(&all, parsed.api_key.clone()).unwrap(),
                parsed,
                "{args:?}"
            );
        }
    }

    #[test]
    fn a_resumed_run_takes_the_journals_flags_and_those_given_now() {
        let (_, first) = invocation(&["--contexts", "0,16k", "--duration", "5s"]);
        let earlier = record(&first, None);
        let (_, now) = invocation(&["--telemetry", "off"]);
        let merged = resumed(&earlier, &now).unwrap();
        let back = options(&merged, None).unwrap();
        let (expected, _) = invocation(&[
            "--contexts",
            "0,16k",
            "--duration",
            "5s",
            "--telemetry",
            "off",
        ]);
        assert_eq!(
            back,
            RunOptions {
                api_key: None,
                ..expected
            }
        );
        // A flag given now replaces the journal's.
        let (_, now) = invocation(&["--duration", "6s"]);
        let back = options(&resumed(&earlier, &now).unwrap(), None).unwrap();
        assert_eq!(back.window, Some(std::time::Duration::from_secs(6)));
        assert_eq!(record(&now, Some(&earlier)).invocations.len(), 2);
    }

    #[test]
    fn a_recorded_secret_must_be_given_again() {
        redact::register("pw-resume-secret");
        let (_, first) = invocation(&["--url", "http://u:pw-resume-secret@127.0.0.1:1"]);
        let earlier = record(&first, None);
        assert!(
            !serde_json::to_string(&earlier)
                .unwrap()
                .contains("pw-resume-secret")
        );
        let err = resumed(&earlier, &Invocation::default()).unwrap_err();
        assert!(err.0.contains("--url"), "{}", err.0);
    }

    #[test]
    fn words_are_quoted_only_when_a_shell_would_split_them() {
        assert_eq!(shell_quoted("--contexts"), "--contexts");
        assert_eq!(shell_quoted("0,16k"), "0,16k");
        assert_eq!(shell_quoted(r#"{"a": 1}"#), r#"'{"a": 1}'"#);
        assert_eq!(shell_quoted("it's"), r"'it'\''s'");
        assert_eq!(shell_quoted(""), "''");
    }
}
