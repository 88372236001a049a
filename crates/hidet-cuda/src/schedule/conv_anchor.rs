//! Anchored tasks whose anchor is an f32 2-D convolution: implicit GEMM through the SIMT
//! matmul template, one batch entry per group:
//!
//! `C[g, i, j] = Σ_r W[g, i, r] · X[g, r, j]` with `i` the output channel in the group,
//! `r = (c, kh, kw)` flattened and `j = (n, oh, ow)` flattened. `W` is a prologue reading the
//! weight, `X` (im2col) a prologue reading the input through the convolution's own padded,
//! strided window read (the definition's reduction value with the weight read replaced by 1),
//! and the epilogue writes `C[g, i, j]` to `out[n, g·O/G + i, oh, ow]` with the bias and the
//! task's epilogue (activation, residual) applied. All three are fused by
//! [`hidet_ir::fusion::fuse`]; nothing is materialized. Convolutions with fewer than
//! [`MIN_CHANNELS_PER_GROUP`] output channels per group (depthwise) are left to the default
//! scheduler.

use std::collections::HashMap;

use hidet_graph::fusion::{AnchorOperand, FusedTask};
use hidet_ir::compute::{tensor_dtype, ComputeNode, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, ExprKind, Var};
use hidet_ir::function::Function;
use hidet_ir::fusion::{fuse, Epilogue, Prologue};

use super::const_shape;
use super::matmul_anchor::{
    heuristic_choice, workspace_elements, MatmulShape, ParallelKKernels, SimtChoice,
    TemplateOutcome,
};
use crate::schedule::GpuTarget;
use crate::templates::matmul_simt::{self, Batch, KSplit};

/// Output channels per group below which a convolution is left to the default scheduler.
pub const MIN_CHANNELS_PER_GROUP: i64 = 8;

/// The task-level expression of anchor operand `slot` at `indices`.
fn operand_at(task: &FusedTask, slot: usize, indices: Vec<Expr>) -> Option<Expr> {
    let anchor = task.anchor.as_ref()?;
    match anchor.operands.get(slot)?.as_ref()? {
        AnchorOperand::Input(i) => Some(task.def.inputs.get(*i)?.at(indices)),
        AnchorOperand::Prologue { axes, value } => {
            let map: HashMap<Var, Expr> = axes.iter().cloned().zip(indices).collect();
            Some(value.substitute(&map))
        }
    }
}

/// `e` with every read of `tensor` replaced by `f(indices)` (`None` from `f` fails).
fn replace_reads(
    e: &Expr,
    tensor: &Var,
    f: &mut dyn FnMut(&[Expr]) -> Option<Expr>,
) -> Option<Expr> {
    let mut failed = false;
    let out = e.rewrite(&mut |x| match x.kind() {
        ExprKind::TensorElement { tensor: t, indices } if t == tensor => {
            let r = f(indices);
            failed |= r.is_none();
            Some(r.unwrap_or_else(|| x.clone()))
        }
        _ => None,
    });
    (!failed).then_some(out)
}

/// The implicit-GEMM kernel of `task` (see the module docs) with the heuristic schedule for
/// `target`, or [`TemplateOutcome::NotApplicable`] when the anchor is not an f32 2-D
/// convolution of the expected form. Few output tiles on `target` make it a parallel-k
/// product ([`crate::schedule::matmul_anchor`]): the im2col and weight prologues go on the
/// partial products' kernel, the bias and the task's epilogue on the reduction kernel.
pub fn conv_kernel(task: &FusedTask, target: &GpuTarget) -> TemplateOutcome {
    let Some(gemm) = ConvGemm::of(task) else {
        return TemplateOutcome::NotApplicable;
    };
    let Some(choice) = heuristic_choice(&gemm.shape(), target) else {
        return TemplateOutcome::NotApplicable;
    };
    conv_kernel_with(task, &choice)
}

