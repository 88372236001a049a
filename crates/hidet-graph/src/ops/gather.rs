//! Indexed reads: Gather (whole slices along an axis), GatherElements (one element per
//! index, along an axis) and GatherND (index tuples into the leading dimensions).
//! Negative indices count from the end; out-of-range indices are errors.

use crate::kernels::movement::{
    element_offsets, index_values, is_index_dtype, offsets, strides, take, wrap_index,
};
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::norm_axis;
use crate::ops::compute_util::{
    grid_def, index_dtype, input, placeholders, wrap_index as wrap_expr,
};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use hidet_ir::expr::Expr;

/// `out[a.., i.., b..] = data[a.., indices[i..], b..]` around `axis`.
#[derive(Debug)]
struct Gather {
    axis: i64,
}

/// `out[i] = data[i with i[axis] replaced by indices[i]]`.
#[derive(Debug)]
struct GatherElements {
    axis: i64,
}

/// `out[b.., i.., t..] = data[b.., indices[b.., i.., :], t..]` with `batch_dims` leading
/// batch dimensions.
#[derive(Debug)]
struct GatherNd {
    batch_dims: i64,
}

/// Registers Gather, GatherElements and GatherND.
pub fn register(r: &mut Registry) {
    r.register("", "Gather", 1..=LATEST_OPSET, |c| {
        Ok(Box::new(Gather {
            axis: c.attrs.int_or("axis", 0)?,
        }))
    });
    r.register("", "GatherElements", 11..=LATEST_OPSET, |c| {
        Ok(Box::new(GatherElements {
            axis: c.attrs.int_or("axis", 0)?,
        }))
    });
    r.register("", "GatherND", 11..=11, |_| {
        Ok(Box::new(GatherNd { batch_dims: 0 }))
    });
    r.register("", "GatherND", 12..=LATEST_OPSET, |c| {
        Ok(Box::new(GatherNd {
            batch_dims: c.attrs.int_or("batch_dims", 0)?,
        }))
    });
}

/// Checks that input #1 (indices) is int32/int64.
fn check_indices(t: &TensorType) -> Result<(), OpError> {
    if is_index_dtype(t.dtype) {
        Ok(())
    } else {
        Err(OpError::DType {
            index: 1,
            dtype: t.dtype,
        })
    }
}

/// Checks that the indices input of a compute definition is int32/int64, and that an axis of
/// size `dim` read through `count` indices is not empty (no index into it is valid).
fn check_compute_indices(
    ind: &ComputeInput<'_>,
    dim: usize,
    count: usize,
    op: &str,
) -> Result<(), OpError> {
    if !is_index_dtype(ind.dtype) {
        return Err(OpError::DType {
            index: 1,
            dtype: ind.dtype,
        });
    }
    if dim == 0 && count > 0 {
        return Err(OpError::Invalid(format!(
            "{op}: indices into an empty dimension"
        )));
    }
    Ok(())
}

/// Whether `ind` is a constant whose every value indexes `[0, dim)` directly: the kernel then
/// reads it as it is, without wrapping or clamping (a resize's or a frame gather's tables).
fn constant_in_range(ind: &ComputeInput<'_>, dim: usize) -> bool {
    let Ok(dim) = i64::try_from(dim) else {
        return false;
    };
    ind.value
        .is_some_and(|t| t.to_i64_vec().iter().all(|v| (0..dim).contains(v)))
}

impl Operator for Gather {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, i) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        check_indices(i.ty)?;
        let shape = match (&x.ty.shape, &i.ty.shape) {
            (Some(d), Some(q)) => {
                let a = norm_axis(self.axis, d.len())?;
                Some([&d[..a], &q[..], &d[a + 1..]].concat())
            }
            _ => None,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, ind) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let a = norm_axis(self.axis, x.rank())?;
        let dim = x.shape()[a];
        let idx: Vec<usize> = index_values(ind)?
            .into_iter()
            .map(|v| wrap_index(v, dim, "Gather"))
            .collect::<Result<_, _>>()?;
        let q = ind.rank();
        let ist = strides(ind.shape());
        let st = strides(x.shape());
        let shape = [&x.shape()[..a], ind.shape(), &x.shape()[a + 1..]].concat();
        let src = offsets(&shape, |o| {
            let outer: usize = o[..a].iter().zip(&st).map(|(i, s)| i * s).sum();
            let pos: usize = o[a..a + q].iter().zip(&ist).map(|(i, s)| i * s).sum();
            let inner: usize = o[a + q..]
                .iter()
                .zip(&st[a + 1..])
                .map(|(i, s)| i * s)
                .sum();
            Ok(outer + idx[pos] * st[a] + inner)
        })?;
        Ok(vec![take(x, shape, &src)?])
    }

    /// `out[a.., i.., b..] = x[a.., wrap(indices[i..]), b..]`, the index read as data
    /// ([`wrap_expr`]: negative values count from the end).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, ind) = (input(inputs, 0)?, input(inputs, 1)?);
        let a = norm_axis(self.axis, x.shape.len())?;
        let dim = x.shape[a];
        check_compute_indices(&ind, dim, ind.shape.iter().product(), "Gather")?;
        let q = ind.shape.len();
        let shape = [&x.shape[..a], ind.shape, &x.shape[a + 1..]].concat();
        let vars = placeholders(inputs);
        let in_range = constant_in_range(&ind, dim);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), &shape, |i| {
            let read = vars[1].at(i[a..a + q].to_vec());
            let idx = if in_range {
                read.cast(index_dtype(dim))
            } else {
                wrap_expr(read, dim)
            };
            let j = [&i[..a], &[idx], &i[a + q..]].concat();
            vars[0].at(j)
        })?;
        Ok(Some(def))
    }
}

