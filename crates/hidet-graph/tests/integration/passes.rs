//! Each graph pass alone: build a small graph, run the pass, check the structure, and check
//! that the reference executor gives the same outputs before and after on random non-zero
//! inputs.

use crate::passes_util;

use std::sync::Arc;

use hidet_graph::passes::{
    exact_cast, BatchNormFolding, CommonSubexpressionElimination, ConstantFolding, ConvDeadTaps,
    ConvPaddingRegions, ConvTransposeAsMatMul, ConvTransposeAsPhases, DeadCodeElimination,
    EinsumAsMatMul, FlattenBatchedMatMul, GemmToMatMul, GemmWeights, GraphPass, PoolAfterPointwise,
    ResizeByAxis, SimplifyChains,
};
use hidet_graph::{Attribute, Attributes, DType, Dim, GraphBuilder, Tensor, TensorType};
use passes_util::*;

/// Runs `pass` and then DCE (the folding passes leave dead producers for DCE).
fn run_then_dce(pass: &dyn GraphPass, g: hidet_graph::Graph) -> hidet_graph::Graph {
    let g = pass.run(g).expect("pass succeeds");
    DeadCodeElimination.run(g).expect("dce succeeds")
}

mod constant_folding {
    use super::*;

    /// The shape arithmetic of a static-shape export: Shape → Gather → Unsqueeze → Concat →
    /// Reshape becomes a Reshape by a constant shape.
    #[test]
    fn static_shape_chain_becomes_constant_reshape() {
        let mut rng = Rng::new(1);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[3, 5, 7]));
        b.initializer("zero", Tensor::scalar(0i64));
        b.initializer("axes0", i64s(&[0]));
        b.initializer("minus1", i64s(&[-1]));
        b.node(node("Shape", 17, &["x"], &["shape"], Attributes::new()));
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
            &["x", "target"],
            &["y"],
            Attributes::new(),
        ));
        b.node(node("Relu", 17, &["y"], &["out"], Attributes::new()));
        b.output("out");
        let before = build(b);
        let after = run_then_dce(&ConstantFolding, before.clone());
        assert_eq!(ops(&after), vec!["Reshape", "Relu"]);
        let reshape = &after.nodes()[0];
        let target = reshape.inputs[1].expect("Reshape has a shape input");
        let t = after
            .value(target)
            .initializer
            .as_ref()
            .expect("the shape is an initializer");
        assert_eq!(t.to_i64_vec(), vec![3, -1]);
        let inputs = vec![("x".to_string(), rng.f32s(&[3, 5, 7]))];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// A mask built from constants only (Cast, Equal, Where, Mul) folds into one constant that
    /// the runtime Add reads.
    #[test]
    fn mask_construction_folds() {
        let mut rng = Rng::new(2);
        let (r, c) = (5, 6);
        let tri: Vec<i64> = (0..r * c).map(|i| i64::from(i % c <= i / c)).collect();
        let mut b = GraphBuilder::new("g");
        b.input("scores", f32_input(&[2, r, c]));
        b.initializer("tri", Tensor::new(vec![r, c], tri).unwrap());
        b.initializer("one", Tensor::scalar(1i64));
        b.initializer("neg", Tensor::scalar(-1e4f32));
        b.initializer("zero", Tensor::scalar(0.0f32));
        b.initializer("scale", Tensor::scalar(0.5f32));
        b.node(node(
            "Equal",
            17,
            &["tri", "one"],
            &["keep"],
            Attributes::new(),
        ));
        b.node(node(
            "Where",
            17,
            &["keep", "zero", "neg"],
            &["bias"],
            Attributes::new(),
        ));
        b.node(node(
            "Mul",
            17,
            &["bias", "scale"],
            &["bias2"],
            Attributes::new(),
        ));
        b.node(node(
            "Add",
            17,
            &["scores", "bias2"],
            &["out"],
            Attributes::new(),
        ));
        b.output("out");
        let before = build(b);
        let after = run_then_dce(&ConstantFolding, before.clone());
        assert_eq!(ops(&after), vec!["Add"]);
        let inputs = vec![("scores".to_string(), rng.f32s(&[2, r, c]))];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// GPT-2's causal-mask construction (ConstantOfShape, Range, Trilu, Equal, Where, Expand,
    /// Slice-free) has no runtime input: it becomes one constant the runtime Add reads.
    #[test]
    fn attention_mask_chain_folds() {
        let mut rng = Rng::new(5);
        let (heads, seq) = (3, 7);
        let mut b = GraphBuilder::new("g");
        b.input("scores", f32_input(&[2, heads, seq, seq]));
        b.initializer("sq", i64s(&[seq as i64, seq as i64]));
        b.initializer("r0", Tensor::scalar(0i64));
        b.initializer("rn", Tensor::scalar(seq as i64));
        b.initializer("r1", Tensor::scalar(1i64));
        b.initializer("zero_i", Tensor::scalar(0i64));
        b.initializer("zero_f", Tensor::scalar(0.0f32));
        b.initializer("neg", Tensor::scalar(-3.0e4f32));
        b.initializer("full", i64s(&[1, 1, seq as i64, seq as i64]));
        let one = Tensor::new(vec![1], vec![1i64]).unwrap();
        b.node(node(
            "ConstantOfShape",
            17,
            &["sq"],
            &["ones"],
            attrs(vec![("value", Attribute::Tensor(one))]),
        ));
        b.node(node(
            "Trilu",
            17,
            &["ones", "r1"],
            &["upper"],
            attrs(vec![("upper", Attribute::Int(1))]),
        ));
        b.node(node(
            "Range",
            17,
            &["r0", "rn", "r1"],
            &["pos"],
            Attributes::new(),
        ));
        b.node(node(
            "Mul",
            17,
            &["upper", "pos"],
            &["weighted"],
            Attributes::new(),
        ));
        b.node(node(
            "Equal",
            17,
            &["weighted", "zero_i"],
            &["allowed"],
            Attributes::new(),
        ));
        b.node(node(
            "Where",
            17,
            &["allowed", "zero_f", "neg"],
            &["bias"],
            Attributes::new(),
        ));
        b.node(node(
            "Expand",
            17,
            &["bias", "full"],
            &["bias4"],
            Attributes::new(),
        ));
        b.node(node(
            "Add",
            17,
            &["scores", "bias4"],
            &["out"],
            Attributes::new(),
        ));
        b.output("out");
        let before = build(b);
        let after = run_then_dce(&ConstantFolding, before.clone());
        assert_eq!(ops(&after), vec!["Add"]);
        let add = &after.nodes()[0];
        let c = after
            .value(add.inputs[1].unwrap())
            .initializer
            .as_ref()
            .expect("folded mask");
        assert_eq!(c.shape(), &[1, 1, seq, seq]);
        let inputs = vec![("scores".to_string(), rng.f32s(&[2, heads, seq, seq]))];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// `Shape` of a symbolic input stays; the Constant-only side still folds.
    #[test]
    fn symbolic_shape_is_not_folded() {
        let mut rng = Rng::new(3);
        let mut b = GraphBuilder::new("g");
        b.input(
            "x",
            TensorType {
                dtype: DType::F32,
                shape: Some(vec![Dim::Symbol(Arc::from("N")), Dim::Fixed(4)]),
            },
        );
        b.initializer("a", rng.f32s(&[4]));
        b.initializer("b", rng.f32s(&[4]));
        b.node(node("Shape", 17, &["x"], &["s"], Attributes::new()));
        b.node(node("Reshape", 17, &["x", "s"], &["y"], Attributes::new()));
        b.node(node("Sub", 17, &["a", "b"], &["d"], Attributes::new()));
        b.node(node("Mul", 17, &["y", "d"], &["out"], Attributes::new()));
        b.output("out");
        let before = build(b);
        let after = run_then_dce(&ConstantFolding, before.clone());
        assert_eq!(ops(&after), vec!["Shape", "Reshape", "Mul"]);
        let inputs = vec![("x".to_string(), rng.f32s(&[6, 4]))];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// An output larger than the bound stays a node; a graph output computed from constants
    /// keeps its name.
    #[test]
    fn size_bound_and_constant_output() {
        let mut rng = Rng::new(4);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[3]));
        // Expanding to [4097, 4097] would be 16.8 M elements: over the bound.
        b.initializer(
            "col",
            Tensor::new(vec![4097, 1], vec![1.5f32; 4097]).unwrap(),
        );
        b.initializer("to", i64s(&[4097, 4097]));
        b.initializer("p", rng.f32s(&[3]));
        b.initializer("q", rng.f32s(&[3]));
        b.node(node(
            "Expand",
            17,
            &["col", "to"],
            &["big"],
            Attributes::new(),
        ));
        b.node(node("Mul", 17, &["p", "q"], &["pq"], Attributes::new()));
        b.node(node("Add", 17, &["x", "pq"], &["out"], Attributes::new()));
        b.output("out");
        b.output("pq");
        b.output("big");
        let before = build(b);
        let after = run_then_dce(&ConstantFolding, before.clone());
        // `big` is not materialized; `pq` is a constant copied into the output.
        assert_eq!(count(&after, "Mul"), 0);
        assert_eq!(count(&after, "Add"), 1);
        assert_eq!(count(&after, "Expand"), 1);
        assert_eq!(count(&after, "Identity"), 1, "{:?}", ops(&after));
        let names: Vec<&str> = after
            .outputs()
            .iter()
            .map(|o| after.value(*o).name.as_str())
            .collect();
        assert_eq!(names, vec!["out", "pq", "big"]);
        let inputs = vec![("x".to_string(), rng.f32s(&[3]))];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }
}