/// [`conv_kernel`] with `choice` (a tuned schedule and its parallel-k parts) instead of the
/// heuristic's.
pub fn conv_kernel_with(task: &FusedTask, choice: &SimtChoice) -> TemplateOutcome {
    let Some(gemm) = ConvGemm::of(task) else {
        return TemplateOutcome::NotApplicable;
    };
    match build(task, &gemm, choice) {
        Ok(outcome) => outcome,
        Err(reason) => TemplateOutcome::Refused(reason),
    }
}

/// The implicit GEMM of `task`'s convolution anchor, one batch entry per group
/// (`batch = a_batch = b_batch = groups`), when it is an f32 2-D convolution the template
/// takes.
pub fn conv_shape(task: &FusedTask) -> Option<MatmulShape> {
    ConvGemm::of(task).map(|g| g.shape())
}

/// An f32 2-D convolution anchor read as an implicit GEMM (see the module docs).
struct ConvGemm<'a> {
    adef: &'a hidet_ir::compute::ComputeDef,
    vx: &'a Var,
    vw: &'a Var,
    acc: &'a Var,
    axes: &'a [Var],
    reduce_axes: &'a [Var],
    value: &'a Expr,
    groups: i64,
    opg: i64,
    kh: i64,
    kw: i64,
    oh: i64,
    ow: i64,
    m: i64,
    n: i64,
    k: i64,
}

