//! Products by weights quantized to 4 bits in blocks, read as stored: a `MatMul` by
//! `hidet::DequantizeBlocks` of constants (ONNX Runtime's `MatMulNBits`, see hidet-graph's
//! `contrib_matmul`) becomes `hidet::Int4Linear` of the activations as rows.
//!
//! ```text
//! MatMul(A [.., K], DequantizeBlocks(Q, scales, zero_points; k = K, bits = 4, block_size))
//!     →  Reshape(hidet::Int4Linear(Reshape(A, [R, K]), W, S, Z; columns = N), [.., N])
//!     W [⌈N/16⌉, B, bs/8, 16, 4]: byte [p, b, g, j, u] = q(k, 16p + j) | q(k + 1, 16p + j) << 4,
//!                                 k = b·bs + 8g + 2u (0 past K), B = ⌈K/bs⌉
//!     S, Z [⌈N/16⌉, B, 16]: [p, b, j] = scales, zero_points [16p + j, b] (0 past N)
//! ```
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
    /// `Q`, `scales`, `zero_points` of the `DequantizeBlocks`.
    blocks: [Tensor; 3],
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
    if dequantize.domain != HIDET_DOMAIN || dequantize.op_type != DEQUANTIZE_BLOCKS {
        return None;
    }
    let attr = |name: &str| {
        let v = dequantize.attrs.int_or(name, 0).ok()?;
        usize::try_from(v).ok()
    };
    let layout = BlockLayout::new(attr("k")?, attr("bits")?, attr("block_size")?).ok()?;
    if layout.bits != 4
        || layout.block_size > MAX_BLOCK_SIZE as usize
        || !layout.block_size.is_multiple_of(WORD_DEPTHS as usize)
    {
        return None;
    }
    let blocks: Vec<Tensor> = dequantize
        .inputs
        .iter()
        .map(|v| rw.constant((*v)?).cloned())
        .collect::<Option<_>>()?;
    let [q, scales, zeros]: [Tensor; 3] = blocks.try_into().ok()?;
    let columns = *q.shape().first()?;
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
        blocks: [q, scales, zeros],
    })
}

impl BlockQuantizedProducts {
    fn rewrite(&self, rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
        let shape = rw.add_shape(&[p.rows, p.layout.k]);
        let x = rw.add_op("Reshape", Attributes::new(), &[p.a, shape])?;
        let derive = |what: &str, source: &Tensor, f: &dyn Fn() -> Option<Tensor>| {
            let label = format!("int4-{what}:{}:{}", p.layout.k, p.layout.block_size);
            let value = match &self.derived {
                Some(derived) => derived.get_or_derive(&label, &[source], f),
                None => f(),
            };
            value.ok_or_else(|| GraphError::Node {
                node: p.node.clone(),
                op_type: "MatMul".into(),
                source: OpError::Invalid(format!("block-quantized {what} of a wrong size")),
            })
        };
        let [q, scales, zeros] = &p.blocks;
        let w = derive("weight-panels", q, &|| weight_panels(q, p))?;
        let s = derive("scale-panels", scales, &|| block_panels(scales, p))?;
        let z = derive("zero-point-panels", zeros, &|| block_panels(zeros, p))?;
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

/// `W` of `hidet::Int4Linear` for the plan's stored values `q`; `None` when they do not have
/// the plan's layout.
fn weight_panels(q: &Tensor, p: &Plan) -> Option<Tensor> {
    let (layout, n) = (p.layout, p.columns);
    let q = q.as_slice::<u8>().ok()?;
    let (blocks, blob) = (layout.blocks(), layout.blob_bytes());
    if q.len() != n * blocks * blob {
        return None;
    }
    let (w_shape, _) = operand_shapes(n, layout.k, layout.block_size);
    let mut w = vec![0u8; w_shape.iter().product()];
    let bs = layout.block_size;
    for col in 0..n {
        let (panel, j) = (col / WIDTH, col % WIDTH);
        for kk in 0..layout.k {
            let at = (col * blocks + kk / bs) * blob;
            let value = layout.unpack(&q[at..at + blob], kk % bs);
            let word = ((panel * blocks + kk / bs) * (bs / 8) + kk % bs / 8) * WIDTH + j;
            w[word * 4 + kk % 8 / 2] |= value << (4 * (kk % 2));
        }
    }
    Tensor::new(w_shape, w).ok()
}

/// `S` (or `Z`) of `hidet::Int4Linear` for the plan's per-block `values` (`[N, blocks]`): zero
/// past `N`; `None` when they do not have the plan's size.
fn block_panels(values: &Tensor, p: &Plan) -> Option<Tensor> {
    let (layout, n) = (p.layout, p.columns);
    let values = values.as_slice::<f32>().ok()?;
    let blocks = layout.blocks();
    if values.len() != n * blocks {
        return None;
    }
    let (_, shape) = operand_shapes(n, layout.k, layout.block_size);
    let mut out = vec![0f32; shape.iter().product()];
    for col in 0..n {
        let (panel, j) = (col / WIDTH, col % WIDTH);
        for b in 0..blocks {
            out[(panel * blocks + b) * WIDTH + j] = values[col * blocks + b];
        }
    }
    Tensor::new(shape, out).ok()
}
