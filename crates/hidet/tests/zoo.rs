//! The model zoo: every paper model builds (graph construction and shape inference) with the
//! operator structure and parameter count of its `torch.onnx.export` counterpart
//! (`docs/paper-models-ops.md`); the small models compile and match the reference executor;
//! activations stay finite and O(1).

use std::collections::HashMap;

use hidet::graph::compiled::CompileOptions;
use hidet::graph::{DType, Graph, Tensor};
use hidet::onnx::OnnxModel;
use hidet::pipeline;
use hidet::zoo::inputs::{complete_inputs, InputKind};
use hidet::zoo::{self, ZooError};

fn histogram(g: &Graph) -> HashMap<String, usize> {
    let mut h = HashMap::new();
    for n in g.nodes() {
        *h.entry(n.op_type.clone()).or_insert(0) += 1;
    }
    h
}

fn parameters(g: &Graph) -> usize {
    g.initializers()
        .filter(|(_, t)| t.dtype() == DType::F32 && t.rank() > 0)
        .map(|(_, t)| t.numel())
        .sum()
}

fn shapes(g: &Graph, ids: &[hidet::graph::ValueId]) -> Vec<(String, Option<Vec<usize>>)> {
    ids.iter()
        .map(|&id| {
            let v = g.value(id);
            (v.name.clone(), v.ty.fixed_shape())
        })
        .collect()
}

/// (op type, count) pairs that must match the export exactly.
fn check_ops(model: &str, g: &Graph, expected: &[(&str, usize)]) {
    let h = histogram(g);
    for (op, n) in expected {
        assert_eq!(
            h.get(*op).copied().unwrap_or(0),
            *n,
            "{model}: {op} count ({h:?})"
        );
    }
}

#[test]
fn resnet50_builds_like_the_export() {
    let g = zoo::build("resnet50").unwrap();
    check_ops(
        "resnet50",
        &g,
        &[
            ("Conv", 53),
            ("Relu", 49),
            ("Add", 16),
            ("MaxPool", 1),
            ("GlobalAveragePool", 1),
            ("Flatten", 1),
            ("Gemm", 1),
        ],
    );
    assert_eq!(g.nodes().len(), 122);
    assert_eq!(parameters(&g), 25_530_472);
    assert_eq!(
        shapes(&g, g.inputs()),
        vec![("input".into(), Some(vec![1, 3, 224, 224]))]
    );
    assert_eq!(shapes(&g, g.outputs())[0].1, Some(vec![1, 1000]));
}

#[test]
fn inception_v3_builds_like_the_export() {
    let g = zoo::build("inception_v3").unwrap();
    check_ops(
        "inception_v3",
        &g,
        &[
            ("Conv", 94),
            ("Relu", 94),
            ("Concat", 11),
            ("AveragePool", 9),
            ("MaxPool", 4),
            ("Gemm", 1),
        ],
    );
    assert_eq!(g.nodes().len(), 215);
    assert_eq!(parameters(&g), 23_817_352);
    assert_eq!(shapes(&g, g.inputs())[0].1, Some(vec![1, 3, 299, 299]));
    assert_eq!(shapes(&g, g.outputs())[0].1, Some(vec![1, 1000]));
}

#[test]
fn mobilenet_v2_builds_like_the_export() {
    let g = zoo::build("mobilenet_v2").unwrap();
    check_ops(
        "mobilenet_v2",
        &g,
        &[
            ("Conv", 52),
            ("Clip", 35),
            ("Add", 10),
            ("GlobalAveragePool", 1),
            ("Gemm", 1),
        ],
    );
    let depthwise = g
        .nodes()
        .iter()
        .filter(|n| n.op_type == "Conv" && n.attrs.int_or("group", 1).unwrap_or(1) > 1)
        .count();
    assert_eq!(depthwise, 17);
    assert_eq!(parameters(&g), 3_487_816);
    assert_eq!(shapes(&g, g.outputs())[0].1, Some(vec![1, 1000]));
}

