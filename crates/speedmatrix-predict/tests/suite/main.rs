//! The integration tests of `speedmatrix-predict`, one binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod properties;
mod seed;
mod speculation;
