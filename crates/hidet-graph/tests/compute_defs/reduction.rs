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
    c
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
