//! The CPU backend's graph passes alone (`hidet_cpu::graph_passes`): build a small graph, run
//! the pass, check the structure, and check that the reference executor gives the same
//! outputs before and after on random non-zero inputs.

use crate::passes_util;

use hidet_cpu::graph_passes::{
    default_passes, ConvWinograd, DepthwiseChannelsLast, PanelConstantWeights, SeparablePool,
    SinkTransposes,
};
use hidet_graph::passes::{run_passes, DeadCodeElimination, GraphPass};
use hidet_graph::{Attribute, Attributes, GraphBuilder, Tensor};
use passes_util::*;

/// Runs `pass` and then DCE (the rewrites leave dead producers for DCE).
fn run_then_dce(pass: &dyn GraphPass, g: hidet_graph::Graph) -> hidet_graph::Graph {
    let g = pass.run(g).expect("pass succeeds");
    DeadCodeElimination.run(g).expect("dce succeeds")
}

mod separable_pool {
    use super::*;

    /// 2-D max- and average poolings (padding counted or not, strides, dilations,
    /// `ceil_mode`, `auto_pad`, windows that are not square) become two 1-D poolings with
    /// the same outputs (averages up to rounding).
    #[test]
    fn two_dimensional_windows_become_two_poolings() {
        let cases: Vec<Vec<(&str, Attribute)>> = vec![
            vec![("kernel_shape", ints(&[3, 3])), ("strides", ints(&[2, 2]))],
            vec![
                ("kernel_shape", ints(&[3, 2])),
                ("pads", ints(&[1, 0, 2, 1])),
                ("strides", ints(&[2, 1])),
                ("ceil_mode", Attribute::Int(1)),
            ],
            vec![
                ("kernel_shape", ints(&[2, 3])),
                ("dilations", ints(&[2, 1])),
                ("strides", ints(&[1, 3])),
            ],
            vec![
                ("kernel_shape", ints(&[3, 3])),
                ("auto_pad", Attribute::String("SAME_UPPER".into())),
                ("strides", ints(&[2, 2])),
            ],
        ];
        let mut rng = Rng::new(77);
        for (i, case) in cases.into_iter().enumerate() {
            for (op, count_pad, tol) in [
                ("MaxPool", None, 0.0),
                ("AveragePool", Some(0), 1e-6),
                ("AveragePool", Some(1), 1e-6),
            ] {
                let mut a = case.clone();
                if let Some(c) = count_pad {
                    a.push(("count_include_pad", Attribute::Int(c)));
                }
                let mut b = GraphBuilder::new("g");
                b.input("x", f32_input(&[1, 3, 11, 13]));
                b.node(node(op, 19, &["x"], &["y"], attrs(a)));
                b.output("y");
                let before = build(b);
                let after = run_then_dce(&SeparablePool, before.clone());
                assert_eq!(count(&after, op), 2, "{op} case {i}: {:?}", ops(&after));
                let inputs = vec![("x".to_string(), rng.f32s(&[1, 3, 11, 13]))];
                assert_same_outputs(&before, &after, &inputs, tol);
            }
        }
    }

    /// A pooling that also returns indices, or whose window is 1 along an axis, stays.
    #[test]
    fn indices_and_one_dimensional_windows_stay() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[1, 2, 6, 7]));
        let k = |k: &[i64]| attrs(vec![("kernel_shape", ints(k))]);
        b.node(node("MaxPool", 12, &["x"], &["y", "idx"], k(&[2, 2])));
        b.node(node("MaxPool", 12, &["x"], &["z"], k(&[1, 3])));
        b.output("y");
        b.output("idx");
        b.output("z");
        let before = build(b);
        let after = run_then_dce(&SeparablePool, before.clone());
        assert_eq!(count(&after, "MaxPool"), 2, "{:?}", ops(&after));
    }
}

mod winograd {
    use super::*;

    /// Every 3×3 stride-1 convolution is rewritten, whatever its size.
    const ALWAYS: ConvWinograd = ConvWinograd {
        min_tiles: 1,
        min_channel_harmonic: 1,
    };

