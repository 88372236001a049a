//! ONNX Runtime's contrib normalizations, expanded into default-domain operators (see
//! `contrib_util`):
//!
//! - `LayerNormalization` of the default domain below opset 17 (ONNX Runtime registered it
//!   there before ONNX had it) → `LayerNormalization`-17;
//! - `SimplifiedLayerNormalization(X, scale; axis, epsilon, stash_type)` (default domain: RMS
//!   normalization) → `X · 1/√(mean(X²) + ε) · scale`, the reciprocal also its second output;
//! - `SkipLayerNormalization(input, skip, gamma, beta?, bias?; epsilon)` →
//!   `LayerNormalization(input + skip + bias)`, with the mean, the inverse deviation and the sum
//!   as the optional outputs; `SkipSimplifiedLayerNormalization(input, skip, gamma, bias?)`
//!   likewise with the RMS normalization (no mean);
//! - `EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding,
//!   segment_embedding?, gamma, beta, mask?, position_ids?; epsilon, mask_index_type)` →
//!   `LayerNormalization(word[ids] + position[position_ids or 0..S] + segment[segment_ids])`,
//!   with the mask index (the sum of each mask row, `int32`, zeros without a mask) and the sum
//!   of the embeddings as the other outputs; `QEmbedLayerNormalization` (ONNX Runtime's dynamic
//!   quantization of it: the five tables quantized, their scales and zero points as inputs
//!   8–12 and 13–17, no position ids) the same of the dequantized tables;
//!
//! and ONNX's own `RMSNormalization(X, scale; axis, epsilon, stash_type)` (opset 23), the same
//! computation as `SimplifiedLayerNormalization`.

use crate::attribute::Attribute;
use crate::dtype::DType;
use crate::expansion::Expansion;
use crate::operator::OpError;
use crate::registry::{Registry, LATEST_OPSET};
use crate::tensor::Tensor;

use super::contrib_util::{
    attrs, dim, first_output, float, float_dtype, int, ints, op, op0, op_into, optional_input,
    optional_output, unsqueeze, MS_DOMAIN,
};

/// ONNX Runtime's default epsilon of `EmbedLayerNormalization`.
const EMBED_EPSILON: f32 = 1e-12;

/// Registers the expansions.
pub fn register(r: &mut Registry) {
    r.register_expansion("", "LayerNormalization", 1..=16, layer_norm_before_17);
    r.register_expansion("", "SimplifiedLayerNormalization", 1..=i64::MAX, simplified);
    r.register_expansion(MS_DOMAIN, "SimplifiedLayerNormalization", 1..=i64::MAX, simplified);
    r.register_expansion("", "RMSNormalization", 23..=LATEST_OPSET, simplified);
    r.register_expansion(MS_DOMAIN, "SkipLayerNormalization", 1..=i64::MAX, skip_layer_norm);
    r.register_expansion(
        MS_DOMAIN,
        "SkipSimplifiedLayerNormalization",
        1..=i64::MAX,
        skip_layer_norm,
    );
    r.register_expansion(MS_DOMAIN, "EmbedLayerNormalization", 1..=i64::MAX, embed_layer_norm);
    r.register_expansion(
        MS_DOMAIN,
        "QEmbedLayerNormalization",
        1..=i64::MAX,
        quantized_embed_layer_norm,
    );
}

fn layer_norm_before_17(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let inputs = e.input_names().to_vec();
    let outputs = e.output_names().to_vec();
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let outputs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    let a = e.attrs().clone();
    e.emit_in("", "LayerNormalization", 17, a, &inputs, &outputs);
    Ok(())
}

/// The axes from `axis` to the last of input 0 (`[-1]` without needing the rank).
fn axes_from(e: &Expansion<'_>, axis: i64) -> Result<Vec<i64>, OpError> {
    if axis == -1 {
        return Ok(vec![-1]);
    }
    let rank = e.rank(0)? as i64;
    let first = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&first) {
        return Err(OpError::attr("axis", format!("{axis} is out of range for rank {rank}")));
    }
    Ok((first..rank).collect())
}

