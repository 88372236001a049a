//! Helpers shared by the integration tests: ONNX protobuf pieces and `.npy` files.
#![allow(dead_code)] // each test binary uses a part

use std::path::Path;

use hidet::onnx::proto::{
    tensor_shape_proto::{dimension, Dimension},
    type_proto, NodeProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use npyz::WriterBuilder;

/// A tensor value of ONNX element type `elem`; `Ok(n)` is a fixed dimension, `Err(name)` a
/// symbolic one.
pub fn value_info(name: &str, elem: i32, dims: &[Result<i64, &str>]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Ok(v) => dimension::Value::DimValue(*v),
                Err(p) => dimension::Value::DimParam(p.to_string()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An unnamed node without attributes.
pub fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Writes `data` of `shape` as an `.npy` file; returns the path as text.
pub fn write_npy<T: npyz::AutoSerialize + Copy>(path: &Path, shape: &[u64], data: &[T]) -> String {
    let f = std::fs::File::create(path).unwrap();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(f)
        .begin_nd()
        .unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
    path.display().to_string()
}