    /// `Relu(Conv(x, w, b?))` over `x` `[1, c, h, w]` with `attrs`.
    fn conv(
        rng: &mut Rng,
        c: usize,
        oc: usize,
        hw: [usize; 2],
        attrs: Attributes,
        bias: bool,
    ) -> hidet_graph::Graph {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[1, c, hw[0], hw[1]]));
        b.initializer("w", rng.f32s(&[oc, c, 3, 3]));
        conv_relu_graph(b, rng, "x", oc, attrs, bias)
    }

    /// The convolution becomes the padded input, the tile gather, three products and the
    /// output's permutation (a crop when the tiles overhang the output, a bias add), with
    /// the same outputs up to rounding: `F(4×4)` and `F(2×2)` (too few tiles of 4 for
    /// `min_tiles`), symmetric, asymmetric and no padding, outputs that are and are not
    /// whole tiles, with and without a bias.
    #[test]
    fn a_three_by_three_convolution_becomes_three_products() {
        let mut rng = Rng::new(51);
        let cases = [
            (5, 7, [11, 13], [1i64, 1, 1, 1], true, 1usize),
            (6, 3, [10, 10], [1, 1, 1, 1], false, 1),
            (4, 9, [12, 9], [0, 1, 2, 0], true, 1),
            (3, 4, [10, 14], [0, 0, 0, 0], false, 1),
            (5, 6, [9, 9], [1, 1, 1, 1], true, 20),
            (4, 5, [13, 8], [1, 0, 0, 1], false, 20),
        ];
        for (c, oc, hw, pads, bias, min_tiles) in cases {
            let what =
                format!("{c} → {oc}, {hw:?}, pads {pads:?}, bias {bias}, min_tiles {min_tiles}");
            let before = conv(
                &mut rng,
                c,
                oc,
                hw,
                attrs(vec![("pads", ints(&pads))]),
                bias,
            );
            let pass = ConvWinograd {
                min_tiles,
                ..ALWAYS
            };
            let after = run_then_dce(&pass, before.clone());
            assert_eq!(count(&after, "Conv"), 0, "{what}");
            assert_eq!(count(&after, "MatMul"), 3, "{what}");
            assert_eq!(count(&after, "OffsetGather"), 1, "{what}");
            assert_eq!(count(&after, "Add"), usize::from(bias), "{what}");
            assert_eq!(count(&after, "Transpose"), 3, "{what}");
            let inputs = vec![("x".to_string(), rng.f32s(&[1, c, hw[0], hw[1]]))];
            assert_same_outputs(&before, &after, &inputs, 1e-4);
        }
    }

    /// Windows of 1×7 and 7×1 (Inception-V3's factorized convolutions) transform one axis,
    /// `F(4, 7)` or, with too few tiles of 4, `F(2, 7)`; the other axis passes through.
    #[test]
    fn one_by_seven_and_seven_by_one_windows_transform_one_axis() {
        let mut rng = Rng::new(53);
        for (kernel, pads, min_tiles) in [
            ([1i64, 7], [0i64, 3, 0, 3], 1usize),
            ([7, 1], [3, 0, 3, 0], 1),
            ([1, 7], [0, 3, 0, 3], 40),
            ([7, 1], [2, 0, 1, 0], 1),
        ] {
            let what = format!("{kernel:?}, pads {pads:?}, min_tiles {min_tiles}");
            let mut b = GraphBuilder::new("g");
            b.input("x", f32_input(&[1, 6, 11, 9]));
            b.initializer(
                "w",
                rng.f32s(&[5, 6, kernel[0] as usize, kernel[1] as usize]),
            );
            b.initializer("b", rng.f32s(&[5]));
            let conv_attrs = attrs(vec![("pads", ints(&pads)), ("kernel_shape", ints(&kernel))]);
            b.node(node("Conv", 17, &["x", "w", "b"], &["y"], conv_attrs));
            b.output("y");
            let before = build(b);
            let pass = ConvWinograd {
                min_tiles,
                ..ALWAYS
            };
            let after = run_then_dce(&pass, before.clone());
            assert_eq!(count(&after, "Conv"), 0, "{what}");
            assert_eq!(count(&after, "MatMul"), 3, "{what}");
            let inputs = vec![("x".to_string(), rng.f32s(&[1, 6, 11, 9]))];
            assert_same_outputs(&before, &after, &inputs, 1e-4);
        }
    }

    /// Kept: strided, dilated, grouped and 5×5 convolutions; with the default thresholds,
    /// few channels (`C·OC / (C + OC)` below 30) or few tiles (a 7×7 output).
    #[test]
    fn other_convolutions_stay() {
        let mut rng = Rng::new(52);
        for extra in [
            ("strides", ints(&[2, 2])),
            ("dilations", ints(&[2, 2])),
            ("group", Attribute::Int(2)),
        ] {
            let mut b = GraphBuilder::new("g");
            b.input("x", f32_input(&[1, 4, 12, 12]));
            let c_in = if extra.0 == "group" { 2 } else { 4 };
            b.initializer("w", rng.f32s(&[4, c_in, 3, 3]));
            b.node(node("Conv", 17, &["x", "w"], &["y"], attrs(vec![extra])));
            b.output("y");
            let before = build(b);
            let after = run_then_dce(&ALWAYS, before.clone());
            assert_eq!(ops(&after), vec!["Conv"]);
        }
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[1, 4, 12, 12]));
        b.initializer("w", rng.f32s(&[4, 4, 5, 5]));
        b.node(node("Conv", 17, &["x", "w"], &["y"], Attributes::new()));
        b.output("y");
        assert_eq!(ops(&run_then_dce(&ALWAYS, build(b))), vec!["Conv"]);

        let pads = || attrs(vec![("pads", ints(&[1, 1, 1, 1]))]);
        let few_channels = conv(&mut rng, 32, 64, [40, 40], pads(), true);
        let after = run_then_dce(&ConvWinograd::default(), few_channels);
        assert_eq!(count(&after, "Conv"), 1);
        let few_tiles = conv(&mut rng, 64, 64, [7, 7], pads(), true);
        let after = run_then_dce(&ConvWinograd::default(), few_tiles);
        assert_eq!(count(&after, "Conv"), 1);
        let enough = conv(&mut rng, 64, 64, [14, 14], pads(), true);
        let after = run_then_dce(&ConvWinograd::default(), enough);
        assert_eq!(count(&after, "Conv"), 0);
    }
}

