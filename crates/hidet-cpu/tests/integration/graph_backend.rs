//! The compiled-graph path on the CPU: fusion partition, fused kernels, memory plan and the
//! executor, against the reference executor and independent float64 loops.

use crate::common;

use std::sync::Arc;

use common::{cpu_backend as backend, node, Rng};
use hidet_cpu::graph_backend::CpuBackend;
use hidet_cpu::graph_passes::default_passes;
use hidet_graph::compiled::{CompileOptions, CompiledGraph, CompiledModel, HostStep, LoadedModel};
use hidet_graph::fusion::HostReason;
use hidet_graph::passes::run_passes;
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, Dim, Graph, GraphBuilder, NodeSpec, Registry,
    Tensor, TensorType,
};

/// `graph` compiled for `shapes` with a kernel cache in `dir`, with or without the matmul
/// template.
fn compile(
    graph: &Graph,
    shapes: &[Vec<usize>],
    dir: &std::path::Path,
    template: bool,
) -> CompiledGraph<CpuBackend> {
    CompiledGraph::compile(
        graph,
        shapes,
        Arc::new(backend(dir, template)),
        &CompileOptions::default(),
    )
    .unwrap()
}

fn random(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::new(shape.to_vec(), (0..n).map(|_| rng.nonzero_f32()).collect()).unwrap()
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.as_slice::<f32>().unwrap().to_vec()
}

fn assert_close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 1e-4 + 1e-4 * w.abs(),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

/// `Relu(input)` named `output` when `relu`, else `input` itself: the name to read next.
fn relu_if<'a>(g: &mut GraphBuilder, relu: bool, input: &'a str, output: &'a str) -> &'a str {
    if !relu {
        return input;
    }
    g.node(node("Relu", &[input], output, Attributes::new()));
    output
}

/// The C sources of a compiled module, concatenated.
fn all_sources(sources: &[(String, String)]) -> String {
    sources.iter().map(|(_, s)| s.as_str()).collect()
}

const M: usize = 37;
const K: usize = 53;
const N: usize = 29;

/// y = relu(x · w + b) + r, the matmul analogue of conv-bn-relu-add.
fn dense_block(rng: &mut Rng) -> (Graph, Tensor, Tensor, Tensor, Tensor) {
    let w = random(rng, &[K, N]);
    let b = random(rng, &[N]);
    let mut g = GraphBuilder::new("dense_block");
    g.input("x", TensorType::fixed(DType::F32, &[M, K]));
    g.input("r", TensorType::fixed(DType::F32, &[M, N]));
    g.initializer("w", w.clone());
    g.initializer("b", b.clone());
    g.node(node("MatMul", &["x", "w"], "xw", Attributes::new()));
    g.node(node("Add", &["xw", "b"], "biased", Attributes::new()));
    g.node(node("Relu", &["biased"], "act", Attributes::new()));
    g.node(node("Add", &["act", "r"], "y", Attributes::new()));
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    (graph, random(rng, &[M, K]), random(rng, &[M, N]), w, b)
}

fn dense_block_f64(x: &Tensor, r: &Tensor, w: &Tensor, b: &Tensor) -> Vec<f64> {
    let (x, r, w, b) = (f32s(x), f32s(r), f32s(w), f32s(b));
    let mut out = vec![0f64; M * N];
    for i in 0..M {
        for j in 0..N {
            let dot: f64 = (0..K)
                .map(|k| x[i * K + k] as f64 * w[k * N + j] as f64)
                .sum();
            out[i * N + j] = (dot + b[j] as f64).max(0.0) + r[i * N + j] as f64;
        }
    }
    out
}

#[test]
fn matmul_bias_relu_add_is_one_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(7);
    let (graph, x, r, w, b) = dense_block(&mut rng);
    let want = dense_block_f64(&x, &r, &w, &b);
    let inputs = vec![("x".to_string(), x.clone()), ("r".to_string(), r.clone())];
    let reference = run_reference(&graph, &inputs).unwrap();
    assert_close(&f32s(&reference[0].1), &want, "reference");

    let compiled = compile(&graph, &[vec![M, K], vec![M, N]], dir.path(), false);
    let report = compiled.report();
    assert_eq!(report.kernels, 1, "{}", report.partition);
    assert_eq!(report.host_nodes(), 0, "{}", report.partition);
    assert!(
        report.partition.contains("epilogues"),
        "{}",
        report.partition
    );
    let out = compiled.run(&inputs).unwrap();
    assert_eq!(out[0].0, "y");
    let emitted = dir.path().join("emitted");
    report.write_sources(&emitted).unwrap();
    let dump = std::fs::read_to_string(emitted.join("partition.txt")).unwrap();
    assert!(dump.contains("MatMul") && dump.contains("Relu"), "{dump}");
    assert!(!report.module.sources.is_empty());
    assert_close(&f32s(&out[0].1), &want, "compiled");

    // With the matmul template: its element loads and stores let `fuse` inline the bias,
    // the ReLU and the residual add into the template kernel.
    let templated = compile(&graph, &[vec![M, K], vec![M, N]], dir.path(), true);
    let report = templated.report();
    assert_eq!(report.kernels, 1, "{}", report.partition);
    assert!(report.refusals.is_empty(), "{:?}", report.refusals);
    // `x` is a stored matrix: the template broadcasts its elements in place, packing nothing.
    let source = all_sources(&report.module.sources);
    assert!(source.contains("hidet_broadcast_f32"), "{source}");
    assert!(!source.contains("packed_a"), "{source}");
    let out = templated.run(&inputs).unwrap();
    assert_close(&f32s(&out[0].1), &want, "templated");
}

#[test]
fn concurrent_runs_share_one_compiled_graph() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(11);
    let (graph, _, _, w, b) = dense_block(&mut rng);
    let model = CompiledModel::new(graph, backend(dir.path(), true), CompileOptions::default());
    let cases: Vec<(Tensor, Tensor)> = (0..6)
        .map(|_| (random(&mut rng, &[M, K]), random(&mut rng, &[M, N])))
        .collect();
    let wants: Vec<Vec<f64>> = cases
        .iter()
        .map(|(x, r)| dense_block_f64(x, r, &w, &b))
        .collect();
    let model = &model;
    std::thread::scope(|s| {
        for t in 0..4 {
            let (cases, wants) = (&cases, &wants);
            s.spawn(move || {
                for round in 0..10 {
                    let c = (t + round) % cases.len();
                    let inputs = vec![
                        ("x".to_string(), cases[c].0.clone()),
                        ("r".to_string(), cases[c].1.clone()),
                    ];
                    let out = model.run(&inputs).unwrap();
                    assert_close(&f32s(&out[0].1), &wants[c], "concurrent");
                }
            });
        }
    });
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn compiled_graphs_are_send_and_sync() {
    assert_send_sync::<CompiledGraph<CpuBackend>>();
    assert_send_sync::<CompiledModel<CpuBackend>>();
}

#[test]
fn symbolic_batch_compiles_once_per_shape() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(5);
    let w = random(&mut rng, &[12, 7]);
    let mut g = GraphBuilder::new("sym");
    g.input(
        "x",
        TensorType {
            dtype: DType::F32,
            shape: Some(vec![
                Dim::Symbol(Arc::from("B")),
                Dim::Fixed(3),
                Dim::Fixed(4),
            ]),
        },
    );
    g.initializer("w", w.clone());
    g.initializer("shape", Tensor::new(vec![2], vec![-1i64, 12]).unwrap());
    g.node(node("Reshape", &["x", "shape"], "flat", Attributes::new()));
    g.node(node("MatMul", &["flat", "w"], "y", Attributes::new()));
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let model = CompiledModel::new(
        graph.clone(),
        backend(dir.path(), true),
        CompileOptions::default(),
    );
    for batch in [1usize, 5, 2, 5] {
        let x = random(&mut rng, &[batch, 3, 4]);
        let inputs = vec![("x".to_string(), x.clone())];
        let got = model.run(&inputs).unwrap();
        let want = run_reference(&graph, &inputs).unwrap();
        assert_eq!(got[0].1.shape(), &[batch, 7]);
        let want: Vec<f64> = want[0].1.to_f64_vec();
        assert_close(&f32s(&got[0].1), &want, "symbolic batch");
        let compiled = model.compiled(&[vec![batch, 3, 4]]).unwrap();
        assert_eq!(
            compiled.report().kernels,
            1,
            "{}",
            compiled.report().partition
        );
    }
    // The wrong rank is rejected before anything runs.
    let err = model
        .run(&[("x".to_string(), random(&mut rng, &[2, 12]))])
        .unwrap_err();
    assert!(err.to_string().contains("x"), "{err}");
}

