//! Unique (opset 11): the distinct elements of a tensor (flattened), or its distinct slices
//! along `axis`.
//!
//! Outputs: `Y` the distinct elements/slices, ascending (lexicographic for slices) when
//! `sorted` (default 1), else in order of first occurrence; `indices` the position of each
//! one's first occurrence; `inverse_indices` for every input element/slice the position of its
//! value in `Y`; `counts` the number of occurrences. Index outputs are int64. NaN is unequal
//! to everything (each NaN is its own value) and sorts last.

use std::cmp::Ordering;

use crate::dispatch_dtypes;
use crate::dtype::DType;
use crate::kernels::movement::take;
use crate::operator::{arg, infer_arg, InferInput, OpError, Operator};
use crate::ops::common::norm_axis;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};

#[derive(Debug)]
struct Unique {
    axis: Option<i64>,
    sorted: bool,
}

/// Registers Unique.
pub fn register(r: &mut Registry) {
    r.register("", "Unique", 11..=LATEST_OPSET, |c| {
        let sorted = match c.attrs.int_or("sorted", 1)? {
            0 => false,
            1 => true,
            v => return Err(OpError::attr("sorted", format!("must be 0 or 1, got {v}"))),
        };
        Ok(Box::new(Unique {
            axis: c.attrs.int("axis")?.copied(),
            sorted,
        }))
    });
}

/// Lexicographic order of two slices; NaN (unordered) sorts after everything.
fn cmp_rows<T: Element>(a: &[T], b: &[T]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match x.partial_cmp(y) {
            Some(Ordering::Equal) => {}
            Some(o) => return o,
            None => {
                // Unordered: NaN involved. Non-NaN < NaN; two NaNs compare equal for sorting.
                let (xn, yn) = (x.to_f64().is_nan(), y.to_f64().is_nan());
                match (xn, yn) {
                    (true, false) => return Ordering::Greater,
                    (false, true) => return Ordering::Less,
                    _ => {}
                }
            }
        }
    }
    Ordering::Equal
}

/// Groups the `rows` slices of length `len` of `data`: returns, per distinct value in output
/// order, its first row, count, and for every row the position of its value.
fn group<T: Element>(
    data: &[T],
    rows: usize,
    len: usize,
    sorted: bool,
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let row = |i: usize| &data[i * len..(i + 1) * len];
    let mut order: Vec<usize> = (0..rows).collect();
    order.sort_by(|&a, &b| cmp_rows(row(a), row(b)).then(a.cmp(&b)));
    // Runs of equal rows (by `==`, so NaN rows stay apart) in sorted order.
    let mut firsts: Vec<usize> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    let mut group_of = vec![0usize; rows];
    for (k, &i) in order.iter().enumerate() {
        let same = k > 0 && row(order[k - 1]) == row(i);
        if !same {
            firsts.push(i);
            counts.push(0);
        }
        let g = firsts.len() - 1;
        counts[g] += 1;
        group_of[i] = g;
    }
    // Output position of each group.
    let mut rank: Vec<usize> = (0..firsts.len()).collect();
    if !sorted {
        rank.sort_by_key(|&g| firsts[g]);
    }
    let mut pos = vec![0usize; firsts.len()];
    for (p, &g) in rank.iter().enumerate() {
        pos[g] = p;
    }
    let out_firsts = rank.iter().map(|&g| firsts[g]).collect();
    let out_counts = rank.iter().map(|&g| counts[g]).collect();
    let inverse = group_of.iter().map(|&g| pos[g]).collect();
    (out_firsts, out_counts, inverse)
}

fn i64_tensor(v: &[usize]) -> Result<Tensor, OpError> {
    Ok(Tensor::new(
        vec![v.len()],
        v.iter().map(|&x| x as i64).collect::<Vec<i64>>(),
    )?)
}

