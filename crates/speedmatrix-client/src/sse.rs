//! Server-sent events framing, sans-IO: bytes in, events out.
//!
//! Follows the WHATWG event-stream rules that matter for inference servers:
//! `\n`, `\r\n` and lone `\r` line ends; `:` comment (keep-alive) lines;
//! `data:` lines joined with `\n`; `event:` names; a blank line ends an event.
//! `id:` and `retry:` are read and ignored (clients here never reconnect).

use bytes::Bytes;

use crate::ClientError;

/// The bytes being decoded: the zero-copy input when active, else the carry buffer.
macro_rules! src {
    ($self:ident) => {
        if $self.in_input {
            &$self.input[..]
        } else {
            &$self.carry[..]
        }
    };
}

/// Default cap on one event's size (a line being assembled, or an event's joined data).
pub const DEFAULT_MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

/// One dispatched server-sent event, borrowed from the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` name; `"message"` when the server gave none.
    pub event_type: &'a str,
    /// The `data:` lines joined with `\n` (no trailing newline).
    pub data: &'a [u8],
}

impl SseEvent<'_> {
    /// True for the OpenAI end-of-stream marker `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data == b"[DONE]"
    }

    /// An owned copy, for keeping past the next decoder call.
    pub fn to_owned_event(&self) -> OwnedSseEvent {
        OwnedSseEvent {
            event_type: self.event_type.to_owned(),
            data: self.data.to_vec(),
        }
    }
}

/// An owned [`SseEvent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedSseEvent {
    /// The `event:` name; `"message"` when the server gave none.
    pub event_type: String,
    /// The `data:` lines joined with `\n`.
    pub data: Vec<u8>,
}

/// Where the pending event's data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Data {
    /// No `data:` line yet.
    None,
    /// Exactly one `data:` line so far: its value is `src[start..end]`, no copy made.
    Range(usize, usize),
    /// Several lines (or one that outlived its source bytes): joined in `scratch`.
    Scratch,
}

/// Incremental server-sent events decoder.
///
/// Feed it bytes as they arrive with [`feed`](Self::feed), then call
/// [`next_event`](Self::next_event) until it returns `None`. Events may be
/// split across feeds at any byte; one feed may hold many events. The common
/// case (one `data:` line per event) is decoded without copying the payload,
/// and [`feed_bytes`](Self::feed_bytes) avoids copying the input too when
/// reads end at line boundaries, as a server's writes usually do.
///
/// ```
/// use speedmatrix_client::SseDecoder;
///
/// let mut decoder = SseDecoder::new();
/// decoder.feed(b": keep-alive\r\ndata: {\"a\":1}\r\n\r\nda");
/// let event = decoder.next_event().unwrap().unwrap();
/// assert_eq!(event.data, b"{\"a\":1}");
/// assert!(decoder.next_event().is_none()); // "da" is incomplete
/// decoder.feed(b"ta: [DONE]\n\n");
/// assert!(decoder.next_event().unwrap().unwrap().is_done());
/// ```
#[derive(Debug)]
pub struct SseDecoder {
    /// Bytes copied in by [`feed`](Self::feed), or left over from an input.
    carry: Vec<u8>,
    /// A shared input from [`feed_bytes`](Self::feed_bytes), decoded in place.
    input: Bytes,
    /// Decoding `input` rather than `carry`.
    in_input: bool,
    /// First byte of the source not yet consumed (start of the current, incomplete line).
    pos: usize,
    /// Where to resume looking for a line end (`pos <= scan <= source length`).
    scan: usize,
    /// The last line ended with `\r`; a `\n` right after it is part of that line end.
    skip_lf: bool,
    data: Data,
    scratch: Vec<u8>,
    event_type: String,
    /// The previous call dispatched an event; clear its fields before going on.
    reset_pending: bool,
    max_event_bytes: usize,
    failed: bool,
}

