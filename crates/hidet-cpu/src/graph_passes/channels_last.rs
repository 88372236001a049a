//! Channels-last convolutions around depthwise ones (MobileNet's inverted residual blocks).
//!
//! A depthwise convolution on `NCHW` data vectorizes along image rows: short (7 to 112
//! wide), read at the stride, with a padding test at each end. On channels-last data its
//! lanes are channels instead: every load is contiguous and every padding test is uniform
//! across the lanes. So [`DepthwiseChannelsLast`] rewrites
//!
//! ```text
//! Conv(X, W[C, 1, k…], B; group = C)
//!   →  Transpose(hidet::DepthwiseConvNhwc(Transpose(X, to_last), W'[k…, C], B), to_first)
//! ```
//!
//! and the implicit-GEMM pass ([`super::ConvToImplicitGemm`]) gives the convolutions next to
//! it the same form, `Transpose(Reshape(MatMul(pixels × channels, W), [N, o…, OC]), to_first)`:
//! those whose output feeds a `to_last` transpose (the expansion before a depthwise
//! convolution) and the pointwise ones whose input comes from a `to_first` one (the
//! projection after it, and the next block's expansion through the residual add).
//! [`SinkTransposes`] then moves each `to_first` transpose below the element-wise operators
//! that read it (`Clip`, the residual `Add`), where it meets the next `to_last` transpose and
//! [`super::SimplifyChains`] removes the pair: inside a run of such blocks, activations stay
//! channels-last and no transpose is left.

use std::collections::{HashMap, HashSet};

use crate::graph_ops::depthwise_nhwc;
use crate::graph_ops::HIDET_DOMAIN;
use crate::graph_passes::conv_implicit_gemm::transposed;
use hidet_graph::attribute::Attributes;
use hidet_graph::graph::{FusionHints, Graph, GraphError, NodeId, ValueId};
use hidet_graph::passes::conv_node::static_conv;
use hidet_graph::passes::rewrite::Rewriter;
use hidet_graph::passes::GraphPass;
use hidet_graph::tensor::Tensor;
use hidet_graph::Attribute;

/// The permutation of a `[N, C, d…]` tensor of `rank` dimensions to `[N, d…, C]`.
pub fn to_last(rank: usize) -> Vec<i64> {
    let mut p = vec![0];
    p.extend(2..rank as i64);
    p.push(1);
    p
}

/// The permutation of a `[N, d…, C]` tensor of `rank` dimensions to `[N, C, d…]`.
pub fn to_first(rank: usize) -> Vec<i64> {
    let mut p = vec![0, rank as i64 - 1];
    p.extend(1..rank as i64 - 1);
    p
}

/// `Transpose` attributes for `perm`.
pub fn perm_attrs(perm: Vec<i64>) -> Attributes {
    let mut attrs = Attributes::new();
    attrs.insert("perm", Attribute::Ints(perm));
    attrs
}

/// Element-wise operators of one data input (slot 0) whose other inputs, if any, are
/// parameters: a transpose commutes with them when those are scalars.
const UNARY: [&str; 14] = [
    "Relu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "LeakyRelu",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Selu",
    "Neg",
    "Abs",
    "Exp",
    "Sqrt",
    "Erf",
];

/// Element-wise operators of two inputs that broadcast: a transpose commutes with them when
/// both inputs are transposed alike (or one is a scalar).
const BINARY: [&str; 4] = ["Add", "Sub", "Mul", "Div"];

/// How deep [`channels_last_source`] follows element-wise operators.
const MAX_DEPTH: usize = 16;

fn is_elementwise(op: &str) -> bool {
    UNARY.contains(&op) || BINARY.contains(&op)
}

/// The `perm` of node `n` when it is a default-domain `Transpose` with an explicit one.
fn transpose_perm(g: &Graph, n: NodeId) -> Option<Vec<i64>> {
    let node = &g.nodes()[n.0];
    if node.op_type != "Transpose" || !node.domain.is_empty() {
        return None;
    }
    node.attrs.ints("perm").ok().flatten().map(|p| p.to_vec())
}

/// True when `v` is a constant of one element whose rank is at most `rank`: it broadcasts
/// to any shape of that rank alike, so a transpose commutes with it.
fn is_scalar(g: &Graph, v: ValueId, rank: usize) -> bool {
    hidet_graph::passes::rewrite::constant_of(g, v)
        .is_some_and(|t| t.numel() == 1 && t.rank() <= rank)
}

