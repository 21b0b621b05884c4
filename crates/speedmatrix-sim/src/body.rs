//! Response bodies: a plain one, and the SSE stream that turns engine outputs into chunks (and
//! injects stream faults).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;
use tokio::time::Sleep;

use crate::api::{ResponseMeta, UsageJson};
use crate::driver::{EngineHandle, Output};
use crate::engine::{FinishReason, ReqId};
use crate::fault::Fault;
use crate::text::TextModel;

/// How long a `close-after` fault waits between its last chunk and breaking the connection.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_millis(20);

/// Most outputs folded into one poll: a slow reader gets multi-token chunks, as from vLLM.
const MAX_BATCH: usize = 256;

/// Aborts its request in the engine when dropped before the request finished (client gone).
#[derive(Debug)]
pub(crate) struct AbortGuard {
    pub(crate) id: ReqId,
    pub(crate) engine: EngineHandle,
    pub(crate) armed: bool,
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if self.armed {
            self.engine.abort(self.id);
        }
    }
}

/// The body of every response.
#[derive(Debug)]
pub(crate) enum SimBody {
    Full(Option<Bytes>),
    Sse(Box<SseStream>),
}

impl SimBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        SimBody::Full(Some(bytes.into()))
    }

    pub(crate) fn empty() -> Self {
        SimBody::Full(None)
    }
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            SimBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            SimBody::Sse(stream) => stream.poll_next(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, SimBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            SimBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            SimBody::Full(None) => SizeHint::with_exact(0),
            SimBody::Sse(_) => SizeHint::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Streaming,
    /// Send what is pending, then break the connection.
    Closing,
    /// Send what is pending, then end the body.
    Done,
}

/// How a stream reports usage.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UsageMode {
    pub(crate) include: bool,
    pub(crate) continuous: bool,
}

/// An SSE response fed by one request's engine outputs.
#[derive(Debug)]
pub(crate) struct SseStream {
    rx: mpsc::UnboundedReceiver<Output>,
    guard: AbortGuard,
    meta: ResponseMeta,
    text: Arc<TextModel>,
    prompt_tokens: u32,
    usage: UsageMode,
    fault: Fault,
    sent: u32,
    role_sent: bool,
    backlog: VecDeque<Output>,
    pending: VecDeque<Bytes>,
    stall: Option<Pin<Box<Sleep>>>,
    state: State,
}

impl SseStream {
    pub(crate) fn new(
        rx: mpsc::UnboundedReceiver<Output>,
        guard: AbortGuard,
        meta: ResponseMeta,
        text: Arc<TextModel>,
        prompt_tokens: u32,
        usage: UsageMode,
        fault: Fault,
    ) -> Self {
        let mut stream = SseStream {
            rx,
            guard,
            meta,
            text,
            prompt_tokens,
            usage,
            fault,
            sent: 0,
            role_sent: false,
            backlog: VecDeque::new(),
            pending: VecDeque::new(),
            stall: None,
            state: State::Streaming,
        };
        stream.apply_faults();
        stream
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            match self.state {
                State::Done => return Poll::Ready(None),
                State::Closing => {
                    // Let hyper flush the chunks already handed over before the connection drops.
                    let grace = self
                        .stall
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(CLOSE_GRACE)));
                    ready!(grace.as_mut().poll(cx));
                    self.stall = None;
                    self.state = State::Done;
                    return Poll::Ready(Some(Err(std::io::Error::other(
                        "connection closed on purpose (x-sim-fault)",
                    ))));
                }
                State::Streaming => {}
            }
            if let Some(sleep) = self.stall.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.stall = None;
            }
            if self.backlog.is_empty() {
                match self.rx.poll_recv(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(None) => {
                        // The engine stopped (server shutting down): break the stream.
                        self.state = State::Closing;
                        continue;
                    }
                    Poll::Ready(Some(out)) => {
                        self.backlog.push_back(out);
                        while self.backlog.len() < MAX_BATCH {
                            match self.rx.try_recv() {
                                Ok(out) => self.backlog.push_back(out),
                                Err(_) => break,
                            }
                        }
                    }
                }
            }
            self.process();
        }
    }

    /// Turns backlog outputs into chunks until the backlog is empty or a fault interrupts.
    fn process(&mut self) {
        let mut buf = String::new();
        while let Some(out) = self.backlog.pop_front() {
            match out {
                Output::Token(id) => {
                    buf.push_str(self.text.token_text(id));
                    self.sent += 1;
                    if self.fault_at(self.sent) {
                        self.flush(&mut buf, None);
                        self.apply_faults();
                        if self.state != State::Streaming || self.stall.is_some() {
                            return;
                        }
                    }
                }
                Output::Done(reason, usage) => {
                    self.flush(&mut buf, Some(reason));
                    if self.usage.include {
                        self.pending.push_back(self.meta.usage_chunk(usage.into()));
                    }
                    self.pending
                        .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
                    self.guard.armed = false;
                    self.state = State::Done;
                    return;
                }
            }
        }
        if !buf.is_empty() {
            self.flush(&mut buf, None);
        }
    }

    fn running_usage(&self) -> Option<UsageJson> {
        self.usage
            .continuous
            .then(|| UsageJson::new(self.prompt_tokens, self.sent))
    }

    fn send_role(&mut self) {
        if self.meta.api == crate::api::Api::Chat && !self.role_sent {
            let usage = self
                .usage
                .continuous
                .then(|| UsageJson::new(self.prompt_tokens, 0));
            self.pending
                .push_back(self.meta.chunk("", true, None, usage));
        }
        self.role_sent = true;
    }

    fn flush(&mut self, buf: &mut String, finish: Option<FinishReason>) {
        if buf.is_empty() && finish.is_none() {
            return;
        }
        self.send_role();
        let chunk = self.meta.chunk(buf, false, finish, self.running_usage());
        self.pending.push_back(chunk);
        buf.clear();
    }

    fn fault_at(&self, n: u32) -> bool {
        let f = &self.fault;
        f.close_after_tokens == Some(n)
            || f.malformed_chunk_after_tokens == Some(n)
            || f.stall.is_some_and(|(_, at)| at == n)
            || f.oversized_line.is_some_and(|(_, at)| at == n)
    }

    /// Injects the faults due after `self.sent` tokens.
    fn apply_faults(&mut self) {
        let n = self.sent;
        if self.fault.malformed_chunk_after_tokens == Some(n) {
            self.pending.push_back(Bytes::from(format!(
                "data: {{\"id\": \"{}\", \"choices\": [{{\"text\n\n",
                self.meta.id
            )));
        }
        if let Some((bytes, at)) = self.fault.oversized_line
            && at == n
        {
            let padding = "x".repeat(bytes.saturating_sub(96));
            let line = format!(
                "data: {{\"id\":\"{}\",\"object\":\"sim.padding\",\"choices\":[],\"padding\":\"{padding}\"}}\n\n",
                self.meta.id
            );
            self.pending.push_back(Bytes::from(line));
        }
        if let Some((d, at)) = self.fault.stall
            && at == n
        {
            self.stall = Some(Box::pin(tokio::time::sleep(d)));
        }
        if self.fault.close_after_tokens == Some(n) {
            self.state = State::Closing;
        }
    }
}
