//! The reduction, softmax and normalization families: every `Reduce*` (axes as attribute and
//! as input, keepdims, noop_with_empty_axes, every dtype class), ArgMax/ArgMin, Softmax /
//! LogSoftmax / Hardmax (coerced to 2-D before opset 13, single axis after), CumSum, TopK,
//! Dropout, the normalizations and Einsum.
//!
//! Tolerance: f32 definitions accumulate in f32 while `eval` accumulates in f64 and rounds
//! once, so f32 outputs are compared within `1e-4 + 1e-4·|want|` (reductions here fold at
//! most 105 values in `[-3, 3]`); other dtypes use the table's default tolerance.

use super::*;

/// A case whose f32 outputs are compared within the accumulation tolerance.
fn acc(op: &'static str, inputs: Vec<In>) -> Case {
    let f32_input = inputs
        .first()
        .is_some_and(|i| matches!(i, In::Float(F32, ..) | In::Int(F32, ..)));
    let c = case(op, inputs);
    if f32_input {
        c.tol(1e-4, 1e-4)
    } else {
        c
    }
}

/// Every operator of the family; each must appear in [`reduction_cases`].
pub(super) const REDUCTION_OPS: &[&str] = &[
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "Softmax",
    "LogSoftmax",
    "Hardmax",
    "BatchNormalization",
    "LayerNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "MeanVarianceNormalization",
    "LRN",
    "Dropout",
    "ArgMax",
    "ArgMin",
    "CumSum",
    "TopK",
    "Einsum",
];

const FLOAT_REDUCTIONS: &[&str] = &[
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
];

/// Data range of a reduction's float input: positive for LogSum (the logarithm of a sum near
/// zero amplifies rounding), small for Prod (products of many values over- or underflow).
fn data(op: &str, dt: DType, shape: &[usize]) -> In {
    match op {
        "ReduceLogSum" => range(dt, shape, 0.1, 3.0),
        "ReduceProd" => range(dt, shape, 0.5, 1.5),
        _ => f(dt, shape),
    }
}

