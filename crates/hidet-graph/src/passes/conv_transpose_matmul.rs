//! A transposed convolution as a matrix product and a column-to-image scatter.
//!
//! ```text
//! ConvTranspose(X[N, C, s…], W[C, M, k…], B?)          (group 1, constant W and B)
//!   →  Col2Im(MatMul(Wᵀ[M·∏k, C], Reshape(X, [N, C, ∏s])), out…, k…) (+ B[1, M, 1…])
//! ```
//!
//! Input position `i` of channel `c` adds `X[n, c, i] · W[c, m, k]` to output position
//! `i·stride + k·dilation - pad_begin` of channel `m`. The product computes every such
//! contribution once, `cols[n, (m, k), i] = Σ_c W[c, m, k] · X[n, c, i]` (the weight,
//! transposed once here, is the product's constant operand), and `Col2Im` sums, for each
//! output position, the contributions that land on it: exactly the operator's definition,
//! with the channel reduction in the matmul template instead of on the host. `Col2Im`'s end
//! padding is chosen so that its block positions are the input's spatial positions; a node
//! where no padding does (an `output_shape` larger than the transposed convolution covers)
//! is left as it is.

use crate::attribute::{Attribute, Attributes};
use crate::dtype::DType;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::ops::conv_transpose::geometry;
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// The opset that introduced `Col2Im`.
const COL2IM_OPSET: i64 = 18;

/// Rewrites each `ConvTranspose` (default domain, f32, static input shape, group 1, constant
/// weight and bias) into `MatMul` + `Col2Im` (+ `Add`), see the module docs.
pub struct ConvTransposeAsMatMul;

impl GraphPass for ConvTransposeAsMatMul {
    fn name(&self) -> &'static str {
        "conv-transpose-as-matmul"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let Some(plan) = plan(&rw, NodeId(i)) else {
                continue;
            };
            rw.focus(NodeId(i));
            let flat = rw.add_shape(&[plan.batch, plan.channels, plan.positions]);
            let x = rw.add_op("Reshape", Attributes::new(), &[plan.x, flat])?;
            let weight = rw.add_constant("conv_transpose_columns", plan.columns);
            let cols = rw.add_op("MatMul", Attributes::new(), &[weight, x])?;
            let image = rw.add_shape(&plan.out);
            let block = rw.add_shape(&plan.kernel);
            let mut attrs = Attributes::new();
            attrs.insert("strides", Attribute::Ints(plan.strides));
            attrs.insert("dilations", Attribute::Ints(plan.dilations));
            attrs.insert("pads", Attribute::Ints(plan.pads));
            let mut y = rw.add_op_at("Col2Im", COL2IM_OPSET, attrs, &[cols, image, block])?;
            if let Some(bias) = plan.bias {
                let bias = rw.add_constant("conv_transpose_bias", bias);
                y = rw.add_op("Add", Attributes::new(), &[y, bias])?;
            }
            rw.replace(plan.y, y);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// What one applicable node reads and becomes.
struct Plan {
    x: ValueId,
    y: ValueId,
    batch: usize,
    channels: usize,
    /// Input spatial positions (`∏s`).
    positions: usize,
    /// `Wᵀ`: `[M·∏k, C]`.
    columns: Tensor,
    bias: Option<Tensor>,
    out: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    /// Col2Im's pads: the transposed convolution's begin pads, then the end pads that make
    /// its block positions the input's.
    pads: Vec<i64>,
}

fn plan(rw: &Rewriter, n: NodeId) -> Option<Plan> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if node.op_type != "ConvTranspose" || !node.domain.is_empty() || node.outputs.len() != 1 {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let w = rw.constant(node.inputs.get(1).copied().flatten()?)?;
    let xs = g.value(x).ty.fixed_shape()?;
    if g.value(x).ty.dtype != DType::F32
        || w.dtype() != DType::F32
        || xs.len() < 3
        || xs[2..].contains(&0)
    {
        return None;
    }
    let ws = w.shape();
    if ws.len() != xs.len() || ws[0] != xs[1] {
        return None;
    }
    let (geo, group) = geometry(&node.attrs, &xs[2..], &ws[2..]).ok()?;
    if group != 1 || geo.pads_begin.iter().any(|&p| p < 0) {
        return None;
    }
    let (channels, m) = (ws[0], ws[1]);
    let k: usize = ws[2..].iter().product();
    let mut end_pads = Vec::with_capacity(xs.len() - 2);
    for a in 0..xs.len() - 2 {
        let span = geo.dilations[a] * (geo.kernel[a] - 1) + 1;
        let covered = (geo.strides[a] * (xs[2 + a] - 1) + span) as i64;
        // An output padding ends the image up to `stride - 1` past the last tap: no end
        // padding then (Col2Im's floor still gives the input's positions).
        let end = (covered - geo.out[a] as i64 - geo.pads_begin[a]).max(0);
        let padded = geo.out[a] as i64 + geo.pads_begin[a] + end;
        let positions = (padded - span as i64).div_euclid(geo.strides[a] as i64) + 1;
        if padded < span as i64 || positions != xs[2 + a] as i64 {
            return None;
        }
        end_pads.push(end);
    }
    let bias = match node.inputs.get(2).copied().flatten() {
        None => None,
        Some(b) => {
            let b = rw.constant(b)?;
            let mut shape = vec![1; xs.len()];
            shape[1] = m;
            Some(b.reshape(shape).ok()?)
        }
    };
    let wv = w.as_slice::<f32>().ok()?;
    let mut columns = vec![0f32; m * k * channels];
    for c in 0..channels {
        for mk in 0..m * k {
            columns[mk * channels + c] = wv[c * m * k + mk];
        }
    }
    let as_i64 = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<i64>>();
    let mut pads = geo.pads_begin.clone();
    pads.extend(end_pads);
    Some(Plan {
        x,
        y: node.outputs[0]?,
        batch: xs[0],
        channels,
        positions: xs[2..].iter().product(),
        columns: Tensor::new(vec![m * k, channels], columns).ok()?,
        bias,
        out: geo.out.clone(),
        kernel: geo.kernel.clone(),
        strides: as_i64(&geo.strides),
        dilations: as_i64(&geo.dilations),
        pads,
    })
}
