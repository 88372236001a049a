//! Rank-changing views: Flatten, Squeeze, Unsqueeze. None of them moves data; the output
//! shares the input's buffer with a new shape.

use crate::operator::{
    arg, infer_arg, infer_opt, opt_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator,
};
use crate::ops::common::int_list;
use crate::ops::compute_util::{grid_def, input, opt_input, placeholders, reshape_index};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{checked_numel, Tensor};

/// Flatten to 2-D around `axis` (`-rank..=rank`).
#[derive(Debug)]
struct Flatten {
    axis: i64,
}

/// Where a Squeeze/Unsqueeze gets its axes.
#[derive(Debug, Clone)]
enum Axes {
    /// The `axes` attribute (opsets before 13); `None` when absent.
    Attr(Option<Vec<i64>>),
    /// Input #1 (opset 13+), optional for Squeeze.
    Input,
}

/// Removes size-1 dimensions (the listed ones, or all of them).
#[derive(Debug)]
struct Squeeze {
    axes: Axes,
}

/// Inserts size-1 dimensions at the listed output positions.
#[derive(Debug)]
struct Unsqueeze {
    axes: Axes,
}

/// Registers Flatten, Squeeze and Unsqueeze.
pub fn register(r: &mut Registry) {
    r.register("", "Flatten", 1..=LATEST_OPSET, |c| {
        Ok(Box::new(Flatten {
            axis: c.attrs.int_or("axis", 1)?,
        }))
    });
    r.register("", "Squeeze", 1..=12, |c| {
        Ok(Box::new(Squeeze {
            axes: Axes::Attr(c.attrs.ints("axes")?.cloned()),
        }))
    });
    r.register("", "Squeeze", 13..=LATEST_OPSET, |_| {
        Ok(Box::new(Squeeze { axes: Axes::Input }))
    });
    r.register("", "Unsqueeze", 1..=12, |c| {
        let axes = c
            .attrs
            .ints("axes")?
            .cloned()
            .ok_or_else(|| OpError::attr("axes", "required attribute is missing"))?;
        Ok(Box::new(Unsqueeze {
            axes: Axes::Attr(Some(axes)),
        }))
    });
    r.register("", "Unsqueeze", 13..=LATEST_OPSET, |_| {
        Ok(Box::new(Unsqueeze { axes: Axes::Input }))
    });
}

/// The product of `dims`: fixed when all are fixed, the symbol when it is the only non-1
/// factor, otherwise unknown.
pub(crate) fn dim_product(dims: &[Dim]) -> Dim {
    let mut fixed = 1usize;
    let mut other: Option<&Dim> = None;
    let mut others = 0;
    for d in dims {
        match d {
            Dim::Fixed(n) => match fixed.checked_mul(*n) {
                Some(p) => fixed = p,
                None => return Dim::Unknown,
            },
            d => {
                others += 1;
                other = Some(d);
            }
        }
    }
    match (others, other) {
        (0, _) => Dim::Fixed(fixed),
        (1, Some(d)) if fixed == 1 => d.clone(),
        _ if fixed == 0 => Dim::Fixed(0),
        _ => Dim::Unknown,
    }
}

/// Normalizes `axes` against `rank` (negative counts from the end) and rejects duplicates.
pub(crate) fn norm_axes(axes: &[i64], rank: usize, op: &str) -> Result<Vec<usize>, OpError> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = crate::ops::common::norm_axis(a, rank).map_err(|_| {
            OpError::Invalid(format!("{op}: axis {a} is out of range for rank {rank}"))
        })?;
        if out.contains(&n) {
            return Err(OpError::Invalid(format!(
                "{op}: axis {a} is repeated in {axes:?}"
            )));
        }
        out.push(n);
    }
    Ok(out)
}

