//! Transpose: permutes dimensions (`perm`, default reversed).

use crate::kernels::movement::{offsets, strides, take};
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::compute_util::{grid_def, input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;

/// Output dimension `i` is input dimension `perm[i]`.
#[derive(Debug)]
struct Transpose {
    perm: Option<Vec<i64>>,
}

/// Registers Transpose.
pub fn register(r: &mut Registry) {
    r.register("", "Transpose", 1..=LATEST_OPSET, |c| {
        Ok(Box::new(Transpose {
            perm: c.attrs.ints("perm")?.cloned(),
        }))
    });
}

impl Transpose {
    /// The permutation for `rank`; errors unless it is a permutation of `0..rank`.
    fn perm(&self, rank: usize) -> Result<Vec<usize>, OpError> {
        let Some(p) = &self.perm else {
            return Ok((0..rank).rev().collect());
        };
        let mut seen = vec![false; rank];
        let mut out = Vec::with_capacity(rank);
        for &a in p {
            let ok = a >= 0 && (a as usize) < rank && !seen[a as usize];
            if !ok {
                return Err(OpError::attr(
                    "perm",
                    format!("{p:?} is not a permutation of 0..{rank}"),
                ));
            }
            seen[a as usize] = true;
            out.push(a as usize);
        }
        if out.len() != rank {
            return Err(OpError::attr(
                "perm",
                format!("{p:?} is not a permutation of 0..{rank}"),
            ));
        }
        Ok(out)
    }
}

impl Operator for Transpose {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let shape = match &x.ty.shape {
            Some(d) => Some(self.perm(d.len())?.iter().map(|&p| d[p].clone()).collect()),
            None => self
                .perm
                .as_ref()
                .map(|p| vec![crate::shape::Dim::Unknown; p.len()]),
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let perm = self.perm(x.rank())?;
        let st = strides(x.shape());
        let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
        let src = offsets(&shape, |o| {
            Ok(o.iter().zip(&perm).map(|(&i, &p)| i * st[p]).sum())
        })?;
        Ok(vec![take(x, shape, &src)?])
    }

    /// `out[i] = x[j]` with `j[perm[k]] = i[k]`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let perm = self.perm(x.shape.len())?;
        let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), &shape, |i| {
            let mut j = vec![hidet_ir::expr::Expr::int(0); perm.len()];
            for (k, &p) in perm.iter().enumerate() {
                j[p] = i[k].clone();
            }
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
    fn transpose_3d_against_loops() {
        let (a, b, c) = (3, 4, 5);
        let x = Rng::new(7).tensor(&[a, b, c]);
        let xs = x.as_slice::<f32>().unwrap();
        let y = Transpose {
            perm: Some(vec![2, 0, 1]),
        }
        .eval(&[Some(&x)])
        .unwrap()
        .remove(0);
        assert_eq!(y.shape(), &[c, a, b]);
        let ys = y.as_slice::<f32>().unwrap();
        for i in 0..a {
            for j in 0..b {
                for k in 0..c {
                    assert_eq!(ys[(k * a + i) * b + j], xs[(i * b + j) * c + k]);
                }
            }
        }
    }

    #[test]
    fn default_reverses_and_bad_perm_fails() {
        let x = Tensor::new(vec![2, 3], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
        let y = Transpose { perm: None }
            .eval(&[Some(&x)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[1, 4, 2, 5, 3, 6]);
        for p in [vec![0, 0], vec![0], vec![0, 2], vec![-1, 0]] {
            assert!(Transpose { perm: Some(p) }.eval(&[Some(&x)]).is_err());
        }
    }
}