pub(super) fn reduction_cases() -> Vec<Case> {
    let mut c = Vec::new();
    for &op in FLOAT_REDUCTIONS {
        // Axes as input (opset 18), with every keepdims / noop combination.
        for (axes, keep) in [
            (vec![1], 1),
            (vec![-1, 0], 0),
            (vec![2], 0),
            (vec![0, 1, 2], 1),
        ] {
            c.push(
                acc(
                    op,
                    vec![data(op, F32, &[3, 5, 7]), i64s(&[axes.len()], &axes)],
                )
                .attr("keepdims", int_attr(keep)),
            );
        }
        c.push(acc(op, vec![data(op, F32, &[4, 3, 5])]).attr("keepdims", int_attr(0)));
        c.push(
            acc(op, vec![data(op, F32, &[2, 3]), i64s(&[0], &[])])
                .attr("noop_with_empty_axes", int_attr(1)),
        );
        c.push(
            acc(op, vec![data(op, F32, &[2, 3]), In::Absent])
                .attr("noop_with_empty_axes", int_attr(1)),
        );
        // Axes as attribute.
        c.push(
            acc(op, vec![data(op, F32, &[5, 3, 7])])
                .opset(11)
                .attr("axes", ints(&[-2]))
                .attr("keepdims", int_attr(0)),
        );
        c.push(acc(op, vec![data(op, F32, &[3, 5])]).opset(11));
        // Other float types; an empty reduction.
        c.push(acc(op, vec![data(op, F16, &[3, 9]), i64s(&[1], &[1])]));
        c.push(acc(op, vec![data(op, BF16, &[2, 3, 5]), i64s(&[1], &[0])]));
        c.push(acc(op, vec![data(op, F64, &[7, 3]), i64s(&[1], &[0])]));
        c.push(acc(op, vec![f(F32, &[2, 0, 3]), i64s(&[1], &[1])]).attr("keepdims", int_attr(0)));
    }
    // NaN, infinities and 1e10 (NaN propagates through Max and Min).
    for op in ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceLogSumExp"] {
        c.push(acc(op, vec![special(F32, &[5, 7]), i64s(&[1], &[0])]));
        c.push(acc(op, vec![special(F16, &[3, 7]), i64s(&[1], &[1])]));
    }
    // Integers: wrapping sums and products, truncating means, f64 for the others.
    for op in &REDUCTION_OPS[..10] {
        c.push(acc(
            op,
            vec![int(I32, &[3, 5, 4], 1, 9), i64s(&[2], &[0, 2])],
        ));
        c.push(
            acc(op, vec![int(I64, &[4, 6], -9, 9), i64s(&[1], &[1])]).attr("keepdims", int_attr(0)),
        );
        c.push(acc(op, vec![int(U8, &[3, 7], 1, 200), i64s(&[1], &[-1])]));
    }
    for op in ["ReduceSum", "ReduceProd", "ReduceSumSquare", "ReduceL1"] {
        c.push(case(
            op,
            vec![int(I8, &[2, 9], -120, 120), i64s(&[1], &[1])],
        ));
        c.push(
            case(op, vec![int(I16, &[3, 5], -3000, 3000)])
                .opset(11)
                .attr("axes", ints(&[0])),
        );
    }
    c.push(case(
        "ReduceMean",
        vec![int(I32, &[3, 4], -9, 9), i64s(&[1], &[1])],
    ));
    c.push(case(
        "ReduceMax",
        vec![int(I32, &[2, 0], -9, 9), i64s(&[1], &[1])],
    ));
    c.push(case(
        "ReduceMin",
        vec![int(I16, &[0, 3], -9, 9), i64s(&[1], &[0])],
    ));
    c.push(
        case("ReduceMin", vec![int(U64, &[3, 4], 1, 9), i64s(&[1], &[1])])
            .none("u64 Min: the identity u64::MAX has no IR constant"),
    );
    c.push(
        case(
            "ReduceMean",
            vec![int(U64, &[3, 4], 1, 9), i64s(&[1], &[1])],
        )
        .none("u64 results of float-valued reductions: no saturating conversion"),
    );
    c.push(case(
        "ReduceMax",
        vec![int(U64, &[3, 4], 1, 9), i64s(&[1], &[0])],
    ));
    // Bools: Max is any, Min is all; empty reductions give false and true.
    for op in ["ReduceMax", "ReduceMin"] {
        c.push(case(op, vec![boolean(&[4, 3, 2]), i64s(&[1], &[1])]));
        c.push(case(op, vec![boolean(&[3, 0]), i64s(&[1], &[1])]));
        c.push(
            case(op, vec![boolean(&[2, 5])])
                .opset(13)
                .attr("keepdims", int_attr(0)),
        );
    }
    softmax_cases(&mut c);
    normalization_cases(&mut c);
    other_cases(&mut c);
    c
}