mod channels_last {
    use super::*;

    fn conv_attrs(group: i64, stride: i64, pad: i64) -> Attributes {
        attrs(vec![
            ("group", Attribute::Int(group)),
            ("strides", ints(&[stride, stride])),
            ("pads", ints(&[pad, pad, pad, pad])),
        ])
    }

    /// Two inverted residual blocks (1×1 expansion, ReLU6, 3×3 depthwise, ReLU6, 1×1
    /// projection; the second with a residual add, as in MobileNet-V2, whose first block has
    /// none): every convolution goes channels-last and the transposes between them cancel,
    /// through the add; only the read of the graph input and the store of the graph output
    /// are left.
    #[test]
    fn transposes_between_inverted_residual_blocks_cancel() {
        let mut rng = Rng::new(31);
        let (c, e, h, w) = (4, 12, 6, 5);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[1, c, h, w]));
        b.initializer("zero", Tensor::scalar(0f32));
        b.initializer("six", Tensor::scalar(6f32));
        let mut x = "x".to_string();
        for k in 0..2 {
            let n = |s: &str| format!("{s}{k}");
            b.initializer(n("we"), rng.f32s(&[e, c, 1, 1]));
            b.initializer(n("wd"), rng.f32s(&[e, 1, 3, 3]));
            b.initializer(n("bd"), rng.f32s(&[e]));
            b.initializer(n("wp"), rng.f32s(&[c, e, 1, 1]));
            let steps: [(&str, Vec<String>, String, Attributes); 6] = [
                (
                    "Conv",
                    vec![x.clone(), n("we")],
                    n("e"),
                    conv_attrs(1, 1, 0),
                ),
                (
                    "Clip",
                    vec![n("e"), "zero".into(), "six".into()],
                    n("e6"),
                    Attributes::new(),
                ),
                (
                    "Conv",
                    vec![n("e6"), n("wd"), n("bd")],
                    n("d"),
                    conv_attrs(e as i64, 1, 1),
                ),
                (
                    "Clip",
                    vec![n("d"), "zero".into(), "six".into()],
                    n("d6"),
                    Attributes::new(),
                ),
                ("Conv", vec![n("d6"), n("wp")], n("p"), conv_attrs(1, 1, 0)),
                ("Add", vec![n("p"), x.clone()], n("y"), Attributes::new()),
            ];
            let steps = steps.into_iter().take(if k == 0 { 5 } else { 6 });
            for (op, ins, out, a) in steps {
                let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
                b.node(node(op, 17, &ins, &[out.as_str()], a));
            }
            x = if k == 0 { n("p") } else { n("y") };
        }
        b.output(&x);
        let before = build(b);
        let after = run_passes(before.clone(), &default_passes()).unwrap();
        assert_eq!(count(&after, "DepthwiseConvNhwc"), 2, "{:?}", ops(&after));
        assert_eq!(count(&after, "Conv"), 0, "{:?}", ops(&after));
        assert_eq!(count(&after, "Transpose"), 2, "{:?}", ops(&after));
        let inputs = vec![("x".to_string(), rng.f32s(&[1, c, h, w]))];
        assert_same_outputs(&before, &after, &inputs, 1e-4);
    }

    /// An inverted residual block with squeeze-and-excitation (EfficientNet's, MobileNet-V3's)
    /// at batch 2: 1×1 expansion, SiLU, depthwise 3×3, SiLU, then the per-channel scale
    /// `Mul(d, Sigmoid(W2·Relu(W1·GlobalAveragePool(d))))` and the 1×1 projection. The
    /// per-channel scale (`[N, C, 1, 1]`) is read channels-last and the pooling becomes a mean
    /// over the channels-last pixels, so no transpose of an image is left between the
    /// convolutions: only the graph input's read and the output's store move image data.
    #[test]
    fn squeeze_and_excitation_blocks_stay_channels_last() {
        let mut rng = Rng::new(34);
        let (n, c, e, r, h, w) = (2, 4, 12, 3, 7, 5);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[n, c, h, w]));
        for (name, shape) in [
            ("we", vec![e, c, 1, 1]),
            ("wd", vec![e, 1, 3, 3]),
            ("bd", vec![e]),
            ("w1", vec![r, e, 1, 1]),
            ("b1", vec![r]),
            ("w2", vec![e, r, 1, 1]),
            ("b2", vec![e]),
            ("wp", vec![c, e, 1, 1]),
        ] {
            b.initializer(name, rng.f32s(&shape));
        }
        let none = Attributes::new;
        let steps: Vec<(&str, Vec<&str>, &str, Attributes)> = vec![
            ("Conv", vec!["x", "we"], "e", conv_attrs(1, 1, 0)),
            ("Sigmoid", vec!["e"], "es", none()),
            ("Mul", vec!["e", "es"], "ea", none()),
            (
                "Conv",
                vec!["ea", "wd", "bd"],
                "d",
                conv_attrs(e as i64, 1, 1),
            ),
            ("Sigmoid", vec!["d"], "ds", none()),
            ("Mul", vec!["d", "ds"], "da", none()),
            ("GlobalAveragePool", vec!["da"], "p", none()),
            ("Conv", vec!["p", "w1", "b1"], "q", conv_attrs(1, 1, 0)),
            ("Relu", vec!["q"], "qr", none()),
            ("Conv", vec!["qr", "w2", "b2"], "z", conv_attrs(1, 1, 0)),
            ("Sigmoid", vec!["z"], "zs", none()),
            ("Mul", vec!["da", "zs"], "scaled", none()),
            ("Conv", vec!["scaled", "wp"], "y", conv_attrs(1, 1, 0)),
        ];
        for (op, ins, out, a) in steps {
            b.node(node(op, 17, &ins, &[out], a));
        }
        b.output("y");
        let before = build(b);
        let after = run_passes(before.clone(), &default_passes()).unwrap();
        assert_eq!(count(&after, "DepthwiseConvNhwc"), 1, "{:?}", ops(&after));
        assert_eq!(count(&after, "GlobalAveragePool"), 0, "{:?}", ops(&after));
        // Transposes of 4-D images with more than one pixel (not of weights or of the
        // `[N, C, 1, 1]` scale, which move no data).
        let image_transposes = after
            .nodes()
            .iter()
            .filter(|t| t.op_type == "Transpose")
            .filter(|t| {
                let v = t.inputs[0].expect("a transpose has an input");
                let shape = after.value(v).ty.fixed_shape().expect("static");
                shape.len() == 4 && shape[2..].iter().product::<usize>() > 1
            })
            .count();
        assert_eq!(image_transposes, 2, "{:?}", ops(&after));
        let inputs = vec![("x".to_string(), rng.f32s(&[n, c, h, w]))];
        assert_same_outputs(&before, &after, &inputs, 1e-4);
    }

    /// A depthwise convolution (strided, padded unevenly) becomes the channels-last operator
    /// between transposes; grouped convolutions with several channels per group stay.
    #[test]
    fn depthwise_convolutions_go_channels_last_and_grouped_ones_stay() {
        let mut rng = Rng::new(32);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[1, 6, 9, 7]));
        b.initializer("wd", rng.f32s(&[6, 1, 3, 2]));
        b.initializer("bd", rng.f32s(&[6]));
        b.initializer("wg", rng.f32s(&[6, 2, 3, 3]));
        b.node(node(
            "Conv",
            17,
            &["x", "wd", "bd"],
            &["d"],
            attrs(vec![
                ("group", Attribute::Int(6)),
                ("strides", ints(&[2, 1])),
                ("pads", ints(&[1, 0, 0, 1])),
            ]),
        ));
        b.node(node("Conv", 17, &["x", "wg"], &["g"], conv_attrs(3, 1, 1)));
        b.output("d");
        b.output("g");
        let before = build(b);
        let after = run_then_dce(&DepthwiseChannelsLast, before.clone());
        assert_eq!(count(&after, "DepthwiseConvNhwc"), 1, "{:?}", ops(&after));
        assert_eq!(count(&after, "Conv"), 1, "{:?}", ops(&after));
        assert_eq!(count(&after, "Transpose"), 2, "{:?}", ops(&after));
        // The channels-last copy of a channels-first input is a kernel of its own (a
        // ConvNeXt block's 7×7 depthwise read it through 49 gathers per output vector).
        let copy =
            after
                .nodes()
                .iter()
                .find(|n| {
                    n.op_type == "Transpose"
                        && n.outputs[0].is_some_and(|y| {
                            after.value(y).users.iter().any(|(user, _)| {
                                after.nodes()[user.0].op_type == "DepthwiseConvNhwc"
                            })
                        })
                })
                .expect("a transpose feeds the depthwise convolution");
        assert!(copy.hints.materialize, "{:?}", copy.hints);
        let inputs = vec![("x".to_string(), rng.f32s(&[1, 6, 9, 7]))];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }

    /// `Relu(Transpose(a))` and `Add(Transpose(a), Transpose(b))` by the channels-first
    /// permutation become transposes of `Relu(a)` and `Add(a, b)`; a transpose by another
    /// permutation, and an add with a non-transposed input, stay where they are.
    #[test]
    fn channels_first_transposes_sink_below_elementwise_operators() {
        let mut rng = Rng::new(33);
        let mut b = GraphBuilder::new("g");
        b.input("a", f32_input(&[1, 3, 4, 5]));
        b.input("c", f32_input(&[1, 5, 3, 4]));
        let first = attrs(vec![("perm", ints(&[0, 3, 1, 2]))]);
        let other = attrs(vec![("perm", ints(&[0, 2, 1, 3]))]);
        b.node(node("Transpose", 17, &["a"], &["ta"], first.clone()));
        b.node(node("Relu", 17, &["ta"], &["r"], Attributes::new()));
        b.node(node("Transpose", 17, &["a"], &["tb"], first));
        b.node(node("Add", 17, &["r", "tb"], &["s"], Attributes::new()));
        b.node(node("Add", 17, &["s", "c"], &["u"], Attributes::new()));
        b.node(node("Transpose", 17, &["c"], &["tc"], other));
        b.node(node("Relu", 17, &["tc"], &["v"], Attributes::new()));
        b.output("u");
        b.output("v");
        let before = build(b);
        let after = run_then_dce(&SinkTransposes, before.clone());
        let kinds = ops(&after);
        // Relu and Add(r, tb) moved below one transpose each; Add(s, c) and the other
        // permutation's Relu read transposes as before.
        let transposes_read_by = |op: &str| {
            after
                .nodes()
                .iter()
                .filter(|n| n.op_type == op)
                .filter(|n| {
                    n.inputs.iter().flatten().any(|v| {
                        after
                            .value(*v)
                            .producer
                            .is_some_and(|(p, _)| after.nodes()[p.0].op_type == "Transpose")
                    })
                })
                .count()
        };
        assert_eq!(transposes_read_by("Relu"), 1, "{kinds:?}");
        assert_eq!(transposes_read_by("Add"), 1, "{kinds:?}");
        let inputs = vec![
            ("a".to_string(), rng.f32s(&[1, 3, 4, 5])),
            ("c".to_string(), rng.f32s(&[1, 5, 3, 4])),
        ];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// A Mix-FFN's `Transpose(to_first) → Reshape([N, C, HW]) → GELU → Transpose([0, 2, 1])`
    /// (a vision transformer's depthwise convolution between its products): after sinking and
    /// simplifying, no transpose is left; a reshape that does not flatten the pixels alone
    /// keeps its transpose.
    #[test]
    fn a_flattening_reshape_lets_the_transposes_around_an_activation_cancel() {
        let mut rng = Rng::new(35);
        let mut b = GraphBuilder::new("g");
        b.input("a", f32_input(&[2, 4, 6, 5]));
        b.node(node(
            "Transpose",
            17,
            &["a"],
            &["t"],
            attrs(vec![("perm", ints(&[0, 3, 1, 2]))]),
        ));
        b.initializer("flat", Tensor::new(vec![3], vec![2i64, 5, 24]).unwrap());
        b.node(node(
            "Reshape",
            17,
            &["t", "flat"],
            &["f"],
            Attributes::new(),
        ));
        b.initializer("half", Tensor::scalar(0.5f32));
        b.node(node("Mul", 17, &["f", "half"], &["h"], Attributes::new()));
        b.node(node("Erf", 17, &["h"], &["e"], Attributes::new()));
        b.node(node(
            "Transpose",
            17,
            &["e"],
            &["y"],
            attrs(vec![("perm", ints(&[0, 2, 1]))]),
        ));
        b.initializer("other", Tensor::new(vec![3], vec![2i64, 20, 6]).unwrap());
        b.node(node(
            "Reshape",
            17,
            &["t", "other"],
            &["z"],
            Attributes::new(),
        ));
        b.output("y");
        b.output("z");
        let before = build(b);
        let after = run_then_dce(&SinkTransposes, before.clone());
        let after = run_then_dce(&hidet_graph::passes::SimplifyChains, after);
        let transposes = after
            .nodes()
            .iter()
            .filter(|n| n.op_type == "Transpose")
            .count();
        assert_eq!(
            transposes,
            1,
            "only `z`'s transpose stays: {:?}",
            ops(&after)
        );
        let inputs = vec![("a".to_string(), rng.f32s(&[2, 4, 6, 5]))];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }
}

