//! The crate's integration tests as one test binary (one link instead of one per file); a
//! file's tests run as `cargo test -p hidet-cpu --test integration FILE::`. Tests that need a
//! process of their own (process-wide counters, environment variables, `harness = false`)
//! stay in `tests/` as binaries of their own.

mod args;
mod batch_matmul;
mod block_quantized_products;
mod cache;
#[path = "../common/mod.rs"]
mod common;
mod conv_any_batch;
mod conv_graph_rewrite;
mod conv_implicit_gemm;
mod depthwise_channels_last;
mod fusion_property;
mod graph_backend;
mod graph_ops;
mod graph_passes;
mod integer_matmul;
mod matmul;
mod matmul_fusion;
mod matmul_space;
#[path = "../../../hidet-graph/tests/passes_util/mod.rs"]
mod passes_util;
mod pipeline;
mod qdq_products;
mod qoperator_products;
mod quantize;
mod scatter_nd;
mod schedule;
mod schedule_harness;
mod schedule_prop;
mod size_parameters;
