//! The inlining fallback for single operators the rule-based scheduler does not cover: one
//! kernel that computes every output element in place, with every other tensor of the
//! definition inlined into it. Correct for any definition, fast for few.
//!
//! Grids are substituted into their readers; a read of a reduce node becomes an accumulator
//! loop right before the element that needs it. So an anchor with its prologues and its
//! epilogues is one loop nest and no intermediate buffer exists. The price: a reduce node read
//! at several indices per element (or by several outputs) is recomputed for each; the fusion
//! partition only builds epilogues that read the anchor once per element.
//!
//! The loop nest: all dimensions but the last are flattened into one loop, parallel over
//! threads when the element count times the reduction work is large; the last dimension is
//! an inner loop.

use std::collections::HashMap;

use hidet_ir::inline::element;

use hidet_ir::builder::FunctionBuilder;
use hidet_ir::compute::{tensor_shape, ComputeDef, ComputeNode};

use hidet_ir::expr::{Expr, Var};
use hidet_ir::function::Function;
use hidet_ir::stmt::LoopKind;

/// Work (elements × reduction length) above which the outer loop runs in parallel.
pub const PARALLEL_WORK: i64 = 1 << 15;

/// Why a definition cannot be scheduled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NaiveError {
    #[error("tensor `{0}` has a non-constant shape")]
    DynamicShape(String),
}

/// The kernel `name(inputs…, outputs…)` computing `def` (see the module docs). An output that
/// is also an input (passed through) gets its own parameter and is copied.
pub fn schedule_naive(def: &ComputeDef, name: &str) -> Result<Function, NaiveError> {
    let def = def.inline_grids();
    let mut out_params: Vec<Var> = Vec::new();
    for o in &def.outputs {
        if def.inputs.contains(o) || out_params.contains(o) {
            out_params.push(Var::new(format!("{}_out", o.name()), o.ty().clone()));
        } else {
            out_params.push(o.clone());
        }
    }
    let nodes: HashMap<Var, ComputeNode> = def.nodes.iter().cloned().collect();
    let mut fb = FunctionBuilder::cpu_kernel(name);
    for (o, p) in def.outputs.iter().zip(&out_params) {
        let shape = const_shape(p)?;
        let work = work_of(o, &nodes).saturating_mul(shape.iter().product::<i64>().max(1));
        let kind = if work >= PARALLEL_WORK {
            LoopKind::Parallel
        } else {
            LoopKind::Serial
        };
        emit_elements(&mut fb, &shape, kind, &mut |fb, index| {
            let value = match nodes.get(o) {
                None => o.at(index.to_vec()),
                Some(node) => element(fb, node, index, &nodes),
            };
            fb.store(p, index.to_vec(), value);
        });
    }
    let mut f = fb.finish();
    f.params = def.inputs.iter().cloned().chain(out_params).collect();
    Ok(f)
}

fn const_shape(v: &Var) -> Result<Vec<i64>, NaiveError> {
    tensor_shape(v)
        .iter()
        .map(|d| {
            d.as_int()
                .ok_or_else(|| NaiveError::DynamicShape(v.name().to_string()))
        })
        .collect()
}

/// Reduction iterations per element of `v` (1 for grids), following reads.
fn work_of(v: &Var, nodes: &HashMap<Var, ComputeNode>) -> i64 {
    let Some(node) = nodes.get(v) else { return 1 };
    let own = match node {
        ComputeNode::Reduce { reduce_shape, .. } => reduce_shape
            .iter()
            .map(|d| d.as_int().unwrap_or(1).max(1))
            .product::<i64>(),
        ComputeNode::Grid { .. } => 1,
    };
    let inner: i64 = hidet_ir::compute::reads(node.value())
        .iter()
        .map(|(t, _)| work_of(t, nodes))
        .max()
        .unwrap_or(1);
    own.saturating_mul(inner)
}

/// Emits the loop nest over `shape` (see the module docs) and calls `body` with each index.
fn emit_elements(
    fb: &mut FunctionBuilder,
    shape: &[i64],
    kind: LoopKind,
    body: &mut dyn FnMut(&mut FunctionBuilder, &[Expr]),
) {
    match shape {
        [] => body(fb, &[]),
        [n] => fb.for_range_with("i", *n, kind, |fb, i| body(fb, &[i])),
        [outer @ .., last] => {
            let rows: i64 = outer.iter().product();
            fb.for_range_with("row", rows, kind, |fb, row| {
                let mut index = Vec::with_capacity(shape.len());
                let mut stride = rows;
                for (d, &extent) in outer.iter().enumerate() {
                    stride /= extent;
                    let q = if stride == 1 {
                        row.clone()
                    } else {
                        &row / Expr::int(stride)
                    };
                    index.push(if d == 0 { q } else { q % Expr::int(extent) });
                }
                fb.for_range("j", *last, |fb, j| {
                    index.push(j);
                    body(fb, &index);
                });
            });
        }
    }
}
