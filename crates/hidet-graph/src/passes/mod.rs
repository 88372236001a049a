//! Graph rewriting: the [`GraphPass`] trait and the ordered list of default passes.
//!
//! A pass consumes a graph and returns the rewritten graph. Every pass edits through one
//! mechanism, a [`Rewriter`] (replace values, add and remove nodes, add constants, applied at
//! once through [`Graph::with_nodes`], which re-checks topological order and recomputes use
//! lists), so no pass can leave the graph inconsistent.

mod batchnorm_fold;
pub mod channels_last;
mod constant_fold;
mod conv_implicit_gemm;
mod conv_node;
mod conv_winograd;
mod cse;
mod dce;
mod panel_weights;
mod pool_after_pointwise;
mod resolve_variants;
pub mod rewrite;
mod scatter_as_gather;
mod separable_pool;
mod simplify;

pub use batchnorm_fold::BatchNormFolding;
pub use channels_last::{DepthwiseChannelsLast, SinkTransposes};
pub(crate) use constant_fold::shape_of;
pub use constant_fold::{ConstantFolding, MAX_FOLDED_ELEMENTS};
pub use conv_implicit_gemm::{ConvToImplicitGemm, FEW_CHANNELS};
pub use conv_winograd::{ConvWinograd, WINOGRAD_MIN_CHANNEL_HARMONIC, WINOGRAD_MIN_TILES};
pub use cse::{CommonSubexpressionElimination, MAX_DEDUP_ELEMENTS};
pub use dce::DeadCodeElimination;
pub use panel_weights::PanelConstantWeights;
pub use pool_after_pointwise::PoolAfterPointwise;
pub use resolve_variants::{FlattenBatchedMatMul, GemmToMatMul};
pub use rewrite::Rewriter;
pub use scatter_as_gather::{ScatterAsGather, MAX_SCATTER_PREFIXES};
pub use separable_pool::SeparablePool;
pub use simplify::{exact_cast, SimplifyChains};

use crate::graph::{Graph, GraphError};

/// A graph-to-graph rewrite. Must preserve the values of the graph outputs.
pub trait GraphPass {
    /// Short name for logs.
    fn name(&self) -> &'static str;
    /// Rewrites `graph`.
    fn run(&self, graph: Graph) -> Result<Graph, GraphError>;
}

/// What the default passes may assume of the backend that will run the graph; the
/// rewritten graph computes the same values whatever the options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassOptions {
    /// Output channels up to which a convolution with a short window becomes a direct
    /// one ([`ConvToImplicitGemm::direct_max_channels`]).
    pub direct_conv_max_channels: usize,
    /// Rows per panel of a constant left operand of a matrix product stored as panels
    /// ([`PanelConstantWeights::left_panel_rows`]): the rows of the backend's register tile.
    pub left_panel_rows: usize,
    /// Whether 3×3 stride-1 convolutions with enough tiles and channels run by Winograd's
    /// algorithm ([`ConvWinograd`]).
    pub winograd: bool,
}

impl Default for PassOptions {
    /// [`FEW_CHANNELS`], 16-row panels ([`crate::ops::column_panels::PANEL_WIDTH`]) and
    /// Winograd convolutions.
    fn default() -> Self {
        PassOptions {
            direct_conv_max_channels: FEW_CHANNELS,
            left_panel_rows: crate::ops::column_panels::PANEL_WIDTH,
            winograd: true,
        }
    }
}

/// The default pass pipeline for the default [`PassOptions`].
pub fn default_passes() -> Vec<Box<dyn GraphPass>> {
    passes_for(&PassOptions::default())
}

/// The default pass pipeline, in order, for a backend described by `options`. New passes
/// are added here.
pub fn passes_for(options: &PassOptions) -> Vec<Box<dyn GraphPass>> {
    vec![
        // Input-independent nodes → initializers (shape arithmetic of static exports, masks).
        Box::new(ConstantFolding),
        // Identity/Dropout/no-op Cast/Reshape/Transpose removed; Reshape, Transpose and
        // exact Cast chains merged; static Squeeze/Unsqueeze/Flatten → Reshape.
        Box::new(SimplifyChains),
        // ScatterND with constant indices → Gather of the updates (+ Where): one read per
        // element instead of a comparison with every index tuple.
        Box::new(ScatterAsGather),
        // Gemm → MatMul (+ Add), constant weights pre-transposed and pre-scaled; before BN
        // folding so a BN after a Gemm folds into the MatMul weights.
        Box::new(GemmToMatMul),
        // Inference BatchNormalization → folded into Conv / MatMul weights, or Mul + Add.
        Box::new(BatchNormFolding),
        // Conv 1×1 (fewer output channels) of an AveragePool → the pooling of the
        // convolution's product, then the bias: fewer channels pooled.
        Box::new(PoolAfterPointwise),
        // Static f32 depthwise Conv (any batch) → hidet::DepthwiseConvNhwc between transposes.
        Box::new(DepthwiseChannelsLast),
        // Static f32 3×3 stride-1 Conv (any batch) with a constant weight → Winograd's three
        // products (input transform, per-position product, output transform).
        Box::new(ConvWinograd {
            min_tiles: if options.winograd {
                WINOGRAD_MIN_TILES
            } else {
                usize::MAX
            },
            ..ConvWinograd::default()
        }),
        // Static f32 Conv with a constant weight (any batch, grouped too) → Im2Col + MatMul +
        // bias + Reshape, the batch folded into the product's columns or rows.
        Box::new(ConvToImplicitGemm {
            direct_max_channels: options.direct_conv_max_channels,
        }),
        // MaxPool/AveragePool over a 2-D window → a pooling along rows, then one along columns.
        Box::new(SeparablePool),
        // Channels-first transposes moved below element-wise operators, toward the
        // channels-last transposes they cancel with (merged by the SimplifyChains below).
        Box::new(SinkTransposes),
        // Structurally identical nodes (and equal small constants) merged.
        Box::new(CommonSubexpressionElimination),
        // MatMul of a batched input by a constant 2-D weight → 2-D MatMul between Reshapes;
        // MatMul of two operands with the same batch axes → one batch axis between Reshapes.
        Box::new(FlattenBatchedMatMul),
        // The Reshapes added above merged with their neighbours.
        Box::new(SimplifyChains),
        // Constant operands of MatMul stored as panels (16 columns of a right operand, a
        // register tile's rows of a left one) the CPU template reads in place instead of
        // packing them on every run.
        Box::new(PanelConstantWeights {
            left_panel_rows: options.left_panel_rows,
        }),
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
