//! Products by weights quantized to 4 bits in blocks, read as stored: a `MatMul` by
//! `hidet::DequantizeBlocks` of constants (ONNX Runtime's `MatMulNBits`, see hidet-graph's
//! `contrib_matmul`), or by a blocked `DequantizeLinear` of a constant `int4`/`uint4` weight
//! (the QDQ form of ONNX Runtime's 4-bit quantizer, opset 21), becomes `hidet::Int4Linear` of
//! the activations as rows.
//!
//! ```text
//! MatMul(A [.., K], DequantizeBlocks(Q, scales, zero_points; k = K, bits = 4, block_size))
//!     →  Reshape(hidet::Int4Linear(Reshape(A, [R, K]), W, S, Z; columns = N), [.., N])
//!     W [⌈N/16⌉, B, bs/8, 16, 4]: byte [p, b, g, j, u] = q(k, 16p + j) | q(k + 1, 16p + j) << 4,
//!                                 k = b·bs + 8g + 2u (0 past K), B = ⌈K/bs⌉
//!     S, Z [⌈N/16⌉, B, 16]: [p, b, j] = scales, zero_points [16p + j, b] (0 past N)
//! ```
//!
//! `DequantizeLinear(x, scale, zero; axis = 0, block_size = bs)` of `x` `[K, N]` is the same
//! with `q = x`, `scales` and `zero_points` read transposed (`[K/bs, N]`), and `int4` values and
//! zero points shifted by 8 (their difference unchanged). The pass runs before constant folding,
//! which would turn that `DequantizeLinear` into floats, and again after it, for the
//! activations whose shapes only folding makes static (`DequantizeBlocks` is never folded).
//!
//! The weights keep their size, half a byte each, and the kernel computes exactly the dense
//! weights' values (`(q − z) · s`, each rounded once). Applies when `A` is `float32` of a static
//! shape, the blocks are constants, a multiple of 8 and at most [`MAX_BLOCK_SIZE`] long (ONNX
//! Runtime's are powers of two from 16); other block-quantized
//! weights are decoded into dense ones by the `DecodeBlockWeights` pass that follows.

use std::sync::Arc;

use crate::graph_ops::int4_linear::{operand_shapes, OP_TYPE as INT4_LINEAR};
use crate::graph_ops::HIDET_DOMAIN;
use crate::templates::int4_linear::{INT4_PANEL_WIDTH, MAX_BLOCK_SIZE, WORD_DEPTHS};
use hidet_graph::attribute::Attributes;
use hidet_graph::dtype::DType;
use hidet_graph::graph::{Graph, GraphError, NodeId, ValueId};
use hidet_graph::operator::OpError;
use hidet_graph::ops::dequantize_blocks::{BlockLayout, OP_TYPE as DEQUANTIZE_BLOCKS};
use hidet_graph::passes::rewrite::Rewriter;
use hidet_graph::passes::{DerivedConstants, GraphPass};
use hidet_graph::tensor::Tensor;
use hidet_graph::Attribute;

const WIDTH: usize = INT4_PANEL_WIDTH as usize;

/// Rewrites products by 4-bit block-quantized constant weights into `hidet::Int4Linear` (see
/// the module docs).
#[derive(Clone, Debug, Default)]
pub struct BlockQuantizedProducts {
    /// Where the weights repacked for earlier input shapes of the same model are remembered
    /// (each is repacked once, and shared by every binding); `None`: nowhere.
    pub derived: Option<Arc<DerivedConstants>>,
}

impl GraphPass for BlockQuantizedProducts {
    fn name(&self) -> &'static str {
        "block-quantized-products"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        Rewriter::with_registry(graph, crate::graph_ops::registry()).replace_each(
            plan,
            |p| p.y,
            |rw, p| self.rewrite(rw, p),
        )
    }
}

/// One applicable product.
struct Plan {
    node: String,
    a: ValueId,
    y: ValueId,
    y_shape: Vec<usize>,
    rows: usize,
    columns: usize,
    layout: BlockLayout,
    weights: Weights,
}

/// Where the product's 4-bit weights come from.
enum Weights {
    /// `DequantizeBlocks(q, scales, zero_points)`: `[N, blocks, blob]` bytes, `[N, blocks]`
    /// floats each.
    Blocks {
        q: Tensor,
        scales: Tensor,
        zeros: Tensor,
    },
    /// `DequantizeLinear(x, scale, zero?; axis = 0, block_size)`: `x` of `int4` or `uint4`
    /// `[K, N]`, `scale` `[blocks, N]` floats, `zero` like `scale` of `x`'s type (0 when absent);
    /// `int4` values are shifted by 8 into `0 … 15`, with their zero points.
    Qdq {
        x: Tensor,
        scale: Tensor,
        zero: Option<Tensor>,
        signed: bool,
    },
}

