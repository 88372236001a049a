//! hidet [`Graph`] → ModelProto: the inverse of [`crate::import`] for graphs of plain tensor
//! operators, so a model hidet built (a zoo model) can be run by other runtimes.
//!
//! Every node is written as it is in the graph (op type, domain, attributes, value names), but
//! weights kept as quantized blocks (`hidet::DequantizeBlocks`, what ONNX Runtime's
//! `MatMulNBits` expands to) are written dense; initializers are written with their data in
//! `raw_data`. Not written: subgraph attributes
//! (If, Loop, Scan, SequenceMap) and models whose protobuf would exceed the format's 2 GiB
//! limit (which would need external data); each is an [`OnnxError::Unsupported`] naming the
//! node.

use std::path::Path;

use hidet_graph::ops::HIDET_DOMAIN;
use hidet_graph::passes::{DeadCodeElimination, DecodeBlockWeights, GraphPass};
use hidet_graph::{Attribute, DType, Dim, Tensor, TensorType, ValueKind};
use prost::Message;

use crate::error::OnnxError;
use crate::import::OnnxModel;
use crate::proto::{
    attribute_proto::AttributeType, tensor_shape_proto::dimension, type_proto, AttributeProto,
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto,
};
use crate::Graph;

/// The largest message protobuf implementations accept (2 GiB − 1).
const PROTOBUF_LIMIT: usize = i32::MAX as usize;

/// The `ModelProto` of `model`: its graph, opsets, IR version and producer.
pub fn model_to_proto(model: &OnnxModel) -> Result<ModelProto, OnnxError> {
    // Weights an expansion kept as quantized blocks (hidet's own operator) are written dense,
    // without the blocks they replace.
    let mut graph = model.graph.clone();
    if graph.nodes().iter().any(|n| n.domain == HIDET_DOMAIN) {
        graph = DecodeBlockWeights.run(graph).map_err(OnnxError::Graph)?;
        graph = DeadCodeElimination.run(graph).map_err(OnnxError::Graph)?;
    }
    Ok(ModelProto {
        ir_version: Some(model.ir_version),
        opset_import: model
            .opsets
            .iter()
            .map(|(domain, version)| OperatorSetIdProto {
                domain: Some(domain.clone()),
                version: Some(*version),
            })
            .collect(),
        producer_name: Some(model.producer.clone()),
        producer_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        graph: Some(graph_to_proto(&graph)?),
        ..Default::default()
    })
}

/// The bytes of an `.onnx` file holding `model`. Fails for what the module docs list as not
/// written, the size limit included.
pub fn encode_model(model: &OnnxModel) -> Result<Vec<u8>, OnnxError> {
    let proto = model_to_proto(model)?;
    let len = proto.encoded_len();
    if len > PROTOBUF_LIMIT {
        return Err(OnnxError::Unsupported(format!(
            "a {len}-byte model exceeds protobuf's 2 GiB limit (external data is not written)"
        )));
    }
    Ok(proto.encode_to_vec())
}

/// Writes `model` to the `.onnx` file `path` (through a temporary file renamed into place,
/// so a failed write leaves no partial model). Returns the number of bytes written.
pub fn save_model(model: &OnnxModel, path: &Path) -> Result<usize, OnnxError> {
    let bytes = encode_model(model)?;
    let io = |source| OnnxError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, &bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(bytes.len())
}

fn graph_to_proto(g: &Graph) -> Result<GraphProto, OnnxError> {
    let value_info = |id| {
        let v = g.value(id);
        ValueInfoProto {
            name: Some(v.name.clone()),
            r#type: Some(type_to_proto(&v.ty, v.kind)),
            ..Default::default()
        }
    };
    let name_of = |slot: &Option<hidet_graph::ValueId>| {
        slot.map_or_else(String::new, |id| g.value(id).name.clone())
    };
    let mut nodes = Vec::with_capacity(g.nodes().len());
    for n in g.nodes() {
        let mut attribute = Vec::with_capacity(n.attrs.iter().count());
        for (key, value) in n.attrs.iter() {
            attribute.push(attribute_to_proto(key, value).map_err(|what| {
                OnnxError::Unsupported(format!(
                    "node `{}` ({}): attribute `{key}`: {what}",
                    n.name, n.op_type
                ))
            })?);
        }
        nodes.push(NodeProto {
            input: n.inputs.iter().map(name_of).collect(),
            output: n.outputs.iter().map(name_of).collect(),
            name: Some(n.name.clone()),
            op_type: Some(n.op_type.clone()),
            domain: Some(n.domain.clone()),
            attribute,
            ..Default::default()
        });
    }
    let initializer = g
        .initializers()
        .map(|(id, t)| tensor_to_proto(&g.value(id).name, t))
        .collect::<Result<_, _>>()?;
    Ok(GraphProto {
        node: nodes,
        name: Some(g.name.clone()),
        initializer,
        input: g.inputs().iter().map(|&id| value_info(id)).collect(),
        output: g.outputs().iter().map(|&id| value_info(id)).collect(),
        ..Default::default()
    })
}

