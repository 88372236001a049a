//! Load a model and run it: the path shared by `hidet run` and the conformance suite.
//!
//! Two executors: the compiled path ([`compile`], [`run`]: fused CPU kernels, the default)
//! and the reference executor ([`run_reference`]: every operator's `eval`, the oracle).
//!
//! [`load`] gives the graph exactly as imported. The reference executor runs that graph, so
//! it shares no graph rewrite with the path it checks; [`compile`] binds the graph to each
//! run's input shapes and applies the backend's graph passes itself.

use std::path::Path;

use hidet_cpu::graph_backend::tuning::CpuTuning;
use hidet_cpu::graph_backend::{CpuBackend, CpuBackendOptions};
use hidet_graph::compiled::{Backend, CompileOptions, CompiledError, CompiledModel};
use hidet_graph::passes::{run_passes, GraphPass};
use hidet_graph::{
    run_reference as reference_executor, run_reference_data as reference_executor_data, Datum,
    ExecError, Graph, GraphError, Tensor,
};
use hidet_onnx::{OnnxError, OnnxModel};

use crate::zoo::{self, ZooError};

/// A model compiled for the CPU (lazily, once per distinct set of input shapes).
pub type CpuModel = CompiledModel<CpuBackend>;

/// Errors of loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Onnx(#[from] OnnxError),
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    Compiled(#[from] CompiledError),
}

/// Imports `path`: the graph as imported, no graph pass applied (see the module docs).
pub fn load(path: &Path) -> Result<OnnxModel, PipelineError> {
    Ok(hidet_onnx::load_model(path)?)
}

/// Imports the bytes of an `.onnx` file (external data is refused: there is no folder to
/// confine it to); otherwise as [`load`].
pub fn load_bytes(bytes: &[u8]) -> Result<OnnxModel, PipelineError> {
    let proto = hidet_onnx::decode_model(bytes)?;
    Ok(hidet_onnx::import_model(
        &proto,
        None,
        hidet_graph::Registry::global(),
    )?)
}

/// The zoo model `name` (without the `zoo:` prefix) as a model as imported, the way
/// `hidet bench zoo:NAME` loads it.
pub fn zoo_model(name: &str) -> Result<OnnxModel, ZooError> {
    Ok(OnnxModel {
        graph: zoo::build(name)?,
        ir_version: 8,
        opsets: vec![(String::new(), zoo::net::OPSET)],
        producer: "hidet zoo".into(),
    })
}

/// The CPU backend's graph passes on this host ([`CpuBackend`]'s
/// [`Backend::graph_passes`]).
pub fn default_passes() -> Vec<Box<dyn GraphPass>> {
    CpuBackend::new(CpuBackendOptions::default()).graph_passes()
}

/// `graph` rewritten by the [`default_passes`]: for a graph with static input shapes, the
/// graph the CPU backend compiles (a symbolic one is first bound to each run's shapes).
pub fn optimize(graph: Graph) -> Result<Graph, PipelineError> {
    Ok(run_passes(graph, &default_passes())?)
}

/// The compiled CPU model of `model`, a model as imported ([`load`]). Nothing is compiled
/// until the first run (or [`CompiledModel::compiled`]) with concrete input shapes: each
/// distinct set of shapes binds the graph's symbolic dimensions, applies the
/// [`default_passes`] and compiles (see [`CompiledModel`]); compiled kernels are cached on
/// disk (`HIDET_CACHE_DIR`) and in the returned model per input shapes.
pub fn compile(model: &OnnxModel, opts: CompileOptions) -> CpuModel {
    compile_tuned(model, opts, CpuTuning::default())
}

/// [`compile`] with `tuning`: the tuning level, cache and observer of the matmul tasks
/// (measured when a shape is compiled, see [`CpuTuning`]).
pub fn compile_tuned(model: &OnnxModel, opts: CompileOptions, tuning: CpuTuning) -> CpuModel {
    CompiledModel::new(
        model.graph.clone(),
        CpuBackend::new(CpuBackendOptions::default()).with_tuning(tuning),
        opts,
    )
}

/// Runs a compiled model on named inputs and returns every graph output as (name, tensor).
/// Input errors name the input and what was expected.
pub fn run(
    model: &CpuModel,
    inputs: &[(String, Tensor)],
) -> Result<Vec<(String, Tensor)>, PipelineError> {
    Ok(model.run(inputs)?)
}

/// Runs the model with the reference executor (the oracle); same contract as [`run`].
pub fn run_reference(
    model: &OnnxModel,
    inputs: &[(String, Tensor)],
) -> Result<Vec<(String, Tensor)>, PipelineError> {
    Ok(reference_executor(&model.graph, inputs)?)
}

/// [`run`] for inputs and outputs of any kind (tensors, sequences, optionals).
pub fn run_data(
    model: &CpuModel,
    inputs: &[(String, Datum)],
) -> Result<Vec<(String, Datum)>, PipelineError> {
    Ok(model.run_data(inputs)?)
}

/// [`run_reference`] for inputs and outputs of any kind (tensors, sequences, optionals).
pub fn run_reference_data(
    model: &OnnxModel,
    inputs: &[(String, Datum)],
) -> Result<Vec<(String, Datum)>, PipelineError> {
    Ok(reference_executor_data(&model.graph, inputs)?)
}