mod simplify {
    use super::*;

    fn cast(to: DType) -> Attributes {
        attrs(vec![("to", Attribute::Int(i64::from(to.onnx_code())))])
    }

    #[test]
    fn identity_dropout_and_same_cast_are_removed() {
        let mut rng = Rng::new(10);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[4, 3]));
        b.node(node("Identity", 17, &["x"], &["a"], Attributes::new()));
        b.node(node("Dropout", 17, &["a"], &["d"], Attributes::new()));
        b.node(node("Cast", 17, &["d"], &["c"], cast(DType::F32)));
        b.node(node("Exp", 17, &["c"], &["e"], Attributes::new()));
        b.node(node("Identity", 17, &["e"], &["out"], Attributes::new()));
        b.output("out");
        let before = build(b);
        let after = run_then_dce(&SimplifyChains, before.clone());
        assert_eq!(ops(&after), vec!["Exp"]);
        let inputs = vec![("x".to_string(), rng.f32s(&[4, 3]))];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// An Identity from a graph input to a graph output is the interface itself: kept.
    #[test]
    fn identity_between_input_and_output_is_kept() {
        let mut rng = Rng::new(11);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[2]));
        b.node(node("Identity", 17, &["x"], &["out"], Attributes::new()));
        b.output("out");
        let before = build(b);
        let after = run_then_dce(&SimplifyChains, before.clone());
        assert_eq!(ops(&after), vec!["Identity"]);
        assert_same_outputs(&before, &after, &[("x".into(), rng.f32s(&[2]))], 0.0);
    }

    #[test]
    fn exact_cast_table() {
        assert!(exact_cast(DType::F16, DType::F32));
        assert!(exact_cast(DType::I8, DType::I32));
        assert!(exact_cast(DType::U8, DType::I16));
        assert!(exact_cast(DType::Bool, DType::F32));
        assert!(exact_cast(DType::I16, DType::F32));
        assert!(!exact_cast(DType::I32, DType::F32));
        assert!(!exact_cast(DType::F32, DType::F16));
        assert!(!exact_cast(DType::I8, DType::U32));
        assert!(!exact_cast(DType::U8, DType::I8));
        assert!(!exact_cast(DType::F16, DType::BF16));
        assert!(!exact_cast(DType::F32, DType::I64));
    }

    /// Cast chains: a round trip through a wider type disappears, a widening then narrowing
    /// becomes one Cast, a lossy first cast keeps both.
    #[test]
    fn cast_chains() {
        let mut rng = Rng::new(12);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[7]));
        b.input("i", TensorType::fixed(DType::I8, &[7]));
        // f32 → f64 → f32: removed.
        b.node(node("Cast", 17, &["x"], &["x64"], cast(DType::F64)));
        b.node(node("Cast", 17, &["x64"], &["x32"], cast(DType::F32)));
        b.node(node("Neg", 17, &["x32"], &["o1"], Attributes::new()));
        // i8 → i32 → f32: one Cast(i8 → f32).
        b.node(node("Cast", 17, &["i"], &["i32"], cast(DType::I32)));
        b.node(node("Cast", 17, &["i32"], &["if"], cast(DType::F32)));
        b.node(node("Neg", 17, &["if"], &["o2"], Attributes::new()));
        // f32 → i32 → f32 (truncation): kept.
        b.node(node("Cast", 17, &["x"], &["xi"], cast(DType::I32)));
        b.node(node("Cast", 17, &["xi"], &["xf"], cast(DType::F32)));
        b.node(node("Neg", 17, &["xf"], &["o3"], Attributes::new()));
        b.output("o1");
        b.output("o2");
        b.output("o3");
        let before = build(b);
        let after = run_then_dce(&SimplifyChains, before.clone());
        assert_eq!(count(&after, "Cast"), 3, "{:?}", ops(&after));
        let merged = after
            .nodes()
            .iter()
            .find(|n| n.op_type == "Cast" && after.value(n.inputs[0].unwrap()).name == "i")
            .expect("one Cast reads i");
        assert_eq!(after.value(merged.outputs[0].unwrap()).ty.dtype, DType::F32);
        let i8s: Vec<i8> = (0..7).map(|_| (rng.nonzero() * 60.0) as i8).collect();
        let inputs = vec![
            ("x".to_string(), rng.f32s(&[7]).reshape(vec![7]).unwrap()),
            ("i".to_string(), Tensor::new(vec![7], i8s).unwrap()),
        ];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// Reshape chains (with 0 and -1 entries) merge into one, a Reshape to the same shape
    /// disappears, and static Squeeze/Unsqueeze/Flatten become Reshapes that merge too.
    #[test]
    fn reshape_chains() {
        let mut rng = Rng::new(13);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[3, 5, 7]));
        b.initializer("s1", i64s(&[0, -1]));
        b.initializer("s2", i64s(&[7, 15]));
        b.initializer("s3", i64s(&[105]));
        b.initializer("same", i64s(&[3, 5, 7]));
        b.initializer("ax", i64s(&[0, 3]));
        b.node(node(
            "Reshape",
            17,
            &["x", "same"],
            &["x0"],
            Attributes::new(),
        ));
        b.node(node(
            "Reshape",
            17,
            &["x0", "s1"],
            &["a"],
            Attributes::new(),
        ));
        b.node(node(
            "Reshape",
            17,
            &["a", "s2"],
            &["b2"],
            Attributes::new(),
        ));
        b.node(node(
            "Reshape",
            17,
            &["b2", "s3"],
            &["c"],
            Attributes::new(),
        ));
        b.node(node("Exp", 17, &["c"], &["o1"], Attributes::new()));
        b.node(node(
            "Unsqueeze",
            17,
            &["x", "ax"],
            &["u"],
            Attributes::new(),
        ));
        b.node(node(
            "Flatten",
            17,
            &["u"],
            &["f"],
            attrs(vec![("axis", Attribute::Int(2))]),
        ));
        b.node(node("Exp", 17, &["f"], &["o2"], Attributes::new()));
        b.output("o1");
        b.output("o2");
        let before = build(b);
        let after = run_then_dce(&SimplifyChains, before.clone());
        assert_eq!(ops(&after), vec!["Reshape", "Exp", "Reshape", "Exp"]);
        for n in after.nodes().iter().filter(|n| n.op_type == "Reshape") {
            assert_eq!(
                after.value(n.inputs[0].unwrap()).name,
                "x",
                "reads x directly"
            );
        }
        let inputs = vec![("x".to_string(), rng.f32s(&[3, 5, 7]))];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// Transposes compose; an identity composition disappears.
    #[test]
    fn transpose_chains() {
        let mut rng = Rng::new(14);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[2, 3, 5]));
        let perm = |p: &[i64]| attrs(vec![("perm", ints(p))]);
        b.node(node("Transpose", 17, &["x"], &["t1"], perm(&[1, 2, 0])));
        b.node(node("Transpose", 17, &["t1"], &["t2"], perm(&[2, 0, 1])));
        b.node(node("Exp", 17, &["t2"], &["o1"], Attributes::new()));
        b.node(node("Transpose", 17, &["x"], &["u1"], perm(&[0, 2, 1])));
        b.node(node("Transpose", 17, &["u1"], &["u2"], perm(&[1, 0, 2])));
        b.node(node("Transpose", 17, &["u2"], &["u3"], Attributes::new()));
        b.output("o1");
        b.output("u3");
        let before = build(b);
        let after = run_then_dce(&SimplifyChains, before.clone());
        assert_eq!(count(&after, "Transpose"), 1, "{:?}", ops(&after));
        let t = after
            .nodes()
            .iter()
            .find(|n| n.op_type == "Transpose")
            .unwrap();
        assert_eq!(after.value(t.inputs[0].unwrap()).name, "x");
        let inputs = vec![("x".to_string(), rng.f32s(&[2, 3, 5]))];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }
}

