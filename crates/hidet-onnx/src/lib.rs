//! hidet-onnx: ONNX import and export.
//!
//! - [`proto`]: the ONNX protobuf types, generated once by `scripts/gen_onnx_proto.sh` from
//!   `proto/onnx.proto` (onnx 1.17.0) and committed; building needs no `protoc`.
//! - [`load_model`] / [`decode_model`]: file or bytes → [`OnnxModel`] (a hidet [`Graph`]).
//! - [`save_model`] / [`encode_model`]: [`OnnxModel`] → `.onnx` file or bytes (graphs of plain
//!   tensor operators; what is not written is an error).
//! - [`tensor_from_proto`] / [`load_tensor_file`]: `TensorProto` → [`hidet_graph::Tensor`],
//!   including `raw_data`, typed fields and external data confined to the model's folder.
//! - [`load_value_file`]: `SequenceProto` / `OptionalProto` (the node tests' sequence and
//!   optional data) → [`hidet_graph::Datum`].
//!
//! Every malformed input is an [`OnnxError`], never a panic.

pub mod error;
pub mod export;
pub mod external;
pub mod import;
pub mod tensor;
pub mod value;

/// ONNX protobuf messages (prost, generated; do not edit by hand).
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod proto {
    include!("generated/onnx.rs");
}

pub use error::OnnxError;
pub use export::{encode_model, model_to_proto, save_model, tensor_to_proto};
pub use import::{decode_model, import_model, load_model, OnnxModel};
pub use tensor::{load_tensor_file, tensor_from_proto};
pub use value::load_value_file;

use hidet_graph::Graph;
