//! Reductions and the outputs computed from them, one row at a time.
//!
//! A row is one point of the reductions' common output shape. Per row, every
//! reduce node is folded into a register accumulator (later reductions read
//! earlier ones from their registers), then the row's outputs are written:
//! reduce outputs at the row's index, grid outputs over their remaining
//! axes with a vectorized innermost loop.

use super::error::ScheduleError;
use super::guards;
use super::params::Kernel;
use super::plan::{RowOutput, RowPlan};
use super::select::selects_for_min_max;
use super::stash::{self, Stash};
use super::threads::{bind_all, parallel_items, product, unravel};
use super::vectorize::vectorize;
use crate::signature::eval_index;
use hidet_ir::builder::FunctionBuilder;
use hidet_ir::compute::{tensor_dtype, tensor_shape, ComputeDef, ComputeNode, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, ExprKind, Var};
use hidet_ir::intrinsic::Intrinsic;
use hidet_ir::layout::row_major;
use hidet_ir::mapping::repeat_unrolled;
use hidet_ir::stmt::LoopKind;
use std::collections::HashMap;

/// Independent vector accumulators per reduction (hides the latency of
/// dependent vector adds).
const ACCUMULATORS: i64 = 4;

/// Emits the row loop of `plan`.
pub(crate) fn emit_rows(
    fb: &mut FunctionBuilder,
    kernel: &Kernel,
    def: &ComputeDef,
    plan: &RowPlan,
    lanes: u16,
    threads: i64,
) -> Result<(), ScheduleError> {
    let domain: Vec<Expr> = plan.domain.iter().map(|d| kernel.extent(d)).collect();
    if lane_blocked(kernel, def, plan, &domain, lanes) {
        return emit_lane_rows(fb, kernel, def, plan, &domain, lanes, threads);
    }
    let rows = product(&domain);
    let mut failure = None;
    parallel_items(fb, &rows, threads, |fb, item| {
        bind_all(fb, "i", &unravel(&item, &domain), |fb, row| {
            let mut accs: HashMap<Var, Expr> = HashMap::new();
            let mut stashes: Vec<Stash> = Vec::new();
            for &k in &plan.reduces {
                let (var, node) = &def.nodes[k];
                let stash = stash::find(kernel, def, plan, (var, node), &row, &accs)
                    .filter(|s| stashes.iter().all(|t| t.output != s.output));
                match reduce_row(fb, kernel, node, var, &row, &accs, lanes, stash.as_ref()) {
                    Ok((acc, stashed)) => {
                        accs.insert(var.clone(), acc);
                        stashes.extend(stash.filter(|_| stashed));
                    }
                    Err(e) => failure = Some(e),
                }
            }
            for (n, out) in plan.outputs.iter().enumerate() {
                let stash = stashes.iter().find(|s| s.output == n);
                write_output(fb, kernel, def, out, &row, &accs, stash);
            }
        });
    })?;
    failure.map_or(Ok(()), Err)
}

/// A reduce node of a row plan, its parts named.
struct RowReduce<'a> {
    var: &'a Var,
    axes: &'a [Var],
    reduce_axes: &'a [Var],
    reduce_shape: &'a [Expr],
    kind: ReduceKind,
    value: &'a Expr,
}

impl RowReduce<'_> {
    /// The reduction's extents, when every one is a constant.
    fn const_shape(&self, kernel: &Kernel) -> Option<Vec<i64>> {
        self.reduce_shape
            .iter()
            .map(|d| kernel.extent(d).as_int())
            .collect()
    }
}

/// The reduce nodes of `plan`, in definition order.
fn row_reduces<'a>(def: &'a ComputeDef, plan: &RowPlan) -> Vec<RowReduce<'a>> {
    plan.reduces
        .iter()
        .filter_map(|&k| match &def.nodes[k] {
            (
                var,
                ComputeNode::Reduce {
                    axes,
                    reduce_axes,
                    reduce_shape,
                    kind,
                    value,
                },
            ) => Some(RowReduce {
                var,
                axes,
                reduce_axes,
                reduce_shape,
                kind: *kind,
                value,
            }),
            _ => None,
        })
        .collect()
}

