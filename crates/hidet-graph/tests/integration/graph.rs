//! Graph building, the DCE pass and the reference executor, end to end.

use std::sync::Arc;

use hidet_graph::passes::{default_passes, run_passes};
use hidet_graph::{
    run_reference, Attributes, DType, Dim, ExecError, GraphBuilder, GraphError, NodeSpec, Registry,
    Tensor, TensorType,
};

fn spec(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeSpec {
    NodeSpec {
        name: format!("{op}_{}", outputs[0]),
        domain: String::new(),
        op_type: op.into(),
        opset: 17,
        attrs: Attributes::new(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
    }
}

fn sym(n: &str) -> Dim {
    Dim::Symbol(Arc::from(n))
}

/// An `f32` tensor type of shape `dims`.
fn f32_type(dims: Vec<Dim>) -> TensorType {
    TensorType {
        dtype: DType::F32,
        shape: Some(dims),
    }
}

#[test]
fn out_of_order_nodes_are_sorted_dce_removes_dead_and_symbols_bind() {
    let mut b = GraphBuilder::new("g");
    b.input("x", f32_type(vec![sym("N"), Dim::Fixed(2)]));
    b.input("y", f32_type(vec![sym("N"), Dim::Fixed(2)]));
    b.initializer("w", Tensor::new(vec![2], vec![2.0f32, -1.0]).unwrap());
    // Given in reverse order; `dead` feeds nothing.
    b.node(spec("Mul", &["s", "w"], &["out"]));
    b.node(spec("Exp", &["x"], &["dead"]));
    b.node(spec("Add", &["x", "y"], &["s"]));
    b.output("out");
    let g = b.build(Registry::global()).unwrap();
    assert_eq!(g.nodes().len(), 3);
    let pos = |op: &str| g.nodes().iter().position(|n| n.op_type == op).unwrap();
    assert!(pos("Add") < pos("Mul"), "topological order");
    let out_ty = &g.value(g.outputs()[0]).ty;
    assert_eq!(out_ty.shape, Some(vec![sym("N"), Dim::Fixed(2)]));

    let g = run_passes(g, &default_passes()).unwrap();
    assert_eq!(
        g.nodes()
            .iter()
            .map(|n| n.op_type.as_str())
            .collect::<Vec<_>>(),
        vec!["Add", "Mul"]
    );
    let s = g.values().iter().find(|v| v.name == "s").unwrap();
    assert_eq!(s.users.len(), 1, "use lists are recomputed");

    let x = Tensor::new(vec![3, 2], vec![0.5f32, 1.5, -2.0, 3.0, 4.25, -0.75]).unwrap();
    let y = Tensor::new(vec![3, 2], vec![1.0f32, -1.0, 0.5, 0.25, -3.0, 2.0]).unwrap();
    let out = run_reference(&g, &[("x".into(), x), ("y".into(), y.clone())]).unwrap();
    assert_eq!(
        out[0].1.as_slice::<f32>().unwrap(),
        &[3.0, -0.5, -3.0, -3.25, 2.5, -1.25]
    );

    // N bound to 3 by x, then 2 by y: inconsistent.
    let x2 = Tensor::new(vec![2, 2], vec![1.0f32; 4]).unwrap();
    let err = run_reference(&g, &[("x".into(), x2), ("y".into(), y)]).unwrap_err();
    assert!(matches!(err, ExecError::SymbolConflict(_)), "{err}");
}

#[test]
fn unsupported_ops_are_listed_together_and_cycles_rejected() {
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(DType::F32, &[2]));
    b.node(spec("Foo", &["x"], &["a"]));
    b.node(spec("Foo", &["a"], &["b"]));
    b.node(spec("Bar", &["b"], &["c"]));
    b.output("c");
    match b.build(Registry::global()) {
        Err(GraphError::UnsupportedOps(v)) => {
            assert_eq!(v.len(), 2);
            assert_eq!((v[1].op_type.as_str(), v[1].count), ("Foo", 2));
        }
        other => panic!("{other:?}"),
    }
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(DType::F32, &[2]));
    b.node(spec("Add", &["x", "b"], &["a"]));
    b.node(spec("Neg", &["a"], &["b"]));
    b.output("b");
    assert!(matches!(
        b.build(Registry::global()),
        Err(GraphError::Cycle(_))
    ));
}

#[test]
fn shape_inference_errors_at_build_time() {
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(DType::F32, &[2]));
    b.input("y", TensorType::fixed(DType::F32, &[3]));
    b.node(spec("Add", &["x", "y"], &["z"]));
    b.output("z");
    assert!(matches!(
        b.build(Registry::global()),
        Err(GraphError::Node { .. })
    ));
}

