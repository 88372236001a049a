//! Stacking tensors along a new axis and selecting one index of an axis (the two halves of
//! iterating over an axis, as Loop and Scan do).

use crate::operator::OpError;
use crate::tensor::{checked_numel, Element, Tensor};

/// Stacks `parts` (equal dtypes and shapes, at least one) along a new axis `axis`
/// (`0 ..= rank`): the result has shape `shape[..axis] + [parts.len()] + shape[axis..]`.
pub fn stack(parts: &[Tensor], axis: usize) -> Result<Tensor, OpError> {
    let first = parts
        .first()
        .ok_or_else(|| OpError::Invalid("stack of zero tensors".into()))?;
    let shape = first.shape();
    if axis > shape.len() {
        return Err(OpError::Shape(format!(
            "stack axis {axis} out of range for rank {}",
            shape.len()
        )));
    }
    for (i, p) in parts.iter().enumerate() {
        if p.dtype() != first.dtype() || p.shape() != shape {
            return Err(OpError::Shape(format!(
                "stacked tensor #{i} is {}{:?}, tensor #0 is {}{:?}",
                p.dtype(),
                p.shape(),
                first.dtype(),
                shape
            )));
        }
    }
    let mut out_shape = shape.to_vec();
    out_shape.insert(axis, parts.len());
    // Each part contributes `outer` contiguous runs of `inner` elements.
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis..].iter().product();
    crate::dispatch_all!(first.dtype(), T => {
        let slices = parts
            .iter()
            .map(|p| p.as_slice::<T>())
            .collect::<Result<Vec<_>, _>>()?;
        let mut out: Vec<T> = Vec::with_capacity(outer * inner * parts.len());
        for o in 0..outer {
            for s in &slices {
                out.extend_from_slice(&s[o * inner..(o + 1) * inner]);
            }
        }
        Ok(Tensor::new(out_shape, out)?)
    })
}

/// The slice of `t` at `index` of axis `axis`, with that axis removed.
pub fn select(t: &Tensor, axis: usize, index: usize) -> Result<Tensor, OpError> {
    let shape = t.shape();
    let Some(&len) = shape.get(axis) else {
        return Err(OpError::Shape(format!(
            "axis {axis} out of range for rank {}",
            shape.len()
        )));
    };
    if index >= len {
        return Err(OpError::Shape(format!(
            "index {index} out of range for axis {axis} of size {len}"
        )));
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out_shape = shape.to_vec();
    out_shape.remove(axis);
    fn gather<T: Element>(v: &[T], outer: usize, len: usize, inner: usize, index: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            let start = (o * len + index) * inner;
            out.extend_from_slice(&v[start..start + inner]);
        }
        out
    }
    crate::dispatch_all!(t.dtype(), T => {
        let v = gather(t.as_slice::<T>()?, outer, len, inner, index);
        Ok(Tensor::new(out_shape, v)?)
    })
}

/// An empty tensor (zero elements) of `dtype` and `shape`; `shape` must contain a 0.
pub fn empty(dtype: crate::DType, shape: Vec<usize>) -> Result<Tensor, OpError> {
    if checked_numel(&shape) != Some(0) {
        return Err(OpError::Invalid(format!("shape {shape:?} is not empty")));
    }
    Ok(Tensor::zeros(dtype, shape)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random non-zero values from a small LCG (deterministic).
    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 + 0.25
            })
            .collect()
    }

    /// Index arithmetic written out for rank 3, independently of the kernels.
    #[test]
    fn stack_then_select_matches_loops_on_every_axis() {
        let (a, b, c) = (3usize, 5usize, 2usize);
        let parts: Vec<Tensor> = (0..4)
            .map(|k| Tensor::new(vec![a, b, c], data(a * b * c, 7 + k)).unwrap())
            .collect();
        for axis in 0..=3 {
            let s = stack(&parts, axis).unwrap();
            let mut want_shape = vec![a, b, c];
            want_shape.insert(axis, 4);
            assert_eq!(s.shape(), want_shape.as_slice());
            let sv = s.as_slice::<f32>().unwrap();
            for (k, part) in parts.iter().enumerate() {
                let pv = part.as_slice::<f32>().unwrap();
                for i in 0..a {
                    for j in 0..b {
                        for l in 0..c {
                            let mut idx = vec![i, j, l];
                            idx.insert(axis, k);
                            let flat = idx
                                .iter()
                                .zip(&want_shape)
                                .fold(0, |acc, (x, n)| acc * n + x);
                            assert_eq!(sv[flat], pv[(i * b + j) * c + l]);
                        }
                    }
                }
                assert_eq!(&select(&s, axis, k).unwrap(), part);
            }
        }
    }

    #[test]
    fn errors_not_panics() {
        let x = Tensor::new(vec![2, 3], data(6, 1)).unwrap();
        let y = Tensor::new(vec![3, 2], data(6, 2)).unwrap();
        assert!(stack(&[], 0).is_err());
        assert!(stack(&[x.clone(), y], 0).is_err());
        assert!(stack(&[x.clone(), x.clone().cast(crate::DType::F64)], 0).is_err());
        assert!(stack(std::slice::from_ref(&x), 3).is_err());
        assert!(select(&x, 2, 0).is_err());
        assert!(select(&x, 1, 3).is_err());
        assert!(empty(crate::DType::F32, vec![2]).is_err());
        assert_eq!(
            empty(crate::DType::I64, vec![0, 3]).unwrap().shape(),
            &[0, 3]
        );
    }
}
