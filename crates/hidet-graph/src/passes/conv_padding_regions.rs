//! Convolutions that mostly read padding, split into regions that read none.
//!
//! Along a spatial axis, output position `o` reads input position `o·stride + k·dilation -
//! pad_begin` through kernel tap `k`; the taps that land inside the input form a range
//! `[lo, hi]` that depends on `o`, and the output positions with equal ranges form
//! intervals. A dilated convolution over a small image is mostly padding: DeepLab's atrous
//! pyramid at dilation 12 over a 16×16 map reads, per axis, the image through both outer
//! taps only at 4 of 16 positions, so three quarters of its products multiply zeros. Split
//! into the grid of intervals of every axis, each region is an unpadded convolution of the
//! weight's live taps over the slice of the input those taps read (the centre region of that
//! pyramid convolution is a 1×1 convolution), and the regions are concatenated back:
//!
//! ```text
//! Conv(X, W, B?)  →  Concat over regions r of Conv(Slice(X, rows of r), W[:, :, taps of r], B?)
//! ```
//!
//! Each output value sums exactly the products of the original convolution that read the
//! image, so the result is the same. Applied when the regions do at most
//! [`MAX_KEPT_WORK_PERCENT`] of the convolution's multiply-adds, there are at most
//! [`MAX_REGIONS`] of them, and the convolution is large enough for the saving to outweigh
//! the extra kernels ([`MIN_MACS`]).

use crate::attribute::Attribute;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::passes::conv_dead_taps::slice_spatial;
use crate::passes::conv_node::{static_conv, ConvNode};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// The most multiply-adds, in percent of the convolution's, that the regions may do.
pub const MAX_KEPT_WORK_PERCENT: usize = 60;

/// The most regions a convolution is split into.
pub const MAX_REGIONS: usize = 16;

/// The fewest multiply-adds a convolution must do to be split.
pub const MIN_MACS: usize = 1 << 22;

/// Splits each statically shaped convolution with a constant weight (`static_conv`) whose
/// taps mostly read padding into padding-free regions, see the module docs.
pub struct ConvPaddingRegions;

impl GraphPass for ConvPaddingRegions {
    fn name(&self) -> &'static str {
        "conv-padding-regions"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let Some(conv) = static_conv(&rw, NodeId(i)) else {
                continue;
            };
            let Some(axes) = regions(&conv) else {
                continue;
            };
            rw.focus(NodeId(i));
            let attrs = rw.graph().nodes()[i].attrs.clone();
            let mut split = Split {
                rw: &mut rw,
                conv: &conv,
                attrs,
                axes: &axes,
            };
            let y = split.assemble(&mut Vec::new())?;
            rw.replace(conv.y, y);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// One interval of output positions of an axis: `[first, end)`, reading the input through
/// taps `[lo, hi]`.
#[derive(Debug, Clone, Copy)]
struct Interval {
    first: usize,
    end: usize,
    lo: usize,
    hi: usize,
}

/// The intervals of every spatial axis, when splitting `conv` pays (see the module docs).
fn regions(conv: &ConvNode) -> Option<Vec<Vec<Interval>>> {
    let geo = &conv.geometry;
    let mut axes = Vec::with_capacity(geo.kernel.len());
    let (mut kept, mut full) = (1usize, 1usize);
    for a in 0..geo.kernel.len() {
        let (s, d, pb) = (
            geo.strides[a] as i64,
            geo.dilations[a] as i64,
            geo.pads_begin[a] as i64,
        );
        let (input, k) = (geo.input[a] as i64, geo.kernel[a] as i64);
        let mut intervals: Vec<Interval> = Vec::new();
        for o in 0..geo.output[a] {
            let reads = |t: i64| (0..input).contains(&(o as i64 * s + t * d - pb));
            let lo = (0..k).find(|&t| reads(t))? as usize;
            let hi = (0..k).rev().find(|&t| reads(t))? as usize;
            match intervals.last_mut() {
                Some(last) if (last.lo, last.hi) == (lo, hi) => last.end = o + 1,
                _ => intervals.push(Interval {
                    first: o,
                    end: o + 1,
                    lo,
                    hi,
                }),
            }
        }
        let taps: usize = intervals
            .iter()
            .map(|r| (r.end - r.first) * (r.hi - r.lo + 1))
            .sum();
        kept = kept.checked_mul(taps)?;
        full = full.checked_mul(geo.output[a].checked_mul(geo.kernel[a])?)?;
        axes.push(intervals);
    }
    let count: usize = axes.iter().map(Vec::len).product();
    let per_tap = conv.batch() * conv.weight.shape()[0] * conv.weight.shape()[1];
    let macs = full.checked_mul(per_tap)?;
    let pays = kept * 100 <= full * MAX_KEPT_WORK_PERCENT;
    (count > 1 && count <= MAX_REGIONS && pays && macs >= MIN_MACS).then_some(axes)
}

/// Builds the regions of one convolution and their concatenation.
struct Split<'a> {
    rw: &'a mut Rewriter,
    conv: &'a ConvNode,
    attrs: crate::attribute::Attributes,
    axes: &'a [Vec<Interval>],
}

