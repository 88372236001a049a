//! BatchNormalization folding: inference-mode BN with constant parameters becomes a
//! per-channel affine map, absorbed by the preceding Conv / MatMul (+ Add) weights where it
//! can be, otherwise written as `Mul` + `Add`.

use crate::attribute::Attributes;
use crate::dtype::DType;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// For each inference-mode `BatchNormalization(X, scale, B, mean, var)` with constant
/// parameters and a float `X` whose channel count (dimension 1) is static, with
/// `a = scale / sqrt(var + epsilon)` and `b = B - mean * a` (in f64, rounded once to `X`'s
/// dtype):
/// - `Conv(x, W, bias?)` → BN, the Conv read only by the BN, `W` and `bias` constant:
///   one `Conv(x, W * a[oc], bias * a + b)`;
/// - `MatMul(x, W)` → BN on a 2-D output `[M, N]`, `W` a constant `[K, N]` (or
///   `Transpose(Wᵀ)` of a constant `[N, K]`, kept in that form), the MatMul read
///   only by the BN: `MatMul(x, W * a[n]) + b`; with an `Add` of a constant bias (`[N]`,
///   `[1, N]` or one element) in between, also read only by the next node, the bias becomes
///   `bias * a + b`;
/// - otherwise `X * a + b` with `a`, `b` shaped `[C, 1, …, 1]`.
///
/// Training mode (opset 14 `training_mode = 1`, or the extra outputs of older opsets) and
/// opset 7–8 `spatial = 0` are left alone.
pub struct BatchNormFolding;

impl GraphPass for BatchNormFolding {
    fn name(&self) -> &'static str {
        "batchnorm-folding"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let n = NodeId(i);
            let Some(bn) = affine_of(&rw, n) else {
                continue;
            };
            rw.focus(n);
            let y = bn.y;
            let out = match absorb(&mut rw, &bn)? {
                Some(v) => v,
                None => standalone(&mut rw, &bn)?,
            };
            // `out` is a new node's output, so it can stand for `y` even as a graph output.
            rw.replace(y, out);
            rw.remove_node(n);
        }
        rw.finish()
    }
}

/// An inference BatchNormalization as `y = x * a + b` per channel.
struct Affine {
    x: ValueId,
    y: ValueId,
    dtype: DType,
    a: Vec<f64>,
    b: Vec<f64>,
}

/// The affine form of node `n` if it is a foldable BatchNormalization.
fn affine_of(rw: &Rewriter, n: NodeId) -> Option<Affine> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if node.op_type != "BatchNormalization" || !node.domain.is_empty() || rw.is_removed(n) {
        return None;
    }
    let extra_outputs = node.outputs.iter().skip(1).any(|o| o.is_some());
    let training = if node.opset >= 14 {
        node.attrs.int("training_mode").ok()?.copied().unwrap_or(0) != 0
    } else {
        node.outputs.len() > 1
    };
    let per_activation =
        node.opset <= 8 && node.attrs.int("spatial").ok()?.copied().unwrap_or(1) == 0;
    if extra_outputs || training || per_activation {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let y = node.outputs.first().copied().flatten()?;
    let ty = &g.value(x).ty;
    if !ty.dtype.is_float() || ty.rank()? < 2 {
        return None;
    }
    let c = ty.shape.as_ref()?.get(1)?.fixed()?;
    let param = |i: usize| -> Option<Vec<f64>> {
        let t = rw.constant(node.inputs.get(i).copied().flatten()?)?;
        (t.numel() == c && t.dtype().is_float()).then(|| t.to_f64_vec())
    };
    let (scale, bias, mean, var) = (param(1)?, param(2)?, param(3)?, param(4)?);
    let eps = f64::from(node.attrs.float_or("epsilon", 1e-5).ok()?);
    let a: Vec<f64> = (0..c).map(|i| scale[i] / (var[i] + eps).sqrt()).collect();
    let b: Vec<f64> = (0..c).map(|i| bias[i] - mean[i] * a[i]).collect();
    Some(Affine {
        x,
        y,
        dtype: ty.dtype,
        a,
        b,
    })
}

