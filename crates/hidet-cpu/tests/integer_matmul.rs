//! The 8-bit product (`hidet::IntegerMatMul` on the integer template) equals its exact
//! reference, bit for bit, on every instruction path this machine can run: VNNI on 512-bit and
//! 256-bit vectors, 16-bit multiply-adds on AVX-512BW and AVX2, and the portable per-lane loop,
//! for sizes that are multiples of no tile (a depth not a multiple of 4, a last column tile
//! and a last row panel cut short) and operands spanning the whole 8-bit ranges.

mod common;

use std::sync::Arc;

use common::{cpu_backend_for, runs_here, Rng};
use hidet_cpu::graph_ops::{registry, HIDET_DOMAIN};
use hidet_cpu::templates::integer_matmul::padded_depth;
use hidet_cpu::{CpuFeatures, CpuTarget};
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::{run_reference, Attributes, DType, GraphBuilder, NodeSpec, Tensor, TensorType};

/// Feature lists naming each instruction path of `dot_u8i8`.
const PATHS: [&str; 5] = [
    "sse2",
    "avx2,fma",
    "avx2,fma,avxvnni",
    "avx512f,avx512bw,avx512dq,avx512vl",
    "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni",
];

/// Runs the product on every path that runs here, checks each against the reference and
/// returns the reference.
fn product(batch: usize, m: usize, n: usize, k: usize, seed: u64) -> Vec<i32> {
    let mut rng = Rng::new(seed);
    let kp = padded_depth(k as i64) as usize;
    // Padding columns hold values too: the product must ignore them.
    let a: Vec<i8> = (0..m * kp).map(|_| rng.next_u64() as u8 as i8).collect();
    let x: Vec<u8> = (0..batch * k * n).map(|_| rng.next_u64() as u8).collect();
    let mut g = GraphBuilder::new("integer_matmul");
    g.input("x", TensorType::fixed(DType::U8, &[batch, k, n]));
    g.initializer("a", Tensor::new(vec![m, kp], a).unwrap());
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
    let graph = g.build(registry()).unwrap();
    let inputs = vec![("x".to_string(), Tensor::new(vec![batch, k, n], x).unwrap())];
    let want = run_reference(&graph, &inputs).unwrap();
    let want = want[0].1.as_slice::<i32>().unwrap().to_vec();
    let detected = CpuTarget::detected();
    let mut got = Vec::new();
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
            &[vec![batch, k, n]],
            Arc::new(cpu_backend_for(dir.path(), true, &target)),
            &CompileOptions::default(),
        )
        .unwrap();
        assert!(
            compiled
                .report()
                .partition
                .contains("[anchored] IntegerMatMul"),
            "{list}: {}",
            compiled.report().partition
        );
        let out = compiled.run(&inputs).unwrap();
        let out = out[0].1.as_slice::<i32>().unwrap().to_vec();
        assert_eq!(out.len(), want.len());
        if let Some(i) = (0..out.len()).find(|&i| out[i] != want[i]) {
            panic!(
                "{list}, batch {batch}, {m}×{n}×{k}: element {i} is {} instead of {}",
                out[i], want[i]
            );
        }
        got.push(list);
    }
    assert!(!got.is_empty(), "no instruction path runs here");
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
        let want = product(batch, m, n, k, 100 + i as u64);
        // The operands span the ranges: the sums are not small.
        assert!(want.iter().any(|&v| v.unsigned_abs() > 1000) || k < 16);
    }
}
