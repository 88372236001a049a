//! `DynamicQuantizeLinear` (dynamic quantization's per-call `uint8` quantization of the
//! activations) as operators that have kernels, so it does not run on the host:
//!
//! ```text
//! DynamicQuantizeLinear(x)  →  (QuantizeLinear(x, scale, zero), scale, zero)
//!     lo = Min(ReduceMin(x), 0),  hi = Max(ReduceMax(x), 0)   (each row, then the rows)
//!     scale = f32((f64(hi) - f64(lo)) / 255)
//!     zero  = u8(Where(scale == 0, 0, Clip(Round(f32(-(f64(lo) / f64(scale)))), 0, 255)))
//! ```
//!
//! which rounds where the operator's definition does (the range and the zero point computed
//! in `f64` from `f32` values and rounded once to `f32`, then to the nearest even integer), so
//! the results are the reference's bit for bit; an input of zeros gives scale 0, zero point 0
//! and zeros, as the reference.

use crate::attribute::Attributes;
use crate::dtype::DType;
use crate::graph::{Graph, GraphError, NodeId, ValueId};
use crate::passes::rewrite::Rewriter;
use crate::passes::GraphPass;
use crate::tensor::Tensor;
use crate::Attribute;

/// Rewrites `DynamicQuantizeLinear` nodes (default domain) of `f32` inputs with a static,
/// non-empty shape (see the module docs).
pub struct DynamicQuantizeAsKernels;

impl GraphPass for DynamicQuantizeAsKernels {
    fn name(&self) -> &'static str {
        "dynamic-quantize-as-kernels"
    }

    fn run(&self, graph: Graph) -> Result<Graph, GraphError> {
        let mut rw = Rewriter::new(graph);
        for i in 0..rw.graph().nodes().len() {
            let g = rw.graph();
            let node = &g.nodes()[i];
            if node.op_type != "DynamicQuantizeLinear" || !node.domain.is_empty() {
                continue;
            }
            let (Some(Some(x)), [y, scale, zero]) = (node.inputs.first(), node.outputs.as_slice())
            else {
                continue;
            };
            let ty = &g.value(*x).ty;
            let Some(shape) = ty.fixed_shape().filter(|s| s.iter().product::<usize>() > 0) else {
                continue;
            };
            if ty.dtype != DType::F32 {
                continue;
            }
            let (x, outputs) = (*x, [*y, *scale, *zero]);
            rw.focus(NodeId(i));
            let new = rewrite(&mut rw, x, &shape)?;
            for (old, new) in outputs.iter().zip(new) {
                if let Some(old) = old {
                    rw.replace(*old, new);
                }
            }
            rw.remove_node(NodeId(i));
        }
        rw.finish()
    }
}

fn scalar<T: crate::tensor::Element>(rw: &mut Rewriter, hint: &str, v: T) -> ValueId {
    rw.add_constant(hint, Tensor::scalar(v))
}

fn binary(rw: &mut Rewriter, op: &str, a: ValueId, b: ValueId) -> Result<ValueId, GraphError> {
    rw.add_op(op, Attributes::new(), &[a, b])
}

/// The nodes computing `(y, scale, zero)` of `DynamicQuantizeLinear(x)`, for `x` of shape
/// `shape` (static, non-empty).
fn rewrite(rw: &mut Rewriter, x: ValueId, shape: &[usize]) -> Result<[ValueId; 3], GraphError> {
    let row = shape.last().copied().unwrap_or(1);
    let rows = shape.iter().product::<usize>() / row;
    let mut all = Attributes::new();
    all.insert("keepdims", Attribute::Int(0));
    // Each row first (rows reduce in parallel), then the row results: the same extremes.
    let rows = rw.add_shape(&[rows, row]);
    let x2 = rw.add_op("Reshape", Attributes::new(), &[x, rows])?;
    let mut along_rows = all.clone();
    along_rows.insert("axes", Attribute::Ints(vec![1]));
    let lo = rw.add_op("ReduceMin", along_rows.clone(), &[x2])?;
    let lo = rw.add_op("ReduceMin", all.clone(), &[lo])?;
    let hi = rw.add_op("ReduceMax", along_rows, &[x2])?;
    let hi = rw.add_op("ReduceMax", all, &[hi])?;
    let zero_f32 = scalar(rw, "dq_zero", 0f32);
    let lo = binary(rw, "Min", lo, zero_f32)?;
    let hi = binary(rw, "Max", hi, zero_f32)?;
    let (lo64, hi64) = (rw.add_cast(lo, DType::F64)?, rw.add_cast(hi, DType::F64)?);
    let range = binary(rw, "Sub", hi64, lo64)?;
    let steps = scalar(rw, "dq_steps", 255f64);
    let scale = binary(rw, "Div", range, steps)?;
    let scale = rw.add_cast(scale, DType::F32)?;
    let scale64 = rw.add_cast(scale, DType::F64)?;
    let ratio = binary(rw, "Div", lo64, scale64)?;
    let ratio = rw.add_op("Neg", Attributes::new(), &[ratio])?;
    let ratio = rw.add_cast(ratio, DType::F32)?;
    let rounded = rw.add_op("Round", Attributes::new(), &[ratio])?;
    let top = scalar(rw, "dq_top", 255f32);
    let clipped = rw.add_op("Clip", Attributes::new(), &[rounded, zero_f32, top])?;
    let degenerate = binary(rw, "Equal", scale, zero_f32)?;
    let zero = rw.add_op("Where", Attributes::new(), &[degenerate, zero_f32, clipped])?;
    let zero = rw.add_cast(zero, DType::U8)?;
    let y = rw.add_op("QuantizeLinear", Attributes::new(), &[x, scale, zero])?;
    Ok([y, scale, zero])
}
