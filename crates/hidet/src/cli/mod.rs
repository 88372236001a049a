//! Subcommands of the `hidet` tool.

pub mod bench;
pub mod compile;
pub mod export;
pub mod info;
pub mod npy;
pub mod ops;
pub mod progress;
pub mod run;
pub mod source;
pub mod tune;
pub mod tune_cuda;

use std::path::PathBuf;

use hidet::pipeline::PipelineError;

/// Errors of a CLI command (printed as `error: ...`, exit status 1).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Api(#[from] hidet::Error),
    #[error(transparent)]
    Zoo(#[from] hidet::zoo::ZooError),
    #[error(transparent)]
    Inputs(#[from] hidet::zoo::inputs::InputError),
    #[error("`{0}`: expected NAME=FILE.npy")]
    InputSyntax(String),
    #[error("input `{0}` given more than once")]
    DuplicateInput(String),
    #[error("{path}: {message}")]
    Npy { path: PathBuf, message: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}
