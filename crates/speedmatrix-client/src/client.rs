//! The HTTP client: configuration, connection pool, TLS, request plumbing.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::error::{chain_text, server_message, snippet};
use crate::request::{ChatRequest, CompletionRequest};
use crate::stream::{RequestTimings, ResponseStream};
use crate::wire::{StampingConnector, WireClock};
use crate::{ClientError, sse};

/// An API key. Debug and Display print `***`, so it cannot leak into logs or reports.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key, and registers it with [`crate::redact`] so no output shows it.
    pub fn new(key: impl Into<String>) -> Self {
        let key = key.into();
        crate::redact::register(&key);
        ApiKey(key)
    }

    /// The key in `OPENAI_API_KEY`, when set and not empty.
    pub fn from_env() -> Option<Self> {
        std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.trim().is_empty())
            .map(ApiKey::new)
    }

    /// The secret itself; only for putting it in a header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl FromStr for ApiKey {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ApiKey::new(s))
    }
}

/// How long to wait at each stage of a request; `None` waits forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// TCP (and TLS) connection setup.
    pub connect: Option<Duration>,
    /// From sending the request to receiving the response head (includes
    /// waiting for a pooled connection and connecting).
    pub headers: Option<Duration>,
    /// Longest silence between two reads of a response body.
    pub idle: Option<Duration>,
}

impl Default for Timeouts {
    /// Connect 10 s, headers 300 s, idle 300 s: generous, since a long prefill
    /// under load is what a benchmark provokes on purpose.
    fn default() -> Self {
        Timeouts {
            connect: Some(Duration::from_secs(10)),
            headers: Some(Duration::from_secs(300)),
            idle: Some(Duration::from_secs(300)),
        }
    }
}

impl Timeouts {
    /// All three limits set to the given values.
    pub fn new(connect: Duration, headers: Duration, idle: Duration) -> Self {
        Timeouts {
            connect: Some(connect),
            headers: Some(headers),
            idle: Some(idle),
        }
    }
}

/// Everything a [`Client`] needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Server root such as `http://127.0.0.1:8000`; a trailing `/v1` is accepted and dropped.
    pub base_url: String,
    /// Sent as `Authorization: Bearer ...` when set.
    pub api_key: Option<ApiKey>,
    /// Stage timeouts.
    pub timeouts: Timeouts,
    /// Skip TLS certificate verification (self-signed test servers only: it
    /// lets anyone on the path read and change the traffic).
    pub insecure: bool,
    /// Cap on one server-sent event, in bytes (default 64 MiB).
    pub max_event_bytes: usize,
    /// How long an idle pooled connection is kept (default 3 s): shorter than the keep-alive
    /// timeout of the usual servers (uvicorn in vLLM and SGLang, cpp-httplib in llama-server:
    /// 5 s), so that a request is never sent on a connection the server is closing — which
    /// fails it with "connection closed before message completed".
    pub pool_idle_timeout: Duration,
}

impl ClientConfig {
    /// Defaults for `base_url`, no API key; credentials in the URL are registered with
    /// [`crate::redact`] so no output shows them.
    pub fn new(base_url: impl Into<String>) -> Self {
        let base_url = base_url.into();
        crate::redact::register_url_credentials(&base_url);
        ClientConfig {
            base_url,
            api_key: None,
            timeouts: Timeouts::default(),
            insecure: false,
            max_event_bytes: sse::DEFAULT_MAX_EVENT_BYTES,
            pool_idle_timeout: Duration::from_secs(3),
        }
    }

    /// Like [`new`](Self::new), with the API key from `OPENAI_API_KEY` if set.
    pub fn from_env(base_url: impl Into<String>) -> Self {
        Self::new(base_url).api_key(ApiKey::from_env())
    }

    /// Sets the API key.
    pub fn api_key(mut self, key: Option<ApiKey>) -> Self {
        self.api_key = key;
        self
    }

    /// Sets the timeouts.
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Skips TLS certificate verification; see [`ClientConfig::insecure`].
    pub fn insecure(mut self, insecure: bool) -> Self {
        self.insecure = insecure;
        self
    }

    /// Sets the cap on one server-sent event.
    pub fn max_event_bytes(mut self, max: usize) -> Self {
        self.max_event_bytes = max;
        self
    }
}

/// A whole answer as it came: see [`Client::get_raw`] and [`Client::post_json_raw`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RawResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The `content-type` header (empty when absent).
    pub content_type: String,
    /// The body, exactly as received (after transfer decoding), at most 32 MiB.
    pub body: Bytes,
}

