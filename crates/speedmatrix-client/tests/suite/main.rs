//! The integration tests of `speedmatrix-client`, one binary: each module was its own
//! test target before, and linking one binary instead of several saves
//! build time in CI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// `cargo xtask fuzz` builds every test binary of the package with libFuzzer's
// coverage instrumentation; linking bolero brings the runtime it needs.
#[cfg(fuzzing)]
use bolero as _;

mod decoder_props;
mod http;
mod tls;
mod transformers;
