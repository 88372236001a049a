//! Cast and CastLike (numpy `astype` semantics, see [`crate::Tensor::cast`]), except that a
//! cast to bfloat16 truncates like the ONNX reference (see [`to_bf16_truncating`]).

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
}

/// Registers Cast and CastLike.
pub fn register(r: &mut Registry) {
    r.register("", "Cast", 6..=LATEST_OPSET, |c| {
        let code = c.attrs.req_int("to")?;
        let to = i32::try_from(code)
            .ok()
            .and_then(DType::from_onnx_code)
            .ok_or_else(|| OpError::Unsupported(format!("Cast to ONNX data type {code}")))?;
        Ok(Box::new(Cast { to: Some(to) }))
    });
    r.register("", "CastLike", 15..=LATEST_OPSET, |_| {
        Ok(Box::new(Cast { to: None }))
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
            },
            Cast { to: None },
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
        }
        .eval(&[Some(&d)])
        .unwrap()
        .remove(0);
        assert_eq!(y.as_slice::<half::bf16>().unwrap()[0].to_bits(), 0x3f81);
        // bf16 -> bf16 is the identity.
        let b = Tensor::new(vec![1], vec![half::bf16::from_bits(0x3ef6)]).unwrap();
        let y = Cast {
            to: Some(DType::BF16),
        }
        .eval(&[Some(&b)])
        .unwrap()
        .remove(0);
        assert_eq!(y, b);
    }
}