/// Whether `plan` takes the lane-blocked form (see [`emit_lane_rows`]): the rows' innermost
/// dimension is a constant of at least `lanes / 4`, every reduction is over a constant
/// shape that the contiguous vector fold cannot take (its innermost extent is shorter than
/// `lanes`, or the value is not contiguous along it), and every grid output is computed at
/// its row alone (no axes of its own).
fn lane_blocked(
    kernel: &Kernel,
    def: &ComputeDef,
    plan: &RowPlan,
    domain: &[Expr],
    lanes: u16,
) -> bool {
    let wide = domain
        .last()
        .and_then(Expr::as_int)
        .is_some_and(|w| 4 * w >= i64::from(lanes));
    let reductions_fit = row_reduces(def, plan).iter().all(|r| {
        let Some(extents) = r.const_shape(kernel) else {
            return false;
        };
        let rshape: Vec<Expr> = extents.into_iter().map(Expr::int).collect();
        let acc_t = accumulator_dtype(tensor_dtype(r.var).unwrap_or(DataType::F32));
        let identity: HashMap<Var, Expr> = r.axes.iter().map(|a| (a.clone(), a.expr())).collect();
        contiguous_fold(
            kernel,
            r.value,
            r.reduce_axes,
            &rshape,
            &identity,
            &HashMap::new(),
            acc_t,
            lanes,
        )
        .is_none()
    });
    let outputs_at_row = plan.outputs.iter().all(|out| match &def.nodes[out.node].1 {
        ComputeNode::Reduce { .. } => true,
        ComputeNode::Grid { axes, .. } => {
            let shape = tensor_shape(&def.nodes[out.node].0);
            (0..axes.len()).all(|a| {
                out.binding.contains(&Some(a)) || kernel.extent(&shape[a]).as_int() == Some(1)
            })
        }
    });
    wide && reductions_fit && outputs_at_row
}

/// The lane-blocked row loop, for many short reductions (pooling windows, depthwise
/// convolutions): one parallel loop over the rows' outer dimensions; the innermost dimension
/// is cut into its border columns and its interior (see [`interior_columns`]), each cut into
/// blocks of `lanes` rows (with unit-stride lanes, a remainder of at least half a block is
/// a whole block overlapping the one before), and each block is one `LoopKind::Vectorize`
/// loop over its rows
/// that folds every reduction of a row into a register and writes the row's outputs, so the
/// C compiler keeps one accumulator per SIMD lane (see [`lane_block`]).
fn emit_lane_rows(
    fb: &mut FunctionBuilder,
    kernel: &Kernel,
    def: &ComputeDef,
    plan: &RowPlan,
    domain: &[Expr],
    lanes: u16,
    threads: i64,
) -> Result<(), ScheduleError> {
    let (inner, outer) = domain
        .split_last()
        .expect("lane_blocked checked a last dimension");
    let width = inner
        .as_int()
        .expect("lane_blocked checked a constant width");
    let unit_stride = unit_stride_rows(def, plan);
    let block = if unit_stride && width <= WHOLE_ROW_BLOCK && !guards_read_column(def, plan) {
        width
    } else {
        i64::from(lanes)
    };
    let (a, b) = interior_columns(kernel, def, plan, width);
    let mut failure = None;
    parallel_items(fb, &product(outer), threads, |fb, item| {
        bind_all(fb, "i", &unravel(&item, outer), |fb, outer_index| {
            for (start, end) in [(0, a), (a, b), (b, width)] {
                let (full, tail) = ((end - start) / block, (end - start) % block);
                if full > 0 {
                    fb.for_range("jb", full, |fb, jb| {
                        let first = jb * block + start;
                        if let Err(e) =
                            lane_block(fb, kernel, def, plan, &outer_index, &first, block)
                        {
                            failure = Some(e);
                        }
                    });
                }
                if tail > 0 {
                    // With unit-stride lanes, at least one whole block and a remainder of at
                    // least half a block, the last block ends at `end` and overlaps the one
                    // before (its overlapping rows are computed and written twice, with the
                    // same values), so no row is left to a scalar remainder loop. At a
                    // stride, or for a short remainder, the redundant lanes cost more than
                    // the remainder (measured on MobileNet-V2's depthwise convolutions).
                    let (first, count) = if full > 0 && unit_stride && 2 * tail >= block {
                        (end - block, block)
                    } else {
                        (start + full * block, tail)
                    };
                    let first = Expr::int(first);
                    if let Err(e) = lane_block(fb, kernel, def, plan, &outer_index, &first, count) {
                        failure = Some(e);
                    }
                }
            }
        });
    })?;
    failure.map_or(Ok(()), Err)
}

