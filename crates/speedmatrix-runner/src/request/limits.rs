//! What bounds one request: its deadline from the plan, and the counts its server can have
//! reported (`docs/metrics.md`, "Request deadlines" and "Impossible counts").

use std::time::Duration;

use speedmatrix_metrics::{CountBounds, ImpossibleCount};
use speedmatrix_units::{Tokens, group_thousands};

use super::RequestShape;
use crate::outcome::{Failure, FailureKind};

/// The slowest prefill a request's deadline allows for, counting every byte of
/// the prompt as a token (an upper bound on its tokens).
pub(crate) const DEADLINE_PREFILL_BYTES_PER_S: u64 = 1_000;

/// The slowest output a request's deadline allows for.
pub(crate) const DEADLINE_DECODE_TOKENS_PER_S: u64 = 1;

/// How long one request may run, from its send to its last byte, and what
/// that is made of (see [`RequestShape::deadline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    pub(crate) limit: Duration,
    first_token: Duration,
    prompt_bytes: u64,
    together: u32,
    max_tokens: Tokens,
}

impl Deadline {
    /// The failure of a request that ran `ran` past it.
    pub(super) fn failure(&self, ran: Duration) -> Failure {
        Failure {
            kind: FailureKind::Deadline,
            message: format!(
                "the request was still running after {:.1} s, past its deadline of {:.1} s \
                 ({:.1} s to start answering, {} prompt bytes × {} sent together at {} a second, \
                 max_tokens {} at {DEADLINE_DECODE_TOKENS_PER_S} tok/s): the server ignores \
                 max_tokens or streams slower than any engine",
                ran.as_secs_f64(),
                self.limit.as_secs_f64(),
                self.first_token.as_secs_f64(),
                group_thousands(self.prompt_bytes),
                self.together,
                group_thousands(DEADLINE_PREFILL_BYTES_PER_S),
                group_thousands(self.max_tokens.get()),
            ),
        }
    }
}

impl RequestShape {
    /// The longest a request of this shape may run (docs/metrics.md, "Request
    /// deadlines"): the time to start answering, its prompt and those sent with
    /// it prefilled at [`DEADLINE_PREFILL_BYTES_PER_S`], and `max_tokens` at
    /// [`DEADLINE_DECODE_TOKENS_PER_S`]. `None` when the server is sent no
    /// `max_tokens` the client can read.
    pub(crate) fn deadline(&self, prompt_bytes: usize) -> Option<Deadline> {
        let max_tokens = self.max_tokens_sent()?;
        let prompt_bytes = prompt_bytes as u64;
        let prefill_s = prompt_bytes.saturating_mul(u64::from(self.sent_together.max(1)))
            / DEADLINE_PREFILL_BYTES_PER_S;
        let decode_s = max_tokens.get() / DEADLINE_DECODE_TOKENS_PER_S;
        let limit = self
            .first_token_allowance
            .saturating_add(Duration::from_secs(prefill_s.saturating_add(decode_s)));
        Some(Deadline {
            limit,
            first_token: self.first_token_allowance,
            prompt_bytes,
            together: self.sent_together.max(1),
            max_tokens,
        })
    }
}

impl RequestShape {
    /// What bounds the counts a request of this shape with `prompt` can have.
    pub(super) fn count_bounds(&self, prompt_bytes: usize) -> CountBounds {
        CountBounds {
            max_tokens: self.max_tokens_sent(),
            prompt_bytes: prompt_bytes as u64,
        }
    }
}

/// The failure of a request whose server reported an impossible count.
pub(super) fn impossible_failure(e: &ImpossibleCount) -> Failure {
    Failure {
        kind: FailureKind::ImpossibleCount,
        message: e.to_string(),
    }
}
