//! The generation endpoints: request validation (body, model, prompt,
//! limits), `/v1/completions` and `/v1/chat/completions` streamed or whole,
//! and `/tokenize`.

use super::*;

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

/// The body as JSON, refused with 422 when it carries a field the profile refuses, as a
/// strict server (Hugging Face `transformers serve`) refuses fields it does not know.
async fn read_checked<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
    refused: &[String],
) -> Result<T, Rejection> {
    let value: serde_json::Value = read_json(req).await?;
    let unexpected: Vec<&str> = refused
        .iter()
        .filter(|f| value.get(f.as_str()).is_some())
        .map(String::as_str)
        .collect();
    if !unexpected.is_empty() {
        let names: Vec<String> = unexpected.iter().map(|f| format!("'{f}'")).collect();
        return Err(Rejection(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Unexpected fields in the request: {{{}}}", names.join(", ")),
        ));
    }
    serde_json::from_value(value).map_err(|e| Rejection::bad(format!("JSON decode error: {e}")))
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
    if prompt.len() <= INLINE_TOKENIZE_BYTES {
        return text.prompt_ids(&prompt).map_err(tokenizer_failed);
    }
    let text = text.clone();
    off_the_runtime(move || text.prompt_ids(&prompt)).await
}

async fn tokenize_chat(
    text: &Arc<TextModel>,
    messages: Vec<Message>,
    generation: bool,
) -> Result<Vec<u32>, Rejection> {
    let text = text.clone();
    off_the_runtime(move || text.chat_ids(&messages, generation)).await
}

/// Long tokenizations run on tokio's blocking pool so that they do not stall
/// the engine's steps.
async fn off_the_runtime<E: std::fmt::Display + Send + 'static>(
    tokenize: impl FnOnce() -> Result<Vec<u32>, E> + Send + 'static,
) -> Result<Vec<u32>, Rejection> {
    tokio::task::spawn_blocking(tokenize)
        .await
        .map_err(|e| {
            Rejection(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("tokenizer task failed: {e}"),
            )
        })?
        .map_err(tokenizer_failed)
}

fn tokenizer_failed(e: impl std::fmt::Display) -> Rejection {
    Rejection(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
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

/// One line of the profile's request log: what the request asked, as received.
fn log_request(state: &State, api: Api, body: &GenerateRequest) {
    let Some(log) = &state.request_log else {
        return;
    };
    let prompt = match &body.prompt {
        Some(crate::api::PromptInput::Text(t)) => serde_json::json!(t),
        Some(crate::api::PromptInput::Ids(ids)) => serde_json::json!(ids),
        None => serde_json::Value::Null,
    };
    let messages = body.messages.as_ref().map(|m| {
        m.iter()
            .map(|m| serde_json::json!({"role": m.role, "content": m.text()}))
            .collect::<Vec<_>>()
    });
    let line = serde_json::json!({
        "api": match api { Api::Completions => "completions", Api::Chat => "chat" },
        "prompt": prompt,
        "messages": messages,
        "max_tokens": body.max_completion_tokens.or(body.max_tokens),
        "ignore_eos": body.ignore_eos,
    });
    use std::io::Write as _;
    if let Ok(mut file) = log.lock() {
        // A test's log: a failed write shows as a missing line there, never a failed request.
        let _ = writeln!(file, "{line}");
    }
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

pub(super) async fn generate(
    state: Arc<State>,
    req: Request<Incoming>,
    api: Api,
    header_fault: Option<Fault>,
) -> Reply {
    let mut body: GenerateRequest = match read_checked(req, &state.profile.refused_fields).await {
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
    log_request(&state, api, &body);
    let ids = match prompt_ids(&state, api, &mut body).await {
        Ok(ids) => ids,
        Err(r) => return r.reply(),
    };
    let (max_tokens, min_tokens) = match limits(&state, &body, ids.len()) {
        Ok(l) => l,
        Err(r) => return r.reply(),
    };
    let prompt_tokens = u32::try_from(ids.len()).unwrap_or(u32::MAX);
    frontend(&state, ids.len() as u64).await;
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
            wire: Wire::new(profile.dialect, meta, usage, prompt_tokens)
                .with_reasoning(profile.reasoning_tokens, profile.reasoning_inline),
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

pub(super) async fn tokenize(state: Arc<State>, req: Request<Incoming>) -> Reply {
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

/// The front end's time on a request, one request at a time.
async fn frontend(state: &State, prompt: u64) {
    let p = &state.profile;
    let cost = p.cost.frontend(prompt);
    if cost.is_zero() || p.free_running {
        return;
    }
    let wall = std::time::Duration::try_from_secs_f64(cost.as_secs_f64() / p.time_scale)
        .unwrap_or(std::time::Duration::MAX);
    let _turn = state.frontend.lock().await;
    tokio::time::sleep(wall).await;
}
