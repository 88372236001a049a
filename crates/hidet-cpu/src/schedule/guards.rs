//! Bounds guards of window reads, and the check that lets a block of work drop them.
//!
//! Windowed operators (pooling, convolutions read directly) guard every read that may fall
//! into the padding: `inside ? x[..] : identity`, where `inside` is a conjunction of
//! comparisons of index expressions. Where a whole block of rows and window points is known
//! to be inside, the guards are true and the reads become plain (vectorizable) loads. Every
//! guard here is *monotone* in each variable (built from `+`, `-`, multiplication by a
//! constant and floor division by a positive constant), so it holds on a box of variable
//! values exactly when it holds at every corner of the box.

use hidet_ir::compute::tensor_shape;
use hidet_ir::expr::{BinaryOp, Expr, ExprKind, Var};
use hidet_ir::intrinsic::MathFunc;
use hidet_ir::passes::{bound_of, Interval, VarRanges};
use std::collections::HashMap;

/// The monotone index comparisons used in `Select` conditions of `value`, without repeats.
pub(crate) fn index_guards(value: &Expr) -> Vec<Expr> {
    let mut guards: Vec<Expr> = Vec::new();
    collect(value, &mut guards);
    guards
}

fn collect(e: &Expr, guards: &mut Vec<Expr>) {
    if let ExprKind::Select(cond, _, _) = e.kind() {
        conjuncts(cond, guards);
    }
    for c in e.children() {
        collect(c, guards);
    }
}

fn conjuncts(cond: &Expr, guards: &mut Vec<Expr>) {
    match cond.kind() {
        ExprKind::Binary(BinaryOp::And, a, b) => {
            conjuncts(a, guards);
            conjuncts(b, guards);
        }
        ExprKind::Binary(op, a, b)
            if is_order(*op) && monotone(a) && monotone(b) && !guards.contains(cond) =>
        {
            guards.push(cond.clone());
        }
        _ => {}
    }
}

fn is_order(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
    )
}

/// An integer expression monotone in each of its variables.
fn monotone(e: &Expr) -> bool {
    if !e.dtype().is_some_and(|d| d.is_integer()) {
        return false;
    }
    match e.kind() {
        ExprKind::Const(_) | ExprKind::Var(_) => true,
        ExprKind::Binary(BinaryOp::Add | BinaryOp::Sub, a, b) => monotone(a) && monotone(b),
        ExprKind::Binary(BinaryOp::Mul, a, b) => {
            (a.as_int().is_some() && monotone(b)) || (b.as_int().is_some() && monotone(a))
        }
        ExprKind::Binary(BinaryOp::Div, a, b) => b.as_int().is_some_and(|d| d > 0) && monotone(a),
        _ => false,
    }
}

/// `value` with every guard in `guards` taken as true, the selects it decided folded away,
/// and the clamps those guards make no-ops (`max(p, 0)` under `p >= 0`, `min(p, n - 1)`
/// under `p < n`) dropped.
pub(crate) fn assume(value: &Expr, guards: &[Expr]) -> Expr {
    value.rewrite(&mut |e| {
        if guards.contains(e) {
            return Some(Expr::bool(true));
        }
        let is_true = |x: &Expr| *x == Expr::bool(true);
        if let ExprKind::Math(f @ (MathFunc::Max | MathFunc::Min), args) = e.kind() {
            if let [p, bound] = args.as_slice() {
                let implied = match (f, bound.as_int()) {
                    (MathFunc::Max, Some(lo)) => p.ge(Expr::int(lo)),
                    (MathFunc::Min, Some(hi)) => p.lt(Expr::int(hi + 1)),
                    _ => return None,
                };
                if guards.contains(&implied) {
                    return Some(p.clone());
                }
            }
        }
        match e.kind() {
            ExprKind::Binary(BinaryOp::And, a, b) if is_true(a) => Some(b.clone()),
            ExprKind::Binary(BinaryOp::And, a, b) if is_true(b) => Some(a.clone()),
            ExprKind::Select(c, t, _) if is_true(c) => Some(t.clone()),
            _ => None,
        }
    })
}

/// A condition that holds exactly when every guard holds for all values of the `ranges`
/// variables, each ranging over `first..=last` (given as expressions of the surrounding
/// loop variables): the conjunction of every guard at every corner of the box.
pub(crate) fn hold_on_box(guards: &[Expr], ranges: &[(Var, Expr, Expr)]) -> Expr {
    let mut all = Expr::bool(true);
    let corners = 1usize << ranges.len();
    for guard in guards {
        let vars = variables(guard);
        let relevant: Vec<&(Var, Expr, Expr)> =
            ranges.iter().filter(|(v, _, _)| vars.contains(v)).collect();
        for corner in 0..corners.min(1 << relevant.len()) {
            let at: HashMap<Var, Expr> = relevant
                .iter()
                .enumerate()
                .map(|(i, (v, lo, hi))| {
                    let end = if corner >> i & 1 == 1 { hi } else { lo };
                    (v.clone(), end.clone())
                })
                .collect();
            let check = guard.substitute(&at);
            all = if all == Expr::bool(true) {
                check
            } else {
                all.and(check)
            };
        }
    }
    all
}