#[test]
fn bert_base_builds_and_synthesizes_valid_inputs() {
    let g = zoo::build("bert_base").unwrap();
    check_ops(
        "bert_base",
        &g,
        &[
            ("LayerNormalization", 25),
            ("Softmax", 12),
            ("Erf", 12),
            ("MatMul", 96),
            ("Gather", 4),
            ("Gemm", 1),
            ("Tanh", 1),
        ],
    );
    // HF BertModel (bert-base-uncased, with pooler) has 109,482,240 parameters.
    assert_eq!(parameters(&g), 109_482_240);
    let outs = shapes(&g, g.outputs());
    assert_eq!(
        outs[0],
        ("last_hidden_state".into(), Some(vec![1, 128, 768]))
    );
    assert_eq!(outs[1], ("pooler_output".into(), Some(vec![1, 768])));
    let inputs = complete_inputs(&g, &[], zoo::SEED).unwrap();
    let kinds: Vec<(&str, InputKind)> = inputs.iter().map(|(n, _, k)| (n.as_str(), *k)).collect();
    assert_eq!(
        kinds,
        vec![
            ("input_ids", InputKind::Ids { rows: 30522 }),
            ("attention_mask", InputKind::Ones),
            ("token_type_ids", InputKind::Ids { rows: 2 }),
        ]
    );
    let ids = inputs[0].1.to_i64_vec();
    assert!(ids.iter().all(|&i| (0..30522).contains(&i)));
}

#[test]
fn gpt2_builds_like_the_export() {
    let g = zoo::build("gpt2").unwrap();
    check_ops(
        "gpt2",
        &g,
        &[
            ("LayerNormalization", 25),
            ("Softmax", 12),
            ("Tanh", 12),
            ("Pow", 12),
            ("Gemm", 48),
            ("Split", 12),
            ("Where", 12),
            ("Trilu", 1),
        ],
    );
    assert_eq!(shapes(&g, g.outputs())[0].1, Some(vec![1, 128, 768]));
    // HF GPT2Model (gpt2 small) has 124,439,808 parameters; the zoo adds the 128×128 ones
    // matrix the causal mask is built from.
    assert_eq!(parameters(&g), 124_439_808 + 128 * 128);
    let inputs = complete_inputs(&g, &[], zoo::SEED).unwrap();
    assert_eq!(inputs[0].2, InputKind::Ids { rows: 50257 });
}

#[test]
fn weights_are_deterministic_and_he_scaled() {
    let a = zoo::build("tiny_cnn").unwrap();
    let b = zoo::build("tiny_cnn").unwrap();
    let weight = |g: &Graph, name: &str| -> Tensor {
        g.initializers()
            .find(|(id, _)| g.value(*id).name == name)
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| panic!("no initializer `{name}`"))
    };
    let (wa, wb) = (
        weight(&a, "block.conv1.weight"),
        weight(&b, "block.conv1.weight"),
    );
    assert_eq!(wa.to_f64_vec(), wb.to_f64_vec());
    // He: variance 2 / fan_in, fan_in = 12 * 3 * 3.
    let v = wa.to_f64_vec();
    let var = v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64;
    let want = 2.0 / 108.0;
    assert!((var / want - 1.0).abs() < 0.15, "variance {var}, He {want}");
    assert_ne!(
        wa.to_f64_vec(),
        weight(&a, "block.conv2.weight").to_f64_vec()[..v.len()].to_vec()
    );
}

#[test]
fn unknown_names_list_the_zoo() {
    let e = zoo::build("resnet").unwrap_err();
    assert!(matches!(e, ZooError::UnknownModel { .. }));
    let msg = e.to_string();
    for entry in zoo::entries() {
        assert!(msg.contains(entry.name), "{msg}");
    }
    assert_eq!(zoo::strip_prefix("zoo:gpt2"), Some("gpt2"));
    assert_eq!(zoo::strip_prefix("gpt2.onnx"), None);
}

fn model_of(g: Graph) -> OnnxModel {
    OnnxModel {
        graph: g,
        ir_version: 8,
        opsets: vec![(String::new(), 17)],
        producer: "test".into(),
    }
}

