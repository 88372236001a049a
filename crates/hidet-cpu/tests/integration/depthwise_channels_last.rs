//! Channels-last depthwise convolutions, end to end on the CPU: after the default passes a
//! MobileNet-V2 inverted residual block (1×1 expansion, ReLU6, 3×3 depthwise, ReLU6, 1×1
//! projection, residual add), or EfficientNet's with SiLU (`x·sigmoid(x)`) activations, of
//! one image or a batch, runs as three kernels with no transpose between them, and
//! every output matches the reference executor on the original graph, including where a
//! padded window's clamped read lands on an infinite input it must not see.

use crate::common;

use std::sync::Arc;

use common::{cpu_backend, node, random, Rng};
use hidet_cpu::graph_backend::CpuBackend;
use hidet_cpu::graph_passes::default_passes;
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::passes::run_passes;
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, Graph, GraphBuilder, Registry, Tensor, TensorType,
};

fn conv_attrs(group: usize, stride: usize, pad: usize) -> Attributes {
    let mut a = Attributes::new();
    a.insert("group", Attribute::Int(group as i64));
    a.insert("strides", Attribute::Ints(vec![stride as i64; 2]));
    a.insert("pads", Attribute::Ints(vec![pad as i64; 4]));
    a
}

/// The activation of a block.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// `Clip(x, 0, 6)`.
    Relu6,
    /// `Mul(x, Sigmoid(x))`.
    Silu,
}

/// The activation `act` of `input` into `output`.
fn activation(g: &mut GraphBuilder, act: Act, input: &str, output: &str) {
    match act {
        Act::Relu6 => {
            g.node(node(
                "Clip",
                &[input, "zero", "six"],
                output,
                Attributes::new(),
            ));
        }
        Act::Silu => {
            let sigmoid = format!("{output}_sigmoid");
            g.node(node("Sigmoid", &[input], &sigmoid, Attributes::new()));
            g.node(node("Mul", &[input, &sigmoid], output, Attributes::new()));
        }
    }
}

/// The inverted residual block on `x` `[n, c, h, w]` with `e` expanded channels; the residual
/// add only at stride 1.
#[allow(clippy::too_many_arguments)]
fn inverted_residual(
    rng: &mut Rng,
    n: usize,
    c: usize,
    e: usize,
    h: usize,
    w: usize,
    stride: usize,
    act: Act,
) -> Graph {
    let mut g = GraphBuilder::new("inverted_residual");
    g.input("x", TensorType::fixed(DType::F32, &[n, c, h, w]));
    g.initializer("zero", Tensor::new(vec![], vec![0f32]).unwrap());
    g.initializer("six", Tensor::new(vec![], vec![6f32]).unwrap());
    g.initializer("w_expand", random(rng, &[e, c, 1, 1]));
    g.initializer("b_expand", random(rng, &[e]));
    g.initializer("w_depthwise", random(rng, &[e, 1, 3, 3]));
    g.initializer("b_depthwise", random(rng, &[e]));
    g.initializer("w_project", random(rng, &[c, e, 1, 1]));
    g.initializer("b_project", random(rng, &[c]));
    g.node(node(
        "Conv",
        &["x", "w_expand", "b_expand"],
        "expanded",
        conv_attrs(1, 1, 0),
    ));
    activation(&mut g, act, "expanded", "expanded6");
    g.node(node(
        "Conv",
        &["expanded6", "w_depthwise", "b_depthwise"],
        "filtered",
        conv_attrs(e, stride, 1),
    ));
    activation(&mut g, act, "filtered", "filtered6");
    let projected = if stride == 1 { "projected" } else { "y" };
    g.node(node(
        "Conv",
        &["filtered6", "w_project", "b_project"],
        projected,
        conv_attrs(1, 1, 0),
    ));
    if stride == 1 {
        g.node(node("Add", &["projected", "x"], "y", Attributes::new()));
    }
    g.output("y");
    g.build(Registry::global()).unwrap()
}

