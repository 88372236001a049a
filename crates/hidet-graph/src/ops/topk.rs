//! TopK: the `k` largest (or smallest) elements along an axis and their indices.
//!
//! `k` is an attribute before opset 10 and input #1 from then on; `largest` and `sorted`
//! exist from opset 11. Outputs are always sorted (a valid order for `sorted = 0` too); equal
//! values keep ascending index order, as the ONNX spec requires. NaN ranks above every
//! number.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::dispatch_numeric;
use crate::dtype::DType;
use crate::kernels::axis::Lanes;
use crate::operator::{arg, infer_arg, infer_opt, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, norm_axis, numeric};
use crate::ops::reduce::flag;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};

/// TopK; `k: None` means input #1.
#[derive(Debug)]
struct TopK {
    k: Option<i64>,
    axis: i64,
    largest: bool,
}

/// Registers TopK.
pub fn register(r: &mut Registry) {
    r.register("", "TopK", 1..=9, |c| {
        Ok(Box::new(TopK {
            k: Some(c.attrs.req_int("k")?),
            axis: c.attrs.int_or("axis", -1)?,
            largest: true,
        }))
    });
    r.register("", "TopK", 10..=LATEST_OPSET, |c| {
        // `sorted` is validated only: sorted output satisfies both settings.
        flag(c, "sorted", 1)?;
        Ok(Box::new(TopK {
            k: None,
            axis: c.attrs.int_or("axis", -1)?,
            largest: flag(c, "largest", 1)?,
        }))
    });
}

/// The `K` input: an integer tensor with exactly one non-negative value.
fn k_value(t: &Tensor) -> Result<i64, OpError> {
    match (
        t.dtype().is_int() && t.rank() <= 1,
        t.to_i64_vec().as_slice(),
    ) {
        (true, &[k]) => Ok(k),
        _ => Err(OpError::Invalid(format!(
            "TopK K must be one integer, got {}{:?}",
            t.dtype(),
            t.shape()
        ))),
    }
}

/// Total order used for ranking: NaN above everything, NaNs equal to each other.
fn rank_cmp<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    match a.partial_cmp(b) {
        Some(o) => o,
        None => {
            let a_nan = a.partial_cmp(a).is_none();
            let b_nan = b.partial_cmp(b).is_none();
            a_nan.cmp(&b_nan)
        }
    }
}

impl TopK {
    fn k(&self, inputs_k: Option<&Tensor>) -> Result<i64, OpError> {
        match (self.k, inputs_k) {
            (Some(k), _) => Ok(k),
            (None, Some(t)) => k_value(t),
            (None, None) => Err(OpError::MissingInput(1)),
        }
    }

    /// The `k` best elements of every lane and their indices, best first: one pass over the
    /// lane keeps the `k` best seen so far in a heap whose top is the worst of them, so an
    /// element that does not make it costs one comparison. Ranked by value, then by ascending
    /// index, a total order, so the result is the one a stable sort would give.
    fn select<T: Element>(&self, xs: &[T], lanes: &Lanes, k: usize) -> (Vec<T>, Vec<i64>) {
        let n = lanes.count() * k;
        let (mut vals, mut idxs) = (vec![T::default(); n], vec![0i64; n]);
        let out = Lanes {
            outer: lanes.outer,
            len: k,
            inner: lanes.inner,
        };
        for lane in 0..lanes.count() {
            if k == 0 {
                continue;
            }
            let mut kept: BinaryHeap<Ranked<T>> = BinaryHeap::with_capacity(k);
            for index in 0..lanes.len {
                let candidate = Ranked {
                    value: xs[lanes.at(lane, index)],
                    index,
                    largest: self.largest,
                };
                if kept.len() < k {
                    kept.push(candidate);
                } else if let Some(mut worst) = kept.peek_mut() {
                    if candidate < *worst {
                        *worst = candidate;
                    }
                }
            }
            for (j, ranked) in kept.into_sorted_vec().into_iter().enumerate() {
                vals[out.at(lane, j)] = ranked.value;
                idxs[out.at(lane, j)] = ranked.index as i64;
            }
        }
        (vals, idxs)
    }
}

