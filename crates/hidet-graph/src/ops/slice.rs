//! Slice: strided sub-tensor with numpy-like clamping (`starts`/`ends`/`axes` attributes
//! before opset 10; `starts`, `ends`, `axes`, `steps` inputs from opset 10).

use crate::kernels::movement::{offsets, strides, take};
use crate::operator::{
    arg, infer_arg, infer_opt, opt_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator,
};
use crate::ops::common::int_list;
use crate::ops::compute_util::{grid_def, input, opt_input, placeholders};
use crate::ops::squeeze::norm_axes;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use hidet_ir::expr::Expr;

/// The slice parameters of opsets 1–9.
#[derive(Debug, Clone)]
struct SliceAttrs {
    starts: Vec<i64>,
    ends: Vec<i64>,
    axes: Option<Vec<i64>>,
}

/// Slice; `attrs` is `Some` before opset 10, `None` when the parameters are inputs.
#[derive(Debug)]
struct Slice {
    attrs: Option<SliceAttrs>,
}

/// Registers Slice.
pub fn register(r: &mut Registry) {
    r.register("", "Slice", 1..=9, |c| {
        let req = |n: &str| {
            c.attrs
                .ints(n)?
                .cloned()
                .ok_or_else(|| OpError::attr(n, "required attribute is missing"))
        };
        Ok(Box::new(Slice {
            attrs: Some(SliceAttrs {
                starts: req("starts")?,
                ends: req("ends")?,
                axes: c.attrs.ints("axes")?.cloned(),
            }),
        }))
    });
    r.register("", "Slice", 10..=LATEST_OPSET, |_| {
        Ok(Box::new(Slice { attrs: None }))
    });
}

/// One sliced dimension: elements `start + k * step` for `k < count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range1 {
    start: i128,
    step: i128,
    count: usize,
}

/// Clamps `start`/`end` of one axis of size `dim` like ONNX (negative values count from the
/// end; out-of-range values are clamped, to `[0, dim]` for positive steps and to
/// `[-1, dim - 1]` for negative ones) and counts the selected elements.
fn range1(dim: usize, start: i64, end: i64, step: i64) -> Result<Range1, OpError> {
    if step == 0 {
        return Err(OpError::Invalid("Slice: step must not be 0".into()));
    }
    let (d, step) = (dim as i128, step as i128);
    let (mut s, mut e) = (start as i128, end as i128);
    if s < 0 {
        s += d;
    }
    if e < 0 {
        e += d;
    }
    let count = if d == 0 {
        0
    } else if step > 0 {
        s = s.clamp(0, d);
        e = e.clamp(0, d);
        ((e - s + step - 1) / step).max(0)
    } else {
        s = s.clamp(0, d - 1);
        e = e.clamp(-1, d - 1);
        ((s - e + (-step) - 1) / (-step)).max(0)
    };
    Ok(Range1 {
        start: s,
        step,
        count: count as usize,
    })
}

/// The slice parameters as lists: starts, ends, axes (defaults to `0..len`), steps (all 1).
struct Params {
    starts: Vec<i64>,
    ends: Vec<i64>,
    axes: Option<Vec<i64>>,
    steps: Option<Vec<i64>>,
}

impl Params {
    /// Per-dimension ranges for `shape`-like dims (`None` sizes are unknown); untouched
    /// dimensions are `None` in the result.
    fn ranges(
        &self,
        rank: usize,
        dims: &[Option<usize>],
    ) -> Result<Vec<Option<Option<Range1>>>, OpError> {
        let n = self.starts.len();
        if self.ends.len() != n
            || self.axes.as_ref().is_some_and(|a| a.len() != n)
            || self.steps.as_ref().is_some_and(|s| s.len() != n)
        {
            return Err(OpError::Invalid(
                "Slice: starts, ends, axes and steps must have the same length".into(),
            ));
        }
        let axes = match &self.axes {
            Some(a) => norm_axes(a, rank, "Slice")?,
            None => {
                if n > rank {
                    return Err(OpError::Invalid(format!(
                        "Slice: {n} starts for rank {rank}"
                    )));
                }
                (0..n).collect()
            }
        };
        let mut out = vec![None; rank];
        for (i, &a) in axes.iter().enumerate() {
            let step = self.steps.as_ref().map(|s| s[i]).unwrap_or(1);
            if step == 0 {
                return Err(OpError::Invalid("Slice: step must not be 0".into()));
            }
            out[a] = Some(match dims[a] {
                Some(d) => Some(range1(d, self.starts[i], self.ends[i], step)?),
                None => None,
            });
        }
        Ok(out)
    }
}

