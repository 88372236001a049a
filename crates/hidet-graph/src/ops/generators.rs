//! Operators that create tensors from sizes and parameters rather than move input data:
//! Size, Range, ConstantOfShape, EyeLike and OneHot.

use crate::dtype::DType;
use crate::kernels::movement::{alloc, numel, offsets, scalar_i64, take};
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::int_list;
use crate::ops::compute_util::{float_to_int, grid_def, input, konst, placeholders, scalar_const};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_int};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;

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

    /// The constant element count, as a rank-0 grid.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let n = numel(x.shape)?;
        let n = i64::try_from(n).map_err(|_| OpError::Shape("Size: size overflow".into()))?;
        grid_def(placeholders(inputs), DataType::I64, &[], |_| {
            Expr::int_of(n, DataType::I64)
        })
        .map(Some)
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

    /// `out[i] = start + i * delta`, in f64 for floats and i64 for integers and then
    /// converted, as `eval` does; needs the values of all three inputs.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let mut vals = Vec::with_capacity(3);
        for i in 0..3 {
            match input(inputs, i)?.value {
                Some(v) => vals.push(v),
                None => return Ok(None),
            }
        }
        let out = range_values(vals[0], vals[1], vals[2])?;
        let dtype = out.dtype().to_ir();
        let vars = placeholders(inputs);
        let def = if dtype.is_float() {
            let (s, d) = (vals[0].to_f64_vec()[0], vals[2].to_f64_vec()[0]);
            grid_def(vars, dtype, out.shape(), |i| {
                let f = DataType::F64;
                (Expr::float_of(s, f) + i[0].cast(f) * Expr::float_of(d, f)).cast(dtype)
            })?
        } else {
            let (s, d) = (vals[0].to_i64_vec()[0], vals[2].to_i64_vec()[0]);
            grid_def(vars, dtype, out.shape(), |i| {
                let w = DataType::I64;
                (Expr::int_of(s, w) + i[0].cast(w) * Expr::int_of(d, w)).cast(dtype)
            })?
        };
        Ok(Some(def))
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

    /// The constant `value` over the shape given by input 0's value (`Ok(None)` when that is
    /// unknown, or for a `u64` value the IR's constants cannot hold).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let Some(s) = input(inputs, 0)?.value else {
            return Ok(None);
        };
        let shape = shape_of(s, "ConstantOfShape shape")?;
        numel(&shape)?;
        let Some(value) = scalar_const(&self.value) else {
            return Ok(None);
        };
        grid_def(
            placeholders(inputs),
            self.value.dtype().to_ir(),
            &shape,
            |_| value,
        )
        .map(Some)
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

    /// `out[i, j] = select(j - i == k, 1, 0)`; reads nothing of the input.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let &[rows, cols] = x.shape else {
            return Err(OpError::Shape(format!(
                "EyeLike: input shape {:?} is not 2-D",
                x.shape
            )));
        };
        let dtype = self.dtype.unwrap_or(x.dtype).to_ir();
        // `j - i` lies in `[-rows, cols]`; a `k` outside that range never matches.
        let k = self.k.clamp(-(rows as i64) - 1, cols as i64 + 1);
        grid_def(placeholders(inputs), dtype, x.shape, |i| {
            Expr::select(
                (&i[1] - i[0].clone()).eq(Expr::int(k)),
                konst(1.0, dtype),
                konst(0.0, dtype),
            )
        })
        .map(Some)
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

    /// `out[.., c, ..] = select(idx == c, values[1], values[0])` where `idx` is the index
    /// read as data, converted to i64 (floats truncate, saturating; `eval` wraps values beyond
    /// the i64 range instead, which no valid class matches anyway) and, from opset 11, wrapped
    /// by `depth` when negative. Needs the value of `depth`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (ind, d, values) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
        if ind.dtype == DType::Bool {
            return Err(OpError::DType {
                index: 0,
                dtype: DType::Bool,
            });
        }
        if values.shape.iter().product::<usize>() != 2 {
            return Err(OpError::Shape(format!(
                "OneHot: values must hold [off, on], has shape {:?}",
                values.shape
            )));
        }
        let Some(d) = d.value else {
            return Ok(None);
        };
        let depth = depth(d)?;
        let a = self.axis(ind.shape.len())?;
        let mut shape = ind.shape.to_vec();
        shape.insert(a, depth);
        let (from, w) = (ind.dtype.to_ir(), DataType::I64);
        let element = |k: usize| -> Vec<Expr> {
            let mut rest = k;
            let mut index: Vec<Expr> = values
                .shape
                .iter()
                .rev()
                .map(|&d| {
                    let i = rest % d.max(1);
                    rest /= d.max(1);
                    Expr::int(i as i64)
                })
                .collect();
            index.reverse();
            index
        };
        let (off, on) = (element(0), element(1));
        let neg = self.negative_indices;
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), values.dtype.to_ir(), &shape, |o| {
            let at: Vec<Expr> = [&o[..a], &o[a + 1..]].concat();
            let raw = vars[0].at(at);
            let v = if from.is_float() {
                float_to_int(raw, from, w).expect("float_to_int supports every target but u64")
            } else if from == w {
                raw
            } else {
                raw.cast(w)
            };
            let v = if neg {
                let depth = Expr::int_of(depth as i64, w);
                Expr::select(v.lt(Expr::int_of(0, w)), &v + depth, v)
            } else {
                v
            };
            Expr::select(
                v.eq(o[a].cast(w)),
                vars[2].at(on.clone()),
                vars[2].at(off.clone()),
            )
        })?;
        Ok(Some(def))
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
