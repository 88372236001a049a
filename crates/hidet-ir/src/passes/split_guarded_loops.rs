//! Index-set splitting of vectorized loops around guarded reads.
//!
//! A vectorized loop `for j in 0..n` whose body is one store of
//! `cond ? read : other`, where `cond` is a conjunction of comparisons each
//! either free of `j` or affine in `j` with a constant coefficient, is true on
//! one contiguous range `[lo, hi)` of `j` (a padded convolution's im2col row:
//! the pixels inside the image). This pass cuts the loop there:
//!
//! ```text
//! for j in 0..lo:            store other
//! for j in lo..hi:           store read      (no guard)
//! for j in hi..n:            store other
//! ```
//!
//! The middle loop reads without a condition, so the C compiler emits plain
//! vector loads (and, for a stride-2 read, loads and permutes) where it would
//! otherwise need masked loads or, without masks for strided reads, scalar
//! code. Conditions free of `j` become a uniform test that empties the middle
//! loop. The rewrite is exact: each `j` stores what it stored before, in the
//! same order within each part; bounds are computed on non-negative numerators
//! only, so they hold under any rounding of the division.
//!
//! A store of `cond ? a : b` whose `cond` is free of `j` altogether (a
//! concatenation choosing its input by channel) becomes `if cond { for j: a }
//! else { for j: b }`, each loop split again: the C compiler would otherwise
//! if-convert the select and load every input of the chain for every element.

use super::{vectorized_loop, FunctionPass, PassError};
use crate::dtype::DataType;
use crate::expr::{BinaryOp, Expr, ExprKind, Var};
use crate::function::Function;
use crate::stmt::{LoopKind, Stmt};
use std::collections::HashMap;

/// The pass (see the module documentation).
pub struct SplitGuardedLoops;

impl FunctionPass for SplitGuardedLoops {
    fn name(&self) -> &'static str {
        "split_guarded_loops"
    }

    fn run(&self, f: Function) -> Result<Function, PassError> {
        let body = f.body.rewrite(&mut split_loop, &mut |e| e.clone());
        Ok(Function { body, ..f })
    }
}

/// `c·j + r >= 0` for one conjunct of a guard.
struct AffineFact {
    coefficient: i64,
    rest: Expr,
}

/// The conjuncts of a guard: those affine in the loop variable (which bound its range) and
/// those free of it (a uniform test).
#[derive(Default)]
struct Guard {
    affine: Vec<AffineFact>,
    uniform: Vec<Expr>,
}

/// `s` split if it is a vectorized loop of the form the module describes.
fn split_loop(s: Stmt) -> Stmt {
    let Some((var, extent, body, ty)) = vectorized_loop(&s) else {
        return s;
    };
    let Stmt::Store {
        tensor,
        indices,
        value,
    } = body
    else {
        return s;
    };
    let ExprKind::Select(cond, read, other) = value.kind() else {
        return s;
    };
    if !cond.mentions(var) {
        // A uniform choice (a concatenation's input, chosen by the channel): one loop per
        // branch, each split again, instead of a loop that evaluates every branch.
        let branch = |stored: &Expr| {
            split_loop(Stmt::For {
                var: var.clone(),
                extent: extent.clone(),
                kind: LoopKind::Vectorize,
                body: Box::new(Stmt::Store {
                    tensor: tensor.clone(),
                    indices: indices.clone(),
                    value: stored.clone(),
                }),
            })
        };
        return Stmt::If {
            cond: cond.clone(),
            then_body: Box::new(branch(read)),
            else_body: Some(Box::new(branch(other))),
        };
    }
    if !reads_memory(read) {
        return s;
    }
    let mut guard = Guard::default();
    if !guard.collect(cond, var) || guard.affine.is_empty() {
        return s;
    }
    let int = |v: i64| Expr::int_of(v, ty);
    let mut lo = int(0);
    let mut hi = extent.clone();
    for fact in &guard.affine {
        let c = fact.coefficient;
        if c > 0 {
            // j >= ceil(-r / c); a negative bound is 0.
            let numerator = (int(0) - fact.rest.clone()).max(int(0));
            lo = lo.max(ceil_div(numerator, c, ty));
        } else {
            // -c·j + r >= 0  ⇔  j < floor(r / -c) + 1 = floor((r - c) / -c).
            let numerator = (fact.rest.clone() - int(c)).max(int(0));
            hi = hi.min(if c == -1 {
                numerator
            } else {
                numerator / int(-c)
            });
        }
    }
    let lo_var = Var::new(format!("{}_in_lo", var.name()), ty);
    let hi_var = Var::new(format!("{}_in_hi", var.name()), ty);
    let lo_value = lo.min(extent.clone());
    let mut hi_value = hi.max(lo_var.expr());
    if let Some(uniform) = guard
        .uniform
        .iter()
        .cloned()
        .reduce(|a, b| Expr::binary(BinaryOp::And, a, b))
    {
        hi_value = Expr::select(uniform, hi_value, lo_var.expr());
    }
    let part = |start: Expr, end: Expr, stored: &Expr| {
        let j = Var::new(var.name(), ty);
        let at = HashMap::from([(var.clone(), start.clone() + j.expr())]);
        Stmt::For {
            var: j,
            extent: end - start,
            kind: LoopKind::Vectorize,
            body: Box::new(Stmt::Store {
                tensor: tensor.clone(),
                indices: indices.iter().map(|i| i.substitute(&at)).collect(),
                value: stored.substitute(&at),
            }),
        }
    };
    let parts = Stmt::Seq(vec![
        part(int(0), lo_var.expr(), other),
        part(lo_var.expr(), hi_var.expr(), read),
        part(hi_var.expr(), extent.clone(), other),
    ]);
    Stmt::Let {
        var: lo_var,
        value: lo_value,
        body: Box::new(Stmt::Let {
            var: hi_var,
            value: hi_value,
            body: Box::new(parts),
        }),
    }
}

