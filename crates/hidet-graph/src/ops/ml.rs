//! Operators of the `ai.onnx.ml` domain (opsets 1–5) on numeric tensors: Binarizer and
//! ArrayFeatureExtractor.
//!
//! - Binarizer: `x > threshold ? 1 : 0` in `x`'s type (`threshold` default 0).
//! - ArrayFeatureExtractor: selects entries of the last axis of `X [..., F]` by the int64
//!   `indices` (any shape, read flattened, each in `[0, F)`): output `[..., K]` with `K` the
//!   number of indices; a 1-D `X` gives `[1, K]` (as ONNX Runtime and the ONNX reference do).

use crate::dispatch_numeric;
use crate::dtype::DType;
use crate::kernels::movement::take;
use crate::operator::{arg, infer_arg, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, numeric};
use crate::registry::Registry;
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};

const DOMAIN: &str = "ai.onnx.ml";

#[derive(Debug)]
struct Binarizer {
    threshold: f64,
}

#[derive(Debug)]
struct ArrayFeatureExtractor;

/// Registers Binarizer and ArrayFeatureExtractor.
pub fn register(r: &mut Registry) {
    r.register(DOMAIN, "Binarizer", 1..=5, |c| {
        Ok(Box::new(Binarizer {
            threshold: c.attrs.float_or("threshold", 0.0)? as f64,
        }))
    });
    r.register(DOMAIN, "ArrayFeatureExtractor", 1..=5, |_| {
        Ok(Box::new(ArrayFeatureExtractor))
    });
}

impl Operator for Binarizer {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, numeric)?;
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let dt = x.dtype();
        let t = self.threshold;
        let out = dispatch_numeric!(dt, T => Tensor::new(
            x.shape().to_vec(),
            x.as_slice::<T>()?
                .iter()
                .map(|v| T::from_f64(if v.to_f64() > t { 1.0 } else { 0.0 }))
                .collect::<Vec<T>>(),
        )?, else return Err(OpError::DType { index: 0, dtype: dt }));
        Ok(vec![out])
    }
}

impl Operator for ArrayFeatureExtractor {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let idx = infer_arg(inputs, 1)?;
        check_dtype(1, idx.ty.dtype, |d| d == DType::I64)?;
        if x.ty.dtype.is_storage_only() {
            return Err(OpError::DType {
                index: 0,
                dtype: x.ty.dtype,
            });
        }
        let k = match idx.ty.fixed_shape() {
            Some(s) => Dim::Fixed(s.iter().product()),
            None => Dim::Unknown,
        };
        let shape = x.ty.shape.as_ref().map(|d| match d.len() {
            0 | 1 => vec![Dim::Fixed(1), k.clone()],
            _ => {
                let mut s = d[..d.len() - 1].to_vec();
                s.push(k.clone());
                s
            }
        });
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let idx = arg(inputs, 1)?;
        check_dtype(1, idx.dtype(), |d| d == DType::I64)?;
        if x.rank() == 0 {
            return Err(OpError::Shape("X must have rank >= 1".into()));
        }
        let f = x.shape()[x.rank() - 1];
        let cols: Vec<usize> = idx
            .to_i64_vec()
            .into_iter()
            .map(|i| {
                usize::try_from(i).ok().filter(|&i| i < f).ok_or_else(|| {
                    OpError::Invalid(format!("index {i} is out of range for {f} features"))
                })
            })
            .collect::<Result<_, _>>()?;
        let rows = x.numel() / f.max(1);
        let src: Vec<usize> = (0..rows)
            .flat_map(|r| cols.iter().map(move |&c| r * f + c))
            .collect();
        let mut shape = if x.rank() == 1 {
            vec![1]
        } else {
            x.shape()[..x.rank() - 1].to_vec()
        };
        shape.push(cols.len());
        Ok(vec![take(x, shape, &src)?])
    }
}

#[cfg(test)]
mod tests {
    use super::DOMAIN;
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    #[test]
    fn binarizer_and_feature_extractor() {
        let op = build_op(
            DOMAIN,
            "Binarizer",
            1,
            &[("threshold", Attribute::Float(0.5))],
            1,
            1,
        )
        .unwrap();
        let x = Tensor::new(vec![2, 2], vec![0.2f32, 0.5, 0.7, -1.0]).unwrap();
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[0.0, 0.0, 1.0, 0.0]);
        let op = build_op(DOMAIN, "ArrayFeatureExtractor", 1, &[], 2, 1).unwrap();
        let x = Tensor::new(vec![2, 3], vec![1i32, 2, 3, 4, 5, 6]).unwrap();
        let i = Tensor::new(vec![1, 2], vec![2i64, 0]).unwrap();
        let y = op.eval(&[Some(&x), Some(&i)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.as_slice::<i32>().unwrap(), &[3, 1, 6, 4]);
        let v = Tensor::new(vec![3], vec![1f32, 2., 3.]).unwrap();
        let y = op.eval(&[Some(&v), Some(&i)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[1, 2]);
        let bad = Tensor::new(vec![1], vec![3i64]).unwrap();
        assert!(op.eval(&[Some(&x), Some(&bad)]).is_err());
    }
}