/// A graph `x[B, 64] · w[64, 96] + b` with a symbolic batch `B`: `w` (24 KiB) is large
/// enough to be shared between the model's compiled graphs.
fn symbolic_dense(rng: &mut Rng) -> Graph {
    let mut g = GraphBuilder::new("sym_dense");
    g.input(
        "x",
        TensorType {
            dtype: DType::F32,
            shape: Some(vec![Dim::Symbol(Arc::from("B")), Dim::Fixed(64)]),
        },
    );
    g.initializer("w", random(rng, &[64, 96]));
    g.initializer("b", random(rng, &[96]));
    g.node(node("MatMul", &["x", "w"], "xw", Attributes::new()));
    g.node(node("Add", &["xw", "b"], "y", Attributes::new()));
    g.output("y");
    g.build(Registry::global()).unwrap()
}

#[test]
fn symbolic_shapes_share_their_weights_and_keep_the_recent_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(17);
    let graph = symbolic_dense(&mut rng);
    let opts = CompileOptions {
        kept_shapes: Some(2),
        ..CompileOptions::default()
    };
    let model = CompiledModel::new(graph.clone(), backend(dir.path(), true), opts);
    let mut shared = None;
    for batch in [3usize, 7, 3, 11, 5] {
        let inputs = vec![("x".to_string(), random(&mut rng, &[batch, 64]))];
        let got = model.run(&inputs).unwrap();
        let want = run_reference(&graph, &inputs).unwrap();
        assert_close(&f32s(&got[0].1), &want[0].1.to_f64_vec(), "shared weights");
        let report = model.compiled(&[vec![batch, 64]]).unwrap().report().clone();
        let (own, pooled) = (report.constant_bytes, report.shared_constant_bytes);
        // The packed weight lies in the model's pool, once for every batch, and kernels read
        // it where the pool holds it (no arena copy on the CPU).
        assert!(
            pooled >= 64 * 96 * 4 && own < 64 * 96 * 4,
            "own {own}, shared {pooled}"
        );
        assert!(report.held_constant_bytes >= pooled, "{report:?}");
        assert_eq!(*shared.get_or_insert(pooled), pooled);
    }
    // Two graphs kept: the two used last (batch 11 and 5; 3 was used before them).
    let kept: Vec<Vec<Vec<usize>>> = model
        .compiled_graphs()
        .unwrap()
        .iter()
        .map(|g| g.input_shapes())
        .collect();
    assert_eq!(kept, vec![vec![vec![5, 64]], vec![vec![11, 64]]]);

    // A saved model stores the shared weights with each graph (one blob in the file).
    let path = dir.path().join("sym_dense.hidet");
    model.save(&path).unwrap();
    let loaded = LoadedModel::load(&path, backend(dir.path(), true)).unwrap();
    // Loaded, the two graphs share the weights again, read where they were loaded.
    for g in loaded.graphs() {
        assert_eq!(Some(g.report().shared_constant_bytes), shared);
        assert!(g.report().held_constant_bytes >= 64 * 96 * 4);
    }
    for batch in [5usize, 11] {
        let inputs = vec![("x".to_string(), random(&mut rng, &[batch, 64]))];
        let got = loaded.run(&inputs).unwrap();
        let want = run_reference(&graph, &inputs).unwrap();
        assert_close(&f32s(&got[0].1), &want[0].1.to_f64_vec(), "loaded");
    }
}

/// A `Gemm` weight stored transposed (`transB`, `[N, K]`) is packed into panels straight from
/// the stored matrix, once per model: no transposed copy is made, the backend remembers no
/// more derivations after the first batch than after the last, and the model's source graph
/// holds a deferred stand-in in its place (rebuilt, transposed back, bit for bit).
#[test]
fn a_gemm_weight_stored_transposed_is_packed_once_and_held_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(23);
    let mut g = GraphBuilder::new("sym_gemm_t");
    g.input(
        "x",
        TensorType {
            dtype: DType::F32,
            shape: Some(vec![Dim::Symbol(Arc::from("B")), Dim::Fixed(64)]),
        },
    );
    let original = random(&mut rng, &[96, 64]);
    g.initializer("w", original.clone());
    g.initializer("b", random(&mut rng, &[96]));
    let mut trans_b = Attributes::new();
    trans_b.insert("transB", Attribute::Int(1));
    g.node(NodeSpec {
        name: "gemm".into(),
        domain: String::new(),
        op_type: "Gemm".into(),
        opset: 17,
        attrs: trans_b,
        inputs: vec!["x".into(), "w".into(), "b".into()],
        outputs: vec!["y".into()],
    });
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let model = CompiledModel::new(
        graph.clone(),
        backend(dir.path(), true),
        CompileOptions::default(),
    );
    let weight = |m: &CompiledModel<CpuBackend>| initializer_of_shape(m, &[96, 64]);
    let mut remembered = None;
    for batch in [3usize, 7, 11, 5] {
        let inputs = vec![("x".to_string(), random(&mut rng, &[batch, 64]))];
        let got = model.run(&inputs).unwrap();
        let want = run_reference(&graph, &inputs).unwrap();
        assert_close(&f32s(&got[0].1), &want[0].1.to_f64_vec(), "gemm transB");
        let now = model.backend().derived_constants().len();
        assert_eq!(now, 1, "batch {batch}: only the panels are derived");
        assert_eq!(*remembered.get_or_insert(now), now, "batch {batch}");
        assert!(weight(&model).is_deferred(), "batch {batch}");
    }
    // Only this test holds the original now: not the model's graph, memo or compiled graphs.
    drop(graph);
    assert_eq!(original.storage_holders(), 1);
    assert!(weight(&model).bitwise_eq(&original));
}

/// The initializer of `shape` in `model`'s source graph (as it holds it now: the original or
/// a deferred stand-in).
fn initializer_of_shape(model: &CompiledModel<CpuBackend>, shape: &[usize]) -> Tensor {
    let graph = model.graph();
    let (_, w) = graph
        .initializers()
        .find(|(_, w)| w.shape() == shape)
        .expect("the test graph has an initializer of this shape");
    w.clone()
}

/// `x[B, 64] · w[64, 40]` with a symbolic batch, plus, when `also_folded`, `ReduceSum(w)` over
/// its rows added to the product (a second reader of `w` that constant folding evaluates).
fn symbolic_product(rng: &mut Rng, also_folded: bool) -> Graph {
    let mut g = GraphBuilder::new("sym_product");
    g.input(
        "x",
        TensorType {
            dtype: DType::F32,
            shape: Some(vec![Dim::Symbol(Arc::from("B")), Dim::Fixed(64)]),
        },
    );
    g.initializer("w", random(rng, &[64, 40]));
    if also_folded {
        g.initializer("axes", Tensor::new(vec![1], vec![0i64]).unwrap());
        g.node(node("MatMul", &["x", "w"], "xw", Attributes::new()));
        g.node(node(
            "ReduceSum",
            &["w", "axes"],
            "colsum",
            Attributes::new(),
        ));
        g.node(node("Add", &["xw", "colsum"], "y", Attributes::new()));
    } else {
        g.node(node("MatMul", &["x", "w"], "y", Attributes::new()));
    }
    g.output("y");
    g.build(Registry::global()).unwrap()
}

/// A model with symbolic inputs keeps its source graph for later shapes, but not the weights
/// it packed: after the first compilation the source graph holds a deferred stand-in for
/// each weight stored as panels (rebuilt from the panels if a later compilation reads it),
/// and the original is freed.
#[test]
fn packed_weights_of_a_symbolic_model_are_held_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(29);
    let graph = symbolic_product(&mut rng, false);
    let original = graph.initializers().next().unwrap().1.clone();
    let model = CompiledModel::new(
        graph.clone(),
        backend(dir.path(), true),
        CompileOptions::default(),
    );
    let weight = |m: &CompiledModel<CpuBackend>| m.graph().initializers().next().unwrap().1.clone();
    assert!(!weight(&model).is_deferred());
    for batch in [3usize, 9, 1] {
        let inputs = vec![("x".to_string(), random(&mut rng, &[batch, 64]))];
        let got = model.run(&inputs).unwrap();
        let want = run_reference(&graph, &inputs).unwrap();
        assert_close(&f32s(&got[0].1), &want[0].1.to_f64_vec(), "deferred weight");
        assert!(
            weight(&model).is_deferred(),
            "batch {batch}: not read again"
        );
    }
    // Only this test holds the original now: not the model's graph, memo or compiled graphs.
    drop(graph);
    assert_eq!(original.storage_holders(), 1);
    // Rebuilt from the panels, bit for bit.
    assert!(weight(&model).bitwise_eq(&original));
    assert!(!weight(&model).is_deferred());
}

