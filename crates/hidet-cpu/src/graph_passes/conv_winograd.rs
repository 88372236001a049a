//! 3×3, 1×7 and 7×1 convolutions at stride 1 by Winograd's minimal filtering, as three
//! matrix products.
//!
//! Along each spatial axis a 1-D transform `F(m, r)` computes `m` outputs of an `r`-tap
//! window from `n = m + r − 1` inputs: `y = Aᵀ[(G g) ⊙ (Bᵀ d)]` (Lavin and Gray, 2016;
//! `F(2, 3)`, `F(4, 3)` with their matrices, `F(2, 7)` and `F(4, 7)` by Toom-Cook, and the
//! identity `F(1, 1)` along a window of one). The 2-D transform is their tensor product:
//! each `m₀×m₁` tile of the output comes from the `n₀×n₁` tile of the (padded) input under
//! it. With the `N = n₀·n₁` positions `ξ` of a transformed tile, the products are
//!
//! ```text
//! Xp = Pad(X) (hinted materialize)                       [B, C, m₀·T₀ + r₀ − 1, m₁·T₁ + r₁ − 1]
//! D  = hidet::OffsetGather(Xp, tile element, tile origin) [N, C·T]    T = B·T₀·T₁ tiles
//! V  = MatMul(Bk, D)                                      [N, C·T]    Bk = Bᵀ₀ ⊗ Bᵀ₁  [N, N]
//! M  = MatMul(Transpose(Reshape(V, [N, C, T])), Uᵀ)        [N, T, OC]  Uᵀ[ξ] = (G₀ g G₁ᵀ)[ξ]ᵀ
//! Y' = MatMul(Transpose(Reshape(M, [N, T·OC])), Akᵀ)      [T·OC, m₀·m₁]  Ak = Aᵀ₀ ⊗ Aᵀ₁
//! Y  = Slice(Reshape(Transpose(Reshape(Y', [B, T₀, T₁, OC, m₀, m₁]), [0, 3, 1, 4, 2, 5]),
//!            [B, OC, m₀·T₀, m₁·T₁]) + bias, to the output)
//! ```
//!
//! for a batch of `B` images: the tiles of every image are the products' rows (or columns).
//!
//! The middle product does `N·OC·C·T` multiply-adds where the convolution does
//! `r₀r₁·OC·C·m₀m₁·T`: 2.25× fewer for `F(2×2, 3×3)`, 4× for `F(4×4, 3×3)`, 1.75× for
//! `F(2, 7)`, 2.8× for `F(4, 7)`. The transforms are small products by constant matrices over
//! `N` positions; the output's permutation, the bias and what follows element-wise are the
//! last product's epilogue (see `hidet_graph::fusion::index_map::invert_chain`). `U` is computed
//! once here, in f64.
//!
//! The last two products have the tiles as rows: the per-position product reads the
//! transformed weights in place, as panels of output channels
//! (`super::PanelConstantWeights`, no packing per run), its ragged edge is a row of tiles
//! rather than a column, and it stores its result in order; the output transform stores each
//! row (a tile of one channel) as `m₀` runs of `m₁` pixels rather than scattering pixel by
//! pixel. Both read their left operand transposed: the two inner `Transpose`s are hinted
//! `prologue_only` ([`hidet_graph::FusionHints`]), so that the producers store `V` and `M` in
//! order and the products pack
//! them column by column. Measured against both products with the tiles as columns (AVX2,
//! two threads, one convolution with its ReLU): 0.81× (56² × 64), 0.83× (28² × 128), 0.96×
//! (14² × 256), 0.85–0.89× (35²), 0.87× (71², 80 → 192), 0.83–0.89× (17², 1×7).

use crate::graph_ops::offset_gather::OP_TYPE as OFFSET_GATHER;
use crate::graph_ops::HIDET_DOMAIN;
use crate::graph_passes::channels_last::perm_attrs;
use crate::graph_passes::conv_implicit_gemm::{materialized_pad, transposed};
use hidet_graph::attribute::Attributes;
use hidet_graph::graph::{Graph, GraphError, NodeId, ValueId};
use hidet_graph::kernels::window::Geometry;
use hidet_graph::passes::conv_node::{static_conv, ConvNode};
use hidet_graph::passes::rewrite::Rewriter;
use hidet_graph::passes::GraphPass;
use hidet_graph::tensor::{Tensor, TensorError};
use hidet_graph::FusionHints;

