//! Kernels with their sizes as run-time parameters (`graph_backend::size_generic`): a model
//! whose symbolic input grows by one at every run (a decoder's key/value cache) compiles its
//! attention kernels' C once, and every size still matches the reference executor.

use crate::common;

use std::sync::Arc;

use common::{cpu_backend as backend, node, Rng};
use hidet_cpu::graph_backend::CpuBackend;
use hidet_graph::compiled::{CompileOptions, CompiledModel, LoadedModel};
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, Dim, Graph, GraphBuilder, Registry, Tensor,
    TensorType,
};

fn random(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::new(shape.to_vec(), (0..n).map(|_| rng.nonzero_f32()).collect()).unwrap()
}

const HEADS: usize = 2;
const HEAD_DIM: usize = 20;

/// One attention step over a cache of `past` positions (symbolic): the new key and value
/// are appended to the cache (outputs `keys`, `values`), and the query attends to all of
/// them (`attended`).
fn attention_step() -> Graph {
    let mut g = GraphBuilder::new("attention_step");
    let fixed = |dims: &[usize]| TensorType {
        dtype: DType::F32,
        shape: Some(dims.iter().map(|&d| Dim::Fixed(d)).collect()),
    };
    let cache = TensorType {
        dtype: DType::F32,
        shape: Some(vec![
            Dim::Fixed(1),
            Dim::Fixed(HEADS),
            Dim::Symbol(Arc::from("past")),
            Dim::Fixed(HEAD_DIM),
        ]),
    };
    g.input("q", fixed(&[1, HEADS, 1, HEAD_DIM]));
    g.input("k", fixed(&[1, HEADS, 1, HEAD_DIM]));
    g.input("v", fixed(&[1, HEADS, 1, HEAD_DIM]));
    g.input("past_k", cache.clone());
    g.input("past_v", cache);
    g.initializer("scale", Tensor::new(vec![], vec![0.3f32]).unwrap());
    let axis = |a: i64| {
        let mut attrs = Attributes::new();
        attrs.insert("axis", Attribute::Int(a));
        attrs
    };
    g.node(node("Concat", &["past_k", "k"], "keys", axis(2)));
    g.node(node("Concat", &["past_v", "v"], "values", axis(2)));
    let mut perm = Attributes::new();
    perm.insert("perm", Attribute::Ints(vec![0, 1, 3, 2]));
    g.node(node("Transpose", &["keys"], "keys_t", perm));
    g.node(node(
        "MatMul",
        &["q", "keys_t"],
        "scores",
        Attributes::new(),
    ));
    g.node(node(
        "Mul",
        &["scores", "scale"],
        "scaled",
        Attributes::new(),
    ));
    g.node(node("Softmax", &["scaled"], "weights", axis(-1)));
    g.node(node(
        "MatMul",
        &["weights", "values"],
        "attended",
        Attributes::new(),
    ));
    g.output("attended");
    g.output("keys");
    g.output("values");
    g.build(Registry::global()).unwrap()
}

/// Runs `model` on random inputs with a cache of `past` positions and checks every output
/// against the reference executor; returns the compiled graph's kernels with size
/// parameters and its C compilations.
fn run_and_check(
    model: &CompiledModel<CpuBackend>,
    graph: &Graph,
    past: usize,
    rng: &mut Rng,
) -> (usize, usize) {
    let token = |rng: &mut Rng| random(rng, &[1, HEADS, 1, HEAD_DIM]);
    let cache = |rng: &mut Rng| random(rng, &[1, HEADS, past, HEAD_DIM]);
    let inputs = vec![
        ("q".to_string(), token(rng)),
        ("k".to_string(), token(rng)),
        ("v".to_string(), token(rng)),
        ("past_k".to_string(), cache(rng)),
        ("past_v".to_string(), cache(rng)),
    ];
    let got = model.run(&inputs).unwrap();
    let want = run_reference(graph, &inputs).unwrap();
    assert_outputs_match(&got, &want, past);
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t)| t.shape().to_vec()).collect();
    let compiled = model.compiled(&shapes).unwrap();
    let report = compiled.report();
    let lifted = (0..report.kernels)
        .filter(|&k| !compiled.module().size_values(k).is_empty())
        .count();
    (lifted, report.module.compiled)
}

fn assert_outputs_match(got: &[(String, Tensor)], want: &[(String, Tensor)], past: usize) {
    assert_eq!(got.len(), want.len());
    for ((name, g), (_, w)) in got.iter().zip(want) {
        assert_eq!(g.shape(), w.shape(), "{name} at past {past}");
        let (g, w) = (g.as_slice::<f32>().unwrap(), w.to_f64_vec());
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(
                (*a as f64 - b).abs() <= 1e-5 + 1e-5 * b.abs(),
                "{name}[{i}] at past {past}: {a} vs {b}"
            );
        }
    }
}

/// Cache lengths 9 … 13 (attended lengths 10 … 14: no power of two, under one vector):
/// the first two compile specialized kernels, the third lifts every length-dependent kernel
/// (the concatenations, the scores product, the softmax and the weighted sum, whose packed
/// operand is an array the kernel declares), and the rest compile no C at all. Lengths with
/// other loop structures (3, 14, 16, 40) still match, as does the model saved and loaded.
#[test]
fn a_growing_cache_compiles_its_kernels_once_and_matches_at_every_length() {
    let graph = attention_step();
    let dir = tempfile::tempdir().unwrap();
    let model: CompiledModel<CpuBackend> = CompiledModel::new(
        graph.clone(),
        backend(dir.path(), true),
        CompileOptions::default(),
    );
    let mut rng = Rng::new(41);
    let mut seen = Vec::new();
    for past in 9..=13 {
        seen.push((past, run_and_check(&model, &graph, past, &mut rng)));
    }
    let kernels = model
        .compiled(&[
            vec![1, HEADS, 1, HEAD_DIM],
            vec![1, HEADS, 1, HEAD_DIM],
            vec![1, HEADS, 1, HEAD_DIM],
            vec![1, HEADS, 13, HEAD_DIM],
            vec![1, HEADS, 13, HEAD_DIM],
        ])
        .unwrap()
        .report()
        .kernels;
    assert_eq!(kernels, 5, "two concatenations, two products, a softmax");
    assert!(
        seen[..2].iter().all(|&(_, (lifted, _))| lifted == 0),
        "{seen:?}"
    );
    assert_eq!(seen[2].1 .0, 5, "{seen:?}");
    for &(past, (lifted, compiled)) in &seen[3..] {
        assert_eq!((lifted, compiled), (5, 0), "past {past}: {seen:?}");
    }
    for past in [3, 14, 16, 40, 12] {
        run_and_check(&model, &graph, past, &mut rng);
    }

    let path = dir.path().join("attention.hidet");
    model.save(&path).unwrap();
    let loaded = LoadedModel::load(&path, backend(dir.path(), true)).unwrap();
    for past in [13, 40] {
        let token = |rng: &mut Rng| random(rng, &[1, HEADS, 1, HEAD_DIM]);
        let cache = |rng: &mut Rng| random(rng, &[1, HEADS, past, HEAD_DIM]);
        let inputs = vec![
            ("q".to_string(), token(&mut rng)),
            ("k".to_string(), token(&mut rng)),
            ("v".to_string(), token(&mut rng)),
            ("past_k".to_string(), cache(&mut rng)),
            ("past_v".to_string(), cache(&mut rng)),
        ];
        let got = loaded.run(&inputs).unwrap();
        assert_outputs_match(&got, &run_reference(&graph, &inputs).unwrap(), past);
    }
}
