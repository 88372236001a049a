//! The 8-bit products (`hidet::IntegerMatMul` and `hidet::IntegerLinear` on their templates)
//! equal their exact references, bit for bit, on every instruction path this machine can run: VNNI on 512-bit and
//! 256-bit vectors, 16-bit multiply-adds on AVX-512BW and AVX2, and the portable per-lane loop,
//! for sizes that are multiples of no tile (a depth not a multiple of 4, a last column tile
//! and a last row panel cut short) and operands spanning the whole 8-bit ranges.

use crate::common;

use std::sync::Arc;

use common::{cpu_backend_for, runs_here, Rng};
use hidet_cpu::graph_ops::integer_linear::panel_shape;
use hidet_cpu::graph_ops::{registry, HIDET_DOMAIN};
use hidet_cpu::templates::integer_matmul::padded_depth;
use hidet_cpu::{CpuFeatures, CpuTarget};
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, GraphBuilder, NodeSpec, Tensor, TensorType,
};

/// Feature lists naming each instruction path of `dot_u8i8`.
const PATHS: [&str; 5] = [
    "sse2",
    "avx2,fma",
    "avx2,fma,avxvnni",
    "avx512f,avx512bw,avx512dq,avx512vl",
    "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni",
];

/// Runs the product on every path that runs here, checks each against the reference and
/// returns the reference; with `widened`, the weights are given as `int16` (multiplied by
/// pairs of `k`).
fn product(batch: usize, m: usize, n: usize, k: usize, widened: bool, seed: u64) -> Vec<i32> {
    let mut rng = Rng::new(seed);
    let kp = padded_depth(k as i64) as usize;
    // Padding columns hold values too: the product must ignore them.
    let a: Vec<i8> = (0..m * kp).map(|_| rng.next_u64() as u8 as i8).collect();
    let a = if widened {
        let wide: Vec<i16> = a.iter().map(|&v| i16::from(v)).collect();
        Tensor::new(vec![m, kp], wide).unwrap()
    } else {
        Tensor::new(vec![m, kp], a).unwrap()
    };
    let x: Vec<u8> = (0..batch * k * n).map(|_| rng.next_u64() as u8).collect();
    let mut g = GraphBuilder::new("integer_matmul");
    g.input("x", TensorType::fixed(DType::U8, &[batch, k, n]));
    g.initializer("a", a);
    g.node(NodeSpec {
        name: "product".into(),
        domain: HIDET_DOMAIN.into(),
        op_type: "IntegerMatMul".into(),
        opset: 1,
        attrs: Attributes::new(),
        inputs: vec!["a".into(), "x".into()],
        outputs: vec!["y".into()],
    });
    g.output("y");
    let x = Tensor::new(vec![batch, k, n], x).unwrap();
    let what = format!("batch {batch}, {m}×{n}×{k}, widened {widened}");
    on_every_path(g, x, "IntegerMatMul", &what)
}

/// `IntegerLinear` of `[rows, k]` activations by a `[n, k]` weight in panels of
/// `depth_group` consecutive `k`, on every path.
fn linear(rows: usize, n: usize, k: usize, depth_group: usize, seed: u64) -> Vec<i32> {
    let mut rng = Rng::new(seed);
    let shape = panel_shape(n, k, depth_group);
    // Entries past `n` and `k` hold values too: the product must ignore them.
    let w: Vec<i8> = (0..shape.iter().product::<usize>())
        .map(|_| rng.next_u64() as u8 as i8)
        .collect();
    let x: Vec<u8> = (0..rows * k).map(|_| rng.next_u64() as u8).collect();
    let mut g = GraphBuilder::new("integer_linear");
    g.input("x", TensorType::fixed(DType::U8, &[rows, k]));
    g.initializer("w", Tensor::new(shape, w).unwrap());
    let mut attrs = Attributes::new();
    attrs.insert("columns", Attribute::Int(n as i64));
    attrs.insert("depth_group", Attribute::Int(depth_group as i64));
    g.node(NodeSpec {
        name: "product".into(),
        domain: HIDET_DOMAIN.into(),
        op_type: "IntegerLinear".into(),
        opset: 1,
        attrs,
        inputs: vec!["x".into(), "w".into()],
        outputs: vec!["y".into()],
    });
    g.output("y");
    let x = Tensor::new(vec![rows, k], x).unwrap();
    let what = format!("{rows}×{n}×{k} in depth groups of {depth_group}");
    on_every_path(g, x, "IntegerLinear", &what)
}