/// Rewrites f32 `Conv` nodes of a static shape (`static_conv`) with a 3×3, 1×7 or 7×1
/// window, stride 1, dilation 1 and `group == 1` into the Winograd products of the module
/// docs, with `m = 4` along the windowed axes when that gives at least `min_tiles` tiles
/// (over the whole batch),
/// else `m = 2` when that does, and only when `C·OC / (C + OC)` is at least
/// `min_channel_harmonic`.
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
/// (16 tiles) 1.4× slower, `F(2×2)` there (49 tiles) 0.82×. Inception-V3's 17² 1×7 and 7×1
/// convolutions (85 tiles of 4) with `F(4, 7)`: 0.65–0.92× (128 and 192 channels).
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
        let mut rw = Rewriter::with_registry(graph, crate::graph_ops::registry());
        for i in 0..rw.graph().nodes().len() {
            let Some(conv) = static_conv(&rw, NodeId(i)) else {
                continue;
            };
            if only_quantized(rw.graph(), conv.y) {
                continue;
            }
            let Some(axes) = self.plan(&conv) else {
                continue;
            };
            rw.focus(NodeId(i));
            let out = rewrite(&mut rw, &conv, &axes).map_err(|e| match e {
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

/// Whether every use of `y` quantizes it (`QuantizeLinear`, as in a QDQ model) and it is no
/// graph output. Such a convolution is left to the direct or implicit-GEMM product: the
/// Winograd output transform's epilogue writes each tile's outputs scattered over four
/// image rows, a loop the C compiler leaves scalar, and a quantization there (a division,
/// a rounding and a saturation per element, twice with the residual of a ResNet block)
/// costs more than the transform saves: ResNet-18's QDQ export at batch 1, one thread, took
/// 31–36 ms in its kernels with these convolutions as Winograd's, 29–31 ms without.
fn only_quantized(graph: &Graph, y: ValueId) -> bool {
    let users = &graph.value(y).users;
    !users.is_empty()
        && !graph.outputs().contains(&y)
        && users.iter().all(|&(n, _)| {
            let node = &graph.nodes()[n.0];
            node.domain.is_empty() && node.op_type == "QuantizeLinear"
        })
}

impl ConvWinograd {
    /// The transforms of `conv` along its two spatial axes, or `None` when the rewrite does
    /// not apply.
    fn plan(&self, conv: &ConvNode) -> Option<[Axis; 2]> {
        let g = &conv.geometry;
        let out_ch = conv.weight.shape()[0];
        let applies = g.kernel.len() == 2
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
        let tiles = |m: [usize; 2]| {
            conv.batch()
                * (0..2)
                    .map(|d| g.output[d].div_ceil(m[d]))
                    .product::<usize>()
        };
        let tile_sizes: &[[usize; 2]] = match g.kernel.as_slice() {
            [3, 3] => &[[4, 4], [2, 2]],
            [1, 7] => &[[1, 4], [1, 2]],
            [7, 1] => &[[4, 1], [2, 1]],
            _ => return None,
        };
        let m = *tile_sizes.iter().find(|&&m| tiles(m) >= self.min_tiles)?;
        let axes = [0, 1].map(|d| Axis::new(m[d], g.kernel[d]));
        let axes = [axes[0].clone()?, axes[1].clone()?];
        let plane: usize = (0..2)
            .map(|d| g.output[d].div_ceil(m[d]) * m[d] + axes[d].r - 1)
            .product();
        let elements = plane
            .checked_mul(conv.channels())?
            .checked_mul(conv.batch())?;
        let offsets_fit = i32::try_from(elements).is_ok();
        offsets_fit.then_some(axes)
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

/// The 1-D minimal filtering `F(m, r)` along one axis: `m` outputs of an `r`-tap window
/// from `n = m + r − 1` inputs, `y = Aᵀ[(G g) ⊙ (Bᵀ d)]`.
#[derive(Clone, Debug)]
struct Axis {
    m: usize,
    r: usize,
    n: usize,
    /// `[n, n]`, row-major.
    bt: Vec<f64>,
    /// `[n, r]`.
    g: Vec<f64>,
    /// `[m, n]`.
    at: Vec<f64>,
}

impl Axis {
    /// `F(m, r)` for `(m, r)` in `(1, 1)` (the identity), `(2, 3)`, `(4, 3)` (Lavin and Gray's
    /// matrices) and `(2, 7)` (Toom-Cook over 0, ±1, ±2, ±1/2 and infinity); `None` otherwise.
    fn new(m: usize, r: usize) -> Option<Axis> {
        let (bt, g, at) = match (m, r) {
            (1, 1) => (vec![1.], vec![1.], vec![1.]),
            (2 | 4, 3) => three_tap(m),
            (2, 7) => toom_cook(2, 7, &[0., 1., -1., 2., -2., 0.5, -0.5])?,
            (4, 7) => toom_cook(4, 7, &[0., 1., -1., 2., -2., 0.5, -0.5, 1.5, -1.5])?,
            _ => return None,
        };
        Some(Axis {
            m,
            r,
            n: m + r - 1,
            bt,
            g,
            at,
        })
    }
}

/// `Bᵀ`, `G` and `Aᵀ` of `F(m, 3)` for `m` = 2 or 4 (Lavin and Gray), row-major: `[n, n]`,
/// `[n, 3]`, `[m, n]` with `n = m + 2`.
fn three_tap(m: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
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

/// `Bᵀ`, `G` and `Aᵀ` of `F(m, r)` by Toom-Cook over the `m + r − 2` finite `points` and
/// infinity: `Aᵀ[i][k] = p_k^i`, `G[k][j] = p_k^j / ∏_{l≠k}(p_k − p_l)` (the point at
/// infinity reads the last coefficient), and `Bᵀ` the solution of `Aᵀ[(G g) ⊙ (Bᵀ d)] =
/// g ⋆ d` for every `g` and `d` (one least-squares system per input position, exact for
/// distinct points). `None` when the points are not distinct.
fn toom_cook(m: usize, r: usize, points: &[f64]) -> Option<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let n = m + r - 1;
    if points.len() != n - 1 {
        return None;
    }
    let mut at = vec![0f64; m * n];
    let mut g = vec![0f64; n * r];
    for (k, &p) in points.iter().enumerate() {
        let f: f64 = points
            .iter()
            .enumerate()
            .filter(|&(l, _)| l != k)
            .map(|(_, &q)| p - q)
            .product();
        if f == 0.0 {
            return None;
        }
        for i in 0..m {
            at[i * n + k] = p.powi(i as i32);
        }
        for j in 0..r {
            g[k * r + j] = p.powi(j as i32) / f;
        }
    }
    at[(m - 1) * n + n - 1] = 1.0;
    g[(n - 1) * r + r - 1] = 1.0;
    // For input position l: Σ_k Aᵀ[i][k]·G[k][j]·Bᵀ[k][l] = [l == i + j] for all i, j.
    let mut bt = vec![0f64; n * n];
    for l in 0..n {
        let rows: Vec<(Vec<f64>, f64)> = (0..m)
            .flat_map(|i| (0..r).map(move |j| (i, j)))
            .map(|(i, j)| {
                let coef = (0..n).map(|k| at[i * n + k] * g[k * r + j]).collect();
                (coef, f64::from(u8::from(l == i + j)))
            })
            .collect();
        let x = least_squares(&rows, n)?;
        for k in 0..n {
            bt[k * n + l] = x[k];
        }
    }
    Some((bt, g, at))
}

/// The `x` of `n` unknowns minimizing `Σ (row·x − b)²` over `rows` `(row, b)`: the normal
/// equations by Gaussian elimination with partial pivoting; `None` when singular.
fn least_squares(rows: &[(Vec<f64>, f64)], n: usize) -> Option<Vec<f64>> {
    let mut a = vec![vec![0f64; n + 1]; n];
    for (row, b) in rows {
        for p in 0..n {
            for q in 0..n {
                a[p][q] += row[p] * row[q];
            }
            a[p][n] += row[p] * b;
        }
    }
    for col in 0..n {
        let pivot = (col..n).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

/// `P ⊗ Q` of row-major `[pr, pc]` and `[qr, qc]` matrices: `[pr·qr, pc·qc]`, entry
/// `((a, b), (i, j))` = `p[a][i]·q[b][j]`, as f32.
fn kron(
    p: &[f64],
    [pr, pc]: [usize; 2],
    q: &[f64],
    [qr, qc]: [usize; 2],
) -> Result<Tensor, TensorError> {
    let mut k = Vec::with_capacity(pr * qr * pc * qc);
    for a in 0..pr {
        for b in 0..qr {
            for i in 0..pc {
                for j in 0..qc {
                    k.push((p[a * pc + i] * q[b * qc + j]) as f32);
                }
            }
        }
    }
    Tensor::new(vec![pr * qr, pc * qc], k)
}

/// The transformed weights, transposed at each position: `Uᵀ[(a, b)][c][oc] = (G₀ g[oc][c]
/// G₁ᵀ)[a][b]`, `[n₀·n₁, C, OC]`, of a `[OC, C, r₀, r₁]` weight.
fn transformed_weight(weight: &Tensor, axes: &[Axis; 2]) -> Result<Tensor, TensorError> {
    let w = weight.as_slice::<f32>()?;
    let (oc, c) = (weight.shape()[0], weight.shape()[1]);
    let [x0, x1] = axes;
    let (n0, n1, r0, r1) = (x0.n, x1.n, x0.r, x1.r);
    let mut u = vec![0f32; n0 * n1 * oc * c];
    let mut t = vec![0f64; n0 * r1];
    for o in 0..oc {
        for ch in 0..c {
            let k = &w[(o * c + ch) * r0 * r1..][..r0 * r1];
            for a in 0..n0 {
                for j in 0..r1 {
                    t[a * r1 + j] = (0..r0)
                        .map(|i| x0.g[a * r0 + i] * f64::from(k[i * r1 + j]))
                        .sum();
                }
            }
            for a in 0..n0 {
                for b in 0..n1 {
                    let v: f64 = (0..r1).map(|j| t[a * r1 + j] * x1.g[b * r1 + j]).sum();
                    u[((a * n1 + b) * c + ch) * oc + o] = v as f32;
                }
            }
        }
    }
    Tensor::new(vec![n0 * n1, c, oc], u)
}

fn i32_const(rw: &mut Rewriter, hint: &str, v: Vec<i32>) -> Result<ValueId, TensorError> {
    let t = Tensor::new(vec![v.len()], v)?;
    Ok(rw.add_constant(hint, t))
}

fn reshape(rw: &mut Rewriter, x: ValueId, dims: &[usize]) -> Result<ValueId, Failure> {
    let shape = rw.add_shape(dims);
    Ok(rw.add_op("Reshape", Attributes::new(), &[x, shape])?)
}

/// `Transpose(x, perm)` hinted [`FusionHints::prologue_only`]: read transposed by its
/// consumer, a matrix product, while `x`'s producer stores it in order.
fn transposed_for_consumer(
    rw: &mut Rewriter,
    x: ValueId,
    perm: Vec<i64>,
) -> Result<ValueId, Failure> {
    let t = rw.add_op("Transpose", perm_attrs(perm), &[x])?;
    rw.set_hints(
        t,
        FusionHints {
            prologue_only: true,
            ..FusionHints::default()
        },
    )?;
    Ok(t)
}

/// Adds the Winograd nodes of `conv` with the transforms `axes`; returns the value that
/// replaces the convolution's output.
fn rewrite(rw: &mut Rewriter, conv: &ConvNode, axes: &[Axis; 2]) -> Result<ValueId, Failure> {
    let g: &Geometry = &conv.geometry;
    let [x0, x1] = axes;
    let (batch, c, oc) = (conv.batch(), conv.channels(), conv.weight.shape()[0]);
    let (t0, t1) = (g.output[0].div_ceil(x0.m), g.output[1].div_ceil(x1.m));
    let tiles = batch * t0 * t1;
    let (hp, wp) = (t0 * x0.m + x0.r - 1, t1 * x1.m + x1.r - 1);
    let pads_end = [
        hp - g.input[0] - g.pads_begin[0],
        wp - g.input[1] - g.pads_begin[1],
    ];
    let xp = if g.pads_begin.iter().chain(&pads_end).any(|&p| p != 0) {
        let pads = [
            0,
            0,
            g.pads_begin[0],
            g.pads_begin[1],
            0,
            0,
            pads_end[0],
            pads_end[1],
        ];
        let pads = rw.add_shape(&pads);
        materialized_pad(rw, conv.x, pads)?
    } else {
        conv.x
    };
    let nn = x0.n * x1.n;
    let element: Vec<i32> = (0..nn)
        .map(|e| ((e / x1.n) * wp + e % x1.n) as i32)
        .collect();
    let origin: Vec<i32> = (0..c * tiles)
        .map(|f| {
            let (ch, tile) = (f / tiles, f % tiles);
            let (image, t) = (tile / (t0 * t1), tile % (t0 * t1));
            let plane = (image * c + ch) * hp * wp;
            (plane + (t / t1) * x0.m * wp + (t % t1) * x1.m) as i32
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
    let bk = kron(&x0.bt, [x0.n, x0.n], &x1.bt, [x1.n, x1.n])?;
    let bk = rw.add_constant("winograd_input_transform", bk);
    let v = rw.add_op("MatMul", Attributes::new(), &[bk, d])?;
    let v = reshape(rw, v, &[nn, c, tiles])?;
    let v_t = transposed_for_consumer(rw, v, vec![0, 2, 1])?;
    let u_t = rw.add_constant("winograd_weight", transformed_weight(&conv.weight, axes)?);
    let prod = rw.add_op("MatMul", Attributes::new(), &[v_t, u_t])?;
    let prod = reshape(rw, prod, &[nn, tiles * oc])?;
    let prod_t = transposed_for_consumer(rw, prod, vec![1, 0])?;
    let ak = kron(&x0.at, [x0.m, x0.n], &x1.at, [x1.m, x1.n])?;
    let ak_t = transposed(&ak, x0.m * x1.m, nn)?;
    let ak_t = rw.add_constant("winograd_output_transform", ak_t);
    let y = rw.add_op("MatMul", Attributes::new(), &[prod_t, ak_t])?;
    let y = if batch == 1 {
        let y = reshape(rw, y, &[t0, t1, oc, x0.m, x1.m])?;
        rw.add_op("Transpose", perm_attrs(vec![2, 0, 3, 1, 4]), &[y])?
    } else {
        let y = reshape(rw, y, &[batch, t0, t1, oc, x0.m, x1.m])?;
        rw.add_op("Transpose", perm_attrs(vec![0, 3, 1, 4, 2, 5]), &[y])?
    };
    let mut y = reshape(rw, y, &[batch, oc, t0 * x0.m, t1 * x1.m])?;
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
    if t0 * x0.m != g.output[0] || t1 * x1.m != g.output[1] {
        let starts = rw.add_shape(&[0, 0]);
        let ends = rw.add_shape(&g.output);
        let axes = rw.add_shape(&[2, 3]);
        y = rw.add_op("Slice", Attributes::new(), &[y, starts, ends, axes])?;
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every supported `F(m, r)` computes the correlation of `r` taps with `m + r − 1`
    /// inputs, in f64, to rounding.
    #[test]
    fn each_axis_transform_is_a_correlation() {
        for (m, r) in [(1, 1), (2, 3), (4, 3), (2, 7), (4, 7)] {
            let x = Axis::new(m, r).unwrap();
            let n = x.n;
            let d: Vec<f64> = (0..n)
                .map(|i| ((i * 7 + 3) % 11) as f64 / 5.0 - 1.0)
                .collect();
            let g: Vec<f64> = (0..r)
                .map(|j| ((j * 5 + 2) % 7) as f64 / 3.0 - 0.9)
                .collect();
            let gg: Vec<f64> = (0..n)
                .map(|k| (0..r).map(|j| x.g[k * r + j] * g[j]).sum())
                .collect();
            let bd: Vec<f64> = (0..n)
                .map(|k| (0..n).map(|l| x.bt[k * n + l] * d[l]).sum())
                .collect();
            for i in 0..m {
                let y: f64 = (0..n).map(|k| x.at[i * n + k] * gg[k] * bd[k]).sum();
                let want: f64 = (0..r).map(|j| d[i + j] * g[j]).sum();
                assert!(
                    (y - want).abs() < 1e-9,
                    "F({m}, {r}) output {i}: {y} vs {want}"
                );
            }
        }
        assert!(Axis::new(3, 3).is_none());
        assert!(toom_cook(2, 3, &[0., 1., 1.]).is_none(), "repeated points");
    }
}