impl Flatten {
    fn split(&self, rank: usize) -> Result<usize, OpError> {
        let r = rank as i64;
        let a = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        };
        if !(0..=r).contains(&a) {
            return Err(OpError::Invalid(format!(
                "Flatten: axis {} is out of range for rank {rank}",
                self.axis
            )));
        }
        Ok(a as usize)
    }
}

impl Operator for Flatten {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let shape = match &x.ty.shape {
            Some(d) => {
                let a = self.split(d.len())?;
                Some(vec![dim_product(&d[..a]), dim_product(&d[a..])])
            }
            None => Some(vec![Dim::Unknown, Dim::Unknown]),
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let a = self.split(x.rank())?;
        let outer = checked_numel(&x.shape()[..a])
            .ok_or_else(|| OpError::Shape("Flatten: size overflow".into()))?;
        let inner = checked_numel(&x.shape()[a..])
            .ok_or_else(|| OpError::Shape("Flatten: size overflow".into()))?;
        Ok(vec![x.reshape(vec![outer, inner])?])
    }

    /// `out[i] = x[reshape_index(i)]` over `[outer, inner]`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let a = self.split(x.shape.len())?;
        let outer = checked_numel(&x.shape[..a])
            .ok_or_else(|| OpError::Shape("Flatten: size overflow".into()))?;
        let inner = checked_numel(&x.shape[a..])
            .ok_or_else(|| OpError::Shape("Flatten: size overflow".into()))?;
        reshaped(inputs, x.shape, &[outer, inner]).map(Some)
    }
}