/// The longest innermost dimension taken as one block when its lanes read contiguous memory
/// and no bounds guard depends on it (channels-last depthwise convolutions: the guards
/// depend on the pixel, the lanes are channels). One block per pixel instead of one per
/// vector measured 1.3 to 4 times faster on MobileNet-V2's (32 to 960 channels): the C
/// compiler turns a block into a vector loop, and its per-block set-up outweighs a single
/// vector's work.
const WHOLE_ROW_BLOCK: i64 = 1024;

/// Whether some bounds guard of a row reduction depends on the rows' innermost axis.
fn guards_read_column(def: &ComputeDef, plan: &RowPlan) -> bool {
    row_reduces(def, plan).iter().any(|r| {
        r.axes.last().is_some_and(|column| {
            guards::index_guards(r.value)
                .iter()
                .any(|g| g.mentions(column))
        })
    })
}

/// Whether every tensor read of every row reduction either stays put or moves by exactly one
/// element along its innermost dimension (and not at all along the others) from one row
/// (the rows' innermost axis) to the next, at two sample points of the other variables:
/// the lanes of a block then read contiguous memory.
fn unit_stride_rows(def: &ComputeDef, plan: &RowPlan) -> bool {
    row_reduces(def, plan).iter().all(|r| {
        let Some(column) = r.axes.last() else {
            return false;
        };
        let mut unit = true;
        r.value.visit(&mut |e| {
            let ExprKind::TensorElement { indices, .. } = e.kind() else {
                return;
            };
            for sample in [1, 4] {
                let at = |col: i64, i: &Expr| -> Option<i64> {
                    let env: HashMap<u64, i64> = guards::variables(i)
                        .iter()
                        .map(|v| (v.id(), if v == column { col } else { sample }))
                        .collect();
                    eval_index(i, &env).ok()
                };
                let steps: Vec<Option<i64>> = indices
                    .iter()
                    .map(|i| Some(at(sample + 1, i)? - at(sample, i)?))
                    .collect();
                let last = steps.len().saturating_sub(1);
                let broadcast = steps.iter().all(|s| *s == Some(0));
                let contiguous = steps
                    .iter()
                    .enumerate()
                    .all(|(d, s)| *s == Some(i64::from(d == last)));
                unit &= broadcast || contiguous;
            }
        });
        unit
    })
}

/// Window points evaluated at compile time to find the interior columns, at most.
const INTERIOR_SEARCH: i64 = 1 << 20;

/// The columns `a..b` of the rows' innermost dimension (of extent `width`) at which every
/// bounds guard that depends on that column alone (and on the window) holds for the whole
/// window: there, blocks of rows can drop those guards. The guards are monotone, so these
/// columns are one interval; `(0, width)` when no guard depends on the column or the search
/// would be too long, `(0, 0)` when no column is interior.
fn interior_columns(kernel: &Kernel, def: &ComputeDef, plan: &RowPlan, width: i64) -> (i64, i64) {
    let mut inside = vec![true; usize::try_from(width).unwrap_or(0)];
    for r in row_reduces(def, plan) {
        let Some(column) = r.axes.last() else {
            continue;
        };
        let Some(rshape) = r.const_shape(kernel) else {
            return (0, width);
        };
        let points: i64 = rshape.iter().product();
        if points.saturating_mul(width) > INTERIOR_SEARCH {
            return (0, width);
        }
        let reduce_axes = r.reduce_axes;
        let own: Vec<Expr> = guards::index_guards(r.value)
            .into_iter()
            .filter(|g| {
                guards::variables(g)
                    .iter()
                    .all(|v| v == column || reduce_axes.contains(v))
            })
            .collect();
        for (w, ok) in inside.iter_mut().enumerate() {
            for p in 0..points {
                let mut env: HashMap<u64, i64> = HashMap::from([(column.id(), w as i64)]);
                let mut rest = p;
                for (r, n) in reduce_axes.iter().zip(&rshape).rev() {
                    env.insert(r.id(), rest % n);
                    rest /= n;
                }
                *ok &= own
                    .iter()
                    .all(|g| eval_index(g, &env).is_ok_and(|holds| holds != 0));
            }
        }
    }
    let first = inside.iter().position(|&ok| ok);
    let last = inside.iter().rposition(|&ok| ok);
    match (first, last) {
        (Some(a), Some(b)) => (a as i64, b as i64 + 1),
        _ => (0, 0),
    }
}

