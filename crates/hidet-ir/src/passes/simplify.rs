//! The arithmetic simplifier.
//!
//! Integer expressions are rewritten with the help of bound analysis
//! ([`super::bounds`]): loop variables range over `[0, extent)`, `threadIdx`
//! over the kernel's block, `Let` variables over their value's range, and
//! `if` conditions comparing a variable with a constant narrow it in their
//! branches. The rewrites are exact for floor division and modulo:
//!
//! - constants fold (when the result fits the type); `x*1`, `x+0`, `x*0`,
//!   `x/1`, `x%1` go; constants gather on the right of sums and products;
//! - `x / c` and `x % c` fold when `x` stays within one multiple of `c`
//!   (e.g. `x / c → 0` and `x % c → x` for `0 <= x < c`);
//! - `(a*c + b) / c → a + b/c` and `(a*c + b) % c → b % c` (exact for floor
//!   semantics whatever the sign of `b`); `x / a / b → x / (a*b)`;
//!   `(x / c) * c + x % c → x`;
//! - comparisons decided by the bounds fold; `if` with a constant condition
//!   keeps one branch; empty loops, branches and unused `Let`s go;
//! - last, `/` and `%` by a power of two become `>>` and `&` where the
//!   dividend is proven non-negative (kept otherwise, so the codegen's floor
//!   semantics still apply).
//!
//! Floating-point expressions are left as written.

use super::bounds::{bound_of, fits, is_non_negative, type_range, Interval, VarRanges};
use super::lower_task_mappings::loop_var_range;
use super::{FunctionPass, PassError};
use crate::dtype::DataType;
use crate::expr::{
    floor_div, floor_mod, BinaryOp, Builtin, Constant, Expr, ExprKind, UnaryOp, Var,
};
use crate::function::Function;
use crate::intrinsic::MathFunc;
use crate::stmt::Stmt;
use std::collections::HashMap;

/// The pass: simplifies every expression and statement of a function.
pub struct Simplify;

impl FunctionPass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&self, f: Function) -> Result<Function, PassError> {
        let mut ranges = VarRanges::for_function(&f);
        let body = simplify_stmt(&f.body, &mut ranges);
        Ok(Function { body, ..f })
    }
}

/// Rounds of bottom-up rewriting before giving up on a fixpoint.
const MAX_ROUNDS: usize = 16;

/// `e` simplified under `ranges`; evaluates to the same value as `e` for
/// every assignment of the variables within their ranges.
pub fn simplify_expr(e: &Expr, ranges: &VarRanges) -> Expr {
    let mut cur = e.clone();
    for _ in 0..MAX_ROUNDS {
        let next = cur.rewrite(&mut |n| rewrite_node(n, ranges));
        if next == cur {
            break;
        }
        cur = next;
    }
    cur.rewrite(&mut |n| strength_reduce(n, ranges))
}

/// `s` simplified; `ranges` holds the enclosing scope's knowledge and is
/// left as it was found.
pub fn simplify_stmt(s: &Stmt, ranges: &mut VarRanges) -> Stmt {
    let se = |e: &Expr, r: &VarRanges| simplify_expr(e, r);
    match s {
        Stmt::Let { var, value, body } => {
            let value = se(value, ranges);
            if is_constant_or_builtin(&value) {
                let map = HashMap::from([(var.clone(), value)]);
                let body = body.rewrite(&mut |s| s, &mut |e| e.substitute(&map));
                return simplify_stmt(&body, ranges);
            }
            let prev = ranges.set(var, bound_of(&value, ranges));
            let body = simplify_stmt(body, ranges);
            ranges.restore(var, prev);
            if !uses_var(&body, var) && is_pure(&value) {
                return body;
            }
            Stmt::Let {
                var: var.clone(),
                value,
                body: Box::new(body),
            }
        }
        Stmt::For {
            var,
            extent,
            kind,
            body,
        } => {
            let extent = se(extent, ranges);
            if extent.as_int().is_some_and(|e| e <= 0) {
                return Stmt::nop();
            }
            if extent.as_int() == Some(1) {
                let zero = Expr::int_of(0, var.ty().as_data().unwrap_or(DataType::I32));
                let map = HashMap::from([(var.clone(), zero)]);
                let body = body.rewrite(&mut |s| s, &mut |e| e.substitute(&map));
                return simplify_stmt(&body, ranges);
            }
            let prev = ranges.set(var, loop_var_range(&extent, ranges));
            let body = simplify_stmt(body, ranges);
            ranges.restore(var, prev);
            if is_nop(&body) && is_pure(&extent) {
                return Stmt::nop();
            }
            Stmt::For {
                var: var.clone(),
                extent,
                kind: *kind,
                body: Box::new(body),
            }
        }
        Stmt::ForMapping {
            vars,
            mapping,
            worker,
            body,
        } => {
            let shape = mapping.task_shape();
            let prevs: Vec<_> = vars
                .iter()
                .zip(&shape)
                .map(|(v, &d)| ranges.set(v, Interval::below(d)))
                .collect();
            let body = simplify_stmt(body, ranges);
            for (v, p) in vars.iter().zip(prevs) {
                ranges.restore(v, p);
            }
            Stmt::ForMapping {
                vars: vars.clone(),
                mapping: mapping.clone(),
                worker: se(worker, ranges),
                body: Box::new(body),
            }
        }
        Stmt::If {
            cond,
            then_body,
            else_body,
        } => {
            let cond = se(cond, ranges);
            match cond.kind() {
                ExprKind::Const(Constant::Bool(true)) => return simplify_stmt(then_body, ranges),
                ExprKind::Const(Constant::Bool(false)) => {
                    return match else_body {
                        Some(e) => simplify_stmt(e, ranges),
                        None => Stmt::nop(),
                    }
                }
                _ => {}
            }
            let then_body = with_facts(ranges, &facts(&cond, true, ranges), |r| {
                simplify_stmt(then_body, r)
            });
            let else_body = else_body.as_ref().map(|e| {
                with_facts(ranges, &facts(&cond, false, ranges), |r| {
                    simplify_stmt(e, r)
                })
            });
            let else_body = else_body.filter(|e| !is_nop(e));
            match (is_nop(&then_body), else_body) {
                (true, None) if is_pure(&cond) => Stmt::nop(),
                (true, Some(e)) => Stmt::If {
                    cond: se(&!cond, ranges),
                    then_body: Box::new(e),
                    else_body: None,
                },
                (_, else_body) => Stmt::If {
                    cond,
                    then_body: Box::new(then_body),
                    else_body: else_body.map(Box::new),
                },
            }
        }
        Stmt::Seq(stmts) => Stmt::seq(
            stmts
                .iter()
                .map(|s| simplify_stmt(s, ranges))
                .filter(|s| !is_nop(s))
                .collect(),
        ),
        Stmt::Assert { cond, message } => {
            let cond = se(cond, ranges);
            if matches!(cond.kind(), ExprKind::Const(Constant::Bool(true))) {
                Stmt::nop()
            } else {
                Stmt::Assert {
                    cond,
                    message: message.clone(),
                }
            }
        }
        other => other.rewrite(&mut |s| s, &mut |e| se(e, ranges)),
    }
}

