//! Replication: Expand (numpy broadcast to a shape) and Tile (repeat along every axis).

use crate::kernels::broadcast::{broadcast_shapes, broadcast_to};
use crate::kernels::movement::{offsets, strides, take};
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::int_list;
use crate::ops::compute_util::{broadcast_read, grid_def, input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{broadcast_dims, Dim, TensorType};
use crate::tensor::Tensor;
use hidet_ir::expr::Expr;

/// Broadcast of input 0 with the shape given by input 1 (bidirectional, like numpy).
#[derive(Debug)]
struct Expand;

/// Input 0 repeated `repeats[d]` times along each axis `d`.
#[derive(Debug)]
struct Tile;

/// Registers Expand and Tile.
pub fn register(r: &mut Registry) {
    r.register("", "Expand", 8..=LATEST_OPSET, |_| Ok(Box::new(Expand)));
    r.register("", "Tile", 6..=LATEST_OPSET, |_| Ok(Box::new(Tile)));
}

/// A non-negative size list from a 1-D integer tensor.
fn sizes(t: &Tensor, what: &str) -> Result<Vec<usize>, OpError> {
    int_list(t, what)?
        .into_iter()
        .map(|v| {
            usize::try_from(v)
                .map_err(|_| OpError::Invalid(format!("{what} has a negative value {v}")))
        })
        .collect()
}

/// Unknown dims of the length of the 1-D input `t`, if that length is fixed.
fn unknown_of_len(t: &InferInput<'_>, at_least: usize) -> Option<Vec<Dim>> {
    let n = t.ty.fixed_shape()?.first().copied()?;
    Some(vec![Dim::Unknown; n.max(at_least)])
}

impl Operator for Expand {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, s) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        let shape = match (&x.ty.shape, s.value) {
            (Some(d), Some(v)) => {
                let target: Vec<Dim> = sizes(v, "Expand shape")?
                    .into_iter()
                    .map(Dim::Fixed)
                    .collect();
                Some(broadcast_dims(d, &target).ok_or_else(|| {
                    OpError::Shape(format!("Expand: {d:?} does not broadcast to {target:?}"))
                })?)
            }
            (Some(d), None) => unknown_of_len(&s, d.len()),
            (None, _) => None,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, s) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let target = sizes(s, "Expand shape")?;
        let shape = broadcast_shapes(&[x.shape(), &target])?;
        Ok(vec![broadcast_to(x, &shape)?])
    }

    /// `out[i] = x[broadcast_index(i)]`; needs the target shape's value.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, s) = (input(inputs, 0)?, input(inputs, 1)?);
        let Some(target) = s.value else {
            return Ok(None);
        };
        let target = sizes(target, "Expand shape")?;
        let shape = broadcast_shapes(&[x.shape, &target])?;
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), &shape, |i| {
            broadcast_read(&vars[0], x.shape, i)
        })?;
        Ok(Some(def))
    }
}

