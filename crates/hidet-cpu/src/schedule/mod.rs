//! The rule-based CPU scheduler: a compute definition becomes one parallel,
//! vectorized CPU kernel without a hand-written template (DESIGN §2,
//! "a rule-based default scheduler for ops without a template").
//!
//! [`schedule`] inlines the definition's grid nodes, then applies these rules:
//!
//! - **Injective outputs** (grids reading no reduction, and inputs passed
//!   through) are grouped by shape; each group is one loop nest in which a
//!   spatial task mapping of CPU threads (`spatial([t]) * repeat([chunk])`
//!   on the id of a `LoopKind::Parallel` loop) gives each thread a
//!   contiguous chunk of the flattened outer dimensions (rows cut into
//!   column blocks when there are too few rows for the threads), and the
//!   innermost dimension is a `LoopKind::Vectorize` loop writing every
//!   output of the group.
//! - **Reductions** must all have one output shape, the *row domain*. One
//!   parallel loop runs over its points; per row, each reduce node is
//!   folded into a register accumulator (`f32` for `f16`/`bf16`). When the
//!   innermost reduction axis reads only contiguous (or invariant) `f32`
//!   data, the fold is vectorized: sums and products in explicit SIMD (`4`
//!   accumulators of `f32xW`), max and min in `W` per-lane accumulators
//!   updated by a `LoopKind::Vectorize` lane loop; then a horizontal
//!   combine and a scalar tail. Otherwise a scalar loop. Float `max`/`min`
//!   in scalar code become NaN-preserving selects, so that the C compiler
//!   can vectorize them. Later
//!   reductions and outputs read earlier ones from their registers, so
//!   `mean = sum / n`, softmax and layernorm are one pass of the row loop.
//!   Grid outputs that read reductions must read them at their own row
//!   (each reduction index is one of the grid's axes of the same extent,
//!   or a dimension of extent 1); their other axes are looped inside the
//!   row, innermost vectorized.
//! - **Many short reductions** (pooling windows, depthwise convolutions:
//!   constant reduction shapes the contiguous fold cannot take, rows at
//!   least `W / 4` wide, outputs computed at their row alone) are
//!   *lane-blocked*: the innermost row dimension is cut into blocks of `W`
//!   rows, each a `LoopKind::Vectorize` loop folding a row per lane (small
//!   windows unrolled). Bounds guards of padded windows are monotone, so a
//!   block whose corners are inside runs a guard-free copy; the interior
//!   columns are found at compile time so that border columns get blocks
//!   of their own.
//!
//! Anything else, notably reductions of different output shapes, a
//! reduction read at another row, is [`ScheduleError::Unsupported`]: the
//! kernel never allocates scratch memory, so the caller splits the
//! definition (one reduction per definition always schedules).

mod error;
mod guards;
mod injective;
mod params;
mod plan;
mod rowwise;
mod select;
mod stash;
mod threads;
mod vectorize;

pub use error::ScheduleError;

use crate::target::CpuTarget;
use hidet_ir::compute::{tensor_dtype, ComputeDef, ComputeNode};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, Var};
use hidet_ir::function::Function;
use params::Kernel;
use plan::Plan;
use std::collections::HashMap;

/// Index arithmetic is `i32`: every tensor must have fewer elements.
const MAX_ELEMENTS: i64 = i32::MAX as i64;