mod cse {
    use super::*;

    /// Equal nodes merge (attributes compared structurally); different attributes do not;
    /// equal small constants merge so the nodes reading them merge too.
    #[test]
    fn identical_nodes_merge() {
        let mut rng = Rng::new(20);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[4, 6]));
        let w = rng.f32s(&[6]);
        b.initializer("w1", w.clone());
        b.initializer("w2", w);
        let perm = |p: &[i64]| attrs(vec![("perm", ints(p))]);
        b.node(node("Exp", 17, &["x"], &["e1"], Attributes::new()));
        b.node(node("Exp", 17, &["x"], &["e2"], Attributes::new()));
        b.node(node("Transpose", 17, &["e1"], &["t1"], perm(&[1, 0])));
        b.node(node("Transpose", 17, &["e2"], &["t2"], perm(&[1, 0])));
        b.node(node("Transpose", 17, &["e2"], &["t3"], perm(&[0, 1])));
        b.node(node("Mul", 17, &["x", "w1"], &["m1"], Attributes::new()));
        b.node(node("Mul", 17, &["x", "w2"], &["m2"], Attributes::new()));
        b.node(node("Mul", 17, &["t1", "t2"], &["d"], Attributes::new()));
        b.node(node("Add", 17, &["m1", "m2"], &["s"], Attributes::new()));
        b.node(node("Add", 17, &["s", "t3"], &["o1"], Attributes::new()));
        b.output("o1");
        b.output("d");
        b.output("t2");
        let before = build(b);
        let after = run_then_dce(&CommonSubexpressionElimination, before.clone());
        assert_eq!(count(&after, "Exp"), 1);
        assert_eq!(
            count(&after, "Transpose"),
            2,
            "perm [1,0] merged, [0,1] kept"
        );
        assert_eq!(
            count(&after, "Mul"),
            2,
            "equal constants merged: x·w once, plus t1·t2"
        );
        let sq = after
            .nodes()
            .iter()
            .find(|n| n.op_type == "Mul" && n.inputs[0] == n.inputs[1]);
        assert!(sq.is_some(), "t1·t2 reads one merged Transpose twice");
        let inputs = vec![("x".to_string(), rng.f32s(&[4, 6]))];
        assert_same_outputs(&before, &after, &inputs, 0.0);
    }

    /// Deferred initializers (weights a backend holds only in its own form) are not rebuilt
    /// to be compared: equal ones stay apart, and stay deferred.
    #[test]
    fn deferred_constants_are_not_rebuilt_to_be_compared() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[4, 6]));
        let w = vec![0.5f32, -1.25, 2.0, 3.5, -0.75, 1.0];
        b.initializer("w1", Tensor::new(vec![6], w.clone()).unwrap());
        b.initializer("w2", Tensor::new(vec![6], w.clone()).unwrap());
        b.node(node("Mul", 17, &["x", "w1"], &["m1"], Attributes::new()));
        b.node(node("Mul", 17, &["x", "w2"], &["m2"], Attributes::new()));
        b.node(node("Add", 17, &["m1", "m2"], &["o"], Attributes::new()));
        b.output("o");
        let mut graph = build(b);
        let ids: Vec<_> = graph.initializers().map(|(id, _)| id).collect();
        let mut stand_ins = Vec::new();
        for id in ids {
            let w = w.clone();
            let stand_in = Tensor::deferred(vec![6], move || w.clone()).unwrap();
            assert!(graph.replace_initializer(id, stand_in.clone()));
            stand_ins.push(stand_in);
        }
        let after = run_then_dce(&CommonSubexpressionElimination, graph);
        assert_eq!(count(&after, "Mul"), 2);
        assert!(stand_ins.iter().all(Tensor::is_deferred));
        assert_eq!(after.initializers().count(), 2);
    }
}

mod pool_after_pointwise {
    use super::*;

    /// `Conv(AveragePool(x), w, b) → Relu` with a 1×1 window and `oc` output channels of
    /// `c`, over the pooling attributes `pool`.
    fn pooled_conv(
        rng: &mut Rng,
        c: usize,
        oc: usize,
        pool: Attributes,
        bias: bool,
    ) -> hidet_graph::Graph {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[1, c, 11, 13]));
        b.initializer("w", rng.f32s(&[oc, c, 1, 1]));
        b.node(node("AveragePool", 19, &["x"], &["p"], pool));
        conv_relu_graph(b, rng, "p", oc, Attributes::new(), bias)
    }

    /// The pooling follows the convolution and the bias the pooling, with the same outputs
    /// up to rounding: with and without the padding in the divisor (a bias pooled with it
    /// would be scaled at the borders), strided and padded windows, with and without a bias.
    #[test]
    fn the_pooling_follows_a_pointwise_convolution_with_fewer_channels() {
        let mut rng = Rng::new(41);
        for count_pad in [0, 1] {
            for (kernel, pads, strides) in [
                ([3, 3], [1, 1, 1, 1], [1, 1]),
                ([2, 3], [0, 1, 1, 0], [2, 1]),
            ] {
                for bias in [true, false] {
                    let pool = attrs(vec![
                        ("kernel_shape", ints(&kernel)),
                        ("pads", ints(&pads)),
                        ("strides", ints(&strides)),
                        ("count_include_pad", Attribute::Int(count_pad)),
                    ]);
                    let before = pooled_conv(&mut rng, 7, 3, pool, bias);
                    let after = run_then_dce(&PoolAfterPointwise, before.clone());
                    let what = format!("count_include_pad {count_pad}, {kernel:?}, bias {bias}");
                    let mut want = vec!["Conv", "AveragePool"];
                    if bias {
                        want.push("Add");
                    }
                    want.push("Relu");
                    assert_eq!(ops(&after), want, "{what}");
                    let conv = &after.nodes()[0];
                    assert_eq!(conv.inputs.len(), 2, "{what}: the convolution has no bias");
                    let inputs = vec![("x".to_string(), rng.f32s(&[1, 7, 11, 13]))];
                    assert_same_outputs(&before, &after, &inputs, 1e-5);
                }
            }
        }
    }

    /// Kept: a convolution with as many output channels as it reads (pooling them first is
    /// no more work), a pooling read by another node too, a windowed convolution, a
    /// max-pooling.
    #[test]
    fn other_convolutions_and_poolings_stay() {
        let mut rng = Rng::new(42);
        let pool = || attrs(vec![("kernel_shape", ints(&[3, 3]))]);
        let same_channels = pooled_conv(&mut rng, 5, 5, pool(), true);
        let after = run_then_dce(&PoolAfterPointwise, same_channels);
        assert_eq!(ops(&after), vec!["AveragePool", "Conv", "Relu"]);

        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[1, 6, 9, 9]));
        b.initializer("w", rng.f32s(&[2, 6, 1, 1]));
        b.initializer("w3", rng.f32s(&[2, 6, 3, 3]));
        b.node(node("AveragePool", 19, &["x"], &["p"], pool()));
        b.node(node("Conv", 17, &["p", "w"], &["y"], Attributes::new()));
        b.node(node("Neg", 17, &["p"], &["n"], Attributes::new()));
        b.node(node("AveragePool", 19, &["x"], &["q"], pool()));
        b.node(node("Conv", 17, &["q", "w3"], &["z"], Attributes::new()));
        b.node(node("MaxPool", 12, &["x"], &["m"], pool()));
        b.node(node("Conv", 17, &["m", "w"], &["v"], Attributes::new()));
        for out in ["y", "n", "z", "v"] {
            b.output(out);
        }
        let before = build(b);
        let after = run_then_dce(&PoolAfterPointwise, before.clone());
        assert_eq!(ops(&after), ops(&before));
    }
}

mod batchnorm {
    use super::*;

    fn bn_params(b: &mut GraphBuilder, rng: &mut Rng, c: usize, p: &str) -> Vec<String> {
        let names: Vec<String> = ["scale", "bias", "mean", "var"]
            .iter()
            .map(|n| format!("{p}{n}"))
            .collect();
        b.initializer(&names[0], rng.f32s(&[c]));
        b.initializer(&names[1], rng.f32s(&[c]));
        b.initializer(&names[2], rng.f32s(&[c]));
        b.initializer(&names[3], rng.positive(&[c], 0.2, 3.0));
        names
    }

    fn bn(x: &str, p: &[String], y: &str) -> hidet_graph::NodeSpec {
        let ins = [x, &p[0], &p[1], &p[2], &p[3]];
        node(
            "BatchNormalization",
            15,
            &ins,
            &[y],
            attrs(vec![("epsilon", Attribute::Float(1e-3))]),
        )
    }