/// True when `v` has a static shape of `rank` dimensions all 1 past the channel axis (`[N or
/// 1, C, 1, …]`, the per-channel scale of a squeeze-and-excitation block): a binary operator
/// broadcasts it over the image, and the same values broadcast over a channels-last image
/// after `Transpose(v, to_last)`, which moves no data.
fn is_channel_broadcast(g: &Graph, v: ValueId, rank: usize) -> bool {
    g.value(v)
        .ty
        .fixed_shape()
        .is_some_and(|s| s.len() == rank && rank >= 3 && s[2..].iter().all(|&d| d == 1))
}

/// The rank of `v`, when known.
fn rank_of(g: &Graph, v: ValueId) -> Option<usize> {
    g.value(v).ty.shape.as_ref().map(Vec::len)
}

/// True when `v` is read once, by a chain of one-input element-wise operators (each output
/// read once) and SiLUs (`Mul(x, Sigmoid(x))`, see [`silu_of`]) ending in a `to_last`
/// transpose: its producer may store it channels-last.
pub fn feeds_channels_last(g: &Graph, v: ValueId) -> bool {
    let Some(rank) = rank_of(g, v) else {
        return false;
    };
    let mut v = v;
    for _ in 0..MAX_DEPTH {
        let value = g.value(v);
        if g.outputs().contains(&v) {
            return false;
        }
        if let Some(out) = silu_of(g, v) {
            v = out;
            continue;
        }
        let [(user, slot)] = value.users.as_slice() else {
            return false;
        };
        let node = &g.nodes()[user.0];
        if transpose_perm(g, *user).is_some_and(|p| p == to_last(rank)) {
            return true;
        }
        let passes = *slot == 0
            && UNARY.contains(&node.op_type.as_str())
            && node.domain.is_empty()
            && node
                .inputs
                .iter()
                .skip(1)
                .flatten()
                .all(|p| is_scalar(g, *p, rank));
        match (passes, node.outputs.as_slice()) {
            (true, [Some(out)]) => v = *out,
            _ => return false,
        }
    }
    false
}

/// The output of `Mul(v, Sigmoid(v))` (in either order) when those two nodes are `v`'s only
/// readers, the sigmoid is read by the product alone, and neither output is a graph output.
fn silu_of(g: &Graph, v: ValueId) -> Option<ValueId> {
    let single_output = |n: NodeId| -> Option<ValueId> {
        let node = &g.nodes()[n.0];
        match node.outputs.as_slice() {
            [Some(out)] if node.domain.is_empty() && !g.outputs().contains(out) => Some(*out),
            _ => None,
        }
    };
    let users = &g.value(v).users;
    let [(a, _), (b, _)] = users.as_slice() else {
        return None;
    };
    let (sigmoid, mul) = match (
        g.nodes()[a.0].op_type.as_str(),
        g.nodes()[b.0].op_type.as_str(),
    ) {
        ("Sigmoid", "Mul") => (*a, *b),
        ("Mul", "Sigmoid") => (*b, *a),
        _ => return None,
    };
    let s = single_output(sigmoid)?;
    let [(reader, _)] = g.value(s).users.as_slice() else {
        return None;
    };
    let inputs: Vec<ValueId> = g.nodes()[mul.0].inputs.iter().flatten().copied().collect();
    let pair = inputs == [v, s] || inputs == [s, v];
    (*reader == mul && pair).then_some(())?;
    single_output(mul)
}

/// True when `v` is, through element-wise operators, a `to_first` transpose of channels-last
/// data: the output of a `to_first` transpose, of a node whose outputs are in `rewritten`
/// (convolutions given the channels-last form earlier in the same rewrite), or of an
/// element-wise operator all of whose inputs are such values, scalars, or (for a binary
/// operator) per-channel broadcasts ([`is_channel_broadcast`], which [`SinkTransposes`]
/// transposes alike).
pub fn channels_last_source(g: &Graph, v: ValueId, rewritten: &HashSet<ValueId>) -> bool {
    fn walk(
        g: &Graph,
        v: ValueId,
        rank: usize,
        rewritten: &HashSet<ValueId>,
        depth: usize,
    ) -> bool {
        if rewritten.contains(&v) {
            return true;
        }
        let Some((p, _)) = g.value(v).producer else {
            return false;
        };
        if let Some(perm) = transpose_perm(g, p) {
            return perm == to_first(rank);
        }
        let node = &g.nodes()[p.0];
        if depth == 0 || !node.domain.is_empty() || !is_elementwise(&node.op_type) {
            return false;
        }
        let binary = BINARY.contains(&node.op_type.as_str());
        let data: Vec<ValueId> = node
            .inputs
            .iter()
            .flatten()
            .copied()
            .filter(|i| !(is_scalar(g, *i, rank) || binary && is_channel_broadcast(g, *i, rank)))
            .collect();
        !data.is_empty()
            && data
                .iter()
                .all(|i| rank_of(g, *i) == Some(rank) && walk(g, *i, rank, rewritten, depth - 1))
    }
    rank_of(g, v).is_some_and(|rank| rank >= 3 && walk(g, v, rank, rewritten, MAX_DEPTH))
}

