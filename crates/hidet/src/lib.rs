//! hidet: facade crate and the `hidet` command-line tool.
//!
//! [`pipeline`] is the one path from an `.onnx` file to outputs; `hidet run` and the ONNX
//! conformance test both use it.

pub mod pipeline;

pub use hidet_graph as graph;
pub use hidet_onnx as onnx;
