//! The convolutions the convolution rewrites start from: a `Conv` node that reads a batch
//! of f32 images with a static shape, a constant f32 weight and an optional f32 bias, over a
//! window that resolves to a non-empty output.

use crate::dtype::DType;
use crate::graph::{NodeId, ValueId};
use crate::kernels::window::{Geometry, WindowSpec};
use crate::passes::rewrite::Rewriter;
use crate::tensor::Tensor;

/// What a statically shaped convolution node reads and computes.
pub struct ConvNode {
    pub name: String,
    pub x: ValueId,
    pub bias: Option<ValueId>,
    pub y: ValueId,
    /// `[OC, C / group, k…]`.
    pub weight: Tensor,
    /// The input's shape, `[N, C, d…]`.
    pub input_shape: Vec<usize>,
    pub group: usize,
    pub geometry: Geometry,
}

impl ConvNode {
    /// Input channels (`C`).
    pub fn channels(&self) -> usize {
        self.input_shape[1]
    }

    /// Images in the batch (`N`).
    pub fn batch(&self) -> usize {
        self.input_shape[0]
    }
}

/// Node `n` when it is a `Conv` (default domain) with one output, f32 data of a static shape
/// `[N, C, d…]` (at least one spatial axis, `N ≥ 1`), a constant f32 weight of the same rank with at
/// least one element, a bias (if any) of f32 `[OC]`, a `group` attribute that is a positive
/// integer, and a window whose kernel matches the weight and whose output is not empty.
pub fn static_conv(rw: &Rewriter, n: NodeId) -> Option<ConvNode> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if node.op_type != "Conv" || !node.domain.is_empty() {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let w = node.inputs.get(1).copied().flatten()?;
    let bias = node.inputs.get(2).copied().flatten();
    let y = match node.outputs.as_slice() {
        [Some(y)] => *y,
        _ => return None,
    };
    let xs = g.value(x).ty.fixed_shape()?;
    let weight = rw.constant(w)?.clone();
    let ws = weight.shape();
    let group = usize::try_from(node.attrs.int_or("group", 1).ok()?).ok()?;
    if g.value(x).ty.dtype != DType::F32 || weight.dtype() != DType::F32 {
        return None;
    }
    if xs.len() < 3 || ws.len() != xs.len() || xs[0] == 0 || group == 0 || weight.numel() == 0 {
        return None;
    }
    if let Some(b) = bias {
        let bt = &g.value(b).ty;
        if bt.dtype != DType::F32 || bt.fixed_shape()? != [ws[0]] {
            return None;
        }
    }
    let spec = WindowSpec::from_attrs(&node.attrs).ok()?;
    let window = spec.attrs(&ws[2..]).ok()?;
    if window.kernel != ws[2..] {
        return None;
    }
    let geometry = window.resolve(&xs[2..]).ok()?;
    if geometry.output_size() == 0 {
        return None;
    }
    Some(ConvNode {
        name: node.name.clone(),
        x,
        bias,
        y,
        weight,
        input_shape: xs,
        group,
        geometry,
    })
}

/// True when a convolution over `g` reads each output pixel's input pixel alone: a 1×1
/// window at stride 1 without padding (its im2col columns are the input itself).
pub fn is_pointwise(g: &Geometry) -> bool {
    g.kernel.iter().all(|&k| k == 1)
        && g.strides.iter().all(|&s| s == 1)
        && g.pads_begin.iter().chain(&g.pads_end).all(|&p| p == 0)
}
