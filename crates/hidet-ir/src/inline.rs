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
/// ([`element`]). Reads of one reduction at equal indices within `e` share one serial loop (an
/// activation that reads its input twice, `x · relu6(x + 3) / 6`, after a convolution).
pub fn expand(fb: &mut FunctionBuilder, e: &Expr, nodes: &HashMap<Var, ComputeNode>) -> Expr {
    let mut reduced: HashMap<String, Expr> = HashMap::new();
    e.rewrite(&mut |x| match x.kind() {
        ExprKind::TensorElement { tensor, indices } => {
            let node = nodes.get(tensor)?;
            if !matches!(node, ComputeNode::Reduce { .. }) {
                return Some(element(fb, node, indices, nodes));
            }
            let key = format!("{tensor:?}{indices:?}");
            if let Some(acc) = reduced.get(&key) {
                return Some(acc.clone());
            }
            let acc = element(fb, node, indices, nodes);
            reduced.insert(key, acc.clone());
            Some(acc)
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::{grid, reduce, tensor_input, ReduceKind};
    use crate::stmt::Stmt;

    /// `y[i] = s[i]·s[i] + s[i + 1]` with `s[i] = Σ_r x[i, r]`: the two reads of `s[i]` share
    /// one loop, the read of `s[i + 1]` has its own.
    #[test]
    fn equal_reads_of_a_reduction_share_one_loop() {
        let x = tensor_input("x", DataType::F32, [4, 6]);
        let (s, s_node) = reduce("s", DataType::F32, [5], [6], ReduceKind::Sum, |i, r| {
            x.at([i[0].clone(), r[0].clone()])
        });
        let (_, y_node) = grid("y", DataType::F32, [4], |i| {
            let si = s.at([i[0].clone()]);
            si.clone() * si + s.at([i[0].clone() + 1])
        });
        let nodes: HashMap<Var, ComputeNode> = [(s.clone(), s_node)].into_iter().collect();
        let mut fb = FunctionBuilder::cpu_kernel("k");
        let index = [Expr::int(2)];
        let _value = element(&mut fb, &y_node, &index, &nodes);
        let mut loops = 0;
        fb.finish().body.visit(&mut |st| {
            if let Stmt::For { .. } = st {
                loops += 1;
            }
        });
        assert_eq!(loops, 2);
    }
}
