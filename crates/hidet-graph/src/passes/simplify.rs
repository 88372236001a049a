//! Simplification of data-movement chains: no-op removal and merging of consecutive
//! Reshape / Transpose / Cast nodes.

use crate::attribute::{Attribute, Attributes};
use crate::dtype::DType;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::shape::Dim;
use crate::tensor::Tensor;

/// Rounds of rewriting before the pass stops even if more would apply (each round merges at
/// least one link of every chain, so chains up to this length collapse completely).
const MAX_ROUNDS: usize = 16;

/// Rewrites, until none applies (each keeps every value the graph computes):
/// - `Identity`, and `Dropout` in inference (training mode absent or constant false, ratio
///   absent or a constant in `[0, 1)`, mask unused) → removed;
/// - `Cast` to the input's dtype → removed; `Cast(Cast(x, T1), T2)` → `Cast(x, T2)` (or
///   nothing when `T2` is `x`'s dtype) when the first cast is exact for every value of `x`
///   and the merged cast provably converts each value the same way (see [`exact_cast`]);
/// - `Reshape` whose static output shape equals its input's (fixed or named dimensions) →
///   removed; `Reshape(Reshape(x, s1), s2)` → `Reshape(x, s2')`;
/// - `Transpose(Transpose(x, p1), p2)` → `Transpose(x, p1∘p2)`, and an identity permutation
///   → removed;
/// - `Squeeze`, `Unsqueeze` and `Flatten` with a fully static output shape →
///   `Reshape(x, shape)`.
///
/// A removal that would make a graph input or another output stand for a graph output is
/// skipped (the graph's interface does not change).
pub struct SimplifyChains;

impl GraphPass for SimplifyChains {
    fn name(&self) -> &'static str {
        "simplify-chains"
    }

    fn run(&self, mut graph: Graph) -> Result<Graph, GraphError> {
        for _ in 0..MAX_ROUNDS {
            let mut rw = Rewriter::new(graph);
            for i in 0..rw.graph().nodes().len() {
                rw.focus(NodeId(i));
                simplify_node(&mut rw, NodeId(i))?;
            }
            if !rw.changed() {
                return rw.finish();
            }
            graph = rw.finish()?;
        }
        Ok(graph)
    }
}

/// Applies the first rule that matches node `n`.
fn simplify_node(rw: &mut Rewriter, n: NodeId) -> Result<(), GraphError> {
    let node = &rw.graph().nodes()[n.0];
    if !node.domain.is_empty() {
        return Ok(());
    }
    let (Some(Some(x)), Some(Some(y))) = (node.inputs.first(), node.outputs.first()) else {
        return Ok(());
    };
    let (x, y) = (*x, *y);
    let replacement: Option<ValueId> = match node.op_type.as_str() {
        "Identity" => Some(x),
        "Dropout" if dropout_is_identity(rw, n) => Some(x),
        "Cast" => simplify_cast(rw, n, x)?,
        "Reshape" => simplify_reshape(rw, n, x, y)?,
        "Transpose" => simplify_transpose(rw, n, x)?,
        "Squeeze" | "Unsqueeze" | "Flatten" => to_reshape(rw, x, y)?,
        _ => None,
    };
    if let Some(r) = replacement {
        if rw.replaceable(y, r) {
            rw.replace(y, r);
            rw.remove_node(n);
        }
    }
    Ok(())
}

/// A Dropout that returns its input: not in training mode and no mask read.
fn dropout_is_identity(rw: &Rewriter, n: NodeId) -> bool {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if let Some(Some(mask)) = node.outputs.get(1) {
        if !g.value(*mask).users.is_empty() || g.outputs().contains(mask) {
            return false;
        }
    }
    if node.opset < 12 {
        return true;
    }
    let ratio_ok = match node.inputs.get(1).copied().flatten() {
        None => true,
        Some(r) => rw
            .constant(r)
            .is_some_and(|t| t.numel() == 1 && (0.0..1.0).contains(&t.to_f64_vec()[0])),
    };
    let inference = match node.inputs.get(2).copied().flatten() {
        None => true,
        Some(t) => rw.constant(t).is_some_and(|t| {
            t.dtype() == DType::Bool && t.numel() == 1 && t.to_f64_vec()[0] == 0.0
        }),
    };
    ratio_ok && inference
}

/// The `to` dtype of a Cast node.
fn cast_target(rw: &Rewriter, n: NodeId) -> Option<DType> {
    let code = rw.graph().nodes()[n.0].attrs.int("to").ok()??;
    DType::from_onnx_code(i32::try_from(*code).ok()?)
}