impl RawResponse {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text, invalid UTF-8 replaced.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

type Transport = HyperClient<StampingConnector<HttpsConnector<HttpConnector>>, Full<Bytes>>;

/// OpenAI-compatible HTTP client. Cheap to clone; clones share the pool.
///
/// One client serves any number of concurrent streams: the pool opens a new
/// keep-alive connection whenever none is idle (HTTP/1.1, `TCP_NODELAY` on).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: Transport,
    base: String,
    auth: Option<HeaderValue>,
    timeouts: Timeouts,
    max_event_bytes: usize,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base)
            .field("api_key", &self.inner.auth.as_ref().map(|_| "***"))
            .field("timeouts", &self.inner.timeouts)
            .finish()
    }
}

/// Largest read buffer of one connection. hyper's grows by doubling while
/// reads fill it, up to 400 KiB by default: against a fast server every
/// stream of a 128-stream cell got there, over 40 MiB for bytes that are
/// parsed as soon as they arrive. 64 KiB holds hundreds of events a read.
const CONNECTION_READ_BUFFER: usize = 64 * 1024;
/// Largest error body kept, in bytes.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// Largest probe body read (`/metrics` pages of big deployments are large).
const PROBE_BODY_LIMIT: usize = 32 * 1024 * 1024;

impl Client {
    /// Builds a client. Needs a Tokio runtime only when requests are made.
    pub fn new(config: ClientConfig) -> Result<Client, ClientError> {
        let base = normalize_base(&config.base_url)?;
        let auth = config.api_key.as_ref().map(bearer).transpose()?;
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(config.timeouts.connect);
        http.set_keepalive(Some(Duration::from_secs(30)));
        http.enforce_http(false);
        let tls = crate::tls::client_config(config.insecure, base.starts_with("https:"))?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let transport = HyperClient::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_max_idle_per_host(usize::MAX)
            .http1_max_buf_size(CONNECTION_READ_BUFFER)
            .build(StampingConnector(connector));
        Ok(Client {
            inner: Arc::new(Inner {
                http: transport,
                base,
                auth,
                timeouts: config.timeouts,
                max_event_bytes: config.max_event_bytes,
            }),
        })
    }

    /// The normalized server root, e.g. `http://127.0.0.1:8000`.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// The configured timeouts.
    pub fn timeouts(&self) -> Timeouts {
        self.inner.timeouts
    }

    /// `POST /v1/completions` as a stream (`stream: true` is forced).
    pub async fn stream_completion(
        &self,
        request: &CompletionRequest,
    ) -> Result<ResponseStream, ClientError> {
        let body = if request.generation.stream {
            request.to_body()?
        } else {
            let mut request = request.clone();
            request.generation.stream = true;
            request.to_body()?
        };
        self.stream("/v1/completions", body).await
    }

    /// `POST /v1/chat/completions` as a stream (`stream: true` is forced).
    pub async fn stream_chat(&self, request: &ChatRequest) -> Result<ResponseStream, ClientError> {
        let body = if request.generation.stream {
            request.to_body()?
        } else {
            let mut request = request.clone();
            request.generation.stream = true;
            request.to_body()?
        };
        self.stream("/v1/chat/completions", body).await
    }

    /// Posts an already encoded JSON body to `path` and opens its event stream.
    pub async fn stream_raw(
        &self,
        path: &str,
        body: Vec<u8>,
    ) -> Result<ResponseStream, ClientError> {
        self.stream(path, body).await
    }

    async fn stream(&self, path: &str, body: Vec<u8>) -> Result<ResponseStream, ClientError> {
        let url = self.url(path);
        let request = self.request(Method::POST, &url, "text/event-stream", Some(body))?;
        let handed_over = Instant::now();
        let response = self.send(request, &url).await?;
        let headers_at = Instant::now();
        // The request left when its connection wrote it, not when it
        // joined the queue for a connection (see `wire.rs`).
        let sent_at = response
            .extensions()
            .get::<WireClock>()
            .and_then(WireClock::request_written)
            .filter(|w| *w >= handed_over && *w <= headers_at)
            .unwrap_or(handed_over);
        let status = response.status();
        if !status.is_success() {
            return Err(self.status_error(response, url).await);
        }
        let content_type = content_type_of(&response);
        let mut stream = ResponseStream::new(
            response.into_body(),
            url.clone(),
            self.inner.timeouts.idle,
            self.inner.max_event_bytes,
            RequestTimings::new(sent_at, headers_at),
        );
        if content_type
            .to_ascii_lowercase()
            .starts_with("text/event-stream")
        {
            return Ok(stream);
        }
        // Some servers and proxies send an event stream with no or a generic
        // Content-Type: the body decides, and an HTML or JSON one is an error.
        match stream.sniff(&content_type).await? {
            None => Ok(stream),
            Some(start) => Err(ClientError::UnexpectedContentType {
                url,
                status: status.as_u16(),
                content_type,
                expected: "text/event-stream",
                snippet: snippet(&start),
            }),
        }
    }

