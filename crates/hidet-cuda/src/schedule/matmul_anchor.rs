//! Anchored tasks whose anchor is an f32 matmul or batched matmul (a batch of 1 broadcast
//! on either operand): the SIMT matmul template ([`crate::templates::matmul_simt`], batches
//! on `blockIdx.z`), with the task's prologues and epilogue fused into it by
//! [`hidet_ir::fusion::fuse`].

use hidet_graph::fusion::{fuse_into_template, matmul_sizes, FusedTask, TemplateParams};
use hidet_ir::compute::ComputeDef;
use hidet_ir::function::Function;

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

/// The sizes of `def` when it is exactly a (batched) f32 matrix product
/// ([`hidet_graph::fusion::matmul_sizes`]).
pub fn matmul_shape(def: &ComputeDef) -> Option<MatmulShape> {
    let sizes = matmul_sizes(def)?;
    Some(MatmulShape {
        batch: sizes.batch.map(|b| Batch {
            batch: b.batch,
            a_batch: b.a_batch,
            b_batch: b.b_batch,
        }),
        m: sizes.m,
        n: sizes.n,
        k: sizes.k,
    })
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