/// Largest |got - want| relative to max |want|, after checking names and shapes.
fn relative_error(got: &[(String, Tensor)], want: &[(String, Tensor)]) -> f64 {
    assert_eq!(got.len(), want.len());
    let mut worst = 0f64;
    for ((gn, g), (wn, w)) in got.iter().zip(want) {
        assert_eq!(gn, wn);
        assert_eq!(g.shape(), w.shape(), "{gn}");
        let (g, w) = (g.to_f64_vec(), w.to_f64_vec());
        let scale = w.iter().fold(0f64, |m, x| m.max(x.abs()));
        assert!(scale > 1e-3, "{gn} is (nearly) all zeros");
        let diff = g
            .iter()
            .zip(&w)
            .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
        worst = worst.max(diff / scale);
    }
    worst
}

/// Compiled vs reference on the small models; outputs finite with O(1) magnitudes.
#[test]
fn small_models_compile_and_match_the_reference() {
    let cache = tempfile::tempdir().unwrap();
    std::env::set_var("HIDET_CACHE_DIR", cache.path());
    for name in ["tiny_cnn", "tiny_mlp", "tiny_bert", "tiny_gpt2"] {
        let model = model_of(zoo::build(name).unwrap());
        let inputs: Vec<(String, Tensor)> = complete_inputs(&model.graph, &[], 7)
            .unwrap()
            .into_iter()
            .map(|(n, t, _)| (n, t))
            .collect();
        let want = pipeline::run_reference(&model, &inputs).unwrap();
        for (n, t) in &want {
            let v = t.to_f64_vec();
            assert!(v.iter().all(|x| x.is_finite()), "{name}/{n} has NaN/inf");
            let max = v.iter().fold(0f64, |m, x| m.max(x.abs()));
            assert!(max < 50.0, "{name}/{n}: max |x| = {max}");
        }
        let compiled = pipeline::compile(&model, CompileOptions::default());
        let got = pipeline::run(&compiled, &inputs).unwrap();
        let err = relative_error(&got, &want);
        assert!(err < 1e-4, "{name}: relative error {err}");
    }
}

/// The compiled path applies the graph passes to a copy of the imported graph, which the
/// reference executor runs untouched.
#[test]
fn compile_applies_the_graph_passes_to_the_imported_graph() {
    let model = model_of(zoo::build("tiny_cnn").unwrap());
    let compiled = pipeline::compile(&model, CompileOptions::default());
    let shapes: Vec<Vec<usize>> = model
        .graph
        .inputs()
        .iter()
        .map(|&id| model.graph.value(id).ty.fixed_shape().unwrap())
        .collect();
    let optimized = pipeline::optimize(model.graph.clone()).unwrap();
    assert_eq!(
        histogram(&compiled.optimized_graph(&shapes).unwrap()),
        histogram(&optimized)
    );
    assert_ne!(histogram(&optimized), histogram(&model.graph));
    assert_eq!(histogram(&compiled.graph()), histogram(&model.graph));
    assert!(model.graph.nodes().iter().any(|n| n.op_type == "Conv"));
}

type Build = fn() -> Result<Graph, ZooError>;

/// The CNNs at a small resolution through the reference executor: activations stay O(1)
/// through every residual block (the He scaling and residual gains work).
#[test]
fn cnn_activations_stay_bounded() {
    let builds: [(&str, Build); 3] = [
        ("resnet50", || zoo::resnet50::build_for(64)),
        ("mobilenet_v2", || zoo::mobilenet_v2::build_for(64)),
        ("inception_v3", || zoo::inception_v3::build_for(107)),
    ];
    for (name, build) in builds {
        let model = model_of(build().unwrap());
        let inputs: Vec<(String, Tensor)> = complete_inputs(&model.graph, &[], 3)
            .unwrap()
            .into_iter()
            .map(|(n, t, _)| (n, t))
            .collect();
        let out = pipeline::run_reference(&model, &inputs).unwrap();
        let v = out[0].1.to_f64_vec();
        assert_eq!(v.len(), 1000);
        assert!(v.iter().all(|x| x.is_finite()), "{name}: NaN/inf");
        let max = v.iter().fold(0f64, |m, x| m.max(x.abs()));
        let mean = v.iter().map(|x| x.abs()).sum::<f64>() / v.len() as f64;
        assert!(
            max < 100.0 && mean > 1e-2,
            "{name}: max |logit| {max}, mean {mean}"
        );
    }
}
