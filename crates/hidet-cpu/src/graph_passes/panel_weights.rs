//! Constant right operands of matrix products stored as column panels, once, at compile time.
//!
//! ```text
//! MatMul(A, W[K, N])  →  MatMul(A, hidet::ColumnPanels(W'[⌈N/16⌉, K, 16]; columns = N))
//! MatMul(Transpose(Wᵀ[K, M]), B)  →  MatMul(Transpose(hidet::ColumnPanels(
//!     Wᵀ'[⌈M/R⌉, K, R]; columns = M, width = R)), B)     (R = left_panel_rows)
//! MatMul(A[L, M, K], W[L, K, N])  →  MatMul(A, hidet::ColumnPanels(W'[L, ⌈N/16⌉, K, 16]))
//! MatMul(Reshape(Transpose(Wᵀ[K, M]), [1, M, K]), B[L, K, N])  →  the left operand's panels as
//!     above, viewed as [1, M, K]
//! ```
//!
//! The CPU matrix product copies its operands into panels of a few rows (left) or columns
//! (right) before every use (packing), so that its micro-kernel reads each row of a panel as contiguous
//! vectors. For a constant operand (the weights of a linear layer, of a convolution
//! computed with the pixels as rows) that copy is the same on every run, and for the
//! matrix-vector products of small batches it is most of the memory traffic. Stored as
//! [`ColumnPanels`](crate::graph_ops::column_panels) (for a left operand, its transpose: panels of
//! as many rows as the micro-kernel's register tile, so that each tile reads one contiguous
//! panel rather than a few rows of every line of a wider one), the operand is read in place: the
//! `ColumnPanels` node (hinted `keep_layout`, a [`hidet_graph::FusionHints`], so that
//! specialization does not fold the panels back into the matrix) becomes a prologue that
//! declares its layout (`Operator::stored_layout`), which the fused task records on the
//! operand (`AnchorInfo::layouts`) and the template reads (see `crate::graph_backend::anchor`);
//! other consumers of the prologue read through it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::graph_ops::column_panels::{self, to_panels, PANEL_WIDTH};
use crate::graph_ops::HIDET_DOMAIN;
use crate::graph_passes::conv_implicit_gemm::transposed;
use crate::graph_passes::KEEP_LAYOUT;
use hidet_graph::attribute::Attributes;
use hidet_graph::dtype::DType;
use hidet_graph::graph::{Graph, GraphError, NodeId, ValueId};
use hidet_graph::passes::rewrite::Rewriter;
use hidet_graph::passes::{DerivedConstants, GraphPass};
use hidet_graph::tensor::Tensor;
use hidet_graph::Attribute;

/// Rewrites default-domain 2-D `f32` `MatMul` nodes with one constant operand at least
/// [`PANEL_WIDTH`] wide along its output axis (the columns of a right operand, the rows of
/// a left one) and one non-constant operand: the constant is stored as panels (see the
/// module docs), [`PANEL_WIDTH`] columns wide for a right operand. A constant left operand
/// may be given transposed, `Transpose(Wᵀ)` (as the implicit-GEMM pass stores convolution
/// weights); it becomes `Transpose(ColumnPanels(panels of Wᵀ))`, its rows read from panels of
/// `left_panel_rows` rows. A constant right operand may be given transposed too (a `Gemm`
/// weight stored `[N, K]`): its panels are packed from the stored matrix directly. A batched product (rank 3) with a constant right operand
/// `[L, K, N]` stores each of its matrices as panels (a batched left operand is kept); a
/// constant left matrix viewed as a batch of one, `Reshape(W, [1, M, K])`, beside a batched
/// right operand is stored as panels of rows like a rank-2 product's.
#[derive(Clone, Debug)]
pub struct PanelConstantWeights {
    /// Rows per panel of a left operand: the rows of the backend's register tile (at most
    /// [`column_panels::MAX_PANEL_WIDTH`]).
    pub left_panel_rows: usize,
    /// Where panels derived for earlier input shapes of the same model are remembered
    /// (each weight is packed once per model), if anywhere.
    pub derived: Option<Arc<DerivedConstants>>,
}

