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

/// `n` deterministic values in `[-1, 1]` for `seed`, none within 0.01 of zero (so that a
/// check never compares zeros).
pub fn seeded_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            if v.abs() < 0.01 {
                0.5
            } else {
                v
            }
        })
        .collect()
}

/// A tensor of `shape` filled with [`seeded_values`].
pub fn seeded_tensor(shape: &[usize], seed: u64) -> hidet::graph::Tensor {
    hidet::graph::Tensor::new(shape.to_vec(), seeded_values(shape.iter().product(), seed))
        .expect("as many values as the shape holds")
}

/// Asserts that `got` has `want`'s names and shapes and that every element is within
/// `tolerance × max(max |want|, 1)` of it; `want` must not be all (nearly) zero.
pub fn assert_outputs_close(
    got: &[(String, hidet::graph::Tensor)],
    want: &[(String, hidet::graph::Tensor)],
    tolerance: f64,
    what: &str,
) {
    assert_eq!(got.len(), want.len());
    for ((gn, g), (wn, w)) in got.iter().zip(want) {
        assert_eq!(gn, wn);
        assert_eq!(g.shape(), w.shape(), "{what} {gn}");
        let (g, w) = (g.to_f64_vec(), w.to_f64_vec());
        let scale = w.iter().fold(0f64, |m, x| m.max(x.abs()));
        assert!(scale > 0.05, "{what} {gn} is (nearly) all zeros");
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(
                (a - b).abs() <= tolerance * scale.max(1.0),
                "{what} {gn}[{i}]: {a} vs {b}"
            );
        }
    }
}

/// Compiles `model` for the CPU and, with `sim`, for the simulated GPU; asserts that each
/// compiled graph runs `host_nodes` nodes on the host and that its outputs on `inputs` are
/// within `tolerance` ([`assert_outputs_close`]) of the reference executor's.
pub fn assert_compiled_matches_reference(
    model: &hidet::onnx::OnnxModel,
    inputs: &[(String, hidet::graph::Tensor)],
    host_nodes: usize,
    tolerance: f64,
    sim: bool,
    what: &str,
) {
    use hidet::graph::compiled::CompileOptions;
    use hidet::pipeline;
    let want = pipeline::run_reference(model, inputs).unwrap();
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t)| t.shape().to_vec()).collect();
    let cpu = pipeline::compile(model, CompileOptions::default());
    let graph = cpu.compiled(&shapes).unwrap();
    assert_eq!(graph.report().host_nodes(), host_nodes, "CPU: {what}");
    assert_outputs_close(
        &pipeline::run(&cpu, inputs).unwrap(),
        &want,
        tolerance,
        what,
    );
    if sim {
        let options = hidet_cuda::graph_backend::CudaBackendOptions {
            min_vector_threads: Some(0),
            ..Default::default()
        };
        let gpu = pipeline::compile_sim(model, CompileOptions::default(), options);
        let graph = gpu.compiled(&shapes).unwrap();
        assert_eq!(graph.report().host_nodes(), host_nodes, "GPU: {what}");
        assert_outputs_close(
            &pipeline::run(&gpu, inputs).unwrap(),
            &want,
            tolerance,
            what,
        );
    }
}
