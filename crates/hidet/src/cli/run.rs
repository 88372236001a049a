//! `hidet run`: run a model on `.npy` inputs, write `.npy` outputs.

use std::path::{Path, PathBuf};

use hidet::pipeline::{self, Device};
use hidet::zoo;
use hidet::{CompiledModel, Model, Options, Tensor};

use super::{npy, CliError};

/// `name` with every character outside `[A-Za-z0-9._-]` replaced by `_`.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Parses `NAME=FILE.npy` arguments (split at the first `=`), rejecting duplicates.
pub fn parse_inputs(args: &[String]) -> Result<Vec<(String, PathBuf)>, CliError> {
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for a in args {
        let (name, file) = a
            .split_once('=')
            .ok_or_else(|| CliError::InputSyntax(a.clone()))?;
        if name.is_empty() || file.is_empty() {
            return Err(CliError::InputSyntax(a.clone()));
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(CliError::DuplicateInput(name.to_string()));
        }
        out.push((name.to_string(), PathBuf::from(file)));
    }
    Ok(out)
}

/// `zoo:NAME` as the zoo model, anything else as an `.onnx` file.
fn load_model(model: &Path) -> Result<Model, CliError> {
    match model.to_str().and_then(zoo::strip_prefix) {
        Some(name) => Ok(Model::zoo(name)?),
        None => Ok(Model::load(model)?),
    }
}

/// Loads `model`, reads the inputs, runs (compiled, or with the reference executor on the
/// graph as imported when `reference`; compiled for `device` otherwise), writes
/// `output_dir/<sanitized name>.npy` for every graph output.
pub fn run(
    model: &Path,
    inputs: &[String],
    output_dir: &Path,
    reference: bool,
    threads: Option<usize>,
    device: Device,
) -> Result<(), CliError> {
    if !reference {
        device.check_runnable()?;
    }
    let specs = parse_inputs(inputs)?;
    let tensors: Vec<(String, Tensor)> = specs
        .iter()
        .map(|(name, path)| Ok((name.clone(), npy::read(path)?)))
        .collect::<Result<_, CliError>>()?;
    let outputs = if pipeline::is_compiled_model(model) {
        if reference {
            return Err(CliError::Other(format!(
                "{} is a compiled model, which has no graph for --reference: give the .onnx file",
                model.display()
            )));
        }
        let options = Options {
            device,
            threads,
            ..Options::default()
        };
        CompiledModel::load(model, &options)?.run(&tensors)?
    } else if reference {
        load_model(model)?.run_reference(&tensors)?
    } else {
        let m = load_model(model)?;
        let options = Options {
            device,
            threads,
            ..Options::default()
        };
        m.compile(&options)?.run(&tensors)?
    };
    std::fs::create_dir_all(output_dir).map_err(|e| CliError::Io {
        path: output_dir.to_path_buf(),
        source: e,
    })?;
    let mut used: Vec<String> = Vec::new();
    for (name, t) in &outputs {
        let file = sanitize(name);
        if used.contains(&file) {
            return Err(CliError::Other(format!(
                "two outputs map to the same file name `{file}.npy`"
            )));
        }
        npy::write(&output_dir.join(format!("{file}.npy")), t)?;
        used.push(file);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_replaces_outside_charset() {
        assert_eq!(sanitize("out:0/a b.c-d_e"), "out_0_a_b.c-d_e");
    }
}
