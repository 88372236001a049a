//! Convolutions of every kind at any batch, end to end on the CPU: batches of several
//! images, grouped, depthwise (with and without a channel multiplier), pointwise, strided,
//! dilated, padded, Winograd-sized and direct ones, with a bias and a ReLU, compile to
//! generated kernels (the batch folded into the products, no convolution left to the
//! rule-based scheduler, no host step) and compute what direct float64 loops compute.

use crate::common;

use std::sync::Arc;

use common::{cpu_backend_for, node, random, runs_here, Rng};
use hidet_cpu::graph_passes::default_passes;
use hidet_cpu::CpuTarget;
use hidet_graph::compiled::{CompileOptions, CompiledGraph};
use hidet_graph::passes::run_passes;
use hidet_graph::{
    run_reference, Attribute, Attributes, DType, Graph, GraphBuilder, Registry, Tensor, TensorType,
};

/// One 2-D convolution: `x [n, c, h, w]`, `group` groups, `oc` output channels.
#[derive(Clone, Copy, Debug)]
struct Case {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    oc: usize,
    group: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    /// `[top, left, bottom, right]`.
    pads: [usize; 4],
}

impl Case {
    fn out(&self) -> [usize; 2] {
        [0, 1].map(|d| {
            let extent = self.dilation[d] * (self.kernel[d] - 1) + 1;
            let size = [self.h, self.w][d] + self.pads[d] + self.pads[d + 2];
            (size - extent) / self.stride[d] + 1
        })
    }

    fn plain(
        n: usize,
        c: usize,
        hw: usize,
        oc: usize,
        k: usize,
        stride: usize,
        pad: usize,
    ) -> Self {
        Case {
            n,
            c,
            h: hw,
            w: hw,
            oc,
            group: 1,
            kernel: [k, k],
            stride: [stride, stride],
            dilation: [1, 1],
            pads: [pad; 4],
        }
    }

    fn grouped(self, group: usize) -> Self {
        Case { group, ..self }
    }
}

/// `y = relu(conv(x, w) + b)`, its inputs, the direct float64 loops' answer, and the sum of
/// the magnitudes of each output's terms.
struct Built {
    graph: Graph,
    x: Tensor,
    want: Vec<f64>,
    magnitude: Vec<f64>,
}

fn build(rng: &mut Rng, case: &Case) -> Built {
    let cg = case.c / case.group;
    let w = random(rng, &[case.oc, cg, case.kernel[0], case.kernel[1]]);
    let b = random(rng, &[case.oc]);
    let x = random(rng, &[case.n, case.c, case.h, case.w]);
    let mut g = GraphBuilder::new("conv");
    g.input(
        "x",
        TensorType::fixed(DType::F32, &[case.n, case.c, case.h, case.w]),
    );
    g.initializer("w", w.clone());
    g.initializer("b", b.clone());
    let ints = |v: &[usize]| Attribute::Ints(v.iter().map(|&d| d as i64).collect());
    let mut attrs = Attributes::new();
    attrs.insert("kernel_shape", ints(&case.kernel));
    attrs.insert("strides", ints(&case.stride));
    attrs.insert("dilations", ints(&case.dilation));
    attrs.insert("pads", ints(&case.pads));
    attrs.insert("group", Attribute::Int(case.group as i64));
    g.node(node("Conv", &["x", "w", "b"], "conv", attrs));
    g.node(node("Relu", &["conv"], "y", Attributes::new()));
    g.output("y");
    let (xv, wv, bv) = (x.to_f64_vec(), w.to_f64_vec(), b.to_f64_vec());
    let want = conv_f64(case, &xv, &wv, &bv);
    let abs = |v: &[f64]| v.iter().map(|x| x.abs()).collect::<Vec<f64>>();
    let magnitude = conv_f64(case, &abs(&xv), &abs(&wv), &abs(&bv));
    Built {
        graph: g.build(Registry::global()).unwrap(),
        x,
        want,
        magnitude,
    }
}