/// Equal non-finite values, else within a relative tolerance.
fn assert_matches(got: &Tensor, want: &Tensor, what: &str) {
    let (got, want) = (got.to_f64_vec(), want.to_f64_vec());
    assert_eq!(got.len(), want.len(), "{what}: length");
    assert!(want.iter().any(|v| *v != 0.0), "{what}: all-zero reference");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let ok = if w.is_finite() {
            (g - w).abs() <= 1e-4 + 1e-4 * w.abs()
        } else {
            g == w || (g.is_nan() && w.is_nan())
        };
        assert!(ok, "{what}[{i}]: {g} vs {w}");
    }
}

fn compile(dir: &std::path::Path, graph: &Graph, shape: &[usize]) -> CompiledGraph<CpuBackend> {
    let graph = run_passes(graph.clone(), &default_passes()).unwrap();
    CompiledGraph::compile(
        &graph,
        &[shape.to_vec()],
        Arc::new(cpu_backend(dir, true)),
        &CompileOptions::default(),
    )
    .unwrap()
}

#[test]
fn an_inverted_residual_block_runs_channels_last_without_transposes() {
    // Expanded channels that fill no whole vector, an image that is not square.
    for (seed, n, c, e, h, w, stride, act) in [
        (5, 1, 6, 20, 9, 11, 1, Act::Relu6),
        (6, 1, 5, 36, 10, 7, 2, Act::Relu6),
        (7, 1, 6, 20, 9, 11, 1, Act::Silu),
        (8, 3, 5, 36, 10, 7, 2, Act::Silu),
        (9, 2, 6, 20, 9, 11, 1, Act::Relu6),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(seed);
        let graph = inverted_residual(&mut rng, n, c, e, h, w, stride, act);
        let compiled = compile(dir.path(), &graph, &[n, c, h, w]);
        let report = compiled.report();
        let dump = &report.partition;
        assert_eq!(report.kernels, 3, "{dump}");
        assert!(dump.contains("[anchored] DepthwiseConvNhwc"), "{dump}");
        // Only the block's own input and output are transposed (read and stored through
        // the matrix products' prologue and epilogue); nothing between the three kernels.
        let depthwise = dump
            .split("kernel ")
            .find(|k| k.contains("DepthwiseConvNhwc"))
            .unwrap();
        assert!(!depthwise.contains("Transpose"), "{dump}");
        let inputs = vec![("x".to_string(), random(&mut rng, &[n, c, h, w]))];
        let want = run_reference(&graph, &inputs).unwrap();
        let got = compiled.run(&inputs).unwrap();
        assert_matches(&got[0].1, &want[0].1, &format!("block {n}×{c}, {act:?}"));
    }
}

/// A depthwise convolution alone, with `+inf` in the corner of every channel: the padded
/// windows' reads are clamped into the image and then discarded, so outputs whose window
/// misses the corner stay finite (at stride 1 the corner is in 2×2 windows, at stride 2 in
/// one).
#[test]
fn clamped_padding_reads_never_leak_into_outputs() {
    for (stride, reached) in [(1, 4), (2, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(9 + stride as u64);
        let (c, h, w) = (18, 7, 8);
        let mut g = GraphBuilder::new("depthwise");
        g.input("x", TensorType::fixed(DType::F32, &[1, c, h, w]));
        g.initializer("w", random(&mut rng, &[c, 1, 3, 3]));
        g.node(node("Conv", &["x", "w"], "y", conv_attrs(c, stride, 1)));
        g.output("y");
        let graph = g.build(Registry::global()).unwrap();
        let compiled = compile(dir.path(), &graph, &[1, c, h, w]);
        assert!(
            compiled.report().partition.contains("DepthwiseConvNhwc"),
            "{}",
            compiled.report().partition
        );
        let mut x = rng.vec_f32(c * h * w);
        for ch in 0..c {
            x[ch * h * w] = f32::INFINITY;
        }
        let inputs = vec![("x".to_string(), Tensor::new(vec![1, c, h, w], x).unwrap())];
        let want = run_reference(&graph, &inputs).unwrap();
        let outputs = want[0].1.to_f64_vec();
        let finite = outputs.iter().filter(|v| v.is_finite()).count();
        assert_eq!(finite, outputs.len() - c * reached, "stride {stride}");
        let got = compiled.run(&inputs).unwrap();
        assert_matches(&got[0].1, &want[0].1, "depthwise with an infinite corner");
    }
}
