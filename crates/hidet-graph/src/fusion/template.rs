//! Post-scheduling fusion of an anchored task into a template kernel of its anchor, for any
//! backend: the task's anchor operands become the template's prologues (or its parameters,
//! when read as they are stored) and the task's epilogue is written through the template's
//! output, by [`hidet_ir::fusion::fuse`].

use std::collections::HashMap;

use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, Var};
use hidet_ir::function::Function;
use hidet_ir::fusion::{fuse, Epilogue, Prologue};

use super::task::{redirect_reads, AnchorOperand, FusedTask};

/// How a template kernel takes the anchor of a task.
#[derive(Debug, Clone)]
pub struct TemplateParams<'a> {
    /// The template's parameter for each anchor operand, in the anchor's operand order.
    pub operands: &'a [Var],
    /// The template's output parameter.
    pub output: &'a Var,
    /// The rank of each operand (2, or 3 for a batched product).
    pub operand_rank: usize,
    /// Per anchor operand, the task input (`def.inputs` position) the template reads directly
    /// as that operand, bypassing its prologue (an operand stored in a layout the template
    /// reads in place); `None` (or a short slice) reads the operand as the task defines it.
    pub stored: &'a [Option<usize>],
}

/// `template` (a kernel computing `task`'s anchor from `params.operands` into
/// `params.output`) fused with the task: its parameters become the task's inputs then its
/// output (`task.def.inputs`, then `task.def.outputs[0]`), operands computed by the task
/// are inlined into the template's loads, and the task's epilogue is applied where the
/// template stores. `template` is returned with its parameters renamed when nothing needs
/// fusing.
///
/// Errors (the reason the backend refuses the task, which the graph layer then splits): an
/// operand without a prologue expression, several task outputs, an epilogue whose index map
/// is not invertible, or a refusal of [`fuse`].
pub fn fuse_into_template(
    task: &FusedTask,
    template: &Function,
    params: &TemplateParams<'_>,
) -> Result<Function, String> {
    let Some(anchor) = &task.anchor else {
        return Err("the task has no anchor".into());
    };
    let def = &task.def;
    // Task inputs read directly by the template become the template's own parameters.
    let mut kernel_params: Vec<Var> = def.inputs.clone();
    let mut direct: HashMap<Var, Var> = HashMap::new();
    let mut prologues = Vec::new();
    for (position, (operand, param)) in anchor.operands.iter().zip(params.operands).enumerate() {
        if let Some(&Some(i)) = params.stored.get(position) {
            if direct.contains_key(&def.inputs[i]) {
                return Err("both operands read the same stored input".into());
            }
            direct.insert(def.inputs[i].clone(), param.clone());
            kernel_params[i] = param.clone();
            continue;
        }
        match operand {
            Some(AnchorOperand::Input(i)) if !direct.contains_key(&def.inputs[*i]) => {
                direct.insert(def.inputs[*i].clone(), param.clone());
                kernel_params[*i] = param.clone();
            }
            Some(AnchorOperand::Input(i)) => {
                // Both operands are one tensor: the second reads it through a prologue.
                let axes: Vec<Var> = (0..params.operand_rank)
                    .map(|d| Var::new(format!("p{d}"), DataType::I32))
                    .collect();
                let value = def.inputs[*i].at(axes.iter().map(Var::expr));
                prologues.push((param.clone(), axes, value));
            }
            Some(AnchorOperand::Prologue { axes, value }) => {
                prologues.push((param.clone(), axes.clone(), value.clone()));
            }
            None => return Err("an anchor operand has no prologue expression".into()),
        }
    }
    let redirect = |e: &Expr| redirect_reads(e, &direct);
    let prologues: Vec<Prologue> = prologues
        .into_iter()
        .map(|(param, axes, value)| Prologue {
            param,
            axes,
            value: redirect(&value),
        })
        .collect();
    let [output] = def.outputs.as_slice() else {
        return Err("an anchored task with several outputs".into());
    };
    if def.inputs.contains(output) {
        return Err("the task output is one of its inputs".into());
    }
    // The task output is the anchor's own output unless epilogues follow it.
    let has_epilogue = anchor.def.outputs.first() != Some(output);
    let epilogue = match (&anchor.epilogue, has_epilogue) {
        (Some(e), true) => Some(Epilogue {
            param: params.output.clone(),
            axes: e.axes.clone(),
            stored: e.stored.clone(),
            output: output.clone(),
            indices: e.indices.clone(),
            value: redirect(&e.value),
        }),
        (None, true) => return Err("the epilogue's index map is not invertible".into()),
        _ => None,
    };
    kernel_params.push(if epilogue.is_none() {
        params.output.clone()
    } else {
        output.clone()
    });
    if prologues.is_empty() && epilogue.is_none() {
        let mut f = template.clone();
        f.params = kernel_params;
        return Ok(f);
    }
    fuse(template, kernel_params, &prologues, epilogue.as_ref()).map_err(|e| e.to_string())
}