/// RMS normalization of `x` (of float type `dtype`) over `axes` with `scale`, into `output`;
/// the reciprocal deviation (computed in `f32` for narrower types) into `inv_std` when given.
fn rms_into(
    e: &mut Expansion<'_>,
    x: &str,
    scale: &str,
    axes: &[i64],
    epsilon: f32,
    output: &str,
    inv_std: Option<&str>,
) -> Result<(), OpError> {
    let dtype = float_dtype(e, 0)?;
    let stash = if dtype == DType::F64 { DType::F64 } else { DType::F32 };
    let wide = if dtype == stash {
        x.to_string()
    } else {
        op(e, "Cast", attrs([("to", Attribute::Int(stash.onnx_code().into()))]), &[x])
    };
    let square = op0(e, "Mul", &[&wide, &wide]);
    let axes = ints(e, axes);
    let mean = op(
        e,
        "ReduceMean",
        attrs([("keepdims", Attribute::Int(1))]),
        &[&square, &axes],
    );
    let eps = float(e, f64::from(epsilon), stash);
    let shifted = op0(e, "Add", &[&mean, &eps]);
    let deviation = op0(e, "Sqrt", &[&shifted]);
    let inverse = match inv_std {
        Some(name) => {
            op_into(e, "Reciprocal", Default::default(), &[&deviation], &[name]);
            name.to_string()
        }
        None => op0(e, "Reciprocal", &[&deviation]),
    };
    let normed = op0(e, "Mul", &[&wide, &inverse]);
    let normed = if dtype == stash {
        normed
    } else {
        op(e, "Cast", attrs([("to", Attribute::Int(dtype.onnx_code().into()))]), &[&normed])
    };
    op_into(e, "Mul", Default::default(), &[&normed, scale], &[output]);
    Ok(())
}

fn simplified(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let x = e.input_name(0)?.to_string();
    let scale = e.input_name(1)?.to_string();
    let axes = axes_from(e, e.attrs().int_or("axis", -1)?)?;
    let epsilon = e.attrs().float_or("epsilon", 1e-5)?;
    let output = first_output(e)?;
    let inv_std = optional_output(e, 1);
    rms_into(e, &x, &scale, &axes, epsilon, &output, inv_std.as_deref())
}

/// `SkipLayerNormalization` and `SkipSimplifiedLayerNormalization` (whose bias is input 3, and
/// which has no mean).
fn skip_layer_norm(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let simplified = e.op_type() == "SkipSimplifiedLayerNormalization";
    let input = e.input_name(0)?.to_string();
    let skip = e.input_name(1)?.to_string();
    let gamma = e.input_name(2)?.to_string();
    let bias_index = if simplified { 3 } else { 4 };
    let sum_output = optional_output(e, 3);
    let sum = match (optional_input(e, bias_index), &sum_output) {
        (Some(bias), _) => {
            let partial = op0(e, "Add", &[&input, &skip]);
            match &sum_output {
                Some(name) => {
                    op_into(e, "Add", Default::default(), &[&partial, &bias], &[name]);
                    name.clone()
                }
                None => op0(e, "Add", &[&partial, &bias]),
            }
        }
        (None, Some(name)) => {
            op_into(e, "Add", Default::default(), &[&input, &skip], &[name]);
            name.clone()
        }
        (None, None) => op0(e, "Add", &[&input, &skip]),
    };
    let epsilon = e.attrs().float_or("epsilon", 1e-12)?;
    let output = first_output(e)?;
    let mean = optional_output(e, 1);
    let inv_std = optional_output(e, 2);
    if simplified {
        if mean.is_some() {
            return Err(OpError::Unsupported(
                "SkipSimplifiedLayerNormalization's mean output (RMS normalization has none)"
                    .into(),
            ));
        }
        return rms_into(e, &sum, &gamma, &[-1], epsilon, &output, inv_std.as_deref());
    }
    let beta = optional_input(e, 3).unwrap_or_default();
    let statistics = [mean.as_deref().unwrap_or(""), inv_std.as_deref().unwrap_or("")];
    layer_norm_into(e, [&sum, &gamma, &beta], epsilon, [&output, statistics[0], statistics[1]]);
    Ok(())
}

/// `LayerNormalization(x, gamma, beta)` over the last axis into `outputs` (the normalized
/// value, the mean and the inverse deviation; `""` for those not wanted).
fn layer_norm_into(e: &mut Expansion<'_>, inputs: [&str; 3], epsilon: f32, outputs: [&str; 3]) {
    op_into(
        e,
        "LayerNormalization",
        attrs([
            ("axis", Attribute::Int(-1)),
            ("epsilon", Attribute::Float(epsilon)),
        ]),
        &inputs,
        &outputs,
    );
}