fn plan(rw: &Rewriter, n: NodeId) -> Option<Plan> {
    let graph = rw.graph();
    let node = &graph.nodes()[n.0];
    if !node.domain.is_empty() || node.op_type != "MatMul" {
        return None;
    }
    let (a, b) = (
        node.inputs.first().copied()??,
        node.inputs.get(1).copied()??,
    );
    let y = node.outputs.first().copied()??;
    let (producer, _) = graph.value(b).producer?;
    let dequantize = &graph.nodes()[producer.0];
    let constant = |i: usize| rw.constant(dequantize.inputs.get(i).copied()??).cloned();
    let attr = |name: &str| {
        let v = dequantize.attrs.int_or(name, 0).ok()?;
        usize::try_from(v).ok()
    };
    let (layout, columns, weights) = match (dequantize.domain.as_str(), dequantize.op_type.as_str())
    {
        (HIDET_DOMAIN, DEQUANTIZE_BLOCKS) => {
            let layout = BlockLayout::new(attr("k")?, attr("bits")?, attr("block_size")?).ok()?;
            let (q, scales, zeros) = (constant(0)?, constant(1)?, constant(2)?);
            let columns = *q.shape().first()?;
            let blocks = layout.blocks();
            let sizes_agree = q.shape() == [columns, blocks, layout.blob_bytes()]
                && scales.shape() == [columns, blocks]
                && zeros.shape() == [columns, blocks];
            if !sizes_agree || scales.dtype() != DType::F32 || zeros.dtype() != DType::F32 {
                return None;
            }
            (layout, columns, Weights::Blocks { q, scales, zeros })
        }
        ("", "DequantizeLinear") => {
            let (x, scale) = (constant(0)?, constant(1)?);
            let zero = match dequantize.inputs.get(2).copied().flatten() {
                Some(_) => Some(constant(2)?),
                None => None,
            };
            let [k, columns] = *x.shape() else {
                return None;
            };
            let axis = dequantize.attrs.int_or("axis", 1).ok()?;
            let layout = BlockLayout::new(k, 4, attr("block_size")?).ok()?;
            let blocks = layout.blocks();
            let dtype_ok = x.dtype().is_int4()
                && scale.dtype() == DType::F32
                && zero.as_ref().is_none_or(|z| z.dtype() == x.dtype())
                && dequantize.attrs.int_or("output_dtype", 0).ok()? == 0;
            let sizes_agree = scale.shape() == [blocks, columns]
                && zero.as_ref().is_none_or(|z| z.shape() == [blocks, columns]);
            if !(axis == 0 || axis == -2) || !dtype_ok || !sizes_agree {
                return None;
            }
            let signed = x.dtype() == DType::I4;
            (
                layout,
                columns,
                Weights::Qdq {
                    x,
                    scale,
                    zero,
                    signed,
                },
            )
        }
        _ => return None,
    };
    if layout.bits != 4
        || layout.block_size > MAX_BLOCK_SIZE as usize
        || !layout.block_size.is_multiple_of(WORD_DEPTHS as usize)
    {
        return None;
    }
    let a_ty = &graph.value(a).ty;
    let a_shape = a_ty.fixed_shape()?;
    let y_shape = graph.value(y).ty.fixed_shape()?;
    if a_ty.dtype != DType::F32 || a_shape.last() != Some(&layout.k) {
        return None;
    }
    let rows = a_shape[..a_shape.len() - 1].iter().product::<usize>();
    if rows == 0 || y_shape.iter().product::<usize>() != rows * columns {
        return None;
    }
    Some(Plan {
        node: node.name.clone(),
        a,
        y,
        y_shape,
        rows,
        columns,
        layout,
        weights,
    })
}