/// True when every value of dtype `from` converts to `to` exactly (and back).
pub fn exact_cast(from: DType, to: DType) -> bool {
    use DType::*;
    if from == to {
        return true;
    }
    // Mantissa bits (including the implicit one) of the float types.
    let mantissa = |d: DType| match d {
        F16 => Some(11),
        BF16 => Some(8),
        F32 => Some(24),
        F64 => Some(53),
        _ => None,
    };
    // (signed, value bits excluding the sign) of the integer types; bool is unsigned 1-bit.
    let int = |d: DType| match d {
        Bool => Some((false, 1)),
        I8 => Some((true, 7)),
        I16 => Some((true, 15)),
        I32 => Some((true, 31)),
        I64 => Some((true, 63)),
        U8 => Some((false, 8)),
        U16 => Some((false, 16)),
        U32 => Some((false, 32)),
        U64 => Some((false, 64)),
        _ => None,
    };
    match (int(from), int(to), mantissa(from), mantissa(to)) {
        // Integers: the target keeps every bit and, for signed sources, the sign.
        (Some((fs, fb)), Some((ts, tb)), _, _) => {
            to != Bool && (!fs || ts) && (fb <= tb) && (from == Bool || fs == ts || tb > fb)
        }
        // Integers into floats: every value fits the mantissa.
        (Some((_, fb)), None, _, Some(m)) => fb <= m,
        // Floats into floats: f16 → f32/f64, bf16 → f32/f64, f32 → f64 (exponent ranges
        // grow along with the mantissa for these pairs).
        (None, None, Some(fm), Some(tm)) => {
            fm < tm && !(from == F16 && to == BF16) && !(from == BF16 && to == F16)
        }
        _ => false,
    }
}

/// Cast → nothing (same dtype) or a merged Cast.
fn simplify_cast(rw: &mut Rewriter, n: NodeId, x: ValueId) -> Result<Option<ValueId>, GraphError> {
    let Some(to) = cast_target(rw, n) else {
        return Ok(None);
    };
    let g = rw.graph();
    let from = g.value(x).ty.dtype;
    if from == to {
        return Ok(Some(x));
    }
    let Some((p, _)) = g.value(x).producer else {
        return Ok(None);
    };
    let inner = &g.nodes()[p.0];
    if inner.op_type != "Cast" || !inner.domain.is_empty() {
        return Ok(None);
    }
    let Some(Some(src)) = inner.inputs.first().copied() else {
        return Ok(None);
    };
    let s = g.value(src).ty.dtype;
    // Cast(Cast(src: S, T1 = from), T2 = to): equal to Cast(src, T2) when S → T1 is exact
    // and T1 → T2 converts the exact value like S → T2 does: either S and T1 are both floats
    // or both not (same conversion rule in `Tensor::cast`), or T1 → T2 is exact too.
    let same_rule = s.is_float() == from.is_float();
    if !exact_cast(s, from) || !(same_rule || exact_cast(from, to)) {
        return Ok(None);
    }
    if s == to {
        return Ok(Some(src));
    }
    let mut attrs = Attributes::new();
    attrs.insert("to", Attribute::Int(i64::from(to.onnx_code())));
    Ok(Some(rw.add_op("Cast", attrs, &[src])?))
}

/// Static dimensions that name the same runtime size (fixed or symbolic, never unknown).
fn same_static_shape(a: &Option<Vec<Dim>>, b: &Option<Vec<Dim>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b && a.iter().all(|d| !matches!(d, Dim::Unknown)),
        _ => false,
    }
}

/// Reshape → nothing (same shape) or a Reshape of the inner Reshape's input.
fn simplify_reshape(
    rw: &mut Rewriter,
    n: NodeId,
    x: ValueId,
    y: ValueId,
) -> Result<Option<ValueId>, GraphError> {
    let g = rw.graph();
    if same_static_shape(&g.value(x).ty.shape, &g.value(y).ty.shape) {
        return Ok(Some(x));
    }
    let Some((p, _)) = g.value(x).producer else {
        return Ok(None);
    };
    let inner = &g.nodes()[p.0];
    if !inner.domain.is_empty()
        || !matches!(
            inner.op_type.as_str(),
            "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten"
        )
    {
        return Ok(None);
    }
    let Some(Some(src)) = inner.inputs.first().copied() else {
        return Ok(None);
    };
    let node = &g.nodes()[n.0];
    let allow_zero = node.opset >= 14 && node.attrs.int("allowzero").ok().flatten() == Some(&1);
    // The target, made independent of the intermediate shape: a fully static output shape
    // (without zero sizes), or the node's own constant target when it has no 0 entry that
    // would copy an intermediate dimension.
    let target = match g.value(y).ty.fixed_shape() {
        Some(s) if !s.contains(&0) => Target::New(s.iter().map(|&d| d as i64).collect()),
        _ => {
            let Some(Some(s)) = node.inputs.get(1).copied() else {
                return Ok(None);
            };
            match rw.constant(s) {
                Some(t) if allow_zero || !t.to_i64_vec().contains(&0) => Target::Existing(s),
                _ => return Ok(None),
            }
        }
    };
    Ok(Some(reshape(rw, src, target, allow_zero)?))
}

