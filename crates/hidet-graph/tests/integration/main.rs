//! The crate's integration tests as one test binary (one link instead of one per file); a
//! file's tests run as `cargo test -p hidet-graph --test integration FILE::`. Tests that need a
//! process of their own (process-wide counters, environment variables, `harness = false`)
//! stay in `tests/` as binaries of their own.

mod compute_defs;
mod graph;
mod passes;
#[path = "../passes_util/mod.rs"]
mod passes_util;
mod shape_ops_infer;