    #[test]
    fn conv_bn_folds_into_conv() {
        let mut rng = Rng::new(30);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[2, 3, 7, 9]));
        b.initializer("w", rng.f32s(&[5, 3, 3, 2]));
        b.initializer("cb", rng.f32s(&[5]));
        b.initializer("w2", rng.f32s(&[5, 3, 1, 1]));
        let p = bn_params(&mut b, &mut rng, 5, "a");
        let q = bn_params(&mut b, &mut rng, 5, "b");
        let conv = |ins: &[&str], out: &str| {
            node(
                "Conv",
                15,
                ins,
                &[out],
                attrs(vec![
                    ("pads", ints(&[1, 0, 1, 1])),
                    ("strides", ints(&[2, 1])),
                ]),
            )
        };
        b.node(conv(&["x", "w", "cb"], "c1"));
        b.node(bn("c1", &p, "y1"));
        b.node(conv(&["x", "w2"], "c2"));
        b.node(bn("c2", &q, "y2"));
        b.node(node("Relu", 15, &["y1"], &["o1"], Attributes::new()));
        b.output("o1");
        b.output("y2");
        let before = build(b);
        let after = run_then_dce(&BatchNormFolding, before.clone());
        assert_eq!(count(&after, "BatchNormalization"), 0);
        assert_eq!(count(&after, "Conv"), 2);
        assert_eq!(after.nodes().len(), 3, "{:?}", ops(&after));
        let inputs = vec![("x".to_string(), rng.f32s(&[2, 3, 7, 9]))];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }

    /// A BN after a node that cannot absorb it (or read twice) becomes Mul + Add.
    #[test]
    fn standalone_bn_becomes_mul_add() {
        let mut rng = Rng::new(31);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[2, 4, 3, 5]));
        let p = bn_params(&mut b, &mut rng, 4, "a");
        b.node(node("Exp", 15, &["x"], &["e"], Attributes::new()));
        b.node(bn("e", &p, "y"));
        b.output("y");
        let before = build(b);
        let after = run_then_dce(&BatchNormFolding, before.clone());
        assert_eq!(ops(&after), vec!["Exp", "Mul", "Add"]);
        let inputs = vec![("x".to_string(), rng.f32s(&[2, 4, 3, 5]))];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }

    /// MatMul (+ constant bias Add) followed by BN on the 2-D output folds into the weight.
    #[test]
    fn matmul_bn_folds_into_weight() {
        let mut rng = Rng::new(32);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[3, 11]));
        b.initializer("w", rng.f32s(&[11, 6]));
        b.initializer("bias", rng.f32s(&[6]));
        b.initializer("w2", rng.f32s(&[11, 6]));
        let p = bn_params(&mut b, &mut rng, 6, "a");
        let q = bn_params(&mut b, &mut rng, 6, "b");
        b.node(node("MatMul", 15, &["x", "w"], &["m"], Attributes::new()));
        b.node(node("Add", 15, &["m", "bias"], &["mb"], Attributes::new()));
        b.node(bn("mb", &p, "y1"));
        b.node(node("MatMul", 15, &["x", "w2"], &["m2"], Attributes::new()));
        b.node(bn("m2", &q, "y2"));
        b.node(node("Add", 15, &["y1", "y2"], &["out"], Attributes::new()));
        b.output("out");
        let before = build(b);
        let after = run_then_dce(&BatchNormFolding, before.clone());
        assert_eq!(count(&after, "BatchNormalization"), 0);
        assert_eq!(count(&after, "MatMul"), 2);
        assert_eq!(count(&after, "Add"), 3);
        assert_eq!(count(&after, "Mul"), 0);
        let inputs = vec![("x".to_string(), rng.f32s(&[3, 11]))];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }

    /// A `transB` Gemm followed by BN, with the weight left as stored
    /// (`GemmWeights::AsStored`): the BN scales the stored rows, and the weight stays a
    /// `Transpose` of a constant.
    #[test]
    fn bn_after_a_gemm_weight_read_as_stored_folds_into_its_rows() {
        let mut rng = Rng::new(33);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[3, 11]));
        b.initializer("w_t", rng.f32s(&[6, 11]));
        b.initializer("bias", rng.f32s(&[6]));
        let p = bn_params(&mut b, &mut rng, 6, "a");
        b.node(node(
            "Gemm",
            13,
            &["x", "w_t", "bias"],
            &["g"],
            attrs(vec![("transB", Attribute::Int(1))]),
        ));
        b.node(bn("g", &p, "y"));
        b.output("y");
        let before = build(b);
        let gemm = GemmToMatMul {
            weights: GemmWeights::AsStored,
        };
        let after = run_then_dce(&BatchNormFolding, gemm.run(before.clone()).unwrap());
        assert_eq!(ops(&after), vec!["Transpose", "MatMul", "Add"]);
        let transposed = &after.nodes()[0];
        let stored = after.value(transposed.inputs[0].unwrap());
        assert_eq!(
            stored.initializer.as_ref().map(|t| t.shape().to_vec()),
            Some(vec![6, 11])
        );
        let inputs = vec![("x".to_string(), rng.f32s(&[3, 11]))];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }

    /// Training mode is not touched.
    #[test]
    fn training_mode_is_kept() {
        let mut rng = Rng::new(33);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[2, 3, 4]));
        let p = bn_params(&mut b, &mut rng, 3, "a");
        let ins = ["x", &p[0], &p[1], &p[2], &p[3]];
        b.node(node(
            "BatchNormalization",
            15,
            &ins,
            &["y", "rm", "rv"],
            attrs(vec![("training_mode", Attribute::Int(1))]),
        ));
        b.output("y");
        let g = build(b);
        let after = BatchNormFolding.run(g).unwrap();
        assert_eq!(ops(&after), vec!["BatchNormalization"]);
    }
}

mod resolve {
    use super::*;
    use hidet_graph::{InferInput, OpError, Operator, Registry};

    /// A Gemm written for this test (f64 loops), used when the registry has none.
    #[derive(Debug)]
    struct RefGemm {
        alpha: f64,
        beta: f64,
        ta: bool,
        tb: bool,
    }

    impl Operator for RefGemm {
        fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
            let a = inputs[0]
                .ok_or(OpError::MissingInput(0))?
                .ty
                .fixed_shape()
                .unwrap();
            let b = inputs[1]
                .ok_or(OpError::MissingInput(1))?
                .ty
                .fixed_shape()
                .unwrap();
            let m = if self.ta { a[1] } else { a[0] };
            let n = if self.tb { b[0] } else { b[1] };
            Ok(vec![TensorType::fixed(DType::F32, &[m, n])])
        }

        fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
            let (a, b) = (inputs[0].unwrap(), inputs[1].unwrap());
            let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
            let (ar, ac) = (a.shape()[0], a.shape()[1]);
            let (br, bc) = (b.shape()[0], b.shape()[1]);
            let (m, k) = if self.ta { (ac, ar) } else { (ar, ac) };
            let n = if self.tb { br } else { bc };
            let at = |i: usize, p: usize| {
                if self.ta {
                    av[p * ac + i]
                } else {
                    av[i * ac + p]
                }
            };
            let bt = |p: usize, j: usize| {
                if self.tb {
                    bv[j * bc + p]
                } else {
                    bv[p * bc + j]
                }
            };
            let c = inputs.get(2).copied().flatten();
            let mut out = vec![0f32; m * n];
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0;
                    for p in 0..k {
                        s += at(i, p) * bt(p, j);
                    }
                    let mut v = self.alpha * s;
                    if let Some(c) = c {
                        let cv = c.to_f64_vec();
                        let cs = c.shape();
                        let ci = match cs.len() {
                            0 => 0,
                            1 => {
                                if cs[0] == 1 {
                                    0
                                } else {
                                    j
                                }
                            }
                            _ => {
                                (if cs[0] == 1 { 0 } else { i }) * cs[1]
                                    + if cs[1] == 1 { 0 } else { j }
                            }
                        };
                        v += self.beta * cv[ci];
                    }
                    out[i * n + j] = v as f32;
                }
            }
            Ok(vec![Tensor::new(vec![m, n], out)?])
        }
    }

    fn registry() -> &'static Registry {
        if Registry::global().lookup("", "Gemm", 13).is_some() {
            return Registry::global();
        }
        static R: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
        R.get_or_init(|| {
            let mut r = Registry::new();
            hidet_graph::ops::register_all(&mut r);
            r.register("", "Gemm", 11..=22, |c| {
                Ok(Box::new(RefGemm {
                    alpha: f64::from(c.attrs.float_or("alpha", 1.0)?),
                    beta: f64::from(c.attrs.float_or("beta", 1.0)?),
                    ta: c.attrs.int_or("transA", 0)? != 0,
                    tb: c.attrs.int_or("transB", 0)? != 0,
                }))
            });
            r
        })
    }

    /// Gemm variants: constant B (transposed and scaled ahead of time), runtime B and C
    /// (Transpose / Mul nodes), beta = 0.
    #[test]
    fn gemm_becomes_matmul() {
        let mut rng = Rng::new(40);
        let (m, k, n) = (5, 7, 3);
        let mut b = GraphBuilder::new("g");
        b.input("a", f32_input(&[k, m]));
        b.input("bt", f32_input(&[n, k]));
        b.input("c", f32_input(&[m, n]));
        b.initializer("w", rng.f32s(&[n, k]));
        b.initializer("bias", rng.f32s(&[n]));
        let gemm = |ins: &[&str], out: &str, alpha: f32, beta: f32| {
            node(
                "Gemm",
                13,
                ins,
                &[out],
                attrs(vec![
                    ("alpha", Attribute::Float(alpha)),
                    ("beta", Attribute::Float(beta)),
                    ("transA", Attribute::Int(1)),
                    ("transB", Attribute::Int(1)),
                ]),
            )
        };
        b.node(gemm(&["a", "w", "bias"], "y1", 0.75, 2.0));
        b.node(gemm(&["a", "bt", "c"], "y2", 1.5, -0.5));
        b.node(gemm(&["a", "bt", "c"], "y3", 1.0, 0.0));
        b.output("y1");
        b.output("y2");
        b.output("y3");
        let before = b.build(registry()).unwrap();
        let after = run_then_dce(&GemmToMatMul::default(), before.clone());
        assert_eq!(count(&after, "Gemm"), 0);
        assert_eq!(count(&after, "MatMul"), 3);
        // y1: constant weight pre-transposed: one Transpose (of a) + MatMul + Add.
        // y2: Transpose a, Transpose bt, MatMul, Mul alpha, Mul c·beta, Add.
        // y3: Transpose a, Transpose bt, MatMul (beta = 0 drops c).
        assert_eq!(count(&after, "Transpose"), 5, "{:?}", ops(&after));
        assert_eq!(count(&after, "Mul"), 2);
        assert_eq!(count(&after, "Add"), 2);
        let inputs = vec![
            ("a".to_string(), rng.f32s(&[k, m])),
            ("bt".to_string(), rng.f32s(&[n, k])),
            ("c".to_string(), rng.f32s(&[m, n])),
        ];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }

    /// A constant weight that needs no scaling: read as stored when not transposed; when
    /// transposed, through a `Transpose` node with [`GemmWeights::AsStored`], else as a new
    /// transposed initializer.
    #[test]
    fn gemm_weights_needing_no_scaling_are_not_copied() {
        let mut rng = Rng::new(42);
        let (m, k, n) = (6, 9, 5);
        let mut b = GraphBuilder::new("g");
        b.input("a", f32_input(&[m, k]));
        b.initializer("w_t", rng.f32s(&[n, k]));
        b.initializer("w", rng.f32s(&[k, n]));
        let gemm = |ins: &[&str], out: &str, trans_b: i64| {
            node(
                "Gemm",
                13,
                ins,
                &[out],
                attrs(vec![("transB", Attribute::Int(trans_b))]),
            )
        };
        b.node(gemm(&["a", "w_t"], "y1", 1));
        b.node(gemm(&["a", "w"], "y2", 0));
        b.output("y1");
        b.output("y2");
        let before = b.build(registry()).unwrap();
        let inputs = vec![("a".to_string(), rng.f32s(&[m, k]))];
        let stored = |g: &hidet_graph::Graph, name: &str| {
            let w = before
                .initializers()
                .find(|(id, _)| before.value(*id).name == name);
            let w = w.unwrap().1;
            g.initializers().any(|(_, t)| t.same_storage(w))
        };
        for (weights, transposes) in [(GemmWeights::AsStored, 1), (GemmWeights::Transposed, 0)] {
            let after = run_then_dce(&GemmToMatMul { weights }, before.clone());
            assert_eq!(count(&after, "Transpose"), transposes, "{weights:?}");
            assert_eq!(after.initializers().count(), 2, "{weights:?}");
            assert!(stored(&after, "w"), "{weights:?}: w read as stored");
            assert_eq!(stored(&after, "w_t"), transposes == 1, "{weights:?}");
            assert_same_outputs(&before, &after, &inputs, 1e-6);
        }
    }

    /// A batched input times a constant 2-D weight becomes a 2-D MatMul between Reshapes; two
    /// activations with the same batch axes become a batch matmul with one batch axis; a
    /// product that already has one batch axis, or whose batch axes differ (broadcast), stays.
    #[test]
    fn batched_matmul_by_weight_is_flattened() {
        let mut rng = Rng::new(41);
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&[2, 3, 5, 7]));
        b.input("y", f32_input(&[2, 3, 7, 4]));
        b.input("z", f32_input(&[1, 3, 7, 4]));
        b.input("u", f32_input(&[3, 7, 4]));
        b.initializer("w", rng.f32s(&[7, 6]));
        b.node(node("MatMul", 17, &["x", "w"], &["o1"], Attributes::new()));
        b.node(node("MatMul", 17, &["x", "y"], &["o2"], Attributes::new()));
        b.node(node("MatMul", 17, &["x", "z"], &["o3"], Attributes::new()));
        b.node(node("MatMul", 17, &["x", "u"], &["o4"], Attributes::new()));
        b.output("o1");
        b.output("o2");
        b.output("o3");
        b.output("o4");
        let before = build(b);
        let after = run_then_dce(&FlattenBatchedMatMul, before.clone());
        assert_eq!(
            ops(&after),
            vec![
                "Reshape", "MatMul", "Reshape", "Reshape", "Reshape", "MatMul", "Reshape",
                "MatMul", "MatMul"
            ]
        );
        let shape_of = |node: usize, input: usize| {
            let mm = &after.nodes()[node];
            after.value(mm.inputs[input].unwrap()).ty.fixed_shape()
        };
        assert_eq!(shape_of(1, 0), Some(vec![30, 7]));
        assert_eq!(shape_of(5, 0), Some(vec![6, 5, 7]));
        assert_eq!(shape_of(5, 1), Some(vec![6, 7, 4]));
        let inputs = vec![
            ("x".to_string(), rng.f32s(&[2, 3, 5, 7])),
            ("y".to_string(), rng.f32s(&[2, 3, 7, 4])),
            ("z".to_string(), rng.f32s(&[1, 3, 7, 4])),
            ("u".to_string(), rng.f32s(&[3, 7, 4])),
        ];
        assert_same_outputs(&before, &after, &inputs, 1e-6);
    }

    /// Batch axes along which only the left operand varies join its rows: multi-query
    /// attention (one key head for all query heads), a batch times a runtime matrix or a
    /// batch-of-one right operand; a left batch of one against trailing left-only axes;
    /// shared axes mixed with right-only ones stay. Outputs are unchanged.
    #[test]
    fn left_only_batch_axes_join_the_rows() {
        let mut rng = Rng::new(47);
        // (A's shape, B's shape, the product's operand shapes when rewritten).
        type Case<'a> = (&'a [usize], &'a [usize], Option<[&'a [usize]; 2]>);
        let cases: [Case; 6] = [
            (
                &[2, 4, 5, 7],
                &[2, 1, 7, 6],
                Some([&[2, 20, 7], &[2, 7, 6]]),
            ),
            (&[4, 5, 7], &[7, 6], Some([&[20, 7], &[7, 6]])),
            (&[3, 5, 7], &[1, 7, 6], Some([&[15, 7], &[7, 6]])),
            (
                &[1, 4, 5, 7],
                &[2, 1, 7, 6],
                Some([&[1, 20, 7], &[2, 7, 6]]),
            ),
            (&[1, 5, 7], &[2, 3, 7, 4], Some([&[1, 5, 7], &[6, 7, 4]])),
            (&[2, 1, 5, 7], &[2, 3, 7, 4], None),
        ];
        for (sa, sb, want) in cases {
            let mut b = GraphBuilder::new("g");
            b.input("a", f32_input(sa));
            b.input("b", f32_input(sb));
            b.node(node("MatMul", 17, &["a", "b"], &["y"], Attributes::new()));
            b.output("y");
            let before = build(b);
            let after = run_then_dce(&FlattenBatchedMatMul, before.clone());
            let product = after
                .nodes()
                .iter()
                .find(|n| n.op_type == "MatMul")
                .unwrap();
            let shapes: Vec<Vec<usize>> = product
                .inputs
                .iter()
                .map(|v| after.value(v.unwrap()).ty.fixed_shape().unwrap())
                .collect();
            let want: Vec<Vec<usize>> = match want {
                Some(w) => w.iter().map(|s| s.to_vec()).collect(),
                None => vec![sa.to_vec(), sb.to_vec()],
            };
            assert_eq!(shapes, want, "{sa:?} x {sb:?}");
            let inputs = vec![
                ("a".to_string(), rng.f32s(sa)),
                ("b".to_string(), rng.f32s(sb)),
            ];
            assert_same_outputs(&before, &after, &inputs, 1e-6);
        }
    }

    /// A 2-D left operand against a batched right one (a filterbank applied to spectrograms):
    /// a plain 2-D product for a batch of one, else the matrix broadcast as a batch of one
    /// against one batch axis.
    #[test]
    fn a_matrix_times_a_batch_is_a_product_the_template_takes() {
        let mut rng = Rng::new(43);
        let mut b = GraphBuilder::new("g");
        b.input("one", f32_input(&[1, 7, 9]));
        b.input("many", f32_input(&[2, 3, 7, 4]));
        b.initializer("w", rng.f32s(&[5, 7]));
        b.node(node(
            "MatMul",
            17,
            &["w", "one"],
            &["o1"],
            Attributes::new(),
        ));
        b.node(node(
            "MatMul",
            17,
            &["w", "many"],
            &["o2"],
            Attributes::new(),
        ));
        b.output("o1");
        b.output("o2");
        let before = build(b);
        let after = run_then_dce(&FlattenBatchedMatMul, before.clone());
        let shapes: Vec<Vec<Vec<usize>>> = after
            .nodes()
            .iter()
            .filter(|n| n.op_type == "MatMul")
            .map(|n| {
                n.inputs
                    .iter()
                    .map(|v| after.value(v.unwrap()).ty.fixed_shape().unwrap())
                    .collect()
            })
            .collect();
        assert_eq!(
            shapes,
            vec![
                vec![vec![5, 7], vec![7, 9]],
                vec![vec![1, 5, 7], vec![6, 7, 4]]
            ]
        );
        let inputs = vec![
            ("one".to_string(), rng.f32s(&[1, 7, 9])),
            ("many".to_string(), rng.f32s(&[2, 3, 7, 4])),
        ];
        assert_same_outputs(&before, &after, &inputs, 1e-6);
    }
}

