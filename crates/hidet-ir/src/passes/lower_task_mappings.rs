//! Lowering of `for vars in mapping.on(worker)` into loops and index arithmetic.
//!
//! For a worker `w` of a mapping with `n` workers:
//! - a spatial atom gives index `w / stride_d % extent_d` in dimension `d`
//!   (strides follow the atom's `ranks`; the outermost dimension needs no
//!   `%` because `w < n` holds there);
//! - a repeat atom gives one `for` loop per dimension of extent > 1, nested
//!   in `ranks` order and run as the atom's per-dimension [`LoopKind`];
//! - `outer * inner` runs `outer` on `w / n2` and `inner` on `w % n2`, the
//!   outer loops around the inner ones, and combines indices as
//!   `t1 * D2 + t2`.
//!
//! The iteration order is therefore exactly [`TaskMapping::tasks_of`]. The
//! body is wrapped in `if w < n` (and `0 <= w` for possibly negative workers)
//! unless bound analysis proves the check always true (e.g. `threadIdx.x`
//! of a kernel whose block has exactly `n` threads). Non-trivial worker
//! expressions are bound once with a `Let`; task indices that are a
//! constant, variable or built-in are substituted, others are bound by `Let`.

use super::bounds::{bound_of, Interval, VarRanges};
use super::{FunctionPass, PassError};
use crate::dtype::DataType;
use crate::expr::{Expr, ExprKind, Var};
use crate::function::Function;
use crate::mapping::{dims_in_order, MappingNode, TaskMapping};
use crate::stmt::{LoopKind, Stmt};
use std::collections::HashMap;

/// The pass: removes every `Stmt::ForMapping`.
pub struct LowerTaskMappings;

impl FunctionPass for LowerTaskMappings {
    fn name(&self) -> &'static str {
        "lower_task_mappings"
    }

    fn run(&self, f: Function) -> Result<Function, PassError> {
        let mut lowerer = Lowerer {
            function: &f.name,
            ranges: VarRanges::for_function(&f),
        };
        let body = lowerer.stmt(&f.body)?;
        Ok(Function { body, ..f })
    }
}

struct Lowerer<'a> {
    function: &'a str,
    ranges: VarRanges,
}

/// The range of a loop variable over `0..extent`.
pub(crate) fn loop_var_range(extent: &Expr, ranges: &VarRanges) -> Interval {
    match bound_of(extent, ranges).hi {
        Some(h) => Interval::new(0, h.saturating_sub(1).max(0)),
        None => Interval::at_least(0),
    }
}

impl Lowerer<'_> {
    fn stmt(&mut self, s: &Stmt) -> Result<Stmt, PassError> {
        Ok(match s {
            Stmt::Let { var, value, body } => {
                let prev = self.ranges.set(var, bound_of(value, &self.ranges));
                let body = self.stmt(body);
                self.ranges.restore(var, prev);
                Stmt::Let {
                    var: var.clone(),
                    value: value.clone(),
                    body: Box::new(body?),
                }
            }
            Stmt::For {
                var,
                extent,
                kind,
                body,
            } => {
                let prev = self.ranges.set(var, loop_var_range(extent, &self.ranges));
                let body = self.stmt(body);
                self.ranges.restore(var, prev);
                Stmt::For {
                    var: var.clone(),
                    extent: extent.clone(),
                    kind: *kind,
                    body: Box::new(body?),
                }
            }
            Stmt::ForMapping {
                vars,
                mapping,
                worker,
                body,
            } => self.for_mapping(vars, mapping, worker, body)?,
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => Stmt::If {
                cond: cond.clone(),
                then_body: Box::new(self.stmt(then_body)?),
                else_body: match else_body {
                    Some(e) => Some(Box::new(self.stmt(e)?)),
                    None => None,
                },
            },
            Stmt::Seq(stmts) => Stmt::Seq(
                stmts
                    .iter()
                    .map(|s| self.stmt(s))
                    .collect::<Result<_, _>>()?,
            ),
            other => other.clone(),
        })
    }

    fn for_mapping(
        &mut self,
        vars: &[Var],
        mapping: &TaskMapping,
        worker: &Expr,
        body: &Stmt,
    ) -> Result<Stmt, PassError> {
        if vars.len() != mapping.rank() {
            return Err(PassError::MappingRankMismatch {
                function: self.function.to_string(),
                vars: vars.iter().map(|v| format!("{v:?}")).collect(),
                mapping: mapping.to_string(),
                worker: worker.to_string(),
                rank: mapping.rank(),
            });
        }
        let worker_ty = worker.ty();
        match worker_ty.as_data() {
            Some(d) if d.is_integer() && !d.is_vector() => {}
            _ => {
                return Err(PassError::NonIntegerWorker {
                    function: self.function.to_string(),
                    mapping: mapping.to_string(),
                    worker: worker.to_string(),
                    ty: worker_ty.to_string(),
                })
            }
        }

        let n = mapping.num_workers();
        let worker_range = bound_of(worker, &self.ranges);
        let shape = mapping.task_shape();

        let prevs: Vec<_> = vars
            .iter()
            .zip(&shape)
            .map(|(v, &d)| self.ranges.set(v, Interval::below(d)))
            .collect();
        let body = self.stmt(body);
        for (v, p) in vars.iter().zip(prevs) {
            self.ranges.restore(v, p);
        }
        let body = body?;

        let (w, worker_let) = if is_trivial(worker) {
            (worker.clone(), None)
        } else {
            let v = Var::new("w", worker_ty);
            (v.expr(), Some((v, worker.clone())))
        };

        let mut nest = Nest {
            loops: Vec::new(),
            vars,
        };
        let index = nest.lower(mapping, &w);

        let mut subst = HashMap::new();
        let mut lets = Vec::new();
        for (v, e) in vars.iter().zip(index) {
            let e = match v.ty().as_data() {
                Some(d) if e.dtype() != Some(d) => e.cast(d),
                _ => e,
            };
            if is_trivial(&e) {
                subst.insert(v.clone(), e);
            } else {
                lets.push((v.clone(), e));
            }
        }
        let mut s = if subst.is_empty() {
            body
        } else {
            body.rewrite(&mut |s| s, &mut |e| e.substitute(&subst))
        };
        for (var, value) in lets.into_iter().rev() {
            s = Stmt::Let {
                var,
                value,
                body: Box::new(s),
            };
        }
        for (var, extent, kind) in nest.loops.into_iter().rev() {
            s = Stmt::For {
                var,
                extent: Expr::int(extent),
                kind,
                body: Box::new(s),
            };
        }
        let mut checks = Vec::new();
        if !worker_range.is_non_negative() {
            checks.push(w.ge(Expr::int_of(0, dtype_of(&w))));
        }
        if worker_range.hi.is_none_or(|h| h >= n) {
            checks.push(w.lt(Expr::int_of(n, dtype_of(&w))));
        }
        if let Some(cond) = checks.into_iter().reduce(|a, b| a.and(b)) {
            s = Stmt::If {
                cond,
                then_body: Box::new(s),
                else_body: None,
            };
        }
        if let Some((var, value)) = worker_let {
            s = Stmt::Let {
                var,
                value,
                body: Box::new(s),
            };
        }
        Ok(s)
    }
}

