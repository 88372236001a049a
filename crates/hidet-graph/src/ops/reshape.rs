//! Reshape and Shape.

use crate::dtype::DType;
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::int_list;
use crate::ops::compute_util::{grid_def, input, placeholders, reshape_index};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{checked_numel, Tensor};

/// Reshape with the target shape as input 1 (opset 5+); `allowzero` from opset 14.
#[derive(Debug)]
struct Reshape {
    allow_zero: bool,
}

/// Shape, optionally sliced by `start`/`end` (opset 15+).
#[derive(Debug)]
struct Shape {
    start: i64,
    end: Option<i64>,
}

/// Registers Reshape and Shape.
pub fn register(r: &mut Registry) {
    r.register("", "Reshape", 5..=LATEST_OPSET, |c| {
        let allow_zero = c.opset >= 14 && c.attrs.int_or("allowzero", 0)? != 0;
        Ok(Box::new(Reshape { allow_zero }))
    });
    r.register("", "Shape", 1..=14, |_| {
        Ok(Box::new(Shape {
            start: 0,
            end: None,
        }))
    });
    r.register("", "Shape", 15..=LATEST_OPSET, |c| {
        Ok(Box::new(Shape {
            start: c.attrs.int_or("start", 0)?,
            end: c.attrs.int("end")?.copied(),
        }))
    });
}

/// Resolves a Reshape target against the input dims (`0` copies, `-1` infers).
/// Works on `Dim`s so inference and evaluation share one implementation.
fn resolve(input: &[Dim], target: &[i64], allow_zero: bool) -> Result<Vec<Dim>, OpError> {
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &t) in target.iter().enumerate() {
        match t {
            -1 => {
                if infer_at.replace(i).is_some() {
                    return Err(OpError::Invalid(
                        "Reshape target has more than one -1".into(),
                    ));
                }
                out.push(Dim::Unknown);
            }
            0 if !allow_zero => {
                let d = input.get(i).cloned().ok_or_else(|| {
                    OpError::Shape(format!(
                        "Reshape target {target:?}: 0 at {i} beyond input rank"
                    ))
                })?;
                out.push(d);
            }
            t if t >= 0 => out.push(Dim::Fixed(t as usize)),
            t => {
                return Err(OpError::Invalid(format!(
                    "Reshape target has invalid size {t}"
                )))
            }
        }
    }
    if allow_zero && infer_at.is_some() && target.contains(&0) {
        return Err(OpError::Invalid(
            "Reshape with allowzero cannot mix 0 and -1".into(),
        ));
    }
    let total: Option<usize> = input
        .iter()
        .map(Dim::fixed)
        .collect::<Option<Vec<_>>>()
        .and_then(|v| checked_numel(&v));
    let known: Option<usize> = out
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != infer_at)
        .map(|(_, d)| d.fixed())
        .collect::<Option<Vec<_>>>()
        .and_then(|v| checked_numel(&v));
    match (infer_at, total, known) {
        (Some(i), Some(t), Some(k)) => {
            if k == 0 || t % k != 0 {
                return Err(OpError::Shape(format!(
                    "cannot reshape {t} elements to {target:?}"
                )));
            }
            out[i] = Dim::Fixed(t / k);
        }
        (None, Some(t), Some(k)) if t != k => {
            return Err(OpError::Shape(format!(
                "cannot reshape {t} elements to {target:?}"
            )));
        }
        _ => {}
    }
    Ok(out)
}

impl Operator for Reshape {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, s) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        let shape = match (s.value, &x.ty.shape) {
            (Some(v), Some(dims)) => Some(resolve(
                dims,
                &int_list(v, "Reshape shape")?,
                self.allow_zero,
            )?),
            (Some(v), None) => {
                let t = int_list(v, "Reshape shape")?;
                Some(
                    t.iter()
                        .map(|&d| {
                            if d > 0 || (d == 0 && self.allow_zero) {
                                Dim::Fixed(d as usize)
                            } else {
                                Dim::Unknown
                            }
                        })
                        .collect(),
                )
            }
            (None, _) => {
                s.ty.fixed_shape()
                    .and_then(|v| v.first().copied())
                    .map(|r| vec![Dim::Unknown; r])
            }
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, s) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let dims: Vec<Dim> = x.shape().iter().map(|&d| Dim::Fixed(d)).collect();
        let out = resolve(&dims, &int_list(s, "Reshape shape")?, self.allow_zero)?;
        let shape: Vec<usize> = out
            .iter()
            .map(Dim::fixed)
            .collect::<Option<_>>()
            .ok_or_else(|| OpError::Shape("unresolved Reshape target".into()))?;
        Ok(vec![x.reshape(shape)?])
    }

    /// `out[i] = x[unravel(linearize(i, out_shape), x_shape)]`; needs the target shape's value.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, s) = (input(inputs, 0)?, input(inputs, 1)?);
        let Some(target) = s.value else {
            return Ok(None);
        };
        let dims: Vec<Dim> = x.shape.iter().map(|&d| Dim::Fixed(d)).collect();
        let out = resolve(&dims, &int_list(target, "Reshape shape")?, self.allow_zero)?;
        let shape: Vec<usize> = out
            .iter()
            .map(Dim::fixed)
            .collect::<Option<_>>()
            .ok_or_else(|| OpError::Shape("unresolved Reshape target".into()))?;
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), &shape, |i| {
            vars[0].at(reshape_index(i, &shape, x.shape))
        })?;
        Ok(Some(def))
    }
}

impl Shape {
    fn range(&self, rank: usize) -> (usize, usize) {
        let clamp = |v: i64| -> usize {
            let v = if v < 0 { v + rank as i64 } else { v };
            v.clamp(0, rank as i64) as usize
        };
        let s = clamp(self.start);
        let e = self.end.map(clamp).unwrap_or(rank);
        (s, e.max(s))
    }
}

impl Operator for Shape {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let shape = x.ty.rank().map(|r| {
            let (s, e) = self.range(r);
            vec![Dim::Fixed(e - s)]
        });
        Ok(vec![TensorType {
            dtype: DType::I64,
            shape: shape.or(Some(vec![Dim::Unknown])),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let (s, e) = self.range(x.rank());
        let v: Vec<i64> = x.shape()[s..e].iter().map(|&d| d as i64).collect();
        Ok(vec![Tensor::new(vec![v.len()], v)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_zero_and_minus_one() {
        let x = Tensor::new(vec![2, 3, 4], (0..24).map(|i| i as f32).collect()).unwrap();
        let s = Tensor::new(vec![2], vec![0i64, -1]).unwrap();
        let y = Reshape { allow_zero: false }
            .eval(&[Some(&x), Some(&s)])
            .unwrap();
        assert_eq!(y[0].shape(), &[2, 12]);
        let bad = Tensor::new(vec![1], vec![5i64]).unwrap();
        assert!(Reshape { allow_zero: false }
            .eval(&[Some(&x), Some(&bad)])
            .is_err());
    }
}
