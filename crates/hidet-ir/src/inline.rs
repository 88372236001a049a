//! Inlining compute definitions into a kernel body: the value of a node at an index, with
//! the nodes it reads expanded where they are read (grids inlined, reductions as serial
//! loops). Backends build their fallback schedules on it.

use std::collections::HashMap;

use crate::builder::FunctionBuilder;
use crate::compute::ComputeNode;
use crate::dtype::DataType;
use crate::expr::{Expr, ExprKind, Var};

/// The value of `node` at `index` (one index per axis of the node), with every read of a
/// node of `nodes` expanded in place: grids inlined, reductions emitted into `fb` as serial
/// loops accumulating into a fresh variable. The naive schedule of any compute definition,
/// and the reference its templates are checked against.
pub fn element(
    fb: &mut FunctionBuilder,
    node: &ComputeNode,
    index: &[Expr],
    nodes: &HashMap<Var, ComputeNode>,
) -> Expr {
    let mut env: HashMap<Var, Expr> = node
        .axes()
        .iter()
        .cloned()
        .zip(index.iter().cloned())
        .collect();
    match node {
        ComputeNode::Grid { value, .. } => expand(fb, &value.substitute(&env), nodes),
        ComputeNode::Reduce {
            reduce_axes,
            reduce_shape,
            kind,
            value,
            ..
        } => {
            let dtype = value.dtype().unwrap_or(DataType::F32);
            let acc = fb.var("acc", kind.identity(dtype));
            let extents: Vec<Expr> = reduce_shape.iter().map(|d| d.substitute(&env)).collect();
            reduce_nest(fb, &extents, &mut Vec::new(), &mut |fb, r| {
                for (a, x) in reduce_axes.iter().zip(r) {
                    env.insert(a.clone(), x.clone());
                }
                let v = expand(fb, &value.substitute(&env), nodes);
                fb.assign(&acc, kind.combine(acc.expr(), v));
            });
            acc.expr()
        }
    }
}

fn reduce_nest(
    fb: &mut FunctionBuilder,
    extents: &[Expr],
    prefix: &mut Vec<Expr>,
    body: &mut dyn FnMut(&mut FunctionBuilder, &[Expr]),
) {
    match extents.split_first() {
        None => body(fb, prefix),
        Some((e, rest)) => fb.for_range("r", e.clone(), |fb, r| {
            prefix.push(r);
            reduce_nest(fb, rest, prefix, body);
            prefix.pop();
        }),
    }
}

/// `e` with every read of a tensor of `nodes` replaced by its value at the read's indices
/// ([`element`]).
pub fn expand(fb: &mut FunctionBuilder, e: &Expr, nodes: &HashMap<Var, ComputeNode>) -> Expr {
    e.rewrite(&mut |x| match x.kind() {
        ExprKind::TensorElement { tensor, indices } => nodes
            .get(tensor)
            .map(|node| element(fb, node, indices, nodes)),
        _ => None,
    })
}
