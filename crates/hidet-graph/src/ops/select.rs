//! Data-dependent selection: NonZero (coordinates of non-zero elements) and Compress
//! (slices along an axis where a boolean condition holds).

use crate::ops::common::typed_input;
use crate::dtype::DType;
use crate::kernels::movement::{alloc, offsets, strides, take, try_for_each_index};
use crate::operator::{arg, infer_arg, InferInput, OpError, Operator};
use crate::ops::common::norm_axis;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

/// `[rank, nnz]` int64 coordinates of the non-zero elements, row-major order. A rank-0 input
/// is treated as shape `[1]` (numpy's behaviour), giving `[1, nnz]`.
#[derive(Debug)]
struct NonZero;

/// Slices of input 0 along `axis` (or of the flattened input) where `condition` is true.
#[derive(Debug)]
struct Compress {
    axis: Option<i64>,
}

/// Registers NonZero and Compress.
pub fn register(r: &mut Registry) {
    r.register("", "NonZero", 9..=LATEST_OPSET, |_| Ok(Box::new(NonZero)));
    r.register("", "Compress", 9..=LATEST_OPSET, |c| {
        Ok(Box::new(Compress {
            axis: c.attrs.int("axis")?.copied(),
        }))
    });
}

impl Operator for NonZero {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        if let Some(v) = x.value {
            let out = self.eval(&[Some(v)])?;
            return Ok(out
                .iter()
                .map(|t| TensorType::fixed(t.dtype(), t.shape()))
                .collect());
        }
        let rows =
            x.ty.rank()
                .map(|r| Dim::Fixed(r.max(1)))
                .unwrap_or(Dim::Unknown);
        Ok(vec![TensorType {
            dtype: DType::I64,
            shape: Some(vec![rows, Dim::Unknown]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let shape: Vec<usize> = if x.rank() == 0 {
            vec![1]
        } else {
            x.shape().to_vec()
        };
        let values = x.to_f64_vec();
        let mut coords: Vec<Vec<i64>> = vec![Vec::new(); shape.len()];
        let mut k = 0usize;
        try_for_each_index(&shape, |o| {
            if values[k] != 0.0 {
                for (c, &i) in coords.iter_mut().zip(o) {
                    c.push(i as i64);
                }
            }
            k += 1;
            Ok(())
        })?;
        let nnz = coords.first().map_or(0, Vec::len);
        let mut out: Vec<i64> = alloc(shape.len() * nnz)?;
        for c in coords {
            out.extend(c);
        }
        Ok(vec![Tensor::new(vec![shape.len(), nnz], out)?])
    }
}

impl Operator for Compress {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, c) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        if c.ty.dtype != DType::Bool {
            return Err(OpError::DType {
                index: 1,
                dtype: c.ty.dtype,
            });
        }
        let shape = match (self.axis, &x.ty.shape) {
            (None, _) => Some(vec![Dim::Unknown]),
            (Some(a), Some(d)) => {
                let a = norm_axis(a, d.len())?;
                let mut d = d.clone();
                d[a] = match (&d[a], c.value.map(|v| v.as_slice::<bool>())) {
                    (Dim::Fixed(n), Some(Ok(cond))) => {
                        Dim::Fixed(cond.iter().take(*n).filter(|&&b| b).count())
                    }
                    _ => Dim::Unknown,
                };
                Some(d)
            }
            (Some(_), None) => None,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, c) = (arg(inputs, 0)?, arg(inputs, 1)?);
        if c.rank() != 1 {
            return Err(OpError::Shape(format!(
                "Compress: condition shape {:?} is not 1-D",
                c.shape()
            )));
        }
        let cond = typed_input::<bool>(c, 1)?;
        let (x, axis) = match self.axis {
            Some(a) => (x.clone(), norm_axis(a, x.rank())?),
            None => (x.reshape(vec![x.numel()])?, 0),
        };
        let dim = x.shape()[axis];
        if let Some(i) = cond.iter().skip(dim).position(|&b| b) {
            return Err(OpError::Shape(format!(
                "Compress: condition selects index {} beyond axis size {dim}",
                dim + i
            )));
        }
        let keep: Vec<usize> = cond
            .iter()
            .take(dim)
            .enumerate()
            .filter_map(|(i, &b)| b.then_some(i))
            .collect();
        let mut shape = x.shape().to_vec();
        shape[axis] = keep.len();
        let st = strides(x.shape());
        let src = offsets(&shape, |o| {
            Ok(o.iter()
                .zip(&st)
                .enumerate()
                .map(|(d, (&i, &s))| if d == axis { keep[i] * s } else { i * s })
                .sum())
        })?;
        Ok(vec![take(&x, shape, &src)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    #[test]
    fn nonzero_coordinates() {
        let x = Tensor::new(vec![2, 3], vec![0i32, 4, 0, -1, 0, 7]).unwrap();
        let y = NonZero.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[0, 1, 1, 1, 0, 2]);
        let f = Tensor::new(vec![3], vec![f32::NAN, 0.0, -0.5]).unwrap();
        let y = NonZero.eval(&[Some(&f)]).unwrap().remove(0);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[0, 2]);
        let s = Tensor::scalar(false);
        assert_eq!(NonZero.eval(&[Some(&s)]).unwrap()[0].shape(), &[1, 0]);
    }

    #[test]
    fn compress_axes_and_flattened() {
        let x = Rng::new(91).tensor(&[3, 4]);
        let xs = x.as_slice::<f32>().unwrap();
        let cond = Tensor::new(vec![3], vec![true, false, true]).unwrap();
        let y = Compress { axis: Some(-1) }
            .eval(&[Some(&x), Some(&cond)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[xs[0], xs[2], xs[4], xs[6], xs[8], xs[10]]
        );
        let y = Compress { axis: Some(0) }
            .eval(&[Some(&x), Some(&cond)])
            .unwrap()
            .remove(0);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[&xs[0..4], &xs[8..12]].concat()[..]
        );
        let y = Compress { axis: None }
            .eval(&[Some(&x), Some(&cond)])
            .unwrap()
            .remove(0);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[xs[0], xs[2]]);
        let long = Tensor::new(vec![5], vec![false, false, false, false, true]).unwrap();
        assert!(Compress { axis: Some(1) }
            .eval(&[Some(&x), Some(&long)])
            .is_err());
        let ints = Tensor::new(vec![1], vec![1i64]).unwrap();
        assert!(Compress { axis: Some(1) }
            .eval(&[Some(&x), Some(&ints)])
            .is_err());
        assert!(Compress { axis: Some(2) }
            .eval(&[Some(&x), Some(&cond)])
            .is_err());
    }
}
