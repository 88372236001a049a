//! hidet: facade crate and the `hidet` command-line tool.
//!
//! [`pipeline`] is the one path from an `.onnx` file to outputs; `hidet run` and the ONNX
//! conformance test both use it. [`zoo`] builds the paper's models (and small test models)
//! with the graph API and seeded random weights.

pub mod pipeline;
pub mod zoo;

pub use hidet_graph as graph;
pub use hidet_onnx as onnx;