impl Slice {
    fn params_eval(&self, inputs: &[Option<&Tensor>]) -> Result<Params, OpError> {
        if let Some(a) = &self.attrs {
            return Ok(Params {
                starts: a.starts.clone(),
                ends: a.ends.clone(),
                axes: a.axes.clone(),
                steps: None,
            });
        }
        let list = |i: usize, what: &str| -> Result<Option<Vec<i64>>, OpError> {
            opt_arg(inputs, i).map(|t| int_list(t, what)).transpose()
        };
        Ok(Params {
            starts: list(1, "Slice starts")?.ok_or(OpError::MissingInput(1))?,
            ends: list(2, "Slice ends")?.ok_or(OpError::MissingInput(2))?,
            axes: list(3, "Slice axes")?,
            steps: list(4, "Slice steps")?,
        })
    }

    /// The parameters if every present parameter input is known at import time.
    fn params_infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Option<Params>, OpError> {
        if self.attrs.is_some() {
            return self.params_eval(&[]).map(Some);
        }
        let mut vals: Vec<Option<&Tensor>> = vec![None];
        for i in 1..5 {
            match infer_opt(inputs, i) {
                None => vals.push(None),
                Some(InferInput { value: Some(v), .. }) => vals.push(Some(v)),
                Some(_) => return Ok(None),
            }
        }
        self.params_eval(&vals).map(Some)
    }
}

impl Operator for Slice {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let Some(dims) = &x.ty.shape else {
            return Ok(vec![TensorType::unknown_shape(x.ty.dtype)]);
        };
        let shape = match self.params_infer(inputs)? {
            None => vec![Dim::Unknown; dims.len()],
            Some(p) => {
                let sizes: Vec<Option<usize>> = dims.iter().map(Dim::fixed).collect();
                p.ranges(dims.len(), &sizes)?
                    .into_iter()
                    .zip(dims)
                    .map(|(r, d)| match r {
                        None => d.clone(),
                        Some(Some(r)) => Dim::Fixed(r.count),
                        Some(None) => Dim::Unknown,
                    })
                    .collect()
            }
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: Some(shape),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let p = self.params_eval(inputs)?;
        let sizes: Vec<Option<usize>> = x.shape().iter().map(|&d| Some(d)).collect();
        let ranges: Vec<Range1> = p
            .ranges(x.rank(), &sizes)?
            .into_iter()
            .zip(x.shape())
            .map(|(r, &d)| {
                r.flatten().unwrap_or(Range1 {
                    start: 0,
                    step: 1,
                    count: d,
                })
            })
            .collect();
        let shape: Vec<usize> = ranges.iter().map(|r| r.count).collect();
        let st = strides(x.shape());
        let src = offsets(&shape, |o| {
            let off: i128 = o
                .iter()
                .zip(&ranges)
                .zip(&st)
                .map(|((&i, r), &s)| (r.start + i as i128 * r.step) * s as i128)
                .sum();
            Ok(off as usize)
        })?;
        Ok(vec![take(x, shape, &src)?])
    }