/// Reduction windows of at most this many points are unrolled in the lane-blocked form, so
/// that the C compiler vectorizes the lane loop around them.
const UNROLLED_WINDOW: i64 = 64;

/// One block of `count` consecutive rows starting at `first` in the innermost dimension.
/// When the reductions read through bounds guards (padded windows), the block is emitted
/// twice: a guard-free copy taken when every guard holds on the whole block and window
/// (checked at the corners, see [`guards`](super::guards)), and the guarded copy otherwise.
fn lane_block(
    fb: &mut FunctionBuilder,
    kernel: &Kernel,
    def: &ComputeDef,
    plan: &RowPlan,
    outer: &[Expr],
    first: &Expr,
    count: i64,
) -> Result<(), ScheduleError> {
    let mut inside: Option<Expr> = None;
    for r in row_reduces(def, plan) {
        let found = guards::index_guards(r.value);
        let Some(last) = r.axes.last().filter(|_| !found.is_empty()) else {
            continue;
        };
        let mut ranges = vec![(last.clone(), first.clone(), first + (count - 1))];
        for (axis, n) in r.reduce_axes.iter().zip(r.reduce_shape) {
            ranges.push((axis.clone(), Expr::int(0), kernel.extent(n) - 1));
        }
        let env: HashMap<Var, Expr> = r.axes.iter().cloned().zip(outer.iter().cloned()).collect();
        let check = kernel.rename(&guards::hold_on_box(&found, &ranges), &env, &HashMap::new());
        inside = Some(match inside {
            None => check,
            Some(c) => c.and(check),
        });
    }
    match inside {
        None => lane_loop(fb, kernel, def, plan, outer, first, count, false),
        Some(check) => {
            let (mut fast, mut guarded) = (Ok(()), Ok(()));
            fb.if_then_else(
                check,
                |fb| fast = lane_loop(fb, kernel, def, plan, outer, first, count, true),
                |fb| guarded = lane_loop(fb, kernel, def, plan, outer, first, count, false),
            );
            fast.and(guarded)
        }
    }
}

/// The `LoopKind::Vectorize` loop over a block's rows, each folding every reduction into a
/// register (windows unrolled up to [`UNROLLED_WINDOW`] points) and writing its outputs;
/// with `assume_inside`, every bounds guard of the reductions is taken as true.
#[allow(clippy::too_many_arguments)]
fn lane_loop(
    fb: &mut FunctionBuilder,
    kernel: &Kernel,
    def: &ComputeDef,
    plan: &RowPlan,
    outer: &[Expr],
    first: &Expr,
    count: i64,
    assume_inside: bool,
) -> Result<(), ScheduleError> {
    let mut failure = None;
    fb.for_range_with("l", count, LoopKind::Vectorize, |fb, l| {
        let mut row = outer.to_vec();
        row.push(first + l.clone());
        let mut accs: HashMap<Var, Expr> = HashMap::new();
        for red in row_reduces(def, plan) {
            let (var, axes, reduce_axes, kind) = (red.var, red.axes, red.reduce_axes, red.kind);
            let dtype = tensor_dtype(var).unwrap_or(DataType::F32);
            let acc_t = accumulator_dtype(dtype);
            let value = if assume_inside {
                guards::assume(red.value, &guards::index_guards(red.value))
            } else {
                red.value.clone()
            };
            let acc = fb.var("acc", kind.identity(acc_t));
            let env: HashMap<Var, Expr> = axes.iter().cloned().zip(row.iter().cloned()).collect();
            let speculate = !assume_inside && reads_speculable(kernel, &red);
            let mut fold = |fb: &mut FunctionBuilder, r: &[Expr]| {
                let mut env = env.clone();
                env.extend(reduce_axes.iter().cloned().zip(r.iter().cloned()));
                let mut v = cast_to(kernel.rename(&value, &env, &accs), acc_t);
                if speculate {
                    v = speculated(fb, v, &l);
                }
                fb.assign(
                    &acc,
                    combine_scalar(kind, acc.expr(), selects_for_min_max(&v)),
                );
            };
            match red.const_shape(kernel) {
                Some(rshape) if rshape.iter().product::<i64>() <= UNROLLED_WINDOW => {
                    match repeat_unrolled(rshape) {
                        Ok(window) => fb.for_each(window.on(0), |fb, r| fold(fb, r)),
                        Err(e) => failure = Some(e.into()),
                    }
                }
                _ => {
                    let rshape: Vec<Expr> =
                        red.reduce_shape.iter().map(|d| kernel.extent(d)).collect();
                    nest(fb, &rshape, &mut fold);
                }
            }
            accs.insert(var.clone(), cast_to(acc.expr(), dtype));
        }
        for out in &plan.outputs {
            write_output(fb, kernel, def, out, &row, &accs, None);
        }
    });
    failure.map_or(Ok(()), Err)
}

