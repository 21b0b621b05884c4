//! End-to-end tests: the real `speedmatrix` binary against the simulator.
//!
//! Every test drives the built binary as a user would (flags in, files and
//! exit code out) against a simulator whose true speed is known from its
//! profile, so the numbers in the report can be checked against ground truth.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    missing_docs,
    unreachable_pub
)]

mod abuse;
mod capacity;
mod cli_input;
mod client;
mod compat;
mod engines;
mod faults;
mod hostile;
mod limits;
mod load;

mod matrix;
mod noise;
mod predict;
mod prompts;
mod provenance;
mod reliability;
mod security;
mod stage;
mod streams;
mod study;
mod study_parallel;
mod support;
mod telemetry;
mod workload;
