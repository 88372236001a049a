//! A ScatterND whose indices are constant becomes a gather of its updates.
//!
//! ```text
//! ScatterND(X[d…], I (constant) [t…, k], U[t…, d_k…])      (reduction none)
//!   →  Where(M, Reshape(Gather(Reshape(U, [T, S]), src, axis 0), [d…]), X)
//! ```
//!
//! with `T = ∏t` index tuples, `S = ∏d_k…` elements per tuple, `src[p]` the last tuple that
//! names prefix `p` of `X` (row-major over `d_0 … d_{k-1}`) and `M` (shaped `[d_0 …
//! d_{k-1}, 1…]`) whether any does; without `Where` when every prefix is written. The
//! kernel form of ScatterND compares every element with every tuple (see
//! `crate::ops::scatter`); with the tuples known, each element reads its source once, so a
//! scatter as large as the whole tensor (a causal mask built by transformers' exporters)
//! is one element-wise kernel instead of a host step.

use crate::attribute::Attributes;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;
use crate::Attribute;

/// Prefixes (`∏d_0 … d_{k-1}`) above which the source table is not built.
pub const MAX_SCATTER_PREFIXES: usize = 1 << 24;

/// Rewrites `ScatterND` nodes (default domain, no reduction) whose indices are a constant
/// naming elements inside the data, with statically shaped data and updates (see the module
/// docs). Out-of-range indices are left to the operator, which reports them.
pub struct ScatterAsGather;

impl GraphPass for ScatterAsGather {
    fn name(&self) -> &'static str {
        "scatter-as-gather"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        Rewriter::new(graph).replace_each(plan, |p| p.y, rewrite)
    }
}

/// What one applicable scatter reads and becomes.
struct Plan {
    node: String,
    x: ValueId,
    updates: ValueId,
    y: ValueId,
    shape: Vec<usize>,
    /// Index tuples (`T`).
    tuples: usize,
    /// Elements per tuple (`S`).
    slice: usize,
    /// Per prefix of `X`, the last tuple naming it, if any.
    source: Vec<Option<usize>>,
    /// Index components per tuple (`k`).
    k: usize,
}

fn plan(rw: &Rewriter, n: NodeId) -> Option<Plan> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if node.op_type != "ScatterND" || !node.domain.is_empty() {
        return None;
    }
    let reduction = node.attrs.string_or("reduction", "none").ok()?;
    if reduction != "none" {
        return None;
    }
    let [Some(x), Some(ind), Some(updates)] = node.inputs.as_slice() else {
        return None;
    };
    let y = match node.outputs.as_slice() {
        [Some(y)] => *y,
        _ => return None,
    };
    let shape = g.value(*x).ty.fixed_shape()?;
    let update_shape = g.value(*updates).ty.fixed_shape()?;
    let indices = rw.constant(*ind)?;
    let is_ = indices.shape();
    let k = *is_.last()?;
    if k == 0 || k > shape.len() {
        return None;
    }
    let tuples_shape = &is_[..is_.len() - 1];
    if update_shape != [tuples_shape, &shape[k..]].concat() {
        return None;
    }
    let tuples: usize = tuples_shape.iter().product();
    let prefixes: usize = shape[..k].iter().product();
    if prefixes > MAX_SCATTER_PREFIXES || tuples == 0 {
        return None;
    }
    let values: Vec<i64> = indices.to_f64_vec().iter().map(|&v| v as i64).collect();
    let mut source = vec![None; prefixes];
    for (t, tuple) in values.chunks_exact(k).enumerate() {
        let mut p = 0usize;
        for (&v, &d) in tuple.iter().zip(&shape) {
            let d = i64::try_from(d).ok()?;
            let at = if v < 0 { v + d } else { v };
            if !(0..d).contains(&at) {
                return None;
            }
            p = p * d as usize + at as usize;
        }
        source[p] = Some(t);
    }
    Some(Plan {
        node: node.name.clone(),
        x: *x,
        updates: *updates,
        y,
        slice: shape[k..].iter().product(),
        shape,
        tuples,
        source,
        k,
    })
}

/// Adds the gather (and, unless every prefix is written, the `Where`) of `p`; returns the
/// value that replaces the scatter's output.
fn rewrite(rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
    let tensor_error = |e: crate::tensor::TensorError| GraphError::Node {
        node: p.node.clone(),
        op_type: "ScatterND".into(),
        source: e.into(),
    };
    let src: Vec<i64> = p.source.iter().map(|s| s.unwrap_or(0) as i64).collect();
    let src = Tensor::new(vec![src.len()], src).map_err(tensor_error)?;
    let src = rw.add_constant("scatter_source", src);
    let rows = rw.add_shape(&[p.tuples, p.slice]);
    let full = rw.add_shape(&p.shape);
    let u = rw.add_op("Reshape", Attributes::new(), &[p.updates, rows])?;
    let mut axis = Attributes::new();
    axis.insert("axis", Attribute::Int(0));
    let picked = rw.add_op("Gather", axis, &[u, src])?;
    let gathered = rw.add_op("Reshape", Attributes::new(), &[picked, full])?;
    if p.source.iter().all(Option::is_some) {
        return Ok(gathered);
    }
    let mut mask_shape = p.shape[..p.k].to_vec();
    mask_shape.resize(p.shape.len(), 1);
    let mask: Vec<bool> = p.source.iter().map(Option::is_some).collect();
    let mask = Tensor::new(mask_shape, mask).map_err(tensor_error)?;
    let mask = rw.add_constant("scatter_written", mask);
    rw.add_op("Where", Attributes::new(), &[mask, gathered, p.x])
}