/// Whether every read of `red`'s value stays inside its tensor for every row and window
/// point ([`guards::reads_in_bounds`]), so that guarded reads may be loaded unconditionally.
fn reads_speculable(kernel: &Kernel, red: &RowReduce<'_>) -> bool {
    let shape = tensor_shape(red.var);
    let axes = red.axes.iter().zip(&shape);
    let reduce = red.reduce_axes.iter().zip(red.reduce_shape);
    let ranges: Option<Vec<(Var, i64, i64)>> = axes
        .chain(reduce)
        .map(|(v, n)| Some((v.clone(), 0, kernel.extent(n).as_int()? - 1)))
        .collect();
    ranges.is_some_and(|r| guards::reads_in_bounds(red.value, &r))
}

/// `value` with the reads of a top-level guarded select, `inside ? x : fill`, hoisted into a
/// variable bound before it, when `inside` does not depend on the lane `lane`: the select
/// then discards a loaded value instead of guarding the load, and the C compiler vectorizes
/// the lanes with plain loads and a blend rather than masked loads (which GCC cannot form
/// at all for some strides). Requires the reads to be in bounds whatever `inside` says.
fn speculated(fb: &mut FunctionBuilder, value: Expr, lane: &Expr) -> Expr {
    let lane_invariant = |c: &Expr| lane.as_var().is_some_and(|l| !c.mentions(l));
    match value.kind() {
        ExprKind::Select(inside, x, fill) if lane_invariant(inside) => {
            let loaded = fb.var("v", x.clone());
            Expr::select(inside.clone(), loaded.expr(), fill.clone())
        }
        _ => value,
    }
}

/// The value of a reduction along its innermost axis as a function of a lane variable,
/// when `lanes`-wide contiguous vector loads can fold it: `f32` accumulation, an innermost
/// extent of at least `lanes` (or unknown), and a value [`vectorize`] accepts.
#[allow(clippy::too_many_arguments)]
fn contiguous_fold(
    kernel: &Kernel,
    value: &Expr,
    reduce_axes: &[Var],
    rshape: &[Expr],
    env: &HashMap<Var, Expr>,
    accs: &HashMap<Var, Expr>,
    acc_t: DataType,
    lanes: u16,
) -> Option<(Var, Expr)> {
    let (r_last, n_last) = (reduce_axes.last()?, rshape.last()?);
    if acc_t != DataType::F32 || lanes <= 1 {
        return None;
    }
    let lane = Var::new("lane", DataType::I32);
    let mut lane_env = env.clone();
    lane_env.insert(r_last.clone(), lane.expr());
    let scalar = cast_to(kernel.rename(value, &lane_env, accs), acc_t);
    let long_enough = n_last.as_int().is_none_or(|n| n >= i64::from(lanes));
    vectorize(&scalar, &lane, &lane.expr(), lanes)
        .filter(|_| long_enough)
        .map(|_| (lane, scalar))
}

