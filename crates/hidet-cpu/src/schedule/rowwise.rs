//! Reductions and the outputs computed from them, one row at a time.
//!
//! A row is one point of the reductions' common output shape. Per row, every
//! reduce node is folded into a register accumulator (later reductions read
//! earlier ones from their registers), then the row's outputs are written:
//! reduce outputs at the row's index, grid outputs over their remaining
//! axes with a vectorized innermost loop.

use super::error::ScheduleError;
use super::params::Kernel;
use super::plan::{RowOutput, RowPlan};
use super::select::{select_min_max, selects_for_min_max};
use super::threads::{bind_all, parallel_items, product, unravel};
use super::vectorize::vectorize;
use hidet_ir::builder::FunctionBuilder;
use hidet_ir::compute::{tensor_dtype, tensor_shape, ComputeDef, ComputeNode, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, Var};
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
    let rows = product(&domain);
    let mut failure = None;
    parallel_items(fb, &rows, threads, |fb, item| {
        bind_all(fb, "i", &unravel(&item, &domain), |fb, row| {
            let mut accs: HashMap<Var, Expr> = HashMap::new();
            for &k in &plan.reduces {
                let (var, node) = &def.nodes[k];
                match reduce_row(fb, kernel, node, var, &row, &accs, lanes) {
                    Ok(acc) => {
                        accs.insert(var.clone(), acc);
                    }
                    Err(e) => failure = Some(e),
                }
            }
            for out in &plan.outputs {
                write_output(fb, kernel, def, out, &row, &accs);
            }
        });
    })?;
    failure.map_or(Ok(()), Err)
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

/// `acc ⊕ value` for scalars, float max/min as selects.
fn combine_scalar(kind: ReduceKind, acc: Expr, value: Expr) -> Expr {
    match kind {
        ReduceKind::Max | ReduceKind::Min if acc.dtype().is_some_and(|d| d.is_float()) => {
            select_min_max(kind == ReduceKind::Max, &value, &acc)
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
/// reduction's value as the node's dtype.
fn reduce_row(
    fb: &mut FunctionBuilder,
    kernel: &Kernel,
    node: &ComputeNode,
    var: &Var,
    row: &[Expr],
    accs: &HashMap<Var, Expr>,
    lanes: u16,
) -> Result<Expr, ScheduleError> {
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

    let vector_body = match (reduce_axes.last(), rshape.last()) {
        (Some(r_last), Some(n_last)) if acc_t == DataType::F32 && lanes > 1 => {
            let lane = Var::new("lane", DataType::I32);
            let mut lane_env = env.clone();
            lane_env.insert(r_last.clone(), lane.expr());
            let scalar = body_value(&lane_env);
            let long_enough = n_last.as_int().is_none_or(|n| n >= i64::from(lanes));
            vectorize(&scalar, &lane, &lane.expr(), lanes)
                .filter(|_| long_enough)
                .map(|_| (lane, scalar))
        }
        _ => None,
    };
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
                        fb.store(&vacc, [u.clone()], kind.combine(vacc.at([u.clone()]), v));
                    });
                });
                let done = (n_last / chunk) * ACCUMULATORS;
                fb.for_range("c", n_last / w - &done, |fb, c| {
                    let v = step(&((&done + c) * w), &map);
                    fb.store(&vacc, [0], kind.combine(vacc.at([0]), v));
                });
                fb.for_range("r", n_last - (n_last / w) * w, |fb, r| {
                    map.insert(lane.clone(), (n_last / w) * w + r);
                    let v = selects_for_min_max(&scalar.substitute(&map));
                    fb.assign(&acc, combine_scalar(kind, acc.expr(), v));
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
    Ok(cast_to(acc.expr(), dtype))
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
/// over its axes not bound to the row (innermost loop vectorized).
fn write_output(
    fb: &mut FunctionBuilder,
    kernel: &Kernel,
    def: &ComputeDef,
    out: &RowOutput,
    row: &[Expr],
    accs: &HashMap<Var, Expr>,
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
            let mut index: Vec<Option<Expr>> = vec![None; axes.len()];
            for (d, b) in out.binding.iter().enumerate() {
                if let Some(axis) = b {
                    index[*axis] = Some(row[d].clone());
                }
            }
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
                let v = cast_to(
                    selects_for_min_max(&kernel.rename(value, &env, accs)),
                    dtype,
                );
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