/// Compiles `g` (one input `x`, one `int32` output) for every instruction path this machine
/// runs, checks that its `op` is an anchored template kernel and that each output equals the
/// reference's; returns the reference.
fn on_every_path(g: GraphBuilder, x: Tensor, op: &str, what: &str) -> Vec<i32> {
    let graph = g.build(registry()).unwrap();
    let shape = x.shape().to_vec();
    let inputs = vec![("x".to_string(), x)];
    let want = run_reference(&graph, &inputs).unwrap();
    let want = want[0].1.as_slice::<i32>().unwrap().to_vec();
    let detected = CpuTarget::detected();
    let mut ran = 0;
    for list in PATHS {
        let target = detected
            .with_features(CpuFeatures::parse(list).unwrap())
            .unwrap();
        if !runs_here(&target) {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let compiled = CompiledGraph::compile(
            &graph,
            std::slice::from_ref(&shape),
            Arc::new(cpu_backend_for(dir.path(), true, &target)),
            &CompileOptions::default(),
        )
        .unwrap();
        let report = compiled.report();
        assert!(
            report.partition.contains(&format!("[anchored] {op}")),
            "{list}: {}",
            report.partition
        );
        let out = compiled.run(&inputs).unwrap();
        let out = out[0].1.as_slice::<i32>().unwrap().to_vec();
        assert_eq!(out.len(), want.len());
        if let Some(i) = (0..out.len()).find(|&i| out[i] != want[i]) {
            panic!(
                "{op} on {list}, {what}: element {i} is {} instead of {}",
                out[i], want[i]
            );
        }
        ran += 1;
    }
    assert!(ran > 0, "no instruction path runs here");
    want
}

#[test]
fn integer_products_are_exact_on_every_instruction_path() {
    for (i, &(batch, m, n, k)) in [
        (1, 13, 45, 147),
        (2, 64, 70, 64),
        (3, 7, 33, 9),
        (1, 1, 1, 1),
        (1, 130, 97, 1150),
    ]
    .iter()
    .enumerate()
    {
        // Weights as bytes (four k at a time) and widened to 16 bits (pairs).
        for widened in [false, true] {
            let want = product(batch, m, n, k, widened, 100 + i as u64);
            // The operands span the ranges: the sums are not small.
            assert!(want.iter().any(|&v| v.unsigned_abs() > 1000) || k < 16);
        }
    }
}

#[test]
fn integer_linear_products_are_exact_on_every_instruction_path() {
    // Rows and columns multiples of no tile, one and two rows (tiles cut to the rows),
    // depths not a multiple of 4; weights in groups of four k (VNNI's) and pairs (16-bit
    // multiply-adds'), each on every path, so each layout meets every register tile.
    for (i, &(rows, n, k)) in [
        (13, 45, 147),
        (1, 70, 64),
        (2, 61, 37),
        (7, 33, 9),
        (30, 97, 1150),
    ]
    .iter()
    .enumerate()
    {
        let quads = linear(rows, n, k, 4, 200 + i as u64);
        assert!(quads.iter().any(|&v| v.unsigned_abs() > 1000) || k < 16);
        let pairs = linear(rows, n, k, 2, 300 + i as u64);
        assert!(pairs.iter().any(|&v| v.unsigned_abs() > 1000) || k < 16);
    }
}

/// The graph passes store 8-bit linear weights in groups of four `k` where one instruction
/// multiplies four byte pairs per lane for the schedule's vectors (VNNI), in pairs elsewhere.
#[test]
fn weight_panels_are_grouped_for_the_targets_multiply_add() {
    use hidet_cpu::graph_backend::pass_options;
    let detected = CpuTarget::detected();
    for (list, group) in [
        ("sse2", 2),
        ("avx2,fma", 2),
        ("avx2,fma,avxvnni", 4),
        ("avx512f,avx512bw,avx512dq,avx512vl", 2),
        ("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni", 4),
    ] {
        let target = detected
            .with_features(CpuFeatures::parse(list).unwrap())
            .unwrap();
        assert_eq!(pass_options(&target).integer_depth_group, group, "{list}");
    }
}
