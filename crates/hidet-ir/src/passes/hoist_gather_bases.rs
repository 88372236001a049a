//! Base pointers for loads that gather through a loop-invariant table read.
//!
//! A direct convolution reads its image where it is: the micro-kernel's broadcast of row `i`
//! at reduction step `kk` loads `x[rows[p + i] + cols[kk]]`, one table read per row and one
//! per step. Emitted as one sum, a C compiler recomputes `x + 4·(rows[p + i] + cols[kk])`
//! at every step (an extra address instruction per load), and the loop then issues more
//! instructions than its multiply-adds need: slower everywhere, and far slower when a
//! sibling hyperthread competes for the core's front end. This pass gives each such load a
//! base pointer declared before the loop:
//!
//! ```text
//! for kk in 0..n:                        base = &x[0]
//!     for i in 0..6 (unrolled):    ─►    p0 = &base[rows[p + 0]] … p5 = &base[rows[p + 5]]
//!         … x[rows[p + i] + cols[kk]]    for kk in 0..n:
//!                                            … p0[cols[kk]] … p5[cols[kk]]
//! ```
//!
//! A load is rewritten when the terms of its flat offset split into a part that depends on
//! nothing the loop binds or writes and that reads a tensor (the table), and a part that
//! varies. Fully unrolled loops with constant extents inside the loop whose variables the
//! invariant part mentions are unrolled first (their bodies must bind nothing), so that each
//! row gets its own pointer. Serial loops, loops unrolled by a factor and vectorized loops are
//! rewritten, and only those without an `if` inside nor a gathering load in a branch of a
//! `?:` (a hoisted read must be one the loop makes unconditionally; a `?:` inside the
//! invariant part, such as a clamp of a gathered row index, moves with it); the pointers read
//! their tables only when the loop runs at least once.
//!
//! In a vectorized loop the rewrite also removes the invariant part's conditions from the
//! loop body: an embedding lookup `table[clamp(ids[i]) · D + j]` keeps GCC from vectorizing
//! the loop over `j` ("control flow in loop") until its row is a pointer.

use std::collections::{HashMap, HashSet};

use super::{runs_at_least_once, simplify_expr, FunctionPass, PassError, VarRanges};
use crate::dtype::DataType;
use crate::expr::{BinaryOp, Expr, ExprKind, Var};
use crate::function::Function;
use crate::stmt::{LoopKind, Scope, Stmt};
use crate::ty::Type;

/// The most copies a loop body may grow to when its unrolled loops are unrolled.
const MAX_UNROLLED_COPIES: i64 = 64;

/// The pass (see the module documentation).
pub struct HoistGatherBases;

impl FunctionPass for HoistGatherBases {
    fn name(&self) -> &'static str {
        "hoist_gather_bases"
    }

    fn run(&self, f: Function) -> Result<Function, PassError> {
        let body = f.body.rewrite(&mut hoist_in_loop, &mut |e| e.clone());
        Ok(Function { body, ..f })
    }
}

/// `s` with base pointers for its gathering loads, if it is a serial, factor-unrolled or
/// vectorized loop that has some; the body's unrolled loops are unrolled only when that makes a
/// load gather.
fn hoist_in_loop(s: Stmt) -> Stmt {
    let Stmt::For {
        var,
        extent,
        kind: kind @ (LoopKind::Serial | LoopKind::Unroll(Some(_)) | LoopKind::Vectorize),
        body,
    } = &s
    else {
        return s;
    };
    let inside = Inside::of(var, body);
    if has_conditional_gathers(body, &inside) {
        return s;
    }
    let (body, inside) = if inside.gathers(body, false) {
        (body.as_ref().clone(), inside)
    } else if inside.gathers(body, true) {
        let unrolled = unroll_constant_loops(body);
        let inside = Inside::of(var, &unrolled);
        if !inside.gathers(&unrolled, false) {
            return s;
        }
        (unrolled, inside)
    } else {
        return s;
    };
    let mut hoisted = Hoisted {
        runs: runs_at_least_once(extent),
        declarations: Vec::new(),
        bases: HashMap::new(),
        pointers: Vec::new(),
    };
    let body = body.rewrite(&mut |s| s, &mut |e| {
        e.rewrite(&mut |e| hoisted.rewrite_load(&inside, e))
    });
    let mut stmts = hoisted.declarations;
    stmts.push(Stmt::For {
        var: var.clone(),
        extent: extent.clone(),
        kind: *kind,
        body: Box::new(body),
    });
    Stmt::seq(stmts)
}

