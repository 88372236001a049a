//! Scalar float `min`/`max` as selects the C compiler can vectorize.
//!
//! C's `fmaxf`/`fminf` (what `MathFunc::Max`/`Min` become) are library calls
//! that block auto-vectorization. `max(a, b)` is rewritten to
//! `(a > b || b != b) ? a : b`, which returns the same value as `fmaxf`
//! for every input (a NaN operand yields the other operand; two NaNs give
//! NaN), up to the sign of a zero result; `min` likewise with `<`. The select
//! repeats its operands, so only operands of at most [`MAX_SELECT_OPERAND`]
//! nodes are rewritten: a clamp of a clamp (a sample position bounded into an
//! image, then its floor bounded again) would otherwise print its innermost
//! operand 3ᵈ times at depth `d`.

use hidet_ir::expr::{Expr, ExprKind};
use hidet_ir::intrinsic::MathFunc;

/// The most expression nodes an operand of a `min`/`max` rewritten as a select may have.
pub(crate) const MAX_SELECT_OPERAND: usize = 64;

/// `e` with every scalar floating-point `Max`/`Min` whose operands have at most
/// [`MAX_SELECT_OPERAND`] nodes each turned into a select.
pub(crate) fn selects_for_min_max(e: &Expr) -> Expr {
    e.rewrite(&mut |x| match x.kind() {
        ExprKind::Math(f @ (MathFunc::Max | MathFunc::Min), args) => {
            let dtype = x.dtype()?;
            if !dtype.is_float() || dtype.is_vector() {
                return None;
            }
            let [a, b] = args.as_slice() else {
                return None;
            };
            let small = |x: &Expr| nodes_up_to(x, MAX_SELECT_OPERAND) <= MAX_SELECT_OPERAND;
            (small(a) && small(b)).then(|| select_min_max(*f == MathFunc::Max, a, b))
        }
        _ => None,
    })
}

/// The nodes of `e` counted as a tree (a shared subexpression once per use), stopping
/// past `limit`.
fn nodes_up_to(e: &Expr, limit: usize) -> usize {
    let mut count = 1;
    for c in e.children() {
        if count > limit {
            break;
        }
        count += nodes_up_to(c, limit - count.min(limit));
    }
    count
}

/// `fmax(a, b)` (`max`) or `fmin(a, b)` as a select, for scalar floats.
pub(crate) fn select_min_max(max: bool, a: &Expr, b: &Expr) -> Expr {
    let better = if max { a.gt(b) } else { a.lt(b) };
    Expr::select(better.or(b.ne(b)), a.clone(), b.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hidet_ir::dtype::DataType;
    use hidet_ir::expr::Var;

    #[test]
    fn small_operands_become_selects() {
        let x = Expr::from(Var::new("x", DataType::F32));
        let relu = selects_for_min_max(&x.max(Expr::float_of(0.0, DataType::F32)));
        assert!(matches!(relu.kind(), ExprKind::Select(..)), "{relu:?}");
    }

    #[test]
    fn nested_clamps_do_not_grow_exponentially() {
        let mut e = Expr::from(Var::new("x", DataType::F32));
        for depth in 0..12 {
            let bound = Expr::float_of(depth as f64, DataType::F32);
            e = e
                .max(bound.clone())
                .min(bound + Expr::float_of(10.0, DataType::F32));
        }
        let rewritten = selects_for_min_max(&e);
        assert!(
            nodes_up_to(&rewritten, 10_000) < 200,
            "{}",
            nodes_up_to(&rewritten, 10_000)
        );
    }
}
