//! Weights stored as quantized blocks decoded into dense constants, for the kernels that read
//! only dense ones.

use crate::graph::{Graph, GraphError, NodeId};
use crate::ops::dequantize_blocks::OP_TYPE as DEQUANTIZE_BLOCKS;
use crate::ops::HIDET_DOMAIN;
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// Replaces every `hidet::DequantizeBlocks` whose inputs are constants by an initializer
/// holding its dense `float32` output (the operator's own `eval`, so the values do not
/// change); one whose output nothing reads is left for dead-code elimination. A backend whose kernels read the stored blocks runs its own rewrite before this
/// pass; what that rewrite leaves is decoded here.
pub struct DecodeBlockWeights;

impl GraphPass for DecodeBlockWeights {
    fn name(&self) -> &'static str {
        "decode-block-weights"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let node = &rw.graph().nodes()[i];
            if node.domain != HIDET_DOMAIN || node.op_type != DEQUANTIZE_BLOCKS {
                continue;
            }
            let (Some(output), hint) = (node.outputs.first().copied().flatten(), node.name.clone())
            else {
                continue;
            };
            // Nothing reads it (an earlier rewrite read the blocks as stored): left for
            // dead-code elimination rather than decoded.
            let graph = rw.graph();
            if graph.value(output).users.is_empty() && !graph.outputs().contains(&output) {
                continue;
            }
            let inputs: Option<Vec<Option<&Tensor>>> = node
                .inputs
                .iter()
                .map(|v| v.and_then(|v| rw.constant(v)).map(Some))
                .collect();
            let Some(inputs) = inputs else { continue };
            let Some(dense) = node
                .op
                .eval(&inputs)
                .ok()
                .and_then(|o| o.into_iter().next())
            else {
                continue;
            };
            let c = rw.add_constant(&hint, dense);
            rw.replace(output, c);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}