/// Convolution taps that read only padding are dropped: DeepLab's dilation-36 3×3 over a
/// 32×32 map keeps its centre tap (a 1×1 without padding); dilation 24 keeps every tap on
/// that map but drops two per axis on a 20×20 one, asymmetric pads and strides drop one side
/// only; a grouped 1-D convolution with a bias; a convolution whose taps all read the image
/// stays as it is.
#[test]
fn conv_taps_reading_only_padding_are_dropped() {
    let mut rng = Rng::new(93);
    // (input, weight, attributes, bias, kernel after)
    type Case<'a> = (
        Vec<usize>,
        Vec<usize>,
        Vec<(&'a str, Attribute)>,
        bool,
        Vec<i64>,
    );
    let cases: Vec<Case> = vec![
        (
            vec![1, 8, 32, 32],
            vec![4, 8, 3, 3],
            vec![
                ("dilations", ints(&[36, 36])),
                ("pads", ints(&[36, 36, 36, 36])),
            ],
            true,
            vec![1, 1],
        ),
        (
            vec![1, 4, 20, 20],
            vec![3, 4, 3, 3],
            vec![
                ("dilations", ints(&[24, 24])),
                ("pads", ints(&[24, 24, 24, 24])),
            ],
            false,
            vec![1, 1],
        ),
        (
            vec![2, 3, 9, 7],
            vec![5, 3, 3, 4],
            vec![
                ("dilations", ints(&[5, 3])),
                ("pads", ints(&[10, 0, 2, 9])),
                ("strides", ints(&[2, 1])),
            ],
            true,
            vec![3, 3],
        ),
        (
            vec![1, 6, 5],
            vec![6, 3, 5],
            vec![
                ("group", Attribute::Int(2)),
                ("dilations", ints(&[4])),
                ("pads", ints(&[8, 8])),
            ],
            true,
            vec![3],
        ),
        (
            vec![1, 4, 32, 32],
            vec![3, 4, 3, 3],
            vec![
                ("dilations", ints(&[12, 12])),
                ("pads", ints(&[12, 12, 12, 12])),
            ],
            false,
            vec![3, 3],
        ),
    ];
    for (i, (xs, ws, list, bias, kernel)) in cases.into_iter().enumerate() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&xs));
        b.initializer("w", rng.f32s(&ws));
        let mut ins = vec!["x", "w"];
        if bias {
            b.initializer("b", rng.f32s(&[ws[0]]));
            ins.push("b");
        }
        b.node(node("Conv", 17, &ins, &["y"], attrs(list)));
        b.output("y");
        let before = build(b);
        let after = run_then_dce(&ConvDeadTaps, before.clone());
        assert_eq!(ops(&after), vec!["Conv"], "case {i}");
        let w = after.nodes()[0].inputs[1].unwrap();
        let shape = after.value(w).ty.fixed_shape().unwrap();
        let got: Vec<i64> = shape[2..].iter().map(|&d| d as i64).collect();
        assert_eq!(got, kernel, "case {i}: kernel after the pass");
        let inputs = vec![("x".to_string(), rng.f32s(&xs))];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }
}

/// A convolution whose taps mostly read padding is split into unpadded convolutions over the
/// regions of equal live taps, concatenated (9 regions for an atrous 3×3 at dilation 12 over
/// 16×16; 3 for a grouped 1-D one; 12 with a stride and uneven pads); the result is
/// the convolution's. Ordinary padding (3×3, pad 1, 16×16) and a small convolution stay.
#[test]
fn conv_mostly_reading_padding_is_split_into_regions() {
    let mut rng = Rng::new(94);
    // (input, weight, attributes, regions after: 0 when the node stays)
    type Case<'a> = (Vec<usize>, Vec<usize>, Vec<(&'a str, Attribute)>, usize);
    let cases: Vec<Case> = vec![
        (
            vec![1, 64, 16, 16],
            vec![32, 64, 3, 3],
            vec![
                ("dilations", ints(&[12, 12])),
                ("pads", ints(&[12, 12, 12, 12])),
            ],
            9,
        ),
        (
            vec![4, 128, 64],
            vec![128, 64, 3],
            vec![
                ("group", Attribute::Int(2)),
                ("dilations", ints(&[48])),
                ("pads", ints(&[48, 48])),
            ],
            3,
        ),
        (
            vec![1, 64, 21, 17],
            vec![48, 64, 3, 3],
            vec![
                ("dilations", ints(&[9, 7])),
                ("pads", ints(&[9, 8, 7, 7])),
                ("strides", ints(&[2, 1])),
            ],
            12,
        ),
        (
            vec![1, 64, 16, 16],
            vec![64, 64, 3, 3],
            vec![("pads", ints(&[1, 1, 1, 1]))],
            0,
        ),
        (
            vec![1, 4, 16, 16],
            vec![4, 4, 3, 3],
            vec![
                ("dilations", ints(&[12, 12])),
                ("pads", ints(&[12, 12, 12, 12])),
            ],
            0,
        ),
    ];
    for (i, (xs, ws, list, regions)) in cases.into_iter().enumerate() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&xs));
        b.initializer("w", rng.f32s(&ws));
        b.initializer("b", rng.f32s(&[ws[0]]));
        b.node(node("Conv", 17, &["x", "w", "b"], &["y"], attrs(list)));
        b.output("y");
        let before = build(b);
        let after = run_then_dce(&ConvPaddingRegions, before.clone());
        let convs = ops(&after).iter().filter(|o| *o == "Conv").count();
        assert_eq!(convs, regions.max(1), "case {i}: {:?}", ops(&after));
        if regions > 0 {
            for n in after.nodes().iter().filter(|n| n.op_type == "Conv") {
                let pads = n.attrs.ints("pads").unwrap().unwrap();
                assert!(
                    pads.iter().all(|&p| p == 0),
                    "case {i}: regions are unpadded"
                );
            }
        }
        let inputs = vec![("x".to_string(), rng.f32s(&xs))];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }
}

