//! Dead-code elimination: removes nodes whose outputs no graph output depends on, and the
//! tensors of initializers nothing reads any more.

use crate::graph::{Graph, GraphError};
use crate::passes::GraphPass;

/// Removes every node that does not contribute to a graph output, then drops initializers
/// no remaining node reads ([`Graph::prune_initializers`]).
pub struct DeadCodeElimination;

impl GraphPass for DeadCodeElimination {
    fn name(&self) -> &'static str {
        "dead-code-elimination"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut live_value = vec![false; graph.values().len()];
        for o in graph.outputs() {
            live_value[o.0] = true;
        }
        let mut live_node = vec![false; graph.nodes().len()];
        for (i, n) in graph.nodes().iter().enumerate().rev() {
            if n.outputs.iter().flatten().any(|o| live_value[o.0]) {
                live_node[i] = true;
                for v in n.inputs.iter().flatten() {
                    live_value[v.0] = true;
                }
            }
        }
        let nodes = graph
            .nodes()
            .iter()
            .zip(&live_node)
            .filter(|(_, l)| **l)
            .map(|(n, _)| n.clone())
            .collect();
        let mut graph = graph.with_nodes(nodes)?;
        graph.prune_initializers();
        Ok(graph)
    }
}
