//! Softmax, LogSoftmax and Hardmax.
//!
//! Before opset 13 the input is coerced to 2-D at `axis` (default 1): the operator works on
//! rows of `prod(shape[axis..])` elements. From opset 13 it works along the single axis
//! `axis` (default -1). Values are computed in f64 with the row maximum subtracted, then
//! rounded to the input's float type.

use crate::dispatch_float;
use crate::kernels::axis::Lanes;
use crate::operator::{arg, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, float, infer_same, norm_axis};
use crate::ops::compute_util::{
    dims, finish, index_dtype, input, konst, linearize, math1, math_dtype, placeholders,
    AxisReduction,
};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::{Element, Tensor};
use hidet_ir::compute::{grid, ComputeDef, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;
use hidet_ir::intrinsic::MathFunc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Softmax,
    LogSoftmax,
    Hardmax,
}

/// A normalization along an axis (or, before opset 13, over the trailing axes).
#[derive(Debug)]
struct Softmax {
    kind: Kind,
    axis: i64,
    /// Opset < 13: flatten `shape[axis..]` into one row.
    coerce_2d: bool,
}

/// Registers Softmax, LogSoftmax and Hardmax.
pub fn register(r: &mut Registry) {
    for (name, kind) in [
        ("Softmax", Kind::Softmax),
        ("LogSoftmax", Kind::LogSoftmax),
        ("Hardmax", Kind::Hardmax),
    ] {
        r.register("", name, 1..=12, move |c| {
            Ok(Box::new(Softmax {
                kind,
                axis: c.attrs.int_or("axis", 1)?,
                coerce_2d: true,
            }))
        });
        r.register("", name, 13..=LATEST_OPSET, move |c| {
            Ok(Box::new(Softmax {
                kind,
                axis: c.attrs.int_or("axis", -1)?,
                coerce_2d: false,
            }))
        });
    }
}

