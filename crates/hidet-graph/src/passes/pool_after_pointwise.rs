//! Average pooling moved after the pointwise convolution that reads it, when the
//! convolution has fewer output channels than it reads.
//!
//! ```text
//! Conv(AveragePool(X[1, C, d…]), W[OC, C, 1…], B?)
//!   →  Add(AveragePool(Conv(X, W)), B[1, OC, 1…])      (OC < C; no Add without B)
//! ```
//!
//! A pointwise convolution mixes the channels of one pixel; an average pooling sums pixels
//! of one channel and divides by a count that depends on the output position alone (with or
//! without the padding, `count_include_pad`). Both are linear, so they commute: the pooling
//! of the product equals the product of the pooling, up to rounding. Pooling the product
//! pools `OC` channels instead of `C` (Inception-V3's pooling branches: 192 of 768 at 17²,
//! 32 of 192 at 35²), and the convolution reads `X`, which the block's other branches read
//! too. The bias is added after the pooling: with `count_include_pad` the padding's zeros
//! count in the divisor, so the pooling of a biased product would scale the bias at the
//! borders.

use crate::attribute::Attributes;
use crate::dtype::DType;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::passes::conv_node::{is_pointwise, static_conv};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;

/// Rewrites `Conv(AveragePool(X))` (default domain) where the convolution is a
/// statically shaped pointwise one (a 1… window, stride 1, no padding, `group == 1`, see
/// `static_conv`) with a constant bias or none and fewer output channels than input
/// channels, and the pooling's output is read by that convolution alone and is no graph
/// output (see the module docs).
pub struct PoolAfterPointwise;

impl GraphPass for PoolAfterPointwise {
    fn name(&self) -> &'static str {
        "pool-after-pointwise"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let Some(plan) = plan(&rw, NodeId(i)) else {
                continue;
            };
            let g = rw.graph();
            let conv_attrs = g.nodes()[i].attrs.clone();
            let weight = g.nodes()[i].inputs[1];
            rw.focus(NodeId(i));
            let product = rw.add_node("Conv", conv_attrs, &[Some(plan.x), weight], 1, None)?[0];
            let pooled = rw.add_copy_of(plan.pool, &[Some(product)])?[0];
            let out = match plan.bias {
                Some(bias) => {
                    let bias = rw.add_constant("pooled_conv_bias", bias);
                    rw.add_op("Add", Attributes::new(), &[pooled, bias])?
                }
                None => pooled,
            };
            rw.replace(plan.y, out);
            rw.remove_node(NodeId(i));
            rw.remove_node(plan.pool);
        }
        rw.finish()
    }
}

/// What one applicable convolution reads and replaces.
struct Plan {
    /// The pooling's input.
    x: ValueId,
    /// The pooling node.
    pool: NodeId,
    /// The bias shaped `[1, OC, 1…]` to broadcast over the pooled product.
    bias: Option<Tensor>,
    /// The convolution's output.
    y: ValueId,
}

/// The plan for node `n`, when the rewrite applies to it.
fn plan(rw: &Rewriter, n: NodeId) -> Option<Plan> {
    let conv = static_conv(rw, n)?;
    let g = rw.graph();
    let out_channels = conv.weight.shape()[0];
    if !is_pointwise(&conv.geometry) || conv.group != 1 || out_channels >= conv.channels() {
        return None;
    }
    let (pool, _) = g.value(conv.x).producer?;
    let pool_node = &g.nodes()[pool.0];
    if pool_node.op_type != "AveragePool" || !pool_node.domain.is_empty() {
        return None;
    }
    if g.value(conv.x).users.len() != 1 || g.outputs().contains(&conv.x) {
        return None;
    }
    let x = pool_node.inputs.first().copied().flatten()?;
    let xs = g.value(x).ty.fixed_shape()?;
    if g.value(x).ty.dtype != DType::F32
        || xs.len() != conv.input_shape.len()
        || xs[1] != conv.channels()
    {
        return None;
    }
    let bias = match conv.bias {
        None => None,
        Some(b) => {
            let values = rw.constant(b)?;
            let mut shape = vec![1; xs.len()];
            shape[1] = out_channels;
            Some(values.reshape(shape).ok()?)
        }
    };
    Some(Plan {
        x,
        pool,
        bias,
        y: conv.y,
    })
}
