//! Values a row's sum folds, kept in an output that needs them again.
//!
//! Softmax sums `exp(x - max)` over a row and then writes `exp(x - max) / sum`: computed
//! twice, the exponential is most of the kernel's work. When an output of the row holds, at
//! each point of its one looped axis, an expression containing the very value the sum folds
//! at that point, the fold stores each value into the output as it goes, and the output's
//! pass reads it back in place of the expression (the row is still in L1).

use super::params::Kernel;
use super::plan::{RowOutput, RowPlan};
use super::vectorize::is_contiguous_read;
use hidet_ir::compute::{tensor_dtype, tensor_shape, ComputeDef, ComputeNode, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, ExprKind, Var};
use std::collections::HashMap;

/// Where a sum's folded values go: output parameter `param`, at the output index of one
/// row with its looped axis `axis` set to the reduction's position.
pub(crate) struct Stash {
    /// Position of the output in [`RowPlan::outputs`].
    pub output: usize,
    pub param: Var,
    index: Vec<Expr>,
    axis: usize,
    value: Expr,
    reduce_axis: Var,
    env: HashMap<Var, Expr>,
}

impl Stash {
    /// The output index holding the value folded at position `j` of the row.
    pub fn index(&self, j: Expr) -> Vec<Expr> {
        let mut index = self.index.clone();
        index[self.axis] = j;
        index
    }

    /// The folded value at position `j`, as a kernel expression (`accs`: the registers of
    /// the row's earlier reductions).
    pub fn value_at(&self, kernel: &Kernel, accs: &HashMap<Var, Expr>, j: Expr) -> Expr {
        let mut env = self.env.clone();
        env.insert(self.reduce_axis.clone(), j);
        kernel.rename(&self.value, &env, accs)
    }

    /// `value` (an output's kernel expression at position `j` of its looped axis) with
    /// every occurrence of the folded value replaced by a read of the stash.
    pub fn reuse(
        &self,
        kernel: &Kernel,
        accs: &HashMap<Var, Expr>,
        j: &Expr,
        value: &Expr,
    ) -> Expr {
        let folded = self.value_at(kernel, accs, j.clone());
        let stored = self.param.at(self.index(j.clone()));
        value.rewrite(&mut |x| (*x == folded).then(|| stored.clone()))
    }
}

/// The output index of `out` for `row`, with `None` at its looped axes (axes of extent 1
/// are 0), as `write_output` builds it.
pub(crate) fn row_index(
    kernel: &Kernel,
    shape: &[Expr],
    out: &RowOutput,
    row: &[Expr],
) -> Vec<Option<Expr>> {
    let mut index: Vec<Option<Expr>> = shape
        .iter()
        .map(|d| (kernel.extent(d).as_int() == Some(1)).then(|| Expr::int(0)))
        .collect();
    for (d, b) in out.binding.iter().enumerate() {
        if let Some(axis) = b {
            index[*axis] = Some(row[d].clone());
        }
    }
    index
}

/// The stash of reduce node `node` (named `var`) of `plan` for `row`, if it has one: an
/// `f32` sum over one axis whose folded value calls a math function (an exponential, say;
/// a plain read is not worth a store), and an `f32` grid output looped over its innermost
/// axis alone, of the same extent and contiguous along it, whose value contains the folded
/// value at each point.
pub(crate) fn find(
    kernel: &Kernel,
    def: &ComputeDef,
    plan: &RowPlan,
    (var, node): (&Var, &ComputeNode),
    row: &[Expr],
    accs: &HashMap<Var, Expr>,
) -> Option<Stash> {
    let ComputeNode::Reduce {
        axes,
        reduce_axes,
        reduce_shape,
        kind: ReduceKind::Sum,
        value,
    } = node
    else {
        return None;
    };
    if reduce_axes.len() != 1 || tensor_dtype(var) != Some(DataType::F32) {
        return None;
    }
    let extent = kernel.extent(&reduce_shape[0]);
    let env: HashMap<Var, Expr> = axes.iter().cloned().zip(row.iter().cloned()).collect();
    let probe = Var::new("probe", DataType::I32);
    let stash = Stash {
        output: 0,
        param: var.clone(),
        index: Vec::new(),
        axis: 0,
        value: value.clone(),
        reduce_axis: reduce_axes[0].clone(),
        env,
    };
    let folded = stash.value_at(kernel, accs, probe.expr());
    let mut calls_math = false;
    folded.visit(&mut |x| calls_math |= matches!(x.kind(), ExprKind::Math(..)));
    if !calls_math {
        return None;
    }
    plan.outputs.iter().enumerate().find_map(|(n, out)| {
        let (
            ovar,
            ComputeNode::Grid {
                axes: oaxes,
                value: ovalue,
            },
        ) = &def.nodes[out.node]
        else {
            return None;
        };
        let shape = tensor_shape(ovar);
        let index = row_index(kernel, &shape, out, row);
        let looped: Vec<usize> = (0..index.len()).filter(|&a| index[a].is_none()).collect();
        let axis = *looped.last()?;
        if tensor_dtype(ovar) != Some(DataType::F32)
            || looped.len() != 1
            || axis + 1 != index.len()
            || kernel.extent(&shape[axis]) != extent
        {
            return None;
        }
        let mut at: Vec<Expr> = index
            .into_iter()
            .map(|e| e.unwrap_or_else(|| Expr::int(0)))
            .collect();
        at[axis] = probe.expr();
        let oenv: HashMap<Var, Expr> = oaxes.iter().cloned().zip(at.iter().cloned()).collect();
        let mut contains = false;
        kernel
            .rename(ovalue, &oenv, accs)
            .visit(&mut |x| contains |= *x == folded);
        let param = &kernel.outputs[out.position];
        // The fold stores whole vectors at consecutive positions.
        let contiguous = is_contiguous_read(param, &at, &probe);
        (contains && contiguous).then(|| Stash {
            output: n,
            param: param.clone(),
            index: at,
            axis,
            value: stash.value.clone(),
            reduce_axis: stash.reduce_axis.clone(),
            env: stash.env.clone(),
        })
    })
}