/// `⌈numerator / c⌉` for a non-negative `numerator` and positive `c`.
fn ceil_div(numerator: Expr, c: i64, ty: DataType) -> Expr {
    if c == 1 {
        numerator
    } else {
        (numerator + Expr::int_of(c - 1, ty)) / Expr::int_of(c, ty)
    }
}

fn reads_memory(e: &Expr) -> bool {
    let mut found = false;
    e.visit(&mut |x| found |= matches!(x.kind(), ExprKind::TensorElement { .. }));
    found
}

impl Guard {
    /// Adds the conjuncts of `cond`; false when one is neither free of `var` nor an
    /// affine comparison in it.
    fn collect(&mut self, cond: &Expr, var: &Var) -> bool {
        if !cond.mentions(var) {
            self.uniform.push(cond.clone());
            return true;
        }
        let ExprKind::Binary(op, a, b) = cond.kind() else {
            return false;
        };
        let scalar_bool = cond.dtype().is_some_and(|t| t.lanes == 1);
        match op {
            BinaryOp::And | BinaryOp::BitAnd if scalar_bool => {
                self.collect(a, var) && self.collect(b, var)
            }
            BinaryOp::Ge | BinaryOp::Gt | BinaryOp::Le | BinaryOp::Lt => {
                let (Some((ca, ra)), Some((cb, rb))) = (affine(a, var), affine(b, var)) else {
                    return false;
                };
                let Some(ty) = a.dtype().filter(|t| t.is_integer() && t.lanes == 1) else {
                    return false;
                };
                if b.dtype() != Some(ty) || var.ty().as_data() != Some(ty) {
                    return false;
                }
                let one = Expr::int_of(1, ty);
                let (c, r) = (ca - cb, ra - rb);
                let (coefficient, rest) = match op {
                    BinaryOp::Ge => (c, r),
                    BinaryOp::Gt => (c, r - one),
                    BinaryOp::Le => (-c, Expr::int_of(0, ty) - r),
                    _ => (-c, Expr::int_of(0, ty) - r - one),
                };
                if coefficient == 0 {
                    return false;
                }
                self.affine.push(AffineFact { coefficient, rest });
                true
            }
            _ => false,
        }
    }
}

/// `(c, r)` with `e = c·var + r` and `r` free of `var`, for sums, differences and
/// products by integer constants of `var` and expressions free of it.
fn affine(e: &Expr, var: &Var) -> Option<(i64, Expr)> {
    if !e.mentions(var) {
        return Some((0, e.clone()));
    }
    let ty = e.dtype().filter(|t| t.is_integer() && t.lanes == 1)?;
    match e.kind() {
        ExprKind::Var(v) if v == var => Some((1, Expr::int_of(0, ty))),
        ExprKind::Binary(BinaryOp::Add, a, b) => {
            let ((ca, ra), (cb, rb)) = (affine(a, var)?, affine(b, var)?);
            Some((ca.checked_add(cb)?, ra + rb))
        }
        ExprKind::Binary(BinaryOp::Sub, a, b) => {
            let ((ca, ra), (cb, rb)) = (affine(a, var)?, affine(b, var)?);
            Some((ca.checked_sub(cb)?, ra - rb))
        }
        ExprKind::Binary(BinaryOp::Mul, a, b) => {
            let (x, k) = match (a.as_int(), b.as_int()) {
                (_, Some(k)) => (a, k),
                (Some(k), _) => (b, k),
                _ => return None,
            };
            let (c, r) = affine(x, var)?;
            Some((c.checked_mul(k)?, r * Expr::int_of(k, ty)))
        }
        _ => None,
    }
}
