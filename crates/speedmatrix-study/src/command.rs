//! A point's server command: the template split into words once, as a POSIX shell would split
//! it, and each placeholder filled in inside its word, so that a parameter value is always one
//! argument — a value with spaces or JSON stays whole, and `x; touch pwned` or `$(…)` is text,
//! never a command. A study that needs a shell (pipes, `&&`, `$VAR`) says `shell = true`; its
//! values are then quoted for the shell before they are put in.

use std::fmt;

use crate::StudyError;

/// A server command ready to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerCommand {
    /// The program and its arguments, started directly (no shell).
    Argv(Vec<String>),
    /// A script run by `sh -c` (the study asked for a shell), values quoted.
    Shell(String),
}

impl fmt::Display for ServerCommand {
    /// The command as a shell would read it back: the words quoted where needed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerCommand::Argv(words) => {
                let quoted: Vec<String> = words.iter().map(|w| quoted(w)).collect();
                f.write_str(&quoted.join(" "))
            }
            ServerCommand::Shell(script) => write!(f, "sh -c {}", quoted(script)),
        }
    }
}

/// `word` quoted for a POSIX shell when it needs it (a `{port}` still to be filled reads as
/// itself: braces without a comma or `..` expand to nothing else).
pub(crate) fn quoted(word: &str) -> String {
    let expands = word.contains('{') && (word.contains(',') || word.contains(".."));
    let plain = !word.is_empty()
        && !expands
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:=,@%+-{}".contains(c));
    if plain {
        return word.to_owned();
    }
    shlex::try_quote(word).map_or_else(
        // A NUL cannot be in an argument at all; show it escaped.
        |_| format!("{word:?}"),
        std::borrow::Cow::into_owned,
    )
}

/// The words of a command template, split as `sh` would split them (quotes and backslashes),
/// placeholders still in them. An unclosed quote, or a template of no words, is refused.
pub(crate) fn template_words(template: &str) -> Result<Vec<String>, StudyError> {
    match shlex::split(template) {
        Some(words) if !words.is_empty() => Ok(words),
        Some(_) => Err(StudyError::Invalid("[server] `command` is empty".into())),
        None => Err(StudyError::Invalid(format!(
            "[server] `command` does not split into words (an unclosed quote or a trailing \
             backslash): {template}"
        ))),
    }
}

/// The command for one point: each word of `template` with its placeholders filled by
/// `fill`, one argument per word; or, with `shell`, the template with every value quoted.
pub(crate) fn build(
    template: &str,
    shell: bool,
    fill: impl Fn(&str, fn(&str) -> String) -> Result<String, StudyError>,
) -> Result<ServerCommand, StudyError> {
    if shell {
        return fill(template, quoted).map(ServerCommand::Shell);
    }
    let as_is: fn(&str) -> String = str::to_owned;
    template_words(template)?
        .iter()
        .map(|word| fill(word, as_is))
        .collect::<Result<Vec<_>, _>>()
        .map(ServerCommand::Argv)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn fill_with(value: &str) -> impl Fn(&str, fn(&str) -> String) -> Result<String, StudyError> {
        let value = value.to_owned();
        move |t: &str, quote: fn(&str) -> String| Ok(t.replace("{v}", &quote(&value)))
    }

    #[test]
    fn a_value_is_one_argument_whatever_it_holds() {
        for value in [
            "x; touch pwned",
            "$(touch pwned)",
            "`touch pwned`",
            r#"{"method": "ngram", "num_speculative_tokens": 4}"#,
            "two words",
            "it's",
            "",
        ] {
            let c = build("serve --opt {v} --port 1", false, fill_with(value)).unwrap();
            assert_eq!(
                c,
                ServerCommand::Argv(vec![
                    "serve".into(),
                    "--opt".into(),
                    value.into(),
                    "--port".into(),
                    "1".into()
                ])
            );
            // Shown as a shell would read it back into the same words.
            assert_eq!(shlex::split(&c.to_string()).unwrap().len(), 5, "{c}");
        }
        let c = build("serve --kv={v}", false, fill_with("a b")).unwrap();
        assert_eq!(
            c,
            ServerCommand::Argv(vec!["serve".into(), "--kv=a b".into()])
        );
        let c = build("serve 'quoted words' {v}", false, fill_with("x")).unwrap();
        assert_eq!(
            c,
            ServerCommand::Argv(vec!["serve".into(), "quoted words".into(), "x".into()])
        );
    }

    #[test]
    fn a_shell_command_gets_its_values_quoted() {
        let c = build("serve {v} && echo ok", true, fill_with("x; touch pwned")).unwrap();
        assert_eq!(
            c,
            ServerCommand::Shell("serve 'x; touch pwned' && echo ok".into())
        );
    }

    #[test]
    fn a_template_that_does_not_split_is_refused() {
        for bad in ["serve 'unclosed", "serve \"unclosed", "   "] {
            assert!(template_words(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        /// Any value reaches the program as exactly the argument it is, and the shown
        /// command splits back into the same words.
        #[test]
        fn values_survive_as_single_arguments(value in "[^\u{0}]{0,40}") {
            let c = build("prog {v} --port 9", false, fill_with(&value)).unwrap();
            let ServerCommand::Argv(words) = &c else { panic!("argv") };
            prop_assert_eq!(&words[1], &value);
            prop_assert_eq!(words.len(), 4);
            prop_assert_eq!(shlex::split(&c.to_string()).unwrap(), words.clone());
            let s = build("prog {v}", true, fill_with(&value)).unwrap();
            let ServerCommand::Shell(script) = &s else { panic!("shell") };
            prop_assert_eq!(shlex::split(script).unwrap(), vec!["prog".to_owned(), value]);
        }
    }
}