/// Dropout (inference), Einsum, and the operators without a definition.
fn other_cases(c: &mut Vec<Case>) {
    c.push(case("Dropout", vec![f(F32, &[3, 5])]).opset(7).outputs(2));
    c.push(case("Dropout", vec![f(F16, &[2, 3])]).opset(10).outputs(2));
    c.push(case("Dropout", vec![f(F32, &[4, 7])]).opset(10));
    c.push(
        case(
            "Dropout",
            vec![f(BF16, &[3, 2]), scalar(0.3f32), scalar(false)],
        )
        .outputs(2),
    );
    c.push(case("Dropout", vec![f(F64, &[5]), scalar(0.0f32), scalar(true)]).outputs(2));
    c.push(case("Dropout", vec![f(F32, &[2, 3]), In::Absent, In::Absent]).outputs(2));
    // ArgMax / ArgMin: ties (integer-valued floats), first or last index, NaN rows.
    for op in ["ArgMax", "ArgMin"] {
        for (axis, keep, last) in [(0, 1, 0), (1, 0, 0), (-1, 1, 1), (2, 0, 1)] {
            c.push(
                case(op, vec![int(F32, &[3, 4, 5], -2, 2)])
                    .attr("axis", int_attr(axis))
                    .attr("keepdims", int_attr(keep))
                    .attr("select_last_index", int_attr(last)),
            );
        }
        c.push(case(op, vec![f(F16, &[7])]));
        c.push(case(op, vec![int(I32, &[4, 6], -3, 3)]).attr("axis", int_attr(1)));
        c.push(case(op, vec![int(U8, &[5, 3], 1, 4)]).attr("select_last_index", int_attr(1)));
        c.push(case(op, vec![int(I64, &[2, 5], -9, 9)]).opset(11));
        c.push(case(op, vec![special(F32, &[7, 5])]).attr("axis", int_attr(1)));
        c.push(
            case(op, vec![special(F64, &[5, 7])])
                .attr("axis", int_attr(0))
                .attr("select_last_index", int_attr(1)),
        );
        c.push(case(op, vec![f(F32, &[0, 3])]).attr("axis", int_attr(1)));
    }
    c.push(case("ArgMax", vec![int(U64, &[3, 4], 1, 9)]));
    c.push(
        case("ArgMin", vec![int(U64, &[3, 4], 1, 9)])
            .none("u64 Min: the identity u64::MAX has no IR constant"),
    );
    c.push(
        case("CumSum", vec![f(F32, &[4, 5]), i64s(&[], &[1])])
            .none("a scan; as a reduction it would be quadratic"),
    );
    c.push(
        case("TopK", vec![f(F32, &[3, 6]), i64s(&[1], &[2])])
            .outputs(2)
            .none("a selection, not a fold"),
    );
    c.push(
        acc("Einsum", vec![f(F32, &[3, 4]), f(F32, &[4, 5])])
            .attr("equation", Attribute::String("ij,jk->ik".into())),
    );
    c.push(
        acc("Einsum", vec![f(F32, &[3, 7]), f(F32, &[7, 2])])
            .attr("equation", Attribute::String("ij,jk".into())),
    );
    c.push(
        acc("Einsum", vec![f(F32, &[2, 3, 5]), f(F32, &[2, 5, 4])])
            .attr("equation", Attribute::String("bij,bjk->bik".into())),
    );
    c.push(
        acc("Einsum", vec![f(F32, &[5, 5])]).attr("equation", Attribute::String("ii->i".into())),
    );
    c.push(acc("Einsum", vec![f(F32, &[4, 4])]).attr("equation", Attribute::String("ii".into())));
    c.push(
        acc("Einsum", vec![f(F32, &[3, 5])]).attr("equation", Attribute::String("ij->ji".into())),
    );
    c.push(
        acc("Einsum", vec![f(F32, &[2, 1, 3, 4]), f(F32, &[3, 4, 2])])
            .attr("equation", Attribute::String("...ij,...jk->...ik".into())),
    );
    c.push(
        acc("Einsum", vec![f(F32, &[9]), f(F32, &[9])])
            .attr("equation", Attribute::String("i,i".into())),
    );
    c.push(
        acc("Einsum", vec![f(F64, &[3]), f(F64, &[5])])
            .attr("equation", Attribute::String("i,j->ij".into())),
    );
    c.push(
        acc(
            "Einsum",
            vec![f(F16, &[3, 5]), f(F16, &[3, 5]), f(F16, &[3, 5])],
        )
        .attr("equation", Attribute::String("ij,ij,ij->i".into())),
    );
    c.push(
        acc("Einsum", vec![f(F32, &[1, 2, 3, 5]), f(F32, &[1, 2, 4, 5])])
            .attr("equation", Attribute::String("bhqd,bhkd->bhqk".into())),
    );
    c.push(
        acc("Einsum", vec![f(BF16, &[2, 3, 7])])
            .attr("equation", Attribute::String("...i->...".into())),
    );
    c.push(
        acc(
            "Einsum",
            vec![int(I32, &[3, 4], -50, 50), int(I32, &[4, 2], -50, 50)],
        )
        .attr("equation", Attribute::String("ij,jk->ik".into())),
    );
    c.push(
        acc("Einsum", vec![int(I8, &[3, 9], -100, 100)])
            .attr("equation", Attribute::String("ij->i".into())),
    );
    c.push(
        acc("Einsum", vec![int(U16, &[5, 7], 1, 60000)])
            .attr("equation", Attribute::String("ij->".into())),
    );
}