/// A float tensor of `dtype` from f64 values.
fn tensor(dtype: DType, shape: Vec<usize>, v: Vec<f64>) -> Result<Tensor, GraphError> {
    let t = Tensor::new(shape, v).map_err(|e| GraphError::Node {
        node: "batchnorm-folding".into(),
        op_type: "BatchNormalization".into(),
        source: e.into(),
    })?;
    Ok(t.cast(dtype))
}

/// The single node reading `v`, if `v` has exactly one reader and is no graph output.
fn sole_producer(rw: &Rewriter, v: ValueId) -> Option<NodeId> {
    let g = rw.graph();
    let val = g.value(v);
    if val.users.len() != 1 || g.outputs().contains(&v) {
        return None;
    }
    let (p, _) = val.producer?;
    (!rw.is_removed(p)).then_some(p)
}

/// Folds the BN into the node producing its input, if that is a Conv or a MatMul (+ Add).
fn absorb(rw: &mut Rewriter, bn: &Affine) -> Result<Option<ValueId>, GraphError> {
    let Some(p) = sole_producer(rw, bn.x) else {
        return Ok(None);
    };
    let node = rw.graph().nodes()[p.0].clone();
    if !node.domain.is_empty() {
        return Ok(None);
    }
    match node.op_type.as_str() {
        "Conv" => absorb_conv(rw, bn, p),
        "MatMul" => absorb_matmul(rw, bn, p, None),
        "Add" => {
            // MatMul → Add(constant bias) → BN.
            let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
            let [l, r] = ins[..] else { return Ok(None) };
            for (mm_out, bias) in [(l, r), (r, l)] {
                let Some(m) = sole_producer(rw, mm_out) else {
                    continue;
                };
                let is_mm = rw.graph().nodes()[m.0].op_type == "MatMul"
                    && rw.graph().nodes()[m.0].domain.is_empty();
                if is_mm && rw.constant(bias).is_some() {
                    let folded = absorb_matmul(rw, bn, m, Some(bias))?;
                    if folded.is_some() {
                        rw.remove_node(p);
                    }
                    return Ok(folded);
                }
            }
            Ok(None)
        }
        _ => Ok(None),
    }
}

fn absorb_conv(rw: &mut Rewriter, bn: &Affine, p: NodeId) -> Result<Option<ValueId>, GraphError> {
    let node = rw.graph().nodes()[p.0].clone();
    let (Some(Some(x)), Some(Some(w))) = (node.inputs.first(), node.inputs.get(1)) else {
        return Ok(None);
    };
    let Some(wt) = rw.constant(*w).cloned() else {
        return Ok(None);
    };
    let c = bn.a.len();
    if wt.rank() < 3 || wt.shape()[0] != c || wt.dtype() != bn.dtype {
        return Ok(None);
    }
    let bias: Vec<f64> = match node.inputs.get(2).copied().flatten() {
        None => vec![0.0; c],
        Some(b) => match rw.constant(b) {
            Some(t) if t.numel() == c => t.to_f64_vec(),
            _ => return Ok(None),
        },
    };
    let per = wt.numel() / c;
    let wv: Vec<f64> = wt
        .to_f64_vec()
        .iter()
        .enumerate()
        .map(|(i, &v)| v * bn.a[i / per])
        .collect();
    let bv: Vec<f64> = (0..c).map(|i| bias[i] * bn.a[i] + bn.b[i]).collect();
    let w2 = tensor(bn.dtype, wt.shape().to_vec(), wv)?;
    let b2 = tensor(bn.dtype, vec![c], bv)?;
    let w2 = rw.add_constant("bn_folded_weight", w2);
    let b2 = rw.add_constant("bn_folded_bias", b2);
    let out = rw.add_node(
        "Conv",
        node.attrs.clone(),
        &[Some(*x), Some(w2), Some(b2)],
        1,
        Some(p),
    )?;
    rw.remove_node(p);
    Ok(Some(out[0]))
}

