//! QuantizeLinear and DequantizeLinear compile into fused element-wise kernels (no host
//! step) that agree bit for bit with the reference executor: per tensor and per axis,
//! int8 and uint8, ties rounded to even, saturation at both ends, NaN quantized to the zero
//! point; the dequantization and the ReLU after it one kernel.

use crate::common;

use std::sync::Arc;

use common::{cpu_backend, node, Rng};
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, GraphBuilder, Registry, Tensor, TensorType,
};

/// Data for `x [4, 3, 5]` whose quotients by the scales include exact ties (`k + 0.5`),
/// values far out of range both ways, a NaN, and random values.
fn data(rng: &mut Rng, scales: &[f32]) -> Vec<f32> {
    let n = 4 * 3 * 5;
    let mut v = rng.vec_f32(n);
    for (i, x) in v.iter_mut().enumerate() {
        let s = scales[(i / 5) % 3 % scales.len()];
        *x = match i % 7 {
            0 => (i as f32 - 30.5) * s,
            1 => (i as f32 * 0.25 - 7.5) * s,
            2 => 1e6 * *x,
            _ => *x * 40.0 * s,
        };
    }
    v[11] = f32::NAN;
    v
}

/// `y = Relu(DequantizeLinear(QuantizeLinear(x, s, z), s, z))` with the parameters of one
/// element (`per_axis == false`) or one per channel of axis 1.
fn check(seed: u64, zero_dtype: DType, per_axis: bool) {
    let mut rng = Rng::new(seed);
    let scales: Vec<f32> = if per_axis {
        vec![0.05, 0.125, 0.3]
    } else {
        vec![0.0625]
    };
    let n = scales.len();
    let zeros = match zero_dtype {
        DType::I8 => Tensor::new(vec![n], vec![-3i8, 0, 7][..n].to_vec()).unwrap(),
        _ => Tensor::new(vec![n], vec![128u8, 3, 250][..n].to_vec()).unwrap(),
    };
    let scale = Tensor::new(vec![n], scales.clone()).unwrap();
    let x = Tensor::new(vec![4, 3, 5], data(&mut rng, &scales)).unwrap();
    let mut g = GraphBuilder::new("qdq");
    g.input("x", TensorType::fixed(DType::F32, &[4, 3, 5]));
    g.initializer("s", scale);
    g.initializer("z", zeros);
    let mut attrs = Attributes::new();
    attrs.insert("axis", Attribute::Int(1));
    g.node(node("QuantizeLinear", &["x", "s", "z"], "q", attrs.clone()));
    g.node(node("DequantizeLinear", &["q", "s", "z"], "dq", attrs));
    g.node(node("Relu", &["dq"], "y", Attributes::new()));
    g.output("q");
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let inputs = vec![("x".to_string(), x)];
    let want = run_reference(&graph, &inputs).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let compiled = CompiledGraph::compile(
        &graph,
        &[vec![4, 3, 5]],
        Arc::new(cpu_backend(dir.path(), true)),
        &CompileOptions::default(),
    )
    .unwrap();
    let report = compiled.report();
    assert_eq!(report.host_nodes(), 0, "{}", report.partition);
    assert_eq!(
        report.kernels, 2,
        "q stored, y computed from it: {}",
        report.partition
    );
    let got = compiled.run(&inputs).unwrap();
    let what = format!("{zero_dtype:?}, per axis {per_axis}");
    assert_eq!(got[0].1, want[0].1, "{what}: q");
    let (g, w) = (got[1].1.to_f64_vec(), want[1].1.to_f64_vec());
    assert!(w.iter().any(|v| *v != 0.0), "{what}: all-zero reference");
    assert_eq!(g, w, "{what}: y");
    let q = got[0].1.to_f64_vec();
    let (lo, hi) = match zero_dtype {
        DType::I8 => (-128.0, 127.0),
        _ => (0.0, 255.0),
    };
    assert!(
        q.contains(&lo) && q.contains(&hi),
        "{what}: no saturation tested: {q:?}"
    );
}

#[test]
fn quantize_dequantize_chains_compile_to_exact_kernels() {
    for (seed, dtype, per_axis) in [
        (1, DType::I8, false),
        (2, DType::U8, false),
        (3, DType::I8, true),
        (4, DType::U8, true),
    ] {
        check(seed, dtype, per_axis);
    }
}