impl Operator for Tile {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, r) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        let shape = match (&x.ty.shape, r.value) {
            (Some(d), Some(v)) => {
                let reps = sizes(v, "Tile repeats")?;
                if reps.len() != d.len() {
                    return Err(OpError::Shape(format!(
                        "Tile: {} repeats for rank {}",
                        reps.len(),
                        d.len()
                    )));
                }
                Some(
                    d.iter()
                        .zip(reps)
                        .map(|(d, n)| match (d, n) {
                            (_, 1) => d.clone(),
                            (_, 0) => Dim::Fixed(0),
                            (Dim::Fixed(a), n) => {
                                a.checked_mul(n).map(Dim::Fixed).unwrap_or(Dim::Unknown)
                            }
                            _ => Dim::Unknown,
                        })
                        .collect(),
                )
            }
            (Some(d), None) => Some(vec![Dim::Unknown; d.len()]),
            (None, _) => {
                r.ty.fixed_shape()
                    .and_then(|s| s.first().copied())
                    .map(|n| vec![Dim::Unknown; n])
            }
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, r) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let reps = sizes(r, "Tile repeats")?;
        if reps.len() != x.rank() {
            return Err(OpError::Shape(format!(
                "Tile: {} repeats for rank {}",
                reps.len(),
                x.rank()
            )));
        }
        let shape = x
            .shape()
            .iter()
            .zip(&reps)
            .map(|(&d, &n)| d.checked_mul(n))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| OpError::Shape("Tile: size overflow".into()))?;
        let st = strides(x.shape());
        let dims = x.shape().to_vec();
        let src = offsets(&shape, |o| {
            Ok(o.iter()
                .zip(&dims)
                .zip(&st)
                .map(|((&i, &d), &s)| (i % d) * s)
                .sum())
        })?;
        Ok(vec![take(x, shape, &src)?])
    }

    /// `out[i] = x[i % x.shape]` (axes repeated once or of size 1 skip the `%`); needs the
    /// repeats' value.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, r) = (input(inputs, 0)?, input(inputs, 1)?);
        let Some(reps) = r.value else {
            return Ok(None);
        };
        let reps = sizes(reps, "Tile repeats")?;
        if reps.len() != x.shape.len() {
            return Err(OpError::Shape(format!(
                "Tile: {} repeats for rank {}",
                reps.len(),
                x.shape.len()
            )));
        }
        let shape = x
            .shape
            .iter()
            .zip(&reps)
            .map(|(&d, &n)| d.checked_mul(n))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| OpError::Shape("Tile: size overflow".into()))?;
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), &shape, |i| {
            let j: Vec<Expr> = i
                .iter()
                .zip(x.shape.iter().zip(&reps))
                .map(|(i, (&d, &n))| match (d, n) {
                    (1, _) => Expr::int(0),
                    (_, 1) | (0, _) => i.clone(),
                    (d, _) => i % Expr::int(d as i64),
                })
                .collect();
            vars[0].at(j)
        })?;
        Ok(Some(def))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    fn list(v: &[i64]) -> Tensor {
        Tensor::new(vec![v.len()], v.to_vec()).unwrap()
    }

    #[test]
    fn expand_bidirectional() {
        let x = Rng::new(41).tensor(&[3, 1]);
        let xs = x.as_slice::<f32>().unwrap();
        let y = Expand
            .eval(&[Some(&x), Some(&list(&[2, 1, 5]))])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[2, 3, 5]);
        let ys = y.as_slice::<f32>().unwrap();
        for b in 0..2 {
            for i in 0..3 {
                for j in 0..5 {
                    assert_eq!(ys[(b * 3 + i) * 5 + j], xs[i]);
                }
            }
        }
        // A target dimension of 1 keeps the input's size.
        let y = Expand
            .eval(&[Some(&x), Some(&list(&[1, 1]))])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[3, 1]);
        assert!(Expand.eval(&[Some(&x), Some(&list(&[2, 4]))]).is_err());
        assert!(Expand.eval(&[Some(&x), Some(&list(&[-1]))]).is_err());
    }

    #[test]
    fn tile_against_loops() {
        let x = Rng::new(42).tensor(&[2, 3]);
        let xs = x.as_slice::<f32>().unwrap();
        let y = Tile
            .eval(&[Some(&x), Some(&list(&[3, 2]))])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[6, 6]);
        let ys = y.as_slice::<f32>().unwrap();
        for i in 0..6 {
            for j in 0..6 {
                assert_eq!(ys[i * 6 + j], xs[(i % 2) * 3 + j % 3]);
            }
        }
        assert_eq!(
            Tile.eval(&[Some(&x), Some(&list(&[0, 1]))]).unwrap()[0].shape(),
            &[0, 3]
        );
        assert!(Tile.eval(&[Some(&x), Some(&list(&[2]))]).is_err());
        assert!(Tile.eval(&[Some(&x), Some(&list(&[2, -1]))]).is_err());
    }
}
