//! The one path every byte of text that speedmatrix prints or stores goes through: [`clean`]
//! replaces each registered secret (an API key, a URL's user and password) with `[redacted]` —
//! also as JSON, HTML and URL encoding would write it, because a server may echo a secret
//! anywhere (an error body, its model id, its version) and the text may be written escaped —
//! and drops control characters (a server's ESC sequences must not reach a terminal or a CSV).
//!
//! Secrets are registered when they enter the program: [`crate::ApiKey::new`] and
//! [`crate::ClientConfig::new`] (the URL's credentials) do it themselves.
//!
//! ```
//! use speedmatrix_client::redact;
//!
//! redact::register("sk-live-abcdef");
//! assert_eq!(
//!     redact::clean("401: bad key sk-live-abcdef\x1b[31m!"),
//!     "401: bad key [redacted][31m!"
//! );
//! ```

use std::borrow::Cow;
use std::sync::{OnceLock, RwLock};

/// What a secret becomes.
pub const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are not searched for: they would match ordinary text.
pub const SHORTEST_SECRET: usize = 4;

fn secrets() -> &'static RwLock<Vec<String>> {
    static SECRETS: OnceLock<RwLock<Vec<String>>> = OnceLock::new();
    SECRETS.get_or_init(|| RwLock::new(Vec::new()))
}

/// Remembers `secret` (and the forms an encoder would write it in) so that [`clean`] removes
/// it from every text from now on. Blank and very short strings are ignored.
pub fn register(secret: &str) {
    let secret = secret.trim();
    if secret.chars().count() < SHORTEST_SECRET {
        return;
    }
    let forms = [
        secret.to_owned(),
        json_escaped(secret),
        html_escaped(secret),
        percent_encoded(secret),
    ];
    let mut known = secrets()
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for form in forms {
        if !known.contains(&form) {
            known.push(form);
        }
    }
    // Longest first, so a secret that contains another is replaced whole.
    known.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// Registers the user and password of `url` (`http://user:password@host`), if any.
pub fn register_url_credentials(url: &str) {
    let Some((_, rest)) = url.split_once("://") else {
        return;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let Some((userinfo, _)) = authority.rsplit_once('@') else {
        return;
    };
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    register(password);
    register(user);
    register(userinfo);
}

/// Words that mark a name as a secret's: `api_key`, `hf_token`, `HF_TOKEN`, `--api-key`,
/// `x-auth-token`, `password` (a whole part of the name, so `max_tokens` and `tokenizer`
/// are not).
const SECRET_WORDS: [&str; 12] = [
    "key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "cookie",
];

/// Whether `name` (a JSON key, a flag or an environment variable) names a secret: one of
/// its parts, split at `_`, `-`, `.` and lower-to-upper case changes, is a secret word.
pub fn is_secret_name(name: &str) -> bool {
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        let split = matches!(c, '_' | '-' | '.') || (c.is_uppercase() && previous_lower);
        if split && !part.is_empty() {
            parts.push(std::mem::take(&mut part));
        }
        if c.is_alphanumeric() {
            part.extend(c.to_lowercase());
        }
        previous_lower = c.is_lowercase();
    }
    parts.push(part);
    parts.iter().any(|p| SECRET_WORDS.contains(&p.as_str()))
}

/// Registers every string in `value` (a request body's extra fields) held under a name that
/// names a secret (`{"api_key": "…"}`, `{"headers": {"Authorization": "…"}}`).
pub fn register_json_secrets(value: &serde_json::Value) {
    register_json_under(value, false);
}

fn register_json_under(value: &serde_json::Value, secret: bool) {
    match value {
        serde_json::Value::String(s) if secret => register_value(s),
        serde_json::Value::Array(items) => {
            for item in items {
                register_json_under(item, secret);
            }
        }
        serde_json::Value::Object(fields) => {
            for (name, item) in fields {
                register_json_under(item, secret || is_secret_name(name));
            }
        }
        _ => {}
    }
}

/// Registers the secrets of a shell command line (a server's launch command): the value of
/// a flag that names one (`--api-key K`, `--hf-token=K`), of an environment assignment
/// (`HF_TOKEN=K vllm serve …`, `-e HF_TOKEN=K`) and of an `Authorization` header.
pub fn register_command_secrets(command: &str) {
    let words: Vec<&str> = command
        .split_whitespace()
        .map(|w| w.trim_matches(['"', '\'', '\\']))
        .collect();
    for (i, word) in words.iter().enumerate() {
        let next = words.get(i + 1).copied();
        if let Some((name, value)) = word.split_once('=') {
            if is_secret_name(name.trim_start_matches('-')) {
                register_value(value.trim_matches(['"', '\'']));
            }
        } else if word.starts_with('-') && is_secret_name(word.trim_start_matches('-')) {
            // `--api-key K`; `--insecure` followed by another flag names nothing.
            if let Some(next) = next.filter(|n| !n.starts_with('-')) {
                register_value(next);
            }
        } else if word.eq_ignore_ascii_case("authorization:") || word.eq_ignore_ascii_case("bearer")
        {
            next.into_iter().for_each(register_value);
        }
    }
}

/// Registers a secret's value and, for `Bearer K`, the key alone.
fn register_value(value: &str) {
    register(value);
    if let Some(key) = value.strip_prefix("Bearer ") {
        register(key);
    }
}

/// `text` with every registered secret replaced by [`REDACTED`] and control characters other
/// than newline and tab removed.
pub fn clean(text: &str) -> Cow<'_, str> {
    let has_control = text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t');
    // A poisoned lock still holds every secret registered: use them.
    let known = secrets()
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let has_secret = known.iter().any(|s| text.contains(s.as_str()));
    if !has_control && !has_secret {
        return Cow::Borrowed(text);
    }
    let mut out: String = if has_control {
        text.chars()
            .filter(|&c| !c.is_control() || c == '\n' || c == '\t')
            .collect()
    } else {
        text.to_owned()
    };
    for secret in known.iter() {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), REDACTED);
        }
    }
    Cow::Owned(out)
}

