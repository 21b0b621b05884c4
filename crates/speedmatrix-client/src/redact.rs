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
    let Ok(mut known) = secrets().write() else {
        return;
    };
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

/// `text` with every registered secret replaced by [`REDACTED`] and control characters other
/// than newline and tab removed.
pub fn clean(text: &str) -> Cow<'_, str> {
    let has_control = text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t');
    let known = secrets().read().map(|k| k.clone()).unwrap_or_default();
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
    for secret in &known {
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