/// What one line did to the pending event.
enum LineOutcome {
    Continue,
    Dispatch,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl SseDecoder {
    /// A decoder with the default 64 MiB cap per event.
    pub fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A decoder that fails with [`ClientError::SseLineTooLong`] once one event exceeds `max` bytes.
    pub fn with_max_event_bytes(max: usize) -> Self {
        SseDecoder {
            carry: Vec::with_capacity(16 * 1024),
            input: Bytes::new(),
            in_input: false,
            pos: 0,
            scan: 0,
            skip_lf: false,
            data: Data::None,
            scratch: Vec::new(),
            event_type: String::new(),
            reset_pending: false,
            max_event_bytes: max,
            failed: false,
        }
    }

    /// Appends bytes received from the connection (copying them).
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.failed {
            return;
        }
        self.apply_reset();
        self.compact_into_carry();
        self.carry.extend_from_slice(bytes);
    }

    /// Appends a shared buffer; decoded in place, without copying, when no
    /// partial line is pending from the previous input.
    pub fn feed_bytes(&mut self, bytes: Bytes) {
        if self.failed {
            return;
        }
        self.apply_reset();
        if self.pos < src!(self).len() {
            self.feed(&bytes);
            return;
        }
        self.detach_pending_data();
        self.carry.clear();
        self.input = bytes;
        self.in_input = true;
        self.pos = 0;
        self.scan = 0;
    }