/// Rewrites f32 depthwise `Conv` nodes (default domain, `group` equal to the input and
/// output channel count, a constant weight, a static input of any batch) into
/// `hidet::DepthwiseConvNhwc` between transposes (see the module docs).
pub struct DepthwiseChannelsLast;

impl GraphPass for DepthwiseChannelsLast {
    fn name(&self) -> &'static str {
        "depthwise-channels-last"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::with_registry(graph, crate::graph_ops::registry());
        for i in 0..rw.graph().nodes().len() {
            let Some(plan) = depthwise_plan(&rw, NodeId(i)) else {
                continue;
            };
            rw.focus(NodeId(i));
            let x_last = rw.add_op("Transpose", perm_attrs(to_last(plan.rank)), &[plan.x])?;
            // Where no `to_first` transpose cancels it, the channels-last copy is made once
            // rather than read through by every tap of the window (a gather per tap).
            rw.set_hints(
                x_last,
                FusionHints {
                    materialize: true,
                    ..FusionHints::default()
                },
            )?;
            let weight = rw.add_constant("depthwise_weight_last", plan.weight_last);
            let mut inputs = vec![x_last, weight];
            inputs.extend(plan.bias);
            let y_last =
                rw.add_domain_op(HIDET_DOMAIN, depthwise_nhwc::OP_TYPE, plan.attrs, &inputs)?;
            let y = rw.add_op("Transpose", perm_attrs(to_first(plan.rank)), &[y_last])?;
            rw.replace(plan.y, y);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// What one applicable depthwise convolution reads and becomes.
struct DepthwisePlan {
    x: ValueId,
    bias: Option<ValueId>,
    y: ValueId,
    rank: usize,
    /// The weight `[C, 1, k…]` as `[k…, C]`.
    weight_last: Tensor,
    /// The window with explicit pads.
    attrs: Attributes,
}

/// The plan for node `n`, when it is a statically shaped convolution ([`static_conv`])
/// with `group` equal to its input and output channel counts (at least 2).
fn depthwise_plan(rw: &Rewriter, n: NodeId) -> Option<DepthwisePlan> {
    let conv = static_conv(rw, n)?;
    let channels = conv.channels();
    let ws = conv.weight.shape();
    if conv.group != channels || ws[0] != channels || ws[1] != 1 || channels < 2 {
        return None;
    }
    let geometry = &conv.geometry;
    let mut shape = geometry.kernel.clone();
    shape.push(channels);
    let weight_last = transposed(&conv.weight, channels, geometry.kernel_size())
        .and_then(|t| t.reshape(shape))
        .ok()?;
    let attrs = geometry.explicit_attrs();
    Some(DepthwisePlan {
        x: conv.x,
        bias: conv.bias,
        y: conv.y,
        rank: conv.input_shape.len(),
        weight_last,
        attrs,
    })
}

/// Moves `to_first` transposes below element-wise operators:
/// `Op(Transpose(a, p), s, Transpose(b, p))` → `Transpose(Op(a, s, b), p)` when every
/// non-scalar input of `Op` is a transpose by the same `p = to_first(rank)` (scalar constant
/// inputs `s` broadcast alike either way), or, for a binary operator, a per-channel broadcast
/// `c` ([`is_channel_broadcast`]), read as `Transpose(c, to_last)`. Transposes by other permutations are left where
/// they are (the attention transposes of transformers keep their place as prologues).
///
/// A `Reshape` of a `to_first` transpose of `[N, d…, C]` to `[N, C, ∏d]` (the pixels
/// flattened, as a vision transformer's Mix-FFN does after its depthwise convolution) becomes
/// `Transpose(Reshape(x, [N, ∏d, C]), [0, 2, 1])`, which sinks further in the same way: the
/// `[0, 2, 1]` transpose that usually follows the activations then cancels with it.
pub struct SinkTransposes;

impl GraphPass for SinkTransposes {
    fn name(&self) -> &'static str {
        "sink-transposes"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::with_registry(graph, crate::graph_ops::registry());
        // Outputs of operators already sunk below their transpose: what they are a transpose of.
        let mut sunk: HashMap<ValueId, (ValueId, Vec<i64>)> = HashMap::new();
        for i in 0..rw.graph().nodes().len() {
            let g = rw.graph();
            let node = &g.nodes()[i];
            if node.domain.is_empty() && node.op_type == "GlobalAveragePool" {
                if let Some((x, y, shape)) = pooled_channels_last(g, NodeId(i), &sunk) {
                    rw.focus(NodeId(i));
                    let out = channels_last_mean(&mut rw, x, &shape)?;
                    rw.replace(y, out);
                    rw.remove_node(NodeId(i));
                }
                continue;
            }
            if node.domain.is_empty() && node.op_type == "Reshape" {
                if let Some((x, y, rows)) = flattened_channels_last(g, NodeId(i), &sunk) {
                    rw.focus(NodeId(i));
                    let rows = rw.add_shape(&rows);
                    let inner = rw.add_op("Reshape", Attributes::new(), &[x, rows])?;
                    let swap = vec![0, 2, 1];
                    let t = rw.add_op("Transpose", perm_attrs(swap.clone()), &[inner])?;
                    rw.replace(y, t);
                    rw.remove_node(NodeId(i));
                    sunk.insert(y, (inner, swap));
                }
                continue;
            }
            if !node.domain.is_empty() || !is_elementwise(&node.op_type) {
                continue;
            }
            let [Some(out)] = node.outputs.as_slice() else {
                continue;
            };
            let out = *out;
            let Some(rank) = rank_of(g, out).filter(|r| *r >= 3) else {
                continue;
            };
            let first = to_first(rank);
            let source = |v: ValueId| -> Option<ValueId> {
                if let Some((src, perm)) = sunk.get(&v) {
                    return (*perm == first).then_some(*src);
                }
                let (p, _) = g.value(v).producer?;
                let perm = transpose_perm(g, p)?;
                let input = g.nodes()[p.0].inputs.first().copied().flatten()?;
                // A transpose undoing one sunk just before cancels with it (`SimplifyChains`)
                // where it is: moving it would part the pair.
                let undoes = |(_, q): &(ValueId, Vec<i64>)| {
                    (0..q.len()).all(|i| usize::try_from(perm[i]).is_ok_and(|pi| q[pi] == i as i64))
                };
                if sunk.get(&input).is_some_and(undoes) {
                    return None;
                }
                (perm == first).then_some(input)
            };
            let binary = BINARY.contains(&node.op_type.as_str());
            let mut inputs = Vec::with_capacity(node.inputs.len());
            // Per-channel broadcasts (slots) to read through a `to_last` transpose.
            let mut broadcasts = Vec::new();
            let mut moved = 0;
            let mut applies = true;
            for (slot, v) in node.inputs.iter().enumerate() {
                match v {
                    None => inputs.push(None),
                    Some(v) if is_scalar(g, *v, rank) && (slot > 0 || binary) => {
                        inputs.push(Some(*v))
                    }
                    Some(v) => match source(*v) {
                        Some(src) if (slot == 0 || binary) => {
                            moved += 1;
                            inputs.push(Some(src));
                        }
                        _ if binary && is_channel_broadcast(g, *v, rank) => {
                            broadcasts.push(slot);
                            inputs.push(Some(*v));
                        }
                        _ => {
                            applies = false;
                            break;
                        }
                    },
                }
            }
            if !applies || moved == 0 {
                continue;
            }
            let shapes: HashSet<_> = inputs
                .iter()
                .enumerate()
                .filter(|(slot, v)| {
                    v.is_some_and(|v| !is_scalar(g, v, rank)) && !broadcasts.contains(slot)
                })
                .map(|(_, v)| v.map(|v| g.value(v).ty.shape.clone()))
                .collect();
            if shapes.len() != 1 {
                continue;
            }
            rw.focus(NodeId(i));
            for &slot in &broadcasts {
                let v = inputs[slot].expect("a broadcast slot holds an input");
                let last = rw.add_op("Transpose", perm_attrs(to_last(rank)), &[v])?;
                inputs[slot] = Some(last);
            }
            let inner = rw.add_copy_of(NodeId(i), &inputs)?[0];
            let t = rw.add_op("Transpose", perm_attrs(first.clone()), &[inner])?;
            rw.replace(out, t);
            rw.remove_node(NodeId(i));
            sunk.insert(out, (inner, first));
        }
        rw.finish()
    }
}

/// The channels-last data `v` (of `rank` dimensions) is the `to_first` transpose of: the input
/// of a `Transpose` by `to_first(rank)`, or of an operator sunk below one (in `sunk`).
fn channels_last_of(
    g: &Graph,
    v: ValueId,
    rank: usize,
    sunk: &HashMap<ValueId, (ValueId, Vec<i64>)>,
) -> Option<ValueId> {
    let first = to_first(rank);
    match sunk.get(&v) {
        Some((src, perm)) => (*perm == first).then_some(*src),
        None => {
            let (p, _) = g.value(v).producer?;
            (transpose_perm(g, p)? == first).then_some(())?;
            g.nodes()[p.0].inputs.first().copied().flatten()
        }
    }
}

/// For a `Reshape` node `n` of a `to_first` transpose (or of an operator sunk below one, in
/// `sunk`) of channels-last data `x` of a static shape `[N, d…, C]` (two or more `d`) to `[N,
/// C, ∏d]`: `x`, the reshape's output and the shape `[N, ∏d, C]` that reads `x` as rows.
fn flattened_channels_last(
    g: &Graph,
    n: NodeId,
    sunk: &HashMap<ValueId, (ValueId, Vec<i64>)>,
) -> Option<(ValueId, ValueId, [usize; 3])> {
    let node = &g.nodes()[n.0];
    let (Some(Some(input)), [Some(y)]) = (node.inputs.first(), node.outputs.as_slice()) else {
        return None;
    };
    let rank = rank_of(g, *input).filter(|r| *r >= 4)?;
    let x = channels_last_of(g, *input, rank, sunk)?;
    let shape = g.value(x).ty.fixed_shape()?;
    let (batch, channels) = (shape[0], shape[rank - 1]);
    let pixels: usize = shape[1..rank - 1].iter().product();
    (g.value(*y).ty.fixed_shape()? == [batch, channels, pixels]).then_some((
        x,
        *y,
        [batch, pixels, channels],
    ))
}

/// For a `GlobalAveragePool` node `n` whose input is a `to_first` transpose (or an operator
/// sunk below one, in `sunk`) of channels-last data `x` of a static shape `[N, d…, C]`:
/// `x`, the pooling's output and that shape.
fn pooled_channels_last(
    g: &Graph,
    n: NodeId,
    sunk: &HashMap<ValueId, (ValueId, Vec<i64>)>,
) -> Option<(ValueId, ValueId, Vec<usize>)> {
    let node = &g.nodes()[n.0];
    let ([Some(input)], [Some(y)]) = (node.inputs.as_slice(), node.outputs.as_slice()) else {
        return None;
    };
    let rank = rank_of(g, *input).filter(|r| *r >= 3)?;
    let x = channels_last_of(g, *input, rank, sunk)?;
    let shape = g.value(x).ty.fixed_shape()?;
    Some((x, *y, shape))
}

/// The global average of channels-last `x` of shape `[N, d…, C]` over its pixels, as the
/// `[N, C, 1…]` a `GlobalAveragePool` of its `to_first` transpose gives:
/// `Reshape(ReduceMean(Reshape(x, [N, ∏d, C]), axes = [1]), [N, C, 1…])`. The mean's
/// lanes are channels, each read contiguously, instead of a strided walk over each
/// channel's pixels; the result's memory order is that of `[N, C]`, so nothing is
/// transposed.
fn channels_last_mean(
    rw: &mut Rewriter,
    x: ValueId,
    shape: &[usize],
) -> Result<ValueId, GraphError> {
    let (batch, channels) = (shape[0], shape[shape.len() - 1]);
    let pixels = shape[1..shape.len() - 1].iter().product::<usize>();
    let rows = rw.add_shape(&[batch, pixels, channels]);
    let x = rw.add_op("Reshape", Attributes::new(), &[x, rows])?;
    let mut attrs = Attributes::new();
    attrs.insert("axes", Attribute::Ints(vec![1]));
    attrs.insert("keepdims", Attribute::Int(1));
    let mean = rw.add_op("ReduceMean", attrs, &[x])?;
    let mut out = vec![batch, channels];
    out.resize(shape.len(), 1);
    let out = rw.add_shape(&out);
    rw.add_op("Reshape", Attributes::new(), &[mean, out])
}
