//! Load a model and run it: the path shared by `hidet run` and the conformance suite.

use std::path::Path;

use hidet_graph::passes::{default_passes, run_passes};
use hidet_graph::{run_reference, ExecError, GraphError, Tensor};
use hidet_onnx::{OnnxError, OnnxModel};

/// Errors of loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Onnx(#[from] OnnxError),
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// Imports `path` and applies the default graph passes.
pub fn load(path: &Path) -> Result<OnnxModel, PipelineError> {
    let mut m = hidet_onnx::load_model(path)?;
    m.graph = run_passes(m.graph, &default_passes())?;
    Ok(m)
}

/// Runs the model on named inputs and returns every graph output as (name, tensor).
///
/// Until the compiled path exists, this is the reference executor (with or without
/// `--reference`). Input errors name the input and what was expected.
pub fn run(
    model: &OnnxModel,
    inputs: &[(String, Tensor)],
) -> Result<Vec<(String, Tensor)>, PipelineError> {
    Ok(run_reference(&model.graph, inputs)?)
}
