//! Constant folding: nodes computable before the graph runs become initializers.

use std::collections::HashMap;

use crate::graph::{Graph, GraphError, Node, NodeId, ValueId};
use crate::passes::rewrite::{holds_subgraph, Rewriter};
use crate::passes::GraphPass;
use crate::tensor::{checked_numel, Tensor};

/// Largest folded tensor, in elements (16 Mi: 64 MiB of f32). A node whose output would be
/// larger (typically an `Expand`, `Tile` or `ConstantOfShape` of a small constant) stays in
/// the graph: materializing it would trade a cheap broadcast for a large weight.
pub const MAX_FOLDED_ELEMENTS: usize = 16 << 20;

/// Operators that draw random numbers: never folded.
const NONDETERMINISTIC: &[&str] = &[
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
];

/// Replaces every node whose inputs are all constants (initializers, `Constant` outputs,
/// earlier folded values) by initializers holding its outputs, computed with the operator's
/// reference `eval` (so folding changes no value). `Shape` and `Size` of a value with a fully
/// static shape fold too, which turns the shape arithmetic of static-shape exports
/// (Shape → Gather → Unsqueeze → Concat → Reshape) into constant shapes.
///
/// Not folded: nodes holding subgraphs, random generators, nodes whose evaluation fails
/// (left for the runtime to report), outputs over [`MAX_FOLDED_ELEMENTS`], and a `Constant`
/// that directly defines a graph output (nothing to gain).
pub struct ConstantFolding;

impl GraphPass for ConstantFolding {
    fn name(&self) -> &'static str {
        "constant-folding"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        let mut known: HashMap<ValueId, Tensor> = rw
            .graph()
            .initializers()
            .map(|(v, t)| (v, t.clone()))
            .collect();
        for i in 0..rw.graph().nodes().len() {
            let node = &rw.graph().nodes()[i];
            let Some(outs) = fold_node(rw.graph(), node, &known) else {
                continue;
            };
            let defs: Vec<Option<ValueId>> = node.outputs.clone();
            let hint = node.name.clone();
            for (slot, v) in defs.iter().enumerate() {
                let (Some(v), Some(t)) = (v, outs.get(slot)) else {
                    continue;
                };
                let c = rw.add_constant(&hint, t.clone());
                rw.replace(*v, c);
                known.insert(*v, t.clone());
            }
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// The outputs of `node` if it can be folded.
fn fold_node(graph: &Graph, node: &Node, known: &HashMap<ValueId, Tensor>) -> Option<Vec<Tensor>> {
    if NONDETERMINISTIC.contains(&node.op_type.as_str())
        || holds_subgraph(&node.attrs)
        || !node.domain.is_empty()
    {
        return None;
    }
    let defines_output = node
        .outputs
        .iter()
        .flatten()
        .any(|o| graph.outputs().contains(o));
    if node.op_type == "Constant" && defines_output {
        return None;
    }
    // Outputs whose static type is already too large are not evaluated at all.
    for o in node.outputs.iter().flatten() {
        let too_big = graph
            .value(*o)
            .ty
            .fixed_shape()
            .is_some_and(|s| checked_numel(&s).is_none_or(|n| n > MAX_FOLDED_ELEMENTS));
        if too_big {
            return None;
        }
    }
    let outs = match node.op_type.as_str() {
        "Shape" | "Size" if !known.contains_key(&node.inputs.first().copied().flatten()?) => {
            fold_shape_of(graph, node)?
        }
        _ => {
            let mut args: Vec<Option<&Tensor>> = Vec::with_capacity(node.inputs.len());
            for i in &node.inputs {
                match i {
                    None => args.push(None),
                    Some(v) => args.push(Some(known.get(v)?)),
                }
            }
            node.op.eval(&args).ok()?
        }
    };
    let fits = outs.iter().all(|t| t.numel() <= MAX_FOLDED_ELEMENTS);
    let complete = node
        .outputs
        .iter()
        .enumerate()
        .all(|(slot, o)| o.is_none() || slot < outs.len());
    (fits && complete).then_some(outs)
}

/// `Shape` (with `start`/`end` from opset 15) or `Size` of a value whose shape is fully
/// static, computed from its type.
fn fold_shape_of(graph: &Graph, node: &Node) -> Option<Vec<Tensor>> {
    let x = node.inputs.first().copied().flatten()?;
    let shape = graph.value(x).ty.fixed_shape()?;
    shape_of(&node.op_type, node.opset, &node.attrs, &shape)
}

/// The output of a `Shape` (opset `opset`, `attrs` holding its `start`/`end` from opset 15)
/// or `Size` node reading a value of static shape `shape`; `None` for another operator.
pub(crate) fn shape_of(
    op_type: &str,
    opset: i64,
    attrs: &crate::attribute::Attributes,
    shape: &[usize],
) -> Option<Vec<Tensor>> {
    let rank = shape.len() as i64;
    match op_type {
        "Size" => Some(vec![Tensor::scalar(checked_numel(shape)? as i64)]),
        "Shape" => {
            let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
            let (start, end) = if opset >= 15 {
                let s = attrs.int("start").ok()?.copied().unwrap_or(0);
                let e = attrs.int("end").ok()?.copied().unwrap_or(rank);
                (clamp(s), clamp(e))
            } else {
                (0, shape.len())
            };
            let dims: Vec<i64> = shape[start..end.max(start)]
                .iter()
                .map(|&d| d as i64)
                .collect();
            Some(vec![Tensor::new(vec![dims.len()], dims).ok()?])
        }
        _ => None,
    }
}
