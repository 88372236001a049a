//! The default GPU scheduler: a CUDA kernel for any fused task's compute definition.
//!
//! - [`rowwise`]: tasks whose outputs read reductions over rows (softmax, layer
//!   normalization, reductions over the last axes): one warp per row, the row's reductions
//!   folded with warp shuffles;
//! - [`matmul_anchor`] (used by the graph backend before the two above): f32 (batched) matmul
//!   anchors through the SIMT matmul template, prologues and epilogue fused;
//! - [`conv_anchor`] (likewise): f32 2-D convolutions as implicit GEMMs through the same
//!   template (the im2col prologue, bias and epilogue fused);
//! - [`simt_anchor`]: both of these as one kind of anchor, lowered with the heuristic or a
//!   tuned [`matmul_anchor::SimtChoice`]; [`simt_cost`] the cost model the heuristic and
//!   tuning rank choices with;
//! - [`elementwise`]: everything else — one output element per thread, reductions as serial
//!   loops in the thread (injective tasks need none).
//!
//! Kernel contract (the graph backend's): parameters are the definition's inputs then one
//! per output, dense row-major; every output element is written exactly once.

pub mod conv_anchor;
pub mod elementwise;
pub mod matmul_anchor;
pub mod rowwise;
pub mod simt_anchor;
pub mod simt_cost;

use hidet_ir::compute::{tensor_shape, ComputeDef};
use hidet_ir::expr::Var;
use hidet_ir::function::Function;

use crate::Arch;

/// What the schedules need to know of the target GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuTarget {
    /// The architecture kernels are compiled for (its limits bound the tuning space).
    pub arch: Arch,
    /// Streaming multiprocessors: the parallel-k heuristic and the rowwise schedule's
    /// threads per row fill them.
    pub sm_count: i64,
    /// Whether parallel-k may be chosen.
    pub parallel_k: bool,
    /// The fewest threads a vectorized [`elementwise`] kernel may have (fewer, wider threads
    /// below it would leave SMs idle).
    pub min_vector_threads: i64,
}

impl GpuTarget {
    /// `arch`'s reference GPU ([`Arch::reference_sm_count`]), parallel-k allowed, vectorized
    /// elementwise kernels from one block of [`elementwise::THREADS`] per SM.
    pub fn for_arch(arch: Arch) -> GpuTarget {
        let sm_count = arch.reference_sm_count();
        GpuTarget {
            arch,
            sm_count,
            parallel_k: true,
            min_vector_threads: sm_count * elementwise::THREADS,
        }
    }
}

impl Default for GpuTarget {
    /// An A100 (sm_80, 108 SMs), parallel-k allowed.
    fn default() -> Self {
        GpuTarget::for_arch(Arch::SM80)
    }
}

/// Why a definition cannot be scheduled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("tensor `{0}` has a non-constant shape")]
    DynamicShape(String),
    #[error("{elements} output elements do not fit 32-bit thread indices")]
    TooLarge { elements: i64 },
}

/// How a kernel was scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleKind {
    /// One warp per row ([`rowwise`]).
    Rowwise,
    /// One element per thread ([`elementwise`]).
    Elementwise,
}

/// The kernel for `def` named `name` on `target` and how it was scheduled: [`rowwise`]
/// where it applies, else [`elementwise`].
pub fn schedule(
    def: &ComputeDef,
    name: &str,
    target: &GpuTarget,
) -> Result<(Function, ScheduleKind), ScheduleError> {
    if let Some(f) = rowwise::schedule_rowwise(def, name)? {
        return Ok((f, ScheduleKind::Rowwise));
    }
    Ok((
        elementwise::schedule_elementwise(def, name, target)?,
        ScheduleKind::Elementwise,
    ))
}

/// The constant shape of tensor `v`.
pub fn const_shape(v: &Var) -> Result<Vec<i64>, ScheduleError> {
    tensor_shape(v)
        .iter()
        .map(|d| {
            d.as_int()
                .ok_or_else(|| ScheduleError::DynamicShape(v.name().to_string()))
        })
        .collect()
}

/// One parameter per output of `def`: the output itself, or a fresh `<name>_out` tensor when
/// the output is also an input (passed through) or an earlier output (written twice).
pub fn output_params(def: &ComputeDef) -> Vec<Var> {
    let mut out_params: Vec<Var> = Vec::new();
    for o in &def.outputs {
        if def.inputs.contains(o) || out_params.contains(o) {
            out_params.push(Var::new(format!("{}_out", o.name()), o.ty().clone()));
        } else {
            out_params.push(o.clone());
        }
    }
    out_params
}