fn is_nop(s: &Stmt) -> bool {
    matches!(s, Stmt::Seq(v) if v.is_empty())
}

fn is_constant_or_builtin(e: &Expr) -> bool {
    matches!(e.kind(), ExprKind::Const(_) | ExprKind::Builtin(_))
}

/// Whether evaluating `e` has no effect besides its value (no calls).
fn is_pure(e: &Expr) -> bool {
    let mut pure = true;
    e.visit(&mut |n| {
        if matches!(n.kind(), ExprKind::Call(..)) {
            pure = false;
        }
    });
    pure
}

fn uses_var(s: &Stmt, var: &Var) -> bool {
    let mut used = false;
    s.visit(&mut |s| {
        for e in s.exprs() {
            e.visit(&mut |n| match n.kind() {
                ExprKind::Var(v) | ExprKind::TensorElement { tensor: v, .. } if v == var => {
                    used = true
                }
                _ => {}
            });
        }
        match s {
            Stmt::Store { tensor: v, .. } | Stmt::Assign { var: v, .. } if v == var => used = true,
            _ => {}
        }
    });
    used
}

/// What a variable or built-in is compared against in a condition.
#[derive(Clone)]
enum Subject {
    Var(Var),
    Builtin(Builtin),
}

/// Ranges implied by `cond == holds`: conjunctions (or negated disjunctions)
/// of comparisons between a variable/built-in and a constant.
fn facts(cond: &Expr, holds: bool, ranges: &VarRanges) -> Vec<(Subject, Interval)> {
    let mut out = Vec::new();
    collect_facts(cond, holds, ranges, &mut out);
    out
}

fn collect_facts(cond: &Expr, holds: bool, ranges: &VarRanges, out: &mut Vec<(Subject, Interval)>) {
    match cond.kind() {
        ExprKind::Unary(UnaryOp::Not, a) => collect_facts(a, !holds, ranges, out),
        ExprKind::Binary(BinaryOp::And, a, b) if holds => {
            collect_facts(a, true, ranges, out);
            collect_facts(b, true, ranges, out);
        }
        ExprKind::Binary(BinaryOp::Or, a, b) if !holds => {
            collect_facts(a, false, ranges, out);
            collect_facts(b, false, ranges, out);
        }
        ExprKind::Binary(op, a, b) if op.is_comparison() => {
            let (subject, other, op) = match (subject_of(a), subject_of(b)) {
                (Some(s), _) => (s, b, *op),
                (None, Some(s)) => (s, a, mirror(*op)),
                _ => return,
            };
            let Some(c) = bound_of(other, ranges).as_const() else {
                return;
            };
            let op = if holds {
                Some(op)
            } else {
                negate(op).or((op == BinaryOp::Eq).then_some(BinaryOp::Ne))
            };
            let range = match op {
                Some(BinaryOp::Lt) => Interval {
                    lo: None,
                    hi: c.checked_sub(1),
                },
                Some(BinaryOp::Le) => Interval {
                    lo: None,
                    hi: Some(c),
                },
                Some(BinaryOp::Gt) => Interval {
                    lo: c.checked_add(1),
                    hi: None,
                },
                Some(BinaryOp::Ge) => Interval {
                    lo: Some(c),
                    hi: None,
                },
                Some(BinaryOp::Eq) => Interval::exact(c),
                Some(BinaryOp::Ne) => {
                    // Only an end of the subject's range can be cut off: `j != 4` for `j` in
                    // `[0, 4]` (a template's full tiles beside its edge tile) is `j ≤ 3`.
                    let current = match &subject {
                        Subject::Var(v) => ranges.var(v),
                        Subject::Builtin(b) => ranges.builtin(*b),
                    };
                    match (current.lo, current.hi) {
                        (_, Some(hi)) if hi == c => Interval {
                            lo: None,
                            hi: c.checked_sub(1),
                        },
                        (Some(lo), _) if lo == c => Interval {
                            lo: c.checked_add(1),
                            hi: None,
                        },
                        _ => return,
                    }
                }
                _ => return,
            };
            out.push((subject, range));
        }
        _ => {}
    }
}

fn subject_of(e: &Expr) -> Option<Subject> {
    match e.kind() {
        ExprKind::Var(v) => Some(Subject::Var(v.clone())),
        ExprKind::Builtin(b) => Some(Subject::Builtin(*b)),
        _ => None,
    }
}

/// `op` with its operands swapped: `a op b == b mirror(op) a`.
fn mirror(op: BinaryOp) -> BinaryOp {
    match op {
        BinaryOp::Lt => BinaryOp::Gt,
        BinaryOp::Le => BinaryOp::Ge,
        BinaryOp::Gt => BinaryOp::Lt,
        BinaryOp::Ge => BinaryOp::Le,
        other => other,
    }
}

fn negate(op: BinaryOp) -> Option<BinaryOp> {
    match op {
        BinaryOp::Lt => Some(BinaryOp::Ge),
        BinaryOp::Le => Some(BinaryOp::Gt),
        BinaryOp::Gt => Some(BinaryOp::Le),
        BinaryOp::Ge => Some(BinaryOp::Lt),
        BinaryOp::Ne => Some(BinaryOp::Eq),
        _ => None,
    }
}