impl Operator for Unique {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        if x.ty.dtype.is_storage_only() {
            return Err(OpError::DType {
                index: 0,
                dtype: x.ty.dtype,
            });
        }
        let (y_shape, inverse_len) = match (self.axis, &x.ty.shape) {
            (None, _) => (Some(vec![Dim::Unknown]), Dim::Unknown),
            (Some(_), None) => (None, Dim::Unknown),
            (Some(a), Some(d)) => {
                let a = norm_axis(a, d.len())?;
                let mut s = d.clone();
                s[a] = Dim::Unknown;
                (Some(s), d[a].clone())
            }
        };
        let inverse_len = if self.axis.is_none() {
            match x.ty.fixed_shape() {
                Some(s) => Dim::Fixed(s.iter().product()),
                None => inverse_len,
            }
        } else {
            inverse_len
        };
        Ok(vec![
            TensorType {
                dtype: x.ty.dtype,
                shape: y_shape,
            },
            TensorType {
                dtype: DType::I64,
                shape: Some(vec![Dim::Unknown]),
            },
            TensorType {
                dtype: DType::I64,
                shape: Some(vec![inverse_len]),
            },
            TensorType {
                dtype: DType::I64,
                shape: Some(vec![Dim::Unknown]),
            },
        ])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let dt = x.dtype();
        // Move `axis` to the front: rows are the slices to compare.
        let (moved, outer, rows, inner) = match self.axis {
            None => (x.reshape(vec![x.numel()])?, 1, x.numel(), 1),
            Some(a) => {
                let a = norm_axis(a, x.rank())?;
                let s = x.shape();
                let (outer, inner): (usize, usize) =
                    (s[..a].iter().product(), s[a + 1..].iter().product());
                let rows = s[a];
                let src: Vec<usize> = (0..rows)
                    .flat_map(|r| {
                        (0..outer).flat_map(move |o| (0..inner).map(move |i| (o * rows + r) * inner + i))
                    })
                    .collect();
                (take(x, vec![rows, outer * inner], &src)?, outer, rows, inner)
            }
        };
        let len = outer * inner;
        let (firsts, counts, inverse) = dispatch_dtypes!(dt, T => group(moved.as_slice::<T>()?, rows, len, self.sorted),
            else return Err(OpError::DType { index: 0, dtype: dt });
            F32: f32, F64: f64, F16: crate::half::f16, BF16: crate::half::bf16,
            I8: i8, I16: i16, I32: i32, I64: i64, U8: u8, U16: u16, U32: u32, U64: u64, Bool: bool);
        let y = match self.axis {
            None => {
                let src: Vec<usize> = firsts.clone();
                take(x, vec![firsts.len()], &src)?
            }
            Some(a) => {
                let a = norm_axis(a, x.rank())?;
                let s = x.shape();
                let mut shape = s.to_vec();
                shape[a] = firsts.len();
                let u = firsts.len();
                let src: Vec<usize> = (0..outer)
                    .flat_map(|o| {
                        let firsts = &firsts;
                        (0..u).flat_map(move |k| {
                            (0..inner).map(move |i| (o * rows + firsts[k]) * inner + i)
                        })
                    })
                    .collect();
                take(x, shape, &src)?
            }
        };
        Ok(vec![
            y,
            i64_tensor(&firsts)?,
            i64_tensor(&inverse)?,
            i64_tensor(&counts)?,
        ])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    #[test]
    fn flat_sorted_and_unsorted() {
        let x = Tensor::new(vec![6], vec![2.0f32, 1.0, 1.0, 3.0, 4.0, 3.0]).unwrap();
        let op = build_op("", "Unique", 11, &[], 1, 4).unwrap();
        let o = op.eval(&[Some(&x)]).unwrap();
        assert_eq!(o[0].as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(o[1].as_slice::<i64>().unwrap(), &[1, 0, 3, 4]);
        assert_eq!(o[2].as_slice::<i64>().unwrap(), &[1, 0, 0, 2, 3, 2]);
        assert_eq!(o[3].as_slice::<i64>().unwrap(), &[2, 1, 2, 1]);
        let op = build_op("", "Unique", 11, &[("sorted", Attribute::Int(0))], 1, 4).unwrap();
        let o = op.eval(&[Some(&x)]).unwrap();
        assert_eq!(o[0].as_slice::<f32>().unwrap(), &[2.0, 1.0, 3.0, 4.0]);
        assert_eq!(o[1].as_slice::<i64>().unwrap(), &[0, 1, 3, 4]);
        assert_eq!(o[2].as_slice::<i64>().unwrap(), &[0, 1, 1, 2, 3, 2]);
        assert_eq!(o[3].as_slice::<i64>().unwrap(), &[1, 2, 2, 1]);
    }

    #[test]
    fn slices_along_an_axis() {
        // Columns of [[1, 0, 1], [2, 5, 2]]: (1,2), (0,5), (1,2) -> (0,5), (1,2).
        let x = Tensor::new(vec![2, 3], vec![1i64, 0, 1, 2, 5, 2]).unwrap();
        let op = build_op("", "Unique", 11, &[("axis", Attribute::Int(-1))], 1, 4).unwrap();
        let o = op.eval(&[Some(&x)]).unwrap();
        assert_eq!(o[0].shape(), &[2, 2]);
        assert_eq!(o[0].as_slice::<i64>().unwrap(), &[0, 1, 5, 2]);
        assert_eq!(o[1].as_slice::<i64>().unwrap(), &[1, 0]);
        assert_eq!(o[2].as_slice::<i64>().unwrap(), &[1, 0, 1]);
        assert_eq!(o[3].as_slice::<i64>().unwrap(), &[1, 2]);
        let op = build_op("", "Unique", 11, &[("axis", Attribute::Int(2))], 1, 4).unwrap();
        assert!(op.eval(&[Some(&x)]).is_err());
    }
}
