//! Helpers shared by operator families (inference and dtype checks).

use crate::dtype::DType;
use crate::operator::{infer_arg, InferInput, OpError};
use crate::shape::{broadcast_types, TensorType};
use crate::tensor::Tensor;

/// Output type = input 0's type, after checking its dtype with `accept`.
pub fn infer_same(
    inputs: &[Option<InferInput<'_>>],
    accept: fn(DType) -> bool,
) -> Result<Vec<TensorType>, OpError> {
    let x = infer_arg(inputs, 0)?;
    check_dtype(0, x.ty.dtype, accept)?;
    Ok(vec![x.ty.clone()])
}

/// Broadcast of every present input's shape; dtype `out` (or input 0's when `None`).
/// With `same_dtype`, every present input must have input 0's dtype.
pub fn infer_broadcast(
    inputs: &[Option<InferInput<'_>>],
    out: Option<DType>,
    same_dtype: bool,
) -> Result<Vec<TensorType>, OpError> {
    let first = infer_arg(inputs, 0)?;
    let present: Vec<&InferInput<'_>> = inputs.iter().flatten().collect();
    if same_dtype {
        for (i, x) in inputs.iter().enumerate() {
            if let Some(x) = x {
                if x.ty.dtype != first.ty.dtype {
                    return Err(OpError::Invalid(format!(
                        "input #{i} has dtype {}, input #0 has {}",
                        x.ty.dtype, first.ty.dtype
                    )));
                }
            }
        }
    }
    let shapes: Vec<_> = present.iter().map(|x| x.ty.shape.as_ref()).collect();
    let shape = broadcast_types(&shapes).map_err(OpError::Shape)?;
    Ok(vec![TensorType {
        dtype: out.unwrap_or(first.ty.dtype),
        shape,
    }])
}

/// `Err(OpError::DType)` unless `accept(dtype)`.
pub fn check_dtype(index: usize, dtype: DType, accept: fn(DType) -> bool) -> Result<(), OpError> {
    if accept(dtype) {
        Ok(())
    } else {
        Err(OpError::DType { index, dtype })
    }
}

/// The elements of input `index`, `t`, as `T`; `Err(OpError::DType)` when `t` holds another
/// type.
pub fn typed_input<T: crate::tensor::Element>(t: &Tensor, index: usize) -> Result<&[T], OpError> {
    t.as_slice::<T>().map_err(|_| OpError::DType {
        index,
        dtype: t.dtype(),
    })
}

/// Every dtype.
pub fn any(_: DType) -> bool {
    true
}

/// Arithmetic dtypes: floats and integers (not bool, not the storage-only types).
pub fn numeric(d: DType) -> bool {
    d.is_float() || d.is_int()
}

/// Floating-point dtypes.
pub fn float(d: DType) -> bool {
    d.is_float()
}

/// Signed ints and floats.
pub fn signed(d: DType) -> bool {
    d.is_float() || d.is_signed_int()
}

/// Integer dtypes.
pub fn int(d: DType) -> bool {
    d.is_int()
}

/// Bool only.
pub fn boolean(d: DType) -> bool {
    d == DType::Bool
}

/// A 1-D integer tensor's values (shape-like inputs: shapes, axes, ...).
pub fn int_list(t: &Tensor, what: &str) -> Result<Vec<i64>, OpError> {
    if !t.dtype().is_int() || t.rank() > 1 {
        return Err(OpError::Invalid(format!(
            "{what} must be a 1-D integer tensor, got {}{:?}",
            t.dtype(),
            t.shape()
        )));
    }
    Ok(t.to_i64_vec())
}

/// Normalizes a possibly negative axis for a tensor of `rank`.
pub fn norm_axis(axis: i64, rank: usize) -> Result<usize, OpError> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(OpError::Invalid(format!(
            "axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok(a as usize)
}

/// Test helper: [`build_registered`] from [`crate::Registry::global`].
#[cfg(test)]
pub(crate) fn build_op(
    domain: &str,
    op: &str,
    opset: i64,
    attrs: &[(&str, crate::attribute::Attribute)],
    num_inputs: usize,
    num_outputs: usize,
) -> Result<Box<dyn crate::operator::Operator>, OpError> {
    build_registered(
        crate::registry::Registry::global(),
        domain,
        op,
        opset,
        attrs,
        num_inputs,
        num_outputs,
    )
}

/// Builds the operator `domain::op` of `registry` for model opset `opset` with `attrs`, as the
/// graph builder would for a node with that many inputs and outputs (for tests of operators).
///
/// Errors: the operator is not registered for that opset, or its constructor refuses the
/// attributes.
pub fn build_registered(
    registry: &crate::registry::Registry,
    domain: &str,
    op: &str,
    opset: i64,
    attrs: &[(&str, crate::attribute::Attribute)],
    num_inputs: usize,
    num_outputs: usize,
) -> Result<Box<dyn crate::operator::Operator>, OpError> {
    let mut a = crate::attribute::Attributes::new();
    for (k, v) in attrs {
        a.insert(*k, v.clone());
    }
    let ctx = crate::operator::OpContext {
        domain,
        op_type: op,
        opset,
        attrs: &a,
        num_inputs,
        num_outputs,
    };
    registry
        .lookup(domain, op, opset)
        .ok_or_else(|| OpError::Unsupported(format!("{domain}::{op} opset {opset}")))?
        .build(&ctx)
}
