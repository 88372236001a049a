//! Concat (joins inputs along an axis) and Split (cuts one input into several along an axis).

use crate::dispatch_all;
use crate::kernels::movement::{alloc, numel, offsets, strides, take};
use crate::operator::{
    arg, infer_arg, infer_opt, opt_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator,
};
use crate::ops::common::{int_list, norm_axis};
use crate::ops::compute_util::{dims, finish, grid_def, input, opt_input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use hidet_ir::compute::grid;
use hidet_ir::expr::Expr;

/// Concatenation of every present input along `axis`.
#[derive(Debug)]
struct Concat {
    axis: i64,
}

/// Where Split gets the sizes of its parts.
#[derive(Debug, Clone)]
enum Parts {
    /// `split` attribute (before opset 13), `None` when absent.
    Attr(Option<Vec<i64>>),
    /// Optional input #1 (opset 13+); with `num_outputs` (opset 18+) as the alternative.
    Input { num_outputs: Option<i64> },
}

/// Split of input 0 along `axis` into `outputs` parts.
#[derive(Debug)]
struct Split {
    axis: i64,
    parts: Parts,
    outputs: usize,
}

/// Registers Concat and Split.
pub fn register(r: &mut Registry) {
    r.register("", "Concat", 4..=LATEST_OPSET, |c| {
        Ok(Box::new(Concat {
            axis: c.attrs.req_int("axis")?,
        }))
    });
    r.register("", "Split", 2..=12, |c| {
        Ok(Box::new(Split {
            axis: c.attrs.int_or("axis", 0)?,
            parts: Parts::Attr(c.attrs.ints("split")?.cloned()),
            outputs: c.num_outputs,
        }))
    });
    r.register("", "Split", 13..=17, |c| {
        Ok(Box::new(Split {
            axis: c.attrs.int_or("axis", 0)?,
            parts: Parts::Input { num_outputs: None },
            outputs: c.num_outputs,
        }))
    });
    r.register("", "Split", 18..=LATEST_OPSET, |c| {
        let num_outputs = c.attrs.int("num_outputs")?.copied();
        if let Some(n) = num_outputs {
            if n < 1 || n as usize != c.num_outputs {
                return Err(OpError::attr(
                    "num_outputs",
                    format!("is {n} but the node has {} outputs", c.num_outputs),
                ));
            }
            if c.num_inputs > 1 {
                return Err(OpError::Invalid(
                    "Split: `split` input and `num_outputs` are exclusive".into(),
                ));
            }
        }
        Ok(Box::new(Split {
            axis: c.attrs.int_or("axis", 0)?,
            parts: Parts::Input { num_outputs },
            outputs: c.num_outputs,
        }))
    });
}

impl Operator for Concat {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let first = infer_arg(inputs, 0)?;
        let present: Vec<&InferInput<'_>> = inputs.iter().flatten().collect();
        for (i, x) in present.iter().enumerate() {
            if x.ty.dtype != first.ty.dtype {
                return Err(OpError::Invalid(format!(
                    "Concat: input #{i} has dtype {}, input #0 has {}",
                    x.ty.dtype, first.ty.dtype
                )));
            }
        }
        let Some(rank) = present.iter().find_map(|x| x.ty.rank()) else {
            return Ok(vec![TensorType::unknown_shape(first.ty.dtype)]);
        };
        let axis = norm_axis(self.axis, rank)?;
        let mut out = vec![Dim::Unknown; rank];
        let mut total = Some(0usize);
        for x in &present {
            let Some(d) = &x.ty.shape else {
                total = None;
                continue;
            };
            if d.len() != rank {
                return Err(OpError::Shape(format!(
                    "Concat: inputs of ranks {rank} and {}",
                    d.len()
                )));
            }
            for (i, (o, di)) in out.iter_mut().zip(d).enumerate() {
                if i == axis {
                    continue;
                }
                match (&*o, di) {
                    (Dim::Fixed(a), Dim::Fixed(b)) if a != b => {
                        return Err(OpError::Shape(format!(
                            "Concat: dimension {i} differs ({a} vs {b})"
                        )))
                    }
                    (Dim::Fixed(_), _) => {}
                    (_, Dim::Fixed(_)) | (Dim::Unknown, _) => *o = di.clone(),
                    _ => {}
                }
            }
            total = match (total, &d[axis]) {
                (Some(t), Dim::Fixed(n)) => t.checked_add(*n),
                _ => None,
            };
        }
        out[axis] = total.map(Dim::Fixed).unwrap_or(Dim::Unknown);
        Ok(vec![TensorType {
            dtype: first.ty.dtype,
            shape: Some(out),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let first = arg(inputs, 0)?;
        let present: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
        let rank = first.rank();
        let axis = norm_axis(self.axis, rank)?;
        let mut shape = first.shape().to_vec();
        shape[axis] = 0;
        for (i, t) in present.iter().enumerate() {
            if t.dtype() != first.dtype() {
                return Err(OpError::Invalid(format!(
                    "Concat: input #{i} has dtype {}, input #0 has {}",
                    t.dtype(),
                    first.dtype()
                )));
            }
            let same = t.rank() == rank
                && (0..rank).all(|d| d == axis || t.shape()[d] == first.shape()[d]);
            if !same {
                return Err(OpError::Shape(format!(
                    "Concat: shapes {:?} and {:?} differ outside axis {axis}",
                    first.shape(),
                    t.shape()
                )));
            }
            shape[axis] = shape[axis]
                .checked_add(t.shape()[axis])
                .ok_or_else(|| OpError::Shape("Concat: size overflow".into()))?;
        }
        let total = numel(&shape)?;
        let outer = numel(&first.shape()[..axis])?;
        let out = dispatch_all!(first.dtype(), T => {
            let mut v: Vec<T> = alloc(total)?;
            let chunks: Vec<(&[T], usize)> = present
                .iter()
                .map(|t| Ok((t.as_slice::<T>()?, t.numel() / outer.max(1))))
                .collect::<Result<_, OpError>>()?;
            for o in 0..outer {
                for (data, len) in &chunks {
                    v.extend_from_slice(&data[o * len..(o + 1) * len]);
                }
            }
            Tensor::new(shape, v)?
        });
        Ok(vec![out])
    }

    /// A select chain over the concat axis: `out[i] = in_k[i with i[axis] - start_k]` for the
    /// first present, non-empty input `k` whose range `[start_k, start_k + len_k)` holds
    /// `i[axis]`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let first = input(inputs, 0)?;
        let rank = first.shape.len();
        let axis = norm_axis(self.axis, rank)?;
        let mut shape = first.shape.to_vec();
        shape[axis] = 0;
        let mut parts: Vec<(usize, usize, usize)> = Vec::new();
        for (slot, x) in inputs.iter().enumerate() {
            let Some(x) = x else { continue };
            if x.dtype != first.dtype {
                return Err(OpError::Invalid(format!(
                    "Concat: input #{slot} has dtype {}, input #0 has {}",
                    x.dtype, first.dtype
                )));
            }
            let same = x.shape.len() == rank
                && (0..rank).all(|d| d == axis || x.shape[d] == first.shape[d]);
            if !same {
                return Err(OpError::Shape(format!(
                    "Concat: shapes {:?} and {:?} differ outside axis {axis}",
                    first.shape, x.shape
                )));
            }
            let len = x.shape[axis];
            if len > 0 {
                parts.push((slot, shape[axis], len));
            }
            shape[axis] = shape[axis]
                .checked_add(len)
                .ok_or_else(|| OpError::Shape("Concat: size overflow".into()))?;
        }
        let vars = placeholders(inputs);
        let dtype = first.dtype.to_ir();
        let def = grid_def(vars.clone(), dtype, &shape, |i| {
            let read = |&(slot, start, _): &(usize, usize, usize)| {
                let mut j = i.to_vec();
                if start > 0 {
                    j[axis] = &i[axis] - Expr::int(start as i64);
                }
                vars[slot].at(j)
            };
            let Some((last, rest)) = parts.split_last() else {
                return Expr::zero(dtype);
            };
            rest.iter().rev().fold(read(last), |acc, p| {
                Expr::select(i[axis].lt(Expr::int((p.1 + p.2) as i64)), read(p), acc)
            })
        })?;
        Ok(Some(def))
    }
}

/// Sizes of the parts of a dimension of size `dim` cut into `n` parts when no explicit sizes
/// are given: equal parts (before opset 18, or without `num_outputs`), or parts of
/// `ceil(dim / n)` with a smaller last one (`num_outputs`).
fn default_parts(dim: usize, n: usize, uneven_last: bool) -> Result<Vec<usize>, OpError> {
    if n == 0 {
        return Err(OpError::Invalid("Split: node has no outputs".into()));
    }
    if !uneven_last {
        if dim / n * n != dim {
            return Err(OpError::Shape(format!(
                "Split: dimension {dim} does not split into {n} equal parts"
            )));
        }
        return Ok(vec![dim / n; n]);
    }
    let chunk = dim.div_ceil(n);
    let before_last = chunk * (n - 1);
    if before_last > dim {
        return Err(OpError::Shape(format!(
            "Split: dimension {dim} cannot be cut into {n} parts of {chunk}"
        )));
    }
    let mut v = vec![chunk; n - 1];
    v.push(dim - before_last);
    Ok(v)
}

impl Split {
    /// Explicit part sizes (attribute or input value), `Ok(None)` when absent.
    fn explicit(&self, split: Option<&Tensor>) -> Result<Option<Vec<i64>>, OpError> {
        match &self.parts {
            Parts::Attr(a) => Ok(a.clone()),
            Parts::Input { .. } => split.map(|t| int_list(t, "Split split")).transpose(),
        }
    }

    /// Part sizes for a dimension of size `dim`.
    fn sizes(&self, dim: usize, explicit: Option<Vec<i64>>) -> Result<Vec<usize>, OpError> {
        match explicit {
            Some(s) => {
                if s.len() != self.outputs {
                    return Err(OpError::Invalid(format!(
                        "Split: {} sizes for {} outputs",
                        s.len(),
                        self.outputs
                    )));
                }
                if s.iter().any(|&v| v < 0)
                    || s.iter().map(|&v| v as i128).sum::<i128>() != dim as i128
                {
                    return Err(OpError::Shape(format!(
                        "Split: sizes {s:?} do not add up to {dim}"
                    )));
                }
                Ok(s.iter().map(|&v| v as usize).collect())
            }
            None => {
                let uneven = matches!(
                    self.parts,
                    Parts::Input {
                        num_outputs: Some(_)
                    }
                );
                default_parts(dim, self.outputs, uneven)
            }
        }
    }
}

impl Operator for Split {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let unknown = || vec![TensorType::unknown_shape(x.ty.dtype); self.outputs];
        let Some(dims) = &x.ty.shape else {
            return Ok(unknown());
        };
        let axis = norm_axis(self.axis, dims.len())?;
        let split = infer_opt(inputs, 1);
        let explicit = match (&self.parts, split) {
            (Parts::Input { .. }, Some(InferInput { value: None, .. })) => {
                let mut d = dims.clone();
                d[axis] = Dim::Unknown;
                return Ok(vec![
                    TensorType {
                        dtype: x.ty.dtype,
                        shape: Some(d)
                    };
                    self.outputs
                ]);
            }
            (_, s) => self.explicit(s.and_then(|s| s.value))?,
        };
        let sizes: Vec<Dim> = match (&dims[axis], explicit) {
            (Dim::Fixed(n), Some(e)) => self
                .sizes(*n, Some(e))?
                .into_iter()
                .map(Dim::Fixed)
                .collect(),
            // A dimension that does not split evenly is only an error if the node runs: it
            // may sit in an `If` branch that is never taken for these shapes. `eval` reports it.
            (Dim::Fixed(n), None) => match self.sizes(*n, None) {
                Ok(v) => v.into_iter().map(Dim::Fixed).collect(),
                Err(_) => vec![Dim::Unknown; self.outputs],
            },
            (_, Some(e)) if e.len() == self.outputs && e.iter().all(|&v| v >= 0) => {
                e.iter().map(|&v| Dim::Fixed(v as usize)).collect()
            }
            _ => vec![Dim::Unknown; self.outputs],
        };
        Ok(sizes
            .into_iter()
            .map(|s| {
                let mut d = dims.clone();
                d[axis] = s;
                TensorType {
                    dtype: x.ty.dtype,
                    shape: Some(d),
                }
            })
            .collect())
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let axis = norm_axis(self.axis, x.rank())?;
        let sizes = self.sizes(x.shape()[axis], self.explicit(opt_arg(inputs, 1))?)?;
        let st = strides(x.shape());
        let mut start = 0usize;
        let mut outs = Vec::with_capacity(sizes.len());
        for len in sizes {
            let mut shape = x.shape().to_vec();
            shape[axis] = len;
            let src = offsets(&shape, |o| {
                Ok(o.iter()
                    .zip(&st)
                    .enumerate()
                    .map(|(d, (&i, &s))| if d == axis { (i + start) * s } else { i * s })
                    .sum())
            })?;
            outs.push(take(x, shape, &src)?);
            start += len;
        }
        Ok(outs)
    }

    /// One grid per part: `out_k[i] = x[i with i[axis] + start_k]`; needs the value of the
    /// `split` input when it is present.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let axis = norm_axis(self.axis, x.shape.len())?;
        let split = match (&self.parts, opt_input(inputs, 1)) {
            (Parts::Input { .. }, Some(s)) => match s.value {
                Some(v) => Some(v),
                None => return Ok(None),
            },
            _ => None,
        };
        let sizes = self.sizes(x.shape[axis], self.explicit(split)?)?;
        let vars = placeholders(inputs);
        let dtype = x.dtype.to_ir();
        let mut nodes = Vec::with_capacity(sizes.len());
        let mut start = 0usize;
        for (k, len) in sizes.into_iter().enumerate() {
            let mut shape = x.shape.to_vec();
            shape[axis] = len;
            nodes.push(grid(&format!("out{k}"), dtype, dims(&shape), |i| {
                let mut j = i.to_vec();
                if start > 0 {
                    j[axis] = &i[axis] + Expr::int(start as i64);
                }
                vars[0].at(j)
            }));
            start += len;
        }
        let outputs = nodes.iter().map(|(v, _)| v.clone()).collect();
        finish(vars, nodes, outputs).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    #[test]
    fn concat_middle_axis_against_loops() {
        let mut rng = Rng::new(11);
        let a = rng.tensor(&[2, 3, 5]);
        let b = rng.tensor(&[2, 1, 5]);
        let c = rng.tensor(&[2, 4, 5]);
        let y = Concat { axis: -2 }
            .eval(&[Some(&a), Some(&b), Some(&c)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[2, 8, 5]);
        let ys = y.as_slice::<f32>().unwrap();
        let (xa, xb, xc) = (
            a.as_slice::<f32>().unwrap(),
            b.as_slice::<f32>().unwrap(),
            c.as_slice::<f32>().unwrap(),
        );
        for i in 0..2 {
            for j in 0..8 {
                for k in 0..5 {
                    let want = if j < 3 {
                        xa[(i * 3 + j) * 5 + k]
                    } else if j < 4 {
                        xb[i * 5 + k]
                    } else {
                        xc[(i * 4 + j - 4) * 5 + k]
                    };
                    assert_eq!(ys[(i * 8 + j) * 5 + k], want);
                }
            }
        }
    }

    #[test]
    fn concat_errors() {
        let a = Tensor::new(vec![2, 3], vec![1i32; 6]).unwrap();
        let b = Tensor::new(vec![3, 3], vec![2i32; 9]).unwrap();
        let f = Tensor::new(vec![2, 3], vec![1.0f32; 6]).unwrap();
        assert!(Concat { axis: 1 }.eval(&[Some(&a), Some(&b)]).is_err());
        assert!(Concat { axis: 0 }.eval(&[Some(&a), Some(&f)]).is_err());
        assert!(Concat { axis: 2 }.eval(&[Some(&a), Some(&b)]).is_err());
        let y = Concat { axis: 0 }.eval(&[Some(&a), Some(&b)]).unwrap();
        assert_eq!(y[0].shape(), &[5, 3]);
    }

    fn split(
        axis: i64,
        parts: Parts,
        outputs: usize,
        inputs: &[Option<&Tensor>],
    ) -> Result<Vec<Tensor>, OpError> {
        Split {
            axis,
            parts,
            outputs,
        }
        .eval(inputs)
    }

    #[test]
    fn split_variants() {
        let x = Rng::new(5).tensor(&[3, 7]);
        let xs = x.as_slice::<f32>().unwrap();
        let sizes = Tensor::new(vec![3], vec![2i64, 0, 5]).unwrap();
        let y = split(
            -1,
            Parts::Input { num_outputs: None },
            3,
            &[Some(&x), Some(&sizes)],
        )
        .unwrap();
        assert_eq!(
            y.iter().map(|t| t.shape()[1]).collect::<Vec<_>>(),
            vec![2, 0, 5]
        );
        for r in 0..3 {
            for c in 0..5 {
                assert_eq!(
                    y[2].as_slice::<f32>().unwrap()[r * 5 + c],
                    xs[r * 7 + 2 + c]
                );
            }
        }
        // num_outputs: ceil(7 / 3) = 3 → 3, 3, 1.
        let y = split(
            1,
            Parts::Input {
                num_outputs: Some(3),
            },
            3,
            &[Some(&x)],
        )
        .unwrap();
        assert_eq!(
            y.iter().map(|t| t.shape()[1]).collect::<Vec<_>>(),
            vec![3, 3, 1]
        );
        assert_eq!(y[2].as_slice::<f32>().unwrap(), &[xs[6], xs[13], xs[20]]);
        let y = split(0, Parts::Attr(None), 3, &[Some(&x)]).unwrap();
        assert_eq!(y[1].as_slice::<f32>().unwrap(), &xs[7..14]);
        assert!(split(1, Parts::Attr(None), 2, &[Some(&x)]).is_err());
        assert!(split(1, Parts::Attr(Some(vec![3, 3])), 2, &[Some(&x)]).is_err());
        assert!(split(1, Parts::Attr(Some(vec![8, -1])), 2, &[Some(&x)]).is_err());
        assert!(split(2, Parts::Attr(None), 1, &[Some(&x)]).is_err());
    }

    #[test]
    fn uneven_default_split_is_unknown_in_inference_and_an_error_in_eval() {
        let op = Split {
            axis: 0,
            parts: Parts::Input {
                num_outputs: Some(4),
            },
            outputs: 4,
        };
        let ty = TensorType::fixed(crate::DType::F32, &[5, 2]);
        let out = op
            .infer(&[Some(InferInput {
                ty: &ty,
                value: None,
            })])
            .unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].shape, Some(vec![Dim::Unknown, Dim::Fixed(2)]));
        let x = Rng::new(6).tensor(&[5, 2]);
        assert!(op.eval(&[Some(&x)]).is_err());
        let ty = TensorType::fixed(crate::DType::F32, &[7, 2]);
        let out = op
            .infer(&[Some(InferInput {
                ty: &ty,
                value: None,
            })])
            .unwrap();
        let dims: Vec<_> = out
            .iter()
            .map(|t| t.shape.as_ref().unwrap()[0].clone())
            .collect();
        assert_eq!(
            dims,
            vec![Dim::Fixed(2), Dim::Fixed(2), Dim::Fixed(2), Dim::Fixed(1)]
        );
    }
}
