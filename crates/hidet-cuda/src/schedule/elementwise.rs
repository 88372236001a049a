//! The default GPU schedule for any compute definition: one output element per thread over a
//! 1-D grid. Injective tasks are exactly this; a task with reductions gets serial reduction
//! loops in each thread (correct for any definition, fast only when reductions are short).
//!
//! Grids are inlined into their readers; a read of a reduce node becomes an accumulator loop
//! right before the element that needs it, so no intermediate buffer exists. A reduce node
//! read at several indices per element is recomputed for each read.
//!
//! Thread `t` of the grid (`blockIdx.x · THREADS + threadIdx.x`) computes element `t` (in
//! row-major order) of every output that has more than `t` elements.

use std::collections::HashMap;

use hidet_ir::inline::element;

use hidet_ir::builder::FunctionBuilder;
use hidet_ir::compute::{ComputeDef, ComputeNode};

use hidet_ir::expr::{Dim, Expr, Var};
use hidet_ir::function::Function;

use super::{const_shape, output_params, ScheduleError};

/// Threads per block of the elementwise schedule.
pub const THREADS: i64 = 256;

/// The kernel `name(inputs…, outputs…)` computing `def` (see the module docs).
pub fn schedule_elementwise(def: &ComputeDef, name: &str) -> Result<Function, ScheduleError> {
    let def = def.inline_grids();
    let out_params = output_params(&def);
    let nodes: HashMap<Var, ComputeNode> = def.nodes.iter().cloned().collect();
    let mut sizes = Vec::with_capacity(out_params.len());
    for p in &out_params {
        let shape = const_shape(p)?;
        sizes.push((shape.iter().product::<i64>(), shape));
    }
    let total = sizes.iter().map(|(n, _)| *n).max().unwrap_or(0);
    if total > i64::from(i32::MAX) - THREADS {
        return Err(ScheduleError::TooLarge { elements: total });
    }
    let threads = if total < THREADS {
        (total.max(1) + 31) / 32 * 32
    } else {
        THREADS
    };
    let blocks = ((total + threads - 1) / threads).max(1);
    let mut fb = FunctionBuilder::cuda_kernel(name, [blocks, 1, 1].map(Expr::int), [threads, 1, 1]);
    let t = fb.var(
        "t",
        Expr::block_idx(Dim::X) * threads + Expr::thread_idx(Dim::X),
    );
    for ((o, p), (n, shape)) in def.outputs.iter().zip(&out_params).zip(&sizes) {
        fb.if_then(t.expr().lt(*n), |fb| {
            let index = unravel(&t.expr(), shape);
            let value = match nodes.get(o) {
                None => o.at(index.clone()),
                Some(node) => element(fb, node, &index, &nodes),
            };
            fb.store(p, index, value);
        });
    }
    let mut f = fb.finish();
    f.params = def.inputs.iter().cloned().chain(out_params).collect();
    Ok(f)
}

/// The row-major multi-index of flat index `flat` in `shape`.
pub fn unravel(flat: &Expr, shape: &[i64]) -> Vec<Expr> {
    let mut stride: i64 = shape.iter().product();
    let mut index = Vec::with_capacity(shape.len());
    for (d, &extent) in shape.iter().enumerate() {
        stride /= extent.max(1);
        let q = if stride == 1 {
            flat.clone()
        } else {
            flat / Expr::int(stride)
        };
        index.push(if d == 0 { q } else { q % Expr::int(extent) });
    }
    index
}