    /// The next complete event, `None` when more bytes are needed.
    ///
    /// After an error the decoder is spent: it returns `None` from then on.
    pub fn next_event(&mut self) -> Option<Result<SseEvent<'_>, ClientError>> {
        if self.failed {
            return None;
        }
        self.apply_reset();
        loop {
            let (start, end) = match self.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(err) => return Some(Err(err)),
            };
            match self.process_line(start, end) {
                Ok(LineOutcome::Continue) => {}
                Ok(LineOutcome::Dispatch) => return Some(Ok(self.dispatched())),
                Err(err) => return Some(Err(err)),
            }
        }
    }

    /// Ends the stream: an unterminated last line counts as a line, and an
    /// event with data but no closing blank line is dispatched.
    ///
    /// Strict SSE would drop such an event; servers that close right after
    /// their last `data:` line are common enough that keeping it is kinder.
    /// Call [`next_event`](Self::next_event) until `None` first.
    pub fn finish(&mut self) -> Option<Result<SseEvent<'_>, ClientError>> {
        if self.failed {
            return None;
        }
        self.apply_reset();
        let (start, end) = (self.pos, src!(self).len());
        self.pos = end;
        self.scan = end;
        if start < end
            && let Err(err) = self.process_line(start, end)
        {
            return Some(Err(err));
        }
        if self.data == Data::None {
            return None;
        }
        self.reset_pending = true;
        Some(Ok(self.dispatched()))
    }

    /// Bytes buffered for an incomplete line or event (for diagnostics).
    pub fn pending_bytes(&self) -> usize {
        let data = match self.data {
            Data::None => 0,
            Data::Range(s, e) => e - s,
            Data::Scratch => self.scratch.len(),
        };
        src!(self).len() - self.pos + data
    }

    fn apply_reset(&mut self) {
        if self.reset_pending {
            self.reset_pending = false;
            self.data = Data::None;
            self.scratch.clear();
            self.event_type.clear();
        }
    }

    /// A pending data line points into bytes about to go away: copy it.
    fn detach_pending_data(&mut self) {
        if let Data::Range(s, e) = self.data {
            self.scratch.clear();
            self.scratch.extend_from_slice(&src!(self)[s..e]);
            self.data = Data::Scratch;
        }
    }

    /// Makes `carry` the source, holding only the unconsumed bytes.
    fn compact_into_carry(&mut self) {
        if self.in_input {
            self.detach_pending_data();
            self.carry.clear();
            self.carry.extend_from_slice(&self.input[self.pos..]);
            self.input = Bytes::new();
            self.in_input = false;
        } else if self.pos > 0 {
            self.detach_pending_data();
            if self.pos == self.carry.len() {
                self.carry.clear();
            } else {
                self.carry.drain(..self.pos);
            }
        } else {
            return;
        }
        self.scan -= self.pos;
        self.pos = 0;
    }

    /// The next complete line as `buf[start..end]`, without its line end.
    fn next_line(&mut self) -> Result<Option<(usize, usize)>, ClientError> {
        let src = src!(self);
        if self.skip_lf {
            let Some(&byte) = src.get(self.pos) else {
                return Ok(None);
            };
            self.skip_lf = false;
            if byte == b'\n' {
                self.pos += 1;
                self.scan = self.pos;
            }
        }
        // The blank line that ends an event, found without a search.
        if self.scan == self.pos && src.get(self.pos) == Some(&b'\n') {
            let at = self.pos;
            self.pos += 1;
            self.scan = self.pos;
            return Ok(Some((at, at)));
        }
        let Some(offset) = memchr::memchr2(b'\n', b'\r', &src[self.scan..]) else {
            self.scan = src.len();
            if src.len() - self.pos > self.max_event_bytes {
                return Err(self.fail());
            }
            return Ok(None);
        };
        let start = self.pos;
        let end = self.scan + offset;
        if end - start > self.max_event_bytes {
            return Err(self.fail());
        }
        let mut next = end + 1;
        if src[end] == b'\r' {
            match src.get(next) {
                Some(b'\n') => next += 1,
                Some(_) => {}
                None => self.skip_lf = true,
            }
        }
        self.pos = next;
        self.scan = next;
        Ok(Some((start, end)))
    }

    fn process_line(&mut self, start: usize, end: usize) -> Result<LineOutcome, ClientError> {
        let src = src!(self);
        let line = &src[start..end];
        if line.is_empty() {
            if self.data == Data::None {
                // An event without data is not dispatched; its name is forgotten.
                self.event_type.clear();
                return Ok(LineOutcome::Continue);
            }
            self.reset_pending = true;
            return Ok(LineOutcome::Dispatch);
        }
        if line[0] == b':' {
            return Ok(LineOutcome::Continue);
        }
        let (field, value_start) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let mut v = start + colon + 1;
                if src.get(v) == Some(&b' ') && v < end {
                    v += 1;
                }
                (&line[..colon], v)
            }
            None => (line, end),
        };
        match field {
            b"data" => self.push_data(value_start, end)?,
            b"event" => {
                let name = String::from_utf8_lossy(&src[value_start..end]);
                self.event_type.clear();
                self.event_type.push_str(&name);
            }
            _ => {}
        }
        Ok(LineOutcome::Continue)
    }

    fn push_data(&mut self, start: usize, end: usize) -> Result<(), ClientError> {
        match self.data {
            Data::None => self.data = Data::Range(start, end),
            Data::Range(s, e) => {
                self.scratch.clear();
                self.scratch.extend_from_slice(&src!(self)[s..e]);
                self.append_scratch(start, end)?;
            }
            Data::Scratch => self.append_scratch(start, end)?,
        }
        Ok(())
    }

    fn append_scratch(&mut self, start: usize, end: usize) -> Result<(), ClientError> {
        if self.scratch.len() + 1 + (end - start) > self.max_event_bytes {
            return Err(self.fail());
        }
        self.scratch.push(b'\n');
        self.scratch.extend_from_slice(&src!(self)[start..end]);
        self.data = Data::Scratch;
        Ok(())
    }

    fn dispatched(&self) -> SseEvent<'_> {
        let data = match self.data {
            Data::Range(s, e) => &src!(self)[s..e],
            Data::Scratch => &self.scratch[..],
            Data::None => &[],
        };
        let event_type = if self.event_type.is_empty() {
            "message"
        } else {
            &self.event_type
        };
        SseEvent { event_type, data }
    }

    fn fail(&mut self) -> ClientError {
        self.failed = true;
        self.carry = Vec::new();
        self.input = Bytes::new();
        self.in_input = false;
        self.pos = 0;
        self.scan = 0;
        self.scratch = Vec::new();
        self.data = Data::None;
        ClientError::SseLineTooLong {
            limit_bytes: self.max_event_bytes,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn all(decoder: &mut SseDecoder) -> Vec<OwnedSseEvent> {
        let mut out = Vec::new();
        while let Some(ev) = decoder.next_event() {
            out.push(ev.unwrap().to_owned_event());
        }
        out
    }

    fn ev(event_type: &str, data: &str) -> OwnedSseEvent {
        OwnedSseEvent {
            event_type: event_type.to_owned(),
            data: data.as_bytes().to_vec(),
        }
    }

    #[test]
    fn joins_multi_line_data_and_reads_event_names() {
        let mut d = SseDecoder::new();
        d.feed(b"event: error\ndata: a\ndata:b\ndata\n\ndata: c\n\n");
        assert_eq!(all(&mut d), vec![ev("error", "a\nb\n"), ev("message", "c")]);
    }

    #[test]
    fn lone_cr_split_from_its_lf_is_one_line_end() {
        let mut d = SseDecoder::new();
        d.feed(b"data: x\r");
        assert!(all(&mut d).is_empty());
        d.feed(b"\n\r");
        assert_eq!(all(&mut d), vec![ev("message", "x")]);
        d.feed(b"\ndata: y\r\rdata: z\n\n");
        assert_eq!(all(&mut d), vec![ev("message", "y"), ev("message", "z")]);
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        let mut d = SseDecoder::new();
        d.feed(b"event: ping\n\n: comment\n\nid: 3\nretry: 10\n\n");
        assert!(all(&mut d).is_empty());
    }

    #[test]
    fn data_survives_compaction_between_feeds() {
        let mut d = SseDecoder::new();
        d.feed(b"data: first\n");
        assert!(all(&mut d).is_empty());
        d.feed(b"data: second\n");
        assert!(all(&mut d).is_empty());
        d.feed(b"\n");
        assert_eq!(all(&mut d), vec![ev("message", "first\nsecond")]);
    }

    #[test]
    fn over_cap_line_is_an_error_then_silence() {
        let mut d = SseDecoder::with_max_event_bytes(16);
        d.feed(b"data: 0123456789abcdef");
        let err = d.next_event().unwrap().unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::SseLineTooLong);
        d.feed(b"\n\ndata: x\n\n");
        assert!(d.next_event().is_none());
    }

    #[test]
    fn over_cap_joined_data_is_an_error() {
        let mut d = SseDecoder::with_max_event_bytes(10);
        d.feed(b"data: 01234\ndata: 56789\n\n");
        assert!(d.next_event().unwrap().is_err());
    }

    #[test]
    fn finish_keeps_an_unterminated_event() {
        let mut d = SseDecoder::new();
        d.feed(b"data: a\n\ndata: b");
        assert_eq!(all(&mut d), vec![ev("message", "a")]);
        assert_eq!(d.finish().unwrap().unwrap().data, b"b");
        assert!(d.finish().is_none());
    }

    /// Splits `data` at read boundaries chosen by `seed`.
    pub(crate) fn pieces(data: &[u8], mut seed: u64) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let n = 1 + (seed >> 33) as usize % rest.len().min(64);
            let (head, tail) = rest.split_at(n);
            out.push(head);
            rest = tail;
        }
        out
    }

    /// Coverage-guided under `cargo xtask fuzz`, random inputs under `cargo
    /// test`: no bytes make the decoder panic, and it decodes the same events
    /// whatever the read boundaries and the size cap.
    #[test]
    fn fuzz_sse() {
        bolero::check!().for_each(|input: &[u8]| {
            let (head, data) = input.split_at(input.len().min(8));
            let mut seed = [0u8; 8];
            seed[..head.len()].copy_from_slice(head);
            let seed = u64::from_le_bytes(seed);
            let max = 64 + (seed % 4096) as usize;
            let decode = |parts: &[&[u8]]| {
                let mut d = SseDecoder::with_max_event_bytes(max);
                let mut events = Vec::new();
                for part in parts {
                    d.feed(part);
                    while let Some(e) = d.next_event() {
                        events.push(e.map(|e| e.to_owned_event()).map_err(|e| e.kind()));
                    }
                }
                if let Some(e) = d.finish() {
                    events.push(e.map(|e| e.to_owned_event()).map_err(|e| e.kind()));
                }
                events
            };
            assert_eq!(
                decode(&[data]),
                decode(&pieces(data, seed)),
                "events depend on read boundaries"
            );
        });
    }
}