impl Operator for GatherElements {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, i) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        check_indices(i.ty)?;
        if let (Some(r), Some(q)) = (x.ty.rank(), i.ty.rank()) {
            if r != q {
                return Err(OpError::Shape(format!(
                    "GatherElements: data rank {r} != indices rank {q}"
                )));
            }
            norm_axis(self.axis, r)?;
        }
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape: i.ty.shape.clone(),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, ind) = (arg(inputs, 0)?, arg(inputs, 1)?);
        if x.rank() != ind.rank() {
            return Err(OpError::Shape(format!(
                "GatherElements: data rank {} != indices rank {}",
                x.rank(),
                ind.rank()
            )));
        }
        let a = norm_axis(self.axis, x.rank())?;
        let src = element_offsets("GatherElements", x.shape(), ind, a)?;
        Ok(vec![take(x, ind.shape().to_vec(), &src)?])
    }

    /// `out[i] = x[i with i[axis] = wrap(indices[i])]`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, ind) = (input(inputs, 0)?, input(inputs, 1)?);
        if x.shape.len() != ind.shape.len() {
            return Err(OpError::Shape(format!(
                "GatherElements: data rank {} != indices rank {}",
                x.shape.len(),
                ind.shape.len()
            )));
        }
        let a = norm_axis(self.axis, x.shape.len())?;
        for (d, (&n, &m)) in x.shape.iter().zip(ind.shape).enumerate() {
            if d != a && m > n {
                return Err(OpError::Shape(format!(
                    "GatherElements: indices dimension {d} ({m}) exceeds data's ({n})"
                )));
            }
        }
        let dim = x.shape[a];
        check_compute_indices(&ind, dim, ind.shape.iter().product(), "GatherElements")?;
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), ind.shape, |i| {
            let mut j = i.to_vec();
            j[a] = wrap_expr(vars[1].at(i.to_vec()), dim);
            vars[0].at(j)
        })?;
        Ok(Some(def))
    }
}

impl GatherNd {
    /// Validates ranks for data rank `r`, indices rank `q` and tuple length `k`; returns
    /// the batch dimension count.
    fn check(&self, r: usize, q: usize, k: Option<usize>) -> Result<usize, OpError> {
        let b = self.batch_dims;
        if b < 0 || q == 0 || b as usize >= q.min(r) {
            return Err(OpError::Invalid(format!(
                "GatherND: batch_dims {b} is invalid for data rank {r} and indices rank {q}"
            )));
        }
        let b = b as usize;
        if let Some(k) = k {
            if k > r - b {
                return Err(OpError::Shape(format!(
                    "GatherND: index tuples of length {k} exceed data rank {r} minus {b} batch dims"
                )));
            }
        }
        Ok(b)
    }
}