impl Default for PanelConstantWeights {
    /// [`PANEL_WIDTH`] rows per left panel.
    fn default() -> Self {
        PanelConstantWeights {
            left_panel_rows: PANEL_WIDTH,
            derived: None,
        }
    }
}

impl GraphPass for PanelConstantWeights {
    fn name(&self) -> &'static str {
        "panel-constant-weights"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::with_registry(graph, crate::graph_ops::registry());
        let mut stored: HashMap<(ValueId, bool, bool), ValueId> = HashMap::new();
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
            let Some(plan) = plan(&rw, a, b, self.left_panel_rows) else {
                continue;
            };
            // Products of one weight (a recurrent layer's steps, a shared projection) read
            // one copy of its panels, which stays in cache from one product to the next; the
            // panels are computed once per weight.
            let source = (
                plan.matrix.value(),
                plan.left,
                matches!(plan.matrix, Matrix::Transposed(_)),
            );
            let panels = match stored.get(&source) {
                Some(&p) => p,
                None => {
                    let Some(panels) = plan.panels(&rw, self.derived.as_deref()) else {
                        continue;
                    };
                    let p = rw.add_constant("weight_panels", panels);
                    stored.insert(source, p);
                    p
                }
            };
            rw.focus(NodeId(i));
            let columns = plan.columns;
            let mut attrs = Attributes::new();
            attrs.insert("columns", Attribute::Int(columns as i64));
            attrs.insert("width", Attribute::Int(plan.width as i64));
            let matrix =
                rw.add_domain_op(HIDET_DOMAIN, column_panels::OP_TYPE, attrs, &[panels])?;
            rw.set_hints(matrix, KEEP_LAYOUT)?;
            let product = if plan.left {
                let mut perm = Attributes::new();
                perm.insert("perm", Attribute::Ints(vec![1, 0]));
                let mut left = rw.add_op("Transpose", perm, &[matrix])?;
                if let Some(shape) = &plan.left_view {
                    let shape = rw.add_shape(shape);
                    left = rw.add_op("Reshape", Attributes::new(), &[left, shape])?;
                }
                rw.add_op("MatMul", Attributes::new(), &[left, b])?
            } else {
                rw.add_op("MatMul", Attributes::new(), &[a, matrix])?
            };
            rw.replace(y, product);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// The [`DerivedConstants`] label of the panels `width` columns wide of a constant matrix
/// (of its transpose when `transposed`).
pub(crate) fn panels_label(width: usize, transposed: bool) -> String {
    format!("column-panels width={width} transposed={transposed}")
}

/// The panels replacing one operand of a product.
struct Plan {
    /// The left operand is replaced (by the transpose of the panels' matrix).
    left: bool,
    /// Columns of the panels' matrix.
    columns: usize,
    /// Columns per panel.
    width: usize,
    /// The shape a left operand is viewed in, `[1, M, K]`, when the product reads its matrix
    /// as a batch of one (beside a batch of right operands).
    left_view: Option<Vec<usize>>,
    /// The constant the panels' matrix is read from.
    matrix: Matrix,
}

/// Where the panels' matrix comes from: a constant as it is (a right operand, or the stored
/// `Wᵀ` of a left operand given as `Transpose(Wᵀ)`), or a constant transposed (a left
/// operand `W`, or the stored `Wᵀ` of a right operand given as `Transpose(Wᵀ)`).
enum Matrix {
    AsStored(ValueId),
    Transposed(ValueId),
}

impl Matrix {
    /// The constant read.
    fn value(&self) -> ValueId {
        match self {
            Matrix::AsStored(v) | Matrix::Transposed(v) => *v,
        }
    }
}

impl Plan {
    /// The panels of the plan's matrix (`None` if the constant cannot be read as f32),
    /// remembered in `derived` when given.
    fn panels(&self, rw: &Rewriter, derived: Option<&DerivedConstants>) -> Option<Tensor> {
        let w = rw.constant(self.matrix.value())?;
        let derive = || {
            let panels = match self.matrix {
                Matrix::AsStored(_) => to_panels(w, self.width),
                Matrix::Transposed(_) => match *w.shape() {
                    [rows, cols] => to_panels(&transposed(w, rows, cols).ok()?, self.width),
                    _ => None,
                },
            };
            panels.map(Tensor::aligned)
        };
        match derived {
            Some(memo) => {
                let transposed = matches!(self.matrix, Matrix::Transposed(_));
                memo.get_or_derive(&panels_label(self.width, transposed), &[w], derive)
            }
            None => derive(),
        }
    }
}

/// The plan for `MatMul(a, b)`, when one operand is a wide enough constant and the other a
/// non-constant `f32` matrix; a left operand's panels are `left_rows` wide.
fn plan(rw: &Rewriter, a: ValueId, b: ValueId, left_rows: usize) -> Option<Plan> {
    let g = rw.graph();
    // A non-constant f32 operand of `rank` dimensions.
    let is_variable = |v: ValueId, rank: usize| {
        let ty = &g.value(v).ty;
        ty.dtype == DType::F32
            && ty.fixed_shape().is_some_and(|s| s.len() == rank)
            && rw.constant(v).is_none()
    };
    let is_matrix = |v: ValueId| is_variable(v, 2);
    let wide = |shape: &[usize]| matches!(*shape, [.., k, n] if k > 0 && n >= PANEL_WIDTH);
    // A matrix beside a matrix, or a batch of matrices beside a batch.
    let right_rank = |w: &Tensor| Some(w.shape().len()).filter(|r| matches!(r, 2 | 3));
    if let Some(w) = rw
        .constant(b)
        .filter(|w| wide(w.shape()) && right_rank(w).is_some_and(|rank| is_variable(a, rank)))
    {
        return Some(Plan {
            left: false,
            columns: *w.shape().last()?,
            width: PANEL_WIDTH,
            left_view: None,
            matrix: Matrix::AsStored(b),
        });
    }
    // A right operand `W` given as `Transpose(Wᵀ)` (a `Gemm` weight stored transposed).
    if is_matrix(a) {
        if let Some(w_t) = rw.transposed_constant(b) {
            let [n, k] = *rw.constant(w_t)?.shape() else {
                return None;
            };
            wide(&[k, n]).then_some(())?;
            return Some(Plan {
                left: false,
                columns: n,
                width: PANEL_WIDTH,
                left_view: None,
                matrix: Matrix::Transposed(w_t),
            });
        }
    }
    // A left operand beside a matrix, or a matrix viewed as a batch of one beside a batch
    // of matrices (one weight for every image of a convolution computed with the pixels as
    // columns).
    let (a, left_view) = match g.batch_of_one_source(a) {
        Some(matrix) if is_variable(b, 3) && g.value(matrix).ty.rank() == Some(2) => {
            (matrix, Some(g.value(a).ty.fixed_shape()?))
        }
        _ if is_matrix(b) => (a, None),
        _ => return None,
    };
    // `Wᵀ` (`[K, M]`) of a left operand `W` given as `Transpose(Wᵀ)` or as a constant.
    let (matrix, w_t_shape) = match rw.constant(a) {
        Some(w) => match *w.shape() {
            [rows, cols] => (Matrix::Transposed(a), [cols, rows]),
            _ => return None,
        },
        None => {
            let stored = rw.transposed_constant(a)?;
            match *rw.constant(stored)?.shape() {
                [rows, cols] => (Matrix::AsStored(stored), [rows, cols]),
                _ => return None,
            }
        }
    };
    wide(&w_t_shape).then_some(())?;
    Some(Plan {
        left: true,
        columns: w_t_shape[1],
        width: left_rows,
        left_view,
        matrix,
    })
}
