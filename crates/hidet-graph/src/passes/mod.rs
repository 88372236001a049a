//! Graph rewriting: the [`GraphPass`] trait and the ordered list of default passes.
//!
//! A pass consumes a graph and returns the rewritten graph. Every pass edits through one
//! mechanism, a [`Rewriter`] (replace values, add and remove nodes, add constants, applied at
//! once through [`Graph::with_nodes`], which re-checks topological order and recomputes use
//! lists), so no pass can leave the graph inconsistent.

mod batchnorm_fold;
mod constant_fold;
mod conv_dead_taps;
pub mod conv_node;
pub mod conv_padding_regions;
mod conv_transpose_matmul;
mod conv_transpose_phases;
mod cse;
mod dce;
mod decode_blocks;
mod derived_constants;
mod dynamic_quantize;
mod einsum_matmul;
mod pool_after_pointwise;
mod recurrent_steps;
mod resize_by_axis;
mod resolve_variants;
pub mod rewrite;
mod scatter_as_gather;
mod simplify;
mod stft_product;

pub use batchnorm_fold::BatchNormFolding;
pub(crate) use constant_fold::shape_of;
pub use constant_fold::{ConstantFolding, MAX_FOLDED_ELEMENTS};
pub use conv_dead_taps::ConvDeadTaps;
pub use conv_padding_regions::ConvPaddingRegions;
pub use conv_transpose_matmul::ConvTransposeAsMatMul;
pub use conv_transpose_phases::ConvTransposeAsPhases;
pub use cse::{CommonSubexpressionElimination, MAX_DEDUP_ELEMENTS};
pub use dce::DeadCodeElimination;
pub use decode_blocks::DecodeBlockWeights;
pub use derived_constants::DerivedConstants;
pub use dynamic_quantize::DynamicQuantizeAsKernels;
pub use einsum_matmul::EinsumAsMatMul;
pub use pool_after_pointwise::PoolAfterPointwise;
pub use recurrent_steps::{RecurrentAsSteps, MAX_UNROLLED_STEPS};
pub use resize_by_axis::ResizeByAxis;
pub use resolve_variants::{FlattenBatchedMatMul, GemmToMatMul, GemmWeights};
pub use rewrite::Rewriter;
pub use scatter_as_gather::{ScatterAsGather, MAX_SCATTER_PREFIXES};
pub use simplify::{exact_cast, SimplifyChains};
pub use stft_product::{StftAsProduct, MAX_STFT_BASIS};

use crate::graph::{Graph, GraphError};

/// A graph-to-graph rewrite. Must preserve the values of the graph outputs.
pub trait GraphPass {
    /// Short name for logs.
    fn name(&self) -> &'static str;
    /// Rewrites `graph`.
    fn run(&self, graph: Graph) -> Result<Graph, GraphError>;
}

/// The target-neutral passes, in order: what every backend's graph goes through before
/// fusion unless the backend supplies its own list ([`crate::compiled::Backend::graph_passes`],
/// which usually interleaves its own rewrites with these). New target-neutral passes are added
/// here; a backend's rewrites (the CPU's convolution forms and weight panels) live in the
/// backend's crate.
pub fn default_passes() -> Vec<Box<dyn GraphPass>> {
    let mut passes = simplification_passes(GemmWeights::Transposed);
    passes.extend(cleanup_passes());
    passes
}

