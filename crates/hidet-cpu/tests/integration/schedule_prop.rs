//! Property test: random small compute definitions (elementwise chains over
//! broadcast inputs, optionally reduced over random axes with or without
//! kept dimensions, optionally followed by a row-wise consumer) scheduled
//! with 1 and 2 threads agree with the interpreter reference.

use crate::schedule_harness as harness;

use harness::check_all;
use hidet_ir::compute::{grid, reduce, tensor_input, tensor_shape, ComputeDef, ReduceKind};
use hidet_ir::prelude::*;
use proptest::prelude::*;

/// A random scalar expression over the inputs.
#[derive(Clone, Debug)]
enum Tree {
    Input(usize),
    Const(f32),
    Unary(u8, Box<Tree>),
    Binary(u8, Box<Tree>, Box<Tree>),
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = prop_oneof![
        3 => (0usize..3).prop_map(Tree::Input),
        1 => prop_oneof![-2.0f32..-0.1, 0.1f32..2.0].prop_map(Tree::Const),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (0u8..5, inner.clone()).prop_map(|(op, a)| Tree::Unary(op, Box::new(a))),
            (0u8..6, inner.clone(), inner).prop_map(|(op, a, b)| Tree::Binary(
                op,
                Box::new(a),
                Box::new(b)
            )),
        ]
    })
}

/// A random definition's structure.
#[derive(Clone, Debug)]
struct Spec {
    dims: Vec<i64>,
    /// Per input: a mask of broadcast (size-1) dimensions and how many
    /// leading dimensions it lacks.
    inputs: Vec<(u8, usize)>,
    body: Tree,
    /// Reduced-axes mask (0: no reduction), kind, keepdims, row consumer.
    reduction: (u8, u8, bool, bool),
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(1i64..10, 1..=4),
        prop::collection::vec((any::<u8>(), 0usize..3), 1..=3),
        tree(),
        (any::<u8>(), 0u8..3, any::<bool>(), any::<bool>()),
    )
        .prop_map(|(dims, inputs, body, reduction)| Spec {
            dims,
            inputs,
            body,
            reduction,
        })
}

fn bcast(x: &Var, index: &[Expr]) -> Expr {
    let shape = tensor_shape(x);
    let offset = index.len() - shape.len();
    x.at(shape.iter().enumerate().map(|(d, e)| {
        if e.as_int() == Some(1) {
            Expr::int(0)
        } else {
            index[offset + d].clone()
        }
    }))
}

fn eval(t: &Tree, inputs: &[Var], index: &[Expr]) -> Expr {
    match t {
        Tree::Input(k) => bcast(&inputs[k % inputs.len()], index),
        Tree::Const(c) => Expr::f32(*c),
        Tree::Unary(op, a) => {
            let a = eval(a, inputs, index);
            match op {
                0 => -a,
                1 => Expr::math(MathFunc::Abs, vec![a]),
                2 => Expr::math(MathFunc::Tanh, vec![a]),
                3 => Expr::math(MathFunc::Sigmoid, vec![a]),
                _ => (a * Expr::f32(0.5)).exp(),
            }
        }
        Tree::Binary(op, a, b) => {
            let (a, b) = (eval(a, inputs, index), eval(b, inputs, index));
            match op {
                0 => a + b,
                1 => a - b,
                2 => a * b,
                3 => a.max(b),
                4 => a.min(b),
                _ => a / (Expr::math(MathFunc::Abs, vec![b]) + Expr::f32(1.0)),
            }
        }
    }
}

fn build(spec: &Spec) -> ComputeDef {
    let rank = spec.dims.len();
    let inputs: Vec<Var> = spec
        .inputs
        .iter()
        .enumerate()
        .map(|(k, &(mask, dropped))| {
            let shape: Vec<i64> = (dropped.min(rank - 1)..rank)
                .map(|d| if mask >> d & 1 == 1 { 1 } else { spec.dims[d] })
                .collect();
            tensor_input(&format!("x{k}"), DataType::F32, shape)
        })
        .collect();
    let body = |index: &[Expr]| eval(&spec.body, &inputs, index);
    let (mask, kind, keepdims, consumer) = spec.reduction;
    let reduced: Vec<usize> = (0..rank).filter(|d| mask >> d & 1 == 1).collect();
    if mask % 3 == 0 || reduced.is_empty() {
        let (y, node) = grid("y", DataType::F32, spec.dims.clone(), body);
        return ComputeDef::new(inputs, vec![(y.clone(), node)], vec![y]).expect("valid");
    }
    let kind = [ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min][kind as usize];
    let kept: Vec<usize> = (0..rank).filter(|d| !reduced.contains(d)).collect();
    let out_shape: Vec<i64> = if keepdims {
        (0..rank)
            .map(|d| {
                if reduced.contains(&d) {
                    1
                } else {
                    spec.dims[d]
                }
            })
            .collect()
    } else {
        kept.iter().map(|&d| spec.dims[d]).collect()
    };
    let rshape: Vec<i64> = reduced.iter().map(|&d| spec.dims[d]).collect();
    let full = |i: &[Expr], r: &[Expr]| -> Vec<Expr> {
        let mut index = vec![Expr::int(0); rank];
        for (k, &d) in reduced.iter().enumerate() {
            index[d] = r[k].clone();
        }
        for (k, &d) in kept.iter().enumerate() {
            index[d] = if keepdims { i[d].clone() } else { i[k].clone() };
        }
        index
    };
    let (red, red_node) = reduce("red", DataType::F32, out_shape, rshape, kind, |i, r| {
        body(&full(i, r))
    });
    let row_pattern = reduced == [rank - 1];
    if consumer && row_pattern {
        let (y, node) = grid("y", DataType::F32, spec.dims.clone(), |i| {
            let row: Vec<Expr> = if keepdims {
                let mut r = i[..rank - 1].to_vec();
                r.push(Expr::int(0));
                r
            } else {
                i[..rank - 1].to_vec()
            };
            body(i) - red.at(row)
        });
        return ComputeDef::new(
            inputs,
            vec![(red.clone(), red_node), (y.clone(), node)],
            vec![y, red],
        )
        .expect("valid");
    }
    ComputeDef::new(inputs, vec![(red.clone(), red_node)], vec![red]).expect("valid")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_definitions_match_the_reference(spec in spec(), seed in 1u64..1000) {
        check_all(&[build(&spec)], seed);
    }
}