fn dtype_of(e: &Expr) -> DataType {
    e.dtype().unwrap_or(DataType::I32)
}

fn is_trivial(e: &Expr) -> bool {
    matches!(
        e.kind(),
        ExprKind::Const(_) | ExprKind::Var(_) | ExprKind::Builtin(_)
    )
}

/// The loops a mapping lowers to, outermost first.
struct Nest<'a> {
    loops: Vec<(Var, i64, LoopKind)>,
    vars: &'a [Var],
}

impl Nest<'_> {
    /// The task index of worker `w` (with `0 <= w < mapping.num_workers()`)
    /// in each dimension; pushes the loops the index depends on.
    fn lower(&mut self, mapping: &TaskMapping, w: &Expr) -> Vec<Expr> {
        let t = dtype_of(w);
        let int = |v: i64| Expr::int_of(v, t);
        match mapping.node() {
            MappingNode::Spatial { shape, ranks } => {
                let order = dims_in_order(ranks);
                let mut index = vec![int(0); shape.len()];
                let mut stride = 1;
                for (pos, &d) in order.iter().enumerate().rev() {
                    let extent = shape[d];
                    if extent == 1 {
                        continue;
                    }
                    let q = if stride == 1 {
                        w.clone()
                    } else {
                        w / int(stride)
                    };
                    let outermost = order[..pos].iter().all(|&o| shape[o] == 1);
                    index[d] = if outermost { q } else { q % int(extent) };
                    stride *= extent;
                }
                index
            }
            MappingNode::Repeat {
                shape,
                ranks,
                attrs,
            } => {
                let mut index = vec![int(0); shape.len()];
                for d in dims_in_order(ranks) {
                    if shape[d] == 1 {
                        continue;
                    }
                    let (name, ty) = match self.vars.get(d) {
                        Some(v) => (format!("{}_r", v.name()), v.ty().clone()),
                        None => ("r".to_string(), DataType::I32.into()),
                    };
                    let var = Var::new(name, ty);
                    index[d] = var.expr();
                    self.loops.push((var, shape[d], attrs[d]));
                }
                index
            }
            MappingNode::Compose(outer, inner) => {
                let n1 = outer.num_workers();
                let n2 = inner.num_workers();
                let (w1, w2) = match (n1, n2) {
                    (_, 1) => (w.clone(), int(0)),
                    (1, _) => (int(0), w.clone()),
                    _ => (w / int(n2), w % int(n2)),
                };
                let d2 = inner.task_shape();
                let outer_index = self.lower(outer, &w1);
                let inner_index = self.lower(inner, &w2);
                outer_index
                    .into_iter()
                    .zip(inner_index)
                    .zip(d2)
                    .map(|((a, b), d)| {
                        let scaled = match (a.as_int(), d) {
                            (Some(0), _) => None,
                            (_, 1) => Some(a),
                            _ => Some(a * int(d)),
                        };
                        match (scaled, b.as_int()) {
                            (None, _) => b,
                            (Some(s), Some(0)) => s,
                            (Some(s), _) => s + b,
                        }
                    })
                    .collect()
            }
        }
    }
}
