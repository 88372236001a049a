//! Explicit SIMD: rewriting a scalar `f32` expression of a lane variable
//! `v` into one `f32xW` expression computing it for `v = base .. base + W`.

use hidet_ir::dtype::DataType;
use hidet_ir::expr::{BinaryOp, Expr, ExprKind, UnaryOp, Var};
use hidet_ir::intrinsic::Intrinsic;
use hidet_ir::layout::row_major;
use hidet_ir::ty::Type;
use std::collections::HashMap;

/// The constant `c` such that `e = c·v + (terms without v)`, when `e` is
/// affine in `v` through `+`, `-`, negation and multiplication by
/// constants; `None` otherwise.
pub(crate) fn coefficient(e: &Expr, v: &Var) -> Option<i64> {
    if !e.mentions(v) {
        return Some(0);
    }
    match e.kind() {
        ExprKind::Var(x) if x == v => Some(1),
        ExprKind::Binary(BinaryOp::Add, a, b) => Some(coefficient(a, v)? + coefficient(b, v)?),
        ExprKind::Binary(BinaryOp::Sub, a, b) => Some(coefficient(a, v)? - coefficient(b, v)?),
        ExprKind::Binary(BinaryOp::Mul, a, b) => match (a.as_int(), b.as_int()) {
            (Some(c), _) => Some(c * coefficient(b, v)?),
            (_, Some(c)) => Some(c * coefficient(a, v)?),
            _ => None,
        },
        ExprKind::Unary(UnaryOp::Neg, a) => Some(-coefficient(a, v)?),
        _ => None,
    }
}

/// Whether reading `tensor[indices]` for consecutive values of `v` reads
/// consecutive elements: a row-major tensor whose last index has
/// coefficient 1 in `v` and whose other indices do not mention `v`.
pub(crate) fn is_contiguous_read(tensor: &Var, indices: &[Expr], v: &Var) -> bool {
    let Type::Tensor(t) = tensor.ty() else {
        return false;
    };
    if t.layout != row_major(t.layout.shape()) {
        return false;
    }
    match indices.split_last() {
        Some((last, rest)) => {
            coefficient(last, v) == Some(1) && rest.iter().all(|i| !i.mentions(v))
        }
        None => false,
    }
}

/// `e` evaluated for `v = base + 0 .. base + lanes` as one `f32xlanes`
/// value, or `None` when `e` (an `f32` expression) uses something that has
/// no vector form here: a non-`f32` value depending on `v` (other than an
/// integer element read contiguously and converted to `f32`), a read that is
/// not contiguous in `v`, a comparison, a select, or another cast.
///
/// Sub-expressions that do not mention `v` are computed once as scalars and
/// broadcast.
pub(crate) fn vectorize(e: &Expr, v: &Var, base: &Expr, lanes: u16) -> Option<Expr> {
    if e.dtype() != Some(DataType::F32) {
        return None;
    }
    if !e.mentions(v) {
        return Some(e.broadcast(lanes));
    }
    let at_base = |x: &Expr| -> Expr {
        let mut map = HashMap::new();
        map.insert(v.clone(), base.clone());
        x.substitute(&map)
    };
    match e.kind() {
        ExprKind::TensorElement { tensor, indices } => {
            if !is_contiguous_read(tensor, indices, v) {
                return None;
            }
            let first = tensor.at(indices.iter().map(at_base));
            Some(Expr::call(
                Intrinsic::VectorLoad {
                    dtype: DataType::F32.with_lanes(lanes),
                },
                vec![first.address()],
            ))
        }
        ExprKind::Binary(
            op @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div),
            a,
            b,
        ) => Some(Expr::binary(
            *op,
            vectorize(a, v, base, lanes)?,
            vectorize(b, v, base, lanes)?,
        )),
        ExprKind::Unary(UnaryOp::Neg, a) => Some(-vectorize(a, v, base, lanes)?),
        // An integer element read contiguously, converted (a dequantization's `f32(x)`).
        ExprKind::Cast(a, _) => {
            let ExprKind::TensorElement { tensor, indices } = a.kind() else {
                return None;
            };
            let from = a.dtype().filter(|d| d.is_integer() && d.lanes == 1)?;
            if !is_contiguous_read(tensor, indices, v) {
                return None;
            }
            let first = tensor.at(indices.iter().map(at_base));
            let load = Expr::call(
                Intrinsic::VectorLoad {
                    dtype: from.with_lanes(lanes),
                },
                vec![first.address()],
            );
            Some(load.cast(DataType::F32.with_lanes(lanes)))
        }
        ExprKind::Math(f, args) if !f.returns_bool() => {
            let args = args
                .iter()
                .map(|a| vectorize(a, v, base, lanes))
                .collect::<Option<Vec<_>>>()?;
            Some(Expr::math(*f, args))
        }
        _ => None,
    }
}
