//! One warp or one block per row, reductions folded with warp shuffles: the schedule for
//! tasks whose outputs read reductions over rows (softmax, layer normalization, reduce over
//! the last axes, a matmul-like reduction producing one value per row).
//!
//! Applies when every output has the same shape `[R…, L]` and is computed by a node of the
//! task. Row `r` (the flattened leading dimensions) is computed by `T` threads: one warp
//! (`T = 32`, [`WARPS`] rows per block) or, when the row's longest loop has at least
//! `2 · 32 · ELEMENTS_PER_LANE` elements, a block of `T = 32 · W` threads (`W` a power of two,
//! at most 32, each lane left at least [`ELEMENTS_PER_LANE`] elements):
//! - every reduction the row's elements read at indices that do not depend on the last axis
//!   `j` is computed *cooperatively*: thread `l` folds the elements `l, l + T, …` of the
//!   flattened reduction domain, then five `shfl.xor` steps combine each warp's 32 partial
//!   results, leaving the warp's value in every lane; with `W` warps, lane 0 of each puts it
//!   in shared memory and, after a barrier, every thread folds the `W` values in warp order.
//!   Reductions read by such a reduction at indices that do not depend on its own reduction
//!   axes are computed cooperatively first (softmax's max before its sum), and every
//!   cooperative value is computed once per row;
//! - the threads then write the row's elements `j = l, l + T, …`, everything else inlined as
//!   in the elementwise schedule (reductions that depend on `j` as serial loops);
//! - an output of shape `[R…, 1]` that is itself a reduction is one cooperative reduction,
//!   stored by thread 0 (a last axis of extent 1 is the constant 0, so reads at `[r…, j]` are
//!   per row).
//!
//! A row's threads run every shuffle and barrier together: the row guard and the loop trip
//! counts are uniform across them. Reductions are combined in a different order than a
//! serial loop (floating-point sums may differ in the last bits).

use std::collections::HashMap;

use hidet_ir::builder::FunctionBuilder;
use hidet_ir::compute::{ComputeDef, ComputeNode};
use hidet_ir::dtype::{DataType, ScalarType};
use hidet_ir::expr::{Dim, Expr, ExprKind, Var};
use hidet_ir::function::Function;
use hidet_ir::intrinsic::{Intrinsic, ShuffleKind};
use hidet_ir::layout::row_major;

use super::elementwise::unravel;
use super::{const_shape, output_params, ScheduleError};
use hidet_ir::inline::expand;

/// Warps (rows) per block when one warp computes a row.
pub const WARPS: i64 = 4;

/// The fewest elements each thread of a row folds or writes before a row gets more than
/// one warp.
pub const ELEMENTS_PER_LANE: i64 = 8;

/// Warps per row for rows whose longest loop (a cooperative reduction or the row itself) has
/// `work` elements: one, or the power of two up to 32 that leaves each thread at least
/// [`ELEMENTS_PER_LANE`] of them.
pub fn warps_per_row(work: i64) -> i64 {
    let mut warps = 1;
    while warps < 32 && work >= 2 * warps * 32 * ELEMENTS_PER_LANE {
        warps *= 2;
    }
    warps
}

/// A reduction value computed cooperatively for the current row: the node's tensor, its
/// indices, and the variable holding it in every lane.
struct Cooperative {
    tensor: Var,
    indices: Vec<Expr>,
    value: Var,
}

/// The state of one row's code: the cooperative values computed so far.
struct Row<'a> {
    nodes: &'a HashMap<Var, ComputeNode>,
    /// This thread's index among the row's threads.
    lane: Expr,
    /// Threads per row (`32 · warps`).
    threads: i64,
    warps: i64,
    done: Vec<Cooperative>,
}

/// Whether `dtype` is a type the schedule folds with shuffles.
fn shuffles(dtype: Option<DataType>) -> bool {
    matches!(
        dtype.map(|d| (d.scalar, d.lanes)),
        Some((
            ScalarType::F32 | ScalarType::F64 | ScalarType::I32 | ScalarType::I64,
            1
        ))
    )
}

/// The reads of reduce nodes in `e` (with their indices), in order of appearance.
fn reduce_reads(e: &Expr, nodes: &HashMap<Var, ComputeNode>) -> Vec<(Var, Vec<Expr>)> {
    hidet_ir::compute::reads(e)
        .into_iter()
        .filter(|(t, _)| matches!(nodes.get(t), Some(ComputeNode::Reduce { .. })))
        .collect()
}

