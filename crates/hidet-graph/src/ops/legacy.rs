//! Operators of old opsets (mostly 1–6), converted when the graph is built into the operators
//! of later opsets that hidet implements ([`crate::expansion`]), following the ONNX changelog:
//!
//! - Add, Sub, Mul, Div, Pow, And, Or, Xor, Equal, Greater, Less before opset 7: without
//!   `broadcast = 1` both inputs have one shape; with it, `B` is broadcast onto `A` alone,
//!   aligned at `axis` (default: suffix matching), or is a one-element tensor. `B` gets trailing
//!   unit axes (`Unsqueeze`) so numpy broadcasting of the opset-7 operator does the same.
//! - Max, Min, Sum, Mean before opset 8: inputs of one shape (checked), no broadcasting.
//! - Gemm before opset 7: `broadcast = 0` needs `C` of shape `(M, N)`.
//! - PRelu before opset 7: a one-element slope is shared, a slope of `C` elements applies per
//!   channel (axis 1); it is reshaped to `(C, 1, …, 1)` for numpy broadcasting.
//! - BatchNormalization before opset 7: `is_test` and the number of outputs choose the mode as
//!   the ONNX version converter does (`is_test = 1` or one output: inference; `is_test = 0` or
//!   the five training outputs: batch statistics), then opset 7 (which keeps `spatial`).
//! - Dropout before opset 7: inference; `is_test = 0` with a non-zero ratio (random masks) is
//!   unsupported, as in the version converter.
//! - `consumed_inputs` (an in-place hint of opset 1) is dropped everywhere; Selu keeps its
//!   opset-1 defaults; Clip-1 without `min`/`max` is unbounded on that side.
//! - Reshape-1's `shape`, Tile-1's `tiles`/`axis` and Split-1's `split` input become the
//!   constant inputs or attributes of later opsets; Concat-1's `axis` defaults to 1; Pad-1's
//!   `paddings` is Pad-2's `pads` (the layout its text gives, `[x1_begin, x2_begin, …,
//!   x1_end, …]`, as Caffe2's importer read it; the example beside it contradicts the text);
//!   Split-1's `axis` defaults to 0 as in opset 2; Cast-1's `to` names a type; LpPool-1's `p`
//!   is a float;
//!   Upsample-1's `height_scale`/`width_scale` are Upsample-7's `scales`; RNN/GRU/LSTM lose
//!   `output_sequence`.
//! - ImageScaler (experimental before opset 10): `scale * x + bias[c]`; ThresholdedRelu
//!   (experimental before opset 10, as in opset 10).
//!
//! A conversion that needs what is unknown at import (a rank, a run-time `split` input) or an
//! attribute value without a defined meaning (Upsample-1 `bilinear`) is
//! [`OpError::Unsupported`]; attributes and shapes the old operator rejects are errors naming
//! them.

use crate::attribute::{Attribute, Attributes};
use crate::expansion::Expansion;
use crate::kernels::values::float_tensor;
use crate::operator::{InferInput, OpError};
use crate::registry::Registry;
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

