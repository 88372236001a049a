//! The MODEL argument of `hidet bench` / `hidet compile`: an `.onnx` path or `zoo:NAME`.

use std::path::Path;
use std::time::{Duration, Instant};

use hidet::onnx::OnnxModel;
use hidet::pipeline;
use hidet::zoo;

use super::CliError;

/// A loaded model, as imported or built (no graph pass applied: [`pipeline::compile`]
/// applies them), with how long loading took.
pub struct Loaded {
    pub model: OnnxModel,
    /// What the user named (`zoo:resnet50`, `path/model.onnx`).
    pub label: String,
    /// Import or zoo construction.
    pub load_time: Duration,
}

/// Loads `spec`: `zoo:NAME` builds the zoo model, anything else is read as an `.onnx` file.
/// Either way the graph is returned as built, as `hidet run` loads it.
pub fn load(spec: &str) -> Result<Loaded, CliError> {
    let start = Instant::now();
    let model = match zoo::strip_prefix(spec) {
        Some(name) => pipeline::zoo_model(name)?,
        None => {
            let path = Path::new(spec);
            if !path.is_file() {
                return Err(CliError::Other(format!(
                    "`{spec}`: no such model file (give an .onnx path or zoo:NAME; `hidet zoo` lists the zoo)"
                )));
            }
            pipeline::load(path)?
        }
    };
    Ok(Loaded {
        model,
        label: spec.to_string(),
        load_time: start.elapsed(),
    })
}
