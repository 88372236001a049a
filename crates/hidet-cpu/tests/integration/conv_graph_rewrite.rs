//! The convolution → implicit GEMM pass alone: which convolutions it rewrites, into what, and
//! that the reference executor gives the same outputs before and after (and the same as
//! direct float64 convolution loops) on random non-zero inputs of odd sizes.

use crate::passes_util;

use hidet_cpu::graph_passes::{default_passes, ConvToImplicitGemm};
use hidet_graph::passes::{run_passes, GraphPass};
use hidet_graph::{run_reference, Attribute, Attributes, Graph, GraphBuilder, Tensor};
use passes_util::*;

/// Window attributes of a 2-D convolution.
struct Conv2d {
    stride: usize,
    pad: [usize; 4],
    dilation: usize,
}

fn conv_attrs(c: &Conv2d) -> Attributes {
    let s = c.stride as i64;
    let d = c.dilation as i64;
    attrs(vec![
        ("strides", ints(&[s, s])),
        ("dilations", ints(&[d, d])),
        (
            "pads",
            Attribute::Ints(c.pad.iter().map(|&p| p as i64).collect()),
        ),
    ])
}

/// `y = relu(conv(x, w) + b) + r`, with `r` an input of the convolution's output shape.
fn block(xs: [usize; 4], w: &Tensor, b: &Tensor, c: &Conv2d, rs: &[usize]) -> Graph {
    let mut g = GraphBuilder::new("conv_block");
    g.input("x", f32_input(&xs));
    g.input("r", f32_input(rs));
    g.initializer("w", w.clone());
    g.initializer("b", b.clone());
    g.node(node("Conv", 17, &["x", "w", "b"], &["conv"], conv_attrs(c)));
    g.node(node("Relu", 17, &["conv"], &["act"], Attributes::new()));
    g.node(node("Add", 17, &["act", "r"], &["y"], Attributes::new()));
    g.output("y");
    build(g)
}

/// Direct float64 loops of `relu(conv(x, w) + b) + r` (batch 1); returns the output shape
/// and values.
fn block_f64(x: &Tensor, w: &Tensor, b: &Tensor, r: &Tensor, c: &Conv2d) -> (Vec<usize>, Vec<f64>) {
    let (xs, ws) = (x.shape(), w.shape());
    let (ch, h, wd) = (xs[1], xs[2], xs[3]);
    let (oc, kh, kw) = (ws[0], ws[2], ws[3]);
    let ext = |k: usize| (k - 1) * c.dilation + 1;
    let oh = (h + c.pad[0] + c.pad[2] - ext(kh)) / c.stride + 1;
    let ow = (wd + c.pad[1] + c.pad[3] - ext(kw)) / c.stride + 1;
    let (xv, wv, bv, rv) = (
        x.to_f64_vec(),
        w.to_f64_vec(),
        b.to_f64_vec(),
        r.to_f64_vec(),
    );
    let mut y = vec![0f64; oc * oh * ow];
    for m in 0..oc {
        for i in 0..oh {
            for j in 0..ow {
                let mut acc = bv[m];
                for ci in 0..ch {
                    for a in 0..kh {
                        for bb in 0..kw {
                            let hi = (i * c.stride + a * c.dilation) as i64 - c.pad[0] as i64;
                            let wi = (j * c.stride + bb * c.dilation) as i64 - c.pad[1] as i64;
                            if hi < 0 || wi < 0 || hi >= h as i64 || wi >= wd as i64 {
                                continue;
                            }
                            acc += xv[(ci * h + hi as usize) * wd + wi as usize]
                                * wv[((m * ch + ci) * kh + a) * kw + bb];
                        }
                    }
                }
                let o = (m * oh + i) * ow + j;
                y[o] = acc.max(0.0) + rv[o];
            }
        }
    }
    (vec![1, oc, oh, ow], y)
}