/// A weight both packed and read by another node (here folded with its column sums): the
/// next compilation reads the deferred stand-in, which is rebuilt from the panels, and the
/// results stay those of the reference. Once rebuilt, the stand-in stays (it is read at every
/// compilation): the weight is rebuilt once, not once per shape.
#[test]
fn a_deferred_weight_read_again_is_rebuilt_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(31);
    let graph = symbolic_product(&mut rng, true);
    let model = CompiledModel::new(
        graph.clone(),
        backend(dir.path(), true),
        CompileOptions::default(),
    );
    let weight = |m: &CompiledModel<CpuBackend>| initializer_of_shape(m, &[64, 40]);
    let mut stand_in: Option<Tensor> = None;
    for batch in [2usize, 5, 7, 3] {
        let inputs = vec![("x".to_string(), random(&mut rng, &[batch, 64]))];
        let got = model.run(&inputs).unwrap();
        let want = run_reference(&graph, &inputs).unwrap();
        assert_close(&f32s(&got[0].1), &want[0].1.to_f64_vec(), "rebuilt weight");
        if let Some(s) = &stand_in {
            assert!(s.is_rebuilt(), "batch {batch}: the stand-in was read");
            assert!(
                weight(&model).same_storage(s),
                "batch {batch}: kept once rebuilt"
            );
        }
        stand_in = Some(weight(&model));
    }
}

/// The CPU's kernels read every constant where its tensor lies: nothing is copied into a
/// constant arena, for a model compiled here and for one loaded from a saved file, and the
/// results match the reference.
#[test]
fn static_constants_are_read_where_they_lie() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(23);
    let mut g = GraphBuilder::new("held");
    g.input("x", TensorType::fixed(DType::F32, &[70, 97]));
    g.initializer("c", random(&mut rng, &[70, 97]));
    g.initializer("d", random(&mut rng, &[97]));
    g.node(node("Mul", &["x", "c"], "xc", Attributes::new()));
    g.node(node("Add", &["xc", "d"], "y", Attributes::new()));
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let inputs = vec![("x".to_string(), random(&mut rng, &[70, 97]))];
    let want = run_reference(&graph, &inputs).unwrap();
    let model = CompiledModel::new(
        graph.clone(),
        backend(dir.path(), true),
        CompileOptions::default(),
    );
    let got = model.run(&inputs).unwrap();
    assert_close(&f32s(&got[0].1), &want[0].1.to_f64_vec(), "compiled");
    let report = model.compiled(&[vec![70, 97]]).unwrap().report().clone();
    assert!(report.constant_bytes >= (70 * 97 + 97) * 4, "{report:?}");
    assert_eq!(report.held_constant_bytes, report.constant_bytes);

    let path = dir.path().join("held.hidet");
    model.save(&path).unwrap();
    let loaded = LoadedModel::load(&path, backend(dir.path(), true)).unwrap();
    for g in loaded.graphs() {
        assert_eq!(g.report().held_constant_bytes, report.constant_bytes);
    }
    let got = loaded.run(&inputs).unwrap();
    assert_close(&f32s(&got[0].1), &want[0].1.to_f64_vec(), "loaded");
}

/// A compiled model made fixed keeps its compiled graph and drops its source graph and the
/// backend's packed-weight memo: the original weight is freed once the caller's graph goes,
/// and the fixed model still runs, saves and loads.
#[test]
fn a_fixed_model_runs_without_its_source_weights() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(29);
    let (graph, x, r, w, b) = dense_block(&mut rng);
    let want = dense_block_f64(&x, &r, &w, &b);
    let inputs = vec![("x".to_string(), x), ("r".to_string(), r)];
    let model = CompiledModel::new(graph, backend(dir.path(), true), CompileOptions::default());
    model.compiled(&[vec![M, K], vec![M, N]]).unwrap();
    assert!(w.storage_holders() > 1, "the source graph holds the weight");
    let fixed = model.into_fixed().unwrap();
    assert_eq!(w.storage_holders(), 1, "only the packed copy is left");
    let got = fixed.run(&inputs).unwrap();
    assert_close(&f32s(&got[0].1), &want, "fixed");
    let path = dir.path().join("fixed.hidet");
    assert_eq!(fixed.save(&path).unwrap(), 1);
    let loaded = LoadedModel::load(&path, backend(dir.path(), true)).unwrap();
    let got = loaded.run(&inputs).unwrap();
    assert_close(&f32s(&got[0].1), &want, "saved fixed");
}

/// An interpolation feeding a product (a GridSample reads 4 pixels and its grid several times
/// per element) is stored by its own kernel rather than recomputed inside the product's
/// packing; a cheap producer (Relu) stays the product's prologue. Both match the reference.
#[test]
fn heavy_interpolations_are_not_prologues() {
    use hidet_graph::fusion::{partition_with, GroupKind, Specialization};
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(23);
    for producer in ["GridSample", "Relu"] {
        let mut g = GraphBuilder::new("interp");
        g.input("x", TensorType::fixed(DType::F32, &[1, 3, 10, 12]));
        g.input("grid", TensorType::fixed(DType::F32, &[1, 6, 5, 2]));
        g.initializer("shape", Tensor::new(vec![2], vec![18i64, 5]).unwrap());
        g.initializer("w", random(&mut rng, &[5, 7]));
        if producer == "GridSample" {
            g.node(node("GridSample", &["x", "grid"], "s", Attributes::new()));
        } else {
            g.initializer("starts", Tensor::new(vec![2], vec![0i64, 0]).unwrap());
            g.initializer("ends", Tensor::new(vec![2], vec![6i64, 5]).unwrap());
            g.initializer("axes", Tensor::new(vec![2], vec![2i64, 3]).unwrap());
            g.node(node(
                "Slice",
                &["x", "starts", "ends", "axes"],
                "c",
                Attributes::new(),
            ));
            g.node(node("Relu", &["c"], "s", Attributes::new()));
        }
        g.node(node("Reshape", &["s", "shape"], "flat", Attributes::new()));
        g.node(node("MatMul", &["flat", "w"], "y", Attributes::new()));
        g.output("y");
        let graph = g.build(Registry::global()).unwrap();
        let shapes = [vec![1, 3, 10, 12], vec![1, 6, 5, 2]];
        let given: Vec<_> = graph.inputs().iter().copied().zip(shapes.clone()).collect();
        let spec = Specialization::new(&graph, &given).unwrap();
        let part = partition_with(&graph, &spec, true);
        let product = part
            .groups
            .iter()
            .find(|g| g.kind == GroupKind::Anchored)
            .expect("the product is anchored");
        let in_product = product
            .nodes
            .iter()
            .any(|m| graph.nodes()[m.0].op_type == producer);
        assert_eq!(
            in_product,
            producer == "Relu",
            "{producer}: {:?}",
            product.nodes
        );

        let inputs = vec![
            ("x".to_string(), random(&mut rng, &[1, 3, 10, 12])),
            ("grid".to_string(), random(&mut rng, &[1, 6, 5, 2])),
        ];
        let compiled = compile(&graph, &shapes, dir.path(), true);
        let got = compiled.run(&inputs).unwrap();
        let want = run_reference(&graph, &inputs).unwrap();
        assert_close(&f32s(&got[0].1), &want[0].1.to_f64_vec(), producer);
    }
}

#[test]
fn operators_without_compute_definitions_run_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(9);
    let mut attrs = Attributes::new();
    attrs.insert("perm", Attribute::Ints(vec![1, 0]));
    let mut g = GraphBuilder::new("host");
    g.input("x", TensorType::fixed(DType::F32, &[6, 5]));
    g.node(node("Exp", &["x"], "e", Attributes::new()));
    g.node(node("Transpose", &["e"], "t", attrs));
    g.node(node("Neg", &["t"], "y", Attributes::new()));
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let x = random(&mut rng, &[6, 5]);
    let inputs = vec![("x".to_string(), x.clone())];
    let compiled = compile(&graph, &[vec![6, 5]], dir.path(), true);
    let out = compiled.run(&inputs).unwrap();
    let xs = f32s(&x);
    let want: Vec<f64> = (0..30)
        .map(|i| {
            let (r, c) = (i / 6, i % 6);
            -(xs[c * 5 + r] as f64).exp()
        })
        .collect();
    assert_close(&f32s(&out[0].1), &want, "host fallback");
    let r = compiled.report();
    // Exp and Neg are compiled; Transpose runs on the host until it has a compute definition.
    assert!(r.kernels >= 1, "{}", r.partition);
    assert!(
        r.host_steps
            .iter()
            .all(|h| h.op_type == "Transpose" && h.reason == HostReason::NoComputeDefinition),
        "{:?}",
        r.host_steps
    );
}