fn positive(dt: DType, shape: &[usize]) -> In {
    range(dt, shape, 0.2, 2.0)
}

fn float_attr(v: f32) -> Attribute {
    Attribute::Float(v)
}

fn normalization_cases(c: &mut Vec<Case>) {
    // BatchNormalization: inference (every opset form), training statistics, spatial = 0.
    let bn = |x: &[usize], ch: &[usize], dt: DType| {
        vec![f(dt, x), f(dt, ch), f(dt, ch), f(dt, ch), positive(dt, ch)]
    };
    c.push(acc("BatchNormalization", bn(&[2, 3, 5, 7], &[3], F32)));
    c.push(acc("BatchNormalization", bn(&[3, 5], &[5], F32)).attr("epsilon", float_attr(0.3)));
    c.push(acc("BatchNormalization", bn(&[2, 3, 4], &[3], F32)).opset(9));
    c.push(acc("BatchNormalization", bn(&[2, 4, 3], &[4], F16)).opset(15));
    c.push(acc("BatchNormalization", bn(&[1, 3, 2, 2], &[3], F64)));
    c.push(
        acc("BatchNormalization", bn(&[4, 3, 5], &[3], F32))
            .attr("training_mode", int_attr(1))
            .attr("momentum", float_attr(0.8))
            .outputs(3),
    );
    c.push(
        acc("BatchNormalization", bn(&[3, 2, 3], &[2], F32))
            .opset(9)
            .outputs(5),
    );
    c.push(
        acc("BatchNormalization", bn(&[2, 3, 5], &[3, 5], F32))
            .opset(7)
            .attr("spatial", int_attr(0)),
    );
    c.push(
        acc("BatchNormalization", bn(&[3, 2, 4], &[2, 4], F32))
            .opset(7)
            .attr("spatial", int_attr(0))
            .outputs(5),
    );
    // LayerNormalization: every axis, broadcast scale/bias, no bias, stash types.
    for axis in [-1, 1, 0, 2] {
        c.push(
            acc(
                "LayerNormalization",
                vec![f(F32, &[3, 5, 7]), f(F32, &[5, 7][..]), f(F32, &[7])],
            )
            .attr("axis", int_attr(axis))
            .outputs(3),
        );
    }
    c.push(acc(
        "LayerNormalization",
        vec![f(F32, &[4, 9]), f(F32, &[9])],
    ));
    c.push(
        acc(
            "LayerNormalization",
            vec![f(F32, &[2, 3, 6]), f(F32, &[1, 6]), f(F32, &[6])],
        )
        .attr("epsilon", float_attr(0.1)),
    );
    c.push(
        acc(
            "LayerNormalization",
            vec![f(F16, &[3, 11]), f(F16, &[11]), f(F16, &[11])],
        )
        .outputs(3),
    );
    c.push(
        acc(
            "LayerNormalization",
            vec![f(BF16, &[2, 5]), f(BF16, &[5]), f(BF16, &[5])],
        )
        .attr("stash_type", int_attr(16)),
    );
    c.push(
        acc(
            "LayerNormalization",
            vec![f(F64, &[3, 4]), f(F64, &[4]), f(F64, &[4])],
        )
        .attr("stash_type", int_attr(11))
        .outputs(3),
    );
    // InstanceNormalization, GroupNormalization (per group before 21, per channel after).
    c.push(acc(
        "InstanceNormalization",
        vec![f(F32, &[2, 3, 5, 7]), f(F32, &[3]), f(F32, &[3])],
    ));
    c.push(acc(
        "InstanceNormalization",
        vec![f(F32, &[3, 4]), f(F32, &[4]), f(F32, &[4])],
    ));
    c.push(
        acc(
            "InstanceNormalization",
            vec![f(F16, &[1, 2, 9]), f(F16, &[2]), f(F16, &[2])],
        )
        .attr("epsilon", float_attr(0.01)),
    );
    c.push(
        acc(
            "GroupNormalization",
            vec![f(F32, &[2, 6, 5]), f(F32, &[6]), f(F32, &[6])],
        )
        .attr("num_groups", int_attr(3)),
    );
    c.push(
        acc(
            "GroupNormalization",
            vec![f(F32, &[3, 4, 3, 5]), f(F32, &[2]), f(F32, &[2])],
        )
        .opset(18)
        .attr("num_groups", int_attr(2)),
    );
    c.push(
        acc(
            "GroupNormalization",
            vec![f(F32, &[2, 5, 7]), f(F32, &[5]), f(F32, &[5])],
        )
        .attr("num_groups", int_attr(5))
        .attr("epsilon", float_attr(0.2)),
    );
    c.push(
        acc(
            "GroupNormalization",
            vec![f(F64, &[1, 4, 6]), f(F64, &[4]), f(F64, &[4])],
        )
        .attr("num_groups", int_attr(1)),
    );
    // MeanVarianceNormalization and LRN.
    c.push(acc(
        "MeanVarianceNormalization",
        vec![f(F32, &[2, 3, 4, 5])],
    ));
    c.push(acc("MeanVarianceNormalization", vec![f(F32, &[3, 5, 7])]).attr("axes", ints(&[-1])));
    c.push(acc("MeanVarianceNormalization", vec![f(F16, &[4, 6])]).attr("axes", ints(&[0, 1])));
    for size in [1, 2, 3, 5] {
        c.push(
            acc("LRN", vec![f(F32, &[2, 7, 3, 2])])
                .attr("size", int_attr(size))
                .attr("alpha", float_attr(0.3))
                .attr("beta", float_attr(0.6))
                .attr("bias", float_attr(1.5)),
        );
    }
    c.push(acc("LRN", vec![f(F64, &[1, 4, 5])]).attr("size", int_attr(3)));
}

