//! ONNX's integer operators (the "QOperator" form of quantized models: `QLinearConv`,
//! `QLinearMatMul`, `ConvInteger`, `MatMulInteger`) with constant `int8` weights compile to
//! the 8-bit product instead of running on the host: the `int32` results equal the reference
//! executor's exactly, the requantized ones to within one step (the compiled kernel sums in
//! another order and rounds in `f32`), on shapes that are multiples of no tile.

use crate::common;

use std::sync::Arc;

use common::{cpu_backend, node, Rng};
use hidet_cpu::graph_passes::default_passes;
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::passes::run_passes;
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, GraphBuilder, NodeSpec, Registry, Tensor,
    TensorType,
};

fn int8s(rng: &mut Rng, n: usize) -> Vec<i8> {
    (0..n).map(|_| (rng.next_u64() % 255) as u8 as i8).collect()
}

fn uint8s(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

fn conv_attrs() -> Attributes {
    let mut a = Attributes::new();
    a.insert("kernel_shape", Attribute::Ints(vec![3, 3]));
    a.insert("strides", Attribute::Ints(vec![2, 1]));
    a.insert("pads", Attribute::Ints(vec![1, 1, 0, 2]));
    a
}

/// Compiles `graph` after the CPU passes, checks it has no host step and one 8-bit product,
/// and returns its outputs beside the reference executor's on `inputs`.
fn run(graph: hidet_graph::Graph, inputs: Vec<(String, Tensor)>) -> (Vec<f64>, Vec<f64>) {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t)| t.shape().to_vec()).collect();
    let want = run_reference(&graph, &inputs).unwrap();
    let rewritten = run_passes(graph, &default_passes()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let compiled = CompiledGraph::compile(
        &rewritten,
        &shapes,
        Arc::new(cpu_backend(dir.path(), true)),
        &CompileOptions::default(),
    )
    .unwrap();
    let report = compiled.report();
    assert_eq!(report.host_nodes(), 0, "{}", report.partition);
    let products = report.partition.matches("[anchored] IntegerMatMul").count()
        + report.partition.matches("[anchored] IntegerLinear").count();
    assert_eq!(products, 1, "{}", report.partition);
    let got = compiled.run(&inputs).unwrap();
    (got[0].1.to_f64_vec(), want[0].1.to_f64_vec())
}

fn within_one_step(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    let distinct: std::collections::HashSet<i64> = want.iter().map(|&v| v as i64).collect();
    assert!(distinct.len() > 20, "{what}: outputs barely vary");
    let mut off = 0;
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1.0, "{what}: output {i}: {a} vs {b}");
        off += usize::from(a != b);
    }
    assert!(
        off * 100 <= want.len(),
        "{what}: {off} outputs one step off"
    );
}

#[test]
fn conv_integer_and_matmul_integer_are_exact() {
    let mut rng = Rng::new(5);
    // ConvInteger, int8 activations with a zero point, a batch of 2.
    let (n, c, h, w, oc) = (2, 7, 11, 9, 13);
    let mut g = GraphBuilder::new("conv_integer");
    g.input("x", TensorType::fixed(DType::I8, &[n, c, h, w]));
    g.initializer(
        "w",
        Tensor::new(vec![oc, c, 3, 3], int8s(&mut rng, oc * c * 9)).unwrap(),
    );
    g.initializer("zx", Tensor::new(vec![], vec![-3i8]).unwrap());
    g.node(node("ConvInteger", &["x", "w", "zx"], "y", conv_attrs()));
    g.output("y");
    let x = Tensor::new(vec![n, c, h, w], int8s(&mut rng, n * c * h * w)).unwrap();
    let (got, want) = run(g.build(Registry::global()).unwrap(), vec![("x".into(), x)]);
    assert_eq!(got, want, "ConvInteger");

    // MatMulInteger of uint8 activations [3, 5, 37] by an int8 [37, 22].
    let mut g = GraphBuilder::new("matmul_integer");
    g.input("a", TensorType::fixed(DType::U8, &[3, 5, 37]));
    g.initializer(
        "b",
        Tensor::new(vec![37, 22], int8s(&mut rng, 37 * 22)).unwrap(),
    );
    g.initializer("za", Tensor::new(vec![], vec![121u8]).unwrap());
    g.node(node(
        "MatMulInteger",
        &["a", "b", "za"],
        "y",
        Attributes::new(),
    ));
    g.output("y");
    let a = Tensor::new(vec![3, 5, 37], uint8s(&mut rng, 3 * 5 * 37)).unwrap();
    let (got, want) = run(g.build(Registry::global()).unwrap(), vec![("a".into(), a)]);
    assert_eq!(got, want, "MatMulInteger");
}