/// `secret` as a JSON string's content.
fn json_escaped(secret: &str) -> String {
    let quoted = serde_json::to_string(secret).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or_default()
        .to_owned()
}

/// `secret` as HTML text.
fn html_escaped(secret: &str) -> String {
    secret
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// `secret` percent-encoded as a URL component.
fn percent_encoded(secret: &str) -> String {
    let mut out = String::with_capacity(secret.len());
    for b in secret.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn secrets_are_redacted_in_every_encoding_and_controls_dropped() {
        register("k<&\"'ey-123");
        let json = serde_json::to_string("k<&\"'ey-123").unwrap();
        assert!(!clean(&json).contains("ey-123"), "{}", clean(&json));
        assert_eq!(clean("x k&lt;&amp;&quot;&#39;ey-123 y"), "x [redacted] y");
        assert_eq!(clean("a\u{1b}[2Jb\r\nc\td"), "a[2Jb\nc\td");
        assert!(matches!(clean("plain text"), Cow::Borrowed(_)));
        register("ab");
        assert_eq!(clean("ab"), "ab", "too short to be searched for");
        register_url_credentials("http://alice:s3cr3t-pw@gpu-box:8000/v1");
        assert_eq!(
            clean("GET http://alice:s3cr3t-pw@gpu-box:8000/v1"),
            "GET http://[redacted]@gpu-box:8000/v1"
        );
    }

    #[test]
    fn secrets_in_request_fields_and_launch_commands_are_registered() {
        assert!(is_secret_name("api_key") && is_secret_name("HF_TOKEN"));
        assert!(is_secret_name("--api-key") && is_secret_name("xAuthToken"));
        assert!(!is_secret_name("max_tokens") && !is_secret_name("tokenizer"));
        assert!(!is_secret_name("keyword") && !is_secret_name("monkey"));
        register_json_secrets(&serde_json::json!({
            "max_tokens": 5,
            "tokenizer": "org/tok-name",
            "extra": {"headers": {"Authorization": "Bearer tok-json-777"}, "api_key": "sk-json-555"},
        }));
        assert_eq!(clean("sk-json-555 tok-json-777"), "[redacted] [redacted]");
        assert_eq!(clean("org/tok-name"), "org/tok-name");
        register_command_secrets(
            "HF_TOKEN=hf-env-111 vllm serve m --api-key sk-flag-222 --hf-token=hf-eq-333 --port 8000",
        );
        assert_eq!(
            clean("hf-env-111 sk-flag-222 hf-eq-333 8000"),
            "[redacted] [redacted] [redacted] 8000"
        );
    }

    proptest! {
        /// Whatever surrounds a registered secret, it never survives cleaning, and the text
        /// stays free of control characters.
        #[test]
        fn a_registered_secret_never_survives(
            before in ".{0,40}",
            after in ".{0,40}",
            secret in "[a-zA-Z0-9_\\-]{8,24}",
        ) {
            register(&secret);
            let text = format!("{before}{secret}{after}");
            let cleaned = clean(&text);
            prop_assert!(!cleaned.contains(&secret));
            prop_assert!(cleaned.chars().all(|c| !c.is_control() || c == '\n' || c == '\t'));
        }
    }
}
