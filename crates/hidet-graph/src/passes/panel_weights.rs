//! Constant right operands of matrix products stored as column panels, once, at compile time.
//!
//! ```text
//! MatMul(A, W[K, N])  →  MatMul(A, hidet::ColumnPanels(W'[⌈N/16⌉, K, 16]; columns = N))
//! ```
//!
//! The CPU matrix product copies its right operand into panels of a few columns before
//! every use (packing), so that its micro-kernel reads each row of a panel as contiguous
//! vectors. For a constant operand (the weights of a linear layer, of a convolution
//! computed with the pixels as rows) that copy is the same on every run, and for the
//! matrix-vector products of small batches it is most of the memory traffic. Stored as
//! [`ColumnPanels`](crate::ops::column_panels), the operand is read in place: the
//! `ColumnPanels` node (marked [`KEEP_LAYOUT`], so that specialization does not fold the
//! panels back into the matrix) becomes a prologue whose index map the CPU template recognizes
//! (see `hidet_cpu::graph_backend::anchor`); other consumers of the prologue read through it.

use crate::attribute::Attributes;
use crate::dtype::DType;
use crate::fusion::specialize::KEEP_LAYOUT;
use crate::graph::{Graph, GraphError, NodeId};
use crate::ops::column_panels::{self, to_panels, PANEL_WIDTH};
use crate::ops::im2col::HIDET_DOMAIN;
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::Attribute;

/// Rewrites default-domain `MatMul` nodes of a non-constant 2-D `f32` left operand and a
/// constant 2-D `f32` right operand at least [`PANEL_WIDTH`] columns wide into a product
/// with the operand stored as column panels (see the module docs).
pub struct PanelConstantWeights;

impl GraphPass for PanelConstantWeights {
    fn name(&self) -> &'static str {
        "panel-constant-weights"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let g = rw.graph();
            let node = &g.nodes()[i];
            if node.op_type != "MatMul" || !node.domain.is_empty() {
                continue;
            }
            let (Some(Some(a)), Some(Some(b)), [Some(y)]) = (
                node.inputs.first(),
                node.inputs.get(1),
                node.outputs.as_slice(),
            ) else {
                continue;
            };
            let (a, b, y) = (*a, *b, *y);
            let a_ty = &g.value(a).ty;
            let a_is_matrix = a_ty.dtype == DType::F32
                && a_ty.fixed_shape().is_some_and(|s| s.len() == 2)
                && rw.constant(a).is_none();
            let Some(weight) = rw.constant(b) else {
                continue;
            };
            let wide = matches!(*weight.shape(), [k, n] if k > 0 && n >= PANEL_WIDTH);
            if !a_is_matrix || !wide {
                continue;
            }
            let columns = weight.shape()[1];
            let Some(panels) = to_panels(weight) else {
                continue;
            };
            rw.focus(NodeId(i));
            let panels = rw.add_constant("weight_panels", panels);
            let mut attrs = Attributes::new();
            attrs.insert("columns", Attribute::Int(columns as i64));
            attrs.insert(KEEP_LAYOUT, Attribute::Int(1));
            let unpanelled =
                rw.add_domain_op(HIDET_DOMAIN, column_panels::OP_TYPE, attrs, &[panels])?;
            let product = rw.add_op("MatMul", Attributes::new(), &[a, unpanelled])?;
            rw.replace(y, product);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}