/// Checks the rewrite of one convolution block; `expect_gather`: the input is read through
/// `Im2Col` or, for a direct convolution, `OffsetGather` (not as it is).
fn check_block(seed: u64, xs: [usize; 4], ws: [usize; 4], c: Conv2d, expect_gather: bool) {
    let mut rng = Rng::new(seed);
    let (x, w, b) = (rng.f32s(&xs), rng.f32s(&ws), rng.f32s(&[ws[0]]));
    let ext = |k: usize| (k - 1) * c.dilation + 1;
    let oh = (xs[2] + c.pad[0] + c.pad[2] - ext(ws[2])) / c.stride + 1;
    let ow = (xs[3] + c.pad[1] + c.pad[3] - ext(ws[3])) / c.stride + 1;
    let rs = [1, ws[0], oh, ow];
    let r = rng.f32s(&rs);
    let before = block(xs, &w, &b, &c, &rs);
    let after = ConvToImplicitGemm::default()
        .run(before.clone())
        .expect("pass succeeds");
    assert_eq!(count(&after, "Conv"), 0, "{:?}", ops(&after));
    assert_eq!(count(&after, "MatMul"), 1, "{:?}", ops(&after));
    assert_eq!(
        count(&after, "Im2Col") + count(&after, "OffsetGather"),
        usize::from(expect_gather),
        "{:?}",
        ops(&after)
    );
    let inputs = vec![("x".to_string(), x.clone()), ("r".to_string(), r.clone())];
    assert_same_outputs(&before, &after, &inputs, 1e-5);
    let (shape, want) = block_f64(&x, &w, &b, &r, &c);
    let got = run_reference(&after, &inputs).expect("rewritten graph runs");
    assert_eq!(got[0].1.shape(), &shape[..]);
    for (i, (g, w)) in got[0].1.to_f64_vec().iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "y[{i}]: {g} vs {w}"
        );
    }
}

#[test]
fn padded_convolutions_become_im2col_matmul_bias_reshape() {
    let c1 = Conv2d {
        stride: 1,
        pad: [1, 1, 1, 1],
        dilation: 1,
    };
    check_block(1, [1, 13, 17, 17], [11, 13, 3, 3], c1, true);
    let c2 = Conv2d {
        stride: 2,
        pad: [1, 1, 1, 1],
        dilation: 1,
    };
    check_block(2, [1, 13, 17, 17], [11, 13, 3, 3], c2, true);
    let asym = Conv2d {
        stride: 2,
        pad: [2, 0, 1, 3],
        dilation: 2,
    };
    check_block(3, [1, 5, 14, 11], [7, 5, 3, 2], asym, true);
}

#[test]
fn pointwise_convolutions_read_the_input_through_a_reshape() {
    let c = Conv2d {
        stride: 1,
        pad: [0, 0, 0, 0],
        dilation: 1,
    };
    check_block(4, [1, 13, 9, 7], [6, 13, 1, 1], c, false);
    // A strided 1×1 convolution still needs the gather.
    let strided = Conv2d {
        stride: 2,
        pad: [0, 0, 0, 0],
        dilation: 1,
    };
    check_block(5, [1, 13, 9, 7], [6, 13, 1, 1], strided, true);
}

#[test]
fn auto_pad_and_a_computed_bias_are_rewritten() {
    let mut rng = Rng::new(6);
    let (x, w, b) = (
        rng.f32s(&[1, 3, 10, 9]),
        rng.f32s(&[4, 3, 4, 3]),
        rng.f32s(&[4]),
    );
    let mut g = GraphBuilder::new("same_upper");
    g.input("x", f32_input(&[1, 3, 10, 9]));
    g.input("b", f32_input(&[4]));
    g.initializer("w", w);
    g.node(node(
        "Conv",
        17,
        &["x", "w", "b"],
        &["y"],
        attrs(vec![
            ("auto_pad", Attribute::String("SAME_UPPER".into())),
            ("strides", ints(&[2, 3])),
        ]),
    ));
    g.output("y");
    let before = build(g);
    let after = ConvToImplicitGemm::default().run(before.clone()).unwrap();
    assert_eq!(count(&after, "Conv"), 0, "{:?}", ops(&after));
    let inputs = vec![("x".to_string(), x), ("b".to_string(), b)];
    assert_same_outputs(&before, &after, &inputs, 1e-5);
}

