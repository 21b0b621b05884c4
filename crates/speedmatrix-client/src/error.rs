//! The crate's one error type and its stable grouping key.

use std::time::Duration;

/// Everything that can go wrong talking to a server.
///
/// Every variant names what failed and, where it helps, the URL, the HTTP
/// status and a short snippet of what the server sent. Use [`ClientError::kind`] to
/// group failures in reports: its string form is stable across releases.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The client configuration cannot work (bad base URL, bad API key bytes, TLS setup).
    #[error("invalid client configuration: {reason}")]
    InvalidConfig {
        /// What is wrong and how to fix it.
        reason: String,
    },

    /// A request could not be encoded.
    #[error("invalid request: {reason}")]
    InvalidRequest {
        /// What is wrong.
        reason: String,
    },

    /// The TCP or TLS connection could not be made.
    #[error("could not connect to {url} ({cause}); is the server running and the URL right?")]
    Connect {
        /// The URL requested.
        url: String,
        /// The transport's account of the failure, outermost first.
        cause: String,
    },

    /// Connecting took longer than the connect timeout.
    #[error("connecting to {url} timed out after {after:?}")]
    TimeoutConnect {
        /// The URL requested.
        url: String,
        /// The configured limit.
        after: Duration,
    },

    /// The response head did not arrive within the headers timeout.
    #[error("no response headers from {url} within {after:?} of sending the request")]
    TimeoutHeaders {
        /// The URL requested.
        url: String,
        /// The configured limit.
        after: Duration,
    },

    /// The body went quiet for longer than the idle timeout.
    #[error("no data from {url} for {after:?} in the middle of the response")]
    TimeoutIdle {
        /// The URL requested.
        url: String,
        /// The configured limit.
        after: Duration,
    },

    /// The server answered with a non-success status.
    #[error("{url} answered HTTP {status}: {message}")]
    HttpStatus {
        /// The URL requested.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The server's error message when it sent one, else a short snippet of the body.
        message: String,
        /// The delay the server asked for in a `Retry-After` header (seconds form), if any.
        retry_after: Option<Duration>,
    },

    /// The server answered 2xx but not with the content type asked for.
    #[error(
        "{url} answered HTTP {status} with content type {content_type:?}, expected {expected}: {snippet}"
    )]
    UnexpectedContentType {
        /// The URL requested.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The `content-type` header received (empty when absent).
        content_type: String,
        /// The content type expected.
        expected: &'static str,
        /// The start of the body.
        snippet: String,
    },

    /// The server sent something that does not follow the protocol (bad JSON, wrong shape).
    #[error("protocol error: {reason}: {snippet}")]
    Protocol {
        /// What was wrong.
        reason: String,
        /// The start of the offending data.
        snippet: String,
    },

    /// One server-sent event grew past the configured cap.
    #[error(
        "a server-sent event exceeded the {limit_bytes}-byte limit; raise ClientConfig::max_event_bytes if the server really sends events this large"
    )]
    SseLineTooLong {
        /// The configured cap in bytes.
        limit_bytes: usize,
    },

    /// The server reported an error inside an otherwise successful stream.
    #[error("the server reported an error mid-stream: {message}")]
    ServerErrorEvent {
        /// The server's message (or a snippet of the event data).
        message: String,
        /// The error code or type when the server gave one.
        code: Option<String>,
    },

    /// The connection ended or failed before the response was complete.
    #[error("connection to {url} ended early: {reason}{}", cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default())]
    Disconnected {
        /// The URL requested.
        url: String,
        /// What was observed.
        reason: String,
        /// The transport's account of the failure, when there is one.
        cause: Option<String>,
    },
}

/// Stable category of an [`ClientError`], for grouping failures in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`ClientError::InvalidConfig`].
    Config,
    /// [`ClientError::InvalidRequest`].
    InvalidRequest,
    /// [`ClientError::Connect`].
    Connect,
    /// [`ClientError::TimeoutConnect`].
    TimeoutConnect,
    /// [`ClientError::TimeoutHeaders`].
    TimeoutHeaders,
    /// [`ClientError::TimeoutIdle`].
    TimeoutIdle,
    /// [`ClientError::HttpStatus`].
    HttpStatus,
    /// [`ClientError::UnexpectedContentType`].
    ContentType,
    /// [`ClientError::Protocol`].
    Protocol,
    /// [`ClientError::SseLineTooLong`].
    SseLineTooLong,
    /// [`ClientError::ServerErrorEvent`].
    ServerErrorEvent,
    /// [`ClientError::Disconnected`].
    Disconnected,
}

