//! The request fields a server takes. A strict OpenAI-compatible server (Hugging Face
//! `transformers serve`, gateways) answers HTTP 422 or 400 to a field it does not know —
//! `{"detail": "Unexpected fields in the request: {'ignore_eos'}"}` — and would fail every
//! cell. Before measuring, one short request of the run's shape is sent; while the server
//! refuses a field the run can do without (it names it in its error), the field is dropped,
//! once, with a notice of what that means for the numbers, and the request sent again.

use std::time::Instant;

use speedmatrix_units::Tokens;
use tokio_util::sync::CancellationToken;

use crate::outcome::Notice;
use crate::request::{RequestShape, record_one};
use crate::server::Server;

/// Fields a run can measure without, most telling first.
const OPTIONAL: [&str; 4] = [
    "ignore_eos",
    "min_tokens",
    "stream_options",
    "continuous_usage_stats",
];

/// Most fields dropped before the run gives up asking (each costs one short request).
const MOST_DROPPED: usize = 6;

/// Probes lost to a dropped connection that are sent again.
const MOST_LOST: usize = 2;

/// `shape` without the fields the server refuses, and a notice for each one dropped. A
/// probe that fails for any other reason changes nothing: the cells say what went wrong. An
/// engine the probe identified (vLLM, SGLang, llama.cpp, TGI, Ollama) takes these fields by
/// its documentation and is not asked: no request is sent that the run did not plan.
pub(crate) async fn accepted_shape(
    server: &Server,
    mut shape: RequestShape,
) -> (RequestShape, Vec<Notice>) {
    let mut notices = Vec::new();
    let mut lost_connections = 0;
    if server.info.engine() != speedmatrix_units::Engine::Unknown {
        return (shape, notices);
    }
    for _ in 0..MOST_DROPPED {
        let probe = RequestShape {
            max_tokens: Tokens::new(2),
            ..shape.clone()
        };
        let r = record_one(
            &server.client,
            &probe,
            "Hello",
            Instant::now(),
            &CancellationToken::new(),
            None,
        )
        .await;
        let Some(failure) = r.error else {
            break;
        };
        let Some(field) = refused_field(&failure.message, &shape) else {
            // A connection lost before any answer says nothing of the fields: ask again.
            let lost = failure.kind
                == crate::outcome::FailureKind::Request(
                    speedmatrix_client::ErrorKind::Disconnected,
                );
            if lost && lost_connections < MOST_LOST {
                lost_connections += 1;
                continue;
            }
            break;
        };
        let instead = drop_field(&mut shape, field);
        notices.push(Notice::FieldRefused {
            field: field.to_owned(),
            instead,
        });
    }
    (shape, notices)
}

/// The field a refusal names, when it is one this shape sends and can do without: the
/// error is a 400 or 422 whose text names the field.
fn refused_field(message: &str, shape: &RequestShape) -> Option<&'static str> {
    let refusal = ["400", "422"].iter().any(|s| message.contains(s));
    if !refusal {
        return None;
    }
    let names = |f: &str| {
        // `'ignore_eos'`, `"ignore_eos"`, `ignore_eos:` and `loc: [body, ignore_eos]` alike,
        // but not `ignore_eos_x`.
        message.match_indices(f).any(|(at, _)| {
            let after = message[at + f.len()..].chars().next();
            !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    // The user's --extra-body fields are never dropped: they were asked for.
    OPTIONAL.into_iter().find(|f| sends(shape, f) && names(f))
}

/// Whether `shape` sends `field`.
fn sends(shape: &RequestShape, field: &str) -> bool {
    match field {
        "ignore_eos" => shape.ignore_eos,
        "min_tokens" => shape.min_tokens,
        "stream_options" | "continuous_usage_stats" => shape.stream_options,
        _ => false,
    }
}

/// Drops `field` from `shape`; what the run does instead, in words.
fn drop_field(shape: &mut RequestShape, field: &str) -> String {
    match field {
        "ignore_eos" => {
            shape.ignore_eos = false;
            if shape.min_tokens {
                "min_tokens = max_tokens still keeps outputs to max_tokens".into()
            } else {
                shape.min_tokens = true;
                "min_tokens = max_tokens is sent instead to keep outputs to max_tokens".into()
            }
        }
        "min_tokens" => {
            shape.min_tokens = false;
            if shape.ignore_eos {
                "ignore_eos still keeps outputs to max_tokens".into()
            } else {
                "nothing keeps outputs to max_tokens: a request may end at the model's end of \
                 text, and each cell counts the tokens it got (its finish reasons say how many \
                 ended early)"
                    .into()
            }
        }
        _ => {
            shape.stream_options = false;
            "usage is then only what the server reports by itself (often once, at the end of a \
             stream): tokens in flight are estimated from the streamed text"
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn shape() -> RequestShape {
        RequestShape {
            model: "m".into(),
            api: speedmatrix_units::Api::Chat,
            max_tokens: Tokens::new(64),
            ignore_eos: true,
            min_tokens: false,
            stream_options: true,
            secret: None,
            extra: Arc::default(),
            one_event_per_token: false,
            reasoning_parser: Default::default(),
            keep_text: false,
            first_token_allowance: std::time::Duration::from_secs(1),
            sent_together: 1,
        }
    }

    #[test]
    fn a_refusal_names_the_field_to_drop_and_the_run_keeps_outputs_long() {
        let mut s = shape();
        let msg = r#"HTTP 422: {"detail":"Unexpected fields in the request: {'ignore_eos'}"}"#;
        assert_eq!(refused_field(msg, &s), Some("ignore_eos"));
        let instead = drop_field(&mut s, "ignore_eos");
        assert!(!s.ignore_eos && s.min_tokens, "{instead}");
        let msg = r#"HTTP 422: {"detail":"Unexpected fields in the request: {'min_tokens'}"}"#;
        assert_eq!(refused_field(msg, &s), Some("min_tokens"));
        let instead = drop_field(&mut s, "min_tokens");
        assert!(
            !s.min_tokens && instead.contains("end of text"),
            "{instead}"
        );
        // Not sent any more: not refused again.
        assert_eq!(refused_field(msg, &s), None);
    }

    #[test]
    fn other_failures_and_other_fields_change_nothing() {
        let s = shape();
        assert_eq!(
            refused_field("HTTP 500: ignore_eos broke the engine", &s),
            None
        );
        assert_eq!(
            refused_field("HTTP 422: field `ignore_eos_extra` unknown", &s),
            None
        );
        assert_eq!(refused_field("HTTP 400: prompt too long", &s), None);
        assert_eq!(
            refused_field(
                "HTTP 400: Unrecognized request argument supplied: stream_options",
                &s
            ),
            Some("stream_options")
        );
    }
}