impl<'a> ConvGemm<'a> {
    fn of(task: &'a FusedTask) -> Option<ConvGemm<'a>> {
        let anchor = task.anchor.as_ref()?;
        let adef = &anchor.def;
        if anchor.op_type != "Conv" || adef.inputs.len() < 2 {
            return None;
        }
        let (vx, vw) = (&adef.inputs[0], &adef.inputs[1]);
        let (acc, node) = adef.nodes.first().map(|(v, n)| (v, n))?;
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
        let f32_only = [vx, vw, acc]
            .into_iter()
            .chain(adef.outputs.iter())
            .all(|v| tensor_dtype(v) == Some(DataType::F32));
        if axes.len() != 4 || reduce_axes.len() != 3 || adef.nodes.len() > 2 || !f32_only {
            return None;
        }
        let (Ok(xs), Ok(ws), Ok(os)) = (const_shape(vx), const_shape(vw), const_shape(acc)) else {
            return None;
        };
        let ([_, c, _, _], [o, cpg, kh, kw], [nb, o2, oh, ow]) =
            (xs.as_slice(), ws.as_slice(), os.as_slice())
        else {
            return None;
        };
        let (c, o, cpg, kh, kw, nb, oh, ow) = (*c, *o, *cpg, *kh, *kw, *nb, *oh, *ow);
        if o != *o2 || cpg <= 0 || c % cpg != 0 || o % (c / cpg).max(1) != 0 {
            return None;
        }
        let groups = c / cpg;
        let opg = o / groups;
        // Few output channels per group (a depthwise convolution has one): a GEMM of so few
        // rows would pad each tile to mostly idle rows; the default scheduler computes one
        // output element per thread instead.
        if opg < MIN_CHANNELS_PER_GROUP {
            return None;
        }
        Some(ConvGemm {
            adef,
            vx,
            vw,
            acc,
            axes,
            reduce_axes,
            value,
            groups,
            opg,
            kh,
            kw,
            oh,
            ow,
            m: opg,
            n: nb * oh * ow,
            k: cpg * kh * kw,
        })
    }

    fn shape(&self) -> MatmulShape {
        MatmulShape {
            batch: Some(Batch {
                batch: self.groups,
                a_batch: self.groups,
                b_batch: self.groups,
            }),
            m: self.m,
            n: self.n,
            k: self.k,
        }
    }
}

fn build(
    task: &FusedTask,
    gemm: &ConvGemm<'_>,
    choice: &SimtChoice,
) -> Result<TemplateOutcome, String> {
    let anchor = task.anchor.as_ref().ok_or("the task has no anchor")?;
    let ConvGemm {
        adef,
        vx,
        vw,
        acc,
        axes,
        reduce_axes,
        value,
        groups,
        opg,
        kh,
        kw,
        oh,
        ow,
        m,
        n,
        k,
    } = *gemm;
    let schedule = choice.schedule;
    let batch = Batch {
        batch: groups,
        a_batch: groups,
        b_batch: groups,
    };
    // The parts the template makes of the choice's (every part multiplies some k-tile).
    let parts = KSplit::new(k, schedule.block_k, choice.k_parts).parts;
    let module = matmul_simt::build_parallel_k(Some(batch), m, n, k, &schedule, parts)
        .map_err(|e| format!("SIMT matmul template: {e}"))?;
    let mut template = module
        .functions
        .into_iter()
        .find(Function::is_cuda)
        .ok_or("the SIMT matmul module has no kernel")?;
    template.name = task.name.clone();
    let [ta, tb, tc] = template.params.as_slice() else {
        return Err("the SIMT matmul template does not take (a, b, c)".into());
    };
    let (ta, tb, tc) = (ta.clone(), tb.clone(), tc.clone());

    let i32v = |name: &str| Var::new(name, DataType::I32);
    // The reduction index r = (c, kh, kw) and output index j = (n, oh, ow), unflattened.
    let unflatten_r = |r: &Expr| -> [Expr; 3] {
        [
            r / Expr::int(kh * kw),
            (r / Expr::int(kw)) % Expr::int(kh),
            r % Expr::int(kw),
        ]
    };
    let unflatten_j = |j: &Expr| -> [Expr; 3] {
        [
            j / Expr::int(oh * ow),
            (j / Expr::int(ow)) % Expr::int(oh),
            j % Expr::int(ow),
        ]
    };
    let conv_env = |g: &Expr, i: &Expr, r: &Expr, j: &Expr| -> HashMap<Var, Expr> {
        let [cc, khh, kww] = unflatten_r(r);
        let [nn, ohh, oww] = unflatten_j(j);
        let channel = g * opg + i.clone();
        axes.iter()
            .cloned()
            .zip([nn, channel, ohh, oww])
            .chain(reduce_axes.iter().cloned().zip([cc, khh, kww]))
            .collect()
    };

    // A[g, i, r]: the weight, read where the definition reads it.
    let (pa_g, pa_i, pa_r) = (i32v("g"), i32v("i"), i32v("r"));
    let mut w_index = None;
    value.visit(&mut |e| {
        if let ExprKind::TensorElement { tensor, indices } = e.kind() {
            if tensor == vw && w_index.is_none() {
                w_index = Some(indices.clone());
            }
        }
    });
    let w_index = w_index.ok_or("the convolution does not read its weight")?;
    let env = conv_env(&pa_g.expr(), &pa_i.expr(), &pa_r.expr(), &Expr::int(0));
    let w_index: Vec<Expr> = w_index.iter().map(|x| x.substitute(&env)).collect();
    if axes
        .iter()
        .filter(|a| *a != &axes[1])
        .any(|a| w_index.iter().any(|x| x.mentions(a)))
    {
        return Ok(TemplateOutcome::NotApplicable);
    }
    let a_value = operand_at(task, 1, w_index).ok_or("the weight has no prologue expression")?;

    // B[g, r, j]: the definition's reduction value with the weight read as 1: the padded,
    // strided window read of the input (zero outside). The output channel only selects the
    // group, so it is the group's first channel.
    let (pb_g, pb_r, pb_j) = (i32v("g"), i32v("r"), i32v("j"));
    let env = conv_env(&pb_g.expr(), &Expr::int(0), &pb_r.expr(), &pb_j.expr());
    let one = replace_reads(value, vw, &mut |_| Some(Expr::f32(1.0)))
        .ok_or("the weight read could not be replaced")?;
    let b_value = replace_reads(&one.substitute(&env), vx, &mut |idx| {
        operand_at(task, 0, idx.to_vec())
    })
    .ok_or("the input has no prologue expression")?;

    // The epilogue: C[g, i, j] → out[n, g·O/G + i, oh, ow] with bias and task epilogue.
    let (pe_g, pe_i, pe_j) = (i32v("g"), i32v("i"), i32v("j"));
    let stored = Var::new("stored", DataType::F32);
    let [nn, ohh, oww] = unflatten_j(&pe_j.expr());
    let out_index = vec![nn, &pe_g.expr() * opg + pe_i.expr(), ohh, oww];
    let conv_value = match adef.nodes.get(1) {
        None => stored.expr(),
        Some((
            _,
            ComputeNode::Grid {
                axes: gaxes,
                value: gvalue,
            },
        )) => {
            let env: HashMap<Var, Expr> = gaxes.iter().cloned().zip(out_index.clone()).collect();
            let v = replace_reads(gvalue, acc, &mut |_| Some(stored.expr()))
                .ok_or("the bias node does not read the sum")?
                .substitute(&env);
            match adef.inputs.get(2) {
                Some(vb) => replace_reads(&v, vb, &mut |idx| operand_at(task, 2, idx.to_vec()))
                    .ok_or("the bias has no prologue expression")?,
                None => v,
            }
        }
        Some(_) => return Ok(TemplateOutcome::NotApplicable),
    };
    let [output] = task.def.outputs.as_slice() else {
        return Err("an anchored task with several outputs".into());
    };
    if task.def.inputs.contains(output) {
        return Err("the task output is one of its inputs".into());
    }
    let has_epilogue = adef.outputs.first() != Some(output);
    let (indices, value) = match (&anchor.epilogue, has_epilogue) {
        (_, false) => (out_index, conv_value),
        (Some(e), true) => {
            let mut env: HashMap<Var, Expr> =
                e.axes.iter().cloned().zip(out_index.clone()).collect();
            env.insert(e.stored.clone(), conv_value);
            let indices = e.indices.iter().map(|x| x.substitute(&env)).collect();
            (indices, e.value.substitute(&env))
        }
        (None, true) => return Err("the epilogue's index map is not invertible".into()),
    };
    let prologues = [
        Prologue {
            param: ta,
            axes: vec![pa_g, pa_i, pa_r],
            value: a_value,
        },
        Prologue {
            param: tb,
            axes: vec![pb_g, pb_r, pb_j],
            value: b_value,
        },
    ];
    let inputs = task.def.inputs.iter().cloned();
    let mut epilogue = Epilogue {
        param: tc.clone(),
        axes: vec![pe_g, pe_i, pe_j],
        stored,
        output: output.clone(),
        indices,
        value,
    };
    if parts == 1 {
        let params: Vec<Var> = inputs.chain([output.clone()]).collect();
        return fuse(&template, params, &prologues, Some(&epilogue))
            .map(|f| TemplateOutcome::Kernel(Box::new(f)))
            .map_err(|e| e.to_string());
    }
    // Parallel-k: the prologues on the partial products, the epilogue on their sum.
    let partial_params: Vec<Var> = inputs.clone().chain([tc]).collect();
    let partial = fuse(&template, partial_params, &prologues, None).map_err(|e| e.to_string())?;
    let out_shape = [groups, m, n];
    let reduce = matmul_simt::build_k_reduce(&format!("{}_reduce", task.name), parts, &out_shape)
        .map_err(|e| format!("parallel-k reduction: {e}"))?;
    let [rp, rc] = reduce.params.as_slice() else {
        return Err("the parallel-k reduction does not take (partial, c)".into());
    };
    let (rp, rc) = (rp.clone(), rc.clone());
    epilogue.param = rc;
    let reduce_params: Vec<Var> = std::iter::once(rp)
        .chain(inputs)
        .chain([output.clone()])
        .collect();
    let reduce = fuse(&reduce, reduce_params, &[], Some(&epilogue)).map_err(|e| e.to_string())?;
    Ok(TemplateOutcome::ParallelK(Box::new(ParallelKKernels {
        partial,
        reduce,
        parts,
        workspace_elements: workspace_elements(parts, &out_shape),
    })))
}
