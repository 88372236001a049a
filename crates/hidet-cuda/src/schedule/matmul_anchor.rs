//! Anchored tasks whose anchor is an f32 matmul or batched matmul (a batch of 1 broadcast
//! on either operand): the SIMT matmul template ([`crate::templates::matmul_simt`], batches
//! on `blockIdx.z`), with the task's prologues and epilogue fused into it by
//! [`hidet_ir::fusion::fuse`].
//!
//! **Parallel-k** (split-k): when the product's output tiles are too few to fill the GPU
//! (`blocks < SMs`), the reduction over `k` is split into parts ([`choose_k_parts`]): a first
//! kernel, with the prologues fused, writes one partial product per part on a leading axis of
//! a workspace (`[parts, (batch,) m, n]`), and a second kernel sums the parts in order and
//! applies the task's epilogue where it stores ([`ParallelKKernels`]). The epilogue can
//! always go on the reduction kernel (it stores exactly the anchor's output elements), so
//! parallel-k never limits what fuses.

use hidet_graph::fusion::{
    fuse_epilogue_into_template, fuse_into_template, matmul_sizes, without_epilogue, FusedTask,
    TemplateParams,
};
use hidet_ir::compute::ComputeDef;
use hidet_ir::function::Function;

use super::simt_cost::{estimated_cycles, k_part_options};
use super::GpuTarget;
use crate::templates::matmul_simt::{self, Batch, KSplit, MatmulSimtSchedule};

/// The least `k` each part of a parallel-k product keeps: below it, the partial products'
/// traffic (written and read once each) outweighs the extra parallelism.
pub const MIN_K_PER_PART: i64 = 128;

/// The most parts of a parallel-k product.
pub const MAX_K_PARTS: i64 = 32;

/// The paper's parallel-k heuristic: a product of `blocks` thread blocks on `sm_count` SMs
/// is split into parts only when its blocks do not fill the SMs, into
/// `⌈sm_count / blocks⌉` parts (so `blocks · parts` is one to two waves of one block per
/// SM), at most `k / MIN_K_PER_PART` (each part keeps `k ≥ MIN_K_PER_PART`) and
/// [`MAX_K_PARTS`]; 1 means no split.
pub fn choose_k_parts(blocks: i64, k: i64, sm_count: i64) -> i64 {
    if blocks <= 0 || blocks >= sm_count {
        return 1;
    }
    let want = (sm_count + blocks - 1) / blocks;
    want.min(k / MIN_K_PER_PART).clamp(1, MAX_K_PARTS)
}

/// The two kernels of a parallel-k task (see the module docs).
#[derive(Debug)]
pub struct ParallelKKernels {
    /// The partial products: parameters the task's inputs, then the workspace
    /// `[parts, out…]` (written).
    pub partial: Function,
    /// Their sum with the task's epilogue: parameters the workspace, the task's inputs, then
    /// the task's output (written).
    pub reduce: Function,
    pub parts: i64,
    /// Elements (f32) of the workspace.
    pub workspace_elements: usize,
}

/// What the template path made of a task.
#[derive(Debug)]
pub enum TemplateOutcome {
    /// The anchor is not an f32 matmul or batched matmul: use the default scheduler.
    NotApplicable,
    /// The template kernel, with the task's prologues and epilogue fused when it has any.
    Kernel(Box<Function>),
    /// A parallel-k product: two kernels and a workspace.
    ParallelK(Box<ParallelKKernels>),
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

/// One point of the SIMT template's space for an anchor: the tile schedule and the parts
/// its reduction over `k` is split into (1: no parallel-k; the template normalizes it with
/// [`KSplit`], so every part multiplies at least one k-tile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SimtChoice {
    pub schedule: MatmulSimtSchedule,
    pub k_parts: i64,
}

