//! Linear resizes of several axes as one resize per axis.
//!
//! Linear interpolation is separable: resizing `[N, C, H, W]` bilinearly sums, for each
//! output element, four inputs weighted by a row weight times a column weight, which is the
//! row interpolation of two column interpolations. Done in one kernel, every output element
//! gathers its four inputs through computed indices; done axis by axis, the last axis first,
//! the first pass gathers along rows of the (small) input, and every later pass reads whole
//! contiguous rows of the pass before and blends two of them, which vectorizes without
//! gathers. A segmentation head's final ×16 bilinear upsampling is the typical case.
//!
//! ```text
//! Resize(X, scales | sizes)  →  Resize_axis₁(… Resize_axisₖ(X))   (last axis first)
//! ```
//!
//! Each pass is the node itself (same attributes and opset) with the scale, or size, of its
//! own axis and the identity elsewhere, and each intermediate is stored
//! ([`FusionHints::materialize`]), so that no pass is inlined back into the next. Applied to
//! `linear` resizes (opset 11 on) with constant `scales` or `sizes`, without `axes`,
//! antialiasing, `tf_crop_and_resize` or a `keep_aspect_ratio_policy` other than `stretch`,
//! that resize two axes or more into at least [`MIN_OUTPUT_ELEMENTS`] elements.

use crate::graph::{FusionHints, Graph, GraphError, NodeId, ValueId};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// The fewest output elements for which a resize is split (below, one kernel is as fast).
pub const MIN_OUTPUT_ELEMENTS: usize = 1 << 15;

/// Splits each multi-axis linear resize into one resize per axis, see the module docs.
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
            rw.focus(NodeId(i));
            let slots = rw.graph().nodes()[i].inputs.len();
            let mut x = plan.x;
            let mut shape = plan.input_shape.clone();
            for (step, &axis) in plan.axes.iter().rev().enumerate() {
                let mut inputs: Vec<Option<ValueId>> = vec![None; slots];
                inputs[0] = Some(x);
                match &plan.target {
                    Target::Scales(scales) => {
                        let mut one = vec![1f32; scales.len()];
                        one[axis] = scales[axis];
                        let t = Tensor::new(vec![one.len()], one)
                            .expect("one scale per axis matches the shape");
                        inputs[2] = Some(rw.add_constant("resize_axis_scales", t));
                    }
                    Target::Sizes(sizes) => {
                        shape[axis] = sizes[axis];
                        inputs[3] = Some(rw.add_shape(&shape));
                    }
                }
                x = rw.add_copy_of(NodeId(i), &inputs)?[0];
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
    let linear = a.string_or("mode", "nearest").ok()? == "linear";
    let crop = a
        .string_or("coordinate_transformation_mode", "half_pixel")
        .ok()?
        == "tf_crop_and_resize";
    let stretch = a.string_or("keep_aspect_ratio_policy", "stretch").ok()? == "stretch";
    if !linear || crop || !stretch || a.int_or("antialias", 0).ok()? != 0 || a.get("axes").is_some()
    {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let [Some(y)] = node.outputs.as_slice() else {
        return None;
    };
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
    (axes.len() >= 2 && elements >= MIN_OUTPUT_ELEMENTS).then_some(Plan {
        x,
        y: *y,
        input_shape,
        target,
        axes,
    })
}
