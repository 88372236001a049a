//! Resolve variants: rewrites operator variants into the forms kernels are written for.

use crate::attribute::{Attribute, Attributes};
use crate::dtype::DType;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// `Gemm(A, B, C?; alpha, beta, transA, transB)` (opset 7+, float, 2-D operands) →
/// `MatMul(A', B')` (+ `Add` of the bias): a constant `B` is transposed and scaled by `alpha`
/// ahead of time (a new initializer); otherwise `Transpose` and `Mul` nodes do it. A constant
/// `C` is scaled by `beta` ahead of time, otherwise by a `Mul` node; `beta = 0` drops `C`.
/// Folding `alpha` into `B` rounds differently from scaling the product (one rounding of
/// `alpha * b` per weight).
pub struct GemmToMatMul;

impl GraphPass for GemmToMatMul {
    fn name(&self) -> &'static str {
        "gemm-to-matmul"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let n = NodeId(i);
            let node = &rw.graph().nodes()[i];
            if node.op_type != "Gemm" || !node.domain.is_empty() || node.opset < 7 {
                continue;
            }
            let Some(Some(y)) = node.outputs.first().copied() else {
                continue;
            };
            rw.focus(n);
            if let Some(out) = resolve_gemm(&mut rw, n)? {
                rw.replace(y, out);
                rw.remove_node(n);
            }
        }
        rw.finish()
    }
}

/// A scalar of `dtype`.
fn scalar(dtype: DType, v: f64) -> Tensor {
    Tensor::scalar(v).cast(dtype)
}

/// The rewritten value of Gemm node `n`, or `None` when it does not apply.
fn resolve_gemm(rw: &mut Rewriter, n: NodeId) -> Result<Option<ValueId>, GraphError> {
    let g = rw.graph();
    let node = g.nodes()[n.0].clone();
    let attr_f = |name: &str| node.attrs.float_or(name, 1.0).ok();
    let attr_i = |name: &str| node.attrs.int_or(name, 0).ok();
    let (Some(alpha), Some(beta), Some(ta), Some(tb)) = (
        attr_f("alpha"),
        attr_f("beta"),
        attr_i("transA"),
        attr_i("transB"),
    ) else {
        return Ok(None);
    };
    let (Some(Some(a)), Some(Some(b))) = (node.inputs.first(), node.inputs.get(1)) else {
        return Ok(None);
    };
    let (a, b) = (*a, *b);
    let c = node.inputs.get(2).copied().flatten();
    let dtype = g.value(a).ty.dtype;
    if !dtype.is_float()
        || g.value(a).ty.rank() != Some(2)
        || g.value(b).ty.rank() != Some(2)
        || g.value(b).ty.dtype != dtype
    {
        return Ok(None);
    }
    let (alpha, beta) = (f64::from(alpha), f64::from(beta));
    let transpose = |rw: &mut Rewriter, v: ValueId| -> Result<ValueId, GraphError> {
        let mut attrs = Attributes::new();
        attrs.insert("perm", Attribute::Ints(vec![1, 0]));
        rw.add_op("Transpose", attrs, &[v])
    };
    let a2 = if ta != 0 { transpose(rw, a)? } else { a };
    let mut scaled = false;
    let b2 = match rw.constant(b).cloned() {
        Some(bt) => {
            let (k, m) = (bt.shape()[0], bt.shape()[1]);
            let v = bt.to_f64_vec();
            let (rows, cols) = if tb != 0 { (m, k) } else { (k, m) };
            let data: Vec<f64> = (0..rows * cols)
                .map(|i| {
                    let (r, c) = (i / cols, i % cols);
                    let x = if tb != 0 { v[c * m + r] } else { v[i] };
                    x * alpha
                })
                .collect();
            scaled = true;
            let t = Tensor::new(vec![rows, cols], data)
                .map_err(|e| node_error(&node.name, e.into()))?
                .cast(dtype);
            rw.add_constant("gemm_weight", t)
        }
        None if tb != 0 => transpose(rw, b)?,
        None => b,
    };
    let mut y = rw.add_op("MatMul", Attributes::new(), &[a2, b2])?;
    if alpha != 1.0 && !scaled {
        let s = rw.add_constant("gemm_alpha", scalar(dtype, alpha));
        y = rw.add_op("Mul", Attributes::new(), &[y, s])?;
    }
    if let Some(c) = c.filter(|_| beta != 0.0) {
        let c2 = match rw.constant(c).cloned() {
            Some(ct) if beta != 1.0 => {
                let v: Vec<f64> = ct.to_f64_vec().iter().map(|x| x * beta).collect();
                let t = Tensor::new(ct.shape().to_vec(), v)
                    .map_err(|e| node_error(&node.name, e.into()))?
                    .cast(dtype);
                rw.add_constant("gemm_bias", t)
            }
            _ if beta == 1.0 => c,
            _ => {
                let s = rw.add_constant("gemm_beta", scalar(dtype, beta));
                rw.add_op("Mul", Attributes::new(), &[c, s])?
            }
        };
        y = rw.add_op("Add", Attributes::new(), &[y, c2])?;
    }
    Ok(Some(y))
}

