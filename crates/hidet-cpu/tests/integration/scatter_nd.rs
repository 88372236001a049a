//! ScatterND compiles into a kernel (the gather form: each element finds the index tuples
//! that name it) that agrees with the reference executor: duplicates (the last wins without
//! a reduction, every one counts with one), negative indices, slices and single elements.
//! After the default passes, one with constant indices and no reduction is a gather of its
//! updates (`hidet_graph::passes::ScatterAsGather`), with the same outputs.

use crate::common;

use std::sync::Arc;

use common::{cpu_backend, node, random, Rng};
use hidet_cpu::graph_passes::default_passes;
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::passes::run_passes;
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, GraphBuilder, NodeSpec, Registry, Tensor,
    TensorType,
};

/// `y = ScatterND(x, indices, u)` (opset 18) over `x [5, 4, 3]`, compiled (after the default
/// passes when `passes`) and checked against the reference executor on the imported graph.
fn check(indices: Tensor, update_shape: &[usize], reduction: &str, seed: u64, passes: bool) {
    let mut rng = Rng::new(seed);
    let x = random(&mut rng, &[5, 4, 3]);
    let u = random(&mut rng, update_shape);
    let mut g = GraphBuilder::new("scatter");
    g.input("x", TensorType::fixed(DType::F32, &[5, 4, 3]));
    g.input("u", TensorType::fixed(DType::F32, update_shape));
    g.initializer("i", indices);
    let mut attrs = Attributes::new();
    attrs.insert("reduction", Attribute::String(reduction.into()));
    g.node(NodeSpec {
        opset: 18,
        ..node("ScatterND", &["x", "i", "u"], "y", attrs)
    });
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let inputs = vec![("x".to_string(), x.clone()), ("u".to_string(), u)];
    let want = run_reference(&graph, &inputs).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let optimized = if passes {
        let g = run_passes(graph.clone(), &default_passes()).unwrap();
        let ops: Vec<&str> = g.nodes().iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops.contains(&"ScatterND"), reduction != "none", "{ops:?}");
        g
    } else {
        graph.clone()
    };
    let compiled = CompiledGraph::compile(
        &optimized,
        &[vec![5, 4, 3], update_shape.to_vec()],
        Arc::new(cpu_backend(dir.path(), true)),
        &CompileOptions::default(),
    )
    .unwrap();
    let report = compiled.report();
    assert_eq!(report.host_nodes(), 0, "{}", report.partition);
    let got = compiled.run(&inputs).unwrap();
    let (g, w) = (got[0].1.to_f64_vec(), want[0].1.to_f64_vec());
    assert_ne!(
        w,
        x.to_f64_vec(),
        "{reduction}: the scatter changes nothing"
    );
    for (at, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
            "{reduction}[{at}]: {a} vs {b}"
        );
    }
}

#[test]
fn scatter_nd_kernels_match_the_reference() {
    // Rows (k = 1) with a duplicate (-5 is 0) and a negative index.
    let rows = Tensor::new(vec![3, 1], vec![0i64, 3, -5]).unwrap();
    // Elements (k = 3) with a duplicate.
    let elements =
        Tensor::new(vec![2, 2, 3], vec![4i64, 3, 2, 0, -1, 0, 4, 3, 2, 1, 1, 1]).unwrap();
    // Pairs (k = 2): slices of 3.
    let pairs = Tensor::new(vec![2, 2], vec![1i64, 2, -1, -4]).unwrap();
    for (seed, reduction) in [(1, "none"), (2, "add"), (3, "mul"), (4, "max"), (5, "min")] {
        check(rows.clone(), &[3, 4, 3], reduction, seed, false);
        check(elements.clone(), &[2, 2], reduction, seed + 10, false);
        check(pairs.clone(), &[2, 3], reduction, seed + 20, false);
    }
}

#[test]
fn scatters_with_constant_indices_become_gathers() {
    let rows = Tensor::new(vec![3, 1], vec![0i64, 3, -5]).unwrap();
    let pairs = Tensor::new(vec![2, 2], vec![1i64, 2, -1, -4]).unwrap();
    // Every row written, the last one twice: no `Where`.
    let all: Vec<i64> = (0..5).chain([2]).collect();
    let all = Tensor::new(vec![6, 1], all).unwrap();
    for (seed, reduction) in [(31, "none"), (32, "add")] {
        check(rows.clone(), &[3, 4, 3], reduction, seed, true);
        check(pairs.clone(), &[2, 3], reduction, seed + 1, true);
        check(all.clone(), &[6, 4, 3], reduction, seed + 2, true);
    }
}
