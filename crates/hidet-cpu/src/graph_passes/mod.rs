//! The CPU backend's graph rewrites and its pass list ([`passes_for`]): convolutions as the
//! products, gathers and channels-last forms the CPU matrix-product template runs fastest,
//! poolings split along their axes, and constant weights stored as the panels the template
//! reads in place. They build the internal operators of [`crate::graph_ops`] and run, like
//! every pass, on a graph bound to concrete input shapes
//! ([`hidet_graph::compiled::Backend::graph_passes`]).

mod block_quantized_products;
mod channels_last;
mod conv_implicit_gemm;
mod conv_winograd;
mod panel_weights;
mod quantized_products;
mod separable_pool;

pub use block_quantized_products::BlockQuantizedProducts;
pub use channels_last::{DepthwiseChannelsLast, SinkTransposes};
pub use conv_implicit_gemm::{ConvToImplicitGemm, FEW_CHANNELS};
pub use conv_winograd::{ConvWinograd, WINOGRAD_MIN_CHANNEL_HARMONIC, WINOGRAD_MIN_TILES};
pub(crate) use panel_weights::panels_label;
pub use panel_weights::PanelConstantWeights;
pub use quantized_products::QuantizedProducts;
pub use separable_pool::SeparablePool;

use std::sync::Arc;

use hidet_graph::passes::{
    simplification_passes, CommonSubexpressionElimination, DeadCodeElimination, DecodeBlockWeights,
    DerivedConstants, FlattenBatchedMatMul, GemmWeights, GraphPass, SimplifyChains,
};

use crate::graph_ops::column_panels::PANEL_WIDTH;
use hidet_graph::FusionHints;

/// The hints of a node that lays a constant out the way a kernel reads it (a weight stored
/// transposed, column panels): specialization keeps it rather than folding it.
const KEEP_LAYOUT: FusionHints = FusionHints {
    keep_layout: true,
    materialize: false,
    prologue_only: false,
};

/// What the CPU passes may assume of the kernels that will run the graph; the rewritten graph
/// computes the same values whatever the options.
#[derive(Clone, Debug)]
pub struct PassOptions {
    /// Output channels up to which a convolution with a short window becomes a direct
    /// one ([`ConvToImplicitGemm::direct_max_channels`]).
    pub direct_conv_max_channels: usize,
    /// Rows per panel of a constant left operand of a matrix product stored as panels
    /// ([`PanelConstantWeights::left_panel_rows`]): the rows of the template's register tile.
    pub left_panel_rows: usize,
    /// Whether 3×3 stride-1 convolutions with enough tiles and channels run by Winograd's
    /// algorithm ([`ConvWinograd`]).
    pub winograd: bool,
    /// Where constants derived from weights are remembered across one model's compilations
    /// for different input shapes ([`PanelConstantWeights::derived`]); `None`: nowhere.
    pub derived: Option<Arc<DerivedConstants>>,
    /// Consecutive `k` of a column side by side in the 8-bit linear products' weight panels
    /// ([`QuantizedProducts::depth_group`]): 4 or 2.
    pub integer_depth_group: usize,
}

impl Default for PassOptions {
    /// [`FEW_CHANNELS`], 16-row panels ([`PANEL_WIDTH`]), Winograd convolutions and 8-bit
    /// weight panels in groups of four `k`.
    fn default() -> Self {
        PassOptions {
            direct_conv_max_channels: FEW_CHANNELS,
            left_panel_rows: PANEL_WIDTH,
            winograd: true,
            derived: None,
            integer_depth_group: 4,
        }
    }
}

/// The CPU pass list for the default [`PassOptions`].
pub fn default_passes() -> Vec<Box<dyn GraphPass>> {
    passes_for(&PassOptions::default())
}

/// The CPU backend's graph passes, in order, for `options`: quantized convolutions as 8-bit
/// products, the target-neutral simplifications of `hidet-graph`, products by block-quantized
/// weights read as stored, the CPU rewrites, then the target-neutral cleanup with the weight panels
/// stored before the last dead-code elimination. New CPU passes are added here.
pub fn passes_for(options: &PassOptions) -> Vec<Box<dyn GraphPass>> {
    // Conv of DequantizeLinear operands → an 8-bit product with 32-bit accumulation; before
    // constant folding turns the weight's DequantizeLinear into floats.
    // MatMul by a blocked DequantizeLinear of int4 weights → hidet::Int4Linear, also before
    // constant folding.
    let mut passes: Vec<Box<dyn GraphPass>> = vec![
        Box::new(QuantizedProducts {
            depth_group: options.integer_depth_group,
        }),
        Box::new(BlockQuantizedProducts {
            derived: options.derived.clone(),
        }),
    ];
    // Gemm weights stored transposed stay as stored: the panels below are packed from them
    // directly, so the model holds no transposed copy.
    passes.extend(simplification_passes(GemmWeights::AsStored));
    // Again, for the integer operators (QLinearConv, MatMulInteger, …) whose shapes only
    // constant folding made static (a transformer's computed Reshape targets).
    passes.push(Box::new(QuantizedProducts {
        depth_group: options.integer_depth_group,
    }));
    passes.extend::<[Box<dyn GraphPass>; 12]>([
        // MatMul by 4-bit block-quantized constant weights (MatMulNBits, QDQ int4) →
        // hidet::Int4Linear, reading the blocks as stored; again after folding, which makes
        // the activations' shapes static.
        Box::new(BlockQuantizedProducts {
            derived: options.derived.clone(),
        }),
        // The block-quantized weights nothing reads as stored → dense constants.
        Box::new(DecodeBlockWeights),
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
        // The Reshapes and Transposes added above merged with their neighbours.
        Box::new(SimplifyChains),
        // Constant operands of MatMul stored as panels (16 columns of a right operand, a
        // register tile's rows of a left one) the template reads in place instead of packing
        // them on every run.
        Box::new(PanelConstantWeights {
            left_panel_rows: options.left_panel_rows,
            derived: options.derived.clone(),
        }),
        // Nodes no output depends on, and initializers nothing reads, removed.
        Box::new(DeadCodeElimination),
    ]);
    passes
}