impl Operator for GatherNd {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, i) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        check_indices(i.ty)?;
        let shape = match (&x.ty.shape, &i.ty.shape) {
            (Some(d), Some(q)) => {
                let k = q.last().and_then(Dim::fixed);
                let b = self.check(d.len(), q.len(), k)?;
                k.map(|k| [&q[..q.len() - 1], &d[b + k..]].concat())
            }
            _ => None,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, ind) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let (r, q) = (x.rank(), ind.rank());
        let k = ind.shape().last().copied().unwrap_or(0);
        let b = self.check(r, q, Some(k))?;
        if x.shape()[..b] != ind.shape()[..b] {
            return Err(OpError::Shape(format!(
                "GatherND: batch dimensions differ: data {:?}, indices {:?}",
                x.shape(),
                ind.shape()
            )));
        }
        let idx = index_values(ind)?;
        let st = strides(x.shape());
        let shape = [&ind.shape()[..q - 1], &x.shape()[b + k..]].concat();
        let ist = strides(&ind.shape()[..q - 1]);
        let src = offsets(&shape, |o| {
            let batch: usize = o[..b].iter().zip(&st).map(|(i, s)| i * s).sum();
            let tuple: usize = o[..q - 1]
                .iter()
                .zip(&ist)
                .map(|(i, s)| i * s)
                .sum::<usize>()
                * k;
            let mut off = batch;
            for j in 0..k {
                let v = wrap_index(idx[tuple + j], x.shape()[b + j], "GatherND")?;
                off += v * st[b + j];
            }
            let inner: usize = o[q - 1..]
                .iter()
                .zip(&st[b + k..])
                .map(|(i, s)| i * s)
                .sum();
            Ok(off + inner)
        })?;
        Ok(vec![take(x, shape, &src)?])
    }

    /// `out[b.., i.., t..] = x[b.., wrap(indices[b.., i.., 0]), …, wrap(indices[b.., i.., k-1]),
    /// t..]`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, ind) = (input(inputs, 0)?, input(inputs, 1)?);
        let (r, q) = (x.shape.len(), ind.shape.len());
        let k = ind.shape.last().copied().unwrap_or(0);
        let b = self.check(r, q, Some(k))?;
        if x.shape[..b] != ind.shape[..b] {
            return Err(OpError::Shape(format!(
                "GatherND: batch dimensions differ: data {:?}, indices {:?}",
                x.shape, ind.shape
            )));
        }
        let tuples: usize = ind.shape[..q - 1].iter().product();
        for &dim in &x.shape[b..b + k] {
            check_compute_indices(&ind, dim, tuples, "GatherND")?;
        }
        if !is_index_dtype(ind.dtype) {
            return Err(OpError::DType {
                index: 1,
                dtype: ind.dtype,
            });
        }
        let shape = [&ind.shape[..q - 1], &x.shape[b + k..]].concat();
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), &shape, |i| {
            let mut j: Vec<Expr> = i[..b].to_vec();
            for (t, &dim) in x.shape[b..b + k].iter().enumerate() {
                let at = [&i[..q - 1], &[Expr::int(t as i64)]].concat();
                j.push(wrap_expr(vars[1].at(at), dim));
            }
            j.extend_from_slice(&i[q - 1..]);
            vars[0].at(j)
        })?;
        Ok(Some(def))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::movement::testing::Rng;

    fn ints(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::new(shape.to_vec(), v.to_vec()).unwrap()
    }

    #[test]
    fn gather_middle_axis_negative_indices() {
        let x = Rng::new(21).tensor(&[2, 5, 3]);
        let xs = x.as_slice::<f32>().unwrap();
        let ind = Tensor::new(vec![2, 2], vec![-1i32, 0, 3, -5]).unwrap();
        let y = Gather { axis: -2 }
            .eval(&[Some(&x), Some(&ind)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[2, 2, 2, 3]);
        let ys = y.as_slice::<f32>().unwrap();
        let rows = [4usize, 0, 3, 0];
        for a in 0..2 {
            for (p, &row) in rows.iter().enumerate() {
                for c in 0..3 {
                    assert_eq!(ys[(a * 4 + p) * 3 + c], xs[(a * 5 + row) * 3 + c]);
                }
            }
        }
        let bad = ints(&[1], &[5]);
        assert!(Gather { axis: 1 }.eval(&[Some(&x), Some(&bad)]).is_err());
        let fidx = Tensor::new(vec![1], vec![0.0f32]).unwrap();
        assert!(Gather { axis: 0 }.eval(&[Some(&x), Some(&fidx)]).is_err());
        assert!(Gather { axis: 3 }
            .eval(&[Some(&x), Some(&ints(&[1], &[0]))])
            .is_err());
    }

    #[test]
    fn gather_elements_axis1() {
        let x = Rng::new(22).tensor(&[3, 4]);
        let xs = x.as_slice::<f32>().unwrap();
        let ind = ints(&[2, 3], &[3, -1, 0, 1, 2, -4]);
        let y = GatherElements { axis: 1 }
            .eval(&[Some(&x), Some(&ind)])
            .unwrap()
            .remove(0);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[xs[3], xs[3], xs[0], xs[5], xs[6], xs[4]]
        );
        assert!(GatherElements { axis: 1 }
            .eval(&[Some(&x), Some(&ints(&[1, 1], &[4]))])
            .is_err());
        assert!(GatherElements { axis: 0 }
            .eval(&[Some(&x), Some(&ints(&[1, 5], &[0; 5]))])
            .is_err());
    }

    #[test]
    fn gather_nd_with_batch_dims() {
        let x = Rng::new(23).tensor(&[2, 3, 4]);
        let xs = x.as_slice::<f32>().unwrap();
        // batch_dims = 1: per batch, (row, col) tuples.
        let ind = ints(&[2, 2, 2], &[0, 1, 2, -1, 1, 3, -3, 0]);
        let y = GatherNd { batch_dims: 1 }
            .eval(&[Some(&x), Some(&ind)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[xs[1], xs[2 * 4 + 3], xs[12 + 4 + 3], xs[12]]
        );
        // batch_dims = 0, tuple length 1: whole rows.
        let ind = ints(&[1, 1], &[-1]);
        let y = GatherNd { batch_dims: 0 }
            .eval(&[Some(&x), Some(&ind)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[1, 3, 4]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &xs[12..]);
        assert!(GatherNd { batch_dims: 0 }
            .eval(&[Some(&x), Some(&ints(&[1, 4], &[0, 0, 0, 0]))])
            .is_err());
        assert!(GatherNd { batch_dims: 3 }
            .eval(&[Some(&x), Some(&ind)])
            .is_err());
        assert!(GatherNd { batch_dims: 0 }
            .eval(&[Some(&x), Some(&ints(&[1], &[2]))])
            .is_err());
    }
}
