//! Resolve variants: rewrites operator variants into the forms kernels are written for.

use crate::attribute::{Attribute, Attributes};
use crate::dtype::DType;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// `Gemm(A, B, C?; alpha, beta, transA, transB)` (opset 7+, float, 2-D operands) →
/// `MatMul(A', B')` (+ `Add` of the bias). A constant `B` is read as it is when it needs
/// neither transposition nor scaling; with `alpha ≠ 1` it is transposed (if `transB`) and
/// scaled ahead of time (a new initializer); with `alpha = 1` and `transB` it is transposed
/// ahead of time as well, unless [`GemmToMatMul::weights`] is [`GemmWeights::AsStored`]. A
/// runtime `B` goes through `Transpose` and `Mul` nodes. A constant `C` is scaled by `beta`
/// ahead of time, otherwise by a `Mul` node; `beta = 0` drops `C`. Folding `alpha` into `B`
/// rounds differently from scaling the product (one rounding of `alpha * b` per weight).
#[derive(Clone, Copy, Debug, Default)]
pub struct GemmToMatMul {
    /// How a constant `transB` weight (with `alpha = 1`) reaches the product.
    pub weights: GemmWeights,
}

/// How [`GemmToMatMul`] gives its product a constant weight stored transposed (`transB`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GemmWeights {
    /// Transposed into a new initializer: the product reads a constant `[K, N]`.
    #[default]
    Transposed,
    /// Read as stored, through a `Transpose` node of the initializer, when it is `f32`
    /// (others are transposed ahead of time): for a backend that repacks `f32` constant
    /// operands read through a transpose anyway, so the model holds no transposed copy.
    AsStored,
}

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
            if let Some(out) = resolve_gemm(&mut rw, n, self.weights)? {
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
fn resolve_gemm(
    rw: &mut Rewriter,
    n: NodeId,
    weights: GemmWeights,
) -> Result<Option<ValueId>, GraphError> {
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
        Some(_) if alpha == 1.0 && tb == 0 => b,
        Some(_) if alpha == 1.0 && weights == GemmWeights::AsStored && dtype == DType::F32 => {
            transpose(rw, b)?
        }
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

/// Every `MatMul(A, B)` of static shapes with a batch (an operand of rank ≥ 3) → views of
/// `A` and `B` around one product of rank 2 or 3 that the matmul templates take, then a view
/// back to the output's shape. With the batch axes right-aligned (the shorter operand's
/// padded with 1s) and the axes of size 1 in both dropped:
/// - the trailing axes along which only `A` varies (`B` is broadcast: one key head for all
///   query heads, a 2-D weight) join `A`'s rows, `A[d…, h…, M, K]` read as
///   `[d…, ∏h·M, K]` (`A` is contiguous, and so is the output `[d…, h…, M, N]`);
/// - the remaining axes `d…` become one batch axis when both operands have them, or `A`'s
///   batch of one broadcast against `B`'s when only `B` has them; with none left, the
///   product is 2-D (`[∏h·M, K] · [K, N]`: the weight panelled once, the widest rows).
///
/// Left as they are: products with a rank-1 operand, those already in one of these forms
/// (rank 3 against rank 3 with nothing to join), and batches mixing shared axes with axes
/// only `B` has. Only views are added; no value changes.
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
            let (Some(Some(a)), Some(Some(b)), Some(Some(y))) = (
                node.inputs.first().copied(),
                node.inputs.get(1).copied(),
                node.outputs.first().copied(),
            ) else {
                continue;
            };
            let (Some(sa), Some(sb)) = (g.value(a).ty.fixed_shape(), g.value(b).ty.fixed_shape())
            else {
                continue;
            };
            let Some(plan) = FlatProduct::of(&sa, &sb) else {
                continue;
            };
            let name = node.name.clone();
            rw.focus(NodeId(i));
            let a2 = view(&mut rw, a, &sa, &plan.a, &name)?;
            let b2 = view(&mut rw, b, &sb, &plan.b, &name)?;
            let product = rw.add_op("MatMul", Attributes::new(), &[a2, b2])?;
            let back = shape_const(&mut rw, dims(&plan.out), &name)?;
            let out = rw.add_op("Reshape", Attributes::new(), &[product, back])?;
            rw.replace(y, out);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// The operand and output shapes [`FlattenBatchedMatMul`] gives one product.
#[derive(Debug, PartialEq)]
struct FlatProduct {
    a: Vec<usize>,
    b: Vec<usize>,
    /// The original output shape.
    out: Vec<usize>,
}

impl FlatProduct {
    /// The flat form of `MatMul` on `sa` and `sb`, when one applies (see
    /// [`FlattenBatchedMatMul`]).
    fn of(sa: &[usize], sb: &[usize]) -> Option<FlatProduct> {
        let (ra, rb) = (sa.len(), sb.len());
        if ra < 2 || rb < 2 || ra.max(rb) < 3 {
            return None;
        }
        let (m, k, n) = (sa[ra - 2], sa[ra - 1], sb[rb - 1]);
        if sb[rb - 2] != k || [m, k, n].contains(&0) {
            return None;
        }
        let axes = ra.max(rb) - 2;
        let padded = |s: &[usize]| {
            let own = &s[..s.len() - 2];
            let mut p = vec![1; axes - own.len()];
            p.extend_from_slice(own);
            p
        };
        let (ba, bb) = (padded(sa), padded(sb));
        if ba
            .iter()
            .zip(&bb)
            .any(|(&x, &y)| x != y && x != 1 && y != 1)
        {
            return None;
        }
        let mut out: Vec<usize> = ba.iter().zip(&bb).map(|(&x, &y)| x.max(y)).collect();
        out.extend([m, n]);
        if out.contains(&0) {
            return None;
        }
        let batch: Vec<(usize, usize)> = ba
            .into_iter()
            .zip(bb)
            .filter(|&(x, y)| (x, y) != (1, 1))
            .collect();
        let mut split = batch.len();
        while split > 0 && batch[split - 1].1 == 1 {
            split -= 1;
        }
        let rows = m * batch[split..].iter().map(|&(x, _)| x).product::<usize>();
        let rest = &batch[..split];
        let (a, b) = if rest.is_empty() {
            (vec![rows, k], vec![k, n])
        } else if rest.iter().all(|&(x, y)| x == y) {
            let d = rest.iter().map(|&(x, _)| x).product();
            (vec![d, rows, k], vec![d, k, n])
        } else if rest.iter().all(|&(x, _)| x == 1) {
            let d = rest.iter().map(|&(_, y)| y).product();
            (vec![1, rows, k], vec![d, k, n])
        } else {
            return None;
        };
        // Rank 3 against rank 3 with no axis joined is already the template's form.
        if ra == 3 && rb == 3 && a.len() == 3 && rows == m {
            return None;
        }
        Some(FlatProduct { a, b, out })
    }
}

/// `v` (of shape `from`) read as `to`: itself when the shapes are equal, else a `Reshape`.
fn view(
    rw: &mut Rewriter,
    v: ValueId,
    from: &[usize],
    to: &[usize],
    node: &str,
) -> Result<ValueId, GraphError> {
    if from == to {
        return Ok(v);
    }
    let shape = shape_const(rw, dims(to), node)?;
    rw.add_op("Reshape", Attributes::new(), &[v, shape])
}

fn dims(d: &[usize]) -> Vec<i64> {
    d.iter().map(|&v| v as i64).collect()
}

fn shape_const(rw: &mut Rewriter, dims: Vec<i64>, node: &str) -> Result<ValueId, GraphError> {
    let t = Tensor::new(vec![dims.len()], dims).map_err(|e| GraphError::Node {
        node: node.to_string(),
        op_type: "MatMul".into(),
        source: e.into(),
    })?;
    Ok(rw.add_constant("shape", t))
}