    /// `GET path`, kept verbatim whatever the status (for tools that record
    /// exchanges as fixtures). Fails only when no answer arrives.
    pub async fn get_raw(&self, path: &str) -> Result<RawResponse, ClientError> {
        self.exchange(Method::GET, path, None).await
    }

    /// `POST path` with a JSON body, the answer kept verbatim whatever its
    /// status (an event stream is read to its end). Fails only when no whole
    /// answer arrives.
    pub async fn post_json_raw(
        &self,
        path: &str,
        body: Vec<u8>,
    ) -> Result<RawResponse, ClientError> {
        self.exchange(Method::POST, path, Some(body)).await
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<RawResponse, ClientError> {
        let url = self.url(path);
        let request = self.request(method, &url, "*/*", body)?;
        let response = self.send(request, &url).await?;
        let status = response.status().as_u16();
        let content_type = content_type_of(&response);
        let body = self.read_limited(response, &url, PROBE_BODY_LIMIT).await?;
        Ok(RawResponse {
            status,
            content_type,
            body,
        })
    }

    /// GETs or POSTs `path` and returns the body; `None` when the server has no such endpoint.
    pub(crate) async fn fetch_optional(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Option<Bytes>, ClientError> {
        let url = self.url(path);
        let request = self.request(
            method,
            &url,
            "application/json, text/plain;q=0.9, */*;q=0.5",
            body,
        )?;
        let response = self.send(request, &url).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND || status == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(self.status_error(response, url).await);
        }
        self.read_limited(response, &url, PROBE_BODY_LIMIT)
            .await
            .map(Some)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.inner.base, path)
    }

    fn request(
        &self,
        method: Method,
        url: &str,
        accept: &'static str,
        body: Option<Vec<u8>>,
    ) -> Result<Request<Full<Bytes>>, ClientError> {
        let uri: Uri = url.parse().map_err(|err| ClientError::InvalidConfig {
            reason: format!("cannot build a URL from {url:?}: {err}"),
        })?;
        let mut builder = Request::builder()
            .method(method)
            .uri(uri)
            .header(ACCEPT, accept)
            .header(
                USER_AGENT,
                concat!("speedmatrix/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(auth) = &self.inner.auth {
            builder = builder.header(AUTHORIZATION, auth.clone());
        }
        let body = match body {
            Some(bytes) => {
                builder = builder.header(CONTENT_TYPE, "application/json");
                Full::new(Bytes::from(bytes))
            }
            None => Full::new(Bytes::new()),
        };
        builder
            .body(body)
            .map_err(|err| ClientError::InvalidRequest {
                reason: format!("cannot build the HTTP request: {err}"),
            })
    }

    /// Sends `request`; sent again (at most [`STALE_RETRIES`] times) when the connection it
    /// went out on closed before any of the response came. That is a pooled connection the
    /// server had closed as it was taken (uvicorn closes one after an unhandled exception's
    /// 500, e.g. `transformers serve`'s `/v1/models` without a cache folder, and the pool may
    /// hand it out before its close is read): the server never answered the request, so
    /// nothing is measured twice, and the request's send time is the one that went out.
    async fn send(
        &self,
        request: Request<Full<Bytes>>,
        url: &str,
    ) -> Result<Response<Incoming>, ClientError> {
        let mut tries = 0;
        loop {
            let copy = copy_request(&request);
            match self.send_once(copy, url).await {
                Err(SendError::Stale(_)) if tries < STALE_RETRIES => tries += 1,
                Err(SendError::Stale(e) | SendError::Other(e)) => return Err(e),
                Ok(response) => return Ok(response),
            }
        }
    }

    async fn send_once(
        &self,
        request: Request<Full<Bytes>>,
        url: &str,
    ) -> Result<Response<Incoming>, SendError> {
        let future = self.inner.http.request(request);
        let result = match self.inner.timeouts.headers {
            Some(limit) => match tokio::time::timeout(limit, future).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(SendError::Other(ClientError::TimeoutHeaders {
                        url: url.to_owned(),
                        after: limit,
                    }));
                }
            },
            None => future.await,
        };
        result.map_err(|err| {
            let stale = closed_before_any_answer(&err);
            let e = self.transport_error(url, err);
            if stale {
                SendError::Stale(e)
            } else {
                SendError::Other(e)
            }
        })
    }

    fn transport_error(&self, url: &str, err: hyper_util::client::legacy::Error) -> ClientError {
        let url = url.to_owned();
        if err.is_connect() {
            if let (true, Some(after)) = (is_timed_out(&err), self.inner.timeouts.connect) {
                return ClientError::TimeoutConnect { url, after };
            }
            return ClientError::Connect {
                url,
                cause: chain_text(&err),
            };
        }
        ClientError::Disconnected {
            url,
            reason: "the connection failed before the response head arrived".to_owned(),
            cause: Some(chain_text(&err)),
        }
    }

    async fn status_error(&self, response: Response<Incoming>, url: String) -> ClientError {
        let status = response.status().as_u16();
        let retry_after = retry_after_of(&response);
        let message = match self.read_limited(response, &url, ERROR_BODY_LIMIT).await {
            Ok(body) if body.is_empty() => "(empty body)".to_owned(),
            Ok(body) => server_message(&body).0,
            Err(err) => format!("(body unreadable: {err})"),
        };
        ClientError::HttpStatus {
            url,
            status,
            message,
            retry_after,
        }
    }

    /// Reads at most `limit` bytes of the body (the rest is dropped), with the idle timeout per read.
    async fn read_limited(
        &self,
        response: Response<Incoming>,
        url: &str,
        limit: usize,
    ) -> Result<Bytes, ClientError> {
        let mut body = response.into_body();
        let mut out = Vec::new();
        while out.len() < limit {
            let frame = match self.inner.timeouts.idle {
                Some(after) => tokio::time::timeout(after, body.frame())
                    .await
                    .map_err(|_| ClientError::TimeoutIdle {
                        url: url.to_owned(),
                        after,
                    })?,
                None => body.frame().await,
            };
            match frame {
                None => break,
                Some(Err(err)) => {
                    return Err(ClientError::Disconnected {
                        url: url.to_owned(),
                        reason: "the body ended abruptly".to_owned(),
                        cause: Some(chain_text(&err)),
                    });
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let room = limit - out.len();
                        out.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
            }
        }
        Ok(Bytes::from(out))
    }
}