fn softmax_cases(c: &mut Vec<Case>) {
    for op in ["Softmax", "LogSoftmax", "Hardmax"] {
        // Opset 13: one axis, last or not.
        for axis in [-1, 0, 1, 2] {
            c.push(acc(op, vec![f(F32, &[3, 5, 7])]).attr("axis", int_attr(axis)));
        }
        c.push(acc(op, vec![f(F32, &[11])]));
        c.push(acc(op, vec![f(F32, &[2, 0, 3])]).attr("axis", int_attr(1)));
        // Before opset 13: coerced to 2-D at `axis`.
        for axis in [0, 1, 2, -1] {
            c.push(
                acc(op, vec![f(F32, &[3, 4, 5])])
                    .opset(11)
                    .attr("axis", int_attr(axis)),
            );
        }
        c.push(acc(op, vec![f(F32, &[2, 9])]).opset(1));
        c.push(acc(op, vec![f(F16, &[3, 13])]));
        c.push(acc(op, vec![f(BF16, &[2, 3, 4])]).attr("axis", int_attr(1)));
        c.push(
            acc(op, vec![f(F64, &[5, 6])])
                .opset(11)
                .attr("axis", int_attr(0)),
        );
        // Large values: the maximum is subtracted before exponentiation.
        c.push(acc(op, vec![range(F32, &[4, 6], 80.0, 120.0)]));
    }
    // NaN, infinities and 1e10 in some rows (first element or later).
    for op in ["Softmax", "LogSoftmax", "Hardmax"] {
        c.push(case(op, vec![special(F32, &[7, 5])]));
    }
    // Ties: Hardmax picks the first maximum of each row.
    c.push(case("Hardmax", vec![int(F32, &[6, 5], -2, 2)]));
    c.push(case("Hardmax", vec![int(F32, &[3, 2, 4], -2, 2)]).opset(11));
}

