//! Operators that create tensors from sizes and parameters rather than move input data:
//! Size, Range, ConstantOfShape, EyeLike and OneHot.

use crate::dtype::DType;
use crate::kernels::movement::{alloc, numel, offsets, scalar_i64, take};
use crate::operator::{arg, infer_arg, InferInput, OpError, Operator};
use crate::ops::common::int_list;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_int};

/// Number of elements of input 0, as an int64 scalar.
#[derive(Debug)]
struct Size;

/// `start, start + delta, ...` up to (excluding) `limit`.
#[derive(Debug)]
struct Range;

/// A tensor of the shape given by input 0 filled with `value` (one element).
#[derive(Debug)]
struct ConstantOfShape {
    value: Tensor,
}

/// A 2-D tensor of input 0's shape with ones on diagonal `k`.
#[derive(Debug)]
struct EyeLike {
    dtype: Option<DType>,
    k: i64,
}

/// One-hot encoding of input 0 (indices) with `depth` (input 1) classes and
/// `[off, on]` values (input 2), the class axis inserted at `axis`.
#[derive(Debug)]
struct OneHot {
    axis: i64,
    negative_indices: bool,
}

/// Registers Size, Range, ConstantOfShape, EyeLike and OneHot.
pub fn register(r: &mut Registry) {
    r.register("", "Size", 1..=LATEST_OPSET, |_| Ok(Box::new(Size)));
    r.register("", "Range", 11..=LATEST_OPSET, |_| Ok(Box::new(Range)));
    r.register("", "ConstantOfShape", 9..=LATEST_OPSET, |c| {
        let value = match c.attrs.tensor("value")? {
            None => Tensor::scalar(0.0f32),
            Some(t) if t.numel() == 1 => t.reshape(vec![1])?,
            Some(t) => {
                return Err(OpError::attr(
                    "value",
                    format!("must hold one element, has shape {:?}", t.shape()),
                ))
            }
        };
        Ok(Box::new(ConstantOfShape { value }))
    });
    r.register("", "EyeLike", 9..=LATEST_OPSET, |c| {
        let dtype = match c.attrs.int("dtype")? {
            None => None,
            Some(&code) => Some(DType::from_onnx_code(code as i32).ok_or_else(|| {
                OpError::Unsupported(format!("EyeLike with output data type {code}"))
            })?),
        };
        Ok(Box::new(EyeLike {
            dtype,
            k: c.attrs.int_or("k", 0)?,
        }))
    });
    r.register("", "OneHot", 9..=10, |c| {
        Ok(Box::new(OneHot {
            axis: c.attrs.int_or("axis", -1)?,
            negative_indices: false,
        }))
    });
    r.register("", "OneHot", 11..=LATEST_OPSET, |c| {
        Ok(Box::new(OneHot {
            axis: c.attrs.int_or("axis", -1)?,
            negative_indices: true,
        }))
    });
}