impl Operator for Softmax {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let out = infer_same(inputs, float)?;
        if let Some(rank) = out[0].rank() {
            norm_axis(self.axis, rank)?;
        }
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let dt = x.dtype();
        let axis = norm_axis(self.axis, x.rank())?;
        let lanes = if self.coerce_2d {
            Lanes::spanning(x.shape(), axis, x.rank())?
        } else {
            Lanes::along(x.shape(), axis)?
        };
        let out = dispatch_float!(dt, T => {
            let xs: Vec<f64> = x.as_slice::<T>()?.iter().map(|v| v.to_f64()).collect();
            let ys = self.lanes(&xs, &lanes);
            Tensor::new(x.shape().to_vec(), ys.into_iter().map(T::from_f64).collect::<Vec<T>>())?
        }, else return Err(OpError::DType { index: 0, dtype: dt }));
        Ok(vec![out])
    }

    /// Reductions over the normalized axes (the trailing ones before opset 13) into one value
    /// per row, then a grid over the input's shape reading its row's values — the
    /// "reduce, then a grid over [rows, cols]" pattern that the rule-based CPU scheduler
    /// runs as one kernel, vectorized when the axis is the last. Softmax and LogSoftmax:
    /// the row maximum, the sum of `exp(x - max)`, then `exp(x - max) / sum` or
    /// `x - max - log(sum)`. Hardmax: the row maximum, the first position holding it, then
    /// one-hot (a NaN first element wins and later NaNs are ignored, like `eval`; Hardmax
    /// keeps NaN out of its `max`, so either NaN behaviour of the IR's `max` gives that).
    /// Math in f32 for f16/bf16/f32 inputs. A row with a NaN is NaN for Softmax and
    /// LogSoftmax.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, float)?;
        let rank = x.shape.len();
        let axis = norm_axis(self.axis, rank)?;
        let red = if self.coerce_2d {
            AxisReduction::trailing(x.shape, axis, false)
        } else {
            let mask: Vec<bool> = (0..rank).map(|d| d == axis).collect();
            AxisReduction::new(x.shape, &mask, false)
        };
        let dt = x.dtype.to_ir();
        let t = math_dtype(dt);
        let vars = placeholders(inputs);
        let xv = vars[0].clone();
        let read = |i: &[Expr]| {
            let v = xv.at(i.to_vec());
            if t == dt {
                v
            } else {
                v.cast(t)
            }
        };
        let hardmax = self.kind == Kind::Hardmax;
        let (m, m_node) = red.node("max", t, ReduceKind::Max, |i| {
            if hardmax {
                let v = read(i);
                Expr::select(
                    math1(MathFunc::IsNan, v.clone()),
                    Expr::float_of(f64::NEG_INFINITY, t),
                    v,
                )
            } else {
                read(i)
            }
        });
        let row_max = |i: &[Expr]| m.at(red.row_index(i));
        let (stat, stat_node) = if self.kind == Kind::Hardmax {
            let reduce_shape = red.reduce_shape();
            let position = |i: &[Expr]| linearize(&red.reduced_index(i), &reduce_shape);
            let ty = index_dtype(red.count());
            let past_end = Expr::int_of(red.count() as i64, ty);
            red.node("first", ty, ReduceKind::Min, |i| {
                Expr::select(read(i).eq(row_max(i)), position(i), past_end)
            })
        } else {
            red.node("sum", t, ReduceKind::Sum, |i| (read(i) - row_max(i)).exp())
        };
        let (y, y_node) = grid("y", dt, dims(x.shape), |i| {
            let row = red.row_index(i);
            let value = match self.kind {
                Kind::Softmax => (read(i) - row_max(i)).exp() / stat.at(row),
                Kind::LogSoftmax => read(i) - row_max(i) - math1(MathFunc::Log, stat.at(row)),
                Kind::Hardmax => {
                    let zeros = vec![Expr::int(0); red.reduce_shape().len()];
                    let first_is_nan = math1(MathFunc::IsNan, read(&red.input_index(&row, &zeros)));
                    let position = linearize(&red.reduced_index(i), &red.reduce_shape());
                    let ty = position.dtype().unwrap_or(DataType::I32);
                    let first = Expr::select(first_is_nan, Expr::int_of(0, ty), stat.at(row));
                    Expr::select(position.eq(first), konst(1.0, t), konst(0.0, t))
                }
            };
            if t == dt {
                value
            } else {
                value.cast(dt)
            }
        });
        finish(
            vars,
            vec![(m, m_node), (stat, stat_node), (y.clone(), y_node)],
            vec![y],
        )
        .map(Some)
    }
}

