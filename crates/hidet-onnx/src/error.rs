//! Errors of ONNX import.

use std::path::PathBuf;

use hidet_graph::{GraphError, TensorError, UnsupportedOp};

/// Everything that can go wrong reading an ONNX model or tensor.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    #[error("cannot read `{path}`: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write `{path}`: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The bytes are not a valid protobuf message (malformed or truncated file).
    #[error("malformed ONNX protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
    /// The protobuf is valid but its content is not a model hidet can represent.
    #[error("invalid model: {0}")]
    Invalid(String),
    /// A valid feature hidet does not support yet.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Every operator without an implementation (op type, count, domain and opset).
    #[error("unsupported operators: {}", .0.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", "))]
    UnsupportedOps(Vec<UnsupportedOp>),
    /// An external-data path is absolute, escapes the model folder, or is otherwise unsafe.
    #[error("external data `{location}`: {reason}")]
    ExternalData { location: String, reason: String },
    #[error("tensor `{name}`: {source}")]
    Tensor { name: String, source: TensorError },
    #[error(transparent)]
    Graph(GraphError),
}

impl From<GraphError> for OnnxError {
    fn from(e: GraphError) -> OnnxError {
        match e {
            GraphError::UnsupportedOps(v) => OnnxError::UnsupportedOps(v),
            other => OnnxError::Graph(other),
        }
    }
}
