//! The crate's integration tests as one test binary (one link instead of one per file); a
//! file's tests run as `cargo test -p hidet-codegen --test integration FILE::`. Tests that need a
//! process of their own (process-wide counters, environment variables, `harness = false`)
//! stay in `tests/` as binaries of their own.

mod c_math;
#[path = "../common/mod.rs"]
mod common;
mod emit_c;
mod run_c;