impl Row<'_> {
    /// `e` with every read of a cooperative value replaced by its variable.
    fn use_cooperative(&self, e: &Expr) -> Expr {
        e.rewrite(&mut |x| match x.kind() {
            ExprKind::TensorElement { tensor, indices } => self
                .done
                .iter()
                .find(|c| &c.tensor == tensor && &c.indices == indices)
                .map(|c| c.value.expr()),
            _ => None,
        })
    }

    /// Computes reduce node `tensor` at `indices` cooperatively (once per row) and returns the
    /// variable holding it in every lane.
    fn cooperative(&mut self, fb: &mut FunctionBuilder, tensor: &Var, indices: &[Expr]) -> Var {
        if let Some(c) = self
            .done
            .iter()
            .find(|c| &c.tensor == tensor && c.indices == indices)
        {
            return c.value.clone();
        }
        let nodes = self.nodes;
        let Some(ComputeNode::Reduce {
            axes,
            reduce_axes,
            reduce_shape,
            kind,
            value,
        }) = nodes.get(tensor)
        else {
            unreachable!("only reduce nodes are computed cooperatively (checked by the caller)")
        };
        let env: HashMap<Var, Expr> = axes.iter().cloned().zip(indices.iter().cloned()).collect();
        let value = value.substitute(&env);
        // Reductions this one reads at indices free of its own reduction axes: first.
        for (t, idx) in reduce_reads(&value, nodes) {
            if !idx
                .iter()
                .any(|i| reduce_axes.iter().any(|a| i.mentions(a)))
            {
                self.cooperative(fb, &t, &idx);
            }
        }
        let value = self.use_cooperative(&value);
        let dtype = value.dtype().unwrap_or(DataType::F32);
        let acc = fb.var("acc", kind.identity(dtype));
        let extents: Vec<i64> = reduce_shape
            .iter()
            .map(|d| d.substitute(&env).as_int().unwrap_or(1).max(0))
            .collect();
        let total: i64 = extents.iter().product();
        let lane = self.lane.clone();
        let threads = self.threads;
        fb.for_range("f", (total + threads - 1) / threads, |fb, f| {
            let flat = f * threads + lane.clone();
            fb.if_then(flat.lt(total), |fb| {
                let r = unravel(&flat, &extents);
                let map: HashMap<Var, Expr> = reduce_axes.iter().cloned().zip(r).collect();
                let v = expand(fb, &value.substitute(&map), nodes);
                fb.assign(&acc, kind.combine(acc.expr(), v));
            });
        });
        for offset in [16, 8, 4, 2, 1] {
            let other = Expr::call(
                Intrinsic::WarpShuffle {
                    kind: ShuffleKind::Xor,
                    width: 32,
                },
                vec![acc.expr(), Expr::int(offset)],
            );
            fb.assign(&acc, kind.combine(acc.expr(), other));
        }
        if self.warps > 1 {
            let partials = fb.shared_tensor("partials", dtype, row_major([self.warps]));
            fb.if_then((lane.clone() % 32).eq(0), |fb| {
                fb.store(&partials, [lane.clone() / 32], acc.expr());
            });
            fb.sync_threads();
            fb.assign(&acc, partials.at([0]));
            fb.for_range("w", self.warps - 1, |fb, w| {
                fb.assign(&acc, kind.combine(acc.expr(), partials.at([w + 1])));
            });
        }
        self.done.push(Cooperative {
            tensor: tensor.clone(),
            indices: indices.to_vec(),
            value: acc.clone(),
        });
        acc
    }
}