/// Runs `f` with the ranges narrowed by `facts`, then restores them.
fn with_facts<T>(
    ranges: &mut VarRanges,
    facts: &[(Subject, Interval)],
    f: impl FnOnce(&mut VarRanges) -> T,
) -> T {
    let mut undo = Vec::new();
    for (subject, fact) in facts {
        match subject {
            Subject::Var(v) => {
                let narrowed = ranges.var(v).intersect(fact);
                undo.push((subject.clone(), ranges.set(v, narrowed)));
            }
            Subject::Builtin(b) => {
                let narrowed = ranges.builtin(*b).intersect(fact);
                undo.push((subject.clone(), ranges.set_builtin(*b, narrowed)));
            }
        }
    }
    let out = f(ranges);
    for (subject, prev) in undo.into_iter().rev() {
        match subject {
            Subject::Var(v) => ranges.restore(&v, prev),
            Subject::Builtin(b) => ranges.restore_builtin(b, prev),
        }
    }
    out
}

/// The scalar integer type of `e`, if it has one.
fn int_type(e: &Expr) -> Option<DataType> {
    e.dtype().filter(|d| d.is_integer() && !d.is_vector())
}

/// An integer constant of type `t`, when `v` is one of its values.
fn int_const(v: i64, t: DataType) -> Option<Expr> {
    fits(v, t).then(|| Expr::int_of(v, t))
}

/// `e` as an expression of type `t` (cast when its type differs).
fn as_type(e: &Expr, t: DataType) -> Expr {
    if e.dtype() == Some(t) {
        e.clone()
    } else {
        e.cast(t)
    }
}

/// One rewrite of the node `n`, whose children are already simplified.
fn rewrite_node(n: &Expr, ranges: &VarRanges) -> Option<Expr> {
    let out = match n.kind() {
        ExprKind::Binary(op, a, b) => binary(n, *op, a, b, ranges),
        ExprKind::Unary(op, a) => unary(n, *op, a),
        ExprKind::Select(c, a, b) => match c.kind() {
            ExprKind::Const(Constant::Bool(true)) => Some(a.clone()),
            ExprKind::Const(Constant::Bool(false)) => Some(b.clone()),
            _ if a == b && is_pure(c) => Some(a.clone()),
            _ => None,
        },
        ExprKind::Cast(a, t) => {
            if a.dtype() == Some(*t) {
                Some(a.clone())
            } else if t.is_integer() && !t.is_vector() && int_type(a).is_some() {
                a.as_int().and_then(|v| int_const(v, *t))
            } else {
                None
            }
        }
        ExprKind::Math(f @ (MathFunc::Min | MathFunc::Max), args)
            if args.len() == 2 && int_type(n).is_some() =>
        {
            let (x, y) = (bound_of(&args[0], ranges), bound_of(&args[1], ranges));
            let x_le_y = x.hi.zip(y.lo).is_some_and(|(h, l)| h <= l);
            let y_le_x = y.hi.zip(x.lo).is_some_and(|(h, l)| h <= l);
            let pick_first = match f {
                MathFunc::Min => x_le_y,
                _ => y_le_x,
            };
            let pick_second = match f {
                MathFunc::Min => y_le_x,
                _ => x_le_y,
            };
            if pick_first && is_pure(&args[1]) {
                Some(args[0].clone())
            } else if pick_second && is_pure(&args[0]) {
                Some(args[1].clone())
            } else {
                None
            }
        }
        ExprKind::Math(MathFunc::Pow, args) if args.len() == 2 => small_power(&args[0], &args[1]),
        _ => None,
    };
    let t = n.dtype()?;
    out.filter(|e| e != n).map(|e| as_type(&e, t))
}

/// `x^e` as multiplications for a float constant exponent `e` of 1, 2, 3 or 4 (`x` pure,
/// so evaluating it repeatedly is harmless); these are exact up to the rounding of each
/// product, and keep `pow` (a library call) out of vectorizable loops.
fn small_power(x: &Expr, e: &Expr) -> Option<Expr> {
    let ExprKind::Const(Constant::Float(p, _)) = e.kind() else {
        return None;
    };
    if !x.dtype().is_some_and(|d| d.is_float()) || !is_pure(x) {
        return None;
    }
    match *p {
        1.0 => Some(x.clone()),
        2.0 => Some(x * x),
        3.0 => Some(&(x * x) * x),
        4.0 => {
            let sq = x * x;
            Some(&sq * &sq)
        }
        _ => None,
    }
}

fn unary(n: &Expr, op: UnaryOp, a: &Expr) -> Option<Expr> {
    match (op, a.kind()) {
        (UnaryOp::Not, ExprKind::Const(Constant::Bool(v))) => Some(Expr::bool(!v)),
        (UnaryOp::Not, ExprKind::Unary(UnaryOp::Not, x)) => Some(x.clone()),
        (UnaryOp::Not, ExprKind::Binary(cmp, x, y)) if cmp.is_comparison() => {
            let inv = match cmp {
                BinaryOp::Eq => BinaryOp::Ne,
                BinaryOp::Ne => BinaryOp::Eq,
                BinaryOp::Lt => BinaryOp::Ge,
                BinaryOp::Le => BinaryOp::Gt,
                BinaryOp::Gt => BinaryOp::Le,
                _ => BinaryOp::Lt,
            };
            // Negating a float comparison is wrong for NaN; only integers here.
            int_type(x).map(|_| Expr::binary(inv, x.clone(), y.clone()))
        }
        (UnaryOp::Neg, ExprKind::Unary(UnaryOp::Neg, x)) if int_type(n).is_some() => {
            Some(x.clone())
        }
        (UnaryOp::Neg, ExprKind::Const(Constant::Int(v, t))) => {
            v.checked_neg().and_then(|v| int_const(v, *t))
        }
        (UnaryOp::BitNot, ExprKind::Const(Constant::Int(v, t))) => int_const(!v, *t),
        _ => None,
    }
}