/// The accumulator type of a reduction producing `dtype`: `f32` for
/// `f16`/`bf16`, the type itself otherwise.
fn accumulator_dtype(dtype: DataType) -> DataType {
    if dtype == DataType::F16 || dtype == DataType::BF16 {
        DataType::F32
    } else {
        dtype
    }
}

/// `acc ⊕ value` for scalars; float max/min as the plain select `value > acc ? value : acc`
/// (`<` for min). Requires `acc` to be an accumulator that starts at the reduction's
/// identity (±inf) and is only updated by this combine: a NaN `value` never replaces it, so
/// it is never NaN, and `fmax`'s clause for a NaN accumulator (what `select_min_max`
/// spells out) is dead. That clause costs GCC a scalar, branchy path inside strided
/// pooling loops, 8x slower on random data.
fn combine_scalar(kind: ReduceKind, acc: Expr, value: Expr) -> Expr {
    match kind {
        ReduceKind::Max | ReduceKind::Min if acc.dtype().is_some_and(|d| d.is_float()) => {
            let better = if kind == ReduceKind::Max {
                value.gt(&acc)
            } else {
                value.lt(&acc)
            };
            Expr::select(better, value, acc)
        }
        _ => kind.combine(acc, value),
    }
}

fn cast_to(e: Expr, dtype: DataType) -> Expr {
    if e.dtype() == Some(dtype) {
        e
    } else {
        e.cast(dtype)
    }
}