#[test]
fn qlinear_conv_and_matmul_match_within_one_step() {
    let mut rng = Rng::new(6);
    let (n, c, h, w, oc) = (1, 9, 13, 10, 17);
    let mut g = GraphBuilder::new("qlinear_conv");
    g.input("x", TensorType::fixed(DType::U8, &[n, c, h, w]));
    let scalar = |v: f32| Tensor::new(vec![], vec![v]).unwrap();
    g.initializer("sx", scalar(0.03));
    g.initializer("zx", Tensor::new(vec![], vec![117u8]).unwrap());
    g.initializer(
        "w",
        Tensor::new(vec![oc, c, 3, 3], int8s(&mut rng, oc * c * 9)).unwrap(),
    );
    let sw: Vec<f32> = (0..oc).map(|i| 0.002 + 0.0003 * i as f32).collect();
    g.initializer("sw", Tensor::new(vec![oc], sw).unwrap());
    g.initializer("zw", Tensor::new(vec![oc], vec![0i8; oc]).unwrap());
    g.initializer("sy", scalar(0.35));
    g.initializer("zy", Tensor::new(vec![], vec![128u8]).unwrap());
    let bias: Vec<i32> = (0..oc)
        .map(|_| (rng.next_u64() % 4001) as i32 - 2000)
        .collect();
    g.initializer("b", Tensor::new(vec![oc], bias).unwrap());
    g.node(NodeSpec {
        inputs: ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"]
            .map(String::from)
            .to_vec(),
        ..node("QLinearConv", &[], "y", conv_attrs())
    });
    g.output("y");
    let x = Tensor::new(vec![n, c, h, w], uint8s(&mut rng, n * c * h * w)).unwrap();
    let (got, want) = run(g.build(Registry::global()).unwrap(), vec![("x".into(), x)]);
    within_one_step("QLinearConv", &got, &want);

    let (m, k, nn) = (19, 70, 45);
    let mut g = GraphBuilder::new("qlinear_matmul");
    g.input("a", TensorType::fixed(DType::I8, &[m, k]));
    g.initializer("sa", scalar(0.05));
    g.initializer("za", Tensor::new(vec![], vec![4i8]).unwrap());
    g.initializer(
        "b",
        Tensor::new(vec![k, nn], int8s(&mut rng, k * nn)).unwrap(),
    );
    g.initializer("sb", scalar(0.004));
    g.initializer("zb", Tensor::new(vec![], vec![0i8]).unwrap());
    g.initializer("sy", scalar(0.6));
    g.initializer("zy", Tensor::new(vec![], vec![-7i8]).unwrap());
    g.node(NodeSpec {
        inputs: ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"]
            .map(String::from)
            .to_vec(),
        ..node("QLinearMatMul", &[], "y", Attributes::new())
    });
    g.output("y");
    let a = Tensor::new(vec![m, k], int8s(&mut rng, m * k)).unwrap();
    let (got, want) = run(g.build(Registry::global()).unwrap(), vec![("a".into(), a)]);
    within_one_step("QLinearMatMul", &got, &want);
}