/// The definition of a data-preserving reshape of input 0 (of `in_shape`) to `out_shape`.
fn reshaped(
    inputs: &[Option<ComputeInput<'_>>],
    in_shape: &[usize],
    out_shape: &[usize],
) -> Result<ComputeDef, OpError> {
    let x = input(inputs, 0)?;
    let vars = placeholders(inputs);
    grid_def(vars.clone(), x.dtype.to_ir(), out_shape, |i| {
        vars[0].at(reshape_index(i, out_shape, in_shape))
    })
}

impl Axes {
    /// The axes for evaluation: attribute, input #1, or `None` (absent).
    fn eval(&self, inputs: &[Option<&Tensor>], op: &str) -> Result<Option<Vec<i64>>, OpError> {
        match self {
            Axes::Attr(a) => Ok(a.clone()),
            Axes::Input => opt_arg(inputs, 1)
                .map(|t| int_list(t, &format!("{op} axes")))
                .transpose(),
        }
    }

    /// The axes for a compute definition: like [`Axes::eval`], with `Err(())` when input #1
    /// is present but its value is unknown.
    fn compute(
        &self,
        inputs: &[Option<ComputeInput<'_>>],
        op: &str,
    ) -> Result<Result<Option<Vec<i64>>, ()>, OpError> {
        match self {
            Axes::Attr(a) => Ok(Ok(a.clone())),
            Axes::Input => match opt_input(inputs, 1) {
                None => Ok(Ok(None)),
                Some(ComputeInput { value: Some(v), .. }) => {
                    Ok(Ok(Some(int_list(v, &format!("{op} axes"))?)))
                }
                Some(_) => Ok(Err(())),
            },
        }
    }

    /// The axes for inference: `Ok(None)` if absent, `Err(len)` if present but unknown, where
    /// `len` is their count if known.
    fn infer(
        &self,
        inputs: &[Option<InferInput<'_>>],
        op: &str,
    ) -> Result<Result<Option<Vec<i64>>, Option<usize>>, OpError> {
        match self {
            Axes::Attr(a) => Ok(Ok(a.clone())),
            Axes::Input => match infer_opt(inputs, 1) {
                None => Ok(Ok(None)),
                Some(InferInput { value: Some(v), .. }) => {
                    Ok(Ok(Some(int_list(v, &format!("{op} axes"))?)))
                }
                Some(InferInput { ty, .. }) => {
                    Ok(Err(ty.fixed_shape().and_then(|s| s.first().copied())))
                }
            },
        }
    }
}

/// Squeeze over dims: `axes` given (each must be 1, symbols are assumed 1) or all fixed 1s.
/// `None` when the result depends on unknown sizes.
fn squeeze_dims(dims: &[Dim], axes: Option<&[i64]>) -> Result<Option<Vec<Dim>>, OpError> {
    match axes {
        Some(axes) => {
            let axes = norm_axes(axes, dims.len(), "Squeeze")?;
            let mut out = Vec::with_capacity(dims.len());
            for (i, d) in dims.iter().enumerate() {
                if axes.contains(&i) {
                    if let Dim::Fixed(n) = d {
                        if *n != 1 {
                            return Err(OpError::Shape(format!(
                                "Squeeze: dimension {i} has size {n}, not 1"
                            )));
                        }
                    }
                } else {
                    out.push(d.clone());
                }
            }
            Ok(Some(out))
        }
        None => {
            if dims.iter().any(|d| d.fixed().is_none()) {
                return Ok(None);
            }
            Ok(Some(
                dims.iter()
                    .filter(|d| **d != Dim::Fixed(1))
                    .cloned()
                    .collect(),
            ))
        }
    }
}

fn fixed_dims(shape: &[usize]) -> Vec<Dim> {
    shape.iter().map(|&d| Dim::Fixed(d)).collect()
}

fn to_usize(dims: &[Dim]) -> Result<Vec<usize>, OpError> {
    dims.iter()
        .map(Dim::fixed)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| OpError::Shape("unresolved dimension".into()))
}

impl Operator for Squeeze {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let shape = match (&x.ty.shape, self.axes.infer(inputs, "Squeeze")?) {
            (Some(d), Ok(axes)) => squeeze_dims(d, axes.as_deref())?,
            (Some(d), Err(Some(k))) if k <= d.len() => Some(vec![Dim::Unknown; d.len() - k]),
            _ => None,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let axes = self.axes.eval(inputs, "Squeeze")?;
        let dims = squeeze_dims(&fixed_dims(x.shape()), axes.as_deref())?
            .ok_or_else(|| OpError::Shape("Squeeze: unresolved shape".into()))?;
        Ok(vec![x.reshape(to_usize(&dims)?)?])
    }

    /// `out[i] = x[i with the squeezed axes at 0]`; needs the axes' value.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let Ok(axes) = self.axes.compute(inputs, "Squeeze")? else {
            return Ok(None);
        };
        let dims = squeeze_dims(&fixed_dims(x.shape), axes.as_deref())?
            .ok_or_else(|| OpError::Shape("Squeeze: unresolved shape".into()))?;
        reshaped(inputs, x.shape, &to_usize(&dims)?).map(Some)
    }
}

/// Unsqueeze over dims: the output has `dims.len() + axes.len()` dimensions, 1 at `axes`.
fn unsqueeze_dims(dims: &[Dim], axes: &[i64]) -> Result<Vec<Dim>, OpError> {
    let rank = dims.len() + axes.len();
    let axes = norm_axes(axes, rank, "Unsqueeze")?;
    let mut rest = dims.iter();
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        if axes.contains(&i) {
            out.push(Dim::Fixed(1));
        } else {
            out.push(
                rest.next()
                    .cloned()
                    .ok_or_else(|| OpError::Shape("Unsqueeze: rank mismatch".into()))?,
            );
        }
    }
    Ok(out)
}

impl Operator for Unsqueeze {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let shape = match (&x.ty.shape, self.axes.infer(inputs, "Unsqueeze")?) {
            (_, Ok(None)) => return Err(OpError::MissingInput(1)),
            (Some(d), Ok(Some(axes))) => Some(unsqueeze_dims(d, &axes)?),
            (Some(d), Err(Some(k))) => Some(vec![Dim::Unknown; d.len() + k]),
            _ => None,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let axes = self
            .axes
            .eval(inputs, "Unsqueeze")?
            .ok_or(OpError::MissingInput(1))?;
        let dims = unsqueeze_dims(&fixed_dims(x.shape()), &axes)?;
        Ok(vec![x.reshape(to_usize(&dims)?)?])
    }