/// Folds reduce `node` for `row` into a fresh register; returns the
/// reduction's value as the node's dtype, and whether the fold also stored every folded
/// value into `stash` (only the vector fold of a sum does; see [`stash`]).
#[allow(clippy::too_many_arguments)]
fn reduce_row(
    fb: &mut FunctionBuilder,
    kernel: &Kernel,
    node: &ComputeNode,
    var: &Var,
    row: &[Expr],
    accs: &HashMap<Var, Expr>,
    lanes: u16,
    stash: Option<&Stash>,
) -> Result<(Expr, bool), ScheduleError> {
    let ComputeNode::Reduce {
        axes,
        reduce_axes,
        reduce_shape,
        kind,
        value,
    } = node
    else {
        return Err(ScheduleError::unsupported(format!(
            "`{}` is not a reduction",
            var.name()
        )));
    };
    let dtype = tensor_dtype(var).unwrap_or(DataType::F32);
    let acc_t = accumulator_dtype(dtype);
    let kind = *kind;
    let rshape: Vec<Expr> = reduce_shape.iter().map(|d| kernel.extent(d)).collect();
    let env: HashMap<Var, Expr> = axes.iter().cloned().zip(row.iter().cloned()).collect();
    let acc = fb.var("acc", kind.identity(acc_t));
    let body_value = |env: &HashMap<Var, Expr>| cast_to(kernel.rename(value, env, accs), acc_t);
    let per_lane = matches!(kind, ReduceKind::Max | ReduceKind::Min);
    let mut stashed = false;
    let vector_body = contiguous_fold(
        kernel,
        value,
        reduce_axes,
        &rshape,
        &env,
        accs,
        acc_t,
        lanes,
    );
    match vector_body {
        Some((lane, scalar)) if per_lane => {
            let w = i64::from(lanes);
            let scalar = selects_for_min_max(&scalar);
            let lacc = fb.register_tensor("lacc", DataType::F32, row_major([w]));
            fb.for_range_with("l", w, LoopKind::Vectorize, |fb, l| {
                fb.store(&lacc, [l], kind.identity(DataType::F32));
            });
            let outer_axes = &reduce_axes[..reduce_axes.len() - 1];
            let (n_last, outer_shape) = rshape.split_last().expect("vector path has a last axis");
            nest(fb, outer_shape, &mut |fb, ro| {
                let mut map: HashMap<Var, Expr> =
                    outer_axes.iter().cloned().zip(ro.iter().cloned()).collect();
                fb.for_range("b", n_last / w, |fb, b| {
                    fb.for_range_with("l", w, LoopKind::Vectorize, |fb, l| {
                        let mut at = map.clone();
                        at.insert(lane.clone(), &b * w + &l);
                        let v = scalar.substitute(&at);
                        fb.store(&lacc, [l.clone()], combine_scalar(kind, lacc.at([l]), v));
                    });
                });
                fb.for_range("r", n_last - (n_last / w) * w, |fb, r| {
                    map.insert(lane.clone(), (n_last / w) * w + r);
                    let v = scalar.substitute(&map);
                    fb.assign(&acc, combine_scalar(kind, acc.expr(), v));
                });
            });
            let each = repeat_unrolled([w])?;
            fb.for_each(each.on(0), |fb, l| {
                fb.assign(&acc, combine_scalar(kind, acc.expr(), lacc.at(l.to_vec())));
            });
        }
        Some((lane, scalar)) => {
            stashed = stash.is_some();
            // `fold(fb, v, at)` folds the vector or scalar `v` of position `at` into `into`
            // (and stores it into the stash first).
            let fold = |fb: &mut FunctionBuilder,
                        v: Expr,
                        at: Expr,
                        into: &dyn Fn(&mut FunctionBuilder, Expr)| {
                let Some(s) = stash else {
                    return into(fb, v);
                };
                fb.let_in("e", v, |fb, v| {
                    if v.dtype().is_some_and(|d| d.is_vector()) {
                        let dst = s.param.at(s.index(at)).address();
                        fb.call(Intrinsic::VectorStore, vec![dst, v.clone()]);
                    } else {
                        fb.store(&s.param, s.index(at), v.clone());
                    }
                    into(fb, v);
                });
            };
            let vec_t = DataType::F32.with_lanes(lanes);
            let vacc = fb.register_tensor("vacc", vec_t, row_major([ACCUMULATORS]));
            let each = repeat_unrolled([ACCUMULATORS])?;
            fb.for_each(each.on(0), |fb, u| {
                fb.store(
                    &vacc,
                    u.to_vec(),
                    kind.identity(DataType::F32).broadcast(lanes),
                );
            });
            let outer_axes = &reduce_axes[..reduce_axes.len() - 1];
            let (n_last, outer_shape) = rshape.split_last().expect("vector path has a last axis");
            nest(fb, outer_shape, &mut |fb, ro| {
                let mut map: HashMap<Var, Expr> =
                    outer_axes.iter().cloned().zip(ro.iter().cloned()).collect();
                let step = |base: &Expr, map: &HashMap<Var, Expr>| -> Expr {
                    let at_base = vectorize(&scalar, &lane, base, lanes)
                        .expect("vectorizable: checked for the same expression above");
                    at_base.substitute(map)
                };
                let w = i64::from(lanes);
                let chunk = ACCUMULATORS * w;
                fb.for_range("b", n_last / chunk, |fb, b| {
                    fb.for_each(each.on(0), |fb, u| {
                        let u = &u[0];
                        let base = (&b * ACCUMULATORS + u) * w;
                        let v = step(&base, &map);
                        fold(fb, v, base, &|fb, v| {
                            fb.store(&vacc, [u.clone()], kind.combine(vacc.at([u.clone()]), v));
                        });
                    });
                });
                let done = (n_last / chunk) * ACCUMULATORS;
                fb.for_range("c", n_last / w - &done, |fb, c| {
                    let base = (&done + c) * w;
                    let v = step(&base, &map);
                    fold(fb, v, base, &|fb, v| {
                        fb.store(&vacc, [0], kind.combine(vacc.at([0]), v));
                    });
                });
                fb.for_range("r", n_last - (n_last / w) * w, |fb, r| {
                    let at = (n_last / w) * w + r;
                    map.insert(lane.clone(), at.clone());
                    let v = selects_for_min_max(&scalar.substitute(&map));
                    fold(fb, v, at, &|fb, v| {
                        fb.assign(&acc, combine_scalar(kind, acc.expr(), v));
                    });
                });
            });
            let folded = (1..ACCUMULATORS).fold(vacc.at([0]), |a, u| kind.combine(a, vacc.at([u])));
            let spill = fb.register_tensor("lanes", DataType::F32, row_major([i64::from(lanes)]));
            fb.call(
                Intrinsic::VectorStore,
                vec![spill.at([0]).address(), folded],
            );
            let per_lane = repeat_unrolled([i64::from(lanes)])?;
            fb.for_each(per_lane.on(0), |fb, l| {
                fb.assign(&acc, combine_scalar(kind, acc.expr(), spill.at(l.to_vec())));
            });
        }
        None => {
            nest(fb, &rshape, &mut |fb, r| {
                let mut env = env.clone();
                env.extend(reduce_axes.iter().cloned().zip(r.iter().cloned()));
                let v = selects_for_min_max(&body_value(&env));
                fb.assign(&acc, combine_scalar(kind, acc.expr(), v));
            });
        }
    }
    Ok((cast_to(acc.expr(), dtype), stashed))
}

