//! Index-set splitting of vectorized loops whose variable is divided.
//!
//! A vectorized loop `for j in 0..n` whose body reads `(a + j) / w` and
//! `(a + j) % w` (one constant `w`, one `a` free of `j`) walks rows of
//! width `w`: an im2col pack walks output pixels, a broadcast walks a
//! channel's plane. A C compiler can only vectorize such a body with
//! gathers. This pass cuts the loop at the row boundaries:
//!
//! ```text
//! let q0 = a / w; let r0 = a % w;
//! if r0 + n <= w:                                // one row: the loop as it was
//!     for e in 0..n (vectorized):
//!         body[j := e, (a+j)/w := q0, (a+j)%w := r0 + e]
//! else:
//!     for s in 0..(r0 + n - 1) / w + 1:         // the rows the loop touches
//!         let lo = max(0, s*w - r0); let hi = min(n, (s+1)*w - r0);
//!         for e in 0..hi - lo (vectorized):
//!             body[j := lo + e, (a+j)/w := q0 + s, (a+j)%w := r0 + lo + e - s*w]
//! ```
//!
//! The one-row branch keeps the loop's extent (often a constant vector width), which the C
//! compiler vectorizes without a remainder loop; short loops over long rows take it almost
//! always.
//!
//! Divisions by multiples of `w` (`(a + j) / (k·w)`, an image plane beside
//! its rows) and divisions of the row index (`((a + j) / w) % h`) are
//! rewritten too: within a segment they are constants.
//!
//! Within a segment every access is affine in `e`, so a stride-1 read is a
//! plain vector load. The rewrite is exact under floor semantics for any
//! sign of `a`, and keeps the iteration order. Loops are split only when
//! `w >= MIN_ROW`: shorter rows would make segments shorter than a vector,
//! where the gather is the better code; and not when a gathering read of
//! 4- or 8-byte elements steps through a row by more than one element
//! (`c · ((a + j) % w)`, a strided convolution), whose segments would still
//! read strided where a gather instruction reads as fast (bytes have none).

use super::{simplify_expr, vectorized_loop, FunctionPass, PassError, VarRanges};
use crate::dtype::DataType;
use crate::expr::{BinaryOp, Expr, ExprKind, Var};
use crate::function::Function;
use crate::stmt::{LoopKind, Stmt};

/// The narrowest row (divisor) worth a split: one AVX-512 vector of `f32`.
pub const MIN_ROW: i64 = 16;

/// The pass (see the module documentation).
pub struct SplitDividedLoops;

impl FunctionPass for SplitDividedLoops {
    fn name(&self) -> &'static str {
        "split_divided_loops"
    }

    fn run(&self, f: Function) -> Result<Function, PassError> {
        let body = f.body.rewrite(&mut split_loop, &mut |e| e.clone());
        Ok(Function { body, ..f })
    }
}

/// `s` split if it is an innermost vectorized loop of the form the module describes; a loop
/// around such a split whose row test does not depend on it is unswitched ([`unswitch`]).
fn split_loop(s: Stmt) -> Stmt {
    let s = match unswitch(s) {
        Ok(hoisted) => return hoisted,
        Err(s) => s,
    };
    let Some((var, extent, body, ty)) = vectorized_loop(&s) else {
        return s;
    };
    if has_loop(body) {
        return s;
    }
    let Some(row) = divided_row(body, var) else {
        return s;
    };
    rewrite(var, extent, body, &row, ty)
}

