//! ONNX Runtime's quantized contrib products (`com.microsoft`), expanded into default-domain
//! operators (see `contrib_util`):
//!
//! - `MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?; K, N, bits, block_size)`: `B`
//!   holds `N` rows of `K` weights quantized to `bits` (2, 4 or 8) in blocks of `block_size`
//!   along `K`, low bits first, each block with its scale and zero point (packed like the
//!   weights when `uint8`, default `2^(bits−1)`); `g_idx` assigns each `k` to a block. The
//!   weights must be initializers. For `float32` `A` they stay stored as they are, read
//!   through `hidet::DequantizeBlocks` (`A · DequantizeBlocks(B, scales, zero points) + bias`,
//!   the zero points unpacked to one float per block); with a `g_idx` that is not the identity,
//!   or another `A` type, they are dequantized when the graph is built into an `[K, N]`
//!   constant of `A`'s type.
//! - `MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?)` →
//!   `float(MatMulInteger(A, B, a_zero_point, b_zero_point)) · a_scale · b_scale + bias`;
//! - `DynamicQuantizeMatMul(A, B, b_scale, b_zero_point?, bias?)` → the same with `A`
//!   quantized by `DynamicQuantizeLinear`.

use crate::attribute::Attribute;
use crate::dtype::DType;
use crate::expansion::Expansion;
use crate::operator::OpError;
use crate::registry::Registry;
use crate::tensor::Tensor;

use super::contrib_activation::add_optional;
use super::dequantize_blocks::{BlockLayout, OP_TYPE as DEQUANTIZE_BLOCKS};
use super::HIDET_DOMAIN;
use super::contrib_util::{
    attrs, first_output, float_dtype, op, op0, op_into, optional_input, positive_attr, MS_DOMAIN,
};

/// Registers the expansions (every opset of the contrib domain).
pub fn register(r: &mut Registry) {
    r.register_expansion(MS_DOMAIN, "MatMulNBits", 1..=i64::MAX, matmul_nbits);
    r.register_expansion(MS_DOMAIN, "MatMulIntegerToFloat", 1..=i64::MAX, integer_to_float);
    r.register_expansion(MS_DOMAIN, "DynamicQuantizeMatMul", 1..=i64::MAX, dynamic_quantize);
}

/// The import-time value of input `i`, or `Unsupported` naming `what`.
fn stored<'a>(e: &Expansion<'a>, i: usize, what: &str) -> Result<&'a Tensor, OpError> {
    e.req_input(i)?.value.ok_or_else(|| {
        OpError::Unsupported(format!("{} whose {what} is not an initializer", e.op_type()))
    })
}

/// `MatMulNBits`' zero points.
enum Zeros {
    Default,
    Packed(Vec<u8>),
    Float(Vec<f64>),
}

impl Zeros {
    /// The zero point of each of the `n · blocks` blocks of `layout`, row by row.
    fn per_block(&self, layout: &BlockLayout, n: usize) -> Vec<f32> {
        let blocks = layout.blocks();
        let row_bytes = (blocks * layout.bits).div_ceil(8);
        match self {
            Zeros::Default => vec![(1u32 << (layout.bits - 1)) as f32; n * blocks],
            Zeros::Packed(z) => (0..n * blocks)
                .map(|i| {
                    let (row, block) = (i / blocks, i % blocks);
                    let bytes = &z[row * row_bytes..(row + 1) * row_bytes];
                    f32::from(layout.unpack(bytes, block))
                })
                .collect(),
            Zeros::Float(z) => z.iter().map(|&v| v as f32).collect(),
        }
    }
}

