//! The integration tests of `speedmatrix-report`, one binary: each module was its own
//! test target before, and linking one binary instead of several saves
//! build time in CI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod compare;
mod render;
mod schema;
mod seed;
mod site;
mod validate;