/// What a loop binds and writes: a term of an offset that mentions none of it is invariant.
pub(super) struct Inside {
    bound: HashSet<Var>,
    unrolled: HashSet<Var>,
    written: HashSet<Var>,
}

impl Inside {
    pub(super) fn of(var: &Var, body: &Stmt) -> Inside {
        let mut inside = Inside {
            bound: HashSet::from([var.clone()]),
            unrolled: HashSet::new(),
            written: HashSet::new(),
        };
        body.visit(&mut |s| match s {
            Stmt::For {
                var,
                kind: LoopKind::Unroll(None),
                ..
            } => {
                inside.bound.insert(var.clone());
                inside.unrolled.insert(var.clone());
            }
            Stmt::Declare { var, .. } | Stmt::Let { var, .. } | Stmt::For { var, .. } => {
                inside.bound.insert(var.clone());
            }
            Stmt::ForMapping { vars, .. } => inside.bound.extend(vars.iter().cloned()),
            Stmt::Store { tensor, .. } => {
                inside.written.insert(tensor.clone());
            }
            Stmt::Assign { var, .. } => {
                inside.written.insert(var.clone());
            }
            _ => {}
        });
        inside
    }

    /// Whether `term` depends on nothing the loop binds (other than its unrolled loops'
    /// variables, with `unrolled_as_constants`) or writes.
    pub(super) fn invariant(&self, term: &Expr, unrolled_as_constants: bool) -> bool {
        let mut invariant = true;
        term.visit(&mut |e| match e.kind() {
            ExprKind::Var(v) => {
                let constant = unrolled_as_constants && self.unrolled.contains(v);
                invariant &= !self.bound.contains(v) || constant;
            }
            ExprKind::TensorElement { tensor, .. } => {
                invariant &= !self.bound.contains(tensor) && !self.written.contains(tensor);
            }
            _ => {}
        });
        invariant
    }

    /// The invariant and varying terms of the flat offset of `load`, when it gathers: a
    /// read of a tensor declared outside the loop whose invariant part reads a table and
    /// whose varying part is not empty.
    pub(super) fn split(
        &self,
        load: &Expr,
        unrolled_as_constants: bool,
    ) -> Option<(Var, Expr, Expr)> {
        let ExprKind::TensorElement { tensor, indices } = load.kind() else {
            return None;
        };
        if self.bound.contains(tensor) {
            return None;
        }
        let offset = match tensor.ty() {
            Type::Tensor(t) if indices.len() == t.layout.rank() => {
                simplify_expr(&t.layout.offset(indices), &VarRanges::default())
            }
            _ => return None,
        };
        let (mut fixed, mut varying) = (Vec::new(), Vec::new());
        for (term, negative) in offset.additive_terms() {
            if term
                .dtype()
                .is_none_or(|t| !t.is_integer() || t.is_vector())
            {
                return None;
            }
            let term = term.cast(DataType::I64);
            let term = if negative { -term } else { term };
            if self.invariant(&term, unrolled_as_constants) {
                fixed.push(term);
            } else {
                varying.push(term);
            }
        }
        let reads_table = fixed.iter().any(|t| {
            let mut reads = false;
            t.visit(&mut |e| reads |= matches!(e.kind(), ExprKind::TensorElement { .. }));
            reads
        });
        if !reads_table || varying.is_empty() {
            return None;
        }
        Some((tensor.clone(), sum(fixed), sum(varying)))
    }

    /// Whether some load in `body` gathers (see [`Inside::split`]).
    fn gathers(&self, body: &Stmt, unrolled_as_constants: bool) -> bool {
        let mut found = false;
        body.visit(&mut |s| {
            for e in s.exprs() {
                e.visit(&mut |e| {
                    found |= !found && self.split(e, unrolled_as_constants).is_some();
                });
            }
        });
        found
    }
}

fn sum(terms: Vec<Expr>) -> Expr {
    let mut terms = terms.into_iter();
    let first = terms
        .next()
        .unwrap_or_else(|| Expr::int_of(0, DataType::I64));
    let total = terms.fold(first, |acc, t| Expr::binary(BinaryOp::Add, acc, t));
    simplify_expr(&total, &VarRanges::default())
}

