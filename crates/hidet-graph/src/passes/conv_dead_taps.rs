//! Kernel taps that only ever read padding, dropped from convolutions.
//!
//! Kernel position `k` of a spatial axis reads input position `o·stride + k·dilation -
//! pad_begin` for the output positions `o`; when none of those lies inside the input, the
//! tap multiplies zeros everywhere. Dilated convolutions over small images have such taps:
//! the atrous pyramid of DeepLab's segmentation heads (dilations 12, 24, 36 over a 32×32
//! feature map) has, at dilation 36, only its centre tap inside the image, a 3×3
//! convolution doing a 1×1 convolution's work nine times over. The live taps of an axis are
//! a contiguous range `[lo, hi]`; the convolution becomes one with the weight sliced to
//! that range and the padding reduced by the dropped taps' span, which reads exactly the
//! same input positions for every output position (same output size, same values).
//!
//! ```text
//! Conv(X, W[OC, C/g, k…], B?)  →  Conv(X, W[:, :, lo..=hi…], B?)  (pads − dropped spans)
//! ```

use crate::attribute::Attribute;
use crate::graph::{Graph, GraphError, NodeId};
use crate::passes::conv_node::static_conv;
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// Trims the taps that read only padding from each statically shaped convolution with a
/// constant weight (`static_conv`), see the module docs.
pub struct ConvDeadTaps;

impl GraphPass for ConvDeadTaps {
    fn name(&self) -> &'static str {
        "conv-dead-taps"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let Some(conv) = static_conv(&rw, NodeId(i)) else {
                continue;
            };
            let geo = &conv.geometry;
            let axes = geo.kernel.len();
            let mut live = Vec::with_capacity(axes);
            for a in 0..axes {
                let (s, d, pb) = (
                    geo.strides[a] as i64,
                    geo.dilations[a] as i64,
                    geo.pads_begin[a] as i64,
                );
                let (input, last) = (geo.input[a] as i64, geo.output[a] as i64 - 1);
                let reads_input = |k: i64| k * d - pb < input && last * s + k * d - pb >= 0;
                let taps = 0..geo.kernel[a] as i64;
                let (Some(lo), Some(hi)) = (
                    taps.clone().find(|&k| reads_input(k)),
                    taps.rev().find(|&k| reads_input(k)),
                ) else {
                    break;
                };
                let begin = pb - lo * d;
                let end = geo.pads_end[a] as i64 - (geo.kernel[a] as i64 - 1 - hi) * d;
                if begin < 0 || end < 0 {
                    break;
                }
                live.push((lo as usize, hi as usize, begin, end));
            }
            let trimmed = live
                .iter()
                .zip(&geo.kernel)
                .any(|(&(lo, hi, _, _), &k)| lo > 0 || hi + 1 < k);
            if live.len() != axes || !trimmed {
                continue;
            }
            let weight = slice_spatial(&conv.weight, &live);
            let g = rw.graph();
            let mut attrs = g.nodes()[i].attrs.clone();
            attrs.remove("auto_pad");
            attrs.insert(
                "kernel_shape",
                Attribute::Ints(live.iter().map(|t| (t.1 - t.0 + 1) as i64).collect()),
            );
            let pads: Vec<i64> = live
                .iter()
                .map(|t| t.2)
                .chain(live.iter().map(|t| t.3))
                .collect();
            attrs.insert("pads", Attribute::Ints(pads));
            rw.focus(NodeId(i));
            let w = rw.add_constant("conv_live_taps", weight);
            let y = rw.add_node("Conv", attrs, &[Some(conv.x), Some(w), conv.bias], 1, None)?[0];
            rw.replace(conv.y, y);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// `w[:, :, lo₀..=hi₀, lo₁..=hi₁, …]` for the `(lo, hi, _, _)` of each spatial axis.
pub(crate) fn slice_spatial(w: &Tensor, live: &[(usize, usize, i64, i64)]) -> Tensor {
    let shape = w.shape();
    let values = w.to_f64_vec();
    let mut out_shape = shape[..2].to_vec();
    out_shape.extend(live.iter().map(|t| t.1 - t.0 + 1));
    let count: usize = out_shape.iter().product();
    let mut out = Vec::with_capacity(count);
    let mut index = vec![0usize; out_shape.len()];
    for _ in 0..count {
        let mut flat = 0usize;
        for (d, (&i, &n)) in index.iter().zip(shape).enumerate() {
            let source = if d < 2 { i } else { i + live[d - 2].0 };
            flat = flat * n + source;
        }
        out.push(values[flat] as f32);
        for d in (0..index.len()).rev() {
            index[d] += 1;
            if index[d] < out_shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Tensor::new(out_shape, out).expect("one value per element of the sliced shape")
}