#[test]
fn dynamically_quantized_products_read_their_zero_point_at_run_time() {
    // ONNX Runtime's `quantize_dynamic`: activations quantized per call by
    // DynamicQuantizeLinear (uint8, a scale and a zero point computed from the data), then
    // MatMulInteger by the int8 weight with that zero point, then the scales.
    let mut rng = Rng::new(7);
    let (b, m, k, n) = (2, 9, 83, 31);
    let mut g = GraphBuilder::new("dynamic_quantization");
    g.input("x", TensorType::fixed(DType::F32, &[b, m, k]));
    g.initializer(
        "w",
        Tensor::new(vec![k, n], int8s(&mut rng, k * n)).unwrap(),
    );
    g.node(NodeSpec {
        outputs: ["xq", "xs", "xz"].map(String::from).to_vec(),
        ..node("DynamicQuantizeLinear", &["x"], "xq", Attributes::new())
    });
    g.node(node(
        "MatMulInteger",
        &["xq", "w", "xz"],
        "y",
        Attributes::new(),
    ));
    g.output("y");
    // Shifted data: the zero point is far from 0 and differs between calls.
    for (call, offset) in [0.7f32, -0.4].into_iter().enumerate() {
        let x: Vec<f32> = rng.vec_f32(b * m * k).iter().map(|v| v + offset).collect();
        let x = Tensor::new(vec![b, m, k], x).unwrap();
        let graph = g.clone().build(Registry::global()).unwrap();
        // DynamicQuantizeLinear runs as kernels too (reductions, scalar arithmetic,
        // QuantizeLinear), rounding as the operator does: the sums are the reference's.
        let (got, want) = run(graph, vec![("x".into(), x)]);
        assert_eq!(got, want, "call {call}");
    }
}

#[test]
fn reductions_over_dequantized_bytes_match_the_reference() {
    // A LayerNormalization whose rows are read through a DequantizeLinear of uint8 values
    // (a quantized embedding table's rows): the row folds load bytes as vectors and convert
    // them; rows of 133 are multiples of no vector width.
    let mut rng = Rng::new(8);
    let (rows, width) = (7, 133);
    let mut g = GraphBuilder::new("dequantized_rows");
    g.input("x", TensorType::fixed(DType::U8, &[rows, width]));
    g.initializer("s", Tensor::new(vec![], vec![0.021f32]).unwrap());
    g.initializer("z", Tensor::new(vec![], vec![131u8]).unwrap());
    let gamma: Vec<f32> = rng.vec_f32(width);
    let beta: Vec<f32> = rng.vec_f32(width);
    g.initializer("gamma", Tensor::new(vec![width], gamma).unwrap());
    g.initializer("beta", Tensor::new(vec![width], beta).unwrap());
    g.node(node(
        "DequantizeLinear",
        &["x", "s", "z"],
        "xd",
        Attributes::new(),
    ));
    g.node(node(
        "LayerNormalization",
        &["xd", "gamma", "beta"],
        "y",
        Attributes::new(),
    ));
    g.output("y");
    let x = Tensor::new(vec![rows, width], uint8s(&mut rng, rows * width)).unwrap();
    let inputs = vec![("x".to_string(), x)];
    let graph = g.build(Registry::global()).unwrap();
    let want = run_reference(&graph, &inputs).unwrap();
    let rewritten = run_passes(graph, &default_passes()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let compiled = CompiledGraph::compile(
        &rewritten,
        &[vec![rows, width]],
        Arc::new(cpu_backend(dir.path(), true)),
        &CompileOptions::default(),
    )
    .unwrap();
    assert_eq!(compiled.report().host_nodes(), 0);
    let got = compiled.run(&inputs).unwrap();
    let (got, want) = (got[0].1.to_f64_vec(), want[0].1.to_f64_vec());
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
            "output {i}: {a} vs {b}"
        );
    }
}
