//! Anchored tasks whose anchor is an f32 matmul or batched matmul (a batch of 1 broadcast
//! on either operand): the SIMT matmul template ([`crate::templates::matmul_simt`], batches
//! on `blockIdx.z`), with the task's prologues and epilogue fused into it by
//! [`hidet_ir::fusion::fuse`].

use hidet_graph::fusion::{fuse_into_template, FusedTask, TemplateParams};
use hidet_ir::compute::{tensor_dtype, ComputeDef, ComputeNode, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{BinaryOp, Expr, ExprKind, Var};
use hidet_ir::function::Function;

use super::const_shape;
use crate::templates::matmul_simt::{self, Batch, MatmulSimtSchedule};

/// What the template path made of a task.
#[derive(Debug)]
pub enum TemplateOutcome {
    /// The anchor is not an f32 matmul or batched matmul: use the default scheduler.
    NotApplicable,
    /// The template kernel, with the task's prologues and epilogue fused when it has any.
    Kernel(Box<Function>),
    /// The template cannot absorb the task's prologues or epilogue (why).
    Refused(String),
}

/// The sizes of a product the template computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulShape {
    /// `None` for a rank-2 product.
    pub batch: Option<Batch>,
    pub m: i64,
    pub n: i64,
    pub k: i64,
}

/// The sizes of `def` when it is exactly `C[i, j] = Σ_r A[i, r] · B[r, j]` over f32 with
/// inputs `(A, B)` in that order, or its batched form `C[b, i, j] = Σ_r A[b', i, r] ·
/// B[b'', r, j]` where each operand's batch index is `b`, or the constant 0 for an operand of
/// batch 1 (broadcast).
pub fn matmul_shape(def: &ComputeDef) -> Option<MatmulShape> {
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
    let [r] = reduce_axes.as_slice() else {
        return None;
    };
    let (batch_axis, i, j) = match axes.as_slice() {
        [i, j] => (None, i, j),
        [bv, i, j] => (Some(bv), i, j),
        _ => return None,
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
    let (batch, (m, k), (k2, n), (m2, n2)) = match (sa.as_slice(), sb.as_slice(), sc.as_slice()) {
        ([m, k], [k2, n], [m2, n2]) if batch_axis.is_none() => {
            (None, (*m, *k), (*k2, *n), (*m2, *n2))
        }
        ([ab, m, k], [bb, k2, n], [nb, m2, n2]) if batch_axis.is_some() => (
            Some(Batch {
                batch: *nb,
                a_batch: *ab,
                b_batch: *bb,
            }),
            (*m, *k),
            (*k2, *n),
            (*m2, *n2),
        ),
        _ => return None,
    };
    if k != k2 || m != m2 || n != n2 {
        return None;
    }
    let ExprKind::Binary(BinaryOp::Mul, x, y) = value.kind() else {
        return None;
    };
    // An operand's batch index: the batch axis, or 0 for an operand of batch 1.
    let batch_index = |e: &Expr, rows: i64| match (batch_axis, batch) {
        (Some(bv), Some(bt)) if rows == bt.batch && e.as_var() == Some(bv) => true,
        (Some(_), Some(_)) => rows == 1 && e.as_int() == Some(0),
        _ => false,
    };
    let reads = |e: &Expr, t: &Var, rows: i64, p: &Var, q: &Var| match e.kind() {
        ExprKind::TensorElement { tensor, indices } => {
            let (lead, tail) = indices.split_at(indices.len().saturating_sub(2));
            tensor == t
                && tail.len() == 2
                && tail[0].as_var() == Some(p)
                && tail[1].as_var() == Some(q)
                && match lead {
                    [] => batch_axis.is_none(),
                    [e] => batch_index(e, rows),
                    _ => false,
                }
        }
        _ => false,
    };
    let (ra, rb) = batch.map_or((1, 1), |bt| (bt.a_batch, bt.b_batch));
    let ordered = reads(x, a, ra, i, r) && reads(y, b, rb, r, j);
    let swapped = reads(y, a, ra, i, r) && reads(x, b, rb, r, j);
    (ordered || swapped).then_some(MatmulShape { batch, m, n, k })
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
    let Some(shape) = matmul_shape(&anchor.def) else {
        return TemplateOutcome::NotApplicable;
    };
    let MatmulShape { batch, m, n, k } = shape;
    let Some(schedule) = choose_schedule(m, n) else {
        return TemplateOutcome::NotApplicable;
    };
    let module = match batch {
        None => matmul_simt::build(m, n, k, &schedule),
        Some(batch) => matmul_simt::build_batched(batch, m, n, k, &schedule),
    };
    let module = match module {
        Ok(module) => module,
        Err(e) => return TemplateOutcome::Refused(format!("SIMT matmul template: {e}")),
    };
    let Some(mut template) = module.functions.into_iter().find(Function::is_cuda) else {
        return TemplateOutcome::Refused("the SIMT matmul module has no kernel".into());
    };
    template.name = task.name.clone();
    let [ta, tb, tc] = template.params.as_slice() else {
        return TemplateOutcome::Refused("the SIMT matmul template does not take (a, b, c)".into());
    };
    let params = TemplateParams {
        operands: &[ta.clone(), tb.clone()],
        output: tc,
        operand_rank: if batch.is_some() { 3 } else { 2 },
        stored: &[],
    };
    match fuse_into_template(task, &template, &params) {
        Ok(f) => TemplateOutcome::Kernel(Box::new(f)),
        Err(reason) => TemplateOutcome::Refused(reason),
    }
}
