//! Convolution as implicit GEMM (DESIGN §2): an f32 convolution with a constant weight
//! becomes a matrix product whose right operand is the im2col transform of the input, with
//! the batch folded into its columns.
//!
//! ```text
//! Conv(X[N, C, d…], W[OC, C, k…], B?)
//!     →  Transpose(Reshape(Add(MatMul(Wmat, Col), B[OC, 1]), [OC, N, o…]), [1, 0, 2…])
//!     Wmat = Transpose(WmatT), WmatT = W reshaped to [OC, C·∏k] and transposed (a new constant)
//!     Col = hidet::Im2Col(X) [C·∏k, N·∏o]   (X read as [C, N·∏d] for 1×1 unpadded stride-1 kernels)
//! ```
//!
//! (for one image, `N = 1`, the transpose is a plain `Reshape` to `[1, OC, o…]`; a pointwise
//! kernel over several images is instead a product batched over them, `MatMul(Wmat[OC, C],
//! Reshape(X, [N, C, ∏d]))`, with nothing transposed, unless each image has few pixels,
//! see `few_pixels`). A grouped
//! convolution (`group = G`, not depthwise, see [`super::channels_last`]) is one product per
//! image and group, `MatMul(Wmat[N·G, OC/G, C/G·∏k], hidet::Im2Col(Reshape(X, [N·G, C/G, d…]);
//! batched))`, `[N, OC, ∏o]` (see `grouped_product`), or a direct one batched over the groups
//! (see `grouped_direct`).
//!
//! Ungrouped, the product can also have the pixels of every image as rows and be stored
//! channels-last, `Transpose(Reshape(Add(MatMul(Xl, WmatT), B[1, OC]), [N, o…, OC]),
//! to_first)`, where `Xl` is
//! `Transpose(ColT)`, for a direct convolution `hidet::OffsetGather(X, pixel offsets,
//! window offsets)` (the same matrix, addressed through two offset tables), or for a
//! pointwise kernel `Reshape(Transpose(X, to_last), [N·∏d, C])`, in four cases: next to
//! channels-last depthwise convolutions ([`super::channels_last`]); for windowed
//! convolutions with few output pixels (ResNet-50's last stage, 7×7, see `pixels_as_rows`);
//! for direct convolutions (`ConvToImplicitGemm::short_direct`: few output channels and a
//! short window, as Inception-V3's first three and ResNet-50's stem; `window_direct`: window
//! rows of 3 or more, padded or not, as every other 3×3); and for the pointwise convolutions that
//! read any of these, through element-wise operators and residual adds, except those that
//! read a convolution that is channels-last only for being direct (its product
//! is stored back channels-first by its own kernel). The transposes then cancel with their
//! neighbours', so a whole late stage runs channels-last. A direct convolution whose input is
//! itself such a channels-last product (through element-wise operators; for a grouped one,
//! with at least 16 channels per group) gathers that product in place, its window read
//! channel-innermost: `OffsetGather(Transpose(X, to_last), …)`, the transpose cancelling with
//! the producer's, so no channels-first copy is made for it (Inception-V3's first three
//! convolutions, RegNet's stem and its strided shortcut).
//!
//! The weight is stored transposed (`[C·∏k, OC]`) so that the matrix product, which packs
//! its left operand in panels of a few output channels, reads it in memory order; the
//! `Transpose` becomes a prologue, read in place. Fusion also makes `Im2Col` a prologue of the matrix product (inlined into the loads of its
//! right operand: the column matrix is never stored) and the bias, the reshape and whatever
//! bijective consumers follow (ReLU, a residual add) its epilogues: one kernel.

use crate::graph_ops::offset_gather::OP_TYPE as OFFSET_GATHER;
use crate::graph_ops::HIDET_DOMAIN;
use crate::graph_passes::channels_last::{
    channels_last_source, feeds_channels_last, perm_attrs, to_first, to_last,
};
use crate::graph_passes::KEEP_LAYOUT;
use hidet_graph::attribute::Attributes;
use hidet_graph::graph::{Graph, GraphError, NodeId, ValueId};
use hidet_graph::kernels::window::Geometry;
use hidet_graph::passes::conv_node::{is_pointwise, static_conv};
use hidet_graph::passes::rewrite::Rewriter;
use hidet_graph::passes::GraphPass;
use hidet_graph::tensor::Tensor;
use hidet_graph::Attribute;
use hidet_graph::FusionHints;
use std::collections::HashSet;

