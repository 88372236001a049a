//! A short-time Fourier transform of a real signal as one matrix product.
//!
//! ```text
//! STFT(S[B, len(, 1)], step, window W[L]?, frame_length L?)      (onesided or not)
//!   →  Reshape(MatMul(Gather(Reshape(S, [B, len]), F, axis 1), D), [B, frames, bins, 2])
//! ```
//!
//! `F[f, n] = f·step + n` (a constant `[frames, L]` index table) gathers the frames, and
//! `D[n, 2k + c] = W[n]·(cos, −sin)(2π·kn/L)` (a constant `[L, 2·bins]`, the window folded in)
//! holds each bin's real and imaginary parts side by side, so the product's row of `2·bins`
//! columns is the frame's spectrum as the operator lays it out. The direct transform is
//! `frames · L · bins` multiply-adds either way; as a product it runs on the backend's matrix
//! template instead of the host (a log-mel front end's 400-point frames).

use std::f64::consts::PI;

use crate::attribute::Attributes;
use crate::dtype::DType;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;
use crate::Attribute;

/// Elements of the transform's constant basis (`L · 2·bins`) above which the operator is
/// left as it is.
pub const MAX_STFT_BASIS: usize = 1 << 24;

/// Rewrites default-domain `STFT` nodes of a statically shaped real `f32` signal whose
/// `frame_step`, `window` and `frame_length` are constants (or absent) into a gather of the
/// frames and one matrix product (see the module docs). Complex signals, and anything the
/// operator would reject, are left to the operator.
pub struct StftAsProduct;

impl GraphPass for StftAsProduct {
    fn name(&self) -> &'static str {
        "stft-as-product"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        Rewriter::new(graph).replace_each(plan, |p| p.y, rewrite)
    }
}

/// One applicable STFT.
struct Plan {
    signal: ValueId,
    y: ValueId,
    batch: usize,
    len: usize,
    step: usize,
    frame: usize,
    window: Option<Vec<f64>>,
    onesided: bool,
}

impl Plan {
    fn frames(&self) -> usize {
        1 + (self.len - self.frame) / self.step
    }

    fn bins(&self) -> usize {
        if self.onesided {
            self.frame / 2 + 1
        } else {
            self.frame
        }
    }
}

/// A positive integer scalar constant (`frame_step`, `frame_length`).
fn positive_constant(rw: &Rewriter, v: ValueId) -> Option<usize> {
    let t = rw.constant(v)?;
    if t.numel() != 1 {
        return None;
    }
    let value = *t.to_i64_vec().first()?;
    usize::try_from(value).ok().filter(|&v| v > 0)
}

fn plan(rw: &Rewriter, n: NodeId) -> Option<Plan> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if node.op_type != "STFT" || !node.domain.is_empty() {
        return None;
    }
    let onesided = match node.attrs.int_or("onesided", 1).ok()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let input = |i: usize| node.inputs.get(i).copied().flatten();
    let signal = input(0)?;
    let ty = &g.value(signal).ty;
    if ty.dtype != DType::F32 {
        return None;
    }
    let (batch, len) = match *ty.fixed_shape()?.as_slice() {
        [batch, len, 1] | [batch, len] => (batch, len),
        _ => return None,
    };
    let step = positive_constant(rw, input(1)?)?;
    let window = match input(2) {
        Some(w) => {
            let w = rw.constant(w)?;
            if w.rank() != 1 {
                return None;
            }
            Some(w.to_f64_vec())
        }
        None => None,
    };
    let frame = match (input(3), &window) {
        (Some(l), _) => positive_constant(rw, l)?,
        (None, Some(w)) => w.len(),
        (None, None) => len,
    };
    if window.as_ref().is_some_and(|w| w.len() != frame) || frame > len || batch == 0 {
        return None;
    }
    let y = match node.outputs.as_slice() {
        [Some(y)] => *y,
        _ => return None,
    };
    let plan = Plan {
        signal,
        y,
        batch,
        len,
        step,
        frame,
        window,
        onesided,
    };
    let basis = plan.frame.checked_mul(2 * plan.bins())?;
    let table = plan.frames().checked_mul(plan.frame)?;
    (basis <= MAX_STFT_BASIS && table <= MAX_STFT_BASIS && i32::try_from(len).is_ok())
        .then_some(plan)
}

fn rewrite(rw: &mut Rewriter, p: &Plan) -> Result<ValueId, GraphError> {
    let (frames, frame, bins) = (p.frames(), p.frame, p.bins());
    let shape = rw.add_shape(&[p.batch, p.len]);
    let signal = rw.add_op("Reshape", Attributes::new(), &[p.signal, shape])?;
    let starts: Vec<i64> = (0..frames)
        .flat_map(|f| (0..frame).map(move |n| (f * p.step + n) as i64))
        .collect();
    let starts = Tensor::new(vec![frames, frame], starts).expect("frames · frame indices");
    let starts = rw.add_constant("stft_frame_indices", starts);
    let mut axis = Attributes::new();
    axis.insert("axis", Attribute::Int(1));
    let framed = rw.add_op("Gather", axis, &[signal, starts])?;
    let mut basis = Vec::with_capacity(frame * 2 * bins);
    for n in 0..frame {
        let w = p.window.as_ref().map_or(1.0, |w| w[n]);
        for k in 0..bins {
            // `k·n` reduced mod `L` first, so the angle stays exact.
            let angle = 2.0 * PI * ((k * n) % frame) as f64 / frame as f64;
            let (sin, cos) = angle.sin_cos();
            basis.push((w * cos) as f32);
            basis.push((-w * sin) as f32);
        }
    }
    let basis = Tensor::new(vec![frame, 2 * bins], basis).expect("frame · 2·bins values");
    let basis = rw.add_constant("stft_basis", basis);
    let spectrum = rw.add_op("MatMul", Attributes::new(), &[framed, basis])?;
    let shape = rw.add_shape(&[p.batch, frames, bins, 2]);
    rw.add_op("Reshape", Attributes::new(), &[spectrum, shape])
}