/// One CPU kernel named `name` computing every output of `def` with
/// `threads` threads and `target`'s SIMD width.
///
/// The kernel's parameters are, in order: the inputs of `def`, one tensor
/// per entry of `def.outputs` (an output listed twice, or an input listed
/// as an output, gets its own parameter and is written), then the scalar
/// variables the shapes use, in order of first appearance over the input
/// shapes, the node shapes and the reduction shapes (the order of
/// [`ComputeDef::node_function`]).
///
/// Fails with [`ScheduleError::Invalid`] for an invalid definition,
/// [`ScheduleError::InvalidThreads`] for `threads < 1`, and
/// [`ScheduleError::Unsupported`] for structures the rules do not cover
/// (see the [module documentation](self)) or tensors of `2^31` elements or
/// more.
pub fn schedule(
    def: &ComputeDef,
    name: &str,
    target: &CpuTarget,
    threads: i64,
) -> Result<Function, ScheduleError> {
    if threads < 1 {
        return Err(ScheduleError::InvalidThreads(threads));
    }
    def.validate()?;
    check_sizes(def)?;
    let threads = if work(def).is_some_and(|w| w < MIN_PARALLEL_WORK) {
        1
    } else {
        threads
    };
    let (kernel, mut fb) = Kernel::new(def, name)?;
    let inlined = def.inline_grids();
    let plan = Plan::of(&inlined)?;
    let lanes = target.f32_lanes();
    for group in &plan.injective {
        injective::emit_group(&mut fb, &kernel, &inlined, group, lanes, threads)?;
    }
    if let Some(rows) = &plan.rowwise {
        rowwise::emit_rows(&mut fb, &kernel, &inlined, rows, lanes, threads)?;
    }
    Ok(kernel.finish(fb))
}

/// Element evaluations below which a kernel runs on one thread: waking and joining a second
/// thread costs about as much as evaluating this many elements (a recurrent layer's gates on a
/// few rows, 0.5 µs on one thread and 1.7 µs on two, AVX-512 host).
const MIN_PARALLEL_WORK: i64 = 8192;

/// The element evaluations of `def`: every node's elements, times its reduction's extent for
/// a reduction; `None` when a size is not constant.
fn work(def: &ComputeDef) -> Option<i64> {
    let mut total = 0i64;
    for (out, node) in &def.nodes {
        let mut n = threads::static_product(&hidet_ir::compute::tensor_shape(out))?;
        if let ComputeNode::Reduce { reduce_shape, .. } = node {
            n = n.checked_mul(threads::static_product(reduce_shape)?)?;
        }
        total = total.checked_add(n)?;
    }
    Some(total)
}

fn check_sizes(def: &ComputeDef) -> Result<(), ScheduleError> {
    let tensors = def.inputs.iter().chain(def.nodes.iter().map(|(v, _)| v));
    for t in tensors {
        let shape = hidet_ir::compute::tensor_shape(t);
        if let Some(n) = threads::static_product(&shape) {
            if n >= MAX_ELEMENTS {
                return Err(ScheduleError::unsupported(format!(
                    "`{}` has {n} elements; indices are 32-bit",
                    t.name()
                )));
            }
        }
        if threads::static_product(&shape).is_none() && shape.iter().all(|d| d.as_int().is_some()) {
            return Err(ScheduleError::unsupported(format!(
                "`{}` has 2^63 elements or more",
                t.name()
            )));
        }
    }
    Ok(())
}

/// The value of output `position` at `index`, cast to the output's dtype:
/// its grid's expression, or the input it passes through.
pub(crate) fn output_value(
    kernel: &Kernel,
    def: &ComputeDef,
    position: usize,
    index: &[Expr],
) -> Expr {
    let out = &def.outputs[position];
    let dtype = tensor_dtype(out).unwrap_or(DataType::F32);
    let value = match def.nodes.iter().find(|(v, _)| v == out) {
        Some((_, ComputeNode::Grid { axes, value })) => {
            let env: HashMap<Var, Expr> = axes.iter().cloned().zip(index.iter().cloned()).collect();
            select::selects_for_min_max(&kernel.rename(value, &env, &HashMap::new()))
        }
        Some((_, ComputeNode::Reduce { .. })) => Expr::zero(dtype),
        None => match kernel.input(out) {
            Some(p) => p.at(index.to_vec()),
            None => Expr::zero(dtype),
        },
    };
    if value.dtype() == Some(dtype) {
        value
    } else {
        value.cast(dtype)
    }
}
