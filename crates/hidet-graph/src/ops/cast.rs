//! Cast and CastLike (numpy `astype` semantics, see [`crate::Tensor::cast`]), except that a
//! cast to bfloat16 truncates like the ONNX reference (see [`to_bf16_truncating`]), and casts
//! to the storage-only types follow the ONNX rules of [`crate::narrow`] (float8 with the
//! `saturate` attribute of opset 19+, default 1).

use crate::dtype::DType;
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::compute_util::{float_to_int, input, placeholders, try_grid_def};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;

/// Cast to a fixed dtype (`Some`) or to input 1's dtype (CastLike, `None`).
#[derive(Debug)]
struct Cast {
    to: Option<DType>,
    /// Out-of-range values saturate when the target is a float8 type (else NaN / inf).
    saturate: bool,
}

fn saturate_attr(c: &crate::operator::OpContext<'_>) -> Result<bool, OpError> {
    match c.attrs.int_or("saturate", 1)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::attr("saturate", format!("must be 0 or 1, got {v}"))),
    }
}

/// Registers Cast and CastLike.
pub fn register(r: &mut Registry) {
    r.register("", "Cast", 6..=LATEST_OPSET, |c| {
        let code = c.attrs.req_int("to")?;
        let to = i32::try_from(code)
            .ok()
            .and_then(DType::from_onnx_code)
            .ok_or_else(|| OpError::Unsupported(format!("Cast to ONNX data type {code}")))?;
        // Opset 24's `round_mode` only concerns narrowing to 8-bit floats.
        let round_mode = c.attrs.string_or("round_mode", "up")?;
        if to.is_float8() && round_mode != "up" {
            return Err(OpError::Unsupported(format!(
                "Cast to {to} with round_mode `{round_mode}`"
            )));
        }
        Ok(Box::new(Cast {
            to: Some(to),
            saturate: saturate_attr(c)?,
        }))
    });
    r.register("", "CastLike", 15..=LATEST_OPSET, |c| {
        Ok(Box::new(Cast {
            to: None,
            saturate: saturate_attr(c)?,
        }))
    });
}