fn node_error(node: &str, source: crate::operator::OpError) -> GraphError {
    GraphError::Node {
        node: node.to_string(),
        op_type: "Gemm".into(),
        source,
    }
}

/// `MatMul(A, W)` with a constant 2-D `W` `[K, N]` and a batched `A` `[d…, M, K]` (rank ≥ 3,
/// static shape) → `Reshape(MatMul(Reshape(A, [d…·M, K]), W), [d…, M, N])`, so a plain 2-D
/// matmul kernel with the weight as its right operand applies; and `MatMul(A, B)` with `A`
/// `[d…, M, K]` and `B` `[d…, K, N]` of the same batch axes `d…` (two or more of them,
/// static shapes; attention's per-head products) → `Reshape(MatMul(Reshape(A, [∏d, M, K]),
/// Reshape(B, [∏d, K, N])), [d…, M, N])`, a batch matmul with one batch axis; and `MatMul(W,
/// B)` with a 2-D `W` `[M, K]` and a batched `B` `[d…, K, N]` → `W` broadcast as `[1, M, K]`
/// against `B` as `[∏d, K, N]` (a 2-D product when `∏d = 1`). Only views are added; no value
/// changes.
pub struct FlattenBatchedMatMul;

impl GraphPass for FlattenBatchedMatMul {
    fn name(&self) -> &'static str {
        "flatten-batched-matmul"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let g = rw.graph();
            let node = &g.nodes()[i];
            if node.op_type != "MatMul" || !node.domain.is_empty() {
                continue;
            }
            let (Some(Some(a)), Some(Some(w)), Some(Some(y))) = (
                node.inputs.first().copied(),
                node.inputs.get(1).copied(),
                node.outputs.first().copied(),
            ) else {
                continue;
            };
            let Some(shape) = g.value(a).ty.fixed_shape() else {
                continue;
            };
            let Some(w_shape) = g.value(w).ty.fixed_shape() else {
                continue;
            };
            if shape.len() == 2 && w_shape.len() >= 3 {
                broadcast_left_matrix(&mut rw, NodeId(i), [a, w, y], [&shape, &w_shape])?;
                continue;
            }
            if rw.constant(w).is_none() {
                merge_batch_axes(&mut rw, NodeId(i), [a, w, y], [&shape, &w_shape])?;
                continue;
            }
            if shape.len() < 3 || w_shape.len() != 2 {
                continue;
            }
            let (k, n) = (w_shape[0], w_shape[1]);
            let rows: usize = shape[..shape.len() - 1].iter().product();
            if shape[shape.len() - 1] != k || rows == 0 || n == 0 {
                continue;
            }
            let mut out_shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            if let Some(last) = out_shape.last_mut() {
                *last = n as i64;
            }
            let name = node.name.clone();
            rw.focus(NodeId(i));
            let to_2d = shape_const(&mut rw, vec![rows as i64, k as i64], &name)?;
            let back = shape_const(&mut rw, out_shape, &name)?;
            let a2 = rw.add_op("Reshape", Attributes::new(), &[a, to_2d])?;
            let y2 = rw.add_op("MatMul", Attributes::new(), &[a2, w])?;
            let out = rw.add_op("Reshape", Attributes::new(), &[y2, back])?;
            rw.replace(y, out);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// The mixed-rank half of [`FlattenBatchedMatMul`] on node `at` (`y = MatMul(a, b)`, `a` a
/// matrix `[M, K]`, `b` batched `[d…, K, N]`): `a` broadcast as `[1, M, K]` against `b` read
/// as `[∏d, K, N]`, or, for a batch of one (`∏d = 1`), a plain 2-D product with `b` read as
/// `[K, N]` (a log-mel filterbank applied to one spectrogram).
fn broadcast_left_matrix(
    rw: &mut Rewriter,
    at: NodeId,
    [a, b, y]: [ValueId; 3],
    [sa, sb]: [&[usize]; 2],
) -> Result<(), GraphError> {
    let rb = sb.len();
    let (m, k, n) = (sa[0], sa[1], sb[rb - 1]);
    let batch: usize = sb[..rb - 2].iter().product();
    if sb[rb - 2] != k || [batch, m, k, n].contains(&0) {
        return Ok(());
    }
    let dims = |d: &[usize]| d.iter().map(|&v| v as i64).collect::<Vec<i64>>();
    let mut out_shape = dims(&sb[..rb - 2]);
    out_shape.extend([m as i64, n as i64]);
    let name = rw.graph().nodes()[at.0].name.clone();
    rw.focus(at);
    let back = shape_const(rw, out_shape, &name)?;
    let product = if batch == 1 {
        let b2 = shape_const(rw, dims(&[k, n]), &name)?;
        let b2 = rw.add_op("Reshape", Attributes::new(), &[b, b2])?;
        rw.add_op("MatMul", Attributes::new(), &[a, b2])?
    } else {
        let a3 = shape_const(rw, dims(&[1, m, k]), &name)?;
        let b3 = shape_const(rw, dims(&[batch, k, n]), &name)?;
        let a3 = rw.add_op("Reshape", Attributes::new(), &[a, a3])?;
        let b3 = rw.add_op("Reshape", Attributes::new(), &[b, b3])?;
        rw.add_op("MatMul", Attributes::new(), &[a3, b3])?
    };
    let out = rw.add_op("Reshape", Attributes::new(), &[product, back])?;
    rw.replace(y, out);
    rw.remove_node(at);
    Ok(())
}

/// The batch-matmul half of [`FlattenBatchedMatMul`] on node `at` (`y = MatMul(a, b)`); does
/// nothing unless both operands have the same two or more batch axes.
fn merge_batch_axes(
    rw: &mut Rewriter,
    at: NodeId,
    [a, b, y]: [ValueId; 3],
    [sa, sb]: [&[usize]; 2],
) -> Result<(), GraphError> {
    let (ra, rb) = (sa.len(), sb.len());
    if ra < 4 || ra != rb || sa[..ra - 2] != sb[..rb - 2] || sa[ra - 1] != sb[rb - 2] {
        return Ok(());
    }
    let dims = |d: &[usize]| d.iter().map(|&v| v as i64).collect::<Vec<i64>>();
    let batch: usize = sa[..ra - 2].iter().product();
    let (m, k, n) = (sa[ra - 2], sa[ra - 1], sb[rb - 1]);
    if [batch, m, k, n].contains(&0) {
        return Ok(());
    }
    let mut out_shape = dims(&sa[..ra - 2]);
    out_shape.extend([m as i64, n as i64]);
    let name = rw.graph().nodes()[at.0].name.clone();
    rw.focus(at);
    let a3 = shape_const(rw, dims(&[batch, m, k]), &name)?;
    let b3 = shape_const(rw, dims(&[batch, k, n]), &name)?;
    let back = shape_const(rw, out_shape, &name)?;
    let a3 = rw.add_op("Reshape", Attributes::new(), &[a, a3])?;
    let b3 = rw.add_op("Reshape", Attributes::new(), &[b, b3])?;
    let y3 = rw.add_op("MatMul", Attributes::new(), &[a3, b3])?;
    let out = rw.add_op("Reshape", Attributes::new(), &[y3, back])?;
    rw.replace(y, out);
    rw.remove_node(at);
    Ok(())
}

fn shape_const(rw: &mut Rewriter, dims: Vec<i64>, node: &str) -> Result<ValueId, GraphError> {
    let t = Tensor::new(vec![dims.len()], dims).map_err(|e| GraphError::Node {
        node: node.to_string(),
        op_type: "MatMul".into(),
        source: e.into(),
    })?;
    Ok(rw.add_constant("shape", t))
}