/// A Reshape target.
enum Target {
    New(Vec<i64>),
    Existing(ValueId),
}

/// Adds `Reshape(x, target)`.
fn reshape(
    rw: &mut Rewriter,
    x: ValueId,
    target: Target,
    allow_zero: bool,
) -> Result<ValueId, GraphError> {
    let shape = match target {
        Target::Existing(v) => v,
        Target::New(dims) => {
            let len = dims.len();
            let t = Tensor::new(vec![len], dims).map_err(|e| GraphError::Node {
                node: "reshape target".into(),
                op_type: "Reshape".into(),
                source: e.into(),
            })?;
            rw.add_constant("shape", t)
        }
    };
    let mut attrs = Attributes::new();
    if allow_zero {
        attrs.insert("allowzero", Attribute::Int(1));
    }
    rw.add_op("Reshape", attrs, &[x, shape])
}

/// The permutation of a Transpose node for an input of rank `rank`.
fn perm_of(rw: &Rewriter, n: NodeId, rank: Option<usize>) -> Option<Vec<usize>> {
    match rw.graph().nodes()[n.0].attrs.ints("perm").ok()? {
        Some(p) => {
            let p: Vec<usize> = p
                .iter()
                .map(|&a| usize::try_from(a).ok())
                .collect::<Option<_>>()?;
            let mut seen = vec![false; p.len()];
            for &a in &p {
                if a >= p.len() || std::mem::replace(&mut seen[a], true) {
                    return None;
                }
            }
            Some(p)
        }
        None => Some((0..rank?).rev().collect()),
    }
}

/// Transpose → nothing (identity permutation) or one Transpose of the inner one's input.
fn simplify_transpose(
    rw: &mut Rewriter,
    n: NodeId,
    x: ValueId,
) -> Result<Option<ValueId>, GraphError> {
    let g = rw.graph();
    let Some(p2) = perm_of(rw, n, g.value(x).ty.rank()) else {
        return Ok(None);
    };
    if p2.iter().enumerate().all(|(i, &a)| i == a) {
        return Ok(Some(x));
    }
    let Some((p, _)) = g.value(x).producer else {
        return Ok(None);
    };
    let inner = &g.nodes()[p.0];
    if inner.op_type != "Transpose" || !inner.domain.is_empty() {
        return Ok(None);
    }
    let Some(Some(src)) = inner.inputs.first().copied() else {
        return Ok(None);
    };
    let Some(p1) = perm_of(rw, p, g.value(src).ty.rank()) else {
        return Ok(None);
    };
    if p1.len() != p2.len() {
        return Ok(None);
    }
    // Output dim i of the second is its input dim p2[i], which is src dim p1[p2[i]].
    let composed: Vec<usize> = p2.iter().map(|&i| p1[i]).collect();
    if composed.iter().enumerate().all(|(i, &a)| i == a) {
        return Ok(Some(src));
    }
    let mut attrs = Attributes::new();
    attrs.insert(
        "perm",
        Attribute::Ints(composed.iter().map(|&a| a as i64).collect()),
    );
    Ok(Some(rw.add_op("Transpose", attrs, &[src])?))
}

/// Squeeze / Unsqueeze / Flatten with a fully static output → Reshape.
fn to_reshape(rw: &mut Rewriter, x: ValueId, y: ValueId) -> Result<Option<ValueId>, GraphError> {
    let g = rw.graph();
    let Some(shape) = g.value(y).ty.fixed_shape() else {
        return Ok(None);
    };
    if g.value(x).ty.fixed_shape().is_none() || shape.contains(&0) {
        return Ok(None);
    }
    let dims = shape.iter().map(|&d| d as i64).collect();
    Ok(Some(reshape(rw, x, Target::New(dims), false)?))
}
