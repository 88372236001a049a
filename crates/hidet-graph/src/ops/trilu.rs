//! Trilu: keeps the upper (`j - i >= k`) or lower (`j - i <= k`) triangle of every matrix in
//! the last two dimensions and zeroes the rest.

use crate::kernels::movement::{opt_offsets, scalar_i64, take_or_fill};
use crate::operator::{
    arg, infer_arg, opt_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator,
};
use crate::ops::compute_util::{grid_def, input, opt_input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;
use hidet_ir::expr::Expr;

/// Triangle selection with diagonal offset `k` (input #1, default 0).
#[derive(Debug)]
struct Trilu {
    upper: bool,
}

/// Registers Trilu.
pub fn register(r: &mut Registry) {
    r.register("", "Trilu", 14..=LATEST_OPSET, |c| {
        Ok(Box::new(Trilu {
            upper: c.attrs.int_or("upper", 1)? != 0,
        }))
    });
}

impl Operator for Trilu {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        if x.ty.rank().is_some_and(|r| r < 2) {
            return Err(OpError::Shape(format!(
                "Trilu: input {} has rank < 2",
                x.ty
            )));
        }
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let r = x.rank();
        if r < 2 {
            return Err(OpError::Shape(format!(
                "Trilu: input shape {:?} has rank < 2",
                x.shape()
            )));
        }
        let k = match opt_arg(inputs, 1) {
            Some(t) => scalar_i64(t, "Trilu k", false)? as i128,
            None => 0,
        };
        let upper = self.upper;
        let mut flat = 0usize;
        let src = opt_offsets(x.shape(), |o| {
            let d = o[r - 1] as i128 - o[r - 2] as i128;
            let keep = if upper { d >= k } else { d <= k };
            let off = flat;
            flat += 1;
            Ok(keep.then_some(off))
        })?;
        Ok(vec![take_or_fill(x, None, x.shape().to_vec(), &src)?])
    }

    /// `out[.., i, j] = select(j - i >= k, x[.., i, j], 0)` (`<=` for the lower triangle);
    /// needs the value of `k`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let r = x.shape.len();
        if r < 2 {
            return Err(OpError::Shape(format!(
                "Trilu: input shape {:?} has rank < 2",
                x.shape
            )));
        }
        let k = match opt_input(inputs, 1) {
            None => 0,
            Some(ComputeInput { value: Some(t), .. }) => scalar_i64(t, "Trilu k", false)?,
            Some(_) => return Ok(None),
        };
        let (rows, cols) = (x.shape[r - 2] as i64, x.shape[r - 1] as i64);
        // `j - i` lies in `[-rows, cols]`, so clamping `k` to that range keeps every comparison.
        let k = k.clamp(-rows, cols);
        let upper = self.upper;
        let dtype = x.dtype.to_ir();
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), dtype, x.shape, |i| {
            let d = &i[r - 1] - i[r - 2].clone();
            let keep = if upper {
                d.ge(Expr::int(k))
            } else {
                d.le(Expr::int(k))
            };
            Expr::select(keep, vars[0].at(i.to_vec()), Expr::zero(dtype))
        })?;
        Ok(Some(def))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    #[test]
    fn upper_and_lower_with_offsets_on_batched_rectangles() {
        let x = Rng::new(81).tensor(&[2, 3, 5]);
        let xs = x.as_slice::<f32>().unwrap();
        for upper in [true, false] {
            for k in [-4i64, -1, 0, 2, 7] {
                let kt = Tensor::scalar(k);
                let y = Trilu { upper }
                    .eval(&[Some(&x), Some(&kt)])
                    .unwrap()
                    .remove(0);
                let ys = y.as_slice::<f32>().unwrap();
                for b in 0..2 {
                    for i in 0..3i64 {
                        for j in 0..5i64 {
                            let at = (b * 3 + i as usize) * 5 + j as usize;
                            let keep = if upper { j >= i + k } else { j <= i + k };
                            assert_eq!(ys[at], if keep { xs[at] } else { 0.0 }, "{upper} {k}");
                        }
                    }
                }
            }
        }
        let v = Rng::new(82).tensor(&[4]);
        assert!(Trilu { upper: true }.eval(&[Some(&v)]).is_err());
        let bad_k = Tensor::new(vec![2], vec![1i64, 2]).unwrap();
        assert!(Trilu { upper: true }
            .eval(&[Some(&x), Some(&bad_k)])
            .is_err());
    }
}