impl ErrorKind {
    /// Stable snake_case name, e.g. `"timeout_idle"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Connect => "connect",
            ErrorKind::TimeoutConnect => "timeout_connect",
            ErrorKind::TimeoutHeaders => "timeout_headers",
            ErrorKind::TimeoutIdle => "timeout_idle",
            ErrorKind::HttpStatus => "http_status",
            ErrorKind::ContentType => "content_type",
            ErrorKind::Protocol => "protocol",
            ErrorKind::SseLineTooLong => "sse_line_too_long",
            ErrorKind::ServerErrorEvent => "server_error_event",
            ErrorKind::Disconnected => "disconnected",
        }
    }
}

impl ErrorKind {
    /// The kind named `name` ([`ErrorKind::as_str`]), if any.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        [
            ErrorKind::Config,
            ErrorKind::InvalidRequest,
            ErrorKind::Connect,
            ErrorKind::TimeoutConnect,
            ErrorKind::TimeoutHeaders,
            ErrorKind::TimeoutIdle,
            ErrorKind::HttpStatus,
            ErrorKind::ContentType,
            ErrorKind::Protocol,
            ErrorKind::SseLineTooLong,
            ErrorKind::ServerErrorEvent,
            ErrorKind::Disconnected,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ClientError {
    /// The stable category of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::InvalidConfig { .. } => ErrorKind::Config,
            ClientError::InvalidRequest { .. } => ErrorKind::InvalidRequest,
            ClientError::Connect { .. } => ErrorKind::Connect,
            ClientError::TimeoutConnect { .. } => ErrorKind::TimeoutConnect,
            ClientError::TimeoutHeaders { .. } => ErrorKind::TimeoutHeaders,
            ClientError::TimeoutIdle { .. } => ErrorKind::TimeoutIdle,
            ClientError::HttpStatus { .. } => ErrorKind::HttpStatus,
            ClientError::UnexpectedContentType { .. } => ErrorKind::ContentType,
            ClientError::Protocol { .. } => ErrorKind::Protocol,
            ClientError::SseLineTooLong { .. } => ErrorKind::SseLineTooLong,
            ClientError::ServerErrorEvent { .. } => ErrorKind::ServerErrorEvent,
            ClientError::Disconnected { .. } => ErrorKind::Disconnected,
        }
    }

    /// The HTTP status, for [`ClientError::HttpStatus`] and [`ClientError::UnexpectedContentType`].
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::HttpStatus { status, .. }
            | ClientError::UnexpectedContentType { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The delay an [`ClientError::HttpStatus`] asked for with `Retry-After` (429 and 503 send it).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ClientError::HttpStatus { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// True for the three timeout kinds.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::TimeoutConnect | ErrorKind::TimeoutHeaders | ErrorKind::TimeoutIdle
        )
    }
}

/// An error and its sources as one line: `outer: inner: root`.
pub(crate) fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut current = err.source();
    while let Some(source) = current {
        let message = source.to_string();
        if !text.ends_with(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        current = source.source();
    }
    text
}

/// Longest snippet of server data kept in an error, in bytes.
const SNIPPET_BYTES: usize = 240;

/// The start of `data` as text, cut at a character boundary, for error messages.
pub(crate) fn snippet(data: &[u8]) -> String {
    let cut = data.len().min(SNIPPET_BYTES);
    let text = String::from_utf8_lossy(&data[..cut]);
    let mut out: String = text.trim().to_owned();
    if data.len() > cut {
        out.push('…');
    }
    out
}

/// The human message in an error body: vLLM's `{"error": {"message": ..}}`,
/// older `{"object": "error", "message": ..}`, FastAPI's `{"detail": ..}`, or a snippet.
pub(crate) fn server_message(body: &[u8]) -> (String, Option<String>) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (snippet(body), None);
    };
    error_message_of(&value).unwrap_or_else(|| (snippet(body), None))
}

/// The message and code of an OpenAI/vLLM-style error object, if `value` is one.
pub(crate) fn error_message_of(value: &serde_json::Value) -> Option<(String, Option<String>)> {
    speedmatrix_engines::error_message(value)
}