impl Operator for Cast {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let to = match self.to {
            Some(d) => d,
            None => infer_arg(inputs, 1)?.ty.dtype,
        };
        Ok(vec![TensorType {
            dtype: to,
            shape: x.ty.shape.clone(),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let to = match self.to {
            Some(d) => d,
            None => arg(inputs, 1)?.dtype(),
        };
        if to == DType::BF16 && x.dtype() != DType::BF16 {
            return Ok(vec![to_bf16_truncating(x)?]);
        }
        if to.is_float8() && x.dtype() != to && !self.saturate {
            return Ok(vec![to_float8_unsaturated(x, to)?]);
        }
        Ok(vec![x.cast(to)])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let to = match self.to {
            Some(d) => d,
            None => input(inputs, 1)?.dtype,
        };
        if to == DType::BF16 && x.dtype != DType::BF16 {
            // Truncation (see `to_bf16_truncating`) has no IR form yet: the host runs it.
            return Ok(None);
        }
        if to.is_storage_only() || x.dtype.is_storage_only() {
            // No kernel IR type: the host runs it.
            return Ok(None);
        }
        let (from, to) = (x.dtype.to_ir(), to.to_ir());
        let vars = placeholders(inputs);
        try_grid_def(vars.clone(), to, x.shape, |i| {
            let v = vars[0].at(i.to_vec());
            if from == to {
                Some(v)
            } else if from.is_float() && to.is_integer() {
                float_to_int(v, from, to)
            } else {
                Some(v.cast(to))
            }
        })
    }
}

/// Cast to bfloat16 as the ONNX reference implementation (and its node tests) define it: the
/// value is first converted to f32 (numpy `astype`), then the low 16 bits of the f32 are
/// dropped (truncation toward zero, not round-to-nearest-even). Infinities keep their sign;
/// a NaN stays a NaN (the quiet bit is set, so a NaN whose payload lives only in the dropped
/// bits does not turn into an infinity, which plain truncation would do).
fn to_bf16_truncating(x: &Tensor) -> Result<Tensor, OpError> {
    let f = x.cast(DType::F32);
    let v: Vec<half::bf16> = f
        .as_slice::<f32>()?
        .iter()
        .map(|&x| {
            let hi = (x.to_bits() >> 16) as u16;
            half::bf16::from_bits(if x.is_nan() { hi | 0x0040 } else { hi })
        })
        .collect();
    Ok(Tensor::new(x.shape().to_vec(), v)?)
}

/// Cast to a float8 type without saturation: via f32 (like the ONNX reference), out-of-range
/// values become NaN (or inf for E5M2), see [`crate::narrow`].
fn to_float8_unsaturated(x: &Tensor, to: DType) -> Result<Tensor, OpError> {
    use crate::narrow::{F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ};
    let f = x.cast(DType::F32);
    let v = f.as_slice::<f32>()?;
    let shape = x.shape().to_vec();
    Ok(match to {
        DType::F8E4M3FN => Tensor::new(shape, v.iter().map(|&a| F8E4M3FN::from_f32(a, false)).collect())?,
        DType::F8E4M3FNUZ => Tensor::new(shape, v.iter().map(|&a| F8E4M3FNUZ::from_f32(a, false)).collect())?,
        DType::F8E5M2 => Tensor::new(shape, v.iter().map(|&a| F8E5M2::from_f32(a, false)).collect())?,
        DType::F8E5M2FNUZ => Tensor::new(shape, v.iter().map(|&a| F8E5M2FNUZ::from_f32(a, false)).collect())?,
        other => return Err(OpError::Invalid(format!("{other} is not a float8 type"))),
    })
}

#[cfg(test)]
mod bf16_tests {
    use super::*;

    /// bf16 bit patterns written out by hand from the f32 bit patterns.
    #[test]
    fn cast_to_bf16_truncates_and_keeps_specials() {
        let bits: [u32; 9] = [
            0x3ef5_eeb0, // 0.48033667: RNE would round up to 0x3ef6
            0xbf80_8000, // -1.00390625: exact tie, RNE-even keeps 0xbf80 as well
            0x3f80_ffff, // just below a bf16 step: truncated, not rounded up
            0x7f80_0000, // +inf
            0xff80_0000, // -inf
            0x7fc0_0000, // canonical NaN
            0x7f80_0001, // NaN with payload only in the dropped bits
            0x0000_0001, // smallest subnormal: truncates to +0
            0x8000_0000, // -0
        ];
        let want: [u16; 9] = [
            0x3ef5, 0xbf80, 0x3f80, 0x7f80, 0xff80, 0x7fc0, 0x7fc0, 0x0000, 0x8000,
        ];
        let x = Tensor::new(
            vec![3, 3],
            bits.iter().map(|&b| f32::from_bits(b)).collect(),
        )
        .unwrap();
        for op in [
            Cast {
                to: Some(DType::BF16),
                saturate: true,
            },
            Cast {
                to: None,
                saturate: true,
            },
        ] {
            let like = Tensor::new(vec![1], vec![half::bf16::from_f32(2.5)]).unwrap();
            let y = op.eval(&[Some(&x), Some(&like)]).unwrap().remove(0);
            assert_eq!(y.shape(), &[3, 3]);
            let got: Vec<u16> = y
                .as_slice::<half::bf16>()
                .unwrap()
                .iter()
                .map(|b| b.to_bits())
                .collect();
            assert_eq!(got, want);
        }
        // f64 goes through f32 first (numpy astype), then truncates: 1 + 2^-7 + 2^-30 is
        // 1.0078125 in f32 (0x3f810000 after rounding) and stays there.
        let d = Tensor::new(vec![1], vec![1.0f64 + 2f64.powi(-7) + 2f64.powi(-30)]).unwrap();
        let y = Cast {
            to: Some(DType::BF16),
            saturate: true,
        }
        .eval(&[Some(&d)])
        .unwrap()
        .remove(0);
        assert_eq!(y.as_slice::<half::bf16>().unwrap()[0].to_bits(), 0x3f81);
        // bf16 -> bf16 is the identity.
        let b = Tensor::new(vec![1], vec![half::bf16::from_bits(0x3ef6)]).unwrap();
        let y = Cast {
            to: Some(DType::BF16),
            saturate: true,
        }
        .eval(&[Some(&b)])
        .unwrap()
        .remove(0);
        assert_eq!(y, b);
    }
}