/// Registers the conversions of old opsets.
pub fn register(r: &mut Registry) {
    for op in ["Add", "Sub", "Mul", "Div", "Pow"] {
        r.register_expansion("", op, 1..=6, |e| legacy_broadcast(e, 7));
    }
    for op in ["And", "Or", "Xor", "Equal", "Greater", "Less"] {
        r.register_expansion("", op, 1..=6, |e| legacy_broadcast(e, 7));
    }
    for op in ["Max", "Min", "Sum", "Mean"] {
        r.register_expansion("", op, 1..=7, same_shape_variadic);
    }
    for op in [
        "Abs",
        "Ceil",
        "Floor",
        "Neg",
        "Reciprocal",
        "Sqrt",
        "Relu",
        "Sigmoid",
        "Tanh",
        "Exp",
        "Log",
        "Elu",
        "LeakyRelu",
        "HardSigmoid",
        "InstanceNormalization",
    ] {
        r.register_expansion("", op, 1..=5, |e| {
            let attrs = e.attrs_without(&["consumed_inputs"]);
            forward(e, 6, attrs);
            Ok(())
        });
    }
    r.register_expansion("", "Selu", 1..=5, |e| {
        let mut attrs = e.attrs_without(&["consumed_inputs"]);
        for (name, default) in [("alpha", 1.6732_f32), ("gamma", 1.0507)] {
            if attrs.get(name).is_none() {
                attrs.insert(name, Attribute::Float(default));
            }
        }
        forward(e, 6, attrs);
        Ok(())
    });
    r.register_expansion("", "Clip", 1..=5, |e| {
        let mut attrs = e.attrs_without(&["consumed_inputs"]);
        for (name, unbounded) in [("min", f32::NEG_INFINITY), ("max", f32::INFINITY)] {
            if attrs.get(name).is_none() {
                attrs.insert(name, Attribute::Float(unbounded));
            }
        }
        forward(e, 6, attrs);
        Ok(())
    });
    r.register_expansion("", "Cast", 1..=5, cast_1);
    r.register_expansion("", "BatchNormalization", 1..=6, batch_norm);
    r.register_expansion("", "Dropout", 1..=6, dropout);
    r.register_expansion("", "Gemm", 1..=6, gemm);
    r.register_expansion("", "PRelu", 1..=6, prelu);
    r.register_expansion("", "Concat", 1..=3, |e| {
        let mut attrs = e.attrs_without(&[]);
        if attrs.get("axis").is_none() {
            attrs.insert("axis", Attribute::Int(1));
        }
        forward(e, 4, attrs);
        Ok(())
    });
    r.register_expansion("", "Reshape", 1..=4, reshape_1);
    r.register_expansion("", "Pad", 1..=1, |e| {
        let mut attrs = e.attrs_without(&["paddings"]);
        let pads = e
            .attrs()
            .ints("paddings")?
            .ok_or_else(|| OpError::attr("paddings", "required attribute is missing"))?
            .clone();
        attrs.insert("pads", Attribute::Ints(pads));
        forward_input0(e, 2, attrs)
    });
    r.register_expansion("", "Split", 1..=1, split_1);
    r.register_expansion("", "Tile", 1..=5, tile_1);
    r.register_expansion("", "Upsample", 1..=6, upsample_1);
    r.register_expansion("", "LpPool", 1..=1, lp_pool_1);
    r.register_expansion("", "GlobalLpPool", 1..=1, lp_pool_1);
    r.register_expansion("", "RNN", 1..=6, |e| {
        let attrs = e.attrs_without(&["output_sequence"]);
        forward(e, 7, attrs);
        Ok(())
    });
    r.register_expansion("", "LSTM", 1..=6, |e| {
        let attrs = e.attrs_without(&["output_sequence"]);
        forward(e, 7, attrs);
        Ok(())
    });
    r.register_expansion("", "GRU", 1..=6, gru_1);
    r.register_expansion("", "ImageScaler", 1..=9, image_scaler);
    r.register_expansion("", "ThresholdedRelu", 1..=9, |e| {
        let attrs = e.attrs_without(&[]);
        forward_input0(e, 10, attrs)
    });
}

/// Emits the node's operator at `opset` with `attrs`, on the node's inputs and outputs.
fn forward(e: &mut Expansion<'_>, opset: i64, attrs: Attributes) {
    let op = e.op_type().to_string();
    let inputs: Vec<String> = e.input_names().to_vec();
    let outputs: Vec<String> = e.output_names().to_vec();
    let ins: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let outs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    e.emit(&op, opset, attrs, &ins, &outs);
}

/// [`forward`] for an operator of one input (a later input of the old node is an error).
fn forward_input0(e: &mut Expansion<'_>, opset: i64, attrs: Attributes) -> Result<(), OpError> {
    if e.input_names().len() > 1 {
        return Err(OpError::Invalid(format!(
            "{}-{} takes one input, the node has {}",
            e.op_type(),
            e.opset(),
            e.input_names().len()
        )));
    }
    forward(e, opset, attrs);
    Ok(())
}