    /// `out[i] = x[i without the inserted axes]`; needs the axes' value.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let axes = match self.axes.compute(inputs, "Unsqueeze")? {
            Ok(Some(axes)) => axes,
            Ok(None) => return Err(OpError::MissingInput(1)),
            Err(()) => return Ok(None),
        };
        let dims = unsqueeze_dims(&fixed_dims(x.shape), &axes)?;
        reshaped(inputs, x.shape, &to_usize(&dims)?).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    fn axes(v: &[i64]) -> Tensor {
        Tensor::new(vec![v.len()], v.to_vec()).unwrap()
    }

    #[test]
    fn flatten_axes_including_negative_and_rank() {
        let x = Rng::new(1).tensor(&[2, 3, 5, 7]);
        for (axis, want) in [
            (0, [1, 210]),
            (1, [2, 105]),
            (2, [6, 35]),
            (4, [210, 1]),
            (-1, [30, 7]),
            (-4, [1, 210]),
        ] {
            let y = Flatten { axis }.eval(&[Some(&x)]).unwrap().remove(0);
            assert_eq!(y.shape(), &want, "axis {axis}");
            assert_eq!(y.as_slice::<f32>().unwrap(), x.as_slice::<f32>().unwrap());
        }
        assert!(Flatten { axis: 5 }.eval(&[Some(&x)]).is_err());
        assert!(Flatten { axis: -5 }.eval(&[Some(&x)]).is_err());
    }

    #[test]
    fn flatten_infers_symbols() {
        let n: std::sync::Arc<str> = "N".into();
        let ty = TensorType {
            dtype: crate::DType::F32,
            shape: Some(vec![Dim::Symbol(n.clone()), Dim::Fixed(3), Dim::Fixed(5)]),
        };
        let out = Flatten { axis: 1 }
            .infer(&[Some(InferInput {
                ty: &ty,
                value: None,
            })])
            .unwrap();
        assert_eq!(out[0].shape, Some(vec![Dim::Symbol(n), Dim::Fixed(15)]));
    }

    #[test]
    fn squeeze_listed_all_and_errors() {
        let x = Rng::new(2).tensor(&[1, 3, 1, 5, 1]);
        let op = Squeeze { axes: Axes::Input };
        let y = op
            .eval(&[Some(&x), Some(&axes(&[0, -1]))])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[3, 1, 5]);
        assert_eq!(y.as_slice::<f32>().unwrap(), x.as_slice::<f32>().unwrap());
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[3, 5]);
        assert!(op.eval(&[Some(&x), Some(&axes(&[1]))]).is_err());
        assert!(op.eval(&[Some(&x), Some(&axes(&[0, -5]))]).is_err());
        assert!(op.eval(&[Some(&x), Some(&axes(&[5]))]).is_err());
        let old = Squeeze {
            axes: Axes::Attr(Some(vec![2])),
        };
        assert_eq!(old.eval(&[Some(&x)]).unwrap()[0].shape(), &[1, 3, 5, 1]);
    }

    #[test]
    fn unsqueeze_unsorted_negative_and_duplicates() {
        let x = Rng::new(3).tensor(&[3, 5]);
        let op = Unsqueeze { axes: Axes::Input };
        let y = op
            .eval(&[Some(&x), Some(&axes(&[3, 0]))])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[1, 3, 5, 1]);
        let y = op.eval(&[Some(&x), Some(&axes(&[-1]))]).unwrap().remove(0);
        assert_eq!(y.shape(), &[3, 5, 1]);
        assert!(op.eval(&[Some(&x), Some(&axes(&[1, 1]))]).is_err());
        assert!(op.eval(&[Some(&x), Some(&axes(&[4]))]).is_err());
        assert!(op.eval(&[Some(&x)]).is_err());
    }
}