impl Softmax {
    /// Applies the operator to every lane of `xs`.
    fn lanes(&self, xs: &[f64], lanes: &Lanes) -> Vec<f64> {
        let mut ys = vec![0.0; xs.len()];
        for lane in 0..lanes.count() {
            let at = |k: usize| lanes.at(lane, k);
            let (mut max, mut arg_max) = (f64::NEG_INFINITY, 0usize);
            for k in 0..lanes.len {
                let v = xs[at(k)];
                if v > max || (k == 0 && v.is_nan()) {
                    max = v;
                    arg_max = k;
                }
            }
            if self.kind == Kind::Hardmax {
                if lanes.len > 0 {
                    ys[at(arg_max)] = 1.0;
                }
                continue;
            }
            let sum: f64 = (0..lanes.len).map(|k| (xs[at(k)] - max).exp()).sum();
            for k in 0..lanes.len {
                let d = xs[at(k)] - max;
                ys[at(k)] = match self.kind {
                    Kind::LogSoftmax => d - sum.ln(),
                    _ => d.exp() / sum,
                };
            }
        }
        ys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::reduce::tests::{random, unravel};

    fn tensor(shape: &[usize], seed: u64, scale: f64) -> Tensor {
        let n = shape.iter().product();
        Tensor::new(
            shape.to_vec(),
            random(seed, n)
                .into_iter()
                .map(|v| (v * scale) as f32)
                .collect(),
        )
        .unwrap()
    }

    /// Float64 reference: groups elements into rows by multi-index, softmax over each row.
    fn reference(kind: Kind, x: &Tensor, axis: usize, coerce: bool) -> Vec<f64> {
        let shape = x.shape();
        let v = x.to_f64_vec();
        // Row key of each element: its index with the reduced axes removed.
        let key = |i: usize| -> Vec<usize> {
            let idx = unravel(i, shape);
            idx.iter()
                .enumerate()
                .filter(|&(d, _)| if coerce { d < axis } else { d != axis })
                .map(|(_, &j)| j)
                .collect()
        };
        let mut rows: std::collections::BTreeMap<Vec<usize>, Vec<usize>> = Default::default();
        for i in 0..v.len() {
            rows.entry(key(i)).or_default().push(i);
        }
        let mut out = vec![0.0; v.len()];
        for members in rows.values() {
            let vals: Vec<f64> = members.iter().map(|&i| v[i]).collect();
            let total: f64 = vals.iter().map(|a| a.exp()).sum();
            let first_max = (0..vals.len()).fold(0, |b, k| if vals[k] > vals[b] { k } else { b });
            for (k, &i) in members.iter().enumerate() {
                out[i] = match kind {
                    Kind::Softmax => vals[k].exp() / total,
                    Kind::LogSoftmax => vals[k] - total.ln(),
                    Kind::Hardmax => (k == first_max) as u8 as f64,
                };
            }
        }
        out
    }

    #[test]
    fn matches_reference_single_axis_and_coerced() {
        let x = tensor(&[3, 4, 5], 21, 3.0);
        for kind in [Kind::Softmax, Kind::LogSoftmax, Kind::Hardmax] {
            for (axis, coerce_2d) in [
                (-1i64, false),
                (0, false),
                (1, false),
                (1, true),
                (0, true),
                (-1, true),
            ] {
                let op = Softmax {
                    kind,
                    axis,
                    coerce_2d,
                };
                let y = op.eval(&[Some(&x)]).unwrap().remove(0);
                assert_eq!(y.shape(), x.shape());
                let want = reference(kind, &x, norm_axis(axis, 3).unwrap(), coerce_2d);
                for (g, w) in y.to_f64_vec().iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
                        "{kind:?} axis {axis} coerce {coerce_2d}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn large_values_do_not_overflow_and_ties_pick_first() {
        let x = Tensor::new(vec![1, 3], vec![1000.0f64, 1000.0, 999.0]).unwrap();
        let y = Softmax {
            kind: Kind::Softmax,
            axis: -1,
            coerce_2d: false,
        }
        .eval(&[Some(&x)])
        .unwrap()
        .remove(0);
        let e = (-1.0f64).exp();
        let want = [1.0 / (2.0 + e), 1.0 / (2.0 + e), e / (2.0 + e)];
        for (g, w) in y.as_slice::<f64>().unwrap().iter().zip(want) {
            assert!((g - w).abs() < 1e-12);
        }
        let h = Softmax {
            kind: Kind::Hardmax,
            axis: 1,
            coerce_2d: false,
        }
        .eval(&[Some(&x)])
        .unwrap()
        .remove(0);
        assert_eq!(h.as_slice::<f64>().unwrap(), &[1.0, 0.0, 0.0]);
    }

    #[test]
    fn rejects_bad_axis_and_int_input() {
        let x = tensor(&[2, 3], 2, 1.0);
        assert!(matches!(
            Softmax {
                kind: Kind::Softmax,
                axis: 2,
                coerce_2d: false
            }
            .eval(&[Some(&x)]),
            Err(OpError::Invalid(_))
        ));
        let i = Tensor::new(vec![2], vec![1i32, 2]).unwrap();
        assert!(matches!(
            Softmax {
                kind: Kind::Softmax,
                axis: 0,
                coerce_2d: false
            }
            .eval(&[Some(&i)]),
            Err(OpError::DType {
                dtype: DType::I32,
                ..
            })
        ));
        assert!(Softmax {
            kind: Kind::Hardmax,
            axis: 0,
            coerce_2d: false
        }
        .eval(&[])
        .is_err());
    }
}
