//! ONNX Runtime's quantized contrib products (`com.microsoft`), expanded into default-domain
//! operators (see `contrib_util`):
//!
//! - `MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?; K, N, bits, block_size)`: `B`
//!   holds `N` rows of `K` weights quantized to `bits` (2, 4 or 8) in blocks of `block_size`
//!   along `K`, low bits first, each block with its scale and zero point (packed like the
//!   weights when `uint8`, default `2^(bits−1)`); `g_idx` assigns each `k` to a block. The
//!   weights are dequantized when the graph is built (they must be initializers) into an
//!   `[K, N]` constant of `A`'s type: `A · W + bias`.
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

/// The layout of `MatMulNBits`' quantized weights.
#[derive(Debug, Clone, Copy)]
struct NBits {
    k: usize,
    n: usize,
    bits: usize,
    block_size: usize,
}

impl NBits {
    fn blocks(&self) -> usize {
        self.k.div_ceil(self.block_size)
    }

    fn blob_bytes(&self) -> usize {
        self.block_size * self.bits / 8
    }

    /// Value `index` of a row of `bits`-bit values packed low bits first into `bytes`.
    fn unpack(&self, bytes: &[u8], index: usize) -> u8 {
        let bit = index * self.bits;
        let mask = ((1u16 << self.bits) - 1) as u8;
        (bytes[bit / 8] >> (bit % 8)) & mask
    }

    /// The dequantized `[K, N]` weights (row-major, `f32`).
    fn dequantize(
        &self,
        weights: &[u8],
        scales: &[f64],
        zeros: &Zeros,
        groups: Option<&[i64]>,
    ) -> Result<Vec<f32>, OpError> {
        let (blocks, blob) = (self.blocks(), self.blob_bytes());
        let zero_row_bytes = (blocks * self.bits).div_ceil(8);
        let default_zero = f64::from(1u32 << (self.bits - 1));
        let mut out = vec![0f32; self.k * self.n];
        for col in 0..self.n {
            let row = &weights[col * blocks * blob..(col + 1) * blocks * blob];
            for kk in 0..self.k {
                let (block, within) = (kk / self.block_size, kk % self.block_size);
                let group = match groups {
                    Some(g) => usize::try_from(g[kk])
                        .ok()
                        .filter(|&g| g < blocks)
                        .ok_or_else(|| {
                            OpError::Invalid(format!("g_idx[{kk}] = {} is not a block", g[kk]))
                        })?,
                    None => block,
                };
                let q = self.unpack(&row[block * blob..(block + 1) * blob], within);
                let zero = match zeros {
                    Zeros::Default => default_zero,
                    Zeros::Packed(z) => f64::from(
                        self.unpack(&z[col * zero_row_bytes..(col + 1) * zero_row_bytes], group),
                    ),
                    Zeros::Float(z) => z[col * blocks + group],
                };
                out[kk * self.n + col] =
                    ((f64::from(q) - zero) * scales[col * blocks + group]) as f32;
            }
        }
        Ok(out)
    }
}

/// `MatMulNBits`' zero points.
enum Zeros {
    Default,
    Packed(Vec<u8>),
    Float(Vec<f64>),
}

fn matmul_nbits(e: &mut Expansion<'_>) -> Result<(), OpError> {
    let layout = NBits {
        k: positive_attr(e, "K")?,
        n: positive_attr(e, "N")?,
        bits: usize::try_from(e.attrs().int_or("bits", 4)?).unwrap_or(0),
        block_size: positive_attr(e, "block_size")?,
    };
    if ![2, 4, 8].contains(&layout.bits) {
        return Err(OpError::Unsupported(format!(
            "MatMulNBits with bits = {}",
            layout.bits
        )));
    }
    if layout.blob_bytes() == 0 || !(layout.block_size * layout.bits).is_multiple_of(8) {
        return Err(OpError::attr(
            "block_size",
            format!("{} does not fill whole bytes", layout.block_size),
        ));
    }
    let dtype = float_dtype(e, 0)?;
    let weights = stored(e, 1, "weight")?;
    let expected = layout.n * layout.blocks() * layout.blob_bytes();
    if weights.dtype() != DType::U8 || weights.numel() != expected {
        return Err(OpError::Shape(format!(
            "MatMulNBits' weights must be {expected} uint8 bytes (N = {}, K = {}, bits = {}, \
             block_size = {}), got {} {:?}",
            layout.n,
            layout.k,
            layout.bits,
            layout.block_size,
            weights.dtype(),
            weights.shape()
        )));
    }
    let scales = stored(e, 2, "scales")?.to_f64_vec();
    if scales.len() != layout.n * layout.blocks() {
        return Err(OpError::Shape(format!(
            "MatMulNBits' scales must have N·blocks = {} entries, got {}",
            layout.n * layout.blocks(),
            scales.len()
        )));
    }
    let zeros = match optional_input(e, 3) {
        None => Zeros::Default,
        Some(_) => {
            let z = stored(e, 3, "zero points")?;
            if z.dtype() == DType::U8 {
                let want = layout.n * (layout.blocks() * layout.bits).div_ceil(8);
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
            Some(g)
        }
    };
    let dense = layout.dequantize(weights.as_slice::<u8>()?, &scales, &zeros, groups.as_deref())?;
    let dense = Tensor::new(vec![layout.k, layout.n], dense)?;
    let dense = if dtype == DType::F32 { dense } else { dense.cast(dtype) };
    let w = e.constant(dense);
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