impl Operator for Size {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        infer_arg(inputs, 0)?;
        Ok(vec![TensorType::fixed(DType::I64, &[])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        Ok(vec![Tensor::scalar(x.numel() as i64)])
    }
}

/// Range's element count and values for floats (computed in f64) and integers (i128).
fn range_values(start: &Tensor, limit: &Tensor, delta: &Tensor) -> Result<Tensor, OpError> {
    let dt = start.dtype();
    for (i, t) in [start, limit, delta].into_iter().enumerate() {
        if t.dtype() != dt {
            return Err(OpError::DType {
                index: i,
                dtype: t.dtype(),
            });
        }
        if t.numel() != 1 {
            return Err(OpError::Shape(format!(
                "Range: input #{i} must be a scalar, has shape {:?}",
                t.shape()
            )));
        }
    }
    let bad = || OpError::DType {
        index: 0,
        dtype: dt,
    };
    dispatch_float!(dt, T => {
        let (s, l, d) = (start.to_f64_vec()[0], limit.to_f64_vec()[0], delta.to_f64_vec()[0]);
        if d == 0.0 || !d.is_finite() || !s.is_finite() || !l.is_finite() {
            return Err(OpError::Invalid(format!("Range: invalid start {s}, limit {l}, delta {d}")));
        }
        let n = ((l - s) / d).ceil().max(0.0);
        if n > usize::MAX as f64 {
            return Err(OpError::Invalid(format!("Range: {n} elements is too many")));
        }
        let n = n as usize;
        let mut v: Vec<T> = alloc(n)?;
        v.extend((0..n).map(|i| T::from_f64(s + i as f64 * d)));
        Ok(Tensor::new(vec![n], v)?)
    }, else dispatch_int!(dt, T => {
        let f = |t: &Tensor| t.to_i64_vec()[0] as i128;
        let (s, l, d) = (f(start), f(limit), f(delta));
        if d == 0 {
            return Err(OpError::Invalid("Range: delta must not be 0".into()));
        }
        let span = l - s;
        // ceil(span / d) with truncating division.
        let q = span / d;
        let n = if span % d != 0 && (span < 0) == (d < 0) { q + 1 } else { q }.max(0);
        let n = usize::try_from(n).map_err(|_| OpError::Invalid(format!("Range: {n} elements is too many")))?;
        let mut v: Vec<T> = alloc(n)?;
        v.extend((0..n).map(|i| T::from_i128(s + i as i128 * d)));
        Ok(Tensor::new(vec![n], v)?)
    }, else Err(bad())))
}

impl Operator for Range {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let s = infer_arg(inputs, 0)?;
        let (l, d) = (infer_arg(inputs, 1)?, infer_arg(inputs, 2)?);
        if s.ty.dtype == DType::Bool || !(s.ty.dtype.is_float() || s.ty.dtype.is_int()) {
            return Err(OpError::DType {
                index: 0,
                dtype: s.ty.dtype,
            });
        }
        let shape = match (s.value, l.value, d.value) {
            (Some(s), Some(l), Some(d)) => vec![Dim::Fixed(range_values(s, l, d)?.numel())],
            _ => vec![Dim::Unknown],
        };
        Ok(vec![TensorType {
            dtype: s.ty.dtype,
            shape: Some(shape),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let t = range_values(arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?)?;
        Ok(vec![t])
    }
}

/// A shape from a 1-D int64 tensor of non-negative sizes.
fn shape_of(t: &Tensor, what: &str) -> Result<Vec<usize>, OpError> {
    int_list(t, what)?
        .into_iter()
        .map(|v| {
            usize::try_from(v).map_err(|_| OpError::Invalid(format!("{what}: negative size {v}")))
        })
        .collect()
}

impl Operator for ConstantOfShape {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let s = infer_arg(inputs, 0)?;
        let shape = match s.value {
            Some(v) => Some(
                shape_of(v, "ConstantOfShape shape")?
                    .into_iter()
                    .map(Dim::Fixed)
                    .collect(),
            ),
            None => {
                s.ty.fixed_shape()
                    .and_then(|d| d.first().copied())
                    .map(|n| vec![Dim::Unknown; n])
            }
        };
        Ok(vec![TensorType {
            dtype: self.value.dtype(),
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let shape = shape_of(arg(inputs, 0)?, "ConstantOfShape shape")?;
        let n = numel(&shape)?;
        let mut src = alloc(n)?;
        src.resize(n, 0usize);
        Ok(vec![take(&self.value, shape, &src)?])
    }
}

impl Operator for EyeLike {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        if x.ty.rank().is_some_and(|r| r != 2) {
            return Err(OpError::Shape(format!(
                "EyeLike: input {} is not 2-D",
                x.ty
            )));
        }
        Ok(vec![TensorType {
            dtype: self.dtype.unwrap_or(x.ty.dtype),
            shape: Some(x.ty.shape.clone().unwrap_or(vec![Dim::Unknown; 2])),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        if x.rank() != 2 {
            return Err(OpError::Shape(format!(
                "EyeLike: input shape {:?} is not 2-D",
                x.shape()
            )));
        }
        let dtype = self.dtype.unwrap_or(x.dtype());
        let zero_one = Tensor::new(vec![2], vec![0.0f64, 1.0])?.cast(dtype);
        let k = self.k as i128;
        let src = offsets(x.shape(), |o| {
            Ok((o[1] as i128 - o[0] as i128 == k) as usize)
        })?;
        Ok(vec![take(&zero_one, x.shape().to_vec(), &src)?])
    }
}

impl OneHot {
    fn axis(&self, rank: usize) -> Result<usize, OpError> {
        let r = rank as i64 + 1;
        let a = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        };
        if !(0..r).contains(&a) {
            return Err(OpError::Invalid(format!(
                "OneHot: axis {} is out of range for output rank {r}",
                self.axis
            )));
        }
        Ok(a as usize)
    }
}

impl Operator for OneHot {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (i, d, v) = (
            infer_arg(inputs, 0)?,
            infer_arg(inputs, 1)?,
            infer_arg(inputs, 2)?,
        );
        let shape = match &i.ty.shape {
            Some(s) => {
                let a = self.axis(s.len())?;
                let depth = match d.value {
                    Some(t) => Dim::Fixed(depth(t)?),
                    None => Dim::Unknown,
                };
                let mut out = s.clone();
                out.insert(a, depth);
                Some(out)
            }
            None => None,
        };
        Ok(vec![TensorType {
            dtype: v.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (ind, d, values) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        if ind.dtype() == DType::Bool {
            return Err(OpError::DType {
                index: 0,
                dtype: DType::Bool,
            });
        }
        if values.numel() != 2 {
            return Err(OpError::Shape(format!(
                "OneHot: values must hold [off, on], has shape {:?}",
                values.shape()
            )));
        }
        let depth = depth(d)?;
        let a = self.axis(ind.rank())?;
        let idx = ind.to_i64_vec();
        let mut shape = ind.shape().to_vec();
        shape.insert(a, depth);
        let ist = crate::kernels::movement::strides(ind.shape());
        let neg = self.negative_indices;
        let src = offsets(&shape, |o| {
            let pos: usize = o
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != a)
                .zip(&ist)
                .map(|((_, i), s)| i * s)
                .sum();
            let mut v = idx[pos] as i128;
            if v < 0 && neg {
                v += depth as i128;
            }
            Ok((v == o[a] as i128) as usize)
        })?;
        Ok(vec![take(values, shape, &src)?])
    }
}

/// OneHot's depth: a positive number in a one-element tensor (floats truncate).
fn depth(t: &Tensor) -> Result<usize, OpError> {
    let d = scalar_i64(t, "OneHot depth", true)?;
    usize::try_from(d)
        .ok()
        .filter(|&d| d > 0)
        .ok_or_else(|| OpError::Invalid(format!("OneHot: depth {d} must be positive")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    #[test]
    fn range_float_and_int_counts() {
        let y = range_values(
            &Tensor::scalar(1.5f32),
            &Tensor::scalar(-2.0f32),
            &Tensor::scalar(-0.75f32),
        )
        .unwrap();
        // (−2 − 1.5) / −0.75 = 4.67 → 5 elements.
        assert_eq!(y.as_slice::<f32>().unwrap(), &[1.5, 0.75, 0.0, -0.75, -1.5]);
        let y = range_values(
            &Tensor::scalar(10i32),
            &Tensor::scalar(-3i32),
            &Tensor::scalar(-4i32),
        )
        .unwrap();
        assert_eq!(y.as_slice::<i32>().unwrap(), &[10, 6, 2, -2]);
        let y = range_values(
            &Tensor::scalar(3i64),
            &Tensor::scalar(1i64),
            &Tensor::scalar(2i64),
        )
        .unwrap();
        assert_eq!(y.shape(), &[0]);
        assert!(range_values(
            &Tensor::scalar(3i64),
            &Tensor::scalar(1i64),
            &Tensor::scalar(0i64)
        )
        .is_err());
        assert!(range_values(
            &Tensor::scalar(3i64),
            &Tensor::scalar(1i32),
            &Tensor::scalar(1i64)
        )
        .is_err());
        assert!(range_values(
            &Tensor::scalar(0i64),
            &Tensor::scalar(i64::MAX),
            &Tensor::scalar(1i64)
        )
        .is_err());
    }

    #[test]
    fn constant_of_shape_eye_like_size() {
        let op = ConstantOfShape {
            value: Tensor::new(vec![1], vec![7i32]).unwrap(),
        };
        let s = Tensor::new(vec![2], vec![2i64, 3]).unwrap();
        let y = op.eval(&[Some(&s)]).unwrap().remove(0);
        assert_eq!(
            (y.shape(), y.as_slice::<i32>().unwrap()),
            (&[2usize, 3][..], &[7; 6][..])
        );
        let neg = Tensor::new(vec![1], vec![-1i64]).unwrap();
        assert!(op.eval(&[Some(&neg)]).is_err());

        let x = Rng::new(61).tensor(&[3, 5]);
        let y = EyeLike {
            dtype: Some(DType::I32),
            k: -1,
        }
        .eval(&[Some(&x)])
        .unwrap()
        .remove(0);
        let ys = y.as_slice::<i32>().unwrap();
        for r in 0..3 {
            for c in 0..5 {
                assert_eq!(ys[r * 5 + c], (c as i64 - r as i64 == -1) as i32);
            }
        }
        let v = Rng::new(62).tensor(&[3]);
        assert!(EyeLike { dtype: None, k: 0 }.eval(&[Some(&v)]).is_err());
        assert_eq!(
            Size.eval(&[Some(&x)]).unwrap()[0]
                .as_slice::<i64>()
                .unwrap(),
            &[15]
        );
    }

    #[test]
    fn one_hot_axes_and_negative_indices() {
        let ind = Tensor::new(vec![2, 2], vec![1.0f32, -1.0, 3.0, 9.0]).unwrap();
        let depth = Tensor::new(vec![1], vec![4.0f32]).unwrap();
        let values = Tensor::new(vec![2], vec![-2i64, 5]).unwrap();
        let op = OneHot {
            axis: 1,
            negative_indices: true,
        };
        let y = op
            .eval(&[Some(&ind), Some(&depth), Some(&values)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[2, 4, 2]);
        let ys = y.as_slice::<i64>().unwrap();
        let classes = [[Some(1), Some(3)], [Some(3), None]];
        for b in 0..2 {
            for c in 0..4 {
                for j in 0..2 {
                    let want = if classes[b][j] == Some(c) { 5 } else { -2 };
                    assert_eq!(ys[(b * 4 + c) * 2 + j], want);
                }
            }
        }
        let old = OneHot {
            axis: -1,
            negative_indices: false,
        };
        let y = old
            .eval(&[Some(&ind), Some(&depth), Some(&values)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[2, 2, 4]);
        assert_eq!(&y.as_slice::<i64>().unwrap()[4..8], &[-2, -2, -2, -2]);
        let zero = Tensor::new(vec![1], vec![0i64]).unwrap();
        assert!(op.eval(&[Some(&ind), Some(&zero), Some(&values)]).is_err());
        assert!(OneHot {
            axis: 3,
            negative_indices: true
        }
        .eval(&[Some(&ind), Some(&depth), Some(&values)])
        .is_err());
    }
}