/// The `(a, w)` shared by every division of `var` in `body`, when some tensor
/// access is a gather: its flat offset (as the codegen simplifies it) still
/// divides `var`. `None` when no access gathers, when the divisions differ, or
/// when one is not of the form `(a + var) / w`. A guard that divides `var`
/// around a contiguous read (a padded convolution whose output is as wide as
/// its input) vectorizes as a masked load and is better left whole.
fn divided_row(body: &Stmt, var: &Var) -> Option<(Expr, i64)> {
    let mut found = Divisions::default();
    body.visit(&mut |s| {
        if let Stmt::Store {
            tensor, indices, ..
        } = s
        {
            found.access(tensor, indices, var);
        }
        let values: Vec<&Expr> = match s {
            Stmt::Store { value, .. } => vec![value],
            _ => s.exprs(),
        };
        for e in values {
            found.expr(e, var);
        }
    });
    if !found.gathers || found.strided {
        return None;
    }
    let rows: Vec<(Expr, i64)> = found.rows.into_iter().collect::<Option<_>>()?;
    let offset = rows.first()?.0.clone();
    // The row is the narrowest division the flat offsets keep: indices that divide more
    // finely (a 7×7 image's row and column, `(x % 49) / 7` and `x % 7`) recombine in the
    // flat offset (`x % 49`) and are divisions within the row.
    let row = match found.flat_rows.iter().min() {
        Some(&w) => w,
        None => rows.iter().map(|(_, w)| *w).min()?,
    };
    // Divisions by multiples of the row (an image plane `w·h` beside its rows `w`) are
    // divisions of the row index: `(a + j) / (k·w) = ((a + j) / w) / k`; divisions by a
    // divisor of the row are divisions of the column within the row.
    let fits = rows
        .iter()
        .all(|(a, w)| *a == offset && (w % row == 0 || row % w == 0));
    (fits && row >= MIN_ROW).then_some((offset, row))
}

/// The divisions of a loop variable met in a loop body.
#[derive(Default)]
struct Divisions {
    /// For each outermost `/` or `%` whose dividend mentions the variable:
    /// `Some((a, w))` when it is `(a + var) op w`, `None` otherwise.
    rows: Vec<Option<(Expr, i64)>>,
    /// Whether some tensor access's flat offset divides the variable.
    gathers: bool,
    /// The divisors of `(a + var)` that the gathering accesses' flat offsets keep.
    flat_rows: Vec<i64>,
    /// Whether some gathering access of 4- or 8-byte elements steps through a row by more
    /// than one element (a strided convolution's `(a + var) % w` scaled by its stride): cut
    /// at rows, its reads would stay strided, and the gather is the better code.
    strided: bool,
}

impl Divisions {
    fn expr(&mut self, e: &Expr, var: &Var) {
        match e.kind() {
            // `((a + var) / w) op k`: once the inner division is a row index, the outer one
            // is free of `var`; only the inner one counts.
            // `((a + var) % w) / k` likewise divides the column within a row.
            ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, num, den)
                if den.as_int().is_some_and(|k| k > 0)
                    && matches!(
                        num.kind(),
                        ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, _, _)
                    ) =>
            {
                self.expr(num, var)
            }
            ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, num, den) if num.mentions(var) => {
                let row = den.as_int().filter(|&w| w > 0);
                self.rows
                    .push(row.and_then(|w| Some((offset_of(num, var)?, w))));
            }
            ExprKind::TensorElement { tensor, indices } => self.access(tensor, indices, var),
            _ => {
                for c in e.children() {
                    self.expr(c, var);
                }
            }
        }
    }

    /// `tensor[indices]`: its divisions count only when its flat offset keeps them.
    fn access(&mut self, tensor: &Var, indices: &[Expr], var: &Var) {
        if let Some(t) = tensor.ty().as_tensor() {
            let offset = simplify_expr(&t.layout.offset(indices), &VarRanges::default());
            let mut flat = Divisions::default();
            flat.expr(&offset, var);
            if flat.rows.is_empty() {
                return;
            }
            // Narrow elements have no hardware gather: a strided segment read beats one
            // whose every address divides.
            self.strided |= t.dtype.bytes() >= 4 && steps_by_more_than_one(&offset, var);
            self.flat_rows
                .extend(flat.rows.iter().flatten().map(|(_, w)| *w));
        }
        let before = self.rows.len();
        for i in indices {
            self.expr(i, var);
        }
        self.gathers |= self.rows.len() > before;
    }
}

/// Whether a term of `offset` is `c · ((a + var) % w)` with a constant `c` other than 1: the
/// column within a row, scaled (a strided read).
fn steps_by_more_than_one(offset: &Expr, var: &Var) -> bool {
    let is_column = |e: &Expr| matches!(e.kind(), ExprKind::Binary(BinaryOp::Mod, num, _) if offset_of(num, var).is_some());
    offset
        .additive_terms()
        .iter()
        .any(|(term, _)| match term.kind() {
            ExprKind::Binary(BinaryOp::Mul, x, y) => {
                (is_column(x) && y.as_int().is_some_and(|c| c != 1))
                    || (is_column(y) && x.as_int().is_some_and(|c| c != 1))
            }
            _ => false,
        })
}