fn content_type_of<B>(response: &Response<B>) -> String {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

fn bearer(key: &ApiKey) -> Result<HeaderValue, ClientError> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
        ClientError::InvalidConfig {
            reason: "the API key contains characters not allowed in an HTTP header".to_owned(),
        }
    })?;
    value.set_sensitive(true);
    Ok(value)
}

fn is_timed_out(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        current = e.source();
    }
    false
}

/// `http(s)://host[:port][/prefix]` without a trailing `/` or `/v1`.
fn normalize_base(url: &str) -> Result<String, ClientError> {
    let trimmed = url.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
    let invalid = |why: &str| ClientError::InvalidConfig {
        reason: format!("base URL {url:?} {why}; expected e.g. http://127.0.0.1:8000"),
    };
    let uri: Uri = trimmed.parse().map_err(|_| invalid("does not parse"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(invalid("must start with http:// or https://")),
    }
    if uri.authority().is_none() {
        return Err(invalid("has no host"));
    }
    if uri.query().is_some() {
        return Err(invalid("must not have a query string"));
    }
    Ok(trimmed.to_owned())
}

/// `Retry-After` in its delay-seconds form; the HTTP-date form is rare from
/// inference servers and is ignored.
fn retry_after_of(response: &Response<Incoming>) -> Option<Duration> {
    let text = response.headers().get(RETRY_AFTER)?.to_str().ok()?;
    text.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// How many times a request that met a closed pooled connection is sent again.
const STALE_RETRIES: u32 = 2;

/// Why one send failed: on a connection closed before any answer (worth another), or not.
enum SendError {
    Stale(ClientError),
    Other(ClientError),
}

/// A copy of a request to send again (its body is shared bytes).
fn copy_request(request: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut copy = Request::new(request.body().clone());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    copy
}

/// Whether the connection closed before any byte of the response came: hyper's "connection
/// closed before message completed", a request it canceled because the connection went, or
/// the socket reset, aborted or at its end as the request was written (a connection the
/// server had closed: it answers the write with a reset). A response the server did start,
/// a parse error and a new connection that could not be made are not.
fn closed_before_any_answer(err: &hyper_util::client::legacy::Error) -> bool {
    use std::io::ErrorKind;
    if err.is_connect() {
        return false;
    }
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
            );
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_never_prints() {
        let key = ApiKey::new("sk-secret");
        assert_eq!(format!("{key}"), "***");
        assert!(!format!("{key:?}").contains("secret"));
        let client = Client::new(ClientConfig::new("http://h:1").api_key(Some(key))).unwrap();
        assert!(!format!("{client:?}").contains("secret"));
    }

    #[test]
    fn base_urls_are_normalized_or_rejected() {
        assert_eq!(
            normalize_base("http://h:8000/v1/").unwrap(),
            "http://h:8000"
        );
        assert_eq!(normalize_base(" https://h/api ").unwrap(), "https://h/api");
        for bad in ["h:8000", "ftp://h", "http://h/?a=1", ""] {
            assert_eq!(
                normalize_base(bad).unwrap_err().kind(),
                crate::ErrorKind::Config,
                "{bad}"
            );
        }
    }
}
