//! Signal window generators (opset 17): HannWindow, HammingWindow, BlackmanWindow.
//!
//! Input: the window length `size` (integer scalar). Output: `size` values of
//! `output_datatype` (default float). With `N = size` when `periodic` (default) and
//! `N = size - 1` otherwise, and `k = 2πn / N`:
//! - Hann: `sin²(πn / N)`,
//! - Hamming: `α - (1 - α)·cos(k)` with `α = 25/46`,
//! - Blackman: `0.42 - 0.5·cos(k) + 0.08·cos(2k)`.

use std::f64::consts::PI;

use crate::dtype::DType;
use crate::kernels::movement::scalar_i64;
use crate::kernels::values::float_tensor;
use crate::operator::{arg, infer_arg, InferInput, OpContext, OpError, Operator};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hann,
    Hamming,
    Blackman,
}

#[derive(Debug)]
struct Window {
    kind: Kind,
    periodic: bool,
    dtype: DType,
}

/// The `output_datatype` attribute (default float), as an arithmetic dtype.
pub fn output_datatype(c: &OpContext<'_>, default: i64) -> Result<DType, OpError> {
    let code = c.attrs.int_or("output_datatype", default)?;
    match i32::try_from(code).ok().and_then(DType::from_onnx_code) {
        Some(d) if d.is_float() || d.is_int() => Ok(d),
        _ => Err(OpError::attr(
            "output_datatype",
            format!("{code} is not a numeric ONNX data type"),
        )),
    }
}

/// Registers the window generators.
pub fn register(r: &mut Registry) {
    for (name, kind) in [
        ("HannWindow", Kind::Hann),
        ("HammingWindow", Kind::Hamming),
        ("BlackmanWindow", Kind::Blackman),
    ] {
        r.register("", name, 17..=LATEST_OPSET, move |c| {
            let periodic = match c.attrs.int_or("periodic", 1)? {
                0 => false,
                1 => true,
                v => return Err(OpError::attr("periodic", format!("must be 0 or 1, got {v}"))),
            };
            Ok(Box::new(Window {
                kind,
                periodic,
                dtype: output_datatype(c, 1)?,
            }))
        });
    }
}

fn length(t: &Tensor) -> Result<usize, OpError> {
    let n = scalar_i64(t, "size", false)?;
    usize::try_from(n).map_err(|_| OpError::Invalid(format!("negative window size {n}")))
}

impl Window {
    fn value(&self, n: usize, size: usize) -> f64 {
        let denom = if self.periodic { size } else { size - 1 } as f64;
        let n = n as f64;
        match self.kind {
            Kind::Hann => (PI * n / denom).sin().powi(2),
            Kind::Hamming => {
                let alpha = 25.0 / 46.0;
                alpha - (1.0 - alpha) * (2.0 * PI * n / denom).cos()
            }
            Kind::Blackman => {
                let k = 2.0 * PI * n / denom;
                0.42 - 0.5 * k.cos() + 0.08 * (2.0 * k).cos()
            }
        }
    }
}

impl Operator for Window {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let s = infer_arg(inputs, 0)?;
        if !s.ty.dtype.is_int() {
            return Err(OpError::DType {
                index: 0,
                dtype: s.ty.dtype,
            });
        }
        let dim = match s.value {
            Some(v) => Dim::Fixed(length(v)?),
            None => Dim::Unknown,
        };
        Ok(vec![TensorType {
            dtype: self.dtype,
            shape: Some(vec![dim]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let size = length(arg(inputs, 0)?)?;
        // A symmetric window of one point divides by zero: it is the single value 1.
        let v: Vec<f64> = if size == 1 && !self.periodic {
            vec![1.0]
        } else {
            (0..size).map(|n| self.value(n, size)).collect()
        };
        let out = if self.dtype.is_float() {
            float_tensor(self.dtype, vec![size], &v, 0)?
        } else {
            Tensor::new(vec![size], v)?.cast(self.dtype)
        };
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    #[test]
    fn known_windows() {
        let size = Tensor::scalar(5i64);
        let eval = |name: &str, periodic: i64| -> Vec<f64> {
            build_op("", name, 17, &[("periodic", Attribute::Int(periodic))], 1, 1)
                .unwrap()
                .eval(&[Some(&size)])
                .unwrap()[0]
                .to_f64_vec()
        };
        let close = |a: &[f64], b: &[f64]| {
            a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6) && a.len() == b.len()
        };
        // Symmetric Hann of 5 points: 0, 0.5, 1, 0.5, 0.
        assert!(close(&eval("HannWindow", 0), &[0.0, 0.5, 1.0, 0.5, 0.0]));
        // Periodic Hamming of 5 points: 0.54 - 0.46 cos(2πn/5) with α = 25/46.
        let a = 25.0 / 46.0;
        let want: Vec<f64> = (0..5)
            .map(|n| a - (1.0 - a) * (2.0 * std::f64::consts::PI * n as f64 / 5.0).cos())
            .collect();
        assert!(close(&eval("HammingWindow", 1), &want));
        // Symmetric Blackman ends at (almost) 0 and peaks at 1.
        let b = eval("BlackmanWindow", 0);
        assert!(b[0].abs() < 1e-6 && (b[2] - 1.0).abs() < 1e-6);
        let op = build_op("", "HannWindow", 17, &[], 1, 1).unwrap();
        assert!(op.eval(&[Some(&Tensor::scalar(-1i64))]).is_err());
        assert!(build_op("", "HannWindow", 17, &[("output_datatype", Attribute::Int(8))], 1, 1)
            .is_err());
    }
}