/// An interpolating Resize becomes one blend of gathered slices per resized axis, the last
/// axis first, each intermediate stored: bilinear `half_pixel` by scales (×2.5, ×3),
/// `align_corners` by sizes, trilinear `pytorch_half_pixel` with a downsampled axis, a
/// single-axis one, cubic with `exclude_outside`; the result is the Resize's. A nearest Resize
/// and a small one stay.
#[test]
fn interpolating_resizes_become_gathered_blends_per_axis() {
    let mut rng = Rng::new(95);
    let s = |v: &str| Attribute::String(v.into());
    // (input, scales or sizes, attributes, resized axes after (0: the Resize stays), taps)
    type Case<'a> = (
        Vec<usize>,
        Result<Vec<f32>, Vec<i64>>,
        Vec<(&'a str, Attribute)>,
        usize,
        usize,
    );
    let cases: Vec<Case> = vec![
        (
            vec![2, 3, 40, 30],
            Ok(vec![1.0, 1.0, 2.5, 3.0]),
            vec![("mode", s("linear"))],
            2,
            2,
        ),
        (
            vec![1, 5, 33, 47],
            Err(vec![1, 5, 70, 101]),
            vec![
                ("mode", s("linear")),
                ("coordinate_transformation_mode", s("align_corners")),
            ],
            2,
            2,
        ),
        (
            vec![1, 2, 9, 40, 36],
            Ok(vec![1.0, 1.0, 2.0, 0.5, 3.0]),
            vec![
                ("mode", s("linear")),
                ("coordinate_transformation_mode", s("pytorch_half_pixel")),
            ],
            3,
            2,
        ),
        (
            vec![2, 3, 40, 30],
            Ok(vec![1.0, 1.0, 2.0, 3.0]),
            vec![("mode", s("nearest"))],
            0,
            0,
        ),
        (
            vec![2, 3, 40, 300],
            Ok(vec![1.0, 1.0, 1.0, 3.0]),
            vec![("mode", s("linear"))],
            1,
            2,
        ),
        (
            vec![1, 4, 60, 90],
            Ok(vec![1.0, 1.0, 1.7, 2.0]),
            vec![("mode", s("cubic")), ("exclude_outside", Attribute::Int(1))],
            2,
            4,
        ),
        (
            vec![1, 1, 8, 8],
            Ok(vec![1.0, 1.0, 2.0, 2.0]),
            vec![("mode", s("linear"))],
            0,
            0,
        ),
    ];
    for (i, (xs, target, list, axes, taps)) in cases.into_iter().enumerate() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&xs));
        let ins = match target {
            Ok(scales) => {
                b.initializer("scales", Tensor::new(vec![scales.len()], scales).unwrap());
                vec!["x", "", "scales"]
            }
            Err(sizes) => {
                b.initializer("sizes", Tensor::new(vec![sizes.len()], sizes).unwrap());
                vec!["x", "", "", "sizes"]
            }
        };
        b.node(node("Resize", 17, &ins, &["y"], attrs(list)));
        b.output("y");
        let before = build(b);
        let after = run_then_dce(&ResizeByAxis, before.clone());
        let kinds = ops(&after);
        if axes == 0 {
            assert_eq!(kinds, vec!["Resize"], "case {i}");
        } else {
            let gathers = kinds.iter().filter(|k| *k == "Gather").count();
            assert_eq!(gathers, axes * taps, "case {i}: {kinds:?}");
            assert!(!kinds.iter().any(|k| k == "Resize"), "case {i}: {kinds:?}");
            let stored = after.nodes().iter().filter(|n| n.hints.materialize).count();
            assert_eq!(stored, axes - 1, "case {i}: intermediates are stored");
        }
        let inputs = vec![("x".to_string(), rng.f32s(&xs))];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }
}

/// ConvTranspose with constant weights becomes one Conv per output phase (∏ strides of
/// them), interleaved and cropped, or one Conv of all phases' weights stacked when every
/// kernel is a multiple of its stride (then a depth-to-space): 2-D with overlapping strided
/// taps and pads, unequal strides with output padding, 1-D, 3-D, `output_shape`, `auto_pad`,
/// stride 1, grouped (one grouped convolution per phase, or stacked; depthwise); the result is
/// the ConvTranspose's. Dilation, a kernel shorter than its stride and an `output_shape`
/// beyond the taps (negative padding) stay.
#[test]
fn conv_transpose_becomes_one_conv_per_phase() {
    let mut rng = Rng::new(96);
    // (input shape, weight shape, attributes, bias, phase convolutions: 0 when it stays)
    type Case<'a> = (
        Vec<usize>,
        Vec<usize>,
        Vec<(&'a str, Attribute)>,
        bool,
        usize,
    );
    let cases: Vec<Case> = vec![
        (
            vec![2, 5, 6, 7],
            vec![5, 3, 4, 4],
            vec![("strides", ints(&[2, 2])), ("pads", ints(&[1, 1, 1, 1]))],
            true,
            1,
        ),
        (
            vec![1, 4, 5, 5],
            vec![4, 6, 3, 3],
            vec![
                ("strides", ints(&[2, 3])),
                ("pads", ints(&[1, 0, 0, 2])),
                ("output_padding", ints(&[1, 2])),
            ],
            false,
            6,
        ),
        (
            vec![2, 3, 9],
            vec![3, 5, 4],
            vec![("strides", ints(&[3]))],
            true,
            3,
        ),
        (
            vec![1, 2, 3, 4, 3],
            vec![2, 3, 2, 3, 2],
            vec![
                ("strides", ints(&[2, 1, 2])),
                ("pads", ints(&[0, 1, 1, 1, 0, 0])),
            ],
            false,
            1,
        ),
        (
            vec![1, 3, 5, 5],
            vec![3, 4, 3, 3],
            vec![("strides", ints(&[2, 2])), ("output_shape", ints(&[10, 9]))],
            false,
            4,
        ),
        (
            vec![1, 3, 5, 4],
            vec![3, 2, 3, 3],
            vec![
                ("strides", ints(&[2, 2])),
                ("auto_pad", Attribute::String("SAME_LOWER".into())),
            ],
            true,
            4,
        ),
        (
            vec![1, 3, 6, 5],
            vec![3, 4, 3, 3],
            vec![("pads", ints(&[1, 2, 0, 1]))],
            true,
            1,
        ),
        (
            vec![1, 3, 4, 6],
            vec![3, 2, 3, 2],
            vec![("dilations", ints(&[2, 3]))],
            true,
            0,
        ),
        (
            vec![1, 4, 5, 5],
            vec![4, 2, 3, 3],
            vec![("group", Attribute::Int(2))],
            false,
            1,
        ),
        (
            vec![2, 6, 5, 7],
            vec![6, 2, 4, 4],
            vec![
                ("group", Attribute::Int(3)),
                ("strides", ints(&[2, 2])),
                ("pads", ints(&[1, 1, 1, 1])),
            ],
            true,
            1,
        ),
        (
            vec![1, 4, 6, 6],
            vec![4, 1, 3, 3],
            vec![
                ("group", Attribute::Int(4)),
                ("strides", ints(&[2, 2])),
                ("pads", ints(&[1, 1, 1, 1])),
                ("output_padding", ints(&[1, 1])),
            ],
            false,
            4,
        ),
        (
            vec![1, 2, 5],
            vec![2, 3, 2],
            vec![("strides", ints(&[3]))],
            false,
            0,
        ),
        (
            vec![1, 3, 4, 4],
            vec![3, 2, 3, 3],
            vec![("output_shape", ints(&[8, 8]))],
            false,
            0,
        ),
    ];
    for (i, (xs, ws, list, bias, phases)) in cases.into_iter().enumerate() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&xs));
        b.initializer("w", rng.f32s(&ws));
        let mut ins = vec!["x", "w"];
        if bias {
            let group = list.iter().find_map(|(n, a)| match (n, a) {
                (&"group", Attribute::Int(g)) => Some(*g as usize),
                _ => None,
            });
            b.initializer("b", rng.f32s(&[ws[1] * group.unwrap_or(1)]));
            ins.push("b");
        }
        b.node(node("ConvTranspose", 17, &ins, &["y"], attrs(list)));
        b.output("y");
        let before = build(b);
        let after = run_then_dce(&ConvTransposeAsPhases, before.clone());
        if phases > 0 {
            assert_eq!(
                count(&after, "ConvTranspose"),
                0,
                "case {i}: {:?}",
                ops(&after)
            );
            assert_eq!(count(&after, "Conv"), phases, "case {i}: {:?}", ops(&after));
        } else {
            assert_eq!(ops(&after), vec!["ConvTranspose"], "case {i}");
        }
        let inputs = vec![("x".to_string(), rng.f32s(&xs))];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }
}