/// The pointers declared before the loop: one flat base per tensor, one pointer per distinct
/// invariant offset (read only when the loop runs at least once, `runs`).
struct Hoisted {
    runs: Expr,
    declarations: Vec<Stmt>,
    bases: HashMap<Var, Var>,
    pointers: Vec<(Var, Expr, Var)>,
}

impl Hoisted {
    /// `load` read through a base pointer, if it gathers.
    fn rewrite_load(&mut self, inside: &Inside, load: &Expr) -> Option<Expr> {
        let (tensor, fixed, varying) = inside.split(load, false)?;
        let Type::Tensor(t) = tensor.ty() else {
            return None;
        };
        let dtype = t.dtype;
        let rank = t.layout.rank();
        let base = match self.bases.get(&tensor) {
            Some(base) => base.clone(),
            None => {
                let base = Var::new(
                    format!("{}_base", tensor.name()),
                    Type::pointer_to(Type::Data(dtype)),
                );
                let origin = tensor.at(vec![Expr::int(0); rank]);
                self.declarations.push(Stmt::Declare {
                    var: base.clone(),
                    scope: Scope::Register,
                    init: Some(origin.address()),
                });
                self.bases.insert(tensor.clone(), base.clone());
                base
            }
        };
        let found = self
            .pointers
            .iter()
            .find(|(t, offset, _)| *t == tensor && *offset == fixed)
            .map(|(_, _, p)| p.clone());
        let pointer = match found {
            Some(p) => p,
            None => {
                let p = Var::new(
                    format!("{}_row", tensor.name()),
                    Type::pointer_to(Type::Data(dtype)),
                );
                self.declarations.push(Stmt::Declare {
                    var: p.clone(),
                    scope: Scope::Register,
                    init: Some(
                        base.at([Expr::select(
                            self.runs.clone(),
                            fixed.clone(),
                            Expr::int_of(0, DataType::I64),
                        )])
                        .address(),
                    ),
                });
                self.pointers.push((tensor, fixed, p.clone()));
                p
            }
        };
        Some(pointer.at([varying]))
    }
}

/// `body` with every fully unrolled loop of constant extent that binds nothing inside replaced by
/// its copies, innermost first, while the copies stay within [`MAX_UNROLLED_COPIES`].
fn unroll_constant_loops(body: &Stmt) -> Stmt {
    body.rewrite(
        &mut |s| match &s {
            Stmt::For {
                var,
                extent,
                kind: LoopKind::Unroll(None),
                body,
            } => match extent.as_int() {
                Some(n) if (1..=MAX_UNROLLED_COPIES).contains(&n) && binds_nothing(body) => {
                    let copies = (0..n)
                        .map(|c| {
                            let map = HashMap::from([(
                                var.clone(),
                                Expr::int_of(c, var.ty().as_data().unwrap_or(DataType::I32)),
                            )]);
                            body.rewrite(&mut |s| s, &mut |e| {
                                simplify_expr(&e.substitute(&map), &VarRanges::default())
                            })
                        })
                        .collect();
                    Stmt::seq(copies)
                }
                _ => s,
            },
            _ => s,
        },
        &mut |e| e.clone(),
    )
}

/// Whether `body` has an `if`, or a `?:` with a gathering load (see [`Inside::split`], with
/// the body's unrolled loops as constants) in one of its branches: a read hoisted out of it
/// could be one the condition guards against.
fn has_conditional_gathers(body: &Stmt, inside: &Inside) -> bool {
    let mut found = false;
    body.visit(&mut |s| {
        found |= matches!(s, Stmt::If { .. });
        for e in s.exprs() {
            e.visit(&mut |e| {
                if let ExprKind::Select(_, a, b) = e.kind() {
                    found |= [a, b].iter().any(|branch| {
                        let mut gathers = false;
                        branch.visit(&mut |e| gathers |= inside.split(e, true).is_some());
                        gathers
                    });
                }
            });
        }
    });
    found
}

fn binds_nothing(body: &Stmt) -> bool {
    let mut binds = false;
    body.visit(&mut |s| {
        binds |= matches!(
            s,
            Stmt::Declare { .. } | Stmt::Let { .. } | Stmt::For { .. } | Stmt::ForMapping { .. }
        );
    });
    !binds
}
