//! Graph rewriting: the [`GraphPass`] trait and the ordered list of default passes.
//!
//! A pass consumes a graph and returns the rewritten graph. Passes rewrite by building a new
//! node list and calling [`Graph::with_nodes`], which re-checks topological order and
//! recomputes use lists, so no pass can leave the graph inconsistent.

mod dce;

pub use dce::DeadCodeElimination;

use crate::graph::{Graph, GraphError};

/// A graph-to-graph rewrite. Must preserve the values of the graph outputs.
pub trait GraphPass {
    /// Short name for logs.
    fn name(&self) -> &'static str;
    /// Rewrites `graph`.
    fn run(&self, graph: Graph) -> Result<Graph, GraphError>;
}

/// The default pass pipeline, in order. New passes are added here.
pub fn default_passes() -> Vec<Box<dyn GraphPass>> {
    vec![Box::new(DeadCodeElimination)]
}

/// Runs `passes` in order.
pub fn run_passes(mut graph: Graph, passes: &[Box<dyn GraphPass>]) -> Result<Graph, GraphError> {
    for p in passes {
        graph = p.run(graph)?;
    }
    Ok(graph)
}