fn embed_layer_norm(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let [word, position, gamma, beta] = [2, 3, 5, 6].map(|i| e.input_name(i).map(str::to_string));
    let tables = [word?, position?, gamma?, beta?];
    let segment_table = optional_input(e, 4);
    embed_from_tables(e, tables, segment_table, optional_input(e, 8))
}

/// `QEmbedLayerNormalization(input_ids, segment_ids?, word, position, segment?, gamma, beta,
/// mask?, word_scale, position_scale, segment_scale?, gamma_scale, beta_scale, word_zero,
/// position_zero, segment_zero?, gamma_zero, beta_zero)` (ONNX Runtime's dynamic quantization
/// of `EmbedLayerNormalization`): the same of the dequantized tables.
fn quantized_embed_layer_norm(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let dequantized = |e: &mut Expansion<'_>, i: usize| -> Result<String, OpError> {
        let q = e.input_name(i)?.to_string();
        let scale = e.input_name(i + 6)?.to_string();
        let zero = e.input_names().get(i + 11).cloned().unwrap_or_default();
        Ok(op0(e, "DequantizeLinear", &[&q, &scale, &zero]))
    };
    let tables = [
        dequantized(e, 2)?,
        dequantized(e, 3)?,
        dequantized(e, 5)?,
        dequantized(e, 6)?,
    ];
    let segment_table = match optional_input(e, 4) {
        Some(_) => Some(dequantized(e, 4)?),
        None => None,
    };
    embed_from_tables(e, tables, segment_table, None)
}

/// `EmbedLayerNormalization` of the node's ids (input 0), segment ids (input 1) and mask
/// (input 7) with the float `[word, position, gamma, beta]` tables, the segment table and the
/// position ids given.
fn embed_from_tables(
    e: &mut Expansion<'_>,
    [word_table, position_table, gamma, beta]: [String; 4],
    segment_table: Option<String>,
    position_ids: Option<String>,
) -> Result<(), OpError> {
    let ids = e.input_name(0)?.to_string();
    let gather = |e: &mut Expansion<'_>, table: &str, indices: &str| {
        op(e, "Gather", attrs([("axis", Attribute::Int(0))]), &[table, indices])
    };
    let words = gather(e, &word_table, &ids);
    let positions = match position_ids {
        Some(position_ids) => gather(e, &position_table, &position_ids),
        None => {
            let length = dim(e, &ids, 1);
            let (start, step) = (int(e, 0), int(e, 1));
            let range = op0(e, "Range", &[&start, &length, &step]);
            gather(e, &position_table, &range)
        }
    };
    let mut sum = op0(e, "Add", &[&words, &positions]);
    if let (Some(segment_ids), Some(segment_table)) = (optional_input(e, 1), segment_table) {
        let segments = gather(e, &segment_table, &segment_ids);
        sum = op0(e, "Add", &[&sum, &segments]);
    }
    if let Some(name) = optional_output(e, 2) {
        op_into(e, "Identity", Default::default(), &[&sum], &[&name]);
    }
    let epsilon = e.attrs().float_or("epsilon", EMBED_EPSILON)?;
    let output = first_output(e)?;
    layer_norm_into(e, [&sum, &gamma, &beta], epsilon, [&output, "", ""]);
    if let Some(mask_index) = optional_output(e, 1) {
        let int32 = Attribute::Int(DType::I32.onnx_code().into());
        match optional_input(e, 7) {
            Some(mask) => {
                let mask = op(e, "Cast", attrs([("to", int32.clone())]), &[&mask]);
                let axes = ints(e, &[1]);
                let sum = op(
                    e,
                    "ReduceSum",
                    attrs([("keepdims", Attribute::Int(0))]),
                    &[&mask, &axes],
                );
                op_into(e, "Identity", Default::default(), &[&sum], &[&mask_index]);
            }
            None => {
                let batch = dim(e, &ids, 0);
                let batch = unsqueeze(e, &batch, &[0]);
                let zeros = op(
                    e,
                    "ConstantOfShape",
                    attrs([(
                        "value",
                        Attribute::Tensor(Tensor::new(vec![1], vec![0i32])?),
                    )]),
                    &[&batch],
                );
                op_into(e, "Identity", Default::default(), &[&zeros], &[&mask_index]);
            }
        }
    }
    Ok(())
}