/// A node whose output shape depends on the data runs on the host and the report says which
/// and why; the nodes around it are kernels.
#[test]
fn host_steps_name_the_node_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = GraphBuilder::new("nonzero");
    g.input("x", TensorType::fixed(DType::F32, &[2, 3]));
    g.node(node("Relu", &["x"], "r", Attributes::new()));
    g.node(node("NonZero", &["r"], "idx", Attributes::new()));
    g.node(node("Neg", &["r"], "y", Attributes::new()));
    g.output("idx");
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let x = Tensor::new(vec![2, 3], vec![1.0f32, -2.0, 0.0, 3.0, -1.0, 4.0]).unwrap();
    let inputs = vec![("x".to_string(), x)];
    let compiled = compile(&graph, &[vec![2, 3]], dir.path(), true);
    let r = compiled.report();
    assert_eq!(
        r.host_steps,
        vec![HostStep {
            node: "NonZero_idx".into(),
            op_type: "NonZero".into(),
            reason: HostReason::DataDependentShape {
                value: "idx".into()
            },
        }],
        "{}",
        r.partition
    );
    assert_eq!(r.host_nodes(), 1);
    assert!(r.kernels >= 1, "{}", r.partition);
    let got = compiled.run(&inputs).unwrap();
    assert_eq!(got, run_reference(&graph, &inputs).unwrap());
    assert_eq!(
        got[0].1,
        Tensor::new(vec![2, 3], vec![0i64, 1, 1, 0, 0, 2]).unwrap()
    );
}

/// Two blocks with the same shapes (different weights) give two kernels but one compiled
/// library, and a second compilation of the model compiles nothing.
#[test]
fn identical_kernels_share_one_translation_unit() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(11);
    let mut g = GraphBuilder::new("two_blocks");
    g.input("x", TensorType::fixed(DType::F32, &[M, K]));
    for (i, input) in ["x", "y0"].into_iter().enumerate() {
        let (w, b) = (format!("w{i}"), format!("b{i}"));
        g.initializer(&w, random(&mut rng, &[K, K]));
        g.initializer(&b, random(&mut rng, &[K]));
        let (xw, biased, y) = (format!("xw{i}"), format!("biased{i}"), format!("y{i}"));
        g.node(node("MatMul", &[input, &w], &xw, Attributes::new()));
        g.node(node("Add", &[&xw, &b], &biased, Attributes::new()));
        g.node(node("Relu", &[&biased], &y, Attributes::new()));
    }
    g.output("y1");
    let graph = g.build(Registry::global()).unwrap();
    let inputs = vec![("x".to_string(), random(&mut rng, &[M, K]))];
    let reference = run_reference(&graph, &inputs).unwrap();
    let want: Vec<f64> = f32s(&reference[0].1).iter().map(|&v| v as f64).collect();
    for round in 0..2 {
        let compiled = compile(&graph, &[vec![M, K]], dir.path(), true);
        let report = compiled.report();
        assert_eq!(report.kernels, 2, "{}", report.partition);
        assert_eq!(report.module.compiled + report.module.cached, 1);
        assert_eq!(report.module.compiled, usize::from(round == 0));
        let out = compiled.run(&inputs).unwrap();
        assert_close(&f32s(&out[0].1), &want, "compiled");
    }
}

/// One-element constants (a scale, an exponent) become literals of the kernel: no buffer
/// argument, and `pow(x, 3)` turns into multiplications the C compiler can vectorize.
#[test]
fn scalar_constants_are_inlined_as_literals() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(12);
    let mut g = GraphBuilder::new("scaled_cube");
    g.input("x", TensorType::fixed(DType::F32, &[M, K]));
    g.initializer("s", Tensor::scalar(1.25f32));
    g.initializer("p", Tensor::scalar(3.0f32));
    g.node(node("Mul", &["x", "s"], "xs", Attributes::new()));
    g.node(node("Pow", &["xs", "p"], "y", Attributes::new()));
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let x = random(&mut rng, &[M, K]);
    let want: Vec<f64> = f32s(&x)
        .iter()
        .map(|&v| (v as f64 * 1.25).powi(3))
        .collect();
    let compiled = compile(&graph, &[vec![M, K]], dir.path(), true);
    let report = compiled.report();
    assert_eq!(report.kernels, 1, "{}", report.partition);
    let (_, source) = report
        .module
        .sources
        .first()
        .expect("the kernel source is kept");
    assert!(!source.contains("powf"), "{source}");
    assert!(source.contains("1.25e0f"), "{source}");
    assert!(
        source.contains("(float* __restrict__ in0, float* __restrict__ out)"),
        "only x and y are buffers: {source}"
    );
    let out = compiled.run(&[("x".to_string(), x)]).unwrap();
    assert_close(&f32s(&out[0].1), &want, "compiled");
}

/// `gelu(x · w1 + b) · w2`: the GELU reads its input twice (a diamond), so it cannot be a
/// chain of single-use epilogues; it is absorbed whole as the first product's epilogue
/// (computed once per element) rather than as the second product's prologue (recomputed
/// wherever that product packs its left operand).
#[test]
fn an_elementwise_diamond_is_the_epilogue_of_the_product_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(13);
    let w1 = random(&mut rng, &[K, N]);
    let b = random(&mut rng, &[N]);
    let w2 = random(&mut rng, &[N, K]);
    let mut g = GraphBuilder::new("mlp");
    g.input("x", TensorType::fixed(DType::F32, &[M, K]));
    g.initializer("w1", w1.clone());
    g.initializer("b", b.clone());
    g.initializer("w2", w2.clone());
    g.initializer("sqrt2", Tensor::scalar(std::f32::consts::SQRT_2));
    g.initializer("one", Tensor::scalar(1.0f32));
    g.initializer("half", Tensor::scalar(0.5f32));
    g.node(node("MatMul", &["x", "w1"], "h", Attributes::new()));
    g.node(node("Add", &["h", "b"], "hb", Attributes::new()));
    g.node(node("Div", &["hb", "sqrt2"], "d", Attributes::new()));
    g.node(node("Erf", &["d"], "e", Attributes::new()));
    g.node(node("Add", &["e", "one"], "e1", Attributes::new()));
    g.node(node("Mul", &["hb", "e1"], "m", Attributes::new()));
    g.node(node("Mul", &["m", "half"], "act", Attributes::new()));
    g.node(node("MatMul", &["act", "w2"], "y", Attributes::new()));
    g.output("y");
    let graph = g.build(Registry::global()).unwrap();
    let x = random(&mut rng, &[M, K]);
    let (xs, w1s, bs, w2s) = (f32s(&x), f32s(&w1), f32s(&b), f32s(&w2));
    let erf = |v: f64| {
        // Abramowitz–Stegun 7.1.26 is too coarse; integrate exp(-t²) by Simpson's rule.
        let steps = 2000;
        let h = v / steps as f64;
        let f = |t: f64| (-t * t).exp();
        let mut sum = f(0.0) + f(v);
        for i in 1..steps {
            sum += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        sum * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
    };
    let mut act = vec![0f64; M * N];
    for i in 0..M {
        for j in 0..N {
            let h: f64 = (0..K)
                .map(|k| xs[i * K + k] as f64 * w1s[k * N + j] as f64)
                .sum::<f64>()
                + bs[j] as f64;
            act[i * N + j] = 0.5 * h * (1.0 + erf(h / std::f64::consts::SQRT_2));
        }
    }
    let want: Vec<f64> = (0..M * K)
        .map(|at| {
            let (i, k) = (at / K, at % K);
            (0..N).map(|j| act[i * N + j] * w2s[j * K + k] as f64).sum()
        })
        .collect();
    let compiled = compile(&graph, &[vec![M, K]], dir.path(), true);
    let report = compiled.report();
    assert_eq!(report.kernels, 2, "{}", report.partition);
    let first = report
        .partition
        .split("kernel 1 ")
        .next()
        .expect("split yields at least one piece");
    assert!(
        ["Add", "Div", "Erf", "Mul"]
            .iter()
            .all(|op| first.contains(&format!("{op} `{op}_"))),
        "the GELU is the first product's epilogue:\n{}",
        report.partition
    );
    assert!(
        !report.partition.contains("prologues: Mul"),
        "{}",
        report.partition
    );
    let out = compiled.run(&[("x".to_string(), x)]).unwrap();
    assert_close(&f32s(&out[0].1), &want, "compiled");
}