/// `a` when `num` is the sum `a + var` (terms in any order, `a` free of `var`).
fn offset_of(num: &Expr, var: &Var) -> Option<Expr> {
    let mut terms = num.additive_terms();
    let at = terms
        .iter()
        .position(|(t, negative)| !negative && t.as_var() == Some(var))?;
    terms.remove(at);
    if terms.iter().any(|(t, _)| t.mentions(var)) {
        return None;
    }
    let ty = num.dtype()?;
    Some(
        terms
            .into_iter()
            .fold(Expr::int_of(0, ty), |acc, (t, negative)| {
                if negative {
                    acc - t
                } else {
                    acc + t
                }
            }),
    )
}

/// `for i { let …; if c { for e (vectorized) … } else { … } }` with `c` free of `i` and of the
/// lets → `if c { for i { let …; … } } else { for i { let …; … } }`: the one-row test of a
/// split taken once for a whole loop of stores (a register tile's channels) rather than in
/// every iteration, where GCC compiles both branches into the loop worse than either alone.
/// `Err(s)` when `s` is not of that form.
fn unswitch(s: Stmt) -> Result<Stmt, Stmt> {
    let Stmt::For {
        var,
        extent,
        kind,
        body,
    } = &s
    else {
        return Err(s);
    };
    if *kind == LoopKind::Vectorize {
        return Err(s);
    }
    let mut lets: Vec<(&Var, &Expr)> = Vec::new();
    let mut inner = body.as_ref();
    while let Stmt::Let { var, value, body } = inner {
        lets.push((var, value));
        inner = body;
    }
    let Stmt::If {
        cond,
        then_body,
        else_body: Some(else_body),
    } = inner
    else {
        return Err(s);
    };
    let one_row = matches!(
        then_body.as_ref(),
        Stmt::For {
            kind: LoopKind::Vectorize,
            ..
        }
    );
    if !one_row || cond.mentions(var) || lets.iter().any(|(v, _)| cond.mentions(v)) {
        return Err(s);
    }
    let wrap = |branch: &Stmt| {
        let body = lets
            .iter()
            .rev()
            .fold(branch.clone(), |body, (v, value)| Stmt::Let {
                var: (*v).clone(),
                value: (*value).clone(),
                body: Box::new(body),
            });
        Stmt::For {
            var: var.clone(),
            extent: extent.clone(),
            kind: *kind,
            body: Box::new(body),
        }
    };
    Ok(Stmt::If {
        cond: cond.clone(),
        then_body: Box::new(wrap(then_body)),
        else_body: Some(Box::new(wrap(else_body))),
    })
}

fn has_loop(s: &Stmt) -> bool {
    let mut found = false;
    s.visit(&mut |x| found |= matches!(x, Stmt::For { .. } | Stmt::ForMapping { .. }));
    found
}

