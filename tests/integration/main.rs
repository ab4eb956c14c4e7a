//! fedsim's integration tests: one binary, one module per concern.

mod byzantine;
mod cli;
mod cohorts;
mod common;
mod compression;
mod decentralized;
mod determinism;
mod divergence;
mod evaluation;
mod fedgmm;
mod fuzz;
mod hardening;
mod layers;
mod paper;
mod parquet_data;
mod population;
mod privacy;
mod real_data;
mod scale;
mod scenario_errors;
mod secure_aggregation;
mod selection;
mod sweeps;
mod systems;
mod weights;
mod writes;
