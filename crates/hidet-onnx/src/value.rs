//! `SequenceProto` / `OptionalProto` (from `onnx-data.proto`) → [`Datum`], as the ONNX node
//! tests store sequence and optional inputs and outputs.
//!
//! Only what hidet represents is decoded: sequences of tensors and optionals of a tensor or
//! of such a sequence. Sparse tensors, maps and nested sequences are unsupported.

use std::path::Path;

use hidet_graph::{Datum, ValueKind};
use prost::Message;

use crate::error::OnnxError;
use crate::proto::TensorProto;
use crate::tensor::{load_tensor_file, tensor_from_proto};

/// `SequenceProto`, the fields hidet reads (unknown fields are skipped by the decoder).
#[derive(Clone, PartialEq, Message)]
pub struct SequenceProto {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `SequenceProto.DataType` of the elements (1 = tensor).
    #[prost(int32, optional, tag = "2")]
    pub elem_type: Option<i32>,
    #[prost(message, repeated, tag = "3")]
    pub tensor_values: Vec<TensorProto>,
    #[prost(message, repeated, tag = "5")]
    pub sequence_values: Vec<SequenceProto>,
}

/// `OptionalProto`, the fields hidet reads.
#[derive(Clone, PartialEq, Message)]
pub struct OptionalProto {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// `OptionalProto.DataType` of the element (0 = none, 1 = tensor, 3 = sequence).
    #[prost(int32, optional, tag = "2")]
    pub elem_type: Option<i32>,
    #[prost(message, optional, tag = "3")]
    pub tensor_value: Option<TensorProto>,
    #[prost(message, optional, tag = "5")]
    pub sequence_value: Option<SequenceProto>,
}

const TENSOR: i32 = 1;
const SEQUENCE: i32 = 3;

/// A sequence of tensors.
pub fn sequence_from_proto(p: &SequenceProto, base_dir: Option<&Path>) -> Result<Datum, OnnxError> {
    if !p.sequence_values.is_empty() || !matches!(p.elem_type(), 0 | TENSOR) {
        return Err(OnnxError::Unsupported(format!(
            "sequence `{}`: elements that are not tensors",
            p.name()
        )));
    }
    let items = p
        .tensor_values
        .iter()
        .map(|t| tensor_from_proto(t, base_dir))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Datum::Sequence(items))
}

/// An optional tensor or sequence of tensors (empty when it holds neither).
pub fn optional_from_proto(p: &OptionalProto, base_dir: Option<&Path>) -> Result<Datum, OnnxError> {
    let inner = match (p.elem_type(), &p.tensor_value, &p.sequence_value) {
        (TENSOR, Some(t), _) => Some(hidet_graph::Datum::Tensor(tensor_from_proto(t, base_dir)?)),
        (SEQUENCE, _, Some(s)) => Some(sequence_from_proto(s, base_dir)?),
        (TENSOR | SEQUENCE | 0, None, None) => None,
        (code, _, _) => {
            return Err(OnnxError::Unsupported(format!(
                "optional `{}`: element type {code}",
                p.name()
            )))
        }
    };
    Ok(Datum::Optional(inner.map(Box::new)))
}

/// Reads a file holding one serialized value of `kind` (a `TensorProto`, `SequenceProto` or
/// `OptionalProto`, as in the ONNX node tests) and returns its name and value.
pub fn load_value_file(path: &Path, kind: ValueKind) -> Result<(String, Datum), OnnxError> {
    if kind == ValueKind::Tensor {
        let (name, t) = load_tensor_file(path)?;
        return Ok((name, Datum::Tensor(t)));
    }
    let bytes = std::fs::read(path).map_err(|e| OnnxError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let dir = path.parent();
    match kind {
        ValueKind::Sequence => {
            let p = SequenceProto::decode(bytes.as_slice())?;
            Ok((p.name().to_string(), sequence_from_proto(&p, dir)?))
        }
        _ => {
            let p = OptionalProto::decode(bytes.as_slice())?;
            Ok((p.name().to_string(), optional_from_proto(&p, dir)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(v: &[f32]) -> TensorProto {
        TensorProto {
            dims: vec![v.len() as i64],
            data_type: Some(1),
            float_data: v.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn sequences_and_optionals_round_trip() {
        let seq = SequenceProto {
            name: Some("s".into()),
            elem_type: Some(TENSOR),
            tensor_values: vec![tensor(&[1.0, 2.0]), tensor(&[3.0])],
            sequence_values: vec![],
        };
        let d = sequence_from_proto(
            &SequenceProto::decode(seq.encode_to_vec().as_slice()).unwrap(),
            None,
        )
        .unwrap();
        let Datum::Sequence(items) = &d else {
            panic!("not a sequence: {d:?}")
        };
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].as_slice::<f32>().unwrap(), &[3.0]);
        let opt = OptionalProto {
            name: Some("o".into()),
            elem_type: Some(SEQUENCE),
            tensor_value: None,
            sequence_value: Some(seq.clone()),
        };
        let o = optional_from_proto(&opt, None).unwrap();
        assert!(o.is_kind(ValueKind::OptionalSequence));
        let empty = OptionalProto {
            elem_type: Some(TENSOR),
            ..Default::default()
        };
        assert_eq!(
            optional_from_proto(&empty, None).unwrap(),
            Datum::Optional(None)
        );
        let nested = SequenceProto {
            elem_type: Some(SEQUENCE),
            sequence_values: vec![seq],
            ..Default::default()
        };
        assert!(sequence_from_proto(&nested, None).is_err());
    }
}