fn absorb_matmul(
    rw: &mut Rewriter,
    bn: &Affine,
    m: NodeId,
    bias: Option<ValueId>,
) -> Result<Option<ValueId>, GraphError> {
    let node = rw.graph().nodes()[m.0].clone();
    let (Some(Some(x)), Some(Some(w))) = (node.inputs.first(), node.inputs.get(1)) else {
        return Ok(None);
    };
    let n = bn.a.len();
    let out_rank = node.outputs[0].and_then(|o| rw.graph().value(o).ty.rank());
    // The weight as stored: `W` (`[K, N]`), or `Wᵀ` (`[N, K]`) read through a `Transpose`.
    let (wt, stored_transposed) = match rw.constant(*w) {
        Some(wt) => (wt.clone(), false),
        None => match rw.transposed_constant(*w).and_then(|s| rw.constant(s)) {
            Some(wt) => (wt.clone(), true),
            None => return Ok(None),
        },
    };
    let out_axis = usize::from(!stored_transposed);
    if out_rank != Some(2) || wt.rank() != 2 || wt.shape()[out_axis] != n || wt.dtype() != bn.dtype
    {
        return Ok(None);
    }
    let bias_v: Vec<f64> = match bias {
        None => vec![0.0; n],
        Some(b) => {
            let Some(t) = rw.constant(b) else {
                return Ok(None);
            };
            let row = matches!(t.shape(), [k] | [1, k] if *k == n);
            match t.numel() {
                1 => vec![t.to_f64_vec()[0]; n],
                _ if row => t.to_f64_vec(),
                _ => return Ok(None),
            }
        }
    };
    let k = wt.numel() / n.max(1);
    let channel = |i: usize| if stored_transposed { i / k } else { i % n };
    let wv: Vec<f64> = wt
        .to_f64_vec()
        .iter()
        .enumerate()
        .map(|(i, &v)| v * bn.a[channel(i)])
        .collect();
    let bv: Vec<f64> = (0..n).map(|i| bias_v[i] * bn.a[i] + bn.b[i]).collect();
    let w2 = tensor(bn.dtype, wt.shape().to_vec(), wv)?;
    let b2 = tensor(bn.dtype, vec![n], bv)?;
    let mut w2 = rw.add_constant("bn_folded_weight", w2);
    if stored_transposed {
        let mut perm = Attributes::new();
        perm.insert("perm", crate::Attribute::Ints(vec![1, 0]));
        w2 = rw.add_op("Transpose", perm, &[w2])?;
    }
    let b2 = rw.add_constant("bn_folded_bias", b2);
    let mm = rw.add_node(
        "MatMul",
        Attributes::new(),
        &[Some(*x), Some(w2)],
        1,
        Some(m),
    )?;
    let out = rw.add_op("Add", Attributes::new(), &[mm[0], b2])?;
    rw.remove_node(m);
    Ok(Some(out))
}

/// `x * a + b` with per-channel constants shaped `[C, 1, …, 1]`.
fn standalone(rw: &mut Rewriter, bn: &Affine) -> Result<ValueId, GraphError> {
    let rank = rw.graph().value(bn.x).ty.rank().unwrap_or(2);
    let mut shape = vec![1usize; rank - 1];
    shape[0] = bn.a.len();
    let a = tensor(bn.dtype, shape.clone(), bn.a.clone())?;
    let b = tensor(bn.dtype, shape, bn.b.clone())?;
    let a = rw.add_constant("bn_scale", a);
    let b = rw.add_constant("bn_shift", b);
    let scaled = rw.add_op("Mul", Attributes::new(), &[bn.x, a])?;
    rw.add_op("Add", Attributes::new(), &[scaled, b])
}
