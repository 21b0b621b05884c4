//! The runner's own results, typed: what each step measured, or why it did not.
//!
//! The journal stores these; the report document is made from them once, at
//! the end (`report.rs`). By topic: what a step is and how it ended
//! (`step.rs`), prefill points and decode cells (`decode.rs`), load cells,
//! their objective and the knee search's path (`load.rs`), the interference
//! probe (`interference.rs`), and notices (`notice.rs`). [`Latency`] and the
//! journal's nanosecond durations, which they all use, are here.

mod decode;
mod interference;
mod load;
mod notice;
mod repeats;
mod step;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::decode::{CellOutcome, CounterIncrease, PrefillOutcome, TokenCounting, WindowResult};
pub use self::interference::Interference;
pub use self::load::{
    KneePath, KneeTry, LoadOutcome, LoadResult, PrefixCacheCheck, SloTermVerdict, SloVerdict,
};
// Named by the conversation cell only; reachable outside through `LoadResult::turns`.
pub(crate) use self::load::TurnResult;
pub use self::notice::{Notice, StopReason};
pub(crate) use self::repeats::{load_with_repeats, with_repeats};
pub use self::step::{
    Exclusion, Failure, FailureKind, LoadPoint, SkipReason, StepId, StepStatus, TooLong,
};

/// Median, 90th and 99th percentile of a latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    #[serde(with = "duration_ns")]
    pub p50: Duration,
    /// 90th percentile.
    #[serde(with = "duration_ns")]
    pub p90: Duration,
    /// 99th percentile.
    #[serde(with = "duration_ns")]
    pub p99: Duration,
}

/// Durations as whole nanoseconds in the journal.
pub(crate) mod duration_ns {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_nanos)
    }
}

mod opt_duration_ns {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(d).map(|n| n.map(Duration::from_nanos))
    }
}