/// A reduction whose epilogue chain the rule-based scheduler refuses in full (it cannot
/// store through the final reshape's index map) keeps the longest prefix it takes: the
/// ReLU stays in the pooling kernel and the reshape becomes an alias, not a copy kernel.
/// With the reshape as its only epilogue, the prefix is empty and the reshape still an alias.
#[test]
fn a_refused_epilogue_chain_keeps_its_longest_accepted_prefix() {
    for with_relu in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(14);
        let mut g = GraphBuilder::new("pool_relu_flatten");
        g.input("x", TensorType::fixed(DType::F32, &[1, 4, 11, 13]));
        g.initializer("shape", Tensor::new(vec![2], vec![4i64, 30]).unwrap());
        let mut pool = Attributes::new();
        pool.insert("kernel_shape", Attribute::Ints(vec![3, 3]));
        pool.insert("strides", Attribute::Ints(vec![2, 2]));
        g.node(node("MaxPool", &["x"], "p", pool));
        let pooled = relu_if(&mut g, with_relu, "p", "r");
        g.node(node("Reshape", &[pooled, "shape"], "y", Attributes::new()));
        g.output("y");
        let graph = g.build(Registry::global()).unwrap();
        let x = random(&mut rng, &[1, 4, 11, 13]);
        let inputs = vec![("x".to_string(), x.clone())];
        let reference = run_reference(&graph, &inputs).unwrap();
        let compiled = compile(&graph, &[vec![1, 4, 11, 13]], dir.path(), true);
        let report = compiled.report();
        let dump = &report.partition;
        assert_eq!(report.kernels, 1, "{dump}");
        assert_eq!(dump.contains("epilogues: Relu"), with_relu, "{dump}");
        assert!(dump.contains("alias Reshape"), "{dump}");
        let out = compiled.run(&inputs).unwrap();
        let want: Vec<f64> = f32s(&reference[0].1).iter().map(|&v| v as f64).collect();
        assert!(
            want.iter().any(|&v| v > 0.0),
            "the check sees non-zero data"
        );
        assert_close(&f32s(&out[0].1), &want, "compiled");
    }
}

/// Products concatenated along their outermost axis are computed straight into their
/// slices of the concatenation (no copy kernel); along an inner axis, whose slices are not
/// contiguous, the concatenation stays a kernel. Both compute what the reference computes.
/// (A concatenation fused with injective consumers other than reshapes is one kernel, and not
/// run in place.)
#[test]
fn a_concatenation_of_products_runs_in_place_when_its_slices_are_contiguous() {
    for (axis, in_place) in [(0i64, true), (1, false)] {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(21);
        let (ra, rb) = if axis == 0 { (5, 3) } else { (5, 5) };
        let (ca, cb) = if axis == 0 { (9, 9) } else { (9, 4) };
        let mut g = GraphBuilder::new("concat_products");
        g.input("x", TensorType::fixed(DType::F32, &[ra, 7]));
        g.input("y", TensorType::fixed(DType::F32, &[rb, 7]));
        g.initializer("wa", random(&mut rng, &[7, ca]));
        g.initializer("wb", random(&mut rng, &[7, cb]));
        g.node(node("MatMul", &["x", "wa"], "a", Attributes::new()));
        g.node(node("MatMul", &["y", "wb"], "b", Attributes::new()));
        let mut cat = Attributes::new();
        cat.insert("axis", Attribute::Int(axis));
        g.node(node("Concat", &["a", "b"], "c", cat));
        g.output("c");
        let graph = g.build(Registry::global()).unwrap();
        let inputs = vec![
            ("x".to_string(), random(&mut rng, &[ra, 7])),
            ("y".to_string(), random(&mut rng, &[rb, 7])),
        ];
        let reference = run_reference(&graph, &inputs).unwrap();
        let compiled = compile(&graph, &[vec![ra, 7], vec![rb, 7]], dir.path(), true);
        let report = compiled.report();
        assert_eq!(
            report.partition.contains("in place: Concat"),
            in_place,
            "{}",
            report.partition
        );
        let out = compiled.run(&inputs).unwrap();
        let want: Vec<f64> = f32s(&reference[0].1).iter().map(|&v| v as f64).collect();
        assert!(
            want.iter().any(|&v| v != 0.0),
            "the check sees non-zero data"
        );
        assert_close(&f32s(&out[0].1), &want, "compiled");
    }
}

/// A concatenation whose only consumer is a reshape (fused into one group with it, as
/// Inception-V3's block outputs that every next convolution reads flattened) still runs in
/// place: the reshape keeps the bytes, and its output is the buffer the products are
/// computed into.
#[test]
fn a_concatenation_followed_by_reshapes_runs_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(22);
    let mut g = GraphBuilder::new("concat_reshape");
    g.input("x", TensorType::fixed(DType::F32, &[5, 7]));
    g.input("y", TensorType::fixed(DType::F32, &[3, 7]));
    g.initializer("wa", random(&mut rng, &[7, 9]));
    g.initializer("wb", random(&mut rng, &[7, 9]));
    g.initializer("flat", Tensor::new(vec![1], vec![72i64]).unwrap());
    g.initializer("wide", Tensor::new(vec![2], vec![4i64, 18]).unwrap());
    g.node(node("MatMul", &["x", "wa"], "a", Attributes::new()));
    g.node(node("MatMul", &["y", "wb"], "b", Attributes::new()));
    let mut cat = Attributes::new();
    cat.insert("axis", Attribute::Int(0));
    g.node(node("Concat", &["a", "b"], "c", cat));
    g.node(node("Reshape", &["c", "flat"], "r", Attributes::new()));
    g.node(node("Reshape", &["r", "wide"], "out", Attributes::new()));
    g.output("out");
    let graph = g.build(Registry::global()).unwrap();
    let inputs = vec![
        ("x".to_string(), random(&mut rng, &[5, 7])),
        ("y".to_string(), random(&mut rng, &[3, 7])),
    ];
    let reference = run_reference(&graph, &inputs).unwrap();
    let compiled = compile(&graph, &[vec![5, 7], vec![3, 7]], dir.path(), true);
    let report = compiled.report();
    let dump = &report.partition;
    assert!(
        dump.contains("Concat `Concat_c`, Reshape `Reshape_r`, Reshape `Reshape_out`"),
        "one group:\n{dump}"
    );
    assert!(dump.contains("in place: Concat"), "{dump}");
    assert_eq!(report.kernels, 2, "{dump}");
    let out = compiled.run(&inputs).unwrap();
    assert_eq!(out[0].1.shape(), &[4, 18]);
    let want: Vec<f64> = f32s(&reference[0].1).iter().map(|&v| v as f64).collect();
    assert!(
        want.iter().any(|&v| v != 0.0),
        "the check sees non-zero data"
    );
    assert_close(&f32s(&out[0].1), &want, "compiled");
}

/// Products stacked along a new outermost axis (`Unsqueeze` of each, then `Concat`: how
/// `torch.stack` exports, and how a recurrent layer's steps form its output) are computed
/// straight into their slices of the stack: the unsqueezes keep the bytes.
#[test]
fn a_stack_of_unsqueezed_products_runs_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(24);
    let mut g = GraphBuilder::new("stack");
    g.input("x", TensorType::fixed(DType::F32, &[5, 7]));
    g.input("y", TensorType::fixed(DType::F32, &[5, 7]));
    g.initializer("wa", random(&mut rng, &[7, 9]));
    g.initializer("wb", random(&mut rng, &[7, 9]));
    g.initializer("axes", Tensor::new(vec![1], vec![0i64]).unwrap());
    g.node(node("MatMul", &["x", "wa"], "a", Attributes::new()));
    g.node(node("MatMul", &["y", "wb"], "b", Attributes::new()));
    g.node(node("Unsqueeze", &["a", "axes"], "a1", Attributes::new()));
    g.node(node("Unsqueeze", &["b", "axes"], "b1", Attributes::new()));
    let mut cat = Attributes::new();
    cat.insert("axis", Attribute::Int(0));
    g.node(node("Concat", &["a1", "b1"], "c", cat));
    g.output("c");
    let graph = g.build(Registry::global()).unwrap();
    let inputs = vec![
        ("x".to_string(), random(&mut rng, &[5, 7])),
        ("y".to_string(), random(&mut rng, &[5, 7])),
    ];
    let reference = run_reference(&graph, &inputs).unwrap();
    let compiled = compile(&graph, &[vec![5, 7], vec![5, 7]], dir.path(), true);
    let report = compiled.report();
    let dump = &report.partition;
    assert!(dump.contains("in place: "), "{dump}");
    assert_eq!(report.kernels, 2, "{dump}");
    let out = compiled.run(&inputs).unwrap();
    assert_eq!(out[0].1.shape(), &[2, 5, 9]);
    let want: Vec<f64> = f32s(&reference[0].1).iter().map(|&v| v as f64).collect();
    assert!(
        want.iter().any(|&v| v != 0.0),
        "the check sees non-zero data"
    );
    assert_close(&f32s(&out[0].1), &want, "compiled");
}