/// A registry with Relu, Identity and three expansions: `Twice` (Relu then Relu, through a
/// fresh value), `Lost` (defines nothing) and `Forever` (expands to itself).
fn expansion_registry() -> Registry {
    let mut r = Registry::new();
    hidet_graph::ops::unary::register(&mut r);
    hidet_graph::ops::constant::register(&mut r);
    r.register_expansion("", "Twice", 1..=1, |e| {
        let x = e.input_name(0)?.to_string();
        let out = e.output_names()[0].clone();
        let mid = e.emit_value("Relu", 14, Attributes::new(), &[&x]);
        e.emit("Relu", 14, Attributes::new(), &[&mid], &[&out]);
        Ok(())
    });
    r.register_expansion("", "Lost", 1..=1, |_| Ok(()));
    r.register_expansion("", "Forever", 1..=1, |e| {
        let x = e.input_name(0)?.to_string();
        let out = e.output_names()[0].clone();
        e.emit("Forever", 1, Attributes::new(), &[&x], &[&out]);
        Ok(())
    });
    r
}

#[test]
fn expansions_replace_nodes_with_fresh_value_names() {
    let r = expansion_registry();
    assert!(r.supports("", "Twice", 1) && !r.supports("", "Twice", 2));
    assert!(r.lookup("", "Twice", 1).is_none() && r.lookup_expansion("", "Twice", 1).is_some());
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(DType::F32, &[2]));
    // `t/Relu` is the name the expansion would pick first: it must choose another.
    b.node(NodeSpec {
        opset: 14,
        ..spec("Identity", &["x"], &["t/Relu"])
    });
    b.node(NodeSpec {
        name: "t".into(),
        opset: 1,
        ..spec("Twice", &["t/Relu"], &["y"])
    });
    b.output("y");
    let g = b.build(&r).unwrap();
    let ops: Vec<(&str, &str)> = g
        .nodes()
        .iter()
        .map(|n| (n.op_type.as_str(), n.name.as_str()))
        .collect();
    assert_eq!(ops[0].0, "Identity");
    assert_eq!(ops[1].0, "Relu");
    assert_eq!(
        ops[2],
        ("Relu", "t"),
        "the node defining `y` keeps the name"
    );
    let mid = g.nodes()[1].outputs[0].unwrap();
    assert_eq!(g.value(mid).name, "t/Relu#1");
    let x = Tensor::new(vec![2], vec![-1.0f32, 2.0]).unwrap();
    let out = run_reference(&g, &[("x".into(), x)]).unwrap();
    assert_eq!(out[0].1.as_slice::<f32>().unwrap(), &[0.0, 2.0]);
}

#[test]
fn expansions_that_lose_outputs_or_never_end_are_errors() {
    let r = expansion_registry();
    for (op, why) in [
        ("Lost", "defines no output `y`"),
        ("Forever", "nest more than"),
    ] {
        let mut b = GraphBuilder::new("g");
        b.input("x", TensorType::fixed(DType::F32, &[2]));
        b.node(NodeSpec {
            opset: 1,
            ..spec(op, &["x"], &["y"])
        });
        b.output("y");
        let e = b.build(&r).unwrap_err();
        assert!(
            matches!(&e, GraphError::Node { node, .. } if node == &format!("{op}_y")),
            "{e}"
        );
        assert!(e.to_string().contains(why), "{e}");
    }
}

#[test]
#[should_panic(expected = "overlapping opsets")]
fn an_expansion_may_not_overlap_a_constructor() {
    let mut r = Registry::new();
    hidet_graph::ops::unary::register(&mut r);
    r.register_expansion("", "Relu", 10..=14, |_| Ok(()));
}

