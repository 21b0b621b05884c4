//! The error bodies engines send: what the message is and what code it has.

use serde_json::{Map, Value};

/// The message and code of an error body, in the shapes servers use:
/// OpenAI's `{"error": {"message", "type", "code"}}` (vLLM ≥ 0.10, SGLang,
/// llama.cpp), `{"error": "text"}` (TGI), vLLM's older
/// `{"object": "error", "message", "code"}`, FastAPI's `{"detail": …}`, and a
/// bare `{"message": …}`. `None` when the value is none of these.
pub fn error_message(value: &Value) -> Option<(String, Option<String>)> {
    let obj = value.as_object()?;
    let code_of = |o: &Map<String, Value>| {
        o.get("code")
            .filter(|c| !c.is_null())
            .or_else(|| o.get("type"))
            .map(|c| match c {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
    };
    if let Some(err) = obj.get("error") {
        return match err {
            Value::Object(inner) => {
                let message = inner
                    .get("message")
                    .and_then(|m| m.as_str())
                    .map_or_else(|| err.to_string(), str::to_owned);
                Some((message, code_of(inner)))
            }
            Value::String(s) => Some((s.clone(), None)),
            other => Some((other.to_string(), None)),
        };
    }
    if obj.get("object").and_then(|o| o.as_str()) == Some("error") {
        let message = obj
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or("(no message)")
            .to_owned();
        return Some((message, code_of(obj)));
    }
    match obj.get("detail") {
        Some(Value::String(s)) => Some((s.clone(), None)),
        Some(other) => Some((other.to_string(), None)),
        None => obj
            .get("message")
            .and_then(|m| m.as_str())
            .map(|m| (m.to_owned(), None)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_engines_error_shape_gives_its_message() {
        let cases = [
            (
                json!({"error": {"message": "bad", "type": "BadRequestError", "code": 400}}),
                "bad",
                Some("400"),
            ),
            (
                json!({"error": "Input validation error"}),
                "Input validation error",
                None,
            ),
            (
                json!({"object": "error", "message": "old", "code": 404}),
                "old",
                Some("404"),
            ),
            (json!({"detail": "Not Found"}), "Not Found", None),
            (json!({"message": "plain"}), "plain", None),
        ];
        for (body, message, code) in cases {
            let (m, c) = error_message(&body).unwrap();
            assert_eq!((m.as_str(), c.as_deref()), (message, code), "{body}");
        }
        assert!(error_message(&json!([1])).is_none());
        assert!(error_message(&json!({"ok": true})).is_none());
    }
}