/// Rewrites `Conv` nodes (default domain) with f32 data of a static shape (any batch) and a
/// constant weight into an implicit GEMM (see the module docs), grouped ones included. Other
/// convolutions (non-constant weights, other dtypes, symbolic shapes) are kept.
///
/// An ungrouped product is stored channels-last when the convolution's output feeds a `to_last`
/// transpose, when it is windowed with few output pixels (`pixels_as_rows`), when it is a
/// direct convolution (few output channels and a short window,
/// `ConvToImplicitGemm::short_direct`, or with window rows of 3 or more, `window_direct`), or when it is
/// pointwise and its input comes from a `to_first` transpose or from a convolution this pass
/// stored channels-last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvToImplicitGemm {
    /// Output channels up to which a convolution with a short window is made a direct one
    /// (see `ConvToImplicitGemm::short_direct`).
    pub direct_max_channels: usize,
}

impl Default for ConvToImplicitGemm {
    /// [`FEW_CHANNELS`].
    fn default() -> Self {
        ConvToImplicitGemm {
            direct_max_channels: FEW_CHANNELS,
        }
    }
}

impl GraphPass for ConvToImplicitGemm {
    fn name(&self) -> &'static str {
        "conv-implicit-gemm"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::with_registry(graph, crate::graph_ops::registry());
        let mut channels_last = HashSet::new();
        // Every convolution whose product has the pixels as rows (channels-last), whatever
        // the reason: a direct convolution reading one gathers it in place.
        let mut pixel_rows = HashSet::new();
        for i in 0..rw.graph().nodes().len() {
            let Some(mut plan) = plan(&rw, NodeId(i)) else {
                continue;
            };
            let g = rw.graph();
            let out_ch = plan.weight.shape()[0];
            if plan.group != 1 {
                plan.direct = grouped_direct(&plan);
                plan.channels_last = plan.direct;
                if plan.direct {
                    plan.input_channels_last = plan.channels / plan.group
                        >= GROUPED_CHANNELS_LAST_MIN_CHANNELS
                        && channels_last_source(g, plan.x, &pixel_rows);
                    pixel_rows.insert(plan.y);
                }
                rw.focus(NodeId(i));
                let out = rewrite(&mut rw, &plan)?;
                rw.replace(plan.y, out);
                rw.remove_node(NodeId(i));
                continue;
            }
            let short_direct = self.short_direct(&plan.geometry, plan.channels, out_ch);
            let other_reason = feeds_channels_last(g, plan.y)
                || pixels_as_rows(&plan.geometry)
                || short_direct
                || (is_pointwise(&plan.geometry)
                    && channels_last_source(g, plan.x, &channels_last));
            plan.direct = short_direct || window_direct(&plan.geometry);
            plan.channels_last = other_reason || plan.direct;
            if plan.direct {
                plan.input_channels_last = channels_last_source(g, plan.x, &pixel_rows);
            }
            if other_reason {
                channels_last.insert(plan.y);
            }
            if plan.channels_last {
                pixel_rows.insert(plan.y);
            }
            rw.focus(NodeId(i));
            let out = rewrite(&mut rw, &plan)?;
            rw.replace(plan.y, out);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// What one applicable convolution node reads and computes.
#[derive(Clone)]
struct Plan {
    node: String,
    x: ValueId,
    bias: Option<ValueId>,
    y: ValueId,
    weight: Tensor,
    /// Images in the batch (`N`).
    batch: usize,
    channels: usize,
    /// Groups (`G`); a grouped product is channels-first unless direct ([`grouped_direct`]).
    group: usize,
    geometry: Geometry,
    /// Store the product channels-last, `[N, o…, OC]`, behind a `to_first` transpose.
    channels_last: bool,
    /// Run it as a direct convolution ([`ConvToImplicitGemm::short_direct`] or
    /// [`window_direct`]; implies `channels_last`).
    direct: bool,
    /// For a direct convolution: its input is a `to_first` transpose of channels-last data
    /// (see [`channels_last_source`]), so it gathers the channels-last data in place.
    input_channels_last: bool,
}

/// The plan for node `n`, when the rewrite applies to it: a statically shaped convolution
/// ([`static_conv`]) whose groups divide its input and output channels.
fn plan(rw: &Rewriter, n: NodeId) -> Option<Plan> {
    let conv = static_conv(rw, n)?;
    let ws = conv.weight.shape();
    if conv.weight.shape()[1] * conv.group != conv.channels() || ws[0] % conv.group != 0 {
        return None;
    }
    Some(Plan {
        batch: conv.batch(),
        group: conv.group,
        channels: conv.channels(),
        node: conv.name,
        x: conv.x,
        bias: conv.bias,
        y: conv.y,
        weight: conv.weight,
        geometry: conv.geometry,
        channels_last: false,
        direct: false,
        input_channels_last: false,
    })
}

/// Output pixels fewer than this many, and not a whole number of vectors, make the
/// product channels-last (see [`pixels_as_rows`]).
const FEW_PIXELS: usize = 64;

/// Whether a windowed convolution takes the channels-last product, `[∏o, C·∏k] × [C·∏k,
/// OC]`, with the output pixels as its rows. The matrix product vectorizes its columns;
/// when the output has few pixels that fill no whole vectors (7×7 = 49), most of the last
/// column tile would be padding, while the output channels fill vectors exactly. Its
/// pointwise successors then read it channels-last as it is. On larger images the
/// transposes at the stage's ends cost more than they save (measured on ResNet-50: faster
/// at 7×7, slower from 14×14).
fn pixels_as_rows(g: &Geometry) -> bool {
    !is_pointwise(g) && few_pixels(g)
}

/// Whether `g`'s output pixels per image are fewer than [`FEW_PIXELS`] and fill no whole
/// vectors: a product with them as its columns would pad most of its last column tile, once
/// per image when batched over the images. A pointwise convolution of such a batch therefore
/// folds the images into its columns (`[C, N·∏d]`, the last tile padded once, the constant
/// weight read from panels) rather than taking [`batched_pointwise`]: ResNeXt-50's last stage
/// (7×7, batch 8) 12.6 → 8.3 ms per convolution; from 14×14 the batched product is faster.
fn few_pixels(g: &Geometry) -> bool {
    let pixels = g.output_size();
    pixels < FEW_PIXELS && !pixels.is_multiple_of(16)
}

/// Output channels at most this many (by default, see [`ConvToImplicitGemm`]), and a
/// window of at most this many elements (`C·∏k`), make a windowed convolution a direct one.
pub const FEW_CHANNELS: usize = 64;
const SHORT_DEPTH: usize = 320;

/// Whether a windowed convolution with few output channels and a short window (`K = C·∏k`),
/// or any with window rows of 3 or more (see `window_direct`),
/// takes the channels-last product so that it runs as a direct convolution: with the pixels
/// as rows, gathered by `hidet::OffsetGather` (see `window_offsets`), the matrix product
/// broadcasts the im2col elements where they are in the input, each address two table reads
/// (the CPU backend's in-place `A`), rather than packing `K` rows of columns that few output
/// channels would reuse. A padded input is first padded into memory (see `direct_input`).
/// Measured on the paper's models with AVX2: faster for Inception-V3's first three
/// convolutions (`K` = 27, 288 and 288 padded; 32, 32 and 64 channels) and ResNet-50's padded
/// stem (147, 64 channels).
impl ConvToImplicitGemm {
    /// Whether a windowed convolution has few output channels and a short window (see the
    /// constants above).
    fn short_direct(&self, g: &Geometry, channels: usize, out_ch: usize) -> bool {
        !is_pointwise(g)
            && out_ch <= self.direct_max_channels
            && channels * g.kernel_size() <= SHORT_DEPTH
    }
}

/// Window rows (the innermost kernel extent) at least this long make a convolution a direct
/// one (see [`window_direct`]).
const DIRECT_MIN_WINDOW_ROW: usize = 3;

/// Whether a windowed convolution is made a direct one whatever its channels: the product
/// broadcasts its pixels where they are in the input (a padded input first copied once into
/// a padded buffer) instead of packing `K` rows of (guarded) columns. The window's rows must
/// be at least [`DIRECT_MIN_WINDOW_ROW`] long: a micro-kernel's `K` block reads about
/// `kc / kw` input rows per pixel, which a column window (`7×1`: `kw = 1`) makes too many for
/// the L1 cache. Unless a direct convolution is channels-last for another reason, its product
/// is stored back channels-first (the transpose an epilogue) and its pointwise successors
/// stay channels-first. Measured on AVX2, one thread, against the im2col products: ResNet-50's
/// padded 3×3 convolutions 8-13% faster at stride 1 and 21-26% at stride 2, 8% at 7×7 (pixels
/// as rows), the model 5% faster; Inception-V3's padded square and `1×7` windows 5-20% faster,
/// its `7×1` windows 10-12% slower (hence the row bound), the model 4% faster. Unpadded, two
/// threads: Inception-V3's `Conv2d_4a` (3×3, 80 → 192 channels) 2-8% faster, its stride-2
/// 3×3 convolutions 8-41% faster, the model about 2%.
fn window_direct(g: &Geometry) -> bool {
    !is_pointwise(g) && g.kernel.last().is_some_and(|&k| k >= DIRECT_MIN_WINDOW_ROW)
}

fn is_padded(g: &Geometry) -> bool {
    g.pads_begin.iter().chain(&g.pads_end).any(|&p| p != 0)
}

/// The input a direct convolution gathers from, and the geometry of the convolution over it:
/// `p.x` as it is, or (for [`Plan::input_channels_last`]) `Transpose(p.x, to_last)`, which
/// cancels with the `to_first` transpose it reads; when the convolution is padded, that
/// zero-padded by a `Pad` node hinted [`FusionHints::materialize`] (stored once, so the
/// convolution's loads need no guards), with the geometry of the same convolution over it
/// without padding.
fn direct_input(rw: &mut Rewriter, p: &Plan) -> Result<(ValueId, Geometry), GraphError> {
    let g = &p.geometry;
    let spatial = g.input.len();
    let x = if p.input_channels_last {
        rw.add_op("Transpose", perm_attrs(to_last(spatial + 2)), &[p.x])?
    } else {
        p.x
    };
    if !is_padded(g) {
        return Ok((x, g.clone()));
    }
    let as_i64 = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<i64>>();
    let pads: Vec<i64> = if p.input_channels_last {
        [
            vec![0],
            as_i64(&g.pads_begin),
            vec![0, 0],
            as_i64(&g.pads_end),
            vec![0],
        ]
        .concat()
    } else {
        [
            vec![0, 0],
            as_i64(&g.pads_begin),
            vec![0, 0],
            as_i64(&g.pads_end),
        ]
        .concat()
    };
    let pads = Tensor::new(vec![pads.len()], pads).map_err(|e| node_error(p, e))?;
    let pads = rw.add_constant("conv_pads", pads);
    let x = materialized_pad(rw, x, pads)?;
    Ok((x, unpadded_geometry(g)))
}

/// `g` over its input padded into memory: the same convolution without padding.
fn unpadded_geometry(g: &Geometry) -> Geometry {
    let input = (0..g.input.len())
        .map(|d| g.input[d] + g.pads_begin[d] + g.pads_end[d])
        .collect();
    let n = g.input.len();
    Geometry {
        input,
        pads_begin: vec![0; n],
        pads_end: vec![0; n],
        ..g.clone()
    }
}

/// `Pad(x, pads)` (zeros) hinted [`FusionHints::materialize`]: stored once, so a convolution reading it
/// needs no guards.
pub(super) fn materialized_pad(
    rw: &mut Rewriter,
    x: ValueId,
    pads: ValueId,
) -> Result<ValueId, GraphError> {
    let padded = rw.add_op("Pad", Attributes::new(), &[x, pads])?;
    rw.set_hints(
        padded,
        FusionHints {
            materialize: true,
            ..FusionHints::default()
        },
    )?;
    Ok(padded)
}

/// `p` reading its input channels-last (its weight's rows then ordered as the window's
/// elements, [`channels_innermost`]) or not.
fn with_input_layout(p: &Plan, channels_last: bool) -> Result<Plan, GraphError> {
    let weight = if channels_last {
        channels_innermost(&p.weight).map_err(|e| node_error(p, e))?
    } else {
        p.weight.clone()
    };
    Ok(Plan {
        weight,
        input_channels_last: channels_last,
        ..p.clone()
    })
}

/// A convolution weight `[OC, Cg, k…]` with each output channel's window reordered to `(k…,
/// c)`, the channel innermost: `[OC, ∏k·Cg]`.
fn channels_innermost(weight: &Tensor) -> Result<Tensor, hidet_graph::tensor::TensorError> {
    let shape = weight.shape();
    let (out_ch, channels) = (shape[0], shape[1]);
    let window: usize = shape[2..].iter().product();
    let permuted = grouped_transposed(weight, out_ch, channels, window)?;
    permuted.reshape(vec![out_ch, window * channels])
}

/// The offset tables of a direct convolution's pixels-as-rows operand over an unpadded
/// geometry `g` of a `[batch, channels, d…]` input, or of a `[batch, d…, channels]` one when
/// `channels_last` (see [`crate::graph_ops::offset_gather`]): the flat offset of each output
/// pixel's window origin, row-major over the image and the output, and of each window
/// element from the origin: row-major over `(c, k…)`, the channel then the kernel position
/// (the row order of `Im2Col`), for a channels-first input; over `(group, k…, c)` for a
/// channels-last one (`groups` dividing `channels`), so that each pixel's window in a group
/// is read in memory order (the weight's rows in the same order, [`channels_innermost`]). Both read off [`Geometry::offsets`] (kernel
/// position 0 for the pixels, output position 0 for the window). `None` when an offset does
/// not fit `i32`.
fn window_offsets(
    g: &Geometry,
    batch: usize,
    channels: usize,
    groups: usize,
    channels_last: bool,
) -> Option<(Vec<i32>, Vec<i32>)> {
    let plane = g.input_size();
    let image = plane.checked_mul(channels)?;
    i32::try_from(image.checked_mul(batch)?).ok()?;
    // Strides of a spatial position and of a channel in the input.
    let (position, channel) = if channels_last {
        (channels, 1)
    } else {
        (1, plane)
    };
    let offsets = g.offsets().ok()?;
    let (nk, no) = (g.kernel_size(), g.output_size());
    let pixels = (0..batch)
        .flat_map(|n| offsets[..no].iter().map(move |&o| n * image + o * position))
        .map(|o| i32::try_from(o).ok());
    let pixels = pixels.collect::<Option<Vec<i32>>>()?;
    let origin: Vec<usize> = (0..nk).map(|k| offsets[k * no] * position).collect();
    let window: Vec<usize> = if channels_last {
        let per_group = channels / groups;
        let origin = &origin;
        (0..groups)
            .flat_map(|g| {
                origin.iter().flat_map(move |&o| {
                    (g * per_group..(g + 1) * per_group).map(move |c| o + c * channel)
                })
            })
            .collect()
    } else {
        (0..channels)
            .flat_map(|c| origin.iter().map(move |&o| c * channel + o))
            .collect()
    };
    let window = window.into_iter().map(|o| i32::try_from(o).ok());
    Some((pixels, window.collect::<Option<Vec<i32>>>()?))
}

/// Adds the implicit-GEMM nodes of `p`; returns the value that replaces the convolution's
/// output.
fn rewrite(rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
    let g = &p.geometry;
    let out_ch = p.weight.shape()[0];
    let rank = g.output.len() + 2;
    if p.channels_last && is_pointwise(g) {
        let wmat_t = stored_weight(rw, p)?;
        let x_last = rw.add_op("Transpose", perm_attrs(to_last(rank)), &[p.x])?;
        let pixels = p.batch * g.output_size();
        let shape = rw.add_shape(&[pixels, p.channels]);
        let pixels = rw.add_op("Reshape", Attributes::new(), &[x_last, shape])?;
        let y = rw.add_op("MatMul", Attributes::new(), &[pixels, wmat_t])?;
        return finish_channels_last(rw, p, y, out_ch);
    }
    if p.direct && p.group != 1 {
        return grouped_direct_product(rw, p);
    }
    if p.direct {
        let offsets = window_offsets(
            &unpadded_geometry(g),
            p.batch,
            p.channels,
            1,
            p.input_channels_last,
        );
        // Im2Col (below, offsets beyond i32) reads channels-first data.
        let p = &with_input_layout(p, p.input_channels_last && offsets.is_some())?;
        let wmat_t = stored_weight(rw, p)?;
        let (x, unpadded) = direct_input(rw, p)?;
        let rows = match offsets {
            Some((pixels, window)) => {
                let pixels =
                    Tensor::new(vec![pixels.len()], pixels).map_err(|e| node_error(p, e))?;
                let window =
                    Tensor::new(vec![window.len()], window).map_err(|e| node_error(p, e))?;
                let pixels = rw.add_constant("conv_pixel_offsets", pixels);
                let window = rw.add_constant("conv_window_offsets", window);
                let inputs = [x, pixels, window];
                rw.add_domain_op(HIDET_DOMAIN, OFFSET_GATHER, Attributes::new(), &inputs)?
            }
            None => {
                let attrs = unpadded.explicit_attrs();
                let col = rw.add_domain_op(HIDET_DOMAIN, "Im2Col", attrs, &[x])?;
                rw.add_op("Transpose", swap(), &[col])?
            }
        };
        let y = rw.add_op("MatMul", Attributes::new(), &[rows, wmat_t])?;
        return finish_channels_last(rw, p, y, out_ch);
    }
    if is_pointwise(g) && p.batch != 1 && p.group == 1 && !p.channels_last && !few_pixels(g) {
        return batched_pointwise(rw, p);
    }
    if p.group != 1 && !p.channels_last {
        let mut out_shape = vec![p.batch, out_ch];
        out_shape.extend(&g.output);
        let y = grouped_product(rw, p)?;
        let y = add_bias(rw, p, y, [out_ch, 1])?;
        let shape = rw.add_shape(&out_shape);
        return rw.add_op("Reshape", Attributes::new(), &[y, shape]);
    }
    let col = columns(rw, p)?;
    if p.channels_last {
        let wmat_t = stored_weight(rw, p)?;
        let col_t = rw.add_op("Transpose", swap(), &[col])?;
        let y = rw.add_op("MatMul", Attributes::new(), &[col_t, wmat_t])?;
        return finish_channels_last(rw, p, y, out_ch);
    }
    let y = channels_first_product(rw, p, col)?;
    let y = add_bias(rw, p, y, [out_ch, 1])?;
    let mut out_shape = vec![p.batch, out_ch];
    out_shape.extend(&g.output);
    if p.batch == 1 {
        let shape = rw.add_shape(&out_shape);
        return rw.add_op("Reshape", Attributes::new(), &[y, shape]);
    }
    out_shape.swap(0, 1);
    let shape = rw.add_shape(&out_shape);
    let y = rw.add_op("Reshape", Attributes::new(), &[y, shape])?;
    let mut perm = vec![1, 0];
    perm.extend(2..rank as i64);
    rw.add_op("Transpose", perm_attrs(perm), &[y])
}

/// A pointwise convolution of a batch as a product batched over the images, each image's
/// `[C, ∏d]` read where it is: `MatMul(Wmat[OC, C], Reshape(X, [N, C, ∏d]))` (one weight
/// matrix broadcast over the images, so that the panel pass can store it as panels of rows),
/// `[N, OC, ∏d]`, plus the bias, reshaped to the output. Nothing is transposed.
fn batched_pointwise(rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
    let g = &p.geometry;
    let out_ch = p.weight.shape()[0];
    let pixels = g.output_size();
    let wmat_t = transposed(&p.weight, out_ch, p.channels).map_err(|e| node_error(p, e))?;
    let wmat_t = rw.add_constant("conv_wmat_t", wmat_t);
    let wmat = rw.add_op("Transpose", perm_attrs(vec![1, 0]), &[wmat_t])?;
    rw.set_hints(wmat, KEEP_LAYOUT)?;
    let shape = [p.batch, p.channels, pixels];
    let shape = rw.add_shape(&shape);
    let x = rw.add_op("Reshape", Attributes::new(), &[p.x, shape])?;
    let y = rw.add_op("MatMul", Attributes::new(), &[wmat, x])?;
    let y = add_bias(rw, p, y, [out_ch, 1])?;
    let mut out_shape = vec![p.batch, out_ch];
    out_shape.extend(&g.output);
    let shape = rw.add_shape(&out_shape);
    rw.add_op("Reshape", Attributes::new(), &[y, shape])
}

/// The column matrix of `p`, `[C·∏k, N·∏o]` (see [`crate::graph_ops::im2col`]): for a pointwise
/// kernel the input itself, read as `[C, N·∏d]`.
fn columns(rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
    let g = &p.geometry;
    if !is_pointwise(g) {
        return rw.add_domain_op(HIDET_DOMAIN, "Im2Col", g.explicit_attrs(), &[p.x]);
    }
    let pixels = g.output_size();
    let mut x = p.x;
    if p.batch != 1 {
        let shape = [p.batch, p.channels, pixels];
        let shape = rw.add_shape(&shape);
        x = rw.add_op("Reshape", Attributes::new(), &[x, shape])?;
        x = rw.add_op("Transpose", perm_attrs(vec![1, 0, 2]), &[x])?;
    }
    let shape = [p.channels, p.batch * pixels];
    let shape = rw.add_shape(&shape);
    rw.add_op("Reshape", Attributes::new(), &[x, shape])
}

/// Output channels per group from which a grouped convolution is a direct one (see
/// [`grouped_direct`]), and from which a strided one is.
const GROUPED_DIRECT_MIN_CHANNELS: usize = 16;
const GROUPED_STRIDED_DIRECT_MIN_CHANNELS: usize = 4;

/// Input channels per group from which a grouped direct convolution gathers a channels-last
/// input in place (a 64-byte line of them): with fewer, each group's gather would use a
/// part of every line it reads, and the other groups, later products of the batch, read the
/// line again. Measured on RegNet-Y-400MF (8-channel groups, batch 8, AVX2, 2 threads): its
/// first grouped convolution 2.3 ms reading channels-first, 7.4 ms in place (window
/// channel-innermost), more than the 1.0 ms its producer's channels-first store costs.
const GROUPED_CHANNELS_LAST_MIN_CHANNELS: usize = 16;

/// Whether a grouped convolution (not depthwise) runs as a direct one, a product batched over
/// its groups with the pixels as rows (see [`grouped_direct_product`]), rather than as the
/// channels-first product of each image's group ([`grouped_product`]): its window rows are at
/// least [`DIRECT_MIN_WINDOW_ROW`] long (as [`window_direct`]), each group has at least
/// [`GROUPED_DIRECT_MIN_CHANNELS`] output channels (the product's columns: a group's output
/// channels fill the vectors), or [`GROUPED_STRIDED_DIRECT_MIN_CHANNELS`] at a stride (where
/// the channels-first product's columns gather strided elements), and the offset tables fit
/// `i32`. Measured on AVX-512, 2 threads, one 3×3 convolution, batch 1 / batch 8, direct
/// against channels-first: 16-channel groups 14×14 0.16 / 1.38 ms against 0.21 / 1.63, 32
/// at 7×7 0.16 / 1.47 against 0.27 / 2.05; 8-channel groups at stride 2, 56×56, 0.29 / 3.4
/// against 0.48 / 4.5; 4-channel groups at stride 1, 56×56, 0.64 / 6.4 against 0.27 / 2.2.
fn grouped_direct(p: &Plan) -> bool {
    let group_out = p.weight.shape()[0] / p.group;
    let strided = p.geometry.strides.iter().any(|&s| s > 1);
    let min_channels = if strided {
        GROUPED_STRIDED_DIRECT_MIN_CHANNELS
    } else {
        GROUPED_DIRECT_MIN_CHANNELS
    };
    window_direct(&p.geometry)
        && group_out >= min_channels
        && window_offsets(
            &unpadded_geometry(&p.geometry),
            p.batch,
            p.channels,
            p.group,
            false,
        )
        .is_some()
}

/// A grouped direct convolution ([`grouped_direct`]): the input padded into memory, the
/// pixels-as-rows operand of each group gathered through one row table and the group's row of
/// a `[G, C/G·∏k]` window table (`hidet::OffsetGather`, `[G, N·∏o, C/G·∏k]`), times the
/// group's transposed weight, `[G, C/G·∏k, OC/G]`; the product `[G, N·∏o, OC/G]` is
/// transposed to the channels-last `[N·∏o, OC]` and finished as the ungrouped direct ones.
fn grouped_direct_product(rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
    let p = &with_input_layout(p, p.input_channels_last)?;
    let out_ch = p.weight.shape()[0];
    let (groups, group_out) = (p.group, out_ch / p.group);
    let depth = p.weight.numel() / out_ch;
    let (x, unpadded) = direct_input(rw, p)?;
    let Some((pixels, window)) = window_offsets(
        &unpadded,
        p.batch,
        p.channels,
        groups,
        p.input_channels_last,
    ) else {
        return Err(GraphError::Node {
            node: p.node.clone(),
            op_type: "Conv".into(),
            source: hidet_graph::operator::OpError::Shape(
                "offsets of a direct grouped convolution beyond i32".into(),
            ),
        });
    };
    let pixel_count = pixels.len();
    let pixels = Tensor::new(vec![pixel_count], pixels).map_err(|e| node_error(p, e))?;
    let window = Tensor::new(vec![groups, depth], window).map_err(|e| node_error(p, e))?;
    let pixels = rw.add_constant("conv_pixel_offsets", pixels);
    let window = rw.add_constant("conv_window_offsets", window);
    let rows = rw.add_domain_op(
        HIDET_DOMAIN,
        OFFSET_GATHER,
        Attributes::new(),
        &[x, pixels, window],
    )?;
    let wmat_t =
        grouped_transposed(&p.weight, groups, group_out, depth).map_err(|e| node_error(p, e))?;
    let wmat_t = rw.add_constant("conv_wmat_t", wmat_t);
    let y = rw.add_op("MatMul", Attributes::new(), &[rows, wmat_t])?;
    let y = rw.add_op("Transpose", perm_attrs(vec![1, 0, 2]), &[y])?;
    let shape = rw.add_shape(&[pixel_count, out_ch]);
    let y = rw.add_op("Reshape", Attributes::new(), &[y, shape])?;
    finish_channels_last(rw, p, y, out_ch)
}

/// `Wmat × col`, `[OC, N·∏o]` (an ungrouped convolution). The weight is stored transposed and
/// read through a transpose kept as a layout.
fn channels_first_product(
    rw: &mut Rewriter,
    p: &Plan,
    col: ValueId,
) -> Result<ValueId, GraphError> {
    let wmat_t = stored_weight(rw, p)?;
    let wmat = rw.add_op("Transpose", swap(), &[wmat_t])?;
    rw.set_hints(wmat, KEEP_LAYOUT)?;
    rw.add_op("MatMul", Attributes::new(), &[wmat, col])
}

/// A grouped convolution's channels-first product, batched over the images and the groups:
/// `[N·G, OC/G, C/G·∏k] × [N·G, C/G·∏k, ∏o]`, `[N, OC, ∏o]`: the weight's `G` matrices repeated
/// for every image (a constant), times each image's group's columns, the input read as `[N·G,
/// C/G, d…]` by a batched `hidet::Im2Col`. Every product reads the pixels of one image: with the
/// images folded into the columns, a column tile crossing images gathers through a division by
/// the image's pixels per element (ResNeXt-50's 4-channel groups at batch 8, 7.35 ms folded, see
/// BENCHMARKS.md).
fn grouped_product(rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
    let out_ch = p.weight.shape()[0];
    let depth = p.weight.numel() / out_ch;
    let (groups, group_out) = (p.group, out_ch / p.group);
    let products = p.batch * groups;
    let wmat_t =
        grouped_transposed(&p.weight, groups, group_out, depth).map_err(|e| node_error(p, e))?;
    let per_image = wmat_t.as_slice::<f32>().map_err(|e| node_error(p, e))?;
    let wmat_t = Tensor::new(vec![products, depth, group_out], per_image.repeat(p.batch))
        .map_err(|e| node_error(p, e))?;
    let wmat_t = rw.add_constant("conv_wmat_t", wmat_t);
    let wmat = rw.add_op("Transpose", perm_attrs(vec![0, 2, 1]), &[wmat_t])?;
    rw.set_hints(wmat, KEEP_LAYOUT)?;
    let mut shape = vec![products, p.channels / groups];
    shape.extend(&p.geometry.input);
    let shape = rw.add_shape(&shape);
    let x = rw.add_op("Reshape", Attributes::new(), &[p.x, shape])?;
    let mut attrs = p.geometry.explicit_attrs();
    attrs.insert("batched", Attribute::Int(1));
    let col = rw.add_domain_op(HIDET_DOMAIN, "Im2Col", attrs, &[x])?;
    let y = rw.add_op("MatMul", Attributes::new(), &[wmat, col])?;
    let shape = rw.add_shape(&[p.batch, out_ch, p.geometry.output_size()]);
    rw.add_op("Reshape", Attributes::new(), &[y, shape])
}

/// The f32 `weight` `[G·OCg, Kg…]`, read as `G` row-major `[OCg, Kg]` matrices, each
/// transposed: `[G, Kg, OCg]`.
fn grouped_transposed(
    weight: &Tensor,
    groups: usize,
    rows: usize,
    cols: usize,
) -> Result<Tensor, hidet_graph::tensor::TensorError> {
    let w = weight.as_slice::<f32>()?;
    let per_group = rows * cols;
    let data: Vec<f32> = (0..groups * per_group)
        .map(|i| {
            let (grp, at) = (i / per_group, i % per_group);
            w[grp * per_group + (at % rows) * cols + at / rows]
        })
        .collect();
    Tensor::new(vec![groups, cols, rows], data)
}

/// The product `y` (`[N·∏o, OC]`, pixels as rows) plus the bias, reshaped to the channels-last
/// output `[N, o…, OC]` and transposed back to `[N, OC, o…]`.
fn finish_channels_last(
    rw: &mut Rewriter,
    p: &Plan,
    y: ValueId,
    out_ch: usize,
) -> Result<ValueId, GraphError> {
    let y = add_bias(rw, p, y, [1, out_ch])?;
    let mut shape = vec![p.batch];
    shape.extend(&p.geometry.output);
    shape.push(out_ch);
    let rank = shape.len();
    let shape = rw.add_shape(&shape);
    let y = rw.add_op("Reshape", Attributes::new(), &[y, shape])?;
    rw.add_op("Transpose", perm_attrs(to_first(rank)), &[y])
}

/// The ungrouped weight of `p` as a new constant, stored transposed: `[C·∏k, OC]`.
fn stored_weight(rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
    let out_ch = p.weight.shape()[0];
    let rows = p.weight.numel() / out_ch;
    let wmat_t = transposed(&p.weight, out_ch, rows).map_err(|e| node_error(p, e))?;
    Ok(rw.add_constant("conv_wmat_t", wmat_t))
}

/// `y + bias` with the bias reshaped to `bias_shape`, or `y` when the convolution has none.
fn add_bias(
    rw: &mut Rewriter,
    p: &Plan,
    y: ValueId,
    bias_shape: [usize; 2],
) -> Result<ValueId, GraphError> {
    let Some(b) = p.bias else {
        return Ok(y);
    };
    let bias = match rw.constant(b) {
        Some(t) => {
            let t = t
                .reshape(bias_shape.to_vec())
                .map_err(|e| node_error(p, e))?;
            rw.add_constant("conv_bias", t)
        }
        None => {
            let shape = rw.add_shape(&bias_shape);
            rw.add_op("Reshape", Attributes::new(), &[b, shape])?
        }
    };
    rw.add_op("Add", Attributes::new(), &[y, bias])
}

/// A tensor error while rewriting the convolution of `p`, as a graph error naming it.
fn node_error(p: &Plan, e: hidet_graph::tensor::TensorError) -> GraphError {
    GraphError::Node {
        node: p.node.clone(),
        op_type: "Conv".into(),
        source: e.into(),
    }
}

/// The attributes of a 2-D transpose.
fn swap() -> Attributes {
    let mut attrs = Attributes::new();
    attrs.insert("perm", Attribute::Ints(vec![1, 0]));
    attrs
}

/// The f32 `weight`, read as a row-major `[rows, cols]` matrix, transposed to `[cols, rows]`.
pub(super) fn transposed(
    weight: &Tensor,
    rows: usize,
    cols: usize,
) -> Result<Tensor, hidet_graph::tensor::TensorError> {
    let w = weight.as_slice::<f32>()?;
    let data: Vec<f32> = (0..rows * cols)
        .map(|i| w[(i % rows) * cols + i / rows])
        .collect();
    Tensor::new(vec![cols, rows], data)
}
