//! Common-subexpression elimination.

use std::collections::HashMap;

use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::passes::rewrite::{push_tensor, NodeKey, Rewriter};
use crate::passes::GraphPass;

/// Initializers up to this many elements are compared by content (larger ones, the model's
/// weights, are only equal to themselves).
pub const MAX_DEDUP_ELEMENTS: usize = 1 << 16;

/// Operators whose outputs differ between two evaluations on equal inputs.
const NONDETERMINISTIC: &[&str] = &[
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
];

/// Merges nodes that compute the same thing: equal domain, op type, opset, attributes
/// (compared structurally, tensors by content) and inputs (after earlier merges) → the first
/// one stays and readers of the others read its outputs. Small initializers with equal dtype,
/// shape and elements are merged first, so nodes reading equal constants merge too
/// ([deferred](crate::Tensor::is_deferred) ones excepted: they are not rebuilt to be compared).
///
/// Not merged: nodes holding subgraphs, random generators, and a node whose removal would
/// change which value a graph output names (see [`Rewriter::replaceable`]).
pub struct CommonSubexpressionElimination;

impl GraphPass for CommonSubexpressionElimination {
    fn name(&self) -> &'static str {
        "common-subexpression-elimination"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        // Only initializers sharing a dtype and shape with another can be equal: the others
        // are not serialized (hashing every small weight's elements took most of the pass).
        // Deferred ones (weights a backend keeps only in its own form) are not rebuilt to be
        // compared: at worst two equal weights stay apart.
        let mut by_shape: HashMap<(crate::DType, Vec<usize>), Vec<ValueId>> = HashMap::new();
        for (v, t) in rw.graph().initializers() {
            if t.numel() <= MAX_DEDUP_ELEMENTS
                && !t.is_deferred()
                && !rw.graph().outputs().contains(&v)
            {
                by_shape
                    .entry((t.dtype(), t.shape().to_vec()))
                    .or_default()
                    .push(v);
            }
        }
        let mut candidates: Vec<ValueId> = by_shape
            .into_values()
            .filter(|vs| vs.len() > 1)
            .flatten()
            .collect();
        candidates.sort_by_key(|v| v.0);
        let mut consts: HashMap<Vec<u8>, ValueId> = HashMap::new();
        let small: Vec<(ValueId, Vec<u8>)> = candidates
            .into_iter()
            .filter_map(|v| {
                let t = rw.graph().value(v).initializer.as_ref()?;
                let mut key = Vec::new();
                push_tensor(&mut key, t);
                Some((v, key))
            })
            .collect();
        for (v, key) in small {
            match consts.get(&key) {
                Some(&first) => rw.replace(v, first),
                None => {
                    consts.insert(key, v);
                }
            }
        }
        let mut seen: HashMap<NodeKey, NodeId> = HashMap::with_capacity(rw.graph().nodes().len());
        for i in 0..rw.graph().nodes().len() {
            let node = &rw.graph().nodes()[i];
            if NONDETERMINISTIC.contains(&node.op_type.as_str()) {
                continue;
            }
            let Some(key) = rw.node_key(NodeId(i)) else {
                continue;
            };
            let Some(&first) = seen.get(&key) else {
                seen.insert(key, NodeId(i));
                continue;
            };
            let pairs: Vec<(ValueId, Option<ValueId>)> = node
                .outputs
                .iter()
                .zip(&rw.graph().nodes()[first.0].outputs)
                .filter_map(|(o, f)| o.map(|o| (o, *f)))
                .collect();
            // Every output this node defines must exist on the first node too.
            let ok = pairs
                .iter()
                .all(|(o, f)| f.is_some_and(|f| rw.replaceable(*o, f)));
            if !ok {
                continue;
            }
            for (o, f) in pairs {
                if let Some(f) = f {
                    rw.replace(o, f);
                }
            }
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}