/// Binding in place (the nodes' own operators inferred again) gives what rebuilding the graph
/// through the builder gives: every value's type, kind and import-time constant, at several
/// shapes, with shape arithmetic folded; and the same error when inference rejects a shape.
#[test]
fn binding_in_place_agrees_with_rebuilding() {
    let mut b = GraphBuilder::new("shape_math");
    b.input("x", f32_type(vec![sym("B"), sym("S"), Dim::Fixed(6)]));
    b.input("pos", f32_type(vec![Dim::Fixed(1), sym("S")]));
    b.initializer("zero", Tensor::new(vec![1], vec![0i64]).unwrap());
    b.initializer("one", Tensor::new(vec![1], vec![1i64]).unwrap());
    b.initializer("three", Tensor::new(vec![1], vec![3i64]).unwrap());
    b.initializer("two", Tensor::new(vec![1], vec![2i64]).unwrap());
    b.initializer("table", Tensor::new(vec![1, 5], vec![0.5f32; 5]).unwrap());
    b.node(spec("Shape", &["x"], &["shape"]));
    b.node(spec("Gather", &["shape", "zero"], &["batch"]));
    b.node(spec("Gather", &["shape", "one"], &["seq"]));
    let mut concat = spec(
        "Concat",
        &["batch", "seq", "three", "two"],
        &["split_shape"],
    );
    concat.attrs.insert("axis", hidet_graph::Attribute::Int(0));
    b.node(concat);
    b.node(spec("Reshape", &["x", "split_shape"], &["heads"]));
    b.node(spec("Mul", &["seq", "two"], &["double"]));
    b.node(spec("Size", &["x"], &["count"]));
    b.node(spec("Add", &["pos", "table"], &["positions"]));
    b.output("heads");
    b.output("double");
    b.output("count");
    b.output("positions");
    let graph = b.build(Registry::global()).unwrap();
    for shapes in [
        vec![vec![2, 5, 6], vec![1, 5]],
        vec![vec![1, 5, 6], vec![1, 5]],
        vec![vec![3, 1, 6], vec![1, 1]],
    ] {
        let in_place = graph.with_input_shapes(&shapes, Registry::global());
        let rebuilt = graph.rebuilt_with_input_shapes(&shapes, Registry::global());
        let (in_place, rebuilt) = match (in_place, rebuilt) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(a), Err(b)) => {
                assert_eq!(a.to_string(), b.to_string());
                continue;
            }
            (a, b) => panic!("{shapes:?}: in place {a:?}, rebuilt {b:?}"),
        };
        assert_eq!(in_place.nodes().len(), rebuilt.nodes().len());
        for (a, b) in in_place.nodes().iter().zip(rebuilt.nodes()) {
            assert_eq!(a.name, b.name);
            for (&va, &vb) in a.outputs.iter().flatten().zip(b.outputs.iter().flatten()) {
                let (va, vb) = (in_place.value(va), rebuilt.value(vb));
                assert_eq!((&va.name, &va.ty, va.kind), (&vb.name, &vb.ty, vb.kind));
                let known = |v: &hidet_graph::graph::Value| {
                    v.known
                        .as_ref()
                        .map(|t| t.as_slice::<i64>().unwrap().to_vec())
                };
                assert_eq!(known(va), known(vb), "`{}` at {shapes:?}", va.name);
            }
        }
        let heads = in_place.value(in_place.outputs()[0]);
        let (batch, seq) = (shapes[0][0], shapes[0][1]);
        assert_eq!(heads.ty.fixed_shape(), Some(vec![batch, seq, 3, 2]));
        let double = in_place.value(in_place.outputs()[1]);
        assert_eq!(
            double.known.as_ref().unwrap().as_slice::<i64>().unwrap(),
            &[2 * seq as i64]
        );
    }
    // The position table has 5 entries: a sequence of 6 is rejected the same way by both.
    let shapes = [vec![1, 6, 6], vec![1, 6]];
    let a = graph
        .with_input_shapes(&shapes, Registry::global())
        .unwrap_err();
    let b = graph
        .rebuilt_with_input_shapes(&shapes, Registry::global())
        .unwrap_err();
    assert_eq!(a.to_string(), b.to_string());
    assert!(a.to_string().contains("Add"), "{a}");
}

#[test]
fn binding_input_shapes_fixes_every_type_and_keeps_the_values() {
    let mut b = GraphBuilder::new("dyn");
    b.input("x", f32_type(vec![sym("B"), sym("S"), Dim::Fixed(4)]));
    b.input("m", f32_type(vec![sym("B"), sym("S"), Dim::Fixed(1)]));
    b.initializer(
        "minus_one_four",
        Tensor::new(vec![2], vec![-1i64, 4]).unwrap(),
    );
    b.node(spec("Shape", &["x"], &["shape"]));
    b.node(spec("Mul", &["x", "m"], &["scaled"]));
    b.node(spec("Reshape", &["scaled", "minus_one_four"], &["flat"]));
    b.node(spec("Reshape", &["flat", "shape"], &["y"]));
    b.output("y");
    b.output("flat");
    let graph = b.build(Registry::global()).unwrap();
    assert!(!graph.has_static_inputs());
    let bound = graph
        .with_input_shapes(&[vec![3, 7, 4], vec![3, 7, 1]], Registry::global())
        .unwrap();
    assert!(bound.has_static_inputs());
    let optimized = run_passes(bound.clone(), &default_passes()).unwrap();
    for n in optimized.nodes() {
        for v in n.outputs.iter().flatten().map(|&v| optimized.value(v)) {
            assert!(v.ty.fixed_shape().is_some(), "`{}` is {}", v.name, v.ty);
        }
    }
    let y = bound.value(bound.outputs()[0]);
    assert_eq!(y.ty.fixed_shape(), Some(vec![3, 7, 4]));
    let flat = bound.value(bound.outputs()[1]);
    assert_eq!(flat.ty.fixed_shape(), Some(vec![21, 4]));
    let x: Vec<f32> = (0..84).map(|i| (i as f32 - 40.5) / 8.0).collect();
    let m: Vec<f32> = (0..21).map(|i| 1.5 - i as f32 / 4.0).collect();
    let inputs = vec![
        (
            "x".to_string(),
            Tensor::new(vec![3, 7, 4], x.clone()).unwrap(),
        ),
        (
            "m".to_string(),
            Tensor::new(vec![3, 7, 1], m.clone()).unwrap(),
        ),
    ];
    let want: Vec<f32> = (0..84).map(|i| x[i] * m[i / 4]).collect();
    for g in [&graph, &bound, &optimized] {
        let out = run_reference(g, &inputs).unwrap();
        assert_eq!(out[0].1.as_slice::<f32>().unwrap(), &want[..]);
        assert_eq!(out[1].1.shape(), &[21, 4]);
    }
}