/// Batched, grouped and depthwise convolutions with constant weights become products (the
/// batch in the columns, the groups a batch of products) that compute what the convolution
/// computes; a convolution whose weight is a graph input stays.
#[test]
fn batched_grouped_and_depthwise_convolutions_become_products_dynamic_weights_stay() {
    let mut rng = Rng::new(7);
    let cases: Vec<([usize; 4], [usize; 4], i64, bool)> = vec![
        ([2, 4, 7, 7], [5, 4, 3, 3], 1, true),  // batch 2
        ([1, 4, 7, 7], [6, 2, 3, 3], 2, true),  // grouped
        ([3, 4, 7, 5], [6, 2, 2, 3], 2, true),  // grouped, batch 3
        ([1, 4, 7, 7], [4, 1, 3, 3], 4, true),  // depthwise
        ([1, 4, 7, 7], [5, 4, 3, 3], 1, false), // weight is an input
    ];
    for (xs, ws, group, constant) in cases {
        let w = rng.f32s(&ws);
        let x = rng.f32s(&xs);
        let mut g = GraphBuilder::new("conv");
        g.input("x", f32_input(&xs));
        let mut inputs = vec![("x".to_string(), x)];
        if constant {
            g.initializer("w", w.clone());
        } else {
            g.input("w", f32_input(&ws));
            inputs.push(("w".to_string(), w));
        }
        g.node(node(
            "Conv",
            17,
            &["x", "w"],
            &["y"],
            attrs(vec![
                ("group", Attribute::Int(group)),
                ("pads", ints(&[1, 1, 1, 1])),
            ]),
        ));
        g.output("y");
        let before = build(g);
        let after = ConvToImplicitGemm::default().run(before.clone()).unwrap();
        let what = format!("{xs:?} {ws:?} group {group}");
        if constant {
            assert_eq!(count(&after, "Conv"), 0, "{what}: {:?}", ops(&after));
            assert_same_outputs(&before, &after, &inputs, 1e-5);
        } else {
            assert_eq!(ops(&after), vec!["Conv"], "{what}");
        }
    }
}

#[test]
fn default_pipeline_rewrites_a_conv_batchnorm_relu_block() {
    let mut rng = Rng::new(8);
    let (c, oc) = (6usize, 5usize);
    let mut g = GraphBuilder::new("conv_bn");
    g.input("x", f32_input(&[1, c, 11, 13]));
    g.initializer("w", rng.f32s(&[oc, c, 3, 3]));
    g.initializer("scale", rng.f32s(&[oc]));
    g.initializer("bias", rng.f32s(&[oc]));
    g.initializer("mean", rng.f32s(&[oc]));
    g.initializer("var", rng.positive(&[oc], 0.5, 2.0));
    g.node(node(
        "Conv",
        17,
        &["x", "w"],
        &["conv"],
        attrs(vec![("pads", ints(&[1, 1, 1, 1]))]),
    ));
    g.node(node(
        "BatchNormalization",
        15,
        &["conv", "scale", "bias", "mean", "var"],
        &["bn"],
        Attributes::new(),
    ));
    g.node(node("Relu", 17, &["bn"], &["y"], Attributes::new()));
    g.output("y");
    let before = build(g);
    let after = run_passes(before.clone(), &default_passes()).unwrap();
    assert_eq!(count(&after, "Conv"), 0, "{:?}", ops(&after));
    assert_eq!(count(&after, "BatchNormalization"), 0, "{:?}", ops(&after));
    let gathers = count(&after, "Im2Col") + count(&after, "OffsetGather");
    assert_eq!(gathers, 1, "{:?}", ops(&after));
    let inputs = vec![("x".to_string(), rng.f32s(&[1, c, 11, 13]))];
    assert_same_outputs(&before, &after, &inputs, 1e-4);
}

