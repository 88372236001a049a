//! hidet: facade crate and the `hidet` command-line tool.
//!
//! To embed hidet, start at [`Model`]: [`Model::load`] (or [`Model::from_bytes`],
//! [`Model::zoo`]) → [`Model::compile`] with [`Options`] → [`CompiledModel::run`]. The
//! [`api`] module docs describe the contract (threads, memory, errors).
//!
//! [`pipeline`] is the one path from an `.onnx` file to outputs; `hidet run` and the ONNX
//! conformance test both use it. [`zoo`] builds the paper's models (and small test models)
//! with the graph API and seeded random weights.

pub mod allocator;
pub mod api;
pub mod pipeline;
pub mod zoo;

pub use hidet_graph as graph;
pub use hidet_onnx as onnx;

pub use api::{
    return_freed_memory, CompiledModel, DType, Device, Dim, Error, Model, Options, Tensor,
    TensorInfo, TuneLevel,
};