/// The type of a value of `kind` whose tensors have type `ty`.
fn type_to_proto(ty: &TensorType, kind: ValueKind) -> TypeProto {
    let wrap = |value| TypeProto {
        value: Some(value),
        ..Default::default()
    };
    let tensor = tensor_type_to_proto(ty);
    let sequence = || {
        wrap(type_proto::Value::SequenceType(Box::new(
            type_proto::Sequence {
                elem_type: Some(Box::new(tensor_type_to_proto(ty))),
            },
        )))
    };
    let optional = |inner: TypeProto| {
        wrap(type_proto::Value::OptionalType(Box::new(
            type_proto::Optional {
                elem_type: Some(Box::new(inner)),
            },
        )))
    };
    match kind {
        ValueKind::Tensor => tensor,
        ValueKind::Sequence => sequence(),
        ValueKind::OptionalTensor => optional(tensor),
        ValueKind::OptionalSequence => optional(sequence()),
    }
}

fn tensor_type_to_proto(ty: &TensorType) -> TypeProto {
    let shape = ty.shape.as_ref().map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|d| crate::proto::tensor_shape_proto::Dimension {
                value: match d {
                    Dim::Fixed(n) => Some(dimension::Value::DimValue(*n as i64)),
                    Dim::Symbol(s) => Some(dimension::Value::DimParam(s.to_string())),
                    Dim::Unknown => None,
                },
                ..Default::default()
            })
            .collect(),
    });
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(ty.dtype.onnx_code()),
            shape,
        })),
        ..Default::default()
    }
}

/// A tensor as `TensorProto`: `raw_data` for every type but strings (`string_data`); 4-bit
/// integers packed two per byte, the first in the low nibble.
pub fn tensor_to_proto(name: &str, t: &Tensor) -> Result<TensorProto, OnnxError> {
    let mut p = TensorProto {
        name: Some(name.to_string()),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype().onnx_code()),
        ..Default::default()
    };
    let tensor_err = |source| OnnxError::Tensor {
        name: name.to_string(),
        source,
    };
    if t.dtype() == DType::String {
        let strings = t
            .as_slice::<hidet_graph::string::Str>()
            .map_err(tensor_err)?;
        p.string_data = strings
            .iter()
            .map(|s| s.as_str().as_bytes().to_vec())
            .collect();
        return Ok(p);
    }
    let bytes = t.to_le_bytes().map_err(tensor_err)?;
    p.raw_data = Some(if t.dtype().is_int4() {
        pack_nibbles(&bytes)
    } else {
        bytes
    });
    Ok(p)
}

/// One 4-bit value per byte (low nibble) → two per byte, the first in the low nibble.
fn pack_nibbles(values: &[u8]) -> Vec<u8> {
    values
        .chunks(2)
        .map(|pair| (pair[0] & 0x0f) | pair.get(1).map_or(0, |hi| (hi & 0x0f) << 4))
        .collect()
}

/// The attribute as `AttributeProto`, or what kind it is when it cannot be written.
fn attribute_to_proto(name: &str, a: &Attribute) -> Result<AttributeProto, &'static str> {
    let mut p = AttributeProto {
        name: Some(name.to_string()),
        ..Default::default()
    };
    let kind = match a {
        Attribute::Float(v) => {
            p.f = Some(*v);
            AttributeType::Float
        }
        Attribute::Int(v) => {
            p.i = Some(*v);
            AttributeType::Int
        }
        Attribute::String(v) => {
            p.s = Some(v.as_bytes().to_vec());
            AttributeType::String
        }
        Attribute::Floats(v) => {
            p.floats = v.clone();
            AttributeType::Floats
        }
        Attribute::Ints(v) => {
            p.ints = v.clone();
            AttributeType::Ints
        }
        Attribute::Strings(v) => {
            p.strings = v.iter().map(|s| s.as_bytes().to_vec()).collect();
            AttributeType::Strings
        }
        Attribute::Tensor(t) => {
            p.t = Some(tensor_to_proto("", t).map_err(|_| "a tensor that cannot be encoded")?);
            AttributeType::Tensor
        }
        Attribute::Tensors(ts) => {
            p.tensors = ts
                .iter()
                .map(|t| tensor_to_proto("", t))
                .collect::<Result<_, _>>()
                .map_err(|_| "a tensor that cannot be encoded")?;
            AttributeType::Tensors
        }
        Attribute::Type(ty, kind) => {
            p.tp = Some(type_to_proto(ty, *kind));
            AttributeType::TypeProto
        }
        Attribute::Graph(_) | Attribute::Graphs(_) | Attribute::GraphDef(_) => {
            return Err("subgraphs are not exported")
        }
    };
    p.r#type = Some(kind as i32);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibbles_pack_low_first() {
        assert_eq!(pack_nibbles(&[1, 2, 3]), vec![0x21, 0x03]);
    }
}
