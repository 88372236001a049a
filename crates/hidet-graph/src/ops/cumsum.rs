//! CumSum: cumulative sum along an axis given as input #1, optionally exclusive (each output
//! excludes its own element) and/or reversed (sums run from the end of the axis).
//!
//! Floats accumulate in f64; integers accumulate in i128 and wrap to the input width.

use crate::kernels::axis::Lanes;
use crate::operator::{arg, infer_arg, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, norm_axis, numeric};
use crate::ops::reduce::flag;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_int};

/// CumSum with its two flags.
#[derive(Debug)]
struct CumSum {
    exclusive: bool,
    reverse: bool,
}

/// Registers CumSum.
pub fn register(r: &mut Registry) {
    r.register("", "CumSum", 11..=LATEST_OPSET, |c| {
        Ok(Box::new(CumSum {
            exclusive: flag(c, "exclusive", 0)?,
            reverse: flag(c, "reverse", 0)?,
        }))
    });
}

/// The axis input: an integer tensor holding exactly one value.
fn axis_value(t: &Tensor) -> Result<i64, OpError> {
    match (
        t.dtype().is_int() && t.rank() <= 1,
        t.to_i64_vec().as_slice(),
    ) {
        (true, &[a]) => Ok(a),
        _ => Err(OpError::Invalid(format!(
            "CumSum axis must be one integer, got {}{:?}",
            t.dtype(),
            t.shape()
        ))),
    }
}

impl Operator for CumSum {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, numeric)?;
        let a = infer_arg(inputs, 1)?;
        if let (Some(v), Some(rank)) = (a.value, x.ty.rank()) {
            norm_axis(axis_value(v)?, rank)?;
        }
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let axis = norm_axis(axis_value(arg(inputs, 1)?)?, x.rank())?;
        let lanes = Lanes::along(x.shape(), axis)?;
        let dt = x.dtype();
        let out = dispatch_float!(dt, T => {
            let xs = x.as_slice::<T>()?;
            let ys = self.scan(&lanes, 0.0, |k| xs[k].to_f64(), |a, b| a + b);
            Tensor::new(x.shape().to_vec(), ys.into_iter().map(T::from_f64).collect::<Vec<T>>())?
        }, else dispatch_int!(dt, T => {
            let xs = x.as_slice::<T>()?;
            let ys = self.scan(&lanes, 0i128, |k| xs[k].to_i128(), i128::wrapping_add);
            Tensor::new(x.shape().to_vec(), ys.into_iter().map(T::from_i128).collect::<Vec<T>>())?
        }, else return Err(OpError::DType { index: 0, dtype: dt })));
        Ok(vec![out])
    }
}

impl CumSum {
    /// Running sums of every lane, in the order and inclusivity the flags ask for.
    fn scan<A: Copy>(
        &self,
        lanes: &Lanes,
        zero: A,
        get: impl Fn(usize) -> A,
        add: impl Fn(A, A) -> A,
    ) -> Vec<A> {
        let mut ys = vec![zero; lanes.count() * lanes.len];
        for lane in 0..lanes.count() {
            let mut acc = zero;
            for step in 0..lanes.len {
                let k = if self.reverse {
                    lanes.len - 1 - step
                } else {
                    step
                };
                let off = lanes.at(lane, k);
                let v = get(off);
                if self.exclusive {
                    ys[off] = acc;
                    acc = add(acc, v);
                } else {
                    acc = add(acc, v);
                    ys[off] = acc;
                }
            }
        }
        ys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reduce::tests::random;

    fn run(op: &CumSum, x: &Tensor, axis: Tensor) -> Result<Tensor, OpError> {
        Ok(op.eval(&[Some(x), Some(&axis)])?.remove(0))
    }

    #[test]
    fn flags_on_small_vector() {
        let x = Tensor::new(vec![5], vec![1i32, 2, 3, 4, 5]).unwrap();
        let ax = || Tensor::scalar(0i32);
        let cases = [
            (false, false, [1, 3, 6, 10, 15]),
            (true, false, [0, 1, 3, 6, 10]),
            (false, true, [15, 14, 12, 9, 5]),
            (true, true, [14, 12, 9, 5, 0]),
        ];
        for (exclusive, reverse, want) in cases {
            let y = run(&CumSum { exclusive, reverse }, &x, ax()).unwrap();
            assert_eq!(y.as_slice::<i32>().unwrap(), &want);
        }
    }

    #[test]
    fn matches_float64_loop_on_odd_shape_with_negative_axis() {
        let (a, b, c) = (3usize, 7usize, 5usize);
        let v = random(8, a * b * c);
        let x = Tensor::new(vec![a, b, c], v.iter().map(|&f| f as f32).collect()).unwrap();
        let y = run(
            &CumSum {
                exclusive: true,
                reverse: true,
            },
            &x,
            Tensor::new(vec![1], vec![-2i64]).unwrap(),
        )
        .unwrap();
        let got = y.to_f64_vec();
        for i in 0..a {
            for k in 0..c {
                for j in 0..b {
                    let want: f64 = (j + 1..b)
                        .map(|jj| v[(i * b + jj) * c + k] as f32 as f64)
                        .sum();
                    let g = got[(i * b + j) * c + k];
                    assert!((g - want).abs() < 1e-5, "{i} {j} {k}: {g} vs {want}");
                }
            }
        }
    }

    #[test]
    fn integer_wraps_and_errors() {
        let x = Tensor::new(vec![2], vec![200u8, 100]).unwrap();
        let y = run(
            &CumSum {
                exclusive: false,
                reverse: false,
            },
            &x,
            Tensor::scalar(0i64),
        )
        .unwrap();
        assert_eq!(y.as_slice::<u8>().unwrap(), &[200, 44]);
        let op = CumSum {
            exclusive: false,
            reverse: false,
        };
        assert!(run(&op, &x, Tensor::scalar(1i64)).is_err());
        assert!(run(&op, &x, Tensor::scalar(0.0f32)).is_err());
        assert!(run(&op, &x, Tensor::new(vec![2], vec![0i64, 0]).unwrap()).is_err());
        let b = Tensor::new(vec![1], vec![true]).unwrap();
        assert!(matches!(
            run(&op, &b, Tensor::scalar(0i64)),
            Err(OpError::DType { .. })
        ));
    }
}