impl BlockQuantizedProducts {
    fn rewrite(&self, rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
        let shape = rw.add_shape(&[p.rows, p.layout.k]);
        let x = rw.add_op("Reshape", Attributes::new(), &[p.a, shape])?;
        let derive = |what: &str, sources: &[&Tensor], f: &dyn Fn() -> Option<Tensor>| {
            let label = format!("int4-{what}:{}:{}", p.layout.k, p.layout.block_size);
            let aligned = || f().map(Tensor::aligned);
            let value = match &self.derived {
                Some(derived) => derived.get_or_derive(&label, sources, aligned),
                None => aligned(),
            };
            value.ok_or_else(|| GraphError::Node {
                node: p.node.clone(),
                op_type: "MatMul".into(),
                source: OpError::Invalid(format!("block-quantized {what} of a wrong size")),
            })
        };
        let (w, s, z) = match &p.weights {
            Weights::Blocks { q, scales, zeros } => {
                let (layout, blocks, blob) = (p.layout, p.layout.blocks(), p.layout.blob_bytes());
                let per_block = |t: &Tensor| {
                    let v = t.as_slice::<f32>().ok()?;
                    block_panels(p, |col, b| v[col * blocks + b])
                };
                (
                    derive("weight-panels", &[q], &|| {
                        let q = q.as_slice::<u8>().ok()?;
                        weight_panels(p, |kk, col| {
                            let at = (col * blocks + kk / layout.block_size) * blob;
                            layout.unpack(&q[at..at + blob], kk % layout.block_size)
                        })
                    })?,
                    derive("scale-panels", &[scales], &|| per_block(scales))?,
                    derive("zero-point-panels", &[zeros], &|| per_block(zeros))?,
                )
            }
            Weights::Qdq {
                x,
                scale,
                zero,
                signed,
            } => {
                let (n, offset) = (p.columns, if *signed { 8 } else { 0 });
                let w = derive("qdq-weight-panels", &[x], &|| {
                    let values = x.to_i64_vec();
                    weight_panels(p, |kk, col| (values[kk * n + col] + offset) as u8)
                })?;
                let s = derive("qdq-scale-panels", &[scale], &|| {
                    let v = scale.as_slice::<f32>().ok()?;
                    block_panels(p, |col, b| v[b * n + col])
                })?;
                let z = match zero {
                    Some(zero) => derive("qdq-zero-point-panels", &[zero], &|| {
                        let v = zero.to_i64_vec();
                        block_panels(p, |col, b| (v[b * n + col] + offset) as f32)
                    })?,
                    None => derive(&format!("qdq-zero-points-{offset}"), &[scale], &|| {
                        block_panels(p, |_, _| offset as f32)
                    })?,
                };
                (w, s, z)
            }
        };
        let w = rw.add_constant("int4_weight_panels", w);
        let s = rw.add_constant("int4_scale_panels", s);
        let z = rw.add_constant("int4_zero_point_panels", z);
        let mut attrs = Attributes::new();
        attrs.insert("columns", Attribute::Int(p.columns as i64));
        let y = rw.add_domain_op(HIDET_DOMAIN, INT4_LINEAR, attrs, &[x, w, s, z])?;
        let shape = rw.add_shape(&p.y_shape);
        rw.add_op("Reshape", Attributes::new(), &[y, shape])
    }
}

/// `W` of `hidet::Int4Linear` holding `value(k, column)` (in `0 … 15`) for the plan's sizes.
fn weight_panels(p: &Plan, value: impl Fn(usize, usize) -> u8) -> Option<Tensor> {
    let (layout, n) = (p.layout, p.columns);
    let (blocks, bs) = (layout.blocks(), layout.block_size);
    let (w_shape, _) = operand_shapes(n, layout.k, bs);
    let mut w = vec![0u8; w_shape.iter().product()];
    for col in 0..n {
        let (panel, j) = (col / WIDTH, col % WIDTH);
        for kk in 0..layout.k {
            let word = ((panel * blocks + kk / bs) * (bs / 8) + kk % bs / 8) * WIDTH + j;
            w[word * 4 + kk % 8 / 2] |= (value(kk, col) & 15) << (4 * (kk % 2));
        }
    }
    Tensor::new(w_shape, w).ok()
}

/// `S` (or `Z`) of `hidet::Int4Linear` holding `value(column, block)`, zero past `N`.
fn block_panels(p: &Plan, value: impl Fn(usize, usize) -> f32) -> Option<Tensor> {
    let (layout, n) = (p.layout, p.columns);
    let blocks = layout.blocks();
    let (_, shape) = operand_shapes(n, layout.k, layout.block_size);
    let mut out = vec![0f32; shape.iter().product()];
    for col in 0..n {
        let (panel, j) = (col / WIDTH, col % WIDTH);
        for b in 0..blocks {
            out[(panel * blocks + b) * WIDTH + j] = value(col, b);
        }
    }
    Tensor::new(shape, out).ok()
}
