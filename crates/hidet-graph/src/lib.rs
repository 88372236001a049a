//! hidet-graph: the graph IR, the operator library with reference implementations, graph
//! passes and the reference executor.
//!
//! - [`Tensor`] / [`DType`]: concrete values; [`TensorType`] / [`Dim`]: static types with
//!   symbolic dimensions.
//! - [`Operator`]: one trait per operator (attribute parsing in its constructor, shape/dtype
//!   inference, reference `eval`); [`Registry`] maps (domain, op_type, opset) to constructors.
//!   Families live in `src/ops/<family>.rs` (see `docs/adding-operators.md`).
//! - [`Graph`] / [`GraphBuilder`]: nodes in topological order with use lists.
//! - [`passes`]: the rewrite mechanism; [`run_reference`]: op-by-op execution.

pub mod attribute;
pub mod bind;
pub mod buffer;
pub mod compiled;
pub mod dtype;
pub mod executor;
pub mod expansion;
pub mod fusion;
pub mod graph;
pub mod kernels;
pub mod narrow;
pub mod operator;
pub mod ops;
pub mod passes;
pub mod registry;
pub mod shape;
pub mod string;
pub mod tensor;
pub mod value;

pub use half;

pub use attribute::{Attribute, Attributes};
pub use bind::BindError;
pub use dtype::DType;
pub use executor::{
    check_input_data, check_inputs, run_graph, run_graph_data, run_reference, run_reference_data,
    ExecError,
};
pub use expansion::Expansion;
pub use graph::{
    FusionHints, Graph, GraphBuilder, GraphError, Node, NodeId, NodeSpec, SubgraphContext,
    UnsupportedOp, Value, ValueId,
};
pub use operator::{ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator};
pub use registry::{ExpansionSchema, OpSchema, Registry, LATEST_OPSET};
pub use shape::{Dim, TensorType};
pub use tensor::{Element, Tensor, TensorData, TensorError};
pub use value::{Datum, ValueKind};
