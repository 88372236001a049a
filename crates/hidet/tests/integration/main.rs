//! The crate's integration tests as one test binary (one link instead of one per file); a
//! file's tests run as `cargo test -p hidet --test integration FILE::`. Tests that need a
//! process of their own (process-wide counters, environment variables, `harness = false`)
//! stay in `tests/` as binaries of their own.

mod cli;
mod cli_bench;
mod cli_tune;
#[path = "../common/mod.rs"]
mod common;
mod cuda_sim;
mod grid_sample;
mod old_opsets;
mod onnx_export;
mod passes_models;
mod recurrent;
mod saved_model;
mod spectral;
mod upsampling;
