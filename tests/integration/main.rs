//! fedsim's integration tests: one binary, one module per concern.

mod cli;
mod common;
mod determinism;
mod paper;
mod scenario_errors;