impl Split<'_> {
    /// The output over the intervals `chosen` of the first axes and all of the others: a
    /// region's convolution when every axis is chosen, else the concatenation along the next
    /// axis.
    fn assemble(&mut self, chosen: &mut Vec<Interval>) -> Result<ValueId, GraphError> {
        let a = chosen.len();
        if a == self.axes.len() {
            return self.region(chosen);
        }
        let mut parts = Vec::with_capacity(self.axes[a].len());
        for &interval in &self.axes[a] {
            chosen.push(interval);
            parts.push(self.assemble(chosen)?);
            chosen.pop();
        }
        let mut attrs = crate::attribute::Attributes::new();
        attrs.insert("axis", Attribute::Int(2 + a as i64));
        self.rw.add_op("Concat", attrs, &parts)
    }

    /// The convolution of one region: the input positions its taps read, unpadded.
    fn region(&mut self, region: &[Interval]) -> Result<ValueId, GraphError> {
        let geo = &self.conv.geometry;
        let (mut starts, mut ends, mut axes) = (Vec::new(), Vec::new(), Vec::new());
        for (a, r) in region.iter().enumerate() {
            let (s, d, pb) = (geo.strides[a], geo.dilations[a], geo.pads_begin[a]);
            starts.push((r.first * s + r.lo * d - pb) as i64);
            ends.push(((r.end - 1) * s + r.hi * d - pb + 1) as i64);
            axes.push(2 + a as i64);
        }
        let n = starts.len();
        let list = |rw: &mut Rewriter, hint: &str, v: Vec<i64>| {
            let t = Tensor::new(vec![n], v).expect("one value per sliced axis");
            rw.add_constant(hint, t)
        };
        let starts = list(self.rw, "region_starts", starts);
        let ends = list(self.rw, "region_ends", ends);
        let axes = list(self.rw, "region_axes", axes);
        let x = self.rw.add_op(
            "Slice",
            crate::attribute::Attributes::new(),
            &[self.conv.x, starts, ends, axes],
        )?;
        let taps: Vec<(usize, usize, i64, i64)> =
            region.iter().map(|r| (r.lo, r.hi, 0, 0)).collect();
        let w = self
            .rw
            .add_constant("region_taps", slice_spatial(&self.conv.weight, &taps));
        let mut attrs = self.attrs.clone();
        attrs.remove("auto_pad");
        attrs.insert(
            "kernel_shape",
            Attribute::Ints(region.iter().map(|r| (r.hi - r.lo + 1) as i64).collect()),
        );
        attrs.insert("pads", Attribute::Ints(vec![0; 2 * n]));
        Ok(self
            .rw
            .add_node("Conv", attrs, &[Some(x), Some(w), self.conv.bias], 1, None)?[0])
    }
}