mod panel_weights {
    use super::*;

    /// The shape of the panels constant the first `ColumnPanels` node of `g` reads.
    fn stored_panels_shape(g: &hidet_graph::Graph) -> Option<Vec<usize>> {
        let node = g.nodes().iter().find(|n| n.op_type == "ColumnPanels")?;
        g.value(node.inputs[0]?).ty.fixed_shape()
    }

    /// A constant right operand at least 16 columns wide, and a constant left operand at
    /// least 16 rows high (given as such or as the transpose of a constant), are stored as
    /// panels read through `hidet::ColumnPanels` (16 columns of the right operand, the
    /// pass's `left_panel_rows` rows of a left one); a narrower one, and products of two
    /// non-constant operands, stay.
    #[test]
    fn constant_operands_become_panels() {
        let mut rng = Rng::new(41);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[5, 7]));
        b.input("z", f32_input(&[37, 3]));
        b.initializer("w", rng.f32s(&[7, 37]));
        b.initializer("narrow", rng.f32s(&[7, 9]));
        b.initializer("short", rng.f32s(&[3, 5]));
        b.initializer("tall", rng.f32s(&[20, 5]));
        b.initializer("tall_t", rng.f32s(&[5, 20]));
        b.node(node("MatMul", 17, &["x", "w"], &["y"], Attributes::new()));
        b.node(node(
            "MatMul",
            17,
            &["x", "narrow"],
            &["n"],
            Attributes::new(),
        ));
        b.node(node(
            "MatMul",
            17,
            &["short", "x"],
            &["s"],
            Attributes::new(),
        ));
        b.node(node(
            "MatMul",
            17,
            &["tall", "x"],
            &["t"],
            Attributes::new(),
        ));
        b.node(node(
            "Transpose",
            17,
            &["tall_t"],
            &["tall_2"],
            attrs(vec![("perm", ints(&[1, 0]))]),
        ));
        b.node(node(
            "MatMul",
            17,
            &["tall_2", "x"],
            &["u"],
            Attributes::new(),
        ));
        b.node(node("MatMul", 17, &["y", "z"], &["v"], Attributes::new()));
        for out in ["y", "n", "s", "t", "u", "v"] {
            b.output(out);
        }
        let before = build(b);
        let inputs = vec![
            ("x".to_string(), rng.f32s(&[5, 7])),
            ("z".to_string(), rng.f32s(&[37, 3])),
        ];
        for left_panel_rows in [16, 6] {
            let pass = PanelConstantWeights {
                left_panel_rows,
                derived: None,
            };
            let after = run_then_dce(&pass, before.clone());
            assert_eq!(count(&after, "ColumnPanels"), 3, "{:?}", ops(&after));
            assert_eq!(count(&after, "MatMul"), 6, "{:?}", ops(&after));
            // The right operand's panels are 16 wide, the two left operands' as asked.
            let mut widths: Vec<i64> = after
                .nodes()
                .iter()
                .filter(|n| n.op_type == "ColumnPanels")
                .map(|n| n.attrs.int_or("width", 16).unwrap())
                .collect();
            widths.sort();
            let mut want = vec![16, left_panel_rows as i64, left_panel_rows as i64];
            want.sort();
            assert_eq!(widths, want);
            assert_same_outputs(&before, &after, &inputs, 0.0);
        }
    }

    /// Products of one constant weight (a recurrent layer's steps) read one panels constant,
    /// each through its own `ColumnPanels` node (its product's prologue).
    #[test]
    fn products_of_one_weight_share_its_panels() {
        let mut rng = Rng::new(43);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[3, 20]));
        b.initializer("w", rng.f32s(&[20, 20]));
        b.node(node("MatMul", 17, &["x", "w"], &["h1"], Attributes::new()));
        b.node(node("MatMul", 17, &["h1", "w"], &["h2"], Attributes::new()));
        b.node(node("MatMul", 17, &["h2", "w"], &["h3"], Attributes::new()));
        b.output("h3");
        let before = build(b);
        let inputs = vec![("x".to_string(), rng.f32s(&[3, 20]))];
        let after = run_then_dce(&PanelConstantWeights::default(), before.clone());
        assert_eq!(count(&after, "ColumnPanels"), 3, "{:?}", ops(&after));
        let sources: std::collections::HashSet<_> = after
            .nodes()
            .iter()
            .filter(|n| n.op_type == "ColumnPanels")
            .map(|n| n.inputs[0])
            .collect();
        assert_eq!(sources.len(), 1, "one panels constant");
        assert_eq!(after.initializers().count(), 1, "the weight itself is gone");
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// With a memo of derived constants (a backend's, kept across one model's input shapes),
    /// a weight is packed once: the second run of the pass reads the first one's panels.
    #[test]
    fn a_memo_packs_each_weight_once_across_runs() {
        let mut rng = Rng::new(44);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[3, 20]));
        b.initializer("w", rng.f32s(&[20, 37]));
        b.node(node("MatMul", 17, &["x", "w"], &["y"], Attributes::new()));
        b.output("y");
        let before = build(b);
        let pass = PanelConstantWeights {
            derived: Some(std::sync::Arc::default()),
            ..PanelConstantWeights::default()
        };
        let panels = |g: &hidet_graph::Graph| {
            let (_, t) = g.initializers().next().expect("one constant: the panels");
            t.clone()
        };
        let first = run_then_dce(&pass, before.clone());
        let second = run_then_dce(&pass, before.clone());
        assert_eq!(panels(&first).shape(), &[3, 20, 16]);
        assert!(panels(&first).same_storage(&panels(&second)));
        assert_eq!(pass.derived.as_ref().map(|m| m.len()), Some(1));
        let inputs = vec![("x".to_string(), rng.f32s(&[3, 20]))];
        assert_same_outputs(&before, &second, &inputs, 0.0);
    }

    /// A batched product with a constant right operand at least 16 columns wide stores each
    /// of its matrices as panels (`[L, ⌈N/16⌉, K, 16]`); a batched constant left operand
    /// stays (the CPU template packs a batched `A`).
    #[test]
    fn batched_constant_right_operands_become_panels() {
        let mut rng = Rng::new(42);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[3, 5, 7]));
        b.input("z", f32_input(&[3, 7, 4]));
        b.initializer("w", rng.f32s(&[3, 7, 19]));
        b.initializer("left", rng.f32s(&[3, 20, 5]));
        b.node(node("MatMul", 17, &["x", "w"], &["y"], Attributes::new()));
        b.node(node(
            "MatMul",
            17,
            &["left", "x"],
            &["l"],
            Attributes::new(),
        ));
        b.node(node("MatMul", 17, &["x", "z"], &["v"], Attributes::new()));
        for out in ["y", "l", "v"] {
            b.output(out);
        }
        let before = build(b);
        let inputs = vec![
            ("x".to_string(), rng.f32s(&[3, 5, 7])),
            ("z".to_string(), rng.f32s(&[3, 7, 4])),
        ];
        let after = run_then_dce(&PanelConstantWeights::default(), before.clone());
        assert_eq!(count(&after, "ColumnPanels"), 1, "{:?}", ops(&after));
        assert_eq!(stored_panels_shape(&after), Some(vec![3, 2, 7, 16]));
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// A constant left matrix viewed as a batch of one (`Reshape(Transpose(Wᵀ), [1, M, K])`,
    /// how a pointwise convolution of several images reads its weight) beside a batch of
    /// right operands is stored as panels of rows, viewed the same way; a view that is not a
    /// batch of one stays.
    #[test]
    fn a_left_weight_viewed_as_a_batch_of_one_becomes_panels() {
        let mut rng = Rng::new(43);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[3, 7, 13]));
        b.input("z", f32_input(&[2, 7, 13]));
        b.initializer("w_t", rng.f32s(&[7, 20]));
        b.initializer("v_t", rng.f32s(&[7, 20]));
        b.initializer("one", i64s(&[1, 20, 7]));
        b.initializer("two", i64s(&[2, 10, 7]));
        let perm = || attrs(vec![("perm", ints(&[1, 0]))]);
        b.node(node("Transpose", 17, &["w_t"], &["w"], perm()));
        b.node(node(
            "Reshape",
            17,
            &["w", "one"],
            &["w1"],
            Attributes::new(),
        ));
        b.node(node("MatMul", 17, &["w1", "x"], &["y"], Attributes::new()));
        b.node(node("Transpose", 17, &["v_t"], &["v"], perm()));
        b.node(node(
            "Reshape",
            17,
            &["v", "two"],
            &["v2"],
            Attributes::new(),
        ));
        b.node(node("MatMul", 17, &["v2", "z"], &["u"], Attributes::new()));
        b.output("y");
        b.output("u");
        let before = build(b);
        let inputs = vec![
            ("x".to_string(), rng.f32s(&[3, 7, 13])),
            ("z".to_string(), rng.f32s(&[2, 7, 13])),
        ];
        let pass = PanelConstantWeights {
            left_panel_rows: 6,
            ..PanelConstantWeights::default()
        };
        let after = run_then_dce(&pass, before.clone());
        assert_eq!(count(&after, "ColumnPanels"), 1, "{:?}", ops(&after));
        assert_eq!(stored_panels_shape(&after), Some(vec![4, 7, 6]));
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }
}

