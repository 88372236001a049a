//! Interpolating resizes as blends of gathered slices, one axis at a time.
//!
//! Linear (and cubic) interpolation is separable: resizing `[N, C, H, W]` bilinearly sums,
//! for each output element, four inputs weighted by a row weight times a column weight, which
//! is the row interpolation of two column interpolations. Along one axis, output position `j`
//! reads a few input positions `idx_k[j]` with weights `w_k[j]` that depend on `j` alone, so
//! a pass is
//!
//! ```text
//! Σ_k Gather(X, idx_k, axis) · w_k        (w_k shaped [out, 1…] to broadcast past the axis)
//! ```
//!
//! with the tables constants: no coordinate arithmetic per element, and along any axis but
//! the last each pass blends whole contiguous rows. The passes run last axis first, each
//! intermediate stored ([`FusionHints::materialize`]) so that no pass is inlined back into the
//! next (the first gathers along the rows of the small input; a segmentation head's ×16
//! upsampling is the typical case).
//!
//! The tables are the operator's own: the node resizes an identity matrix `[L, L]` along its
//! last axis (with that axis's scale or size), whose row `i` is then the weight of input `i`
//! in every output position, so every attribute (coordinate transform, cubic coefficient,
//! `exclude_outside`) means what `eval` makes of it. Applied to `f32` `linear` and `cubic`
//! resizes (opset 11 on) with constant `scales` or `sizes`, without `axes`, antialiasing,
//! `tf_crop_and_resize` or a `keep_aspect_ratio_policy` other than `stretch`, into at least
//! [`MIN_OUTPUT_ELEMENTS`] elements, over axes of at most [`MAX_AXIS_LENGTH`] with at most
//! [`MAX_TAPS`] taps per position.

use crate::attribute::Attributes;
use crate::dtype::DType;
use crate::graph::{FusionHints, Graph, GraphError, NodeId, ValueId};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;
use crate::Attribute;

/// The fewest output elements for which a resize is rewritten (below, one kernel is as fast).
pub const MIN_OUTPUT_ELEMENTS: usize = 1 << 15;

/// The longest input axis whose taps are read off an identity matrix (`L²` elements).
pub const MAX_AXIS_LENGTH: usize = 2048;

/// The most input positions one output position may read along an axis (cubic: 4).
pub const MAX_TAPS: usize = 4;

/// Rewrites each interpolating resize as per-axis blends of gathers, see the module docs.
pub struct ResizeByAxis;