fn binary(n: &Expr, op: BinaryOp, a: &Expr, b: &Expr, ranges: &VarRanges) -> Option<Expr> {
    if op.is_logical() {
        return logical(op, a, b);
    }
    let t = int_type(a).or_else(|| int_type(b))?;
    if a.dtype().is_some_and(|d| !d.is_integer() || d.is_vector())
        || b.dtype().is_some_and(|d| !d.is_integer() || d.is_vector())
    {
        return None;
    }
    if op.is_comparison() {
        return compare(op, a, b, ranges);
    }
    let nt = int_type(n).unwrap_or(t);
    if let (Some(x), Some(y)) = (a.as_int(), b.as_int()) {
        return fold(op, x, y, nt).and_then(|v| int_const(v, nt));
    }
    let zero = || Expr::int_of(0, nt);
    match op {
        BinaryOp::Add => add(a, b, nt),
        BinaryOp::Sub => match (a.as_int(), b.as_int()) {
            (_, Some(0)) => Some(a.clone()),
            _ if a == b && is_pure(a) => Some(zero()),
            (_, Some(c)) => {
                let (x, k) = split_const(a);
                let total = k.checked_sub(c)?;
                fits(total, nt).then(|| with_const(x.as_ref(), total, nt))
            }
            _ => None,
        },
        BinaryOp::Mul => match (a.as_int(), b.as_int()) {
            (Some(0), _) if is_pure(b) => Some(zero()),
            (_, Some(0)) if is_pure(a) => Some(zero()),
            (Some(1), _) => Some(b.clone()),
            (_, Some(1)) => Some(a.clone()),
            (Some(c), None) => Some(b * Expr::int_of(c, nt)),
            (None, Some(c)) => match a.kind() {
                ExprKind::Binary(BinaryOp::Mul, x, k) => {
                    let k = k.as_int()?;
                    let prod = k.checked_mul(c)?;
                    fits(prod, nt).then(|| x * Expr::int_of(prod, nt))
                }
                _ => None,
            },
            _ => None,
        },
        BinaryOp::Div => {
            let c = b.as_int()?;
            divide(a, c, nt, ranges)
        }
        BinaryOp::Mod => {
            let c = b.as_int()?;
            modulo(a, c, nt, ranges)
        }
        BinaryOp::BitAnd => {
            let m = b.as_int().or(a.as_int())?;
            let x = if b.as_int().is_some() { a } else { b };
            if m == 0 && is_pure(x) {
                return Some(zero());
            }
            let r = bound_of(x, ranges);
            let all_ones = m > 0 && (m & (m + 1)) == 0;
            (all_ones && r.within(m + 1)).then(|| x.clone())
        }
        BinaryOp::Shr | BinaryOp::Shl => match b.as_int() {
            Some(0) => Some(a.clone()),
            Some(k) if op == BinaryOp::Shr && (0..63).contains(&k) => {
                let r = bound_of(a, ranges);
                (r.within(1i64 << k) && is_pure(a)).then(zero)
            }
            _ => None,
        },
        _ => None,
    }
}

fn logical(op: BinaryOp, a: &Expr, b: &Expr) -> Option<Expr> {
    let ca = match a.kind() {
        ExprKind::Const(Constant::Bool(v)) => Some(*v),
        _ => None,
    };
    let cb = match b.kind() {
        ExprKind::Const(Constant::Bool(v)) => Some(*v),
        _ => None,
    };
    match (op, ca, cb) {
        (BinaryOp::And, Some(true), _) => Some(b.clone()),
        (BinaryOp::And, _, Some(true)) => Some(a.clone()),
        (BinaryOp::And, Some(false), _) => Some(Expr::bool(false)),
        (BinaryOp::And, _, Some(false)) if is_pure(a) => Some(Expr::bool(false)),
        (BinaryOp::Or, Some(false), _) => Some(b.clone()),
        (BinaryOp::Or, _, Some(false)) => Some(a.clone()),
        (BinaryOp::Or, Some(true), _) => Some(Expr::bool(true)),
        (BinaryOp::Or, _, Some(true)) if is_pure(a) => Some(Expr::bool(true)),
        _ => None,
    }
}