/// The kernel for `def` (see the module docs), or `None` when the schedule does not apply.
pub fn schedule_rowwise(def: &ComputeDef, name: &str) -> Result<Option<Function>, ScheduleError> {
    let def = def.inline_grids();
    let nodes: HashMap<Var, ComputeNode> = def.nodes.iter().cloned().collect();
    let Some(first) = def.outputs.first() else {
        return Ok(None);
    };
    let shape = const_shape(first)?;
    let Some((&last, leading)) = shape.split_last() else {
        return Ok(None);
    };
    for o in &def.outputs {
        if const_shape(o)? != shape || !nodes.contains_key(o) || def.inputs.contains(o) {
            return Ok(None);
        }
    }
    for n in nodes.values() {
        if let ComputeNode::Reduce {
            reduce_shape,
            value,
            ..
        } = n
        {
            if !shuffles(value.dtype()) || reduce_shape.iter().any(|d| d.as_int().is_none()) {
                return Ok(None);
            }
        }
    }
    // The reductions each output reads per row (cooperatively); none: not this schedule.
    let j = Var::new("j", DataType::I32);
    let row_index: Vec<Var> = leading
        .iter()
        .enumerate()
        .map(|(d, _)| Var::new(format!("r{d}"), DataType::I32))
        .collect();
    // A last axis of extent 1 is the constant 0, so reads at `[r…, j]` are per row.
    let j_expr = if last == 1 { Expr::int(0) } else { j.expr() };
    let symbolic: Vec<Expr> = row_index
        .iter()
        .map(Var::expr)
        .chain([j_expr.clone()])
        .collect();
    let mut cooperative_reads = 0usize;
    for o in &def.outputs {
        match &nodes[o] {
            ComputeNode::Reduce { .. } if last == 1 => cooperative_reads += 1,
            node => {
                let env: HashMap<Var, Expr> = node
                    .axes()
                    .iter()
                    .cloned()
                    .zip(symbolic.iter().cloned())
                    .collect();
                let ComputeNode::Grid { value, .. } = node else {
                    return Ok(None);
                };
                cooperative_reads += reduce_reads(&value.substitute(&env), &nodes)
                    .iter()
                    .filter(|(_, idx)| !idx.iter().any(|i| i.mentions(&j)))
                    .count();
            }
        }
    }
    if cooperative_reads == 0 {
        return Ok(None);
    }
    let rows: i64 = leading.iter().product();
    if rows > i64::from(i32::MAX) || last > i64::from(i32::MAX) - 32 {
        return Err(ScheduleError::TooLarge {
            elements: rows.saturating_mul(last),
        });
    }
    let longest = nodes
        .values()
        .filter_map(|n| match n {
            ComputeNode::Reduce { reduce_shape, .. } => Some(
                reduce_shape
                    .iter()
                    .filter_map(Expr::as_int)
                    .product::<i64>(),
            ),
            ComputeNode::Grid { .. } => None,
        })
        .fold(last, i64::max);
    let row_warps = warps_per_row(longest);
    let threads = 32 * row_warps;
    let out_params = output_params(&def);
    let (mut fb, lane, row) = if row_warps == 1 {
        let warps = WARPS.min(rows.max(1));
        let blocks = ((rows + warps - 1) / warps).max(1);
        let mut fb =
            FunctionBuilder::cuda_kernel(name, [blocks, 1, 1].map(Expr::int), [32 * warps, 1, 1]);
        let lane = Expr::thread_idx(Dim::X) % 32;
        let row = fb.var(
            "row",
            Expr::block_idx(Dim::X) * warps + Expr::thread_idx(Dim::X) / 32,
        );
        (fb, lane, row)
    } else {
        let mut fb =
            FunctionBuilder::cuda_kernel(name, [rows.max(1), 1, 1].map(Expr::int), [threads, 1, 1]);
        let lane = Expr::thread_idx(Dim::X);
        let row = fb.var("row", Expr::block_idx(Dim::X));
        (fb, lane, row)
    };
    fb.if_then(row.expr().lt(rows), |fb| {
        let row_values = unravel(&row.expr(), leading);
        let mut state = Row {
            nodes: &nodes,
            lane: lane.clone(),
            threads,
            warps: row_warps,
            done: Vec::new(),
        };
        for (o, p) in def.outputs.iter().zip(&out_params) {
            let node = &nodes[o];
            if let (ComputeNode::Reduce { .. }, 1) = (node, last) {
                let index: Vec<Expr> = row_values.iter().cloned().chain([Expr::int(0)]).collect();
                let v = state.cooperative(fb, o, &index);
                fb.if_then(lane.eq(0), |fb| fb.store(p, index, v.expr()));
                continue;
            }
            let ComputeNode::Grid { axes, value } = node else {
                continue;
            };
            let mut env: HashMap<Var, Expr> = axes
                .iter()
                .cloned()
                .zip(row_values.iter().cloned())
                .collect();
            if let Some(a) = axes.last() {
                env.insert(a.clone(), j_expr.clone());
            }
            let value = value.substitute(&env);
            for (t, idx) in reduce_reads(&value, &nodes) {
                if !idx.iter().any(|i| i.mentions(&j)) {
                    state.cooperative(fb, &t, &idx);
                }
            }
            let value = state.use_cooperative(&value);
            fb.for_range("f", (last + threads - 1) / threads, |fb, f| {
                let jj = f * threads + lane.clone();
                fb.if_then(jj.clone().lt(last), |fb| {
                    let map: HashMap<Var, Expr> = [(j.clone(), jj.clone())].into();
                    let v = expand(fb, &value.substitute(&map), &nodes);
                    let index: Vec<Expr> = row_values.iter().cloned().chain([jj]).collect();
                    fb.store(p, index, v);
                });
            });
        }
    });
    let mut f = fb.finish();
    f.params = def.inputs.iter().cloned().chain(out_params).collect();
    Ok(Some(f))
}