/// The dequantized `[K, N]` weights (row-major, `f32`) when `groups` assigns each `k` to a block
/// of its own choosing (`g_idx`): `(q − zero) · scale` of the block.
fn dequantize_grouped(
    layout: &BlockLayout,
    n: usize,
    weights: &[u8],
    scales: &[f64],
    zeros: &[f32],
    groups: &[i64],
) -> Result<Vec<f32>, OpError> {
    let (blocks, blob) = (layout.blocks(), layout.blob_bytes());
    let mut out = vec![0f32; layout.k * n];
    for col in 0..n {
        let row = &weights[col * blocks * blob..(col + 1) * blocks * blob];
        for kk in 0..layout.k {
            let (block, within) = (kk / layout.block_size, kk % layout.block_size);
            let group = usize::try_from(groups[kk])
                .ok()
                .filter(|&g| g < blocks)
                .ok_or_else(|| {
                    OpError::Invalid(format!("g_idx[{kk}] = {} is not a block", groups[kk]))
                })?;
            let q = layout.unpack(&row[block * blob..(block + 1) * blob], within);
            let b = col * blocks + group;
            out[kk * n + col] = ((f64::from(q) - f64::from(zeros[b])) * scales[b]) as f32;
        }
    }
    Ok(out)
}

fn matmul_nbits(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let bits = usize::try_from(e.attrs().int_or("bits", 4)?).unwrap_or(0);
    if ![2, 4, 8].contains(&bits) {
        return Err(OpError::Unsupported(format!("MatMulNBits with bits = {bits}")));
    }
    let layout = BlockLayout::new(positive_attr(e, "K")?, bits, positive_attr(e, "block_size")?)?;
    let n = positive_attr(e, "N")?;
    let dtype = float_dtype(e, 0)?;
    let weights = stored(e, 1, "weight")?;
    // Sizes come from the file's attributes: checked, so that no product wraps into a match.
    let expected = n
        .checked_mul(layout.blocks())
        .and_then(|v| v.checked_mul(layout.blob_bytes()))
        .ok_or_else(|| OpError::attr("N", format!("N = {n} and K = {} overflow", layout.k)))?;
    if weights.dtype() != DType::U8 || weights.numel() != expected {
        return Err(OpError::Shape(format!(
            "MatMulNBits' weights must be {expected} uint8 bytes (N = {n}, K = {}, bits = {}, \
             block_size = {}), got {} {:?}",
            layout.k,
            layout.bits,
            layout.block_size,
            weights.dtype(),
            weights.shape()
        )));
    }
    let scales = stored(e, 2, "scales")?.to_f64_vec();
    if scales.len() != n * layout.blocks() {
        return Err(OpError::Shape(format!(
            "MatMulNBits' scales must have N·blocks = {} entries, got {}",
            n * layout.blocks(),
            scales.len()
        )));
    }
    let zeros = match optional_input(e, 3) {
        None => Zeros::Default,
        Some(_) => {
            let z = stored(e, 3, "zero points")?;
            if z.dtype() == DType::U8 {
                let want = n * (layout.blocks() * layout.bits).div_ceil(8);
                if z.numel() != want {
                    return Err(OpError::Shape(format!(
                        "MatMulNBits' packed zero points must have {want} bytes, got {}",
                        z.numel()
                    )));
                }
                Zeros::Packed(z.as_slice::<u8>()?.to_vec())
            } else if z.numel() == scales.len() {
                Zeros::Float(z.to_f64_vec())
            } else {
                return Err(OpError::Shape(format!(
                    "MatMulNBits' zero points must match the scales ({} entries), got {}",
                    scales.len(),
                    z.numel()
                )));
            }
        }
    };
    let zeros = zeros.per_block(&layout, n);
    let groups = match optional_input(e, 4) {
        None => None,
        Some(_) => {
            let g = stored(e, 4, "g_idx")?.to_i64_vec();
            if g.len() != layout.k {
                return Err(OpError::Shape(format!(
                    "MatMulNBits' g_idx must have K = {} entries, got {}",
                    layout.k,
                    g.len()
                )));
            }
            // The identity assignment (each k in its own position's block) is no assignment.
            let identity = g
                .iter()
                .enumerate()
                .all(|(kk, &b)| usize::try_from(b) == Ok(kk / layout.block_size));
            (!identity).then_some(g)
        }
    };
    let w = match groups {
        // The blocks as stored, read by the kernels (or decoded by a backend's pass).
        None if dtype == DType::F32 => {
            let shape = vec![n, layout.blocks(), layout.blob_bytes()];
            let q = e.constant(weights.reshape(shape)?);
            let s = scales.iter().map(|&v| v as f32).collect();
            let s = e.constant(Tensor::new(vec![n, layout.blocks()], s)?);
            let z = e.constant(Tensor::new(vec![n, layout.blocks()], zeros)?);
            let out = e.fresh(DEQUANTIZE_BLOCKS);
            e.emit_in(HIDET_DOMAIN, DEQUANTIZE_BLOCKS, 1, layout.attrs(), &[&q, &s, &z], &[&out]);
            out
        }
        groups => {
            let dense = match groups {
                Some(g) => {
                    dequantize_grouped(&layout, n, weights.as_slice::<u8>()?, &scales, &zeros, &g)?
                }
                None => {
                    let s: Vec<f32> = scales.iter().map(|&v| v as f32).collect();
                    layout.decode(weights.as_slice::<u8>()?, &s, &zeros, n)
                }
            };
            let dense = Tensor::new(vec![layout.k, n], dense)?;
            e.constant(if dtype == DType::F32 { dense } else { dense.cast(dtype) })
        }
    };
    let a = e.input_name(0)?.to_string();
    let output = first_output(e)?;
    match optional_input(e, 5) {
        Some(bias) => {
            let product = op0(e, "MatMul", &[&a, &w]);
            op_into(e, "Add", Default::default(), &[&product, &bias], &[&output]);
        }
        None => op_into(e, "MatMul", Default::default(), &[&a, &w], &[&output]),
    }
    Ok(())
}

