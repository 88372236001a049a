//! The crate's integration tests as one test binary (one link instead of one per file); a
//! file's tests run as `cargo test -p hidet-cuda --test integration FILE::`. Tests that need a
//! process of their own (process-wide counters, environment variables, `harness = false`)
//! stay in `tests/` as binaries of their own.

#[path = "../common/mod.rs"]
mod common;
mod cuda_cache;
mod cuda_dialect;
mod gpu_schedule;
mod levels;
mod matmul_simt_numeric;
mod matmul_simt_ptxas;
mod nvrtc_images;
mod runtime_fake_driver;
mod runtime_fake_gpu;
mod runtime_without_gpu;
mod sim_checks;
mod sim_constructs;
mod sim_matmul;
mod sim_vs_interp;
mod simt_tuning;