fn compare(op: BinaryOp, a: &Expr, b: &Expr, ranges: &VarRanges) -> Option<Expr> {
    if !(is_pure(a) && is_pure(b)) {
        return None;
    }
    let (x, y) = (bound_of(a, ranges), bound_of(b, ranges));
    let lt = |p: &Interval, q: &Interval| p.hi.zip(q.lo).is_some_and(|(h, l)| h < l);
    let le = |p: &Interval, q: &Interval| p.hi.zip(q.lo).is_some_and(|(h, l)| h <= l);
    let same = a == b;
    let v = match op {
        BinaryOp::Lt if lt(&x, &y) => true,
        BinaryOp::Lt if le(&y, &x) || same => false,
        BinaryOp::Le if le(&x, &y) || same => true,
        BinaryOp::Le if lt(&y, &x) => false,
        BinaryOp::Gt if lt(&y, &x) => true,
        BinaryOp::Gt if le(&x, &y) || same => false,
        BinaryOp::Ge if le(&y, &x) || same => true,
        BinaryOp::Ge if lt(&x, &y) => false,
        BinaryOp::Eq | BinaryOp::Ne => {
            let equal = same || (x.as_const().is_some() && x.as_const() == y.as_const());
            let disjoint = lt(&x, &y) || lt(&y, &x);
            match (equal, disjoint) {
                (true, _) => op == BinaryOp::Eq,
                (_, true) => op == BinaryOp::Ne,
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(Expr::bool(v))
}

/// `x op y` on integers of type `t` with floor semantics; `None` when it
/// does not fold (division by zero, out-of-range shift, overflow).
fn fold(op: BinaryOp, x: i64, y: i64, t: DataType) -> Option<i64> {
    let bits = (t.bytes() * 8) as i64;
    match op {
        BinaryOp::Add => x.checked_add(y),
        BinaryOp::Sub => x.checked_sub(y),
        BinaryOp::Mul => x.checked_mul(y),
        BinaryOp::Div if y != 0 => x.checked_div(y).map(|_| floor_div(x, y)),
        BinaryOp::Mod if y != 0 => x.checked_rem(y).map(|_| floor_mod(x, y)),
        BinaryOp::BitAnd => Some(x & y),
        BinaryOp::BitOr => Some(x | y),
        BinaryOp::BitXor => Some(x ^ y),
        BinaryOp::Shl if (0..bits).contains(&y) && x >= 0 => {
            x.checked_mul(1i64.checked_shl(y as u32)?)
        }
        BinaryOp::Shr if (0..bits).contains(&y) && y < 64 => Some(x >> y),
        _ => None,
    }
}

/// Splits `x + c` / `x - c` into `(x, ±c)`; a constant into `(None, c)`.
fn split_const(e: &Expr) -> (Option<Expr>, i64) {
    if let Some(c) = e.as_int() {
        return (None, c);
    }
    match e.kind() {
        ExprKind::Binary(BinaryOp::Add, x, k) => match k.as_int() {
            Some(c) => (Some(x.clone()), c),
            None => (Some(e.clone()), 0),
        },
        ExprKind::Binary(BinaryOp::Sub, x, k) => match k.as_int().and_then(i64::checked_neg) {
            Some(c) => (Some(x.clone()), c),
            None => (Some(e.clone()), 0),
        },
        _ => (Some(e.clone()), 0),
    }
}

/// `x + c` in normal form: `x`, `x + c` or `x - |c|`.
fn with_const(x: Option<&Expr>, c: i64, t: DataType) -> Expr {
    match x {
        None => Expr::int_of(c, t),
        Some(x) if c == 0 => x.clone(),
        Some(x) if c < 0 && c != i64::MIN => x - Expr::int_of(-c, t),
        Some(x) => x + Expr::int_of(c, t),
    }
}

fn add(a: &Expr, b: &Expr, t: DataType) -> Option<Expr> {
    if let Some(x) = recombine_div_mod(a, b) {
        return Some(x);
    }
    if let Some(x) = recombine_linear(a, b, t) {
        return Some(x);
    }
    let (xa, ca) = split_const(a);
    let (xb, cb) = split_const(b);
    let c = ca.checked_add(cb)?;
    if !fits(c, t) {
        return None;
    }
    let x = match (xa, xb) {
        (Some(p), Some(q)) => Some(p + q),
        (p, q) => p.or(q),
    };
    Some(with_const(x.as_ref(), c, t))
}

/// `e` as a floor division by a positive constant, `(x, c)`: `x / c`, or `x >> s` (`c = 2^s`,
/// the same value under floor semantics, as [`strength_reduce`] writes it).
fn as_div(e: &Expr) -> Option<(&Expr, i64)> {
    match e.kind() {
        ExprKind::Binary(BinaryOp::Div, x, c) => Some((x, c.as_int().filter(|&c| c > 0)?)),
        ExprKind::Binary(BinaryOp::Shr, x, s) => {
            let s = s.as_int().filter(|s| (0..=30).contains(s))?;
            Some((x, 1 << s))
        }
        _ => None,
    }
}

/// `e` as a floor modulo by a positive constant, `(x, c)`: `x % c`, or `x & (2^s − 1)` (`c =
/// 2^s`, the same value under floor semantics).
fn as_mod(e: &Expr) -> Option<(&Expr, i64)> {
    match e.kind() {
        ExprKind::Binary(BinaryOp::Mod, x, c) => Some((x, c.as_int().filter(|&c| c > 0)?)),
        ExprKind::Binary(BinaryOp::BitAnd, x, m) => {
            let c = m.as_int()?.checked_add(1)?;
            (c > 1 && c & (c - 1) == 0 && c <= 1 << 30).then_some((x, c))
        }
        _ => None,
    }
}

/// `(x / c) * c + x % c → x` (either operand order; the division and modulo in either of the
/// forms [`as_div`] and [`as_mod`] read), exact for floor semantics.
fn recombine_div_mod(a: &Expr, b: &Expr) -> Option<Expr> {
    let try_pair = |p: &Expr, q: &Expr| -> Option<Expr> {
        let ExprKind::Binary(BinaryOp::Mul, d, c1) = p.kind() else {
            return None;
        };
        let (x1, c2) = as_div(d)?;
        let (x2, c3) = as_mod(q)?;
        let c = c1.as_int()?;
        (c != 0 && c2 == c && c3 == c && x1 == x2).then(|| x1.clone())
    };
    try_pair(a, b).or_else(|| try_pair(b, a))
}

/// A sum `Σ coeff·atom + constant` of integer terms.
#[derive(Debug, Default)]
struct Linear {
    terms: Vec<(Expr, i64)>,
    constant: i64,
}

/// Distributing products by constants past this many terms is not attempted.
const MAX_LINEAR_TERMS: usize = 32;

impl Linear {
    /// Adds `scale · e`, distributing `+`, `-` and products by constants; `None` on overflow
    /// or when the sum grows past [`MAX_LINEAR_TERMS`].
    fn add(&mut self, e: &Expr, scale: i64) -> Option<()> {
        if let Some(c) = e.as_int() {
            self.constant = self.constant.checked_add(c.checked_mul(scale)?)?;
            return Some(());
        }
        match e.kind() {
            ExprKind::Binary(BinaryOp::Add, x, y) => {
                self.add(x, scale)?;
                self.add(y, scale)
            }
            ExprKind::Binary(BinaryOp::Sub, x, y) => {
                self.add(x, scale)?;
                self.add(y, scale.checked_neg()?)
            }
            ExprKind::Binary(BinaryOp::Mul, x, k) if k.as_int().is_some() => {
                self.add(x, scale.checked_mul(k.as_int()?)?)
            }
            ExprKind::Binary(BinaryOp::Mul, k, x) if k.as_int().is_some() => {
                self.add(x, scale.checked_mul(k.as_int()?)?)
            }
            _ => {
                let len = self.terms.len();
                match self.terms.iter_mut().find(|(atom, _)| atom == e) {
                    Some((_, c)) => *c = c.checked_add(scale)?,
                    None if len < MAX_LINEAR_TERMS => self.terms.push((e.clone(), scale)),
                    None => return None,
                }
                Some(())
            }
        }
    }

    /// Replaces a pair `m·c·(x / c) + m·(x % c)` (`c > 0`) by `m·x`, or more generally
    /// `m·c·(x / (d·c)) + m·((x / d) % c)` (`c, d > 0`, the outer two digits of a row-major
    /// unravel of `x`) by `m·(x / d)`, or `m·c·((y % (k·c)) / c) + m·(y % c)` (the inner two
    /// digits) by `m·(y % (k·c))`; whether one was found. All are exact for floor
    /// semantics, since `x / (d·c) = (x / d) / c` and `(y % (k·c)) % c = y % c`.
    fn recombine_one(&mut self) -> Option<bool> {
        for i in 0..self.terms.len() {
            let (div, a) = &self.terms[i];
            let Some((x, outer)) = as_div(div) else {
                continue;
            };
            let modulo = self.terms.iter().enumerate().find_map(|(j, (e, coeff))| {
                let (y, c) = as_mod(e)?;
                if *coeff == 0 || coeff.checked_mul(c)? != *a {
                    return None;
                }
                if y == x && c == outer {
                    return Some((j, x.clone(), *coeff));
                }
                // `x = y % m` with `c | m`: `y % c = x % c`, the inner digits of an unravel.
                if c == outer && as_mod(x).is_some_and(|(z, m)| z == y && m % c == 0) {
                    return Some((j, x.clone(), *coeff));
                }
                let (z, d) = as_div(y)?;
                (z == x && d.checked_mul(c)? == outer).then(|| (j, y.clone(), *coeff))
            });
            if let Some((j, whole, m)) = modulo {
                let (first, second) = (i.max(j), i.min(j));
                self.terms.remove(first);
                self.terms.remove(second);
                self.add(&whole, m)?;
                self.terms.retain(|(_, coeff)| *coeff != 0);
                return Some(true);
            }
        }
        Some(false)
    }

    fn build(&self, t: DataType) -> Option<Expr> {
        let mut out: Option<Expr> = None;
        for (atom, coeff) in &self.terms {
            if !fits(*coeff, t) {
                return None;
            }
            let (term, negative) = match *coeff {
                1 => (atom.clone(), false),
                -1 => (atom.clone(), true),
                c if c < 0 => (atom * Expr::int_of(c.checked_neg()?, t), true),
                c => (atom * Expr::int_of(c, t), false),
            };
            out = Some(match (out, negative) {
                (None, false) => term,
                (None, true) => Expr::int_of(0, t) - term,
                (Some(sum), false) => sum + term,
                (Some(sum), true) => sum - term,
            });
        }
        if !fits(self.constant, t) {
            return None;
        }
        Some(with_const(out.as_ref(), self.constant, t))
    }
}

/// `a + b` with every `(x / c)·c·m + (x % c)·m` among its linear terms (products by
/// constants distributed) recombined into `x·m`, exact for floor semantics; `None` when there
/// is no such pair.
fn recombine_linear(a: &Expr, b: &Expr, t: DataType) -> Option<Expr> {
    let has_mod = |e: &Expr| {
        let mut found = false;
        e.visit(&mut |x| found |= as_mod(x).is_some());
        found
    };
    if !has_mod(a) && !has_mod(b) {
        return None;
    }
    let mut linear = Linear::default();
    linear.add(a, 1)?;
    linear.add(b, 1)?;
    let mut changed = false;
    while linear.recombine_one()? {
        changed = true;
    }
    if changed {
        linear.build(t)
    } else {
        None
    }
}

/// The terms of a sum `t1 + t2 + …`.
fn add_terms(e: &Expr, out: &mut Vec<Expr>) {
    match e.kind() {
        ExprKind::Binary(BinaryOp::Add, a, b) => {
            add_terms(a, out);
            add_terms(b, out);
        }
        _ => out.push(e.clone()),
    }
}

fn sum(terms: Vec<Expr>, t: DataType) -> Expr {
    terms
        .into_iter()
        .reduce(|a, b| a + b)
        .unwrap_or_else(|| Expr::int_of(0, t))
}

/// `e / c` when `e` is provably a multiple of `c` (`c > 0`), built without division.
fn exact_div(e: &Expr, c: i64, t: DataType) -> Option<Expr> {
    if c == 1 {
        return Some(e.clone());
    }
    if let Some(v) = e.as_int() {
        return (v % c == 0).then(|| Expr::int_of(v / c, t));
    }
    match e.kind() {
        ExprKind::Binary(BinaryOp::Mul, x, k) => {
            if let Some(k) = k.as_int() {
                if k % c == 0 {
                    let q = k / c;
                    return Some(if q == 1 {
                        x.clone()
                    } else {
                        x * Expr::int_of(q, t)
                    });
                }
            }
            let k = x.as_int().map(|_| x);
            if let Some(k) = k.and_then(Expr::as_int) {
                if k % c == 0 {
                    let ExprKind::Binary(_, _, y) = e.kind() else {
                        return None;
                    };
                    let q = k / c;
                    return Some(if q == 1 {
                        y.clone()
                    } else {
                        y * Expr::int_of(q, t)
                    });
                }
            }
            None
        }
        ExprKind::Binary(BinaryOp::Add, x, y) => Some(exact_div(x, c, t)? + exact_div(y, c, t)?),
        ExprKind::Binary(BinaryOp::Sub, x, y) => Some(exact_div(x, c, t)? - exact_div(y, c, t)?),
        _ => None,
    }
}

fn divide(a: &Expr, c: i64, t: DataType, ranges: &VarRanges) -> Option<Expr> {
    if c == 1 {
        return Some(a.clone());
    }
    if c <= 0 {
        return None;
    }
    let r = bound_of(a, ranges);
    if let (Some(lo), Some(hi)) = (r.lo, r.hi) {
        let (qlo, qhi) = (floor_div(lo, c), floor_div(hi, c));
        if qlo == qhi && is_pure(a) {
            return int_const(qlo, t);
        }
    }
    match a.kind() {
        ExprKind::Binary(BinaryOp::Div, x, k) => {
            let k = k.as_int().filter(|&k| k > 0)?;
            let prod = k.checked_mul(c)?;
            fits(prod, t).then(|| x / Expr::int_of(prod, t))
        }
        ExprKind::Binary(BinaryOp::Mul, x, k)
            if k.as_int().is_some_and(|k| k > 0 && c % k == 0) =>
        {
            let k = k.as_int()?;
            if k % c == 0 {
                exact_div(a, c, t)
            } else {
                Some(x / Expr::int_of(c / k, t))
            }
        }
        _ => {
            let mut terms = Vec::new();
            add_terms(a, &mut terms);
            let (mut multiples, mut rest) = (Vec::new(), Vec::new());
            for term in terms {
                match exact_div(&term, c, t) {
                    Some(q) => multiples.push(q),
                    None => rest.push(term),
                }
            }
            if multiples.is_empty() {
                return None;
            }
            if !rest.is_empty() {
                multiples.push(sum(rest, t) / Expr::int_of(c, t));
            }
            Some(sum(multiples, t))
        }
    }
}

fn modulo(a: &Expr, c: i64, t: DataType, ranges: &VarRanges) -> Option<Expr> {
    if c == 1 && is_pure(a) {
        return Some(Expr::int_of(0, t));
    }
    if c <= 0 {
        return None;
    }
    let r = bound_of(a, ranges);
    if let (Some(lo), Some(hi)) = (r.lo, r.hi) {
        let (qlo, qhi) = (floor_div(lo, c), floor_div(hi, c));
        if qlo == qhi {
            let shift = qlo.checked_mul(c)?;
            return Some(with_const(Some(a), shift.checked_neg()?, t));
        }
    }
    if let ExprKind::Binary(BinaryOp::Mod, x, k) = a.kind() {
        if k.as_int().is_some_and(|k| k > 0 && k % c == 0) {
            return Some(x % Expr::int_of(c, t));
        }
    }
    let mut terms = Vec::new();
    add_terms(a, &mut terms);
    let before = terms.len();
    let rest: Vec<Expr> = terms
        .into_iter()
        .filter(|term| !(exact_div(term, c, t).is_some() && is_pure(term)))
        .collect();
    if rest.len() == before {
        return None;
    }
    if rest.is_empty() {
        return Some(Expr::int_of(0, t));
    }
    Some(sum(rest, t) % Expr::int_of(c, t))
}

/// `x / 2^k → x >> k` and `x % 2^k → x & (2^k - 1)` for non-negative `x`.
fn strength_reduce(n: &Expr, ranges: &VarRanges) -> Option<Expr> {
    let ExprKind::Binary(op @ (BinaryOp::Div | BinaryOp::Mod), a, b) = n.kind() else {
        return None;
    };
    let t = int_type(n)?;
    int_type(a)?;
    let c = b.as_int()?;
    if c < 2 || (c & (c - 1)) != 0 || !is_non_negative(a, ranges) {
        return None;
    }
    let r = type_range(t);
    if r.hi.is_some_and(|h| h < c) {
        return None;
    }
    Some(match op {
        BinaryOp::Div => a >> Expr::int_of(i64::from(c.trailing_zeros()), t),
        _ => a & Expr::int_of(c - 1, t),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Dim;

    fn tid_ranges(threads: i64) -> VarRanges {
        let mut r = VarRanges::new();
        r.set_builtin(Builtin::ThreadIdx(Dim::X), Interval::below(threads));
        r
    }

    fn size(e: &Expr) -> usize {
        let mut n = 0;
        e.visit(&mut |_| n += 1);
        n
    }

    #[test]
    fn division_by_unreachable_extents_disappears() {
        let r = tid_ranges(32);
        let tid = Expr::thread_idx(Dim::X);
        let e = simplify_expr(&(&tid / 8 % 4), &r);
        assert_eq!(e, &tid >> Expr::int(3));
        let e = simplify_expr(&(&tid / 32), &r);
        assert_eq!(e, Expr::int(0));
        let e = simplify_expr(&(&tid % 64), &r);
        assert_eq!(e, tid);
    }

    #[test]
    fn multiples_leave_division_and_modulo() {
        let r = tid_ranges(32);
        let x = Var::new("x", DataType::I32);
        let tid = Expr::thread_idx(Dim::X);
        let e = simplify_expr(&((&x * 8 + (&tid % 8)) / 8), &r);
        assert_eq!(e, x.expr());
        let e = simplify_expr(&((&x * 8 + (&tid % 8)) % 8), &r);
        assert_eq!(e, &tid & Expr::int(7));
    }

    /// The full tiles beside a template's edge tile, `if j == 4 { edge } else { full }` for a
    /// tile index `j` in `[0, 4]`: in the else branch `j ≤ 3`, so a column `48·j + t` (`t <
    /// 48`) stays below 196 and its division by 196 is 0.
    #[test]
    fn an_inequality_with_an_end_of_its_range_narrows_the_range() {
        let (j, t, y) = (
            Var::new("j", DataType::I32),
            Var::new("t", DataType::I32),
            Var::new("y", DataType::I32),
        );
        let column = (&j * 48 + &t) / 196;
        let assign = |value: Expr| Stmt::Assign {
            var: y.clone(),
            value,
        };
        let branch = Stmt::If {
            cond: j.expr().eq(4),
            then_body: Box::new(assign(column.clone())),
            else_body: Some(Box::new(assign(column.clone()))),
        };
        let mut r = VarRanges::new();
        r.set(&j, Interval::below(5));
        r.set(&t, Interval::below(48));
        let Stmt::If {
            then_body,
            else_body: Some(else_body),
            ..
        } = simplify_stmt(&branch, &mut r)
        else {
            panic!("the branch stays");
        };
        assert_ne!(
            *then_body,
            assign(Expr::int(0)),
            "the edge tile reaches 196"
        );
        assert_eq!(*else_body, assign(Expr::int(0)));
        // A value inside the range narrows nothing.
        let inside = Stmt::If {
            cond: j.expr().eq(2),
            then_body: Box::new(Stmt::nop()),
            else_body: Some(Box::new(assign(column.clone()))),
        };
        let Stmt::If { then_body, .. } = simplify_stmt(&inside, &mut r) else {
            panic!("the branch stays");
        };
        assert!(
            matches!(*then_body, Stmt::Assign { ref value, .. } if *value == simplify_expr(&column, &r))
        );
    }

    #[test]
    fn possibly_negative_dividends_keep_floor_division() {
        let r = VarRanges::new();
        let x = Var::new("x", DataType::I32);
        let e = simplify_expr(&(&x / 4), &r);
        assert_eq!(e, &x / 4);
        let e = simplify_expr(&((&x / 4) * 4 + &x % 4 + 0), &r);
        assert_eq!(e, x.expr());
        assert!(size(&simplify_expr(&(&x * 1 + 0 - 0), &r)) == 1);
    }
    /// Integer value of `e` under `env` (floor division), for the tests' brute-force checks.
    fn eval(e: &Expr, env: &HashMap<Var, i64>) -> i64 {
        match e.kind() {
            ExprKind::Const(Constant::Int(v, _)) => *v,
            ExprKind::Var(v) => env[v],
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (eval(a, env), eval(b, env));
                match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div => x.div_euclid(y),
                    BinaryOp::Mod => x.rem_euclid(y),
                    BinaryOp::Shr => x >> y,
                    BinaryOp::BitAnd => x & y,
                    other => panic!("unexpected operator {other:?}"),
                }
            }
            other => panic!("unexpected expression {other:?}"),
        }
    }

    /// The flat offset of an im2col read of a 3x3, stride-1, pad-1 convolution over a
    /// 56-wide image, `((n/56 + dy - 1)·56 + (n%56 + dx - 1))`, is `n + 56·dy + dx - 57`:
    /// affine in the column `n`, so consecutive columns are consecutive addresses.
    #[test]
    fn im2col_offsets_recombine_into_affine_columns() {
        let r = VarRanges::new();
        let (n, k) = (Var::new("n", DataType::I32), Var::new("k", DataType::I32));
        let dy = &k.expr() / 3 % 3;
        let dx = &k.expr() % 3;
        let c = &k.expr() / 9;
        let row = &n.expr() / 56 + dy - 1;
        let col = &n.expr() % 56 + dx - 1;
        let offset = c * 3136 + row * 56 + col;
        let e = simplify_expr(&offset, &r);
        let mut divides_n = false;
        e.visit(&mut |x| {
            if let ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, a, _) = x.kind() {
                divides_n |= *a == n.expr();
            }
        });
        assert!(!divides_n, "no n/56 or n%56 left in {e:?}");
        for nv in [0, 1, 55, 56, 57, 3135, -3, 200] {
            for kv in 0..27 {
                let env = HashMap::from([(n.clone(), nv), (k.clone(), kv)]);
                assert_eq!(eval(&e, &env), eval(&offset, &env), "n={nv} k={kv}");
            }
        }
        // Without the matching modulo term, nothing is recombined.
        let partial = &n.expr() / 56 * 56 + &n.expr() % 28;
        assert_eq!(simplify_expr(&partial, &r), partial);
    }

    /// The inner two digits of an unravel, `((f % 49) / 7)·7 + f % 7` (a pixel's row and
    /// column in a 7×7 image whose images are folded into a product's columns), recombine
    /// into `f % 49`; with a modulus that 7 does not divide, nothing is recombined.
    #[test]
    fn inner_digits_of_an_unravel_recombine() {
        let f = Var::new("f", DataType::I32);
        let x = f.expr();
        let ranges = VarRanges::new();
        let at = |e: &Expr, v: i64| eval(e, &HashMap::from([(f.clone(), v)]));
        let e = (&x / 49) * 21560 + ((&x % 49) / 7) * 7 + &x % 7;
        let s = simplify_expr(&e, &ranges);
        let mut divisions = 0;
        s.visit(&mut |n| {
            divisions += usize::from(matches!(
                n.kind(),
                ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, _, _)
            ))
        });
        assert_eq!(
            divisions, 2,
            "{s:?}: one division and one modulo by 49 left"
        );
        for v in [0, 6, 7, 48, 49, 50, 97, 98, 9_999, -1, -50] {
            assert_eq!(at(&s, v), at(&e, v), "{s:?} at {v}");
        }
        let kept = ((&x % 50) / 7) * 7 + &x % 7;
        let s = simplify_expr(&kept, &ranges);
        for v in [0, 6, 7, 49, 50, 57, 9_999, -8] {
            assert_eq!(at(&s, v), at(&kept, v), "{s:?} at {v}");
        }
    }

    /// A row-major unravel of a flat offset `f = a + b` (opaque terms, as the two table
    /// reads of a separable gather are) into `[C, H, W]`, `f/(H·W)·H·W + (f/W % H)·W + f % W`,
    /// recombines into `f`: the load reads at `f`, with no division left.
    #[test]
    fn unravelled_offsets_recombine_into_the_flat_offset() {
        let r = VarRanges::new();
        let (a, b) = (Var::new("a", DataType::I32), Var::new("b", DataType::I32));
        let f = a.expr() + b.expr();
        let (h, w) = (149, 151);
        let offset = &f / (h * w) * (h * w) + (&f / w % h) * w + &f % w;
        let e = simplify_expr(&offset, &r);
        let mut divides = false;
        e.visit(&mut |x| {
            divides |= matches!(
                x.kind(),
                ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, ..)
            )
        });
        assert!(!divides, "no division left in {e:?}");
        for (av, bv) in [(0, 0), (5, 151), (-7, 3), (22499, 1), (100_000, 77)] {
            let env = HashMap::from([(a.clone(), av), (b.clone(), bv)]);
            assert_eq!(eval(&e, &env), eval(&offset, &env), "a={av} b={bv}");
        }
        // A power-of-two unravel simplified once (its divisions strength-reduced to shifts
        // and masks) still recombines.
        let x = a.expr() * 4 + (b.expr() % 4);
        let mut r2 = VarRanges::new();
        r2.set(&a, Interval::below(1000));
        r2.set(&b, Interval::below(1000));
        let once = simplify_expr(&(&x / 64 * 64 + &x % 64), &r2);
        assert!(matches!(once.kind(), ExprKind::Binary(..)));
        let shifted = (&x >> Expr::int(6)) * 64 + (&x & Expr::int(63));
        assert_eq!(simplify_expr(&shifted, &r2), simplify_expr(&x, &r2));
        // So does one whose variables' signs are unknown (a codegen's flat offset): floor
        // division by 2^s is an arithmetic shift right.
        let y = a.expr() * 3 + b.expr();
        let outer = (&y >> Expr::int(4)) * 16 + (&y & Expr::int(15)) + a.expr() * 1000;
        let e = simplify_expr(&outer, &r);
        for (av, bv) in [(0, 0), (-5, 7), (9, -40), (123, 456)] {
            let env = HashMap::from([(a.clone(), av), (b.clone(), bv)]);
            assert_eq!(eval(&e, &env), av * 1003 + bv, "a={av} b={bv}");
        }
        // Digits that are not the outer two of one unravel stay as they are.
        let skewed = &f / (h * w) * (h * w) + (&f / w % (h + 1)) * w;
        let mut still_divides = false;
        simplify_expr(&skewed, &r).visit(&mut |x| {
            still_divides |= matches!(x.kind(), ExprKind::Binary(BinaryOp::Div, ..))
        });
        assert!(still_divides);
    }
}
