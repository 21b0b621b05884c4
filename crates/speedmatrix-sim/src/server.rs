//! The HTTP server: routing, request validation, and wiring requests to the engine task.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::{self, Api, GenerateRequest, PromptInput, ResponseMeta, TokenizeRequest};
use crate::body::{AbortGuard, SimBody, SseStream, StreamSetup};
use crate::driver::{EngineHandle, Output};
use crate::engine::NewRequest;
use crate::fault::{FAULT_HEADER, Fault};
use crate::text::{Message, TextModel};
use crate::wire::{UsageMode, Wire};
use speedmatrix_engines::{llamacpp, ollama, sglang, tgi};

use crate::{CapacityApi, Dialect, Profile, SimError, metrics};

/// What `GET /version` reports: vLLM's version, marked as the simulator.
pub const VERSION: &str = "0.32.0-speedmatrix-sim";

/// Largest request body accepted (a 262K-token prompt is a few MiB of text).
const MAX_BODY_BYTES: usize = 64 << 20;

/// Prompts longer than this many bytes are tokenized on the blocking pool.
const INLINE_TOKENIZE_BYTES: usize = 16 << 10;

/// Starts simulated servers.
#[derive(Debug, Clone, Copy)]
pub struct SimServer;

/// A simulated server running on the current tokio runtime. Dropping it (or
/// [`RunningSim::shutdown`]) stops it.
#[derive(Debug)]
pub struct RunningSim {
    addr: SocketAddr,
    profile: Profile,
    shutdown: watch::Sender<bool>,
    accept: Option<JoinHandle<()>>,
}

impl SimServer {
    /// Binds `addr` (use port 0 for any free port) and serves `profile` until stopped.
    ///
    /// Must run inside a tokio runtime with the time and net drivers enabled.
    pub async fn start(profile: Profile, addr: SocketAddr) -> Result<RunningSim, SimError> {
        profile.validate()?;
        let fault = Fault::parse(profile.faults.as_deref().unwrap_or(""))?;
        let source = profile.tokenizer.clone();
        let text = tokio::task::spawn_blocking(move || TextModel::for_source(source.as_deref()))
            .await
            .map_err(|e| SimError::Tokenizer(format!("tokenizer loading failed: {e}")))??;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| SimError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| SimError::Bind { addr, source })?;
        let (shutdown, stop) = watch::channel(false);
        let engine = EngineHandle::spawn(&profile, text.output_ids(), stop.clone());
        let state = Arc::new(State {
            profile: profile.clone(),
            fault,
            text,
            engine,
            next_id: AtomicU64::new(1),
        });
        let accept = tokio::spawn(accept_loop(listener, state, stop));
        tracing::info!(addr = %bound, profile = %profile.name, "simulated server listening");
        Ok(RunningSim {
            addr: bound,
            profile,
            shutdown,
            accept: Some(accept),
        })
    }
}

impl RunningSim {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://ADDR` (OpenAI endpoints are under `/v1`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The profile being served.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Stops accepting, breaks open connections and stops the engine; waits for the accept loop.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
    }
}