/// A bottleneck block on few pixels (5×5, like ResNet-50's last stage at 7×7): the windowed
/// convolutions take the pixels-as-rows product stored channels-last, so the pointwise
/// convolutions after them (and the residual add between) stay channels-last too and no
/// transpose is left between two products.
#[test]
fn a_bottleneck_on_few_pixels_stays_channels_last() {
    let mut rng = Rng::new(9);
    let (c, mid, oc) = (6usize, 5usize, 7usize);
    let mut g = GraphBuilder::new("late_bottleneck");
    g.input("x", f32_input(&[1, c, 9, 9]));
    for (name, shape) in [
        ("w1", [mid, c, 3, 3]),
        ("w2", [oc, mid, 1, 1]),
        ("wd", [oc, c, 1, 1]),
        ("w3", [mid, oc, 1, 1]),
    ] {
        g.initializer(name, rng.f32s(&shape));
        g.initializer(format!("b{}", &name[1..]), rng.f32s(&[shape[0]]));
    }
    let strided = |pad: i64| attrs(vec![("strides", ints(&[2, 2])), ("pads", ints(&[pad; 4]))]);
    g.node(node("Conv", 17, &["x", "w1", "b1"], &["c1"], strided(1)));
    g.node(node("Relu", 17, &["c1"], &["a1"], Attributes::new()));
    g.node(node(
        "Conv",
        17,
        &["a1", "w2", "b2"],
        &["c2"],
        Attributes::new(),
    ));
    g.node(node("Conv", 17, &["x", "wd", "bd"], &["down"], strided(0)));
    g.node(node(
        "Add",
        17,
        &["c2", "down"],
        &["sum"],
        Attributes::new(),
    ));
    g.node(node("Relu", 17, &["sum"], &["a2"], Attributes::new()));
    g.node(node(
        "Conv",
        17,
        &["a2", "w3", "b3"],
        &["y"],
        Attributes::new(),
    ));
    g.output("y");
    let before = build(g);
    let after = run_passes(before.clone(), &default_passes()).unwrap();
    assert_eq!(count(&after, "Conv"), 0, "{:?}", ops(&after));
    assert_eq!(count(&after, "MatMul"), 4, "{:?}", ops(&after));
    // The two windowed convolutions are direct (their pixels gathered as rows through
    // offset tables); the only transpose left takes the output back to channels-first.
    assert_eq!(count(&after, "Transpose"), 1, "{:?}", ops(&after));
    assert_eq!(count(&after, "OffsetGather"), 2, "{:?}", ops(&after));
    for n in after.nodes().iter().filter(|n| n.op_type == "MatMul") {
        let left = n.inputs[0].expect("a MatMul has a left operand");
        let producer = after.value(left).producer.map(|(p, _)| &after.nodes()[p.0]);
        let source = producer.map(|p| p.op_type.as_str());
        assert!(
            matches!(source, Some("OffsetGather" | "Reshape")),
            "{:?}",
            ops(&after)
        );
    }
    let inputs = vec![("x".to_string(), rng.f32s(&[1, c, 9, 9]))];
    assert_same_outputs(&before, &after, &inputs, 1e-4);
}

/// An unpadded convolution with 32 output channels and a short window whose rows are too
/// short for `window_direct` (2×2) is made a direct one (its pixels gathered as rows by
/// `OffsetGather`, the product channels-last) only up to `direct_max_channels` output
/// channels; the values are the same either way.
#[test]
fn short_direct_convolutions_are_bounded_by_direct_max_channels() {
    let mut rng = Rng::new(9);
    let (x, w) = (rng.f32s(&[1, 3, 19, 17]), rng.f32s(&[32, 3, 2, 2]));
    let mut g = GraphBuilder::new("stem");
    g.input("x", f32_input(&[1, 3, 19, 17]));
    g.initializer("w", w);
    g.node(node("Conv", 17, &["x", "w"], &["y"], Attributes::new()));
    g.output("y");
    let before = build(g);
    let inputs = vec![("x".to_string(), x)];
    for (widest, direct) in [(64, true), (32, true), (24, false)] {
        let pass = ConvToImplicitGemm {
            direct_max_channels: widest,
        };
        let after = pass.run(before.clone()).unwrap();
        assert_eq!(count(&after, "Conv"), 0, "{:?}", ops(&after));
        assert_eq!(
            count(&after, "OffsetGather") == 1,
            direct,
            "{widest}: {:?}",
            ops(&after)
        );
        assert_eq!(count(&after, "Im2Col") == 1, !direct, "{:?}", ops(&after));
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }
}