#[test]
fn binding_shapes_that_contradict_the_model_names_the_input_and_dimension() {
    let mut b = GraphBuilder::new("fixed_batch");
    b.input("x", f32_type(vec![Dim::Fixed(1), sym("S")]));
    b.input("y", f32_type(vec![Dim::Fixed(1), sym("S")]));
    b.node(spec("Add", &["x", "y"], &["z"]));
    b.output("z");
    let graph = b.build(Registry::global()).unwrap();
    let bind = |shapes: &[Vec<usize>]| {
        graph
            .with_input_shapes(shapes, Registry::global())
            .unwrap_err()
            .to_string()
    };
    let e = bind(&[vec![8, 5], vec![8, 5]]);
    assert!(
        e.contains("input `x`: dimension 0 is fixed at 1") && e.contains("given 8"),
        "{e}"
    );
    let e = bind(&[vec![1, 5], vec![1, 6]]);
    assert!(
        e.contains("input `y`: dimension 1 (`S`) is 6, but 5 in input `x`"),
        "{e}"
    );
    let e = bind(&[vec![1, 5, 1], vec![1, 5]]);
    assert!(e.contains("input `x`") && e.contains("rank 2"), "{e}");
    let e = bind(&[vec![1, 5]]);
    assert!(e.contains("1 input shapes given for 2"), "{e}");
    // The same checks without rebuilding the graph (what a compiled model of a static graph
    // runs on the shapes it is asked to compile for).
    let check = |shapes: &[Vec<usize>]| graph.check_input_shapes(shapes).map_err(|e| e.to_string());
    assert!(check(&[vec![1, 5], vec![1, 5]]).is_ok());
    let e = check(&[vec![8, 5], vec![8, 5]]).unwrap_err();
    assert!(
        e.contains("input `x`: dimension 0 is fixed at 1") && e.contains("given 8"),
        "{e}"
    );
    let e = check(&[vec![1, 5], vec![1, 6]]).unwrap_err();
    assert!(e.contains("input `y`: dimension 1 (`S`) is 6"), "{e}");
    let e = check(&[vec![1, 5, 1], vec![1, 5]]).unwrap_err();
    assert!(e.contains("input `x`") && e.contains("rank 2"), "{e}");
    // A graph whose inputs are all static: a batch of 8 for its batch of 1 is refused too.
    let mut b = GraphBuilder::new("static_batch");
    b.input("x", f32_type(vec![Dim::Fixed(1), Dim::Fixed(4)]));
    b.node(spec("Relu", &["x"], &["z"]));
    b.output("z");
    let fixed = b.build(Registry::global()).unwrap();
    // A bound shape that inference rejects (a sequence longer than a position table) names
    // the input shapes as well as the node.
    let mut t = GraphBuilder::new("positions");
    t.input("ids", f32_type(vec![Dim::Fixed(1), sym("S")]));
    t.initializer("table", Tensor::new(vec![1, 4], vec![1.0f32; 4]).unwrap());
    t.node(spec("Add", &["ids", "table"], &["z"]));
    t.output("z");
    let positions = t.build(Registry::global()).unwrap();
    assert!(positions
        .with_input_shapes(&[vec![1, 4]], Registry::global())
        .is_ok());
    let e = positions
        .with_input_shapes(&[vec![1, 6]], Registry::global())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("with input shapes ids=[1, 6]: "), "{e}");
    assert!(e.contains("Add"), "{e}");
    assert!(fixed.has_static_inputs());
    assert!(fixed.check_input_shapes(&[vec![1, 4]]).is_ok());
    let e = fixed
        .check_input_shapes(&[vec![8, 4]])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("input `x`: dimension 0 is fixed at 1") && e.contains("given 8"),
        "{e}"
    );
}