/// `float(MatMulInteger(a, b, a_zero, b_zero)) · a_scale · b_scale + bias` into the output,
/// in the float type of `b_scale` (input `b_scale_input`).
fn integer_product_into(
    e: &mut Expansion<'_>,
    [a, b, a_scale, b_scale, a_zero, b_zero]: [&str; 6],
    b_scale_input: usize,
    bias_input: usize,
) -> Result<(), OpError> {
    let dtype = float_dtype(e, b_scale_input)?;
    let product = op0(e, "MatMulInteger", &[a, b, a_zero, b_zero]);
    let to = attrs([("to", Attribute::Int(dtype.onnx_code().into()))]);
    let product = op(e, "Cast", to, &[&product]);
    let scale = op0(e, "Mul", &[a_scale, b_scale]);
    let scaled = op0(e, "Mul", &[&product, &scale]);
    let output = first_output(e)?;
    let result = add_optional(e, &scaled, bias_input);
    op_into(e, "Identity", Default::default(), &[&result], &[&output]);
    Ok(())
}

fn integer_to_float(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let names: Vec<String> = (0..6)
        .map(|i| e.input_names().get(i).cloned().unwrap_or_default())
        .collect();
    for i in 0..4 {
        e.input_name(i)?;
    }
    integer_product_into(
        e,
        [&names[0], &names[1], &names[2], &names[3], &names[4], &names[5]],
        3,
        6,
    )
}

fn dynamic_quantize(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let a = e.input_name(0)?.to_string();
    let b = e.input_name(1)?.to_string();
    let b_scale = e.input_name(2)?.to_string();
    let b_zero = optional_input(e, 3).unwrap_or_default();
    let outs = [e.fresh("quantized"), e.fresh("scale"), e.fresh("zero_point")];
    op_into(
        e,
        "DynamicQuantizeLinear",
        Default::default(),
        &[&a],
        &[&outs[0], &outs[1], &outs[2]],
    );
    integer_product_into(
        e,
        [&outs[0], &b, &outs[1], &b_scale, &outs[2], &b_zero],
        2,
        4,
    )
}
