//! Loop-invariant scalar reads leave vectorized loops.
//!
//! A fused dequantization reads its zero point, `zp[0]`, in the loop over a row's elements:
//! `y[j] = (float(x[j]) - float(zp[0])) · s`. GCC's partial-redundancy elimination then
//! places that read in the loop's latch, and the vectorizer gives up on the loop ("latch
//! block not empty"): the row runs one element at a time. This pass reads such values once,
//! into variables declared before the loop:
//!
//! ```text
//! for j in 0..n (vectorized):         ─►    zp_value = n > 0 ? zp[0] : 0
//!     y[j] = (x[j] - zp[0]) · s             for j in 0..n (vectorized):
//!                                               y[j] = (x[j] - zp_value) · s
//! ```
//!
//! A read is hoisted when it is a scalar element of a tensor the loop does not write, at
//! indices that depend on nothing the loop binds or writes, made outside any branch of a `?:`
//! in a loop without an `if` (a hoisted read must be one the loop makes unconditionally),
//! and not under `&` (an address stays an address); its copies in branches of a `?:` are
//! replaced too (a fused ReLU repeats its operand in a branch: the two must stay one
//! expression, or GCC cannot turn the `?:` into a blend and the loop is not vectorized). The
//! variable reads its element only when the loop runs at least once.

use super::hoist_gather_bases::Inside;
use super::{runs_at_least_once, FunctionPass, PassError};
use crate::dtype::DataType;
use crate::expr::{Expr, ExprKind, Var};
use crate::function::Function;
use crate::stmt::{LoopKind, Scope, Stmt};
use crate::ty::Type;

/// The pass (see the module documentation).
pub struct HoistInvariantLoads;

impl FunctionPass for HoistInvariantLoads {
    fn name(&self) -> &'static str {
        "hoist_invariant_loads"
    }

    fn run(&self, f: Function) -> Result<Function, PassError> {
        let body = f.body.rewrite(&mut hoist_in_loop, &mut |e| e.clone());
        Ok(Function { body, ..f })
    }
}

/// `s` with its invariant reads declared before it, if it is a vectorized loop that has some.
fn hoist_in_loop(s: Stmt) -> Stmt {
    let Stmt::For {
        var,
        extent,
        kind: LoopKind::Vectorize,
        body,
    } = &s
    else {
        return s;
    };
    let mut has_if = false;
    body.visit(&mut |s| has_if |= matches!(s, Stmt::If { .. }));
    if has_if {
        return s;
    }
    let inside = Inside::of(var, body);
    let mut reads = Vec::new();
    body.visit(&mut |s| {
        for e in s.exprs() {
            collect_unconditional(&inside, e, false, &mut reads);
        }
    });
    if reads.is_empty() {
        return s;
    }
    let runs = runs_at_least_once(extent);
    let (mut stmts, mut hoisted) = (Vec::new(), Vec::new());
    for (read, tensor, dtype) in reads {
        let v = Var::new(format!("{}_value", tensor.name()), Type::Data(dtype));
        stmts.push(Stmt::Declare {
            var: v.clone(),
            scope: Scope::Register,
            init: Some(Expr::select(runs.clone(), read.clone(), Expr::zero(dtype))),
        });
        hoisted.push((read, v));
    }
    let body = body.rewrite(&mut |s| s, &mut |e| replace(e, &hoisted));
    stmts.push(Stmt::For {
        var: var.clone(),
        extent: extent.clone(),
        kind: LoopKind::Vectorize,
        body: Box::new(body),
    });
    Stmt::seq(stmts)
}

/// Adds to `reads` each hoistable read of `e` (see the module documentation) not yet there,
/// with its tensor and scalar type; `conditional`: `e` is in a branch of a `?:`.
fn collect_unconditional(
    inside: &Inside,
    e: &Expr,
    conditional: bool,
    reads: &mut Vec<(Expr, Var, DataType)>,
) {
    match e.kind() {
        ExprKind::Address(_) => {}
        ExprKind::TensorElement { tensor, .. }
            if !conditional
                && matches!(tensor.ty(), Type::Tensor(_))
                && e.dtype().is_some_and(|t| !t.is_vector())
                && inside.invariant(e, false) =>
        {
            if let (Some(dtype), false) = (e.dtype(), reads.iter().any(|(read, _, _)| read == e)) {
                reads.push((e.clone(), tensor.clone(), dtype));
            }
        }
        ExprKind::Select(c, a, b) => {
            collect_unconditional(inside, c, conditional, reads);
            collect_unconditional(inside, a, true, reads);
            collect_unconditional(inside, b, true, reads);
        }
        _ => {
            for c in e.children() {
                collect_unconditional(inside, c, conditional, reads);
            }
        }
    }
}

/// `e` with every occurrence of a hoisted read, in a branch of a `?:` too (the loop makes that
/// read anyway), replaced by its variable; addresses are kept.
fn replace(e: &Expr, hoisted: &[(Expr, Var)]) -> Expr {
    if let ExprKind::Address(_) = e.kind() {
        return e.clone();
    }
    if let Some((_, v)) = hoisted.iter().find(|(read, _)| read == e) {
        return v.expr();
    }
    let children: Vec<Expr> = e
        .children()
        .into_iter()
        .map(|c| replace(c, hoisted))
        .collect();
    if children.is_empty() {
        e.clone()
    } else {
        e.with_children(children)
    }
}