/// The default pipeline on a block with all of it: shape arithmetic, Conv + BN + Relu,
/// a duplicated branch, Identity and Reshape chains.
#[test]
fn default_pipeline_on_a_small_model() {
    let mut rng = Rng::new(50);
    let mut b = GraphBuilder::new("g");
    b.input("x", f32_input(&[1, 3, 9, 11]));
    b.initializer("w", rng.f32s(&[4, 3, 3, 3]));
    b.initializer("cb", rng.f32s(&[4]));
    for (n, t) in [
        ("scale", rng.f32s(&[4])),
        ("bias", rng.f32s(&[4])),
        ("mean", rng.f32s(&[4])),
        ("var", rng.positive(&[4], 0.5, 2.0)),
    ] {
        b.initializer(n, t);
    }
    b.initializer("zero", Tensor::scalar(0i64));
    b.initializer("axes0", i64s(&[0]));
    b.initializer("minus1", i64s(&[-1]));
    b.initializer("fc", rng.f32s(&[4 * 9 * 11, 5]));
    b.node(node(
        "Conv",
        17,
        &["x", "w", "cb"],
        &["c"],
        attrs(vec![("pads", ints(&[1, 1, 1, 1]))]),
    ));
    b.node(node(
        "BatchNormalization",
        17,
        &["c", "scale", "bias", "mean", "var"],
        &["bn"],
        Attributes::new(),
    ));
    b.node(node("Relu", 17, &["bn"], &["r1"], Attributes::new()));
    b.node(node("Relu", 17, &["bn"], &["r2"], Attributes::new()));
    b.node(node("Add", 17, &["r1", "r2"], &["s"], Attributes::new()));
    b.node(node("Identity", 17, &["s"], &["si"], Attributes::new()));
    b.node(node("Shape", 17, &["si"], &["shape"], Attributes::new()));
    b.node(node(
        "Gather",
        17,
        &["shape", "zero"],
        &["d0"],
        attrs(vec![("axis", Attribute::Int(0))]),
    ));
    b.node(node(
        "Unsqueeze",
        17,
        &["d0", "axes0"],
        &["d0v"],
        Attributes::new(),
    ));
    b.node(node(
        "Concat",
        17,
        &["d0v", "minus1"],
        &["target"],
        attrs(vec![("axis", Attribute::Int(0))]),
    ));
    b.node(node(
        "Reshape",
        17,
        &["si", "target"],
        &["flat"],
        Attributes::new(),
    ));
    b.node(node(
        "MatMul",
        17,
        &["flat", "fc"],
        &["out"],
        Attributes::new(),
    ));
    b.output("out");
    let before = build(b);
    let after = run_passes(before.clone(), &default_passes()).unwrap();
    // The convolution (with the BN folded into it; 4 output channels over a 27-element
    // window) becomes a direct convolution: its input padded once (`Pad`), the product
    // pixels as rows (`OffsetGather`, through offset tables) stored channels-last, and the
    // transpose back to channels-first sunk below the element-wise operators.
    assert_eq!(
        ops(&after),
        vec![
            "Pad",
            "OffsetGather",
            "MatMul",
            "Add",
            "Reshape",
            "Relu",
            "Add",
            "Transpose",
            "Reshape",
            "MatMul"
        ]
    );
    assert!(
        after
            .initializers()
            .all(|(v, _)| !after.value(v).users.is_empty()),
        "only read initializers remain"
    );
    let inputs = vec![("x".to_string(), rng.f32s(&[1, 3, 9, 11]))];
    assert_same_outputs(&before, &after, &inputs, 1e-5);
}
