//! Anchored tasks whose anchor is a rank-2 f32 matmul: the SIMT matmul template
//! ([`crate::templates::matmul_simt`]), with the task's prologues and epilogue fused into it
//! by [`hidet_ir::fusion::fuse`]. Batched matmuls are not covered yet (the template has no
//! batch axis): they go to the default scheduler.

use std::collections::HashMap;

use hidet_graph::fusion::{AnchorOperand, FusedTask};
use hidet_ir::compute::{tensor_dtype, ComputeDef, ComputeNode, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{BinaryOp, Expr, ExprKind, Var};
use hidet_ir::function::Function;
use hidet_ir::fusion::{fuse, Epilogue, Prologue};

use super::const_shape;
use crate::templates::matmul_simt::{self, MatmulSimtSchedule};

/// What the template path made of a task.
#[derive(Debug)]
pub enum TemplateOutcome {
    /// The anchor is not a rank-2 f32 matmul: use the default scheduler.
    NotApplicable,
    /// The template kernel, with the task's prologues and epilogue fused when it has any.
    Kernel(Box<Function>),
    /// The template cannot absorb the task's prologues or epilogue (why).
    Refused(String),
}

/// `(m, n, k)` when `def` is exactly `C[i, j] = Σ_r A[i, r] · B[r, j]` over f32 with inputs
/// `(A, B)` in that order.
pub fn matmul_shape(def: &ComputeDef) -> Option<(i64, i64, i64)> {
    let ([a, b], [(c, node)], [out]) = (
        def.inputs.as_slice(),
        def.nodes.as_slice(),
        def.outputs.as_slice(),
    ) else {
        return None;
    };
    let ComputeNode::Reduce {
        axes,
        reduce_axes,
        kind: ReduceKind::Sum,
        value,
        ..
    } = node
    else {
        return None;
    };
    let ([i, j], [r]) = (axes.as_slice(), reduce_axes.as_slice()) else {
        return None;
    };
    if c != out
        || [a, b, c]
            .iter()
            .any(|v| tensor_dtype(v) != Some(DataType::F32))
    {
        return None;
    }
    let (sa, sb, sc) = (
        const_shape(a).ok()?,
        const_shape(b).ok()?,
        const_shape(c).ok()?,
    );
    let ([m, k], [k2, n], [m2, n2]) = (sa.as_slice(), sb.as_slice(), sc.as_slice()) else {
        return None;
    };
    if k != k2 || m != m2 || n != n2 {
        return None;
    }
    let ExprKind::Binary(BinaryOp::Mul, x, y) = value.kind() else {
        return None;
    };
    let reads = |e: &Expr, t: &Var, p: &Var, q: &Var| match e.kind() {
        ExprKind::TensorElement { tensor, indices } => {
            tensor == t
                && indices.len() == 2
                && indices[0].as_var() == Some(p)
                && indices[1].as_var() == Some(q)
        }
        _ => false,
    };
    let ordered = reads(x, a, i, r) && reads(y, b, r, j);
    let swapped = reads(y, a, i, r) && reads(x, b, r, j);
    (ordered || swapped).then_some((*m, *n, *k))
}

/// The schedule for an `m × n` product: of the template's showcase schedules, the one that
/// computes the fewest padded output elements (`⌈m/BM⌉·BM · ⌈n/BN⌉·BN`), the larger block
/// tile on ties (fewer blocks re-reading the operands).
pub fn choose_schedule(m: i64, n: i64) -> Option<MatmulSimtSchedule> {
    matmul_simt::showcase_schedules()
        .into_iter()
        .min_by_key(|s| {
            let [bm, bn] = s.block_tile();
            let padded = (m + bm - 1) / bm * bm * ((n + bn - 1) / bn * bn);
            (padded, -(bm * bn))
        })
}

/// The template kernel of `task` named `task.name` (see [`TemplateOutcome`]). Its parameters
/// are the task's inputs then its output, as the graph backend's contract requires.
pub fn matmul_kernel(task: &FusedTask) -> TemplateOutcome {
    let Some(anchor) = &task.anchor else {
        return TemplateOutcome::NotApplicable;
    };
    let Some((m, n, k)) = matmul_shape(&anchor.def) else {
        return TemplateOutcome::NotApplicable;
    };
    let Some(schedule) = choose_schedule(m, n) else {
        return TemplateOutcome::NotApplicable;
    };
    let module = match matmul_simt::build(m, n, k, &schedule) {
        Ok(module) => module,
        Err(e) => return TemplateOutcome::Refused(format!("SIMT matmul template: {e}")),
    };
    let Some(mut template) = module.functions.into_iter().find(Function::is_cuda) else {
        return TemplateOutcome::Refused("the SIMT matmul module has no kernel".into());
    };
    template.name = task.name.clone();
    let def = &task.def;
    let [ta, tb, tc] = template.params.as_slice() else {
        return TemplateOutcome::Refused("the SIMT matmul template does not take (a, b, c)".into());
    };
    let (ta, tb, tc) = (ta.clone(), tb.clone(), tc.clone());
    // Task inputs read directly by the template become the template's own parameters.
    let mut params: Vec<Var> = def.inputs.clone();
    let mut direct: HashMap<Var, Var> = HashMap::new();
    let mut prologues = Vec::new();
    for (operand, param) in anchor.operands.iter().zip([&ta, &tb]) {
        match operand {
            Some(AnchorOperand::Input(i)) if !direct.contains_key(&def.inputs[*i]) => {
                direct.insert(def.inputs[*i].clone(), param.clone());
                params[*i] = param.clone();
            }
            Some(AnchorOperand::Input(i)) => {
                // Both operands are one tensor: the second reads it through a prologue.
                let axes: Vec<Var> = (0..2)
                    .map(|d| Var::new(format!("p{d}"), DataType::I32))
                    .collect();
                let value = def.inputs[*i].at(axes.iter().map(Var::expr));
                prologues.push((param.clone(), axes, value));
            }
            Some(AnchorOperand::Prologue { axes, value }) => {
                prologues.push((param.clone(), axes.clone(), value.clone()));
            }
            None => {
                return TemplateOutcome::Refused(
                    "an anchor operand has no prologue expression".into(),
                )
            }
        }
    }
    let redirect = |e: &Expr| hidet_graph::fusion::task::redirect_reads(e, &direct);
    let prologues: Vec<Prologue> = prologues
        .into_iter()
        .map(|(param, axes, value)| Prologue {
            param,
            axes,
            value: redirect(&value),
        })
        .collect();
    let [output] = def.outputs.as_slice() else {
        return TemplateOutcome::Refused("an anchored task with several outputs".into());
    };
    if def.inputs.contains(output) {
        return TemplateOutcome::Refused("the task output is one of its inputs".into());
    }
    // The task output is the anchor's own output unless epilogues follow it.
    let has_epilogue = anchor.def.outputs.first() != Some(output);
    let epilogue = match (&anchor.epilogue, has_epilogue) {
        (Some(e), true) => Some(Epilogue {
            param: tc.clone(),
            axes: e.axes.clone(),
            stored: e.stored.clone(),
            output: output.clone(),
            indices: e.indices.clone(),
            value: redirect(&e.value),
        }),
        (None, true) => {
            return TemplateOutcome::Refused("the epilogue's index map is not invertible".into())
        }
        _ => None,
    };
    params.push(if epilogue.is_none() {
        tc.clone()
    } else {
        output.clone()
    });
    if prologues.is_empty() && epilogue.is_none() {
        template.params = params;
        return TemplateOutcome::Kernel(Box::new(template));
    }
    match fuse(&template, params, &prologues, epilogue.as_ref()) {
        Ok(f) => TemplateOutcome::Kernel(Box::new(f)),
        Err(e) => TemplateOutcome::Refused(e.to_string()),
    }
}
