//! `hidet export`: write a model (an `.onnx` file or `zoo:NAME`) as an `.onnx` file.

use std::path::Path;

use super::{source, CliError};

/// Loads `spec` as `hidet run` does (no graph pass) and writes it to `output`, printing the
/// file and its size.
pub fn run(spec: &str, output: &Path) -> Result<(), CliError> {
    let loaded = source::load(spec)?;
    let bytes =
        hidet::onnx::save_model(&loaded.model, output).map_err(|e| CliError::Pipeline(e.into()))?;
    println!(
        "wrote {} ({bytes} bytes, {} nodes)",
        output.display(),
        loaded.model.graph.nodes().len()
    );
    Ok(())
}