/// The node's single output name.
fn single_output(e: &Expansion<'_>) -> Result<String, OpError> {
    match e.output_names() {
        [o] if !o.is_empty() => Ok(o.clone()),
        outs => Err(OpError::Invalid(format!(
            "{}-{} has one output, the node declares {}",
            e.op_type(),
            e.opset(),
            outs.len()
        ))),
    }
}

/// A 0/1 attribute.
fn flag(e: &Expansion<'_>, name: &str) -> Result<Option<bool>, OpError> {
    match e.attrs().int(name)? {
        None => Ok(None),
        Some(0) => Ok(Some(false)),
        Some(1) => Ok(Some(true)),
        Some(v) => Err(OpError::attr(name, format!("must be 0 or 1, got {v}"))),
    }
}

fn shape_text(t: &TensorType) -> String {
    t.to_string()
}

/// Whether two dimensions can be the same size (equal, or not both fixed).
fn may_equal(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Fixed(x), Dim::Fixed(y)) => x == y,
        _ => true,
    }
}

/// Whether two types can have the same shape (ranks and fixed dimensions agree).
fn may_have_same_shape(a: &TensorType, b: &TensorType) -> bool {
    match (&a.shape, &b.shape) {
        (Some(x), Some(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| may_equal(p, q)),
        _ => true,
    }
}

/// Emits a value holding `name` reshaped to a scalar (its one element).
fn to_scalar(e: &mut Expansion<'_>, name: &str) -> String {
    e.emit_value("Squeeze", 11, Attributes::new(), &[name])
}

/// Emits `Unsqueeze` of `name` adding `count` unit axes after its `rank` axes; returns the
/// value read in its place (`name` itself when `count` is 0).
fn trailing_units(e: &mut Expansion<'_>, name: &str, rank: usize, count: usize) -> String {
    if count == 0 {
        return name.to_string();
    }
    let mut attrs = Attributes::new();
    let axes: Vec<i64> = (rank..rank + count).map(|a| a as i64).collect();
    attrs.insert("axes", Attribute::Ints(axes));
    e.emit_value("Unsqueeze", 11, attrs, &[name])
}

/// Whether a type has exactly one element (every dimension fixed to 1, or rank 0).
fn one_element(t: &TensorType) -> bool {
    t.shape
        .as_ref()
        .is_some_and(|s| s.iter().all(|d| *d == Dim::Fixed(1)))
}

/// Binary operators with the `broadcast`/`axis` attributes (opsets 1–6) → opset `target`.
fn legacy_broadcast(e: &mut Expansion<'_>, target: i64) -> Result<(), OpError> {
    let out = single_output(e)?;
    let a_name = e.input_name(0)?.to_string();
    let b_name = e.input_name(1)?.to_string();
    if e.input_names().len() > 2 {
        return Err(OpError::Invalid(format!(
            "{} takes two inputs, the node has {}",
            e.op_type(),
            e.input_names().len()
        )));
    }
    let (a, b) = (e.req_input(0)?.ty.clone(), e.req_input(1)?.ty.clone());
    let attrs = e.attrs_without(&["broadcast", "axis", "consumed_inputs"]);
    let op = e.op_type().to_string();
    if flag(e, "broadcast")? != Some(true) {
        if !may_have_same_shape(&a, &b) {
            return Err(OpError::attr(
                "broadcast",
                format!(
                    "is 0, so both inputs need one shape; got {} and {}",
                    shape_text(&a),
                    shape_text(&b)
                ),
            ));
        }
        e.emit(&op, target, attrs, &[&a_name, &b_name], &[&out]);
        return Ok(());
    }
    if one_element(&b) {
        let b_scalar = if b.rank() == Some(0) {
            b_name
        } else {
            to_scalar(e, &b_name)
        };
        e.emit(&op, target, attrs, &[&a_name, &b_scalar], &[&out]);
        return Ok(());
    }
    let axis = e.attrs().int("axis")?.copied();
    if axis.is_none() && (a.rank().is_none() || b.rank().is_none()) {
        // Suffix matching: on inputs the old operator accepts, numpy broadcasting agrees.
        e.emit(&op, target, attrs, &[&a_name, &b_name], &[&out]);
        return Ok(());
    }
    let (rank_a, rank_b) = (e.rank(0)?, e.rank(1)?);
    if rank_b > rank_a {
        return Err(OpError::attr(
            "broadcast",
            format!(
                "B ({}) has a higher rank than A ({}): it cannot be broadcast onto A",
                shape_text(&b),
                shape_text(&a)
            ),
        ));
    }
    let start = match axis {
        None => rank_a - rank_b,
        Some(axis) => {
            let ax = if axis < 0 { axis + rank_a as i64 } else { axis };
            if ax < 0 || ax as usize + rank_b > rank_a {
                return Err(OpError::attr(
                    "axis",
                    format!(
                        "{axis} does not place B ({}) inside A ({})",
                        shape_text(&b),
                        shape_text(&a)
                    ),
                ));
            }
            ax as usize
        }
    };
    if let (Some(da), Some(db)) = (&a.shape, &b.shape) {
        for (i, d) in db.iter().enumerate() {
            let fits = *d == Dim::Fixed(1) || may_equal(d, &da[start + i]);
            if !fits {
                return Err(OpError::attr(
                    "broadcast",
                    format!(
                        "B ({}) aligned at axis {start} does not match A ({})",
                        shape_text(&b),
                        shape_text(&a)
                    ),
                ));
            }
        }
    }
    let b_aligned = trailing_units(e, &b_name, rank_b, rank_a - start - rank_b);
    e.emit(&op, target, attrs, &[&a_name, &b_aligned], &[&out]);
    Ok(())
}

/// Max, Min, Sum, Mean before opset 8: inputs of one shape.
fn same_shape_variadic(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let first = e.req_input(0)?.ty.clone();
    for i in 1..e.input_names().len() {
        let t = e.req_input(i)?.ty;
        if !may_have_same_shape(&first, t) {
            return Err(OpError::Shape(format!(
                "before opset 8, the inputs of {} need one shape; input #0 is {}, input #{i} is {}",
                e.op_type(),
                shape_text(&first),
                shape_text(t)
            )));
        }
    }
    let attrs = e.attrs_without(&["consumed_inputs"]);
    forward(e, 8, attrs);
    Ok(())
}

/// The ONNX `TensorProto.DataType` code of a type name (Cast-1's `to`).
fn dtype_code(name: &str) -> Option<i64> {
    const NAMES: [&str; 17] = [
        "UNDEFINED",
        "FLOAT",
        "UINT8",
        "INT8",
        "UINT16",
        "INT16",
        "INT32",
        "INT64",
        "STRING",
        "BOOL",
        "FLOAT16",
        "DOUBLE",
        "UINT32",
        "UINT64",
        "COMPLEX64",
        "COMPLEX128",
        "BFLOAT16",
    ];
    let upper = name.to_ascii_uppercase();
    NAMES
        .iter()
        .position(|n| *n == upper)
        .filter(|&p| p > 0)
        .map(|p| p as i64)
}

/// Cast-1: `to` is a type name (a type code, as from opset 6, is accepted too).
fn cast_1(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let code = match e.attrs().get("to") {
        Some(Attribute::Int(code)) => *code,
        Some(Attribute::String(to)) => dtype_code(to)
            .ok_or_else(|| OpError::attr("to", format!("`{to}` names no ONNX data type")))?,
        Some(_) => return Err(OpError::attr("to", "expected a type name")),
        None => return Err(OpError::attr("to", "required attribute is missing")),
    };
    let mut attrs = e.attrs_without(&["to"]);
    attrs.insert("to", Attribute::Int(code));
    forward_input0(e, 6, attrs)
}

/// BatchNormalization-1/6 → opset 7.
fn batch_norm(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let declared = e.output_names().len();
    let training = match flag(e, "is_test")? {
        Some(true) if declared > 1 => {
            return Err(OpError::attr(
                "is_test",
                format!(
                    "is 1 (test mode, one output) but the node declares {declared} outputs \
                     (the statistics of training mode)"
                ),
            ))
        }
        Some(true) => false,
        Some(false) => true,
        None => declared > 1,
    };
    let attrs = e.attrs_without(&["is_test", "consumed_inputs"]);
    let inputs: Vec<String> = e.input_names().to_vec();
    let mut outputs: Vec<String> = e.output_names().to_vec();
    if training {
        outputs.resize(5, String::new());
    }
    let ins: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let outs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    e.emit("BatchNormalization", 7, attrs, &ins, &outs);
    Ok(())
}

/// Dropout-1/6 → opset 7 (inference).
fn dropout(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let ratio = e.attrs().float_or("ratio", 0.5)?;
    if flag(e, "is_test")? == Some(false) && ratio != 0.0 {
        return Err(OpError::Unsupported(format!(
            "attribute `is_test` = 0: {}-{} in training mode draws random masks (ratio {ratio})",
            e.op_type(),
            e.opset()
        )));
    }
    let attrs = e.attrs_without(&["is_test", "consumed_inputs"]);
    forward_input0(e, 7, attrs)
}

/// Gemm-1/6 → opset 7: `broadcast = 0` needs `C` of shape `(M, N)`.
fn gemm(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let attrs = e.attrs_without(&["broadcast"]);
    if flag(e, "broadcast")? != Some(true) {
        let (a, b) = (&e.req_input(0)?.ty, &e.req_input(1)?.ty);
        let c = &e.req_input(2)?.ty;
        let trans_a = flag(e, "transA")?.unwrap_or(false);
        let trans_b = flag(e, "transB")?.unwrap_or(false);
        let dim = |t: &TensorType, i: usize| -> Dim {
            t.shape
                .as_ref()
                .filter(|s| s.len() == 2)
                .map_or(Dim::Unknown, |s| s[i].clone())
        };
        let m = dim(a, usize::from(trans_a));
        let n = dim(b, usize::from(!trans_b));
        let ok = match &c.shape {
            None => true,
            Some(s) => s.len() == 2 && may_equal(&s[0], &m) && may_equal(&s[1], &n),
        };
        if !ok {
            return Err(OpError::attr(
                "broadcast",
                format!(
                    "is 0, so C needs the shape (M, N) = ({m}, {n}); got {}",
                    shape_text(c)
                ),
            ));
        }
    }
    forward(e, 7, attrs);
    Ok(())
}

/// PRelu-1/6 → opset 7: a shared or per-channel slope.
fn prelu(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let out = single_output(e)?;
    let x_name = e.input_name(0)?.to_string();
    let s_name = e.input_name(1)?.to_string();
    let x = e.req_input(0)?.ty.clone();
    let slope = e.req_input(1)?.ty.clone();
    let rank_x = e.rank(0)?;
    let attrs = e.attrs_without(&["consumed_inputs"]);
    let unsupported = || {
        OpError::Unsupported(format!(
            "PRelu-{} slope {} for input {}: before opset 7 a slope is shared (one element) \
             or holds one value per channel (axis 1)",
            e.opset(),
            shape_text(&slope),
            shape_text(&x)
        ))
    };
    let s_shape = slope.fixed_shape().ok_or_else(unsupported)?;
    let slope_read = if s_shape.iter().all(|&d| d == 1) {
        if s_shape.is_empty() {
            s_name
        } else {
            to_scalar(e, &s_name)
        }
    } else {
        let channels = s_shape[0];
        let per_channel = rank_x >= 2
            && s_shape[1..].iter().all(|&d| d == 1)
            && s_shape.len() < rank_x
            && x.shape
                .as_ref()
                .is_some_and(|d| may_equal(&d[1], &Dim::Fixed(channels)));
        if !per_channel {
            return Err(unsupported());
        }
        trailing_units(e, &s_name, s_shape.len(), rank_x - 1 - s_shape.len())
    };
    e.emit("PRelu", 7, attrs, &[&x_name, &slope_read], &[&out]);
    Ok(())
}

/// Reshape-1..4: the `shape` attribute becomes a constant input.
fn reshape_1(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let out = single_output(e)?;
    let x = e.input_name(0)?.to_string();
    if e.input_names().len() > 1 {
        return Err(OpError::Invalid(format!(
            "Reshape-{} takes one input (the shape is an attribute), the node has {}",
            e.opset(),
            e.input_names().len()
        )));
    }
    let shape = e
        .attrs()
        .ints("shape")?
        .ok_or_else(|| OpError::attr("shape", "required attribute is missing"))?
        .clone();
    let shape = e.constant(Tensor::new(vec![shape.len()], shape)?);
    e.emit("Reshape", 5, Attributes::new(), &[&x, &shape], &[&out]);
    Ok(())
}

/// Split-1: the lengths come from the `split` attribute or the optional second input, which
/// must then be known at import. `axis` defaults to 0, as in opset 2.
fn split_1(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let mut attrs = e.attrs_without(&["split"]);
    let from_input = e.input(1);
    let split = match (e.attrs().ints("split")?, from_input) {
        (Some(_), Some(_)) => {
            return Err(OpError::attr(
                "split",
                "given both as an attribute and as input #1",
            ))
        }
        (Some(s), None) => Some(s.clone()),
        (None, Some(InferInput { value: Some(t), .. })) => match integers(t) {
            Some(v) if t.rank() == 1 => Some(v),
            _ => {
                return Err(OpError::Invalid(format!(
                    "Split-1 input #1 must hold 1-D integer lengths, got {}{:?}",
                    t.dtype(),
                    t.shape()
                )))
            }
        },
        (None, Some(_)) => {
            return Err(OpError::Unsupported(
                "Split-1 with lengths (input #1) computed at run time".into(),
            ))
        }
        (None, None) => None,
    };
    if let Some(s) = split {
        attrs.insert("split", Attribute::Ints(s));
    }
    let x = e.input_name(0)?.to_string();
    let outputs: Vec<String> = e.output_names().to_vec();
    let outs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    e.emit("Split", 2, attrs, &[&x], &outs);
    Ok(())
}

/// The values of `t` if they are integers: of an integer dtype, or of a float dtype with
/// integral values (the old schemas type Tile-1's `tiles`/`axis` and Split-1's `split` like
/// the data).
fn integers(t: &Tensor) -> Option<Vec<i64>> {
    if t.dtype().is_int() {
        return Some(t.to_i64_vec());
    }
    if !t.dtype().is_float() {
        return None;
    }
    t.to_f64_vec()
        .into_iter()
        .map(|v| (v.fract() == 0.0 && v.abs() < 9.0e15).then_some(v as i64))
        .collect()
}

/// A known scalar integer input of an old operator.
fn known_int(e: &Expansion<'_>, i: usize, what: &str) -> Result<i64, OpError> {
    let input = e.req_input(i)?;
    let t = input.value.ok_or_else(|| {
        OpError::Unsupported(format!(
            "{}-{} with `{what}` (input #{i}) computed at run time",
            e.op_type(),
            e.opset()
        ))
    })?;
    match integers(t).as_deref() {
        Some([v]) => Ok(*v),
        _ => Err(OpError::Invalid(format!(
            "{}-{} input #{i} (`{what}`) must be one integer, got {}{:?}",
            e.op_type(),
            e.opset(),
            t.dtype(),
            t.shape()
        ))),
    }
}

/// Tile-1 (`input`, `tiles`, `axis`): repeat the input `tiles` times along `axis`.
fn tile_1(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let out = single_output(e)?;
    let x = e.input_name(0)?.to_string();
    let rank = e.rank(0)?;
    let tiles = known_int(e, 1, "tiles")?;
    let axis = known_int(e, 2, "axis")?;
    let ax = if axis < 0 { axis + rank as i64 } else { axis };
    if ax < 0 || ax as usize >= rank {
        return Err(OpError::Invalid(format!(
            "Tile-{} axis {axis} is out of range for rank {rank}",
            e.opset()
        )));
    }
    if tiles < 0 {
        return Err(OpError::Invalid(format!(
            "Tile-{} tiles must be >= 0, got {tiles}",
            e.opset()
        )));
    }
    let mut repeats = vec![1_i64; rank];
    repeats[ax as usize] = tiles;
    let repeats = e.constant(Tensor::new(vec![rank], repeats)?);
    e.emit("Tile", 6, Attributes::new(), &[&x, &repeats], &[&out]);
    Ok(())
}

/// Upsample-1: `height_scale` and `width_scale` of a 4-D input → Upsample-7's `scales`.
fn upsample_1(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let scale = |name: &str| -> Result<f32, OpError> {
        e.attrs()
            .float(name)?
            .copied()
            .ok_or_else(|| OpError::attr(name, "required attribute is missing"))
    };
    let (h, w) = (scale("height_scale")?, scale("width_scale")?);
    let mode = e.attrs().string_or("mode", "nearest")?;
    if mode != "nearest" {
        return Err(OpError::Unsupported(format!(
            "attribute `mode` = `{mode}`: Upsample-{} defines no sampling coordinates for it",
            e.opset()
        )));
    }
    let rank = e.rank(0)?;
    if rank != 4 {
        return Err(OpError::Shape(format!(
            "Upsample-{} takes a 4-D input, got rank {rank}",
            e.opset()
        )));
    }
    let mut attrs = e.attrs_without(&["height_scale", "width_scale"]);
    attrs.insert("scales", Attribute::Floats(vec![1.0, 1.0, h, w]));
    forward_input0(e, 7, attrs)
}

/// LpPool-1 and GlobalLpPool-1: `p` is a float; opset 2 takes an integer.
fn lp_pool_1(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let p = e.attrs().float_or("p", 2.0)?;
    if !(p >= 1.0 && p.fract() == 0.0 && p <= i32::MAX as f32) {
        return Err(OpError::Unsupported(format!(
            "attribute `p` = {p}: only integer norms (opset 2 and later) are implemented"
        )));
    }
    let mut attrs = e.attrs_without(&["p"]);
    attrs.insert("p", Attribute::Int(p as i64));
    forward_input0(e, 2, attrs)
}

/// GRU-1/3 → opset 7: `output_sequence` goes; GRU-1's default direction (spelled `foward`)
/// is forward.
fn gru_1(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let mut attrs = e.attrs_without(&["output_sequence"]);
    if let Some(Attribute::String(d)) = attrs.get("direction") {
        if d == "foward" {
            attrs.insert("direction", Attribute::String("forward".into()));
        }
    }
    forward(e, 7, attrs);
    Ok(())
}

/// ImageScaler (experimental before opset 10): `scale * x + bias[c]` over `N x C x H x W`.
fn image_scaler(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let out = single_output(e)?;
    let x_name = e.input_name(0)?.to_string();
    let x = e.req_input(0)?.ty.clone();
    let rank = e.rank(0)?;
    if rank != 4 {
        return Err(OpError::Shape(format!(
            "ImageScaler takes a 4-D input, got {}",
            shape_text(&x)
        )));
    }
    let scale = e.attrs().float_or("scale", 1.0)?;
    let bias = e.attrs().floats("bias")?.cloned();
    let dt = x.dtype;
    let scale = e.constant(float_tensor(dt, vec![], &[f64::from(scale)], 0)?);
    let Some(bias) = bias.filter(|b| !b.is_empty()) else {
        e.emit("Mul", 7, Attributes::new(), &[&x_name, &scale], &[&out]);
        return Ok(());
    };
    if let Some(c) = x.shape.as_ref().and_then(|s| s[1].fixed()) {
        if bias.len() != c {
            return Err(OpError::attr(
                "bias",
                format!("has {} values for {c} channels", bias.len()),
            ));
        }
    }
    let scaled = e.emit_value("Mul", 7, Attributes::new(), &[&x_name, &scale]);
    let bias: Vec<f64> = bias.iter().map(|&b| f64::from(b)).collect();
    let bias = e.constant(float_tensor(dt, vec![bias.len(), 1, 1], &bias, 0)?);
    e.emit("Add", 7, Attributes::new(), &[&scaled, &bias], &[&out]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::dtype_code;
    use crate::dtype::DType;

    #[test]
    fn cast_1_type_names_are_onnx_codes() {
        assert_eq!(dtype_code("FLOAT"), Some(1));
        assert_eq!(dtype_code("double"), Some(11));
        assert_eq!(DType::from_onnx_code(dtype_code("INT64").unwrap() as i32), Some(DType::I64));
        assert_eq!(dtype_code("UNDEFINED"), None);
        assert_eq!(dtype_code("FLOAT32"), None);
    }
}