impl GraphPass for ResizeByAxis {
    fn name(&self) -> &'static str {
        "resize-by-axis"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let Some(plan) = plan(&rw, NodeId(i)) else {
                continue;
            };
            let Some(taps) = plan
                .axes
                .iter()
                .map(|&axis| axis_taps(&rw, NodeId(i), &plan, axis))
                .collect::<Option<Vec<Taps>>>()
            else {
                continue;
            };
            rw.focus(NodeId(i));
            let rank = plan.input_shape.len();
            let mut x = plan.x;
            for (step, (&axis, taps)) in plan.axes.iter().zip(&taps).rev().enumerate() {
                x = blend(&mut rw, x, axis, rank, taps)?;
                if step + 1 < plan.axes.len() {
                    rw.set_hints(
                        x,
                        FusionHints {
                            materialize: true,
                            ..FusionHints::default()
                        },
                    )?;
                }
            }
            rw.replace(plan.y, x);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// One axis's tables: per tap `k`, the input position and weight of every output position.
struct Taps {
    index: Vec<Vec<i32>>,
    weight: Vec<Vec<f32>>,
}

/// `Σ_k Gather(x, index_k, axis) · weight_k`, the weights shaped `[out, 1…]`.
fn blend(
    rw: &mut Rewriter,
    x: ValueId,
    axis: usize,
    rank: usize,
    taps: &Taps,
) -> Result<ValueId, GraphError> {
    let out = taps.index[0].len();
    let mut weight_shape = vec![out];
    weight_shape.extend(std::iter::repeat_n(1, rank - 1 - axis));
    let mut sum = None;
    for (index, weight) in taps.index.iter().zip(&taps.weight) {
        let index = Tensor::new(vec![out], index.clone()).expect("one index per position");
        let index = rw.add_constant("resize_taps", index);
        let weight =
            Tensor::new(weight_shape.clone(), weight.clone()).expect("one weight per position");
        let weight = rw.add_constant("resize_weights", weight);
        let mut attrs = Attributes::new();
        attrs.insert("axis", Attribute::Int(axis as i64));
        let gathered = rw.add_op("Gather", attrs, &[x, index])?;
        let term = rw.add_op("Mul", Attributes::new(), &[gathered, weight])?;
        sum = Some(match sum {
            None => term,
            Some(acc) => rw.add_op("Add", Attributes::new(), &[acc, term])?,
        });
    }
    Ok(sum.expect("a resized axis has at least one tap"))
}

/// The taps of `axis` of the resize node `n`, read off the node's own `eval` of an identity
/// matrix (see the module docs); `None` when the axis is too long, a position reads more
/// than [`MAX_TAPS`] inputs or the evaluation fails.
fn axis_taps(rw: &Rewriter, n: NodeId, plan: &Plan, axis: usize) -> Option<Taps> {
    let node = &rw.graph().nodes()[n.0];
    let len = plan.input_shape[axis];
    if len > MAX_AXIS_LENGTH || len == 0 {
        return None;
    }
    let mut identity = vec![0f32; len * len];
    for i in 0..len {
        identity[i * len + i] = 1.0;
    }
    let probe = Tensor::new(vec![len, len], identity).ok()?;
    let (scales, sizes) = match &plan.target {
        Target::Scales(s) => (Some(Tensor::new(vec![2], vec![1f32, s[axis]]).ok()?), None),
        Target::Sizes(s) => (
            None,
            Some(Tensor::new(vec![2], vec![len as i64, s[axis] as i64]).ok()?),
        ),
    };
    let mut inputs: Vec<Option<&Tensor>> =
        vec![Some(&probe), None, scales.as_ref(), sizes.as_ref()];
    inputs.truncate(node.inputs.len().max(3));
    let matrix = node.op.eval(&inputs).ok()?.pop()?;
    let &[rows, out] = matrix.shape() else {
        return None;
    };
    if rows != len || out == 0 {
        return None;
    }
    let m = matrix.to_f64_vec();
    let mut columns: Vec<Vec<(i32, f32)>> = vec![Vec::new(); out];
    for i in 0..len {
        for (j, column) in columns.iter_mut().enumerate() {
            let w = m[i * out + j];
            if w != 0.0 {
                column.push((i32::try_from(i).ok()?, w as f32));
            }
        }
    }
    let count = columns.iter().map(Vec::len).max()?.max(1);
    if count > MAX_TAPS {
        return None;
    }
    let mut taps = Taps {
        index: vec![vec![0; out]; count],
        weight: vec![vec![0.0; out]; count],
    };
    for (j, column) in columns.iter().enumerate() {
        let first = column.first().map_or(0, |t| t.0);
        for k in 0..count {
            let (i, w) = column.get(k).copied().unwrap_or((first, 0.0));
            taps.index[k][j] = i;
            taps.weight[k][j] = w;
        }
    }
    Some(taps)
}

/// The scales or sizes of a resize.
enum Target {
    Scales(Vec<f32>),
    Sizes(Vec<usize>),
}

struct Plan {
    x: ValueId,
    y: ValueId,
    input_shape: Vec<usize>,
    target: Target,
    /// The resized axes, in increasing order.
    axes: Vec<usize>,
}

fn plan(rw: &Rewriter, n: NodeId) -> Option<Plan> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if node.op_type != "Resize" || !node.domain.is_empty() || node.opset < 11 {
        return None;
    }
    let a = &node.attrs;
    let interpolates = a.string_or("mode", "nearest").ok()? != "nearest";
    let crop = a
        .string_or("coordinate_transformation_mode", "half_pixel")
        .ok()?
        == "tf_crop_and_resize";
    let stretch = a.string_or("keep_aspect_ratio_policy", "stretch").ok()? == "stretch";
    if !interpolates
        || crop
        || !stretch
        || a.int_or("antialias", 0).ok()? != 0
        || a.get("axes").is_some()
    {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let [Some(y)] = node.outputs.as_slice() else {
        return None;
    };
    if g.value(x).ty.dtype != DType::F32 {
        return None;
    }
    let input_shape = g.value(x).ty.fixed_shape()?;
    let output_shape = g.value(*y).ty.fixed_shape()?;
    let present = |k: usize| {
        node.inputs
            .get(k)
            .copied()
            .flatten()
            .and_then(|v| rw.constant(v))
            .filter(|t| t.numel() > 0)
    };
    let target = match (present(2), present(3)) {
        (Some(scales), None) => {
            Target::Scales(scales.to_f64_vec().into_iter().map(|s| s as f32).collect())
        }
        (None, Some(sizes)) => Target::Sizes(
            sizes
                .to_i64_vec()
                .into_iter()
                .map(usize::try_from)
                .collect::<Result<_, _>>()
                .ok()?,
        ),
        _ => return None,
    };
    let rank = input_shape.len();
    let axes: Vec<usize> = match &target {
        Target::Scales(s) if s.len() == rank => (0..rank).filter(|&i| s[i] != 1.0).collect(),
        Target::Sizes(s) if s.len() == rank && *s == output_shape => {
            (0..rank).filter(|&i| s[i] != input_shape[i]).collect()
        }
        _ => return None,
    };
    let elements: usize = output_shape.iter().product();
    (!axes.is_empty() && elements >= MIN_OUTPUT_ELEMENTS).then_some(Plan {
        x,
        y: *y,
        input_shape,
        target,
        axes,
    })
}