    /// `out[i] = x[start + i * step]` per axis; needs the values of every present parameter
    /// input (`Ok(None)` otherwise).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let mut vals: Vec<Option<&Tensor>> = vec![None];
        if self.attrs.is_none() {
            for i in 1..5 {
                match opt_input(inputs, i) {
                    None => vals.push(None),
                    Some(ComputeInput { value: Some(v), .. }) => vals.push(Some(v)),
                    Some(_) => return Ok(None),
                }
            }
        }
        let p = self.params_eval(&vals)?;
        let sizes: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
        let ranges: Vec<Option<Range1>> = p
            .ranges(x.shape.len(), &sizes)?
            .into_iter()
            .map(Option::flatten)
            .collect();
        let shape: Vec<usize> = ranges
            .iter()
            .zip(x.shape)
            .map(|(r, &d)| r.map_or(d, |r| r.count))
            .collect();
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), &shape, |i| {
            let j: Vec<Expr> = i
                .iter()
                .zip(&ranges)
                .map(|(i, r)| match r {
                    None => i.clone(),
                    Some(r) if r.count <= 1 => Expr::int(r.start.max(0) as i64),
                    Some(r) => {
                        let scaled = if r.step == 1 {
                            i.clone()
                        } else {
                            i * Expr::int(r.step as i64)
                        };
                        if r.start == 0 {
                            scaled
                        } else {
                            scaled + Expr::int(r.start as i64)
                        }
                    }
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

    /// Python-style reference: the selected indices of `0..dim`.
    fn reference(dim: usize, start: i64, end: i64, step: i64) -> Vec<usize> {
        let d = dim as i64;
        let norm = |v: i64, lo: i64, hi: i64| {
            let v = if v < 0 { v + d } else { v };
            v.max(lo).min(hi)
        };
        let mut out = Vec::new();
        if step > 0 {
            let (mut i, e) = (norm(start, 0, d), norm(end, 0, d));
            while i < e {
                out.push(i as usize);
                i += step;
            }
        } else {
            let (mut i, e) = (norm(start, 0, d - 1), norm(end, -1, d - 1));
            while i > e {
                out.push(i as usize);
                i += step;
            }
        }
        out
    }

    #[test]
    fn range1_matches_reference() {
        let cases = [
            (10, 0, 10, 1),
            (10, 2, -1, 3),
            (10, -1, -11, -1),
            (10, -100, 100, 4),
            (10, 100, -100, -3),
            (10, 9, 0, -2),
            (7, i64::MAX, i64::MIN, -1),
            (7, i64::MIN, i64::MAX, 2),
            (7, 5, 2, 1),
            (1, 0, -1, -1),
        ];
        for (d, s, e, st) in cases {
            let r = range1(d, s, e, st).unwrap();
            let got: Vec<usize> = (0..r.count)
                .map(|k| (r.start + k as i128 * r.step) as usize)
                .collect();
            assert_eq!(got, reference(d, s, e, st), "{d} {s} {e} {st}");
        }
        assert!(range1(3, 0, 1, 0).is_err());
        assert_eq!(range1(0, 0, 5, -1).unwrap().count, 0);
    }

    #[test]
    fn slice_2d_negative_axes_and_steps() {
        let x = Rng::new(9).tensor(&[5, 7]);
        let xs = x.as_slice::<f32>().unwrap();
        let op = Slice { attrs: None };
        let y = op
            .eval(&[
                Some(&x),
                Some(&list(&[-1, 1])),
                Some(&list(&[0, 100])),
                Some(&list(&[-1, 0])),
                Some(&list(&[-2, 2])),
            ])
            .unwrap()
            .remove(0);
        let rows = reference(5, 1, 100, 2);
        let cols = reference(7, -1, 0, -2);
        assert_eq!(y.shape(), &[rows.len(), cols.len()]);
        let want: Vec<f32> = rows
            .iter()
            .flat_map(|&r| cols.iter().map(move |&c| xs[r * 7 + c]))
            .collect();
        assert_eq!(y.as_slice::<f32>().unwrap(), &want[..]);
    }

    #[test]
    fn slice_attrs_and_errors() {
        let x = Rng::new(4).tensor(&[3, 4]);
        let old = Slice {
            attrs: Some(SliceAttrs {
                starts: vec![1],
                ends: vec![3],
                axes: Some(vec![1]),
            }),
        };
        let y = old.eval(&[Some(&x)]).unwrap().remove(0);
        let xs = x.as_slice::<f32>().unwrap();
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[xs[1], xs[2], xs[5], xs[6], xs[9], xs[10]]
        );
        let op = Slice { attrs: None };
        let s = list(&[0]);
        assert!(op.eval(&[Some(&x), Some(&s)]).is_err());
        assert!(op
            .eval(&[Some(&x), Some(&s), Some(&list(&[1, 2]))])
            .is_err());
        assert!(op
            .eval(&[Some(&x), Some(&s), Some(&s), Some(&list(&[2]))])
            .is_err());
        assert!(op
            .eval(&[Some(&x), Some(&s), Some(&s), Some(&s), Some(&list(&[0]))])
            .is_err());
        let f = Tensor::new(vec![1], vec![0.0f32]).unwrap();
        assert!(op.eval(&[Some(&x), Some(&f), Some(&s)]).is_err());
    }
}