/// The default choice for a product of `shape` on `target` (used where no tuning record
/// exists): of the template's showcase schedules ([`matmul_simt::showcase_schedules`], a
/// fixed sample from 32×16 to 256×32 tiles whose every kernel is compile-checked without
/// spills) and the parallel-k splits worth considering for each
/// ([`k_part_options`], the paper's heuristic among them), the pair the cost model
/// ([`estimated_cycles`]) ranks fastest; ties go to the earlier schedule and fewer parts.
/// The model weighs how many of the GPU's SMs the blocks fill, so small products (batch-1
/// attention, late convolutions) get small tiles or splits rather than a dozen large blocks.
/// `None` only if no showcase schedule exists.
pub fn heuristic_choice(shape: &MatmulShape, target: &GpuTarget) -> Option<SimtChoice> {
    let mut best: Option<(f64, SimtChoice)> = None;
    for schedule in matmul_simt::showcase_schedules() {
        for k_parts in k_part_options(shape, &schedule, target) {
            let choice = SimtChoice { schedule, k_parts };
            let cycles = estimated_cycles(shape, &choice, target);
            if best.is_none_or(|(b, _)| cycles < b) {
                best = Some((cycles, choice));
            }
        }
    }
    best.map(|(_, choice)| choice)
}

/// The template kernel of `task` named `task.name` (see [`TemplateOutcome`]) with the
/// heuristic choice for `target` ([`heuristic_choice`]). Its parameters are the task's
/// inputs then its output, as the graph backend's contract requires (a parallel-k task's two
/// kernels: see [`ParallelKKernels`]).
pub fn matmul_kernel(task: &FusedTask, target: &GpuTarget) -> TemplateOutcome {
    let Some(shape) = task.anchor.as_ref().and_then(|a| matmul_shape(&a.def)) else {
        return TemplateOutcome::NotApplicable;
    };
    match heuristic_choice(&shape, target) {
        Some(choice) => matmul_kernel_with(task, &choice),
        None => TemplateOutcome::NotApplicable,
    }
}

/// [`matmul_kernel`] with `choice` (a tuned schedule and its parallel-k parts).
pub fn matmul_kernel_with(task: &FusedTask, choice: &SimtChoice) -> TemplateOutcome {
    let Some(anchor) = &task.anchor else {
        return TemplateOutcome::NotApplicable;
    };
    let Some(shape) = matmul_shape(&anchor.def) else {
        return TemplateOutcome::NotApplicable;
    };
    let MatmulShape { batch, m, n, k } = shape;
    let schedule = choice.schedule;
    let parts = KSplit::new(k, schedule.block_k, choice.k_parts).parts;
    let module = matmul_simt::build_parallel_k(batch, m, n, k, &schedule, parts);
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
    if parts == 1 {
        return match fuse_into_template(task, &template, &params) {
            Ok(f) => TemplateOutcome::Kernel(Box::new(f)),
            Err(reason) => TemplateOutcome::Refused(reason),
        };
    }
    let out_shape: Vec<i64> = batch.map(|b| b.batch).into_iter().chain([m, n]).collect();
    let kernels =
        fuse_into_template(&without_epilogue(task), &template, &params).and_then(|partial| {
            let reduce = reduce_with_epilogue(task, parts, &out_shape)?;
            Ok(ParallelKKernels {
                partial,
                reduce,
                parts,
                workspace_elements: workspace_elements(parts, &out_shape),
            })
        });
    match kernels {
        Ok(k) => TemplateOutcome::ParallelK(Box::new(k)),
        Err(reason) => TemplateOutcome::Refused(reason),
    }
}

/// Elements of a parallel-k workspace `[parts, out_shape…]`.
pub fn workspace_elements(parts: i64, out_shape: &[i64]) -> usize {
    out_shape
        .iter()
        .fold(parts, |n, &d| n.saturating_mul(d))
        .try_into()
        .unwrap_or(usize::MAX)
}

