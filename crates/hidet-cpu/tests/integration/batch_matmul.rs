//! Products of two activations (attention's per-head `Q·Kᵀ` and `P·V`) run on the matmul
//! template in its batched form: rank-4 operands with the same batch axes are merged to one
//! batch axis by the default graph passes, a transposed operand is packed from its strided
//! reads, an operand of batch 1 is broadcast, and an epilogue fuses; every output matches
//! float64 loops on random data with sizes that are multiples of no tile.

use crate::common;

use std::sync::Arc;

use common::{cpu_backend, node, Rng};
use hidet_cpu::graph_passes::{passes_for, PassOptions};
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::passes::run_passes;
use hidet_graph::{Attribute, Attributes, DType, GraphBuilder, Registry, Tensor, TensorType};

const HEADS: usize = 3;
const M: usize = 37;
const D: usize = 29;
const N: usize = 45;
const V: usize = 23;

fn random(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::new(shape.to_vec(), (0..n).map(|_| rng.nonzero_f32()).collect()).unwrap()
}

fn f32s(t: &Tensor) -> Vec<f64> {
    t.as_slice::<f32>()
        .unwrap()
        .iter()
        .map(|&v| f64::from(v))
        .collect()
}

#[test]
fn products_of_activations_run_on_the_batched_template() {
    let mut g = GraphBuilder::new("attention_products");
    g.input("q", TensorType::fixed(DType::F32, &[1, HEADS, M, D]));
    g.input("k", TensorType::fixed(DType::F32, &[1, HEADS, N, D]));
    g.input("p", TensorType::fixed(DType::F32, &[HEADS, M, N]));
    g.input("v", TensorType::fixed(DType::F32, &[1, N, V]));
    let mut perm = Attributes::new();
    perm.insert("perm", Attribute::Ints(vec![0, 1, 3, 2]));
    g.node(node("Transpose", &["k"], "kt", perm));
    g.node(node("MatMul", &["q", "kt"], "s", Attributes::new()));
    g.node(node("Relu", &["s"], "scores", Attributes::new()));
    g.node(node("MatMul", &["p", "v"], "pv", Attributes::new()));
    g.output("scores");
    g.output("pv");
    let graph = g.build(Registry::global()).unwrap();
    let graph = run_passes(graph, &passes_for(&PassOptions::default())).unwrap();

    let mut rng = Rng::new(11);
    let (q, k, p, v) = (
        random(&mut rng, &[1, HEADS, M, D]),
        random(&mut rng, &[1, HEADS, N, D]),
        random(&mut rng, &[HEADS, M, N]),
        random(&mut rng, &[1, N, V]),
    );
    let dir = tempfile::tempdir().unwrap();
    let compiled = CompiledGraph::compile(
        &graph,
        &[
            vec![1, HEADS, M, D],
            vec![1, HEADS, N, D],
            vec![HEADS, M, N],
            vec![1, N, V],
        ],
        Arc::new(cpu_backend(dir.path(), true)),
        &CompileOptions::default(),
    )
    .unwrap();
    let report = compiled.report();
    assert!(report.refusals.is_empty(), "{:?}", report.refusals);
    // Both products are template kernels: the template packs its operands into
    // thread-local panels (the scheduler's fallback would be a plain reduction loop).
    let products: Vec<&(String, String)> = report
        .module
        .sources
        .iter()
        .filter(|(name, _)| name.contains("matmul"))
        .collect();
    assert_eq!(products.len(), 2, "{}", report.partition);
    for (name, source) in products {
        assert!(
            source.contains("packed_b"),
            "{name} is not the template:\n{source}"
        );
    }

    let inputs: Vec<(String, Tensor)> = [("q", &q), ("k", &k), ("p", &p), ("v", &v)]
        .into_iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    let out = compiled.run(&inputs).unwrap();
    let (q, k, p, v) = (f32s(&q), f32s(&k), f32s(&p), f32s(&v));
    let close = |got: f64, want: f64| (got - want).abs() <= 1e-4 + 1e-4 * want.abs();

    let scores = f32s(&out[0].1);
    assert_eq!(out[0].1.shape(), &[1, HEADS, M, N]);
    for h in 0..HEADS {
        for i in 0..M {
            for j in 0..N {
                let dot: f64 = (0..D)
                    .map(|r| q[(h * M + i) * D + r] * k[(h * N + j) * D + r])
                    .sum();
                let got = scores[(h * M + i) * N + j];
                assert!(
                    close(got, dot.max(0.0)),
                    "scores[{h}, {i}, {j}]: {got} vs {dot}"
                );
            }
        }
    }
    let pv = f32s(&out[1].1);
    assert_eq!(out[1].1.shape(), &[HEADS, M, V]);
    for h in 0..HEADS {
        for i in 0..M {
            for j in 0..V {
                let dot: f64 = (0..N).map(|r| p[(h * M + i) * N + r] * v[r * V + j]).sum();
                let got = pv[(h * M + i) * V + j];
                assert!(close(got, dot), "pv[{h}, {i}, {j}]: {got} vs {dot}");
            }
        }
    }
}
