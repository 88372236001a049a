//! Classifying a (grid-inlined) compute definition into loop nests the
//! scheduler knows how to emit.

use super::error::ScheduleError;
use hidet_ir::compute::{reads, tensor_shape, ComputeDef, ComputeNode};
use hidet_ir::expr::{Expr, Var};
use std::collections::HashSet;

/// How each output of a definition is computed.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Injective nests: each a list of output positions of one shape,
    /// computed in one loop nest.
    pub injective: Vec<Vec<usize>>,
    /// The reductions and the outputs computed per reduction row.
    pub rowwise: Option<RowPlan>,
}

/// Every reduce node has the output shape `domain`; the kernel runs one
/// parallel loop over the points of `domain` (the rows), computing every
/// reduction of a row into registers, then every output of the row.
#[derive(Debug)]
pub(crate) struct RowPlan {
    pub domain: Vec<Expr>,
    /// Indices into `def.nodes` of the reduce nodes, in definition order.
    pub reduces: Vec<usize>,
    pub outputs: Vec<RowOutput>,
}

/// An output position computed inside the row loop.
#[derive(Debug)]
pub(crate) struct RowOutput {
    pub position: usize,
    pub node: usize,
    /// For a grid node: `binding[d]` is the grid axis equal to the row's
    /// index in domain dimension `d` (`None` for dimensions of extent 1).
    /// The grid's other axes are looped over inside the row. Empty for a
    /// reduce node, stored at the row's index.
    pub binding: Vec<Option<usize>>,
}

fn same_shape(a: &[Expr], b: &[Expr]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

impl Plan {
    /// The plan of `def`, which must already have its grids inlined (every
    /// remaining grid is an output, every read names an input or a reduce
    /// node).
    pub fn of(def: &ComputeDef) -> Result<Plan, ScheduleError> {
        let reduce_vars: HashSet<&Var> = def
            .nodes
            .iter()
            .filter(|(_, n)| n.is_reduce())
            .map(|(v, _)| v)
            .collect();
        let reduces: Vec<usize> = (0..def.nodes.len())
            .filter(|&i| def.nodes[i].1.is_reduce())
            .collect();
        let domain = reduces
            .first()
            .map(|&i| tensor_shape(&def.nodes[i].0))
            .unwrap_or_default();
        for &i in &reduces {
            let (var, node) = &def.nodes[i];
            if !same_shape(&tensor_shape(var), &domain) {
                return Err(ScheduleError::unsupported(format!(
                    "reductions of different output shapes (`{}` and `{}`); split the definition",
                    def.nodes[reduces[0]].0.name(),
                    var.name()
                )));
            }
            check_row_reads(node, var, &reduce_vars, &domain)?;
        }

        let mut groups: Vec<(Vec<Expr>, Vec<usize>)> = Vec::new();
        let mut row_outputs = Vec::new();
        for (position, out) in def.outputs.iter().enumerate() {
            let node_index = def.nodes.iter().position(|(v, _)| v == out);
            let row_reading = node_index.and_then(|i| {
                let node = &def.nodes[i].1;
                let reads_reduce = reads(node.value())
                    .iter()
                    .any(|(t, _)| reduce_vars.contains(t));
                (node.is_reduce() || reads_reduce).then_some(i)
            });
            match row_reading {
                Some(i) => {
                    let binding = match &def.nodes[i].1 {
                        ComputeNode::Reduce { .. } => Vec::new(),
                        ComputeNode::Grid { axes, value } => {
                            grid_binding(out, axes, value, &reduce_vars, &domain)?
                        }
                    };
                    row_outputs.push(RowOutput {
                        position,
                        node: i,
                        binding,
                    });
                }
                None => {
                    let shape = tensor_shape(out);
                    match groups.iter_mut().find(|(s, _)| same_shape(s, &shape)) {
                        Some((_, members)) => members.push(position),
                        None => groups.push((shape, vec![position])),
                    }
                }
            }
        }
        let rowwise = (!reduces.is_empty()).then_some(RowPlan {
            domain,
            reduces,
            outputs: row_outputs,
        });
        Ok(Plan {
            injective: groups.into_iter().map(|(_, m)| m).collect(),
            rowwise,
        })
    }
}

/// A reduce node may read earlier reduce nodes only at its own row: index
/// `d` equal to its axis `d` (or anything in a dimension of extent 1).
fn check_row_reads(
    node: &ComputeNode,
    var: &Var,
    reduce_vars: &HashSet<&Var>,
    domain: &[Expr],
) -> Result<(), ScheduleError> {
    let axes = node.axes();
    for (tensor, indices) in reads(node.value()) {
        if !reduce_vars.contains(&tensor) {
            continue;
        }
        let own_row = indices
            .iter()
            .enumerate()
            .all(|(d, idx)| domain[d].as_int() == Some(1) || idx.as_var() == Some(&axes[d]));
        if !own_row {
            return Err(ScheduleError::unsupported(format!(
                "reduction `{}` reads reduction `{}` outside its own row",
                var.name(),
                tensor.name()
            )));
        }
    }
    Ok(())
}

/// Which grid axis carries each domain dimension, for a grid that reads
/// reduce nodes only at its own row (see [`RowOutput::binding`]).
fn grid_binding(
    out: &Var,
    axes: &[Var],
    value: &Expr,
    reduce_vars: &HashSet<&Var>,
    domain: &[Expr],
) -> Result<Vec<Option<usize>>, ScheduleError> {
    let shape = tensor_shape(out);
    let mut binding: Vec<Option<usize>> = vec![None; domain.len()];
    let refuse = |why: &str| {
        Err(ScheduleError::unsupported(format!(
            "output `{}` {why}",
            out.name()
        )))
    };
    for (tensor, indices) in reads(value) {
        if !reduce_vars.contains(&tensor) {
            continue;
        }
        for (d, idx) in indices.iter().enumerate() {
            if domain[d].as_int() == Some(1) {
                continue;
            }
            let Some(axis) = idx.as_var().and_then(|v| axes.iter().position(|a| a == v)) else {
                return refuse(&format!(
                    "reads reduction `{}` at an index that is not one of its axes",
                    tensor.name()
                ));
            };
            match binding[d] {
                Some(prev) if prev != axis => {
                    return refuse("reads a reduction at two different rows")
                }
                _ => binding[d] = Some(axis),
            }
        }
    }
    for (d, b) in binding.iter().enumerate() {
        match b {
            None if domain[d].as_int() != Some(1) => {
                return refuse("does not read its reductions at one row per element")
            }
            Some(axis) if shape[*axis] != domain[d] => {
                return refuse("binds a reduction row to an axis of another extent")
            }
            _ => {}
        }
    }
    let mut bound: Vec<usize> = binding.iter().flatten().copied().collect();
    bound.sort_unstable();
    if bound.windows(2).any(|w| w[0] == w[1]) {
        return refuse("binds one axis to two reduction dimensions");
    }
    Ok(binding)
}
