//! Decoder layers compiled end to end, on the CPU and on the simulated GPU, against the
//! reference executor: a stride-2 `ConvTranspose` with a bias and output padding (rewritten into
//! `MatMul` + `Col2Im`), `Resize` linear (`half_pixel`, ×2 and to a size no multiple of the
//! input) and nearest (`asymmetric`/`floor`, PyTorch's `nearest`), joined by a `Concat`; every
//! node runs as a kernel (no host step).

use crate::common;
use common::{assert_outputs_close, seeded_tensor};
use hidet::graph::compiled::CompileOptions;
use hidet::graph::{
    Attribute, Attributes, DType, Graph, GraphBuilder, NodeSpec, Registry, Tensor, TensorType,
};
use hidet::onnx::OnnxModel;
use hidet::pipeline;
use hidet_cuda::graph_backend::CudaBackendOptions;

fn node(op: &str, opset: i64, inputs: &[&str], output: &str, attrs: Attributes) -> NodeSpec {
    NodeSpec {
        name: format!("{op}_{output}"),
        domain: String::new(),
        op_type: op.into(),
        opset,
        attrs,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.to_string()],
    }
}

fn attrs(list: &[(&str, Attribute)]) -> Attributes {
    let mut a = Attributes::new();
    for (n, v) in list {
        a.insert(*n, v.clone());
    }
    a
}

/// `x[2, 6, 9, 10]` → ConvTranspose (4 channels, 3×3, stride 2, pad 1, output padding 1:
/// 18×20) ‖ Resize linear ×2 of a 4-channel convolution-free branch (18×20) → Concat →
/// Resize nearest to 23×41 and Resize linear to 13×7 (both outputs).
fn decoder() -> Graph {
    let mut b = GraphBuilder::new("decoder");
    b.input("x", TensorType::fixed(DType::F32, &[2, 6, 9, 10]));
    b.initializer("w", seeded_tensor(&[6, 4, 3, 3], 1));
    b.initializer("bias", seeded_tensor(&[4], 2));
    b.initializer(
        "scales2",
        Tensor::new(vec![4], vec![1f32, 1.0, 2.0, 2.0]).unwrap(),
    );
    b.initializer(
        "size_a",
        Tensor::new(vec![4], vec![2i64, 8, 23, 41]).unwrap(),
    );
    b.initializer(
        "size_b",
        Tensor::new(vec![4], vec![2i64, 8, 13, 7]).unwrap(),
    );
    b.initializer("starts", Tensor::new(vec![1], vec![0i64]).unwrap());
    b.initializer("ends", Tensor::new(vec![1], vec![4i64]).unwrap());
    b.initializer("axes", Tensor::new(vec![1], vec![1i64]).unwrap());
    let s = |v: &str| Attribute::String(v.into());
    b.node(node(
        "ConvTranspose",
        17,
        &["x", "w", "bias"],
        "up",
        attrs(&[
            ("strides", Attribute::Ints(vec![2, 2])),
            ("pads", Attribute::Ints(vec![1, 1, 1, 1])),
            ("output_padding", Attribute::Ints(vec![1, 1])),
        ]),
    ));
    b.node(node(
        "Slice",
        17,
        &["x", "starts", "ends", "axes"],
        "x4",
        Attributes::new(),
    ));
    b.node(node(
        "Resize",
        17,
        &["x4", "", "scales2"],
        "x4_up",
        attrs(&[("mode", s("linear"))]),
    ));
    b.node(node(
        "Concat",
        17,
        &["up", "x4_up"],
        "cat",
        attrs(&[("axis", Attribute::Int(1))]),
    ));
    b.node(node(
        "Resize",
        17,
        &["cat", "", "", "size_a"],
        "near",
        attrs(&[
            ("mode", s("nearest")),
            ("coordinate_transformation_mode", s("asymmetric")),
            ("nearest_mode", s("floor")),
        ]),
    ));
    b.node(node(
        "Resize",
        17,
        &["cat", "", "", "size_b"],
        "lin",
        attrs(&[("mode", s("linear"))]),
    ));
    b.output("near");
    b.output("lin");
    b.build(Registry::global()).unwrap()
}

fn model() -> OnnxModel {
    OnnxModel {
        graph: decoder(),
        ir_version: 8,
        opsets: vec![(String::new(), 17)],
        producer: "test".into(),
    }
}

#[test]
fn decoder_layers_compile_to_kernels_on_cpu_and_simulated_gpu() {
    let model = model();
    let inputs = vec![("x".to_string(), seeded_tensor(&[2, 6, 9, 10], 3))];
    let want = pipeline::run_reference(&model, &inputs).unwrap();
    let shapes = vec![vec![2, 6, 9, 10]];

    let cpu = pipeline::compile(&model, CompileOptions::default());
    let graph = cpu.compiled(&shapes).unwrap();
    assert_eq!(
        graph.report().host_nodes(),
        0,
        "CPU: every node runs as a kernel"
    );
    assert_outputs_close(&pipeline::run(&cpu, &inputs).unwrap(), &want, 1e-5, "CPU");

    let options = CudaBackendOptions {
        min_vector_threads: Some(0),
        ..CudaBackendOptions::default()
    };
    let sim = pipeline::compile_sim(&model, CompileOptions::default(), options);
    let graph = sim.compiled(&shapes).unwrap();
    assert_eq!(
        graph.report().host_nodes(),
        0,
        "GPU: every node runs as a kernel"
    );
    assert_outputs_close(
        &pipeline::run(&sim, &inputs).unwrap(),
        &want,
        1e-5,
        "cuda-sim",
    );
}