/// ConvTranspose with constant weights becomes MatMul + Col2Im (+ Add for the bias): 2-D
/// with overlapping strided taps, pads, output padding and a bias; dilation; 1-D and 3-D;
/// `output_shape` and `auto_pad`. A grouped one, one with weights computed at run time, and one
/// whose `output_shape` is larger than the taps cover stay.
#[test]
fn conv_transpose_becomes_matmul_and_col2im() {
    let mut rng = Rng::new(91);
    // (input shape, weight shape, attributes, bias, rewritten)
    type Case<'a> = (
        Vec<usize>,
        Vec<usize>,
        Vec<(&'a str, Attribute)>,
        bool,
        bool,
    );
    let cases: Vec<Case> = vec![
        (
            vec![2, 5, 6, 7],
            vec![5, 3, 4, 4],
            vec![("strides", ints(&[2, 2])), ("pads", ints(&[1, 1, 1, 1]))],
            true,
            true,
        ),
        (
            vec![1, 4, 5, 5],
            vec![4, 6, 3, 3],
            vec![
                ("strides", ints(&[2, 3])),
                ("pads", ints(&[1, 0, 0, 2])),
                ("output_padding", ints(&[1, 2])),
            ],
            false,
            true,
        ),
        (
            vec![1, 3, 4, 6],
            vec![3, 2, 3, 2],
            vec![("dilations", ints(&[2, 3]))],
            true,
            true,
        ),
        (
            vec![2, 3, 9],
            vec![3, 5, 4],
            vec![("strides", ints(&[3]))],
            true,
            true,
        ),
        (
            vec![1, 2, 3, 4, 3],
            vec![2, 3, 2, 3, 2],
            vec![
                ("strides", ints(&[2, 1, 2])),
                ("pads", ints(&[0, 1, 1, 1, 0, 0])),
            ],
            false,
            true,
        ),
        (
            vec![1, 3, 5, 5],
            vec![3, 4, 3, 3],
            vec![("strides", ints(&[2, 2])), ("output_shape", ints(&[10, 9]))],
            false,
            true,
        ),
        (
            vec![1, 3, 5, 4],
            vec![3, 2, 3, 3],
            vec![
                ("strides", ints(&[2, 2])),
                ("auto_pad", Attribute::String("SAME_LOWER".into())),
            ],
            true,
            true,
        ),
        (
            vec![1, 4, 5, 5],
            vec![4, 2, 3, 3],
            vec![("group", Attribute::Int(2))],
            false,
            false,
        ),
        (
            vec![1, 3, 4, 4],
            vec![3, 2, 3, 3],
            vec![("output_shape", ints(&[8, 8]))],
            false,
            false,
        ),
    ];
    for (i, (xs, ws, list, bias, rewritten)) in cases.into_iter().enumerate() {
        let out_channels = ws[1]
            * list
                .iter()
                .find(|(n, _)| *n == "group")
                .map_or(1, |(_, a)| match a {
                    Attribute::Int(g) => *g as usize,
                    _ => 1,
                });
        let mut b = GraphBuilder::new("g");
        b.input("x", f32_input(&xs));
        b.initializer("w", rng.f32s(&ws));
        let mut ins = vec!["x", "w"];
        if bias {
            b.initializer("b", rng.f32s(&[out_channels]));
            ins.push("b");
        }
        b.node(node("ConvTranspose", 17, &ins, &["y"], attrs(list)));
        b.output("y");
        let before = build(b);
        let after = run_then_dce(&ConvTransposeAsMatMul, before.clone());
        if rewritten {
            assert_eq!(
                count(&after, "ConvTranspose"),
                0,
                "case {i}: {:?}",
                ops(&after)
            );
            assert_eq!(count(&after, "MatMul"), 1, "case {i}");
            assert_eq!(count(&after, "Col2Im"), 1, "case {i}");
            assert_eq!(count(&after, "Add"), usize::from(bias), "case {i}");
        } else {
            assert_eq!(ops(&after), vec!["ConvTranspose"], "case {i}");
        }
        let inputs = vec![("x".to_string(), rng.f32s(&xs))];
        assert_same_outputs(&before, &after, &inputs, 1e-5);
    }
    // Weights computed at run time: left as they are.
    let mut b = GraphBuilder::new("g");
    b.input("x", f32_input(&[1, 2, 3, 3]));
    b.input("w", f32_input(&[2, 2, 2, 2]));
    b.node(node(
        "ConvTranspose",
        17,
        &["x", "w"],
        &["y"],
        Attributes::new(),
    ));
    b.output("y");
    let before = build(b);
    let after = run_then_dce(&ConvTransposeAsMatMul, before);
    assert_eq!(ops(&after), vec!["ConvTranspose"]);
}

/// The target-neutral passes leave convolutions and pooling to the backend: a static
/// convolution with a constant weight stays a `Conv`, a pooling a `MaxPool`, and no node of a
/// backend's internal domain appears (those come from a backend's own passes).
#[test]
fn target_neutral_passes_leave_convolutions_to_the_backend() {
    let mut rng = Rng::new(7);
    let mut b = GraphBuilder::new("conv");
    b.input("x", f32_input(&[2, 3, 11, 9]));
    b.initializer("w", rng.f32s(&[5, 3, 3, 3]));
    b.initializer("b", rng.f32s(&[5]));
    let pads = attrs(vec![("pads", ints(&[1, 1, 1, 1]))]);
    b.node(node("Conv", 17, &["x", "w", "b"], &["y"], pads));
    b.node(node("Relu", 17, &["y"], &["r"], Attributes::new()));
    let window = attrs(vec![("kernel_shape", ints(&[2, 2]))]);
    b.node(node("MaxPool", 17, &["r"], &["out"], window));
    b.output("out");
    let before = build(b);
    let after =
        hidet_graph::passes::run_passes(before.clone(), &hidet_graph::passes::default_passes())
            .unwrap();
    assert_eq!(count(&after, "Conv"), 1, "{:?}", ops(&after));
    assert_eq!(count(&after, "MaxPool"), 1, "{:?}", ops(&after));
    assert!(after.nodes().iter().all(|n| n.domain.is_empty()));
    let inputs = vec![("x".to_string(), rng.f32s(&[2, 3, 11, 9]))];
    assert_same_outputs(&before, &after, &inputs, 1e-6);
}

mod einsum {
    use super::*;

    /// Two-operand contractions become one `MatMul` of the flattened operands (batch, rows and
    /// columns in any order, one or several contracted labels, a constant operand), and the
    /// outputs stay those of the operator; equations the product cannot express are left alone.
    #[test]
    fn contractions_become_one_product() {
        let mut rng = Rng::new(53);
        // (equation, A's shape, B's shape, B constant, the product's operand shapes if rewritten)
        type Case<'a> = (
            &'a str,
            &'a [usize],
            &'a [usize],
            bool,
            Option<[&'a [usize]; 2]>,
        );
        let cases: [Case; 7] = [
            (
                "abcd,cde->abe",
                &[1, 6, 3, 5],
                &[3, 5, 7],
                true,
                Some([&[6, 15], &[15, 7]]),
            ),
            (
                "aecd,abcd->acbe",
                &[2, 5, 3, 4],
                &[2, 6, 3, 4],
                false,
                Some([&[6, 5, 4], &[6, 4, 6]]),
            ),
            (
                "bij,bjk->bik",
                &[3, 5, 7],
                &[3, 7, 2],
                false,
                Some([&[3, 5, 7], &[3, 7, 2]]),
            ),
            ("ij,kj", &[5, 7], &[3, 7], true, Some([&[5, 7], &[7, 3]])),
            (
                "abc,cd->dba",
                &[2, 3, 4],
                &[4, 5],
                false,
                Some([&[6, 4], &[4, 5]]),
            ),
            ("ij,jk->ijk", &[3, 4], &[4, 5], false, None),
            ("ij,jk->k", &[3, 4], &[4, 5], false, None),
        ];
        for (equation, sa, sb, constant, want) in cases {
            let mut b = GraphBuilder::new("g");
            b.input("a", f32_input(sa));
            let mut inputs = vec![("a".to_string(), rng.f32s(sa))];
            if constant {
                b.initializer("b", rng.f32s(sb));
            } else {
                b.input("b", f32_input(sb));
                inputs.push(("b".to_string(), rng.f32s(sb)));
            }
            let mut attrs = Attributes::new();
            attrs.insert("equation", Attribute::String(equation.into()));
            b.node(node("Einsum", 12, &["a", "b"], &["y"], attrs));
            b.output("y");
            let before = build(b);
            let after = run_then_dce(&EinsumAsMatMul, before.clone());
            let product = after.nodes().iter().find(|n| n.op_type == "MatMul");
            match want {
                Some(want) => {
                    let product = product.unwrap_or_else(|| panic!("{equation}: no MatMul"));
                    let shapes: Vec<Vec<usize>> = product
                        .inputs
                        .iter()
                        .map(|v| after.value(v.unwrap()).ty.fixed_shape().unwrap())
                        .collect();
                    let want: Vec<Vec<usize>> = want.iter().map(|s| s.to_vec()).collect();
                    assert_eq!(shapes, want, "{equation}");
                    assert!(after.nodes().iter().all(|n| n.op_type != "Einsum"));
                }
                None => assert!(product.is_none(), "{equation} was rewritten"),
            }
            assert_same_outputs(&before, &after, &inputs, 1e-6);
        }
    }
}
