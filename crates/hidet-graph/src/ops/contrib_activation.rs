//! ONNX Runtime's contrib activations (`com.microsoft`), which its transformer optimizer writes,
//! expanded into default-domain operators (see `contrib_util`):
//!
//! - `Gelu(X)` → `Gelu(X)` (exact, erf); `BiasGelu(A, B)` → `Gelu(A + B)`;
//! - `FastGelu(X, bias?)` → `Gelu(X + bias, approximate = "tanh")`;
//! - `QuickGelu(X; alpha = 1.702)` → `X · Sigmoid(alpha · X)`;
//! - `BiasAdd(X, bias, skip)` → `X + bias + skip`;
//!
//! and ONNX's own `Swish(X; alpha = 1)` (opset 24) → `X · Sigmoid(alpha · X)`, `SwiGLU(A, B;
//! alpha = 1)` (opset 28) → `Swish(A) · B`.

use crate::attribute::Attribute;
use crate::expansion::Expansion;
use crate::operator::OpError;
use crate::registry::{Registry, LATEST_OPSET};

use super::contrib_util::{
    attrs, first_output, float, float_dtype, op0, op_into, optional_input, MS_DOMAIN,
};

/// Registers the expansions (every opset of the contrib domain).
pub fn register(r: &mut Registry) {
    for name in ["Gelu", "BiasGelu", "FastGelu"] {
        r.register_expansion(MS_DOMAIN, name, 1..=i64::MAX, gelu);
    }
    r.register_expansion(MS_DOMAIN, "QuickGelu", 1..=i64::MAX, quick_gelu);
    r.register_expansion(MS_DOMAIN, "BiasAdd", 1..=i64::MAX, bias_add);
    r.register_expansion("", "Swish", 24..=LATEST_OPSET, quick_gelu);
    r.register_expansion("", "SwiGLU", 28..=LATEST_OPSET, quick_gelu);
}

/// `x + bias` when the node's input `i` is present, else `x`.
pub(super) fn add_optional(e: &mut Expansion<'_>, x: &str, i: usize) -> String {
    match optional_input(e, i) {
        Some(bias) => op0(e, "Add", &[x, &bias]),
        None => x.to_string(),
    }
}

/// `Gelu(x)` into `output`, exact or with the tanh approximation.
pub(super) fn gelu_into(e: &mut Expansion<'_>, x: &str, tanh: bool, output: &str) {
    let approximate = if tanh { "tanh" } else { "none" };
    op_into(
        e,
        "Gelu",
        attrs([("approximate", Attribute::String(approximate.into()))]),
        &[x],
        &[output],
    );
}

fn gelu(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let x = e.input_name(0)?.to_string();
    let x = match e.op_type() {
        "BiasGelu" => {
            let bias = e.input_name(1)?.to_string();
            op0(e, "Add", &[&x, &bias])
        }
        "FastGelu" => add_optional(e, &x, 1),
        _ => x,
    };
    let tanh = e.op_type() == "FastGelu";
    let output = first_output(e)?;
    gelu_into(e, &x, tanh, &output);
    Ok(())
}

/// `QuickGelu`, `Swish` and `SwiGLU`: `x · Sigmoid(alpha · x)` (times the second input for
/// `SwiGLU`).
fn quick_gelu(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let x = e.input_name(0)?.to_string();
    let default_alpha = if e.op_type() == "QuickGelu" { 1.702 } else { 1.0 };
    let alpha = e.attrs().float_or("alpha", default_alpha)?;
    let dtype = float_dtype(e, 0)?;
    let alpha = float(e, f64::from(alpha), dtype);
    let scaled = op0(e, "Mul", &[&x, &alpha]);
    let gate = op0(e, "Sigmoid", &[&scaled]);
    let output = first_output(e)?;
    if e.op_type() == "SwiGLU" {
        let value = e.input_name(1)?.to_string();
        let swish = op0(e, "Mul", &[&x, &gate]);
        op_into(e, "Mul", Default::default(), &[&swish, &value], &[&output]);
    } else {
        op_into(e, "Mul", Default::default(), &[&x, &gate], &[&output]);
    }
    Ok(())
}

fn bias_add(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let x = e.input_name(0)?.to_string();
    let bias = e.input_name(1)?.to_string();
    let skip = e.input_name(2)?.to_string();
    let with_bias = op0(e, "Add", &[&x, &bias]);
    let output = first_output(e)?;
    op_into(e, "Add", Default::default(), &[&with_bias, &skip], &[&output]);
    Ok(())
}

/// The unary `activation` of ONNX Runtime's fused operators (`FusedConv`, `FusedGemm`) with its
/// parameters `params` (alpha, beta; absent ones take the operator's defaults), applied to `x`
/// into `output`.
pub(super) fn fused_activation_into(
    e: &mut Expansion<'_>,
    x: &str,
    params: &[f32],
    output: &str,
) -> Result<(), OpError> {
    let activation = e.attrs().string_or("activation", "")?;
    let param = |i: usize, default: f32| params.get(i).copied().unwrap_or(default);
    match activation.as_str() {
        "" | "Identity" => op_into(e, "Identity", Default::default(), &[x], &[output]),
        "Relu" | "Tanh" | "Sigmoid" => op_into(e, &activation, Default::default(), &[x], &[output]),
        "LeakyRelu" => op_into(
            e,
            "LeakyRelu",
            attrs([("alpha", Attribute::Float(param(0, 0.01)))]),
            &[x],
            &[output],
        ),
        "HardSigmoid" => op_into(
            e,
            "HardSigmoid",
            attrs([
                ("alpha", Attribute::Float(param(0, 0.2))),
                ("beta", Attribute::Float(param(1, 0.5))),
            ]),
            &[x],
            &[output],
        ),
        "Clip" => {
            let dtype = e.input(0).map(|t| t.ty.dtype).unwrap_or(crate::DType::F32);
            let lo = float(e, f64::from(param(0, f32::MIN)), dtype);
            let hi = float(e, f64::from(param(1, f32::MAX)), dtype);
            op_into(e, "Clip", Default::default(), &[x, &lo, &hi], &[output]);
        }
        other => {
            return Err(OpError::Unsupported(format!(
                "{} with activation `{other}`",
                e.op_type()
            )))
        }
    }
    Ok(())
}