/// A convolution whose window rows are at least 3 long is direct whatever its channels and
/// depth (80 output channels, `K` = 40·9 = 360), padded or not: `OffsetGather` reads the input
/// (a padded one through a `Pad` copy), the product stored back channels-first, so the
/// pointwise convolution after it stays channels-first. (At stride 2 the output has 5×5
/// pixels, few enough for the pixels-as-rows product, which its pointwise successor reads
/// channels-last by design.) A column window (`7×1`) keeps the im2col product.
#[test]
fn windowed_convolutions_are_direct_unless_their_window_rows_are_short() {
    let mut rng = Rng::new(31);
    let (c, oc, hw) = (40usize, 80usize, 11usize);
    let cases = [
        ([3, 3], [1, 1, 1, 1], 1, true),
        ([3, 3], [0, 0, 0, 0], 1, true),
        ([3, 3], [0, 0, 0, 0], 2, true),
        ([7, 1], [3, 0, 3, 0], 1, false),
    ];
    for (kernel, pads, stride, direct) in cases {
        let padded = pads.iter().any(|&p| p != 0);
        let mut g = GraphBuilder::new("windowed");
        g.input("x", f32_input(&[1, c, hw, hw]));
        g.initializer("w", rng.f32s(&[oc, c, kernel[0], kernel[1]]));
        g.initializer("w2", rng.f32s(&[7, oc, 1, 1]));
        let window = attrs(vec![
            ("pads", ints(&pads)),
            ("strides", ints(&[stride, stride])),
        ]);
        g.node(node("Conv", 17, &["x", "w"], &["c1"], window));
        g.node(node("Relu", 17, &["c1"], &["a1"], Attributes::new()));
        g.node(node("Conv", 17, &["a1", "w2"], &["y"], Attributes::new()));
        g.output("y");
        let before = build(g);
        let after = run_passes(before.clone(), &default_passes()).unwrap();
        assert_eq!(count(&after, "Conv"), 0, "{:?}", ops(&after));
        let want = |op: &str, n: usize| assert_eq!(count(&after, op), n, "{op}: {:?}", ops(&after));
        if direct {
            want("Pad", usize::from(padded));
            want("OffsetGather", 1);
            want("Im2Col", 0);
            if stride == 2 {
                let inputs = vec![("x".to_string(), rng.f32s(&[1, c, hw, hw]))];
                assert_same_outputs(&before, &after, &inputs, 1e-4);
                continue;
            }
            // The pointwise product reads its input channels-first, through a reshape.
            let producer = |v: Option<hidet_graph::ValueId>| {
                let v = v.expect("a MatMul has two operands");
                after
                    .value(v)
                    .producer
                    .map(|(n, _)| after.nodes()[n.0].op_type.as_str())
            };
            let pointwise = after
                .nodes()
                .iter()
                .find(|n| n.op_type == "MatMul" && producer(n.inputs[0]) != Some("OffsetGather"))
                .expect("the pointwise product");
            assert_eq!(
                producer(pointwise.inputs[1]),
                Some("Reshape"),
                "{:?}",
                ops(&after)
            );
        } else {
            want("Pad", 0);
            want("OffsetGather", 0);
            want("Im2Col", 1);
        }
        let inputs = vec![("x".to_string(), rng.f32s(&[1, c, hw, hw]))];
        assert_same_outputs(&before, &after, &inputs, 1e-4);
    }
}