/// True when every tensor read in `value` stays inside its tensor for all values of the
/// `ranges` variables (each over `lo..=hi`), so that the reads may be done whatever the
/// guards around them say: the bound ([`bound_of`]) of each index component lies inside
/// its dimension (a window position clamped into the input, `min(max(p, 0), n - 1)`, or
/// only on the side it can leave, qualifies). Tensors of non-constant shape never qualify.
pub(crate) fn reads_in_bounds(value: &Expr, ranges: &[(Var, i64, i64)]) -> bool {
    let mut known = VarRanges::new();
    for (var, lo, hi) in ranges {
        known.set(var, Interval::new(*lo, *hi));
    }
    let mut safe = true;
    value.visit(&mut |e| {
        if let ExprKind::TensorElement { tensor, indices } = e.kind() {
            let shape = tensor_shape(tensor);
            safe &= shape.len() == indices.len()
                && indices
                    .iter()
                    .zip(&shape)
                    .all(|(i, n)| n.as_int().is_some_and(|n| bound_of(i, &known).within(n)));
        }
    });
    safe
}

/// The variables `e` reads, each once.
pub(crate) fn variables(e: &Expr) -> Vec<Var> {
    let mut vars = Vec::new();
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        if let ExprKind::Var(v) = x.kind() {
            if !vars.contains(v) {
                vars.push(v.clone());
            }
        }
        stack.extend(x.children());
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::eval_index;
    use hidet_ir::dtype::DataType;

    fn window_read(i: &Var, r: &Var, x: &Var) -> Expr {
        let at = i.expr() * 2 + r.expr() - 1;
        let inside = at.ge(0).and(at.lt(9));
        Expr::select(inside, x.expr(), Expr::f32(0.0))
    }

    #[test]
    fn guards_of_a_padded_window_read() {
        let (i, r) = (Var::new("i", DataType::I32), Var::new("r", DataType::I32));
        let x = Var::new("x", DataType::F32);
        let value = window_read(&i, &r, &x) + Expr::f32(1.0);
        let guards = index_guards(&value);
        assert_eq!(guards.len(), 2);
        let assumed = assume(&value, &guards);
        assert_eq!(assumed, x.expr() + Expr::f32(1.0));
    }

    #[test]
    fn clamped_and_boxed_reads_are_in_bounds_and_assumed_guards_drop_clamps() {
        let (i, r) = (Var::new("i", DataType::I32), Var::new("r", DataType::I32));
        let x = hidet_ir::compute::tensor_input("x", DataType::F32, [8i64]);
        let ranges = [(i.clone(), 0, 5), (r.clone(), 0, 2)];
        let pos = i.expr() + r.expr() - 1;
        let clamped = x.at([pos.max(Expr::int(0)).min(Expr::int(7))]);
        assert!(reads_in_bounds(&clamped, &ranges));
        assert!(!reads_in_bounds(&x.at([pos.clone()]), &ranges));
        assert!(reads_in_bounds(&x.at([i.expr() + r.expr()]), &ranges));
        let wide = [(i.clone(), 0, 6), (r.clone(), 0, 2)];
        assert!(!reads_in_bounds(&x.at([i.expr() + r.expr()]), &wide));
        // Clamped on the one side a strided window leaves (`2i + r - 1 <= 7` for `i <= 3`).
        let strided = [(i.clone(), 0, 3), (r.clone(), 0, 2)];
        let low_side = (i.expr() * 2 + r.expr() - 1).max(Expr::int(0));
        assert!(reads_in_bounds(&x.at([low_side.clone()]), &strided));
        assert!(!reads_in_bounds(&x.at([low_side]), &wide));
        let past_end = [(i.clone(), 0, 9), (r.clone(), 0, 2)];
        assert!(!reads_in_bounds(&x.at([pos.max(Expr::int(0))]), &past_end));

        let inside = pos.ge(Expr::int(0)).and(pos.lt(Expr::int(8)));
        let value = Expr::select(inside, clamped, Expr::f32(0.0));
        let assumed = assume(&value, &index_guards(&value));
        assert_eq!(assumed, x.at([pos]));
    }

    #[test]
    fn box_check_matches_every_point() {
        let (i, r, b) = (
            Var::new("i", DataType::I32),
            Var::new("r", DataType::I32),
            Var::new("b", DataType::I32),
        );
        let x = Var::new("x", DataType::F32);
        let guards = index_guards(&window_read(&i, &r, &x));
        // `i` ranges over the block b*2 ..= b*2+1, `r` over 0..=2.
        let ranges = vec![
            (i.clone(), b.expr() * 2, b.expr() * 2 + 1),
            (r.clone(), Expr::int(0), Expr::int(2)),
        ];
        let check = hold_on_box(&guards, &ranges);
        let mut seen = [false; 2];
        for block in 0..5i64 {
            let env: HashMap<u64, i64> = [(b.id(), block)].into();
            let claimed = eval_index(&check, &env).expect("a closed condition") != 0;
            let actual = (block * 2..=block * 2 + 1)
                .all(|iv| (0..=2).all(|rv| (0..9).contains(&(iv * 2 + rv - 1))));
            assert_eq!(claimed, actual, "block {block}");
            seen[usize::from(actual)] = true;
        }
        assert_eq!(
            seen,
            [true, true],
            "both interior and border blocks are checked"
        );
    }
}