/// Serial loops over `shape`, calling `body` with the index.
fn nest(
    fb: &mut FunctionBuilder,
    shape: &[Expr],
    body: &mut dyn FnMut(&mut FunctionBuilder, &[Expr]),
) {
    fn go(
        fb: &mut FunctionBuilder,
        shape: &[Expr],
        prefix: Vec<Expr>,
        body: &mut dyn FnMut(&mut FunctionBuilder, &[Expr]),
    ) {
        match shape.split_first() {
            None => body(fb, &prefix),
            Some((extent, rest)) => fb.for_range("r", extent.clone(), |fb, r| {
                let mut index = prefix;
                index.push(r);
                go(fb, rest, index, body);
            }),
        }
    }
    go(fb, shape, Vec::new(), body);
}

/// Writes output `out` for `row`: a reduction at the row's index, or a grid
/// over its axes not bound to the row (innermost loop vectorized; axes of
/// extent 1 are not looped).
fn write_output(
    fb: &mut FunctionBuilder,
    kernel: &Kernel,
    def: &ComputeDef,
    out: &RowOutput,
    row: &[Expr],
    accs: &HashMap<Var, Expr>,
    stash: Option<&Stash>,
) {
    let (var, node) = &def.nodes[out.node];
    let param = &kernel.outputs[out.position];
    let dtype = tensor_dtype(var).unwrap_or(DataType::F32);
    match node {
        ComputeNode::Reduce { .. } => {
            let value = accs.get(var).cloned().unwrap_or_else(|| Expr::zero(dtype));
            fb.store(param, row.to_vec(), value);
        }
        ComputeNode::Grid { axes, value } => {
            let shape = tensor_shape(var);
            let index = stash::row_index(kernel, &shape, out, row);
            let free: Vec<usize> = (0..axes.len()).filter(|&a| index[a].is_none()).collect();
            let extents: Vec<Expr> = free.iter().map(|&a| kernel.extent(&shape[a])).collect();
            inner_nest(fb, &extents, Vec::new(), &mut |fb, loops| {
                let mut full = index.clone();
                for (&a, l) in free.iter().zip(loops) {
                    full[a] = Some(l.clone());
                }
                let full: Vec<Expr> = full
                    .into_iter()
                    .map(|e| e.unwrap_or_else(|| Expr::int(0)))
                    .collect();
                let env: HashMap<Var, Expr> =
                    axes.iter().cloned().zip(full.iter().cloned()).collect();
                let mut v = kernel.rename(value, &env, accs);
                if let (Some(s), [j]) = (stash, loops) {
                    v = s.reuse(kernel, accs, j, &v);
                }
                let v = cast_to(selects_for_min_max(&v), dtype);
                fb.store(param, full, v);
            });
        }
    }
}

/// Loops over `shape`, the innermost one `LoopKind::Vectorize`.
fn inner_nest(
    fb: &mut FunctionBuilder,
    shape: &[Expr],
    prefix: Vec<Expr>,
    body: &mut dyn FnMut(&mut FunctionBuilder, &[Expr]),
) {
    match shape.split_first() {
        None => body(fb, &prefix),
        Some((extent, rest)) => {
            let kind = if rest.is_empty() {
                LoopKind::Vectorize
            } else {
                LoopKind::Serial
            };
            fb.for_range_with("j", extent.clone(), kind, |fb, j| {
                let mut index = prefix;
                index.push(j);
                inner_nest(fb, rest, index, body);
            })
        }
    }
}