impl Drop for RunningSim {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

#[derive(Debug)]
struct State {
    profile: Profile,
    fault: Fault,
    text: Arc<TextModel>,
    engine: EngineHandle,
    next_id: AtomicU64,
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, mut stop: watch::Receiver<bool>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                connections.spawn(async move {
                    let service = service_fn(move |req| handle(state.clone(), req));
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stop.changed() => break,
        }
    }
    connections.abort_all();
}

type Reply = Result<Response<SimBody>, std::io::Error>;

fn respond(status: StatusCode, content_type: &'static str, body: SimBody) -> Reply {
    let mut res = Response::new(body);
    *res.status_mut() = status;
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(res)
}

fn json_reply(status: StatusCode, body: Bytes) -> Reply {
    respond(status, "application/json", SimBody::full(body))
}

fn error_reply(status: StatusCode, message: &str) -> Reply {
    json_reply(status, api::error_body(status.as_u16(), message))
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_owned();
    let generation = matches!(path.as_str(), "/v1/completions" | "/v1/chat/completions");
    let header_fault = match req.headers().get(FAULT_HEADER) {
        Some(value) => match value
            .to_str()
            .map_err(|_| ())
            .and_then(|v| Fault::parse(v).map_err(|_| ()))
        {
            Ok(f) => Some(f),
            Err(()) => {
                let msg = format!(
                    "bad {FAULT_HEADER} header; see the speedmatrix_sim::fault docs for the grammar"
                );
                return error_reply(StatusCode::BAD_REQUEST, &msg);
            }
        },
        None => None,
    };
    if !generation
        && let Some(fault) = &header_fault
        && let Some(early) = early_fault(fault).await
    {
        return early;
    }
    match (req.method(), path.as_str()) {
        (&Method::GET, "/health") => respond(StatusCode::OK, "text/plain", SimBody::empty()),
        (&Method::GET, "/version") => json_reply(
            StatusCode::OK,
            api::json_bytes(&json!({ "version": VERSION })),
        ),
        (&Method::GET, "/v1/models") => json_reply(
            StatusCode::OK,
            api::models(
                &state.profile.served_model_name,
                state.profile.max_model_len,
            ),
        ),
        (&Method::GET, "/metrics") => {
            let text = metrics::render(&state.profile, &state.engine.snapshot());
            respond(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                SimBody::full(text),
            )
        }
        (&Method::POST, "/v1/completions") => {
            generate(state, req, Api::Completions, header_fault).await
        }
        (&Method::POST, "/v1/chat/completions") => {
            generate(state, req, Api::Chat, header_fault).await
        }
        (&Method::POST, "/tokenize") => tokenize(state, req).await,
        (&Method::GET, llamacpp::PROPS)
            if state.profile.capacity_api == CapacityApi::Llamacpp
                || state.profile.dialect == Dialect::Llamacpp =>
        {
            json_reply(
                StatusCode::OK,
                api::json_bytes(&llamacpp_props(&state.profile)),
            )
        }
        (&Method::GET, sglang::SERVER_INFO)
            if state.profile.capacity_api == CapacityApi::Sglang
                || state.profile.dialect == Dialect::Sglang =>
        {
            json_reply(
                StatusCode::OK,
                api::json_bytes(&sglang_server_info(&state.profile)),
            )
        }
        (&Method::GET, tgi::INFO) if state.profile.dialect == Dialect::Tgi => json_reply(
            StatusCode::OK,
            api::json_bytes(&tgi::info_json(
                &state.profile.served_model_name,
                state.profile.max_model_len,
                state.profile.max_num_seqs,
                "3.3.6",
            )),
        ),
        (&Method::GET, ollama::VERSION) if state.profile.dialect == Dialect::Ollama => json_reply(
            StatusCode::OK,
            api::json_bytes(&ollama::version_json("0.12.3")),
        ),
        (
            _,
            "/health"
            | "/version"
            | "/v1/models"
            | "/metrics"
            | "/v1/completions"
            | "/v1/chat/completions"
            | "/tokenize",
        ) => json_reply(
            StatusCode::METHOD_NOT_ALLOWED,
            api::json_bytes(&json!({ "detail": "Method Not Allowed" })),
        ),
        _ => json_reply(
            StatusCode::NOT_FOUND,
            api::json_bytes(&json!({ "detail": "Not Found" })),
        ),
    }
}

/// llama.cpp's `/props` in the shape `llama-server --kv-unified` answers: one slot may use the
/// whole pool, which all slots share.
fn llamacpp_props(profile: &Profile) -> serde_json::Value {
    llamacpp::props_json(
        profile.usable_kv_tokens(),
        profile.max_num_seqs,
        &profile.served_model_name,
        VERSION,
    )
}

/// SGLang's `/get_server_info`: the server arguments with the scheduler's figures.
fn sglang_server_info(profile: &Profile) -> serde_json::Value {
    sglang::server_info_json(
        profile.usable_kv_tokens(),
        profile.max_num_seqs,
        profile.max_model_len,
        &profile.served_model_name,
        VERSION,
    )
}

/// Applies `slow-headers`, then answers `status` if the fault asks for one.
async fn early_fault(fault: &Fault) -> Option<Reply> {
    if let Some(delay) = fault.slow_headers {
        tokio::time::sleep(delay).await;
    }
    fault.status.map(|code| injected_status(code, fault))
}

fn injected_status(code: u16, fault: &Fault) -> Reply {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = error_reply(
        status,
        &format!("injected fault: HTTP {code} (x-sim-fault)"),
    )?;
    if let Some(secs) = fault.retry_after() {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    Ok(res)
}

/// A request rejected with an HTTP status and a vLLM-shaped message.
struct Rejection(StatusCode, String);

impl Rejection {
    fn bad(message: impl Into<String>) -> Self {
        Rejection(StatusCode::BAD_REQUEST, message.into())
    }

    fn reply(self) -> Reply {
        error_reply(self.0, &self.1)
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(req: Request<Incoming>) -> Result<T, Rejection> {
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| {
            Rejection(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("could not read the request body: {e}"),
            )
        })?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| Rejection::bad(format!("JSON decode error: {e}")))
}

fn check_model(state: &State, model: Option<&str>) -> Result<(), Rejection> {
    match model {
        Some(m) if m != state.profile.served_model_name => Err(Rejection(
            StatusCode::NOT_FOUND,
            format!("The model `{m}` does not exist."),
        )),
        _ => Ok(()),
    }
}

async fn tokenize_text(text: &Arc<TextModel>, prompt: String) -> Result<Vec<u32>, Rejection> {
    let result = if prompt.len() <= INLINE_TOKENIZE_BYTES {
        text.prompt_ids(&prompt)
    } else {
        let text = text.clone();
        tokio::task::spawn_blocking(move || text.prompt_ids(&prompt))
            .await
            .map_err(|e| {
                Rejection(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("tokenizer task failed: {e}"),
                )
            })?
    };
    result.map_err(|e| Rejection(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn tokenize_chat(
    text: &Arc<TextModel>,
    messages: Vec<Message>,
    generation: bool,
) -> Result<Vec<u32>, Rejection> {
    let text = text.clone();
    tokio::task::spawn_blocking(move || text.chat_ids(&messages, generation))
        .await
        .map_err(|e| {
            Rejection(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("tokenizer task failed: {e}"),
            )
        })?
        .map_err(|e| Rejection(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn prompt_ids(
    state: &State,
    api: Api,
    req: &mut GenerateRequest,
) -> Result<Vec<u32>, Rejection> {
    let ids = match api {
        Api::Completions => match req.prompt.take() {
            Some(PromptInput::Text(t)) => tokenize_text(&state.text, t).await?,
            Some(PromptInput::Ids(ids)) => ids,
            None => {
                return Err(Rejection::bad(
                    "`prompt` is required: a string or a list of token ids",
                ));
            }
        },
        Api::Chat => match req.messages.take() {
            Some(messages) if !messages.is_empty() => {
                tokenize_chat(&state.text, messages, true).await?
            }
            _ => {
                return Err(Rejection::bad(
                    "`messages` is required and must not be empty",
                ));
            }
        },
    };
    if ids.is_empty() {
        return Err(Rejection::bad("The prompt cannot be empty."));
    }
    let max_model_len = state.profile.max_model_len as usize;
    if ids.len() > max_model_len {
        return Err(Rejection::bad(format!(
            "This model's maximum context length is {max_model_len} tokens. However, your request has {} input \
             tokens. Please reduce the length of the input messages.",
            ids.len()
        )));
    }
    Ok(ids)
}

/// Validated request limits: (max_tokens, min_tokens).
fn limits(
    state: &State,
    req: &GenerateRequest,
    prompt_len: usize,
) -> Result<(u32, u32), Rejection> {
    let room = u32::try_from((state.profile.max_model_len as usize).saturating_sub(prompt_len))
        .unwrap_or(u32::MAX);
    let asked = req.max_completion_tokens.or(req.max_tokens);
    if asked == Some(0) {
        return Err(Rejection::bad("max_tokens must be at least 1, got 0."));
    }
    // As vLLM: a request asking for more than fits is cut at max_model_len, not refused.
    let max_tokens = asked.unwrap_or(room).min(room).max(1);
    let min_tokens = req.min_tokens.unwrap_or(0);
    if asked.is_some_and(|m| min_tokens > m) {
        return Err(Rejection::bad(format!(
            "min_tokens must be less than or equal to max_tokens={}, got {min_tokens}.",
            asked.unwrap_or(0)
        )));
    }
    Ok((max_tokens, min_tokens))
}

async fn generate(
    state: Arc<State>,
    req: Request<Incoming>,
    api: Api,
    header_fault: Option<Fault>,
) -> Reply {
    let mut body: GenerateRequest = match read_json(req).await {
        Ok(b) => b,
        Err(r) => return r.reply(),
    };
    let fault = match (header_fault, body.sim_fault.as_deref().map(Fault::parse)) {
        (Some(f), _) => f,
        (None, Some(Ok(f))) => f,
        (None, Some(Err(e))) => return error_reply(StatusCode::BAD_REQUEST, &e.to_string()),
        (None, None) => state.fault.clone(),
    };
    if let Some(early) = early_fault(&fault).await {
        return early;
    }
    if let Err(r) = check_model(&state, body.model.as_deref()) {
        return r.reply();
    }
    let ids = match prompt_ids(&state, api, &mut body).await {
        Ok(ids) => ids,
        Err(r) => return r.reply(),
    };
    let (max_tokens, min_tokens) = match limits(&state, &body, ids.len()) {
        Ok(l) => l,
        Err(r) => return r.reply(),
    };
    let prompt_tokens = u32::try_from(ids.len()).unwrap_or(u32::MAX);
    let id = state.next_id.fetch_add(1, Ordering::Relaxed);
    let new = NewRequest {
        id,
        prompt: ids,
        max_tokens,
        min_tokens,
        ignore_eos: body.ignore_eos.unwrap_or(false),
    };
    let Some(rx) = state.engine.submit(new) else {
        return error_reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "the simulated engine has stopped",
        );
    };
    let guard = AbortGuard {
        id,
        engine: state.engine.clone(),
        armed: true,
    };
    let meta = ResponseMeta::new(api, id, &state.profile.served_model_name);
    if body.stream.unwrap_or(false) {
        let include = body
            .stream_options
            .is_some_and(|o| o.include_usage.unwrap_or(true));
        let continuous = include
            && body
                .stream_options
                .is_some_and(|o| o.continuous_usage_stats.unwrap_or(false));
        let usage = UsageMode {
            include,
            continuous,
            timings: body.timings_per_token.unwrap_or(false),
        };
        let profile = &state.profile;
        let setup = StreamSetup {
            wire: Wire::new(profile.dialect, meta, usage, prompt_tokens),
            text: state.text.clone(),
            style: profile.text_style,
            fault,
            hold_open: profile
                .hold_open_after_done_ms
                .map(std::time::Duration::from_millis),
        };
        let stream = SseStream::new(rx, guard, setup);
        let mut res = Response::new(SimBody::Sse(Box::new(stream)));
        match profile.stream_content_type.as_deref() {
            None => {
                res.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream; charset=utf-8"),
                );
            }
            Some("") => {}
            Some(other) => {
                if let Ok(v) = HeaderValue::from_str(other) {
                    res.headers_mut().insert(header::CONTENT_TYPE, v);
                }
            }
        }
        res.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return Ok(res);
    }
    complete(state, rx, guard, meta, fault).await
}

/// Waits for the whole answer of a non-streaming request.
async fn complete(
    state: Arc<State>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Output>,
    mut guard: AbortGuard,
    meta: ResponseMeta,
    fault: Fault,
) -> Reply {
    let mut bytes = Vec::new();
    let mut tokens = 0u32;
    while let Some(out) = rx.recv().await {
        match out {
            Output::Token(id) => {
                bytes.extend(
                    state
                        .text
                        .output_bytes(state.profile.text_style, tokens, id),
                );
                tokens += 1;
                if fault.close_after_tokens == Some(tokens) {
                    return Err(std::io::Error::other(
                        "connection closed on purpose (x-sim-fault)",
                    ));
                }
            }
            Output::Done(reason, usage) => {
                guard.armed = false;
                if let Some((stall, _)) = fault.stall {
                    tokio::time::sleep(stall).await;
                }
                let text = String::from_utf8_lossy(&bytes);
                return json_reply(StatusCode::OK, meta.full(&text, reason, usage));
            }
        }
    }
    error_reply(
        StatusCode::SERVICE_UNAVAILABLE,
        "the simulated engine stopped before the request finished",
    )
}

async fn tokenize(state: Arc<State>, req: Request<Incoming>) -> Reply {
    let body: TokenizeRequest = match read_json(req).await {
        Ok(b) => b,
        Err(r) => return r.reply(),
    };
    if let Err(r) = check_model(&state, body.model.as_deref()) {
        return r.reply();
    }
    let ids = match (body.prompt, body.messages) {
        (Some(prompt), None) => tokenize_text(&state.text, prompt).await,
        (None, Some(messages)) => {
            tokenize_chat(
                &state.text,
                messages,
                body.add_generation_prompt.unwrap_or(true),
            )
            .await
        }
        _ => Err(Rejection::bad(
            "give exactly one of `prompt` and `messages`",
        )),
    };
    let ids = match ids {
        Ok(ids) => ids,
        Err(r) => return r.reply(),
    };
    let token_strs = body.return_token_strs.unwrap_or(false).then(|| {
        ids.iter()
            .map(|&id| state.text.token_str(id))
            .collect::<Vec<_>>()
    });
    let reply = json!({
        "count": ids.len(), "max_model_len": state.profile.max_model_len, "tokens": ids, "token_strs": token_strs,
    });
    json_reply(StatusCode::OK, api::json_bytes(&reply))
}
