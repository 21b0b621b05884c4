//! The HTTP server: starting and stopping, routing, the engines' own endpoints and faults;
//! the generation endpoints are in `generate.rs`.

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

mod generate;

use self::generate::{generate, tokenize};

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
        let request_log = match &profile.request_log {
            Some(path) => Some(std::sync::Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| SimError::RequestLog {
                        path: path.clone(),
                        source,
                    })?,
            )),
            None => None,
        };
        let state = Arc::new(State {
            request_log,
            profile: profile.clone(),
            fault,
            text,
            engine,
            next_id: AtomicU64::new(1),
            frontend: tokio::sync::Mutex::new(()),
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
    /// The front end passes one request at a time (see `StepCost::frontend_per_request_us`).
    frontend: tokio::sync::Mutex<()>,
    /// Where each generation request is logged (profile `request_log`).
    request_log: Option<std::sync::Mutex<std::fs::File>>,
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
    // A generic server names no engine: only the OpenAI routes answer.
    let engine_route = !matches!(
        path.as_str(),
        "/health" | "/v1/models" | "/v1/completions" | "/v1/chat/completions"
    );
    if state.profile.anonymous && engine_route {
        return json_reply(
            StatusCode::NOT_FOUND,
            api::json_bytes(&json!({ "detail": "Not Found" })),
        );
    }
    match (req.method(), path.as_str()) {
        (&Method::GET, "/health") => respond(StatusCode::OK, "text/plain", SimBody::empty()),
        (&Method::GET, "/version") => json_reply(
            StatusCode::OK,
            api::json_bytes(&json!({ "version": VERSION })),
        ),
        (&Method::GET, "/v1/models") if state.profile.models_status.is_some() => {
            let status = state
                .profile
                .models_status
                .and_then(|s| StatusCode::from_u16(s).ok())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            respond(status, "text/plain", SimBody::full("Internal Server Error"))
        }
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