/// A slice that is one contiguous range of its input (rows of a row-major matrix, from any
/// start) is a view of the input's buffer, no copy kernel; a slice of columns is not
/// contiguous and stays a kernel. The slice feeds two products, so that it is stored rather
/// than inlined into one of them; both compute what the reference computes.
#[test]
fn a_contiguous_slice_is_a_view_of_its_input() {
    for (axis, start, end, view) in [(0i64, 2i64, 5i64, true), (0, -4, 6, true), (1, 1, 4, false)] {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(25);
        let mut g = GraphBuilder::new("slice_view");
        g.input("x", TensorType::fixed(DType::F32, &[6, 7]));
        g.initializer("w", random(&mut rng, &[7, 8]));
        g.initializer("starts", Tensor::new(vec![1], vec![start]).unwrap());
        g.initializer("ends", Tensor::new(vec![1], vec![end]).unwrap());
        g.initializer("axes", Tensor::new(vec![1], vec![axis]).unwrap());
        let cols = if axis == 0 { 8 } else { 3 };
        g.initializer("wa", random(&mut rng, &[cols, 5]));
        g.initializer("wb", random(&mut rng, &[cols, 4]));
        g.node(node("MatMul", &["x", "w"], "p", Attributes::new()));
        g.node(node(
            "Slice",
            &["p", "starts", "ends", "axes"],
            "s",
            Attributes::new(),
        ));
        g.node(node("MatMul", &["s", "wa"], "ya", Attributes::new()));
        g.node(node("MatMul", &["s", "wb"], "yb", Attributes::new()));
        g.output("ya");
        g.output("yb");
        let graph = g.build(Registry::global()).unwrap();
        let inputs = vec![("x".to_string(), random(&mut rng, &[6, 7]))];
        let reference = run_reference(&graph, &inputs).unwrap();
        let compiled = compile(&graph, &[vec![6, 7]], dir.path(), true);
        let report = compiled.report();
        let dump = &report.partition;
        assert_eq!(dump.contains("in place: Slice"), view, "{dump}");
        assert_eq!(report.kernels, if view { 3 } else { 4 }, "{dump}");
        let out = compiled.run(&inputs).unwrap();
        for (got, want) in out.iter().zip(&reference) {
            let want: Vec<f64> = f32s(&want.1).iter().map(|&v| v as f64).collect();
            assert!(
                want.iter().any(|&v| v != 0.0),
                "the check sees non-zero data"
            );
            assert_close(&f32s(&got.1), &want, "compiled");
        }
    }
}

/// A matrix product reading a concatenation through an element-wise operator (DenseNet's
/// bottleneck after its dense block) inlines a concatenation of two inputs into its
/// operand's loads, but one of three or more is stored first (by the products that produce
/// its parts, in place), so that each element is read with one load rather than a select
/// among every input.
#[test]
fn wide_concatenations_are_stored_before_a_product_reads_them() {
    for parts in [2usize, 3, 4] {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(23 + parts as u64);
        let rows = [5usize, 3, 6, 2];
        let k: usize = rows[..parts].iter().sum();
        let mut g = GraphBuilder::new("dense");
        let mut names = Vec::new();
        let mut inputs = Vec::new();
        let mut shapes = Vec::new();
        for (i, &r) in rows[..parts].iter().enumerate() {
            let (x, w, p) = (format!("x{i}"), format!("w{i}"), format!("p{i}"));
            g.input(&x, TensorType::fixed(DType::F32, &[r, 9]));
            g.initializer(&w, random(&mut rng, &[9, 11]));
            g.node(node("MatMul", &[&x, &w], &p, Attributes::new()));
            inputs.push((x, random(&mut rng, &[r, 9])));
            shapes.push(vec![r, 9]);
            names.push(p);
        }
        g.initializer("w", random(&mut rng, &[7, k]));
        let mut cat = Attributes::new();
        cat.insert("axis", Attribute::Int(0));
        let parts_in: Vec<&str> = names.iter().map(String::as_str).collect();
        g.node(node("Concat", &parts_in, "c", cat));
        g.node(node("Relu", &["c"], "r", Attributes::new()));
        g.node(node("MatMul", &["w", "r"], "y", Attributes::new()));
        g.output("y");
        let graph = g.build(Registry::global()).unwrap();
        let reference = run_reference(&graph, &inputs).unwrap();
        let compiled = compile(&graph, &shapes, dir.path(), true);
        let report = compiled.report();
        let dump = &report.partition;
        let prologues = dump.lines().rfind(|l| l.contains("prologues:")).unwrap();
        assert_eq!(
            prologues.contains("Concat"),
            parts < 3,
            "{parts} parts:\n{dump}"
        );
        assert!(prologues.contains("Relu"), "{parts} parts:\n{dump}");
        assert_eq!(dump.contains("in place: Concat"), parts >= 3, "{dump}");
        let out = compiled.run(&inputs).unwrap();
        let want: Vec<f64> = f32s(&reference[0].1).iter().map(|&v| v as f64).collect();
        assert!(
            want.iter().any(|&v| v != 0.0),
            "the check sees non-zero data"
        );
        assert_close(&f32s(&out[0].1), &want, "compiled");
    }
}

/// Kernels read a graph input where the caller keeps it, also through an alias (`Flatten`),
/// and every run sees its own input; an input that is also aliased by a graph output is
/// still copied into the arena, so that output reads it.
#[test]
fn graph_inputs_are_read_in_place_unless_an_output_aliases_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(23);
    let mut flatten = Attributes::new();
    flatten.insert("axis", Attribute::Int(0));
    let build = |alias_output: bool| {
        let mut g = GraphBuilder::new("bound_inputs");
        g.input("x", TensorType::fixed(DType::F32, &[6, 11]));
        g.node(node("Exp", &["x"], "e", Attributes::new()));
        g.node(node("Flatten", &["x"], "flat", flatten.clone()));
        g.node(node("Neg", &["flat"], "n", Attributes::new()));
        g.output("e");
        g.output("n");
        if alias_output {
            g.output("flat");
        }
        g.build(Registry::global()).unwrap()
    };
    for alias_output in [false, true] {
        let compiled = compile(&build(alias_output), &[vec![6, 11]], dir.path(), true);
        assert_eq!(
            compiled.report().inputs_in_place,
            usize::from(!alias_output),
            "{}",
            compiled.report().partition
        );
        for round in 0..3 {
            let x = random(&mut rng, &[6, 11]);
            let before = f32s(&x);
            let out = compiled.run(&[("x".to_string(), x.clone())]).unwrap();
            let what = format!("alias output {alias_output}, round {round}");
            let exp: Vec<f64> = before.iter().map(|v| (*v as f64).exp()).collect();
            let neg: Vec<f64> = before.iter().map(|v| -(*v as f64)).collect();
            assert_close(&f32s(&out[0].1), &exp, &what);
            assert_close(&f32s(&out[1].1), &neg, &what);
            assert_eq!(out[1].1.shape(), &[1, 66]);
            if alias_output {
                let flat: Vec<f64> = before.iter().map(|v| *v as f64).collect();
                assert_close(&f32s(&out[2].1), &flat, &what);
            }
            assert_eq!(f32s(&x), before, "{what}: the input is not written");
        }
    }
}

type Outputs = Vec<(String, Tensor)>;

/// Kernels write a graph output straight into the tensor the run returns, also when a later
/// kernel reads it; outputs sharing one buffer (an output and its `Flatten`) are copied out
/// of the arena instead. Tensors handed out by a run are never written by a later run.
#[test]
fn graph_outputs_are_written_in_place_unless_they_share_a_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(29);
    let mut flatten = Attributes::new();
    flatten.insert("axis", Attribute::Int(0));
    let build = |shared: bool| {
        let mut g = GraphBuilder::new("bound_outputs");
        g.input("x", TensorType::fixed(DType::F32, &[6, 11]));
        g.node(node("Exp", &["x"], "e", Attributes::new()));
        g.node(node("ReduceSum", &["e"], "s", Attributes::new()));
        g.node(node("Neg", &["x"], "n", Attributes::new()));
        g.node(node("Flatten", &["n"], "flat", flatten.clone()));
        g.output("e");
        g.output("s");
        g.output("flat");
        if shared {
            g.output("n");
        }
        g.build(Registry::global()).unwrap()
    };
    for shared in [false, true] {
        let compiled = compile(&build(shared), &[vec![6, 11]], dir.path(), true);
        assert_eq!(
            compiled.report().outputs_in_place,
            if shared { 2 } else { 3 },
            "{}",
            compiled.report().partition
        );
        // The first run's outputs and a copy of their values.
        let mut first: Option<(Outputs, Vec<Vec<f32>>)> = None;
        for round in 0..3 {
            let x = random(&mut rng, &[6, 11]);
            let xs = f32s(&x);
            let out = compiled.run(&[("x".to_string(), x)]).unwrap();
            let what = format!("shared {shared}, round {round}");
            let exp: Vec<f64> = xs.iter().map(|v| (*v as f64).exp()).collect();
            let neg: Vec<f64> = xs.iter().map(|v| -(*v as f64)).collect();
            assert_close(&f32s(&out[0].1), &exp, &what);
            assert_close(&f32s(&out[1].1), &[exp.iter().sum()], &what);
            assert_close(&f32s(&out[2].1), &neg, &what);
            assert_eq!(out[2].1.shape(), &[1, 66]);
            if shared {
                assert_close(&f32s(&out[3].1), &neg, &what);
                assert_eq!(out[3].1.shape(), &[6, 11]);
            }
            match &first {
                None => {
                    let values = out.iter().map(|(_, t)| f32s(t)).collect();
                    first = Some((out, values));
                }
                Some((kept, values)) => {
                    let now: Vec<Vec<f32>> = kept.iter().map(|(_, t)| f32s(t)).collect();
                    assert_eq!(
                        &now, values,
                        "{what}: the first run's outputs are unchanged"
                    );
                }
            }
        }
    }
}