/// `relu(conv(x, w) + b)` by direct loops in float64.
fn conv_f64(case: &Case, x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
    let [oh, ow] = case.out();
    let (cg, ocg) = (case.c / case.group, case.oc / case.group);
    let [kh, kw] = case.kernel;
    let mut y = Vec::with_capacity(case.n * case.oc * oh * ow);
    for n in 0..case.n {
        for m in 0..case.oc {
            let group = m / ocg;
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = b[m];
                    for ci in 0..cg {
                        let c = group * cg + ci;
                        for a in 0..kh {
                            for bb in 0..kw {
                                let hi = (i * case.stride[0] + a * case.dilation[0]) as i64
                                    - case.pads[0] as i64;
                                let wi = (j * case.stride[1] + bb * case.dilation[1]) as i64
                                    - case.pads[1] as i64;
                                if hi < 0 || wi < 0 || hi >= case.h as i64 || wi >= case.w as i64 {
                                    continue;
                                }
                                let at = ((n * case.c + c) * case.h + hi as usize) * case.w
                                    + wi as usize;
                                acc += x[at] * w[((m * cg + ci) * kh + a) * kw + bb];
                            }
                        }
                    }
                    y.push(acc.max(0.0));
                }
            }
        }
    }
    y
}

/// Each output within `1e-5` of the sum of the magnitudes of its terms (Winograd's
/// transforms round more than a dot product does).
fn assert_close(got: &Tensor, built: &Built, what: &str) {
    let got = got.to_f64_vec();
    assert_eq!(got.len(), built.want.len(), "{what}: length");
    assert!(
        built.want.iter().any(|v| *v != 0.0),
        "{what}: all-zero reference"
    );
    let expected = built.want.iter().zip(&built.magnitude);
    for (i, (g, (w, m))) in got.iter().zip(expected).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * m,
            "{what}[{i}]: {g} vs {w} (terms {m})"
        );
    }
}

/// Compiles `case` after the default passes for the host, checks that no `Conv` is left to
/// the rule-based scheduler and nothing runs on the host, that `rewritten_to` is among the
/// operators the passes produced, and that the outputs (and the reference executor's on
/// the imported graph) match float64 loops. Returns the operators after the passes.
fn check(seed: u64, case: Case, rewritten_to: &str) -> Vec<String> {
    let mut rng = Rng::new(seed);
    let built = build(&mut rng, &case);
    let inputs = vec![("x".to_string(), built.x.clone())];
    let reference = run_reference(&built.graph, &inputs).unwrap();
    assert_close(&reference[0].1, &built, &format!("reference {case:?}"));
    let graph = run_passes(built.graph.clone(), &default_passes()).unwrap();
    let ops: Vec<String> = graph.nodes().iter().map(|n| n.op_type.clone()).collect();
    assert!(
        !ops.iter().any(|op| op == "Conv"),
        "{case:?}: a Conv is left: {ops:?}"
    );
    assert!(
        ops.iter().any(|op| op == rewritten_to),
        "{case:?}: no {rewritten_to}: {ops:?}"
    );
    let target = CpuTarget::detected();
    assert!(runs_here(target));
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(cpu_backend_for(dir.path(), true, target));
    let shapes = [vec![case.n, case.c, case.h, case.w]];
    let compiled =
        CompiledGraph::compile(&graph, &shapes, backend, &CompileOptions::default()).unwrap();
    let report = compiled.report();
    assert_eq!(report.host_nodes(), 0, "{case:?}\n{}", report.partition);
    assert!(report.refusals.is_empty(), "{:?}", report.refusals);
    if std::env::var_os("SHOW_PARTITION").is_some() {
        eprintln!("{case:?}\n{}", report.partition);
    }
    let out = compiled.run(&inputs).unwrap();
    assert_close(&out[0].1, &built, &format!("compiled {case:?}"));
    ops
}

