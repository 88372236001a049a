//! 3×3 convolutions at stride 1 by Winograd's minimal filtering, `F(m×m, 3×3)`, as three
//! matrix products.
//!
//! Each `m×m` tile of the output is computed from the `(m+2)×(m+2)` tile of the (padded)
//! input under it: `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` (Lavin and Gray, 2016). With `n = m+2`
//! and the `n²` positions `ξ` of the transformed tile, the products are
//!
//! ```text
//! Xp = Pad(X) (marked materialize)                       [1, C, m·TY + 2, m·TX + 2]
//! D  = hidet::OffsetGather(Xp, tile element, tile origin) [n², C·T]   T = TY·TX tiles
//! V  = MatMul(Bk, D)                                      [n², C·T]   Bk = Bᵀ ⊗ Bᵀ  [n², n²]
//! M  = MatMul(U, Reshape(V, [n², C, T]))                  [n², OC, T] U[ξ] = (G g Gᵀ)[ξ]
//! Yt = MatMul(Ak, Reshape(M, [n², OC·T]))                 [m², OC·T]  Ak = Aᵀ ⊗ Aᵀ  [m², n²]
//! Y  = Slice(Reshape(Transpose(Reshape(Yt, [m, m, OC, TY, TX]), [2, 3, 0, 4, 1]),
//!            [1, OC, m·TY, m·TX]), to the output) + bias
//! ```
//!
//! The middle product does `n²·OC·C·T` multiply-adds where the convolution does
//! `9·OC·C·m²·T`: 2.25× fewer for `m = 2`, 4× for `m = 4`. The transforms are small
//! products by constant matrices over `n²` rows; the output's permutation is the last
//! product's epilogue. `U` is computed once here, in f64.

use crate::attribute::Attributes;
use crate::fusion::MATERIALIZE;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::kernels::window::Geometry;
use crate::ops::im2col::HIDET_DOMAIN;
use crate::ops::offset_gather::OP_TYPE as OFFSET_GATHER;
use crate::passes::channels_last::perm_attrs;
use crate::passes::conv_node::{single_image_conv, ConvNode};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::{Tensor, TensorError};
use crate::Attribute;

/// Rewrites single-image f32 `Conv` nodes (`single_image_conv`) with a 3×3 window, stride 1,
/// dilation 1 and `group == 1` into the Winograd products of the module docs, with `m = 4`
/// when that gives at least `min_tiles` tiles, else `m = 2` when that does, and only when
/// `C·OC / (C + OC)` is at least `min_channel_harmonic`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvWinograd {
    /// Output tiles below which a convolution is left to the implicit GEMM.
    pub min_tiles: usize,
    /// The lower bound on `C·OC / (C + OC)` (input and output channels).
    pub min_channel_harmonic: usize,
}

/// Tiles below which the per-position products are too narrow (and their `n²/9` times
/// larger weights too little reused) to gain: measured on AVX2, two threads, 3×3
/// convolutions with a ReLU against the direct convolution, `F(4×4)` at 14² × 256 channels
/// (16 tiles) 1.4× slower, `F(2×2)` there (49 tiles) 0.82×.
pub const WINOGRAD_MIN_TILES: usize = 36;

/// The default lower bound on `C·OC / (C + OC)`: the transforms touch `C + OC` channels per
/// tile, the product `C·OC` pairs. Measured as above: 32 → 32 and 32 → 64 channels at 147²
/// 1.4× slower, 64 → 64 at 56² 0.62×, 64 → 96 at 35² 0.78×, 80 → 192 at 71² 0.76×,
/// 128 → 128 at 28² 0.64×, 96 → 96 at 35² 0.66×.
pub const WINOGRAD_MIN_CHANNEL_HARMONIC: usize = 30;

impl Default for ConvWinograd {
    /// [`WINOGRAD_MIN_TILES`] and [`WINOGRAD_MIN_CHANNEL_HARMONIC`].
    fn default() -> Self {
        ConvWinograd {
            min_tiles: WINOGRAD_MIN_TILES,
            min_channel_harmonic: WINOGRAD_MIN_CHANNEL_HARMONIC,
        }
    }
}