/// `template`, a kernel whose stores to its parameter `output` are `task`'s anchor output
/// (such as the reduction kernel of a parallel-k product, which sums partial products that
/// a prologue-fused kernel wrote), with the task's epilogue applied where it stores. Its
/// parameters become `leading` (parameters of `template` kept as they are), then the task's
/// inputs (`task.def.inputs`), then its output (`task.def.outputs[0]`; `output` itself when
/// the task has no epilogue). The kernel need not read every task input.
///
/// Errors (the reason the backend refuses the task): several task outputs, an epilogue
/// whose index map is not invertible, a `leading` parameter that is a task input, or a
/// refusal of [`fuse`].
pub fn fuse_epilogue_into_template(
    task: &FusedTask,
    template: &Function,
    output: &Var,
    leading: &[Var],
) -> Result<Function, String> {
    let Some(anchor) = &task.anchor else {
        return Err("the task has no anchor".into());
    };
    let def = &task.def;
    let [task_output] = def.outputs.as_slice() else {
        return Err("an anchored task with several outputs".into());
    };
    if def.inputs.contains(task_output) {
        return Err("the task output is one of its inputs".into());
    }
    if leading
        .iter()
        .any(|v| def.inputs.contains(v) || v == output)
    {
        return Err("a leading parameter is a task input or the output".into());
    }
    let has_epilogue = anchor.def.outputs.first() != Some(task_output);
    let epilogue = match (&anchor.epilogue, has_epilogue) {
        (Some(e), true) => Some(Epilogue {
            param: output.clone(),
            axes: e.axes.clone(),
            stored: e.stored.clone(),
            output: task_output.clone(),
            indices: e.indices.clone(),
            value: e.value.clone(),
        }),
        (None, true) => return Err("the epilogue's index map is not invertible".into()),
        _ => None,
    };
    let mut params: Vec<Var> = leading.to_vec();
    params.extend(def.inputs.iter().cloned());
    params.push(if epilogue.is_some() {
        task_output.clone()
    } else {
        output.clone()
    });
    match epilogue {
        None => {
            let mut f = template.clone();
            f.params = params;
            Ok(f)
        }
        Some(e) => fuse(template, params, &[], Some(&e)).map_err(|e| e.to_string()),
    }
}

/// `task` without its epilogue: its output becomes its anchor's output. The kernel of the
/// anchor alone (prologues fused) is fused from it, when the epilogue is applied by another
/// kernel ([`fuse_epilogue_into_template`]).
pub fn without_epilogue(task: &FusedTask) -> FusedTask {
    let mut bare = task.clone();
    if let Some(anchor) = bare.anchor.as_mut() {
        if let Some(first) = anchor.def.outputs.first() {
            bare.def.outputs = vec![first.clone()];
        }
        anchor.epilogue = None;
    }
    bare
}