#[test]
fn batched_convolutions_fold_the_batch_into_the_product() {
    // Im2Col products (channels-first; window rows shorter than 3), padded and strided,
    // odd sizes.
    let mut column = Case::plain(3, 5, 11, 70, 3, 2, 1);
    column.kernel = [3, 1];
    column.pads = [1, 0, 1, 0];
    check(1, column, "Im2Col");
    check(2, Case::plain(2, 96, 9, 80, 2, 1, 0), "Im2Col");
    // Pointwise: a product batched over the images, each read as [C, HW] where it lies, the
    // one weight read from panels of rows by every image's product.
    let ops = check(3, Case::plain(4, 24, 13, 40, 1, 1, 0), "MatMul");
    assert!(ops.iter().any(|op| op == "ColumnPanels"), "{ops:?}");
    // Direct convolutions (few output channels, or window rows of 3): pixel rows of every
    // image, through a padded copy when padded.
    check(4, Case::plain(3, 3, 17, 16, 3, 1, 0), "OffsetGather");
    check(5, Case::plain(2, 7, 15, 24, 5, 2, 2), "OffsetGather");
    // A stem's short window (K = 27) with more output channels than one register tile is
    // wide, stored channels-first (on AVX-512, tile column by tile column).
    check(7, Case::plain(3, 3, 23, 70, 3, 2, 0), "OffsetGather");
    // A padded 7×7 stride-2 stem (K = 147), stored the same way.
    check(15, Case::plain(2, 3, 27, 64, 7, 2, 3), "OffsetGather");
    // Few output pixels (7×7 at batch 2): pixels as rows.
    check(6, Case::plain(2, 64, 7, 96, 1, 1, 0), "MatMul");
}

#[test]
fn batched_winograd_convolutions_tile_every_image() {
    // 3×3 and 1×7 at stride 1 with enough channels: the three Winograd products over the
    // tiles of all images (too few tiles in one 13×13 image for tiles of 4, enough in three).
    let products = |ops: &[String]| ops.iter().filter(|op| *op == "MatMul").count();
    let square = check(7, Case::plain(3, 64, 13, 72, 3, 1, 1), "OffsetGather");
    assert_eq!(products(&square), 3, "{square:?}");
    let mut row = Case::plain(2, 72, 17, 64, 1, 1, 0);
    row.kernel = [1, 7];
    row.pads = [0, 3, 0, 3];
    let row = check(8, row, "OffsetGather");
    assert_eq!(products(&row), 3, "{row:?}");
}

#[test]
fn grouped_convolutions_are_products_batched_over_groups() {
    // Direct, the pixels of every image gathered per group: window rows of 3 or more with
    // groups of at least 16 output channels (odd image sizes), or of at least 4 at a stride
    // (RegNet-like).
    check(
        17,
        Case::plain(2, 48, 13, 96, 3, 1, 1).grouped(3),
        "OffsetGather",
    );
    check(
        18,
        Case::plain(2, 64, 7, 64, 3, 1, 1).grouped(2),
        "OffsetGather",
    );
    check(
        10,
        Case::plain(1, 24, 10, 24, 3, 2, 1).grouped(3),
        "OffsetGather",
    );
    check(
        16,
        Case::plain(3, 40, 11, 40, 3, 2, 1).grouped(5),
        "OffsetGather",
    );
    // Channels-first, one product per image and group over its batched im2col matrix:
    // ResNeXt-like 3×3 with 4 groups of 12, groups of 4 output channels (ResNeXt's first
    // stage), dilated, 7 groups of 2, a column window, a grouped 1×1 (ShuffleNet-like).
    check(9, Case::plain(2, 32, 9, 48, 3, 1, 1).grouped(4), "Im2Col");
    check(13, Case::plain(2, 64, 9, 64, 3, 1, 1).grouped(16), "Im2Col");
    let mut dilated = Case::plain(2, 8, 12, 8, 3, 1, 2).grouped(2);
    dilated.dilation = [2, 2];
    check(12, dilated, "Im2Col");
    check(14, Case::plain(1, 14, 6, 14, 3, 1, 1).grouped(7), "Im2Col");
    let mut column = Case::plain(2, 16, 9, 16, 3, 1, 1).grouped(4);
    column.kernel = [3, 1];
    column.pads = [1, 0, 1, 0];
    check(19, column, "Im2Col");
    check(11, Case::plain(3, 12, 7, 18, 1, 1, 0).grouped(3), "Im2Col");
}

#[test]
fn depthwise_convolutions_run_channels_last_at_any_batch() {
    check(
        13,
        Case::plain(3, 16, 11, 16, 3, 1, 1).grouped(16),
        "DepthwiseConvNhwc",
    );
    check(
        14,
        Case::plain(2, 24, 14, 24, 5, 2, 2).grouped(24),
        "DepthwiseConvNhwc",
    );
    // A channel multiplier of 2 is a grouped product instead.
    check(15, Case::plain(2, 8, 9, 16, 3, 1, 1).grouped(8), "Im2Col");
}

