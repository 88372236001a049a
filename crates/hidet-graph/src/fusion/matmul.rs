//! Recognizing a matrix product in a compute definition, for any backend's template.

use hidet_ir::compute::{tensor_dtype, tensor_shape, ComputeDef, ComputeNode, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{BinaryOp, Expr, ExprKind, Var};

/// The batch sizes of a rank-3 product: the output's, and each operand's (the output's, or 1
/// for an operand broadcast over the batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSizes {
    pub batch: i64,
    pub a_batch: i64,
    pub b_batch: i64,
}

/// The sizes of a product `matmul_sizes` recognized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulSizes {
    /// `None` for a rank-2 product.
    pub batch: Option<BatchSizes>,
    pub m: i64,
    pub n: i64,
    pub k: i64,
}

/// The sizes of `def` when it is exactly `C[i, j] = Σ_r A[i, r] · B[r, j]` over f32 with
/// inputs `(A, B)` in that order, or its batched form `C[b, i, j] = Σ_r A[b', i, r] ·
/// B[b'', r, j]` where each operand's batch index is `b`, or the constant 0 for an operand of
/// batch 1 (broadcast).
pub fn matmul_sizes(def: &ComputeDef) -> Option<MatmulSizes> {
    let ([a, b], [(c, node)], [out]) = (
        def.inputs.as_slice(),
        def.nodes.as_slice(),
        def.outputs.as_slice(),
    ) else {
        return None;
    };
    let ComputeNode::Reduce {
        axes,
        reduce_axes,
        kind: ReduceKind::Sum,
        value,
        ..
    } = node
    else {
        return None;
    };
    let [r] = reduce_axes.as_slice() else {
        return None;
    };
    let (batch_axis, i, j) = match axes.as_slice() {
        [i, j] => (None, i, j),
        [bv, i, j] => (Some(bv), i, j),
        _ => return None,
    };
    if c != out
        || [a, b, c]
            .iter()
            .any(|v| tensor_dtype(v) != Some(DataType::F32))
    {
        return None;
    }
    let shape =
        |v: &Var| -> Option<Vec<i64>> { tensor_shape(v).iter().map(Expr::as_int).collect() };
    let (sa, sb, sc) = (shape(a)?, shape(b)?, shape(c)?);
    let (batch, (m, k), (k2, n), (m2, n2)) = match (sa.as_slice(), sb.as_slice(), sc.as_slice()) {
        ([m, k], [k2, n], [m2, n2]) if batch_axis.is_none() => {
            (None, (*m, *k), (*k2, *n), (*m2, *n2))
        }
        ([ab, m, k], [bb, k2, n], [nb, m2, n2]) if batch_axis.is_some() => (
            Some(BatchSizes {
                batch: *nb,
                a_batch: *ab,
                b_batch: *bb,
            }),
            (*m, *k),
            (*k2, *n),
            (*m2, *n2),
        ),
        _ => return None,
    };
    if k != k2 || m != m2 || n != n2 {
        return None;
    }
    let ExprKind::Binary(BinaryOp::Mul, x, y) = value.kind() else {
        return None;
    };
    // An operand's batch index: the batch axis, or 0 for an operand of batch 1.
    let batch_index = |e: &Expr, rows: i64| match (batch_axis, batch) {
        (Some(bv), Some(bt)) if rows == bt.batch && e.as_var() == Some(bv) => true,
        (Some(_), Some(_)) => rows == 1 && e.as_int() == Some(0),
        _ => false,
    };
    let reads = |e: &Expr, t: &Var, rows: i64, p: &Var, q: &Var| match e.kind() {
        ExprKind::TensorElement { tensor, indices } => {
            let (lead, tail) = indices.split_at(indices.len().saturating_sub(2));
            tensor == t
                && tail.len() == 2
                && tail[0].as_var() == Some(p)
                && tail[1].as_var() == Some(q)
                && match lead {
                    [] => batch_axis.is_none(),
                    [e] => batch_index(e, rows),
                    _ => false,
                }
        }
        _ => false,
    };
    let (ra, rb) = batch.map_or((1, 1), |bt| (bt.a_batch, bt.b_batch));
    let ordered = reads(x, a, ra, i, r) && reads(y, b, rb, r, j);
    let swapped = reads(y, a, ra, i, r) && reads(x, b, rb, r, j);
    (ordered || swapped).then_some(MatmulSizes { batch, m, n, k })
}