#[test]
fn reductions_need_known_axes_and_dropout_known_controls() {
    let x = [3usize, 4];
    let sum = build(&case("ReduceSum", vec![]));
    let def = sum
        .compute(&[unknown(F32, &x), unknown(I64, &[1])])
        .expect("valid inputs");
    assert!(def.is_none(), "axes unknown when compiling");
    let def = sum.compute(&[unknown(F32, &x)]).expect("valid inputs");
    assert!(def.is_some(), "no axes input: every axis is reduced");
    let dropout = build(&case("Dropout", vec![]).outputs(2));
    let def = dropout
        .compute(&[unknown(F32, &x), unknown(F32, &[]), unknown(B, &[])])
        .expect("valid inputs");
    assert!(def.is_none(), "training mode unknown when compiling");
}

#[test]
fn invalid_family_inputs_are_errors_not_definitions() {
    let axes = Tensor::new(vec![1], vec![2i64]).expect("one axis");
    let sum = build(&case("ReduceSum", vec![]));
    assert!(
        sum.compute(&[unknown(F32, &[3, 4]), known(&axes)]).is_err(),
        "axis 2 of a rank-2 input"
    );
    assert!(sum.compute(&[unknown(B, &[3, 4])]).is_err(), "bool sum");
    assert!(build(&case("Softmax", vec![]).attr("axis", int_attr(2)))
        .compute(&[unknown(F32, &[3, 4])])
        .is_err());
    assert!(build(&case("Softmax", vec![]))
        .compute(&[unknown(I32, &[3, 4])])
        .is_err());
    let ln = build(&case("LayerNormalization", vec![]));
    assert!(
        ln.compute(&[unknown(F32, &[3, 4]), unknown(F32, &[3])])
            .is_err(),
        "scale does not broadcast"
    );
    assert!(ln.compute(&[unknown(F32, &[3, 4])]).is_err(), "no scale");
    let bn = build(&case("BatchNormalization", vec![]));
    let p = [3usize];
    assert!(
        bn.compute(&[
            unknown(F32, &[2, 4, 5]),
            unknown(F32, &p),
            unknown(F32, &p),
            unknown(F32, &p),
            unknown(F32, &p)
        ])
        .is_err(),
        "3 parameters for 4 channels"
    );
    assert!(
        build(&case("GroupNormalization", vec![]).attr("num_groups", int_attr(4)))
            .compute(&[
                unknown(F32, &[2, 6, 5]),
                unknown(F32, &[6]),
                unknown(F32, &[6])
            ])
            .is_err()
    );
    assert!(build(&case("InstanceNormalization", vec![]))
        .compute(&[unknown(F32, &[6]), unknown(F32, &[6]), unknown(F32, &[6])])
        .is_err());
    assert!(
        build(&case("ArgMax", vec![]).attr("axis", int_attr(1)))
            .compute(&[unknown(F32, &[2, 0])])
            .is_err(),
        "ArgMax of an empty axis"
    );
    let dropout = build(&case("Dropout", vec![]).outputs(2));
    let ratio = Tensor::scalar(0.5f32);
    let training = Tensor::scalar(true);
    assert!(
        dropout
            .compute(&[unknown(F32, &[3]), known(&ratio), known(&training)])
            .is_err(),
        "random training masks are unsupported"
    );
}