fn rewrite(var: &Var, extent: &Expr, body: &Stmt, (a, w): &(Expr, i64), ty: DataType) -> Stmt {
    let int = |v: i64| Expr::int_of(v, ty);
    let name = var.name();
    let q0 = Var::new(format!("{name}_row"), ty);
    let r0 = Var::new(format!("{name}_col"), ty);
    let s = Var::new(format!("{name}_seg"), ty);
    let lo = Var::new(format!("{name}_lo"), ty);
    let e = Var::new(name, ty);
    let segments = (r0.expr() + extent.clone() - int(1)) / int(*w) + int(1);
    let lo_value = (s.expr() * int(*w) - r0.expr()).max(int(0));
    let hi_value = extent.min((s.expr() + int(1)) * int(*w) - r0.expr());
    let j = lo.expr() + e.expr();
    let quotient = q0.expr() + s.expr();
    let remainder = r0.expr() + j.clone() - s.expr() * int(*w);
    let replace = Replacement {
        var,
        offset: a,
        row: *w,
        j: &j,
        quotient: &quotient,
        remainder: &remainder,
    };
    let inner = Stmt::For {
        var: e,
        extent: hi_value - lo.expr(),
        kind: LoopKind::Vectorize,
        body: Box::new(body.rewrite(&mut |s| s, &mut |x| replace.expr(x))),
    };
    let per_segment = Stmt::Let {
        var: lo,
        value: lo_value,
        body: Box::new(inner),
    };
    let segments_loop = Stmt::For {
        var: s,
        extent: segments,
        kind: LoopKind::Serial,
        body: Box::new(per_segment),
    };
    // The common case, the whole loop inside one row: the original loop (its extent, often a
    // constant vector width) with the row's quotient and remainder.
    let e = Var::new(name, ty);
    let one_row = Replacement {
        var,
        offset: a,
        row: *w,
        j: &e.expr(),
        quotient: &q0.expr(),
        remainder: &(r0.expr() + e.expr()),
    };
    let within_row = Stmt::For {
        var: e,
        extent: extent.clone(),
        kind: LoopKind::Vectorize,
        body: Box::new(body.rewrite(&mut |s| s, &mut |x| one_row.expr(x))),
    };
    let split = Stmt::If {
        // From `a` rather than `r0`, so a loop around the split can be unswitched.
        cond: (a.clone() % int(*w) + extent.clone()).le(int(*w)),
        then_body: Box::new(within_row),
        else_body: Some(Box::new(segments_loop)),
    };
    Stmt::Let {
        var: q0,
        value: a.clone() / int(*w),
        body: Box::new(Stmt::Let {
            var: r0,
            value: a.clone() % int(*w),
            body: Box::new(split),
        }),
    }
}

/// The substitutions inside one segment.
struct Replacement<'a> {
    var: &'a Var,
    offset: &'a Expr,
    row: i64,
    j: &'a Expr,
    quotient: &'a Expr,
    remainder: &'a Expr,
}

impl Replacement<'_> {
    fn expr(&self, e: &Expr) -> Expr {
        match e.kind() {
            ExprKind::Var(v) if v == self.var => return self.j.clone(),
            // A divisor of the row: with `x = row·q + r`, `x / d = (row / d)·q + r / d` and
            // `x % d = r % d`.
            ExprKind::Binary(op @ (BinaryOp::Div | BinaryOp::Mod), num, den)
                if den
                    .as_int()
                    .is_some_and(|d| d > 0 && d < self.row && self.row % d == 0)
                    && offset_of(num, self.var).as_ref() == Some(self.offset) =>
            {
                let d = den.as_int().unwrap_or(1);
                let ty = den.dtype().unwrap_or(DataType::I32);
                let int = |v: i64| Expr::int_of(v, ty);
                return match op {
                    BinaryOp::Div => {
                        self.quotient.clone() * int(self.row / d) + self.remainder.clone() / int(d)
                    }
                    _ => self.remainder.clone() % int(d),
                };
            }
            ExprKind::Binary(op @ (BinaryOp::Div | BinaryOp::Mod), num, den)
                if den.as_int().is_some_and(|d| d > 0 && d % self.row == 0)
                    && offset_of(num, self.var).as_ref() == Some(self.offset) =>
            {
                // With `x = a + j = row·q + r` (floor semantics, `0 <= r < row`) and a
                // divisor `k·row`: `x / (k·row) = q / k`, `x % (k·row) = (q % k)·row + r`.
                let k = den.as_int().unwrap_or(self.row) / self.row;
                let ty = den.dtype().unwrap_or(DataType::I32);
                let int = |v: i64| Expr::int_of(v, ty);
                return match (*op, k) {
                    (BinaryOp::Div, 1) => self.quotient.clone(),
                    (BinaryOp::Div, _) => self.quotient.clone() / int(k),
                    (_, 1) => self.remainder.clone(),
                    _ => (self.quotient.clone() % int(k)) * int(self.row) + self.remainder.clone(),
                };
            }
            _ => {}
        }
        let children: Vec<Expr> = e.children().into_iter().map(|c| self.expr(c)).collect();
        if children.is_empty() {
            e.clone()
        } else {
            e.with_children(children)
        }
    }
}