/// The reduction kernel of a parallel-k `task` (named `<task>_reduce`) summing `parts`
/// partial products of shape `out_shape` (the anchor's template output) with the task's
/// epilogue fused onto its store.
pub fn reduce_with_epilogue(
    task: &FusedTask,
    parts: i64,
    out_shape: &[i64],
) -> Result<Function, String> {
    let name = format!("{}_reduce", task.name);
    let template = matmul_simt::build_k_reduce(&name, parts, out_shape)
        .map_err(|e| format!("parallel-k reduction: {e}"))?;
    let [partial, c] = template.params.as_slice() else {
        return Err("the parallel-k reduction does not take (partial, c)".into());
    };
    let (partial, c) = (partial.clone(), c.clone());
    fuse_epilogue_into_template(task, &template, &c, &[partial])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Arch;

    #[test]
    fn k_parts_fill_the_sms_and_keep_long_parts() {
        // Enough blocks: no split.
        assert_eq!(choose_k_parts(132, 4096, 132), 1);
        assert_eq!(choose_k_parts(500, 4096, 132), 1);
        // 6 blocks on 132 SMs want 22 parts; k = 768 allows 6, k = 3072 allows 22.
        assert_eq!(choose_k_parts(6, 768, 132), 6);
        assert_eq!(choose_k_parts(6, 3072, 132), 22);
        // Short reductions are never split; the number of parts is capped.
        assert_eq!(choose_k_parts(1, 200, 132), 1);
        assert_eq!(choose_k_parts(1, 1 << 20, 132), MAX_K_PARTS);
    }

    fn plain(m: i64, n: i64, k: i64) -> MatmulShape {
        MatmulShape {
            batch: None,
            m,
            n,
            k,
        }
    }

    fn blocks(shape: &MatmulShape, choice: &SimtChoice) -> i64 {
        let [bm, bn] = choice.schedule.block_tile();
        shape.batch.map_or(1, |b| b.batch)
            * ((shape.m + bm - 1) / bm)
            * ((shape.n + bn - 1) / bn)
            * KSplit::new(shape.k, choice.schedule.block_k, choice.k_parts).parts
    }

    #[test]
    fn small_m_large_k_products_split_and_large_ones_do_not() {
        let target = GpuTarget::for_arch(Arch::SM90);
        // GPT-2/BERT batch-1 projections (one row of activations), ResNet-50's last 3×3
        // convolution as an implicit GEMM (512 channels × 49 pixels × 4608).
        for (m, n, k) in [(1, 768, 3072), (1, 2304, 768), (512, 49, 4608)] {
            let shape = plain(m, n, k);
            let choice = heuristic_choice(&shape, &target).unwrap();
            assert!(choice.k_parts > 1, "{m}x{n}x{k}: {choice:?}");
            assert!(
                blocks(&shape, &choice) <= 4 * 132,
                "{m}x{n}x{k}: {choice:?}"
            );
        }
        let big = plain(4096, 4096, 4096);
        let choice = heuristic_choice(&big, &target).unwrap();
        assert_eq!(choice.k_parts, 1);
        let [bm, bn] = choice.schedule.block_tile();
        assert!(bm * bn >= 64 * 64, "{choice:?}");
        let off = GpuTarget {
            parallel_k: false,
            ..target
        };
        assert_eq!(
            heuristic_choice(&plain(1, 768, 3072), &off)
                .unwrap()
                .k_parts,
            1
        );
    }

    #[test]
    fn small_products_use_more_of_the_gpu_than_large_tiles_would() {
        // Batch-1 BERT attention (12 heads of 128×128×64 and 128×64×128) and ResNet-50's
        // 1×1 convolutions at 7×7 (2048 channels × 49 pixels × 512): the showcase's 128×128
        // tile launches 12, 12 and 16 blocks on 132 SMs; the heuristic's choice at least 40.
        let target = GpuTarget::for_arch(Arch::SM90);
        let heads = |m, n, k| MatmulShape {
            batch: Some(Batch {
                batch: 12,
                a_batch: 12,
                b_batch: 12,
            }),
            m,
            n,
            k,
        };
        for shape in [
            heads(128, 128, 64),
            heads(128, 64, 128),
            plain(2048, 49, 512),
        ] {
            let choice = heuristic_choice(&shape, &target).unwrap();
            assert!(blocks(&shape, &choice) >= 40, "{shape:?}: {choice:?}");
        }
    }
}