/// The matmul template reads a stored left operand where it is: a graph input, also through a
/// reshape (a rank-3 input of a rank-2 product, as in a transformer's projections), packing
/// nothing; a computed one (a ReLU prologue) is packed, so the ReLU runs once per element.
#[test]
fn stored_left_operands_are_read_in_place_and_computed_ones_packed() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(29);
    let w = random(&mut rng, &[K, N]);
    let x = random(&mut rng, &[1, M, K]);
    for relu in [false, true] {
        let mut g = GraphBuilder::new("projection");
        g.input("x", TensorType::fixed(DType::F32, &[1, M, K]));
        g.initializer("w", w.clone());
        let a = relu_if(&mut g, relu, "x", "a");
        g.node(node("MatMul", &[a, "w"], "y", Attributes::new()));
        g.output("y");
        let graph = g.build(Registry::global()).unwrap();
        let graph = run_passes(graph, &default_passes()).unwrap();
        let compiled = compile(&graph, &[vec![1, M, K]], dir.path(), true);
        let report = compiled.report();
        assert_eq!(report.kernels, 1, "{}", report.partition);
        let source = all_sources(&report.module.sources);
        assert!(report.refusals.is_empty(), "{:?}", report.refusals);
        assert!(
            source.contains("hidet_broadcast_f32"),
            "relu {relu}: {source}"
        );
        assert_eq!(source.contains("packed_a"), relu, "relu {relu}: {source}");
        let out = compiled.run(&[("x".to_string(), x.clone())]).unwrap();
        let (xs, ws) = (f32s(&x), f32s(&w));
        let mut want = vec![0f64; M * N];
        for i in 0..M {
            for j in 0..N {
                want[i * N + j] = (0..K)
                    .map(|k| {
                        let a = xs[i * K + k] as f64;
                        let a = if relu { a.max(0.0) } else { a };
                        a * ws[k * N + j] as f64
                    })
                    .sum();
            }
        }
        assert_eq!(out[0].1.shape(), &[1, M, N]);
        assert_close(&f32s(&out[0].1), &want, &format!("relu {relu}"));
    }
}