/// A direct convolution whose input is another convolution's channels-last product (through
/// a ReLU) gathers that product in place, its window read channel-innermost: ungrouped
/// (padded 3×3, a strided 1×1 with few channels, an unpadded 5×5) and grouped with 16
/// channels per group, each checked against the reference executor on the imported graph.
#[test]
fn direct_convolutions_gather_a_channels_last_input_in_place() {
    let first = Case::plain(2, 3, 19, 32, 3, 1, 1);
    let seconds = [
        Case::plain(2, 32, 19, 24, 3, 2, 1),
        Case::plain(2, 32, 19, 48, 1, 2, 0),
        Case::plain(2, 32, 19, 40, 5, 1, 0),
        Case::plain(2, 32, 19, 32, 3, 1, 1).grouped(2),
    ];
    for (seed, second) in (40..).zip(seconds) {
        let mut rng = Rng::new(seed);
        let ints = |v: &[usize]| Attribute::Ints(v.iter().map(|&d| d as i64).collect());
        let conv_attrs = |case: &Case| {
            let mut attrs = Attributes::new();
            attrs.insert("kernel_shape", ints(&case.kernel));
            attrs.insert("strides", ints(&case.stride));
            attrs.insert("pads", ints(&case.pads));
            attrs.insert("group", Attribute::Int(case.group as i64));
            attrs
        };
        let x = random(&mut rng, &[first.n, first.c, first.h, first.w]);
        let mut g = GraphBuilder::new("chain");
        g.input(
            "x",
            TensorType::fixed(DType::F32, &[first.n, first.c, first.h, first.w]),
        );
        g.initializer("w1", random(&mut rng, &[first.oc, first.c, 3, 3]));
        g.initializer("b1", random(&mut rng, &[first.oc]));
        let cg = second.c / second.group;
        let [kh, kw] = second.kernel;
        g.initializer("w2", random(&mut rng, &[second.oc, cg, kh, kw]));
        g.initializer("b2", random(&mut rng, &[second.oc]));
        g.node(node("Conv", &["x", "w1", "b1"], "c1", conv_attrs(&first)));
        g.node(node("Relu", &["c1"], "r1", Attributes::new()));
        g.node(node("Conv", &["r1", "w2", "b2"], "y", conv_attrs(&second)));
        g.output("y");
        let graph = g.build(Registry::global()).unwrap();
        let inputs = vec![("x".to_string(), x)];
        let want = run_reference(&graph, &inputs).unwrap().remove(0).1;

        let passed = run_passes(graph.clone(), &default_passes()).unwrap();
        let gathers: Vec<_> = passed
            .nodes()
            .iter()
            .filter(|n| n.op_type == "OffsetGather")
            .collect();
        assert_eq!(gathers.len(), 2, "{second:?}: two direct convolutions");
        let source = gathers[1].inputs[0].expect("the gathered input");
        let shape = passed.value(source).ty.fixed_shape().unwrap();
        assert_eq!(
            shape.last(),
            Some(&first.oc),
            "{second:?}: the second convolution gathers channels-last data, {shape:?}"
        );
        assert!(
            !passed.nodes().iter().any(|n| n.op_type == "Transpose"
                && n.inputs[0].is_some_and(|i| passed.value(i).users.len() > 1)),
            "{second:?}: no transposed copy beside the in-place read"
        );

        let target = CpuTarget::detected();
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(cpu_backend_for(dir.path(), true, target));
        let shapes = [vec![first.n, first.c, first.h, first.w]];
        let compiled =
            CompiledGraph::compile(&passed, &shapes, backend, &CompileOptions::default()).unwrap();
        assert_eq!(compiled.report().host_nodes(), 0);
        let got = compiled.run(&inputs).unwrap().remove(0).1;
        let (got, want) = (got.to_f64_vec(), want.to_f64_vec());
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "{second:?}: an all-zero reference");
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * scale,
                "{second:?}[{i}]: {a} vs {b} (scale {scale})"
            );
        }
    }
}