/// The first target-neutral passes, in order: folding, simplification and the rewrites that
/// resolve operator variants and fold normalizations into weights. A backend runs its own
/// rewrites after these, then [`cleanup_passes`]; `gemm_weights` says whether constant `Gemm`
/// weights stored transposed are transposed ahead of time or left for the backend to read.
pub fn simplification_passes(gemm_weights: GemmWeights) -> Vec<Box<dyn GraphPass>> {
    vec![
        // RNN / GRU / LSTM → one input product per direction, then per step a recurrent
        // product and the gates as elementwise operators; before folding, which turns the
        // weight slices and transposes it writes into constants.
        Box::new(RecurrentAsSteps),
        // Einsum of two operands contracting labels → transposes, reshapes and one MatMul;
        // before folding, which turns a constant operand's transpose into a constant.
        Box::new(EinsumAsMatMul),
        // Input-independent nodes → initializers (shape arithmetic of static exports, masks).
        Box::new(ConstantFolding),
        // DynamicQuantizeLinear → reductions, scalar arithmetic and QuantizeLinear, which
        // have kernels (bit for bit the operator's rounding).
        Box::new(DynamicQuantizeAsKernels),
        // Identity/Dropout/no-op Cast/Reshape/Transpose removed; Reshape, Transpose and
        // exact Cast chains merged; static Squeeze/Unsqueeze/Flatten → Reshape.
        Box::new(SimplifyChains),
        // ScatterND with constant indices → Gather of the updates (+ Where): one read per
        // element instead of a comparison with every index tuple.
        Box::new(ScatterAsGather),
        // STFT of a real signal with constant framing and window → the frames gathered and
        // one product with the windowed transform's basis: a matrix kernel, not the host.
        Box::new(StftAsProduct),
        // Gemm → MatMul (+ Add), constant weights pre-scaled and (per `gemm_weights`)
        // pre-transposed; before BN folding so a BN after a Gemm folds into the MatMul
        // weights.
        Box::new(GemmToMatMul {
            weights: gemm_weights,
        }),
        // Inference BatchNormalization → folded into Conv / MatMul weights, or Mul + Add.
        Box::new(BatchNormFolding),
        // Conv 1×1 (fewer output channels) of an AveragePool → the pooling of the
        // convolution's product, then the bias: fewer channels pooled.
        Box::new(PoolAfterPointwise),
        // Conv taps that read only padding (dilated convolutions over small images) → a
        // smaller kernel; after BN folding, which rewrites the weights.
        Box::new(ConvDeadTaps),
        // Conv whose taps mostly read padding (an atrous pyramid at dilation 12 over a 16×16
        // map) → unpadded convolutions of each region's live taps, concatenated.
        Box::new(ConvPaddingRegions),
        // ConvTranspose (dilation 1, kernel ≥ stride, constant weights) → one Conv
        // per output phase, interleaved: each output computed once, no column buffer.
        Box::new(ConvTransposeAsPhases),
        // ConvTranspose (group 1, constant weights) → MatMul + Col2Im: the channel
        // reduction in the matmul template, the overlapping sums a small kernel.
        Box::new(ConvTransposeAsMatMul),
        // Linear or cubic Resize → per resized axis, the last first, a blend of gathered
        // slices with constant tap tables: no coordinate arithmetic per element, later passes
        // blend whole contiguous rows.
        Box::new(ResizeByAxis),
    ]
}

/// The last target-neutral passes, in order: block-quantized weights decoded, deduplication, batched products flattened, the
/// chains that creates merged, dead nodes removed.
pub fn cleanup_passes() -> Vec<Box<dyn GraphPass>> {
    vec![
        // Weights stored as quantized blocks (`MatMulNBits`) → dense constants; before the
        // batched products are flattened, which looks for constant weights.
        Box::new(DecodeBlockWeights),
        // Structurally identical nodes (and equal small constants) merged.
        Box::new(CommonSubexpressionElimination),
        // MatMul of a batched input by a constant 2-D weight → 2-D MatMul between Reshapes;
        // MatMul of two operands with the same batch axes → one batch axis between Reshapes.
        Box::new(FlattenBatchedMatMul),
        // The Reshapes added above merged with their neighbours.
        Box::new(SimplifyChains),
        // Nodes no output depends on, and initializers nothing reads, removed.
        Box::new(DeadCodeElimination),
    ]
}

/// Runs `passes` in order.
pub fn run_passes(mut graph: Graph, passes: &[Box<dyn GraphPass>]) -> Result<Graph, GraphError> {
    for p in passes {
        graph = p.run(graph)?;
    }
    Ok(graph)
}
