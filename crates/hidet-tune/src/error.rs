//! Errors of tuning.

use std::path::PathBuf;

/// Any failure of the tuning machinery.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// A file or directory of the tuning cache could not be read or written.
    #[error("tuning cache I/O at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A record could not be serialized.
    #[error("serializing the tuning record of `{task}`: {source}")]
    Serialize {
        task: String,
        source: serde_json::Error,
    },
    /// The candidates of a compile unit could not be compiled or loaded.
    #[error("compiling candidates of `{task}`: {message}")]
    Compile { task: String, message: String },
    /// Inputs for measuring a task could not be prepared.
    #[error("preparing inputs of `{task}`: {message}")]
    Workload { task: String, message: String },
    /// A candidate kernel could not be run.
    #[error("running `{kernel}`: {message}")]
    Run { kernel: String, message: String },
    /// Every candidate of a task failed to build or run.
    #[error("task `{task}`: none of its {candidates} candidates could be built and measured (first failure: {first})")]
    NoCandidate {
        task: String,
        candidates: usize,
        first: String,
    },
    /// A tuning level outside 0..=2.
    #[error("tuning level {0} does not exist (levels are 0, 1 and 2)")]
    BadLevel(u32),
    /// A compile worker panicked.
    #[error("a tuning compile worker panicked")]
    WorkerPanicked,
}
