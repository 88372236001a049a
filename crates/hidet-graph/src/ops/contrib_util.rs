//! What the expansions of ONNX Runtime's contrib operators (`com.microsoft`, and the few it
//! registers in the default domain) share: emitting default-domain nodes at one opset, small
//! constants, and reading sizes at run time.
//!
//! Every `contrib_*` family expands its operators while the graph is built, so the graph passes,
//! fusion and the kernels see only default-domain operators; ONNX Runtime's own kernels for
//! them are the reference their tests compare with (`python/tests/test_contrib_ops.py`).

use crate::attribute::{Attribute, Attributes};
use crate::dtype::DType;
use crate::expansion::Expansion;
use crate::operator::OpError;
use crate::tensor::Tensor;

/// ONNX Runtime's contrib domain.
pub const MS_DOMAIN: &str = "com.microsoft";

/// The default-domain opset the expansions emit at (`ReduceMean`'s axes are an input, `Split`
/// takes its sizes as an input); `Gelu` is emitted at 20, the first opset that has it.
const OPSET: i64 = 18;

fn opset_of(op_type: &str) -> i64 {
    match op_type {
        "Gelu" => 20,
        _ => OPSET,
    }
}

/// Attributes from `(name, value)` pairs.
pub fn attrs<const N: usize>(pairs: [(&str, Attribute); N]) -> Attributes {
    let mut a = Attributes::new();
    for (name, value) in pairs {
        a.insert(name, value);
    }
    a
}

/// Emits default-domain `op_type` reading `inputs` (`""` for an absent one) into a fresh value;
/// returns its name.
pub fn op(e: &mut Expansion<'_>, op_type: &str, attrs: Attributes, inputs: &[&str]) -> String {
    let out = e.fresh(op_type);
    op_into(e, op_type, attrs, inputs, &[&out]);
    out
}

/// Emits default-domain `op_type` reading `inputs` and defining `outputs`.
pub fn op_into(
    e: &mut Expansion<'_>,
    op_type: &str,
    attrs: Attributes,
    inputs: &[&str],
    outputs: &[&str],
) {
    e.emit_in("", op_type, opset_of(op_type), attrs, inputs, outputs);
}

/// [`op`] without attributes.
pub fn op0(e: &mut Expansion<'_>, op_type: &str, inputs: &[&str]) -> String {
    op(e, op_type, Attributes::new(), inputs)
}

/// A 1-D `int64` constant.
pub fn ints(e: &mut Expansion<'_>, values: &[i64]) -> String {
    let t =
        Tensor::new(vec![values.len()], values.to_vec()).expect("a vector's shape is its length");
    e.constant(t)
}

/// A scalar `int64` constant.
pub fn int(e: &mut Expansion<'_>, value: i64) -> String {
    e.constant(Tensor::scalar(value))
}

/// A scalar constant of the float type `dtype`.
pub fn float(e: &mut Expansion<'_>, value: f64, dtype: DType) -> String {
    e.constant(Tensor::scalar(value).cast(dtype))
}

/// The size of `x` along `axis`, a scalar `int64` read at run time.
pub fn dim(e: &mut Expansion<'_>, x: &str, axis: i64) -> String {
    let shape = op(
        e,
        "Shape",
        attrs([
            ("start", Attribute::Int(axis)),
            (
                "end",
                Attribute::Int(if axis == -1 { i64::MAX } else { axis + 1 }),
            ),
        ]),
        &[x],
    );
    let zero = ints(e, &[0]);
    op0(e, "Squeeze", &[&shape, &zero])
}

/// `x` with its size-one axes `axes` inserted.
pub fn unsqueeze(e: &mut Expansion<'_>, x: &str, axes: &[i64]) -> String {
    let axes = ints(e, axes);
    op0(e, "Unsqueeze", &[x, &axes])
}

/// `x` reshaped to `shape` (`0` keeps the input's size, `-1` is inferred).
pub fn reshape(e: &mut Expansion<'_>, x: &str, shape: &[i64]) -> String {
    let shape = ints(e, shape);
    op0(e, "Reshape", &[x, &shape])
}

/// `x` with its axes permuted by `perm`.
pub fn transpose(e: &mut Expansion<'_>, x: &str, perm: &[i64]) -> String {
    op(
        e,
        "Transpose",
        attrs([("perm", Attribute::Ints(perm.to_vec()))]),
        &[x],
    )
}

/// The parts of `x` along `axis` of the sizes `sizes`.
pub fn split(e: &mut Expansion<'_>, x: &str, axis: i64, sizes: &[i64]) -> Vec<String> {
    let split = ints(e, sizes);
    let outs: Vec<String> = (0..sizes.len()).map(|_| e.fresh("Split")).collect();
    let out_refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    op_into(
        e,
        "Split",
        attrs([("axis", Attribute::Int(axis))]),
        &[x, &split],
        &out_refs,
    );
    outs
}

/// `x[.., start..end, ..]` along `axis` (`end` may be `i64::MAX`).
pub fn slice(e: &mut Expansion<'_>, x: &str, axis: i64, start: i64, end: i64) -> String {
    let (s, en, ax) = (ints(e, &[start]), ints(e, &[end]), ints(e, &[axis]));
    op0(e, "Slice", &[x, &s, &en, &ax])
}

/// The name of the node's input `i`, `None` when it is absent.
pub fn optional_input(e: &Expansion<'_>, i: usize) -> Option<String> {
    e.input_names().get(i).filter(|n| !n.is_empty()).cloned()
}

/// The name of the node's output `i`, `None` when the model does not use it.
pub fn optional_output(e: &Expansion<'_>, i: usize) -> Option<String> {
    e.output_names().get(i).filter(|n| !n.is_empty()).cloned()
}

/// The name of the node's first output (always declared).
pub fn first_output(e: &Expansion<'_>) -> Result<String, OpError> {
    optional_output(e, 0).ok_or_else(|| OpError::Invalid("the node has no output".into()))
}

/// The float dtype of input `i` (the dtype the expansion computes in).
pub fn float_dtype(e: &Expansion<'_>, i: usize) -> Result<DType, OpError> {
    let dtype = e.req_input(i)?.ty.dtype;
    if dtype.is_float() {
        Ok(dtype)
    } else {
        Err(OpError::DType { index: i, dtype })
    }
}

/// The fixed size of input `i` along `axis` (negative counts from the end), if known when the
/// graph is built.
pub fn fixed_dim(e: &Expansion<'_>, i: usize, axis: i64) -> Option<usize> {
    let shape = e.input(i)?.ty.shape.as_ref()?;
    let axis = if axis < 0 {
        shape.len() as i64 + axis
    } else {
        axis
    };
    shape.get(usize::try_from(axis).ok()?)?.fixed()
}

/// A required positive integer attribute that fits `usize`.
pub fn positive_attr(e: &Expansion<'_>, name: &str) -> Result<usize, OpError> {
    let v = e.attrs().req_int(name)?;
    usize::try_from(v)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| OpError::attr(name, format!("must be positive, got {v}")))
}

/// `Unsupported` unless the integer attribute `name` is absent or `allowed`.
pub fn require_attr(e: &Expansion<'_>, name: &str, allowed: i64) -> Result<(), OpError> {
    let v = e.attrs().int_or(name, allowed)?;
    if v == allowed {
        Ok(())
    } else {
        Err(OpError::Unsupported(format!(
            "{} with {name} = {v}",
            e.op_type()
        )))
    }
}
