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

use crate::TextStyle;
use crate::driver::{EngineHandle, Output};
use crate::engine::ReqId;
use crate::fault::Fault;
use crate::text::TextModel;
use crate::wire::{Grouping, Wire, complete_text};

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
    /// Send what is pending, then keep the body open a while before ending it.
    HoldingOpen,
    /// Send what is pending, then end the body.
    Done,
}

/// An SSE response fed by one request's engine outputs.
#[derive(Debug)]
pub(crate) struct SseStream {
    rx: mpsc::UnboundedReceiver<Output>,
    guard: AbortGuard,
    wire: Wire,
    text: Arc<TextModel>,
    style: TextStyle,
    fault: Fault,
    /// Output tokens so far.
    sent: u32,
    /// Tokens since the last chunk.
    unsent: u32,
    role_sent: bool,
    text_sent: bool,
    /// Output bytes not yet sent: an incomplete character waits here.
    bytes: Vec<u8>,
    backlog: VecDeque<Output>,
    pending: VecDeque<Bytes>,
    stall: Option<Pin<Box<Sleep>>>,
    hold_open: Option<std::time::Duration>,
    state: State,
}

/// How one response is written, besides its outputs.
#[derive(Debug)]
pub(crate) struct StreamSetup {
    pub(crate) wire: Wire,
    pub(crate) text: Arc<TextModel>,
    pub(crate) style: TextStyle,
    pub(crate) fault: Fault,
    pub(crate) hold_open: Option<std::time::Duration>,
}

impl SseStream {
    pub(crate) fn new(
        rx: mpsc::UnboundedReceiver<Output>,
        guard: AbortGuard,
        setup: StreamSetup,
    ) -> Self {
        let mut stream = SseStream {
            rx,
            guard,
            wire: setup.wire,
            text: setup.text,
            style: setup.style,
            fault: setup.fault,
            sent: 0,
            unsent: 0,
            role_sent: false,
            text_sent: false,
            bytes: Vec::new(),
            backlog: VecDeque::new(),
            pending: VecDeque::new(),
            stall: None,
            hold_open: setup.hold_open,
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
                State::HoldingOpen => {
                    let wait = self.hold_open.unwrap_or_default();
                    let hold = self
                        .stall
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(wait)));
                    ready!(hold.as_mut().poll(cx));
                    self.stall = None;
                    self.state = State::Done;
                    return Poll::Ready(None);
                }
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
        let per_token = self.wire.grouping() == Grouping::Token;
        while let Some(out) = self.backlog.pop_front() {
            match out {
                Output::Token(id) => {
                    // One event per token: the previous token's goes out now, so
                    // that the last token's event can carry the finish reason.
                    if per_token && self.unsent > 0 {
                        self.flush();
                    }
                    let bytes = self.text.output_bytes(self.style, self.sent, id);
                    self.bytes.extend_from_slice(&bytes);
                    self.sent += 1;
                    self.unsent += 1;
                    if self.fault_at(self.sent) {
                        self.flush();
                        self.apply_faults();
                        if self.state != State::Streaming || self.stall.is_some() {
                            return;
                        }
                    }
                }
                Output::Done(reason, _usage) => {
                    self.send_role();
                    let text = complete_text(&mut self.bytes);
                    let end = self.wire.finish(&text, reason, self.sent);
                    self.pending.extend(end);
                    self.guard.armed = false;
                    self.state = if self.hold_open.is_some() {
                        State::HoldingOpen
                    } else {
                        State::Done
                    };
                    return;
                }
            }
        }
        if !per_token {
            self.flush();
        }
    }

    fn send_role(&mut self) {
        if !self.role_sent
            && let Some(role) = self.wire.role_chunk()
        {
            self.pending.push_back(role);
        }
        self.role_sent = true;
    }

    /// Sends the tokens since the last chunk as one chunk, unless the
    /// dialect holds back a chunk whose text is still incomplete.
    fn flush(&mut self) {
        if self.unsent == 0 {
            return;
        }
        let held = self.wire.grouping() == Grouping::BatchHoldingBack;
        if held && std::str::from_utf8(&self.bytes).is_err() && self.complete_len() == 0 {
            return;
        }
        self.send_role();
        let text = complete_text(&mut self.bytes);
        let chunk = self.wire.text_chunk(&text, self.sent, !self.text_sent);
        self.text_sent = true;
        self.pending.push_back(chunk);
        self.unsent = 0;
    }

    /// Bytes of complete characters at the front of the unsent output.
    fn complete_len(&self) -> usize {
        match std::str::from_utf8(&self.bytes) {
            Ok(_) => self.bytes.len(),
            Err(e) => e.valid_up_to(),
        }
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
                self.wire.id()
            )));
        }
        if let Some((bytes, at)) = self.fault.oversized_line
            && at == n
        {
            let padding = "x".repeat(bytes.saturating_sub(96));
            let line = format!(
                "data: {{\"id\":\"{}\",\"object\":\"sim.padding\",\"choices\":[],\"padding\":\"{padding}\"}}\n\n",
                self.wire.id()
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
