//! ONNX Runtime's fused contrib operators (`com.microsoft`), which appear in models it saved
//! after optimizing them, expanded into default-domain operators (see `contrib_util`):
//!
//! - `FusedConv(X, W, B?, Z?; activation, activation_params, conv attributes)` →
//!   `activation(Conv(X, W, B) + Z)`;
//! - `FusedGemm(A, B, C?; alpha, beta, transA, transB, activation, activation_alpha,
//!   activation_beta)` → `activation(Gemm(A, B, C))`;
//! - `FusedMatMul(A, B; alpha, transA, transB)` → `alpha · MatMul(A or Aᵀ, B or Bᵀ)`
//!   (transposing the last two axes; `transBatchA`/`transBatchB` are not supported);
//! - `GemmFastGelu(X, W, bias?)` → `Gelu(X·W + bias, approximate = "tanh")`.

use crate::attribute::Attribute;
use crate::expansion::Expansion;
use crate::operator::OpError;
use crate::registry::Registry;

use super::contrib_activation::{add_optional, fused_activation_into, gelu_into};
use super::contrib_util::{
    first_output, float, float_dtype, op, op0, op_into, require_attr, transpose, MS_DOMAIN,
};

/// Registers the expansions (every opset of the contrib domain).
pub fn register(r: &mut Registry) {
    r.register_expansion(MS_DOMAIN, "FusedConv", 1..=i64::MAX, fused_conv);
    r.register_expansion(MS_DOMAIN, "FusedGemm", 1..=i64::MAX, fused_gemm);
    r.register_expansion(MS_DOMAIN, "FusedMatMul", 1..=i64::MAX, fused_matmul);
    r.register_expansion(MS_DOMAIN, "GemmFastGelu", 1..=i64::MAX, gemm_fast_gelu);
}

fn fused_conv(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let conv_attrs = e.attrs_without(&["activation", "activation_params"]);
    let inputs: Vec<String> = (0..3)
        .map(|i| e.input_names().get(i).cloned().unwrap_or_default())
        .collect();
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let conv = op(e, "Conv", conv_attrs, &inputs);
    let sum = add_optional(e, &conv, 3);
    let params = e.attrs().floats("activation_params")?.cloned().unwrap_or_default();
    let output = first_output(e)?;
    fused_activation_into(e, &sum, &params, &output)
}

fn fused_gemm(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let gemm_attrs = e.attrs_without(&[
        "activation",
        "activation_alpha",
        "activation_beta",
        "activation_gamma",
    ]);
    let inputs: Vec<String> = (0..3)
        .map(|i| e.input_names().get(i).cloned().unwrap_or_default())
        .collect();
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let gemm = op(e, "Gemm", gemm_attrs, &inputs);
    let mut params = Vec::new();
    for name in ["activation_alpha", "activation_beta"] {
        match e.attrs().get(name) {
            Some(Attribute::Float(v)) => params.push(*v),
            _ => break,
        }
    }
    let output = first_output(e)?;
    fused_activation_into(e, &gemm, &params, &output)
}

/// Input `i` with its last two axes swapped when the attribute `flag` is set.
fn maybe_transposed(e: &mut Expansion<'_>, i: usize, flag: &str) -> Result<String, OpError> {
    let x = e.input_name(i)?.to_string();
    if e.attrs().int_or(flag, 0)? == 0 {
        return Ok(x);
    }
    let rank = e.rank(i)?;
    if rank < 2 {
        return Err(OpError::Unsupported(format!(
            "FusedMatMul with {flag} = 1 on an input of rank {rank}"
        )));
    }
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(rank - 2, rank - 1);
    Ok(transpose(e, &x, &perm))
}

fn fused_matmul(e: &mut Expansion<'_>) -> Result<(), OpError> {
    require_attr(e, "transBatchA", 0)?;
    require_attr(e, "transBatchB", 0)?;
    let a = maybe_transposed(e, 0, "transA")?;
    let b = maybe_transposed(e, 1, "transB")?;
    let alpha = e.attrs().float_or("alpha", 1.0)?;
    let output = first_output(e)?;
    if alpha == 1.0 {
        op_into(e, "MatMul", Default::default(), &[&a, &b], &[&output]);
    } else {
        let product = op0(e, "MatMul", &[&a, &b]);
        let alpha = float(e, f64::from(alpha), float_dtype(e, 0)?);
        op_into(e, "Mul", Default::default(), &[&product, &alpha], &[&output]);
    }
    Ok(())
}

fn gemm_fast_gelu(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let x = e.input_name(0)?.to_string();
    let w = e.input_name(1)?.to_string();
    let product = op0(e, "MatMul", &[&x, &w]);
    let sum = add_optional(e, &product, 2);
    let output = first_output(e)?;
    gelu_into(e, &sum, true, &output);
    Ok(())
}
