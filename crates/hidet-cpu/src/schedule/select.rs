//! Scalar float `min`/`max` as selects the C compiler can vectorize.
//!
//! C's `fmaxf`/`fminf` (what `MathFunc::Max`/`Min` become) are library calls
//! that block auto-vectorization. `max(a, b)` is rewritten to
//! `(a > b || b != b) ? a : b`, which returns the same value as `fmaxf`
//! for every input (a NaN operand yields the other operand; two NaNs give
//! NaN), up to the sign of a zero result; `min` likewise with `<`.

use hidet_ir::expr::{Expr, ExprKind};
use hidet_ir::intrinsic::MathFunc;

/// `e` with every scalar floating-point `Max`/`Min` turned into a select.
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
            Some(select_min_max(*f == MathFunc::Max, a, b))
        }
        _ => None,
    })
}

/// `fmax(a, b)` (`max`) or `fmin(a, b)` as a select, for scalar floats.
pub(crate) fn select_min_max(max: bool, a: &Expr, b: &Expr) -> Expr {
    let better = if max { a.gt(b) } else { a.lt(b) };
    Expr::select(better.or(b.ne(b)), a.clone(), b.clone())
}
