//! Max-pooling over a 2-D window as two 1-D poolings.
//!
//! ```text
//! MaxPool(X, k = [kh, kw], s = [sh, sw], d, pads, ceil_mode)
//!   →  MaxPool(MaxPool(X, [kh, 1], [sh, 1], [dh, 1], rows' pads), [1, kw], [1, sw], [1, dw], columns' pads)
//! ```
//!
//! The maximum over a product window is the maximum over its columns of the maxima over its
//! rows, and each spatial axis's output size and padding depend on that axis alone, so the
//! result is identical (padding reads as `-inf`, which a maximum ignores). The first pooling
//! reads whole input rows (its vector lanes walk contiguous columns); the second reads
//! `kw` values per output instead of `kh·kw`. A 3×3 stride-2 pooling costs a third of the
//! single kernel's time in isolation.

use crate::attribute::Attributes;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::kernels::window::{Geometry, WindowSpec};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::Attribute;

/// Rewrites `MaxPool` nodes (default domain) over two spatial axes with a static input, a
/// window longer than 1 along both, and no `Indices` output, into two 1-D poolings (see
/// the module docs).
pub struct SeparableMaxPool;

impl GraphPass for SeparableMaxPool {
    fn name(&self) -> &'static str {
        "separable-max-pool"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let Some((x, y, geometry, ceil_mode)) = plan(&rw, NodeId(i)) else {
                continue;
            };
            rw.focus(NodeId(i));
            let rows = rw.add_op("MaxPool", axis_attrs(&geometry, 0, ceil_mode), &[x])?;
            let out = rw.add_op("MaxPool", axis_attrs(&geometry, 1, ceil_mode), &[rows])?;
            rw.replace(y, out);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// The input, output, resolved window and `ceil_mode` of node `n`, when it applies.
fn plan(rw: &Rewriter, n: NodeId) -> Option<(ValueId, ValueId, Geometry, bool)> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if node.op_type != "MaxPool" || !node.domain.is_empty() {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let y = match node.outputs.as_slice() {
        [Some(y)] => *y,
        _ => return None,
    };
    let xs = g.value(x).ty.fixed_shape()?;
    if xs.len() != 4 {
        return None;
    }
    let spec = WindowSpec::from_attrs(&node.attrs).ok()?;
    spec.kernel.as_ref()?;
    let attrs = spec.attrs(&xs[2..]).ok()?;
    let geometry = attrs.resolve(&xs[2..]).ok()?;
    if geometry.kernel.iter().any(|&k| k < 2) || geometry.output.contains(&0) {
        return None;
    }
    Some((x, y, geometry, attrs.ceil_mode))
}

/// The attributes of the pooling along spatial axis `axis` of `g` alone (the other axis
/// gets a 1-wide window, stride 1 and no padding).
fn axis_attrs(g: &Geometry, axis: usize, ceil_mode: bool) -> Attributes {
    let along = |v: &[usize], other: i64| -> Vec<i64> {
        (0..2)
            .map(|a| if a == axis { v[a] as i64 } else { other })
            .collect()
    };
    let mut pads = along(&g.pads_begin, 0);
    pads.extend(along(&g.pads_end, 0));
    let mut attrs = Attributes::new();
    attrs.insert("kernel_shape", Attribute::Ints(along(&g.kernel, 1)));
    attrs.insert("strides", Attribute::Ints(along(&g.strides, 1)));
    attrs.insert("dilations", Attribute::Ints(along(&g.dilations, 1)));
    attrs.insert("pads", Attribute::Ints(pads));
    attrs.insert("ceil_mode", Attribute::Int(i64::from(ceil_mode)));
    attrs
}