/// An element of a lane, ordered best first: by value ([`rank_cmp`], descending when
/// `largest`), then by ascending index.
struct Ranked<T> {
    value: T,
    index: usize,
    largest: bool,
}

impl<T: PartialOrd> Ord for Ranked<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        let by_value = rank_cmp(&self.value, &other.value);
        let by_value = if self.largest {
            by_value.reverse()
        } else {
            by_value
        };
        by_value.then(self.index.cmp(&other.index))
    }
}

impl<T: PartialOrd> PartialOrd for Ranked<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T: PartialOrd> PartialEq for Ranked<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<T: PartialOrd> Eq for Ranked<T> {}

impl Operator for TopK {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, numeric)?;
        let k = match self.k {
            Some(k) => Some(k),
            None => infer_opt(inputs, 1)
                .and_then(|a| a.value)
                .map(k_value)
                .transpose()?,
        };
        let shape = match &x.ty.shape {
            Some(dims) => {
                let axis = norm_axis(self.axis, dims.len())?;
                let mut out = dims.clone();
                out[axis] = match k {
                    Some(k) if k >= 0 => Dim::Fixed(k as usize),
                    Some(k) => return Err(OpError::Invalid(format!("TopK k = {k} is negative"))),
                    None => Dim::Unknown,
                };
                Some(out)
            }
            None => None,
        };
        Ok(vec![
            TensorType {
                dtype: x.ty.dtype,
                shape: shape.clone(),
            },
            TensorType {
                dtype: DType::I64,
                shape,
            },
        ])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let k = self.k(if self.k.is_none() {
            Some(arg(inputs, 1)?)
        } else {
            None
        })?;
        let axis = norm_axis(self.axis, x.rank())?;
        let lanes = Lanes::along(x.shape(), axis)?;
        let k = usize::try_from(k)
            .ok()
            .filter(|&k| k <= lanes.len)
            .ok_or_else(|| {
                OpError::Invalid(format!("TopK k = {k} is outside [0, {}]", lanes.len))
            })?;
        let mut shape = x.shape().to_vec();
        shape[axis] = k;
        let dt = x.dtype();
        dispatch_numeric!(dt, T => {
            let (vals, idxs) = self.select(x.as_slice::<T>()?, &lanes, k);
            Ok(vec![Tensor::new(shape.clone(), vals)?, Tensor::new(shape, idxs)?])
        }, else Err(OpError::DType { index: 0, dtype: dt }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reduce::tests::random;

    fn run(largest: bool, axis: i64, x: &Tensor, k: i64) -> Result<(Tensor, Tensor), OpError> {
        let kt = Tensor::new(vec![1], vec![k]).unwrap();
        let mut out = TopK {
            k: None,
            axis,
            largest,
        }
        .eval(&[Some(x), Some(&kt)])?;
        let i = out.remove(1);
        Ok((out.remove(0), i))
    }

    #[test]
    fn ties_keep_ascending_index_order() {
        let x = Tensor::new(vec![2, 5], vec![3i32, 1, 3, 2, 3, 0, -1, 0, 5, 0]).unwrap();
        let (v, i) = run(true, 1, &x, 3).unwrap();
        assert_eq!(v.as_slice::<i32>().unwrap(), &[3, 3, 3, 5, 0, 0]);
        assert_eq!(i.as_slice::<i64>().unwrap(), &[0, 2, 4, 3, 0, 2]);
        let (v, i) = run(false, -1, &x, 2).unwrap();
        assert_eq!(v.as_slice::<i32>().unwrap(), &[1, 2, -1, 0]);
        assert_eq!(i.as_slice::<i64>().unwrap(), &[1, 3, 1, 0]);
    }

    #[test]
    fn selection_matches_a_stable_sort_on_long_lanes_with_ties_and_nans() {
        // Lanes of 5003 elements drawn from 17 integers and NaN (many ties), along a middle
        // axis; the reference ranks each lane with a stable sort.
        let (outer, len, inner) = (2usize, 5003usize, 3usize);
        let v: Vec<f32> = random(9, outer * len * inner)
            .into_iter()
            .map(|f| {
                let bucket = ((f + 1.0) * 6.0).floor();
                if bucket >= 11.0 {
                    f32::NAN
                } else {
                    bucket as f32
                }
            })
            .collect();
        let x = Tensor::new(vec![outer, len, inner], v.clone()).unwrap();
        for largest in [true, false] {
            for k in [0usize, 1, 37, len] {
                let (vals, idx) = run(largest, 1, &x, k as i64).unwrap();
                let (vals, idx) = (
                    vals.as_slice::<f32>().unwrap(),
                    idx.as_slice::<i64>().unwrap(),
                );
                for o in 0..outer {
                    for i in 0..inner {
                        let at = |m: usize| v[(o * len + m) * inner + i];
                        let mut order: Vec<usize> = (0..len).collect();
                        order.sort_by(|&a, &b| {
                            let c = rank_cmp(&at(a), &at(b));
                            if largest {
                                c.reverse()
                            } else {
                                c
                            }
                        });
                        for (j, &m) in order.iter().take(k).enumerate() {
                            let out = (o * k + j) * inner + i;
                            assert_eq!(idx[out], m as i64, "largest {largest} k {k} lane {o},{i}");
                            assert_eq!(vals[out].to_bits(), at(m).to_bits());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn matches_brute_force_selection_on_odd_shape() {
        let (a, b, c) = (3usize, 7usize, 4usize);
        let v: Vec<f32> = random(5, a * b * c).into_iter().map(|f| f as f32).collect();
        let x = Tensor::new(vec![a, b, c], v.clone()).unwrap();
        for largest in [true, false] {
            let (vals, idx) = run(largest, -2, &x, 4).unwrap();
            assert_eq!(vals.shape(), &[3, 4, 4]);
            let (vals, idx) = (
                vals.as_slice::<f32>().unwrap(),
                idx.as_slice::<i64>().unwrap(),
            );
            for i in 0..a {
                for l in 0..c {
                    // Repeatedly pick the best unused element.
                    let mut used = vec![false; b];
                    for j in 0..4 {
                        let mut best: Option<usize> = None;
                        for m in 0..b {
                            let better = |p: usize| {
                                if largest {
                                    v[(i * b + m) * c + l] > v[(i * b + p) * c + l]
                                } else {
                                    v[(i * b + m) * c + l] < v[(i * b + p) * c + l]
                                }
                            };
                            if !used[m] && best.is_none_or(better) {
                                best = Some(m);
                            }
                        }
                        let m = best.unwrap();
                        used[m] = true;
                        assert_eq!(idx[(i * 4 + j) * c + l], m as i64);
                        assert_eq!(vals[(i * 4 + j) * c + l], v[(i * b + m) * c + l]);
                    }
                }
            }
        }
    }

    #[test]
    fn errors_and_attribute_version() {
        let x = Tensor::new(vec![3], vec![1.5f64, -2.0, 0.5]).unwrap();
        assert!(run(true, 0, &x, 4).is_err());
        assert!(run(true, 0, &x, -1).is_err());
        assert!(run(true, 1, &x, 1).is_err());
        assert!(matches!(
            TopK {
                k: None,
                axis: 0,
                largest: true
            }
            .eval(&[Some(&x)]),
            Err(OpError::MissingInput(1))
        ));
        let out = TopK {
            k: Some(2),
            axis: 0,
            largest: true,
        }
        .eval(&[Some(&x)])
        .unwrap();
        assert_eq!(out[0].as_slice::<f64>().unwrap(), &[1.5, 0.5]);
        assert_eq!(out[1].as_slice::<i64>().unwrap(), &[0, 2]);
        let (v, _) = run(true, 0, &x, 0).unwrap();
        assert_eq!(v.shape(), &[0]);
    }
}