/// The compiled path checks its inputs as the reference executor does (one check): the
/// dtype of every tensor inside a sequence too, and missing or unknown names.
#[test]
fn compiled_inputs_are_checked_like_the_reference_executor() {
    let mut g = GraphBuilder::new("seq_len");
    g.input_of_kind(
        "s",
        TensorType::fixed(DType::F32, &[2]),
        hidet_graph::ValueKind::Sequence,
    );
    g.node(node("SequenceLength", &["s"], "n", Attributes::new()));
    g.output("n");
    let graph = g.build(Registry::global()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let compiled = compile(&graph, &[vec![]], dir.path(), true);
    let f32s = Tensor::new(vec![2], vec![1.5f32, -2.0]).unwrap();
    let i64s = Tensor::new(vec![2], vec![1i64, 2]).unwrap();
    let run = |d: hidet_graph::Datum| {
        let inputs = [("s".to_string(), d)];
        let reference = hidet_graph::run_reference_data(&graph, &inputs).map_err(|e| e.to_string());
        let compiled = compiled.run_data(&inputs).map_err(|e| e.to_string());
        (reference, compiled)
    };
    let (reference, got) = run(hidet_graph::Datum::Sequence(vec![f32s.clone(), f32s]));
    assert_eq!(reference.unwrap()[0].1, got.unwrap()[0].1);
    let (reference, got) = run(hidet_graph::Datum::Sequence(vec![i64s]));
    let (reference, got) = (reference.unwrap_err(), got.unwrap_err());
    assert!(
        reference.contains("expected dtype f32, given i64"),
        "{reference}"
    );
    assert!(got.contains("expected dtype f32, given i64"), "{got}");
    let error = compiled.run_data(&[]).unwrap_err().to_string();
    assert!(error.contains("missing input `s`"), "{error}");
}

/// A transformer-style block (`x @ w1 + b`, ReLU, `@ w2`, residual) with `x: [batch, seq,
/// 37]` compiles, at every shape, into exactly the kernels of the same block exported with
/// those sizes fixed (the shapes are bound before the graph passes run), and both match the
/// reference executor. The sizes (3 × 29 rows, 37 and 53 columns) are multiples of no tile.
#[test]
fn symbolic_dimensions_compile_like_the_static_export() {
    let mut rng = Rng::new(12);
    let (k, hidden) = (37usize, 53usize);
    let w1 = random(&mut rng, &[k, hidden]);
    let b1 = random(&mut rng, &[hidden]);
    let w2 = random(&mut rng, &[hidden, k]);
    let block = |dims: Vec<Dim>| {
        let mut g = GraphBuilder::new("block");
        g.input(
            "x",
            TensorType {
                dtype: DType::F32,
                shape: Some(dims),
            },
        );
        g.initializer("w1", w1.clone());
        g.initializer("b1", b1.clone());
        g.initializer("w2", w2.clone());
        g.node(node("MatMul", &["x", "w1"], "h", Attributes::new()));
        g.node(node("Add", &["h", "b1"], "hb", Attributes::new()));
        g.node(node("Relu", &["hb"], "r", Attributes::new()));
        g.node(node("MatMul", &["r", "w2"], "o", Attributes::new()));
        g.node(node("Add", &["o", "x"], "y", Attributes::new()));
        g.output("y");
        g.build(Registry::global()).unwrap()
    };
    let symbolic = block(vec![
        Dim::Symbol(Arc::from("batch")),
        Dim::Symbol(Arc::from("seq")),
        Dim::Fixed(k),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let dynamic = CompiledModel::new(
        symbolic.clone(),
        backend(dir.path(), true),
        CompileOptions::default(),
    );
    for (batch, seq) in [(3usize, 29usize), (1, 1)] {
        let shape = [batch, seq, k];
        let fixed = block(shape.iter().map(|&d| Dim::Fixed(d)).collect());
        let static_model =
            CompiledModel::new(fixed, backend(dir.path(), true), CompileOptions::default());
        let sources = |m: &CompiledModel<CpuBackend>| {
            let compiled = m.compiled(&[shape.to_vec()]).unwrap();
            let report = compiled.report();
            assert_eq!(report.host_nodes(), 0, "{}", report.partition);
            let mut sources: Vec<String> = report
                .module
                .sources
                .iter()
                .map(|(_, s)| s.clone())
                .collect();
            sources.sort();
            assert!(
                !sources.is_empty() && report.kernels >= 2,
                "{}",
                report.partition
            );
            (report.kernels, sources)
        };
        assert_eq!(sources(&dynamic), sources(&static_model), "{shape:?}");
        let x = random(&mut rng, &shape);
        let inputs = vec![("x".to_string(), x)];
        let want = run_reference(&symbolic, &inputs).unwrap()[0].1.to_f64_vec();
        let got = dynamic.run(&inputs).unwrap();
        assert_close(&f32s(&got[0].1), &want, "symbolic block");
    }
}

/// Constant operands stored as panels by the CPU passes reach the matmul template as typed
/// layouts on the fused task (`AnchorInfo::layouts`): a constant right operand as panels of
/// 16 columns, a constant left operand as panels of rows (its transpose), both read in place
/// (`ALayout::Panels`, no packing), and the compiled graph matches the reference.
#[test]
fn panel_layouts_are_typed_data_on_the_fused_task() {
    use hidet_cpu::graph_backend::anchor::a_layout;
    use hidet_cpu::templates::matmul::ALayout;
    use hidet_graph::fusion::{
        partition_with, FusedTask, GroupKind, OperandLayout, Specialization,
    };

    let mut rng = Rng::new(41);
    let mut g = GraphBuilder::new("panels");
    g.input("x", TensorType::fixed(DType::F32, &[7, 24]));
    g.input("z", TensorType::fixed(DType::F32, &[29, 11]));
    g.initializer("w", random(&mut rng, &[24, 37]));
    g.initializer("v", random(&mut rng, &[37, 29]));
    g.node(node("MatMul", &["x", "w"], "right", Attributes::new()));
    g.node(node("Relu", &["right"], "y", Attributes::new()));
    g.node(node("MatMul", &["v", "z"], "left", Attributes::new()));
    g.node(node("Relu", &["left"], "u", Attributes::new()));
    g.output("y");
    g.output("u");
    let imported = g.build(Registry::global()).unwrap();
    let graph = run_passes(imported.clone(), &default_passes()).unwrap();
    let given: Vec<_> = graph
        .inputs()
        .iter()
        .copied()
        .zip([vec![7, 24], vec![29, 11]])
        .collect();
    let spec = Specialization::new(&graph, &given).unwrap();
    let part = partition_with(&graph, &spec, true);
    let tasks: Vec<FusedTask> = part
        .groups
        .iter()
        .filter(|g| g.kind == GroupKind::Anchored)
        .enumerate()
        .map(|(i, g)| FusedTask::new(&graph, &spec, g, i).unwrap())
        .collect();
    assert_eq!(tasks.len(), 2);
    let layouts: Vec<_> = tasks
        .iter()
        .map(|t| t.anchor.as_ref().unwrap().layouts.clone())
        .collect();
    let right = layouts
        .iter()
        .find(|l| matches!(l[1], Some(OperandLayout::Panels { .. })))
        .expect("the right operand is stored as panels");
    assert!(matches!(
        right[1],
        Some(OperandLayout::Panels {
            width: 16,
            transposed: false,
            ..
        })
    ));
    let left = tasks
        .iter()
        .find(|t| {
            matches!(
                t.anchor.as_ref().unwrap().layouts[0],
                Some(OperandLayout::Panels {
                    transposed: true,
                    ..
                })
            )
        })
        .expect("the left operand is stored as panels of rows");
    assert!(matches!(a_layout(left), Some(ALayout::Panels { .. })));

    let dir = tempfile::tempdir().unwrap();
    let shapes = [vec![7, 24], vec![29, 11]];
    let compiled = compile(&graph, &shapes, dir.path(), true);
    let inputs = vec![
        ("x".to_string(), random(&mut rng, &[7, 24])),
        ("z".to_string(), random(&mut rng, &[29, 11])),
    ];
    let got = compiled.run(&inputs).unwrap();
    let want = run_reference(&imported, &inputs).unwrap();
    for ((name, g), (_, w)) in got.iter().zip(&want) {
        let w64: Vec<f64> = f32s(w).iter().map(|&v| f64::from(v)).collect();
        assert_close(&f32s(g), &w64, name);
    }
}

/// A backend lowers and emits each distinct task once: two equal branches of one graph share
/// a remembered kernel, and compiling for a new batch lowers only the tasks whose shapes
/// depend on it (the branch over the fixed-shape input is remembered). Every run matches
/// the reference.
#[test]
fn equal_tasks_are_lowered_once_per_backend() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(29);
    let mut g = GraphBuilder::new("memo");
    g.input(
        "x",
        TensorType {
            dtype: DType::F32,
            shape: Some(vec![Dim::Symbol(Arc::from("B")), Dim::Fixed(24)]),
        },
    );
    g.input("p", TensorType::fixed(DType::F32, &[5, 13]));
    g.input("q", TensorType::fixed(DType::F32, &[5, 13]));
    g.initializer("w", random(&mut rng, &[24, 9]));
    g.node(node("MatMul", &["x", "w"], "xw", Attributes::new()));
    g.node(node("Tanh", &["xw"], "y", Attributes::new()));
    // Two equal branches over fixed shapes: exp(p) · 3 and exp(q) · 3.
    g.initializer("three", Tensor::new(vec![], vec![3.0f32]).unwrap());
    for (input, out) in [("p", "pe"), ("q", "qe")] {
        let e = format!("{input}_exp");
        g.node(node("Exp", &[input], &e, Attributes::new()));
        g.node(node("Mul", &[&e, "three"], out, Attributes::new()));
    }
    for out in ["y", "pe", "qe"] {
        g.output(out);
    }
    let graph = g.build(Registry::global()).unwrap();
    let model = CompiledModel::new(
        graph.clone(),
        backend(dir.path(), true),
        CompileOptions::default(),
    );
    let mut remembered = Vec::new();
    for batch in [3usize, 7] {
        let inputs = vec![
            ("x".to_string(), random(&mut rng, &[batch, 24])),
            ("p".to_string(), random(&mut rng, &[5, 13])),
            ("q".to_string(), random(&mut rng, &[5, 13])),
        ];
        let got = model.run(&inputs).unwrap();
        let want = run_reference(&graph, &inputs).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_close(&f32s(&g.1), &w.1.to_f64_vec(), &g.0);
        }
        let report = model
            .compiled(&[vec![batch, 24], vec![5, 13], vec![5, 13]])
            .unwrap();
        assert_eq!(report.report().kernels, 3, "{}", report.report().partition);
        remembered.push(model.backend().memo().len());
    }
    // The first compilation remembers 2 tasks for 3 kernels (the branches are equal); the
    // second adds only the product of the new batch.
    assert_eq!(remembered, vec![2, 3]);
}

/// Products whose rows depend on the data (the rows a `NonZero` selects, as in a detector's
/// box head) run as host steps with `f32` products (`Operator::eval_host`): a transposed,
/// scaled `Gemm` with a broadcast bias (rewritten to a `MatMul` with a scale and a bias) and
/// a `MatMul`, against the reference's float64.
#[test]
fn products_of_data_dependent_rows_run_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(31);
    let (rows, k, n) = (37usize, 203usize, 45usize);
    let mut g = GraphBuilder::new("selected_rows");
    g.input("scores", TensorType::fixed(DType::F32, &[rows]));
    g.input("feats", TensorType::fixed(DType::F32, &[rows, k]));
    g.initializer("zero", Tensor::new(vec![], vec![0.0f32]).unwrap());
    g.initializer("axes", Tensor::new(vec![1], vec![0i64]).unwrap());
    // A runtime `w` keeps the `Gemm` (a constant one becomes a `MatMul` and an `Add`).
    g.input("w", TensorType::fixed(DType::F32, &[n, k]));
    g.initializer("bias", random(&mut rng, &[n]));
    g.initializer("w2", random(&mut rng, &[k, 11]));
    g.node(node(
        "Greater",
        &["scores", "zero"],
        "keep",
        Attributes::new(),
    ));
    g.node(node("NonZero", &["keep"], "nz", Attributes::new()));
    g.node(node("Squeeze", &["nz", "axes"], "idx", Attributes::new()));
    g.node(node("Gather", &["feats", "idx"], "sel", Attributes::new()));
    let mut gemm = Attributes::new();
    gemm.insert("transB", Attribute::Int(1));
    gemm.insert("alpha", Attribute::Float(0.5));
    gemm.insert("beta", Attribute::Float(2.0));
    g.node(node("Gemm", &["sel", "w", "bias"], "y", gemm));
    g.node(node("MatMul", &["sel", "w2"], "z", Attributes::new()));
    g.output("y");
    g.output("z");
    let graph = g.build(Registry::global()).unwrap();
    let model = CompiledModel::new(
        graph.clone(),
        backend(dir.path(), true),
        CompileOptions::default(),
    );
    let scores: Vec<f32> = (0..rows)
        .map(|i| if i % 3 == 1 { -1.0 } else { 1.0 })
        .collect();
    let inputs = vec![
        (
            "scores".to_string(),
            Tensor::new(vec![rows], scores).unwrap(),
        ),
        ("feats".to_string(), random(&mut rng, &[rows, k])),
        ("w".to_string(), random(&mut rng, &[n, k])),
    ];
    let got = model.run(&inputs).unwrap();
    let want = run_reference(&graph, &inputs).unwrap();
    let compiled = model
        .compiled(&[vec![rows], vec![rows, k], vec![n, k]])
        .unwrap();
    let host: Vec<&str> = compiled
        .report()
        .host_steps
        .iter()
        .map(|s| s.op_type.as_str())
        .collect();
    assert!(host.contains(&"MatMul"), "{host:?}");
    assert_eq!(got[0].1.shape(), &[25, n]);
    for (g, w) in got.iter().zip(&want) {
        assert_close(&f32s(&g.1), &w.1.to_f64_vec(), &g.0);
    }
}
