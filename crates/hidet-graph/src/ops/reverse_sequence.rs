//! ReverseSequence: reverses the first `sequence_lens[b]` elements along the time axis of
//! every batch entry `b`.

use crate::kernels::movement::{offsets, strides, take};
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::compute_util::{clamp, grid_def, index_dtype, input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;

/// Batch axis and time axis are 0 and 1 (in either order).
#[derive(Debug)]
struct ReverseSequence {
    batch_axis: usize,
    time_axis: usize,
}

/// Registers ReverseSequence.
pub fn register(r: &mut Registry) {
    r.register("", "ReverseSequence", 10..=LATEST_OPSET, |c| {
        let b = c.attrs.int_or("batch_axis", 1)?;
        let t = c.attrs.int_or("time_axis", 0)?;
        if !matches!((b, t), (0, 1) | (1, 0)) {
            return Err(OpError::Invalid(format!(
                "ReverseSequence: batch_axis {b} and time_axis {t} must be 0 and 1"
            )));
        }
        Ok(Box::new(ReverseSequence {
            batch_axis: b as usize,
            time_axis: t as usize,
        }))
    });
}

impl Operator for ReverseSequence {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, l) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        if x.ty.rank().is_some_and(|r| r < 2) {
            return Err(OpError::Shape(format!(
                "ReverseSequence: input {} has rank < 2",
                x.ty
            )));
        }
        if !l.ty.dtype.is_int() {
            return Err(OpError::DType {
                index: 1,
                dtype: l.ty.dtype,
            });
        }
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, l) = (arg(inputs, 0)?, arg(inputs, 1)?);
        if x.rank() < 2 {
            return Err(OpError::Shape(format!(
                "ReverseSequence: input shape {:?} has rank < 2",
                x.shape()
            )));
        }
        let (b, t) = (self.batch_axis, self.time_axis);
        let (batch, time) = (x.shape()[b], x.shape()[t]);
        if !l.dtype().is_int() || l.shape() != [batch] {
            return Err(OpError::Invalid(format!(
                "ReverseSequence: sequence_lens must be {batch} integers, got {}{:?}",
                l.dtype(),
                l.shape()
            )));
        }
        let lens: Vec<usize> = l
            .to_i64_vec()
            .into_iter()
            .map(|v| {
                usize::try_from(v)
                    .ok()
                    .filter(|&v| v <= time)
                    .ok_or_else(|| {
                        OpError::Invalid(format!(
                            "ReverseSequence: length {v} is outside [0, {time}]"
                        ))
                    })
            })
            .collect::<Result<_, _>>()?;
        let st = strides(x.shape());
        let src = offsets(x.shape(), |o| {
            let n = lens[o[b]];
            Ok(o.iter()
                .zip(&st)
                .enumerate()
                .map(|(d, (&i, &s))| {
                    if d == t && i < n {
                        (n - 1 - i) * s
                    } else {
                        i * s
                    }
                })
                .sum())
        })?;
        Ok(vec![take(x, x.shape().to_vec(), &src)?])
    }

    /// `out[i] = x[i with i[t] = select(i[t] < n, n - 1 - i[t], i[t])]` where
    /// `n = sequence_lens[i[b]]` is read as data and clamped into `[0, time]` (lengths that
    /// `eval` rejects read inside the tensor instead of failing).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, l) = (input(inputs, 0)?, input(inputs, 1)?);
        if x.shape.len() < 2 {
            return Err(OpError::Shape(format!(
                "ReverseSequence: input shape {:?} has rank < 2",
                x.shape
            )));
        }
        let (b, t) = (self.batch_axis, self.time_axis);
        let (batch, time) = (x.shape[b], x.shape[t]);
        if !l.dtype.is_int() || l.shape != [batch] {
            return Err(OpError::Invalid(format!(
                "ReverseSequence: sequence_lens must be {batch} integers, got {}{:?}",
                l.dtype, l.shape
            )));
        }
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), x.shape, |i| {
            let len = vars[1].at([i[b].clone()]);
            let len = if l.dtype.to_ir() == DataType::I64 {
                len
            } else {
                len.cast(DataType::I64)
            };
            let n = clamp(
                len,
                Expr::int_of(0, DataType::I64),
                Expr::int_of(time as i64, DataType::I64),
            )
            .cast(index_dtype(time));
            let mut j = i.to_vec();
            j[t] = Expr::select(
                i[t].lt(n.clone()),
                n - Expr::int(1) - i[t].clone(),
                i[t].clone(),
            );
            vars[0].at(j)
        })?;
        Ok(Some(def))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    #[test]
    fn reverses_prefixes_in_both_layouts() {
        let x = Rng::new(101).tensor(&[4, 3, 2]);
        let xs = x.as_slice::<f32>().unwrap();
        let lens = Tensor::new(vec![3], vec![4i64, 0, 2]).unwrap();
        // time = axis 0 (size 4), batch = axis 1 (size 3).
        let y = ReverseSequence {
            batch_axis: 1,
            time_axis: 0,
        }
        .eval(&[Some(&x), Some(&lens)])
        .unwrap()
        .remove(0);
        let ys = y.as_slice::<f32>().unwrap();
        let n = [4usize, 0, 2];
        for ti in 0..4 {
            for bi in 0..3 {
                for k in 0..2 {
                    let src_t = if ti < n[bi] { n[bi] - 1 - ti } else { ti };
                    assert_eq!(ys[(ti * 3 + bi) * 2 + k], xs[(src_t * 3 + bi) * 2 + k]);
                }
            }
        }
        // batch = axis 0 (size 4), time = axis 1 (size 3).
        let lens = Tensor::new(vec![4], vec![3i32, 1, 2, 0]).unwrap();
        let y = ReverseSequence {
            batch_axis: 0,
            time_axis: 1,
        }
        .eval(&[Some(&x), Some(&lens)])
        .unwrap()
        .remove(0);
        let ys = y.as_slice::<f32>().unwrap();
        let n = [3usize, 1, 2, 0];
        for bi in 0..4 {
            for ti in 0..3 {
                for k in 0..2 {
                    let src_t = if ti < n[bi] { n[bi] - 1 - ti } else { ti };
                    assert_eq!(ys[(bi * 3 + ti) * 2 + k], xs[(bi * 3 + src_t) * 2 + k]);
                }
            }
        }
        let too_long = Tensor::new(vec![4], vec![4i64, 1, 1, 1]).unwrap();
        let op = ReverseSequence {
            batch_axis: 0,
            time_axis: 1,
        };
        assert!(op.eval(&[Some(&x), Some(&too_long)]).is_err());
        let wrong_len = Tensor::new(vec![3], vec![1i64, 1, 1]).unwrap();
        assert!(op.eval(&[Some(&x), Some(&wrong_len)]).is_err());
    }
}
