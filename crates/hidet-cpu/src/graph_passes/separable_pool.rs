//! Pooling over a 2-D window as two 1-D poolings.
//!
//! ```text
//! Pool(X, k = [kh, kw], s = [sh, sw], d, pads, ceil_mode)
//!   →  Pool(Pool(X, [kh, 1], [sh, 1], [dh, 1], rows' pads), [1, kw], [1, sw], [1, dw], columns' pads)
//! ```
//!
//! Each spatial axis's output size and padding depend on that axis alone, and a window is the
//! product of its extents along the two axes. So the maximum over a window is the maximum over
//! its columns of the maxima over its rows (padding reads as `-inf`, which a maximum ignores),
//! and an average, whose divisor (with or without the padding, `count_include_pad`) is the
//! product of the counts along each axis, is the average over the columns of the row averages,
//! up to rounding. The first pooling reads whole input rows (its vector lanes walk contiguous
//! columns); the second reads `kw` values per output instead of `kh·kw`. A 3×3 stride-2
//! max-pooling costs a third of the single kernel's time in isolation.

use hidet_graph::attribute::Attributes;
use hidet_graph::graph::{Graph, GraphError, NodeId, ValueId};
use hidet_graph::kernels::window::{Geometry, WindowSpec};
use hidet_graph::passes::rewrite::Rewriter;
use hidet_graph::passes::GraphPass;
use hidet_graph::Attribute;

/// Rewrites `MaxPool` and `AveragePool` nodes (default domain) over two spatial axes with a
/// static input, a window longer than 1 along both, and no `Indices` output, into two 1-D
/// poolings (see the module docs).
pub struct SeparablePool;

/// The operators [`SeparablePool`] rewrites.
const SEPARABLE: [&str; 2] = ["MaxPool", "AveragePool"];

impl GraphPass for SeparablePool {
    fn name(&self) -> &'static str {
        "separable-pool"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::with_registry(graph, crate::graph_ops::registry());
        for i in 0..rw.graph().nodes().len() {
            let Some((x, y, geometry)) = plan(&rw, NodeId(i)) else {
                continue;
            };
            let node = &rw.graph().nodes()[i];
            let op = node.op_type.clone();
            let mut shared = Attributes::new();
            for name in ["ceil_mode", "count_include_pad"] {
                if let Some(a) = node.attrs.get(name) {
                    shared.insert(name, a.clone());
                }
            }
            rw.focus(NodeId(i));
            let rows = rw.add_op(&op, axis_attrs(&geometry, 0, &shared), &[x])?;
            let out = rw.add_op(&op, axis_attrs(&geometry, 1, &shared), &[rows])?;
            rw.replace(y, out);
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

/// The input, output and resolved window of node `n`, when it applies.
fn plan(rw: &Rewriter, n: NodeId) -> Option<(ValueId, ValueId, Geometry)> {
    let g = rw.graph();
    let node = &g.nodes()[n.0];
    if !SEPARABLE.contains(&node.op_type.as_str()) || !node.domain.is_empty() {
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
    Some((x, y, geometry))
}

/// The attributes of the pooling along spatial axis `axis` of `g` alone (the other axis
/// gets a 1-wide window, stride 1 and no padding), with `shared` (`ceil_mode`,
/// `count_include_pad`) as the original pooling has them.
fn axis_attrs(g: &Geometry, axis: usize, shared: &Attributes) -> Attributes {
    let along = |v: &[usize], other: i64| -> Vec<i64> {
        (0..2)
            .map(|a| if a == axis { v[a] as i64 } else { other })
            .collect()
    };
    let mut pads = along(&g.pads_begin, 0);
    pads.extend(along(&g.pads_end, 0));
    let mut attrs = shared.clone();
    attrs.insert("kernel_shape", Attribute::Ints(along(&g.kernel, 1)));
    attrs.insert("strides", Attribute::Ints(along(&g.strides, 1)));
    attrs.insert("dilations", Attribute::Ints(along(&g.dilations, 1)));
    attrs.insert("pads", Attribute::Ints(pads));
    attrs
}