impl GraphPass for ConvWinograd {
    fn name(&self) -> &'static str {
        "conv-winograd"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let Some(conv) = single_image_conv(&rw, NodeId(i)) else {
                continue;
            };
            let Some(tile) = self.tile(&conv) else {
                continue;
            };
            rw.focus(NodeId(i));
            let out = rewrite(&mut rw, &conv, tile).map_err(|e| match e {
                Failure::Graph(e) => e,
                Failure::Tensor(e) => GraphError::Node {
                    node: conv.name.clone(),
                    op_type: "Conv".into(),
                    source: e.into(),
                },
            })?;
            rw.replace(conv.y, out);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

impl ConvWinograd {
    /// The output tile `m` for `conv`, or `None` when the rewrite does not apply.
    fn tile(&self, conv: &ConvNode) -> Option<usize> {
        let g = &conv.geometry;
        let out_ch = conv.weight.shape()[0];
        let applies = g.kernel == [3, 3]
            && g.strides == [1, 1]
            && g.dilations == [1, 1]
            && conv.group == 1
            && conv.weight.shape()[1] == conv.channels();
        if !applies {
            return None;
        }
        let (c, oc) = (conv.channels(), out_ch);
        if c * oc < self.min_channel_harmonic * (c + oc) {
            return None;
        }
        let tiles = |m: usize| g.output.iter().map(|&o| o.div_ceil(m)).product::<usize>();
        let m = [4, 2].into_iter().find(|&m| tiles(m) >= self.min_tiles)?;
        let plane = (g.output[0].div_ceil(m) * m + 2) * (g.output[1].div_ceil(m) * m + 2);
        let offsets_fit = i32::try_from(plane.checked_mul(conv.channels())?).is_ok();
        offsets_fit.then_some(m)
    }
}

enum Failure {
    Graph(GraphError),
    Tensor(TensorError),
}

impl From<GraphError> for Failure {
    fn from(e: GraphError) -> Self {
        Failure::Graph(e)
    }
}

impl From<TensorError> for Failure {
    fn from(e: TensorError) -> Self {
        Failure::Tensor(e)
    }
}

/// `Bᵀ`, `G` and `Aᵀ` of `F(m×m, 3×3)` for `m` = 2 or 4, row-major: `[n, n]`, `[n, 3]`,
/// `[m, n]` with `n = m + 2`.
fn matrices(m: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    match m {
        2 => (
            vec![
                1., 0., -1., 0., //
                0., 1., 1., 0., //
                0., -1., 1., 0., //
                0., 1., 0., -1.,
            ],
            vec![
                1., 0., 0., //
                0.5, 0.5, 0.5, //
                0.5, -0.5, 0.5, //
                0., 0., 1.,
            ],
            vec![
                1., 1., 1., 0., //
                0., 1., -1., -1.,
            ],
        ),
        _ => (
            vec![
                4., 0., -5., 0., 1., 0., //
                0., -4., -4., 1., 1., 0., //
                0., 4., -4., -1., 1., 0., //
                0., -2., -1., 2., 1., 0., //
                0., 2., -1., -2., 1., 0., //
                0., 4., 0., -5., 0., 1.,
            ],
            vec![
                1. / 4.,
                0.,
                0., //
                -1. / 6.,
                -1. / 6.,
                -1. / 6., //
                -1. / 6.,
                1. / 6.,
                -1. / 6., //
                1. / 24.,
                1. / 12.,
                1. / 6., //
                1. / 24.,
                -1. / 12.,
                1. / 6., //
                0.,
                0.,
                1.,
            ],
            vec![
                1., 1., 1., 1., 1., 0., //
                0., 1., -1., 2., -2., 0., //
                0., 1., 1., 4., 4., 0., //
                0., 1., -1., 8., -8., 1.,
            ],
        ),
    }
}

/// `P ⊗ P` of a row-major `[r, c]` matrix `p`: `[r², c²]`, entry `((a, b), (i, j))` =
/// `p[a][i]·p[b][j]`, as f32.
fn kron_square(p: &[f64], r: usize, c: usize) -> Result<Tensor, TensorError> {
    let mut k = Vec::with_capacity(r * r * c * c);
    for a in 0..r {
        for b in 0..r {
            for i in 0..c {
                for j in 0..c {
                    k.push((p[a * c + i] * p[b * c + j]) as f32);
                }
            }
        }
    }
    Tensor::new(vec![r * r, c * c], k)
}

/// The transformed weights `U[ξ][oc][c] = (G g[oc][c] Gᵀ)[ξ]`, `[n², OC, C]`, of a
/// `[OC, C, 3, 3]` weight.
fn transformed_weight(weight: &Tensor, g: &[f64], n: usize) -> Result<Tensor, TensorError> {
    let w = weight.as_slice::<f32>()?;
    let (oc, c) = (weight.shape()[0], weight.shape()[1]);
    let mut u = vec![0f32; n * n * oc * c];
    for o in 0..oc {
        for ch in 0..c {
            let k = &w[(o * c + ch) * 9..][..9];
            // t = G · k : [n, 3]
            let mut t = vec![0f64; n * 3];
            for a in 0..n {
                for j in 0..3 {
                    t[a * 3 + j] = (0..3).map(|i| g[a * 3 + i] * k[i * 3 + j] as f64).sum();
                }
            }
            for a in 0..n {
                for b in 0..n {
                    let v: f64 = (0..3).map(|j| t[a * 3 + j] * g[b * 3 + j]).sum();
                    u[((a * n + b) * oc + o) * c + ch] = v as f32;
                }
            }
        }
    }
    Tensor::new(vec![n * n, oc, c], u)
}

fn int_const(rw: &mut Rewriter, hint: &str, dims: &[i64]) -> Result<ValueId, TensorError> {
    let t = Tensor::new(vec![dims.len()], dims.to_vec())?;
    Ok(rw.add_constant(hint, t))
}

fn i32_const(rw: &mut Rewriter, hint: &str, v: Vec<i32>) -> Result<ValueId, TensorError> {
    let t = Tensor::new(vec![v.len()], v)?;
    Ok(rw.add_constant(hint, t))
}

fn reshape(rw: &mut Rewriter, x: ValueId, dims: &[usize]) -> Result<ValueId, Failure> {
    let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let shape = int_const(rw, "shape", &dims)?;
    Ok(rw.add_op("Reshape", Attributes::new(), &[x, shape])?)
}

/// Adds the Winograd nodes of `conv` with output tile `m`; returns the value that replaces
/// the convolution's output.
fn rewrite(rw: &mut Rewriter, conv: &ConvNode, m: usize) -> Result<ValueId, Failure> {
    let g: &Geometry = &conv.geometry;
    let n = m + 2;
    let (c, oc) = (conv.channels(), conv.weight.shape()[0]);
    let (ty, tx) = (g.output[0].div_ceil(m), g.output[1].div_ceil(m));
    let (hp, wp) = (ty * m + 2, tx * m + 2);
    let pads_end = [
        hp - g.input[0] - g.pads_begin[0],
        wp - g.input[1] - g.pads_begin[1],
    ];
    let xp = if g.pads_begin.iter().chain(&pads_end).any(|&p| p != 0) {
        let pads = [
            0,
            0,
            g.pads_begin[0] as i64,
            g.pads_begin[1] as i64,
            0,
            0,
            pads_end[0] as i64,
            pads_end[1] as i64,
        ];
        let pads = int_const(rw, "winograd_pads", &pads)?;
        let mut attrs = Attributes::new();
        attrs.insert(MATERIALIZE, Attribute::Int(1));
        rw.add_op("Pad", attrs, &[conv.x, pads])?
    } else {
        conv.x
    };
    let element: Vec<i32> = (0..n * n).map(|e| ((e / n) * wp + e % n) as i32).collect();
    let origin: Vec<i32> = (0..c * ty * tx)
        .map(|f| {
            let (ch, t) = (f / (ty * tx), f % (ty * tx));
            (ch * hp * wp + (t / tx) * m * wp + (t % tx) * m) as i32
        })
        .collect();
    let element = i32_const(rw, "winograd_tile_elements", element)?;
    let origin = i32_const(rw, "winograd_tile_origins", origin)?;
    let d = rw.add_domain_op(
        HIDET_DOMAIN,
        OFFSET_GATHER,
        Attributes::new(),
        &[xp, element, origin],
    )?;
    let (bt, gm, at) = matrices(m);
    let bk = rw.add_constant("winograd_input_transform", kron_square(&bt, n, n)?);
    let v = rw.add_op("MatMul", Attributes::new(), &[bk, d])?;
    let v = reshape(rw, v, &[n * n, c, ty * tx])?;
    let u = transformed_weight(&conv.weight, &gm, n)?;
    let u = rw.add_constant("winograd_weight", u);
    let prod = rw.add_op("MatMul", Attributes::new(), &[u, v])?;
    let prod = reshape(rw, prod, &[n * n, oc * ty * tx])?;
    let ak = rw.add_constant("winograd_output_transform", kron_square(&at, m, n)?);
    let y = rw.add_op("MatMul", Attributes::new(), &[ak, prod])?;
    let y = reshape(rw, y, &[m, m, oc, ty, tx])?;
    let y = rw.add_op("Transpose", perm_attrs(vec![2, 3, 0, 4, 1]), &[y])?;
    let mut y = reshape(rw, y, &[1, oc, ty * m, tx * m])?;
    if let Some(b) = conv.bias {
        let bias = match rw.constant(b) {
            Some(t) => {
                let t = t.reshape(vec![1, oc, 1, 1])?;
                rw.add_constant("conv_bias", t)
            }
            None => reshape(rw, b, &[1, oc, 1, 1])?,
        };
        y = rw.add_op("Add", Attributes::new(), &[y, bias])?;
    }
    if ty * m != g.output[0] || tx * m != g.output[1] {
        let starts = int_const(rw, "winograd_crop_starts", &[0, 0])?;
        let ends = int_const(
            rw,
            "winograd_crop_ends",
            &[g.output[0] as i64, g.output[1] as i64],
        )?;
        let axes = int_const(rw, "winograd_crop_axes", &[2, 3])?;
        y = rw.add_op("Slice", Attributes::new(), &[y, starts, ends, axes])?;
    }
    Ok(y)
}
