//! Index arithmetic for operators that work along axes: single-axis lanes (softmax, argmax,
//! cumsum, top-k) and multi-axis reductions.

use crate::kernels::broadcast::broadcast_offsets;
use crate::operator::OpError;
use crate::tensor::checked_numel;

/// A row-major shape viewed as `outer × len × inner` around one axis (or a run of axes).
///
/// Lane `l` (`0 <= l < outer * inner`) is the 1-D slice of `len` elements at offsets
/// `base(l) + k * inner` for `k` in `0..len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lanes {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
}

impl Lanes {
    /// Lanes along `axis` of `shape`. Requires `axis < shape.len()`; fails if a product of
    /// dimensions overflows.
    pub fn along(shape: &[usize], axis: usize) -> Result<Lanes, OpError> {
        Lanes::spanning(shape, axis, axis + 1)
    }

    /// Lanes whose elements span the axes `start..end` of `shape` flattened together
    /// (`start <= end <= shape.len()`); `start == end` gives lanes of length 1.
    pub fn spanning(shape: &[usize], start: usize, end: usize) -> Result<Lanes, OpError> {
        let end = end.min(shape.len());
        let start = start.min(end);
        let prod = |s: &[usize]| {
            checked_numel(s).ok_or_else(|| OpError::Shape(format!("shape {shape:?} is too large")))
        };
        Ok(Lanes {
            outer: prod(&shape[..start])?,
            len: prod(&shape[start..end])?,
            inner: prod(&shape[end..])?,
        })
    }

    /// Number of lanes (`outer * inner`).
    pub fn count(&self) -> usize {
        self.outer * self.inner
    }

    /// Offset of the first element of lane `lane`; requires `lane < self.count()`.
    pub fn base(&self, lane: usize) -> usize {
        (lane / self.inner) * self.len * self.inner + lane % self.inner
    }

    /// Offset of element `k` of lane `lane`.
    pub fn at(&self, lane: usize, k: usize) -> usize {
        self.base(lane) + k * self.inner
    }
}

/// Normalizes a list of possibly negative axes for `rank`: every axis in `[-rank, rank)`,
/// no axis twice. Returns a mask with `true` at the listed axes.
pub fn axes_mask(axes: &[i64], rank: usize) -> Result<Vec<bool>, OpError> {
    let mut mask = vec![false; rank];
    for &a in axes {
        let r = rank as i64;
        let n = if a < 0 { a + r } else { a };
        if n < 0 || n >= r {
            return Err(OpError::Invalid(format!(
                "axis {a} is out of range for rank {rank}"
            )));
        }
        if mask[n as usize] {
            return Err(OpError::Invalid(format!("axis {a} is listed twice")));
        }
        mask[n as usize] = true;
    }
    Ok(mask)
}

/// A reduction of a row-major `shape` over the axes where `mask` is true.
///
/// `kept_shape` is the output shape with reduced axes kept as 1; `offsets[i]` is the output
/// offset that input element `i` (row-major) accumulates into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reduction {
    pub kept_shape: Vec<usize>,
    pub offsets: Vec<usize>,
}

impl Reduction {
    /// Requires `mask.len() == shape.len()`; fails if the shape is too large.
    pub fn new(shape: &[usize], mask: &[bool]) -> Result<Reduction, OpError> {
        if mask.len() != shape.len() {
            return Err(OpError::Invalid(format!(
                "{} reduction flags for rank {}",
                mask.len(),
                shape.len()
            )));
        }
        checked_numel(shape)
            .ok_or_else(|| OpError::Shape(format!("shape {shape:?} is too large")))?;
        let kept_shape: Vec<usize> = shape
            .iter()
            .zip(mask)
            .map(|(&d, &m)| if m { 1 } else { d })
            .collect();
        let offsets = broadcast_offsets(&kept_shape, shape);
        Ok(Reduction {
            kept_shape,
            offsets,
        })
    }

    /// Number of output elements.
    pub fn out_len(&self) -> usize {
        self.kept_shape.iter().product()
    }

    /// The output shape: `kept_shape`, without the reduced axes unless `keepdims`.
    pub fn out_shape(&self, mask: &[bool], keepdims: bool) -> Vec<usize> {
        self.kept_shape
            .iter()
            .zip(mask)
            .filter(|(_, &m)| keepdims || !m)
            .map(|(&d, _)| d)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_visit_every_element_once() {
        let shape = [3, 5, 2];
        for axis in 0..3 {
            let l = Lanes::along(&shape, axis).unwrap();
            let mut seen = [0; 30];
            for lane in 0..l.count() {
                for k in 0..l.len {
                    seen[l.at(lane, k)] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "axis {axis}");
        }
        let l = Lanes::along(&shape, 1).unwrap();
        // Lane 3 = (outer 1, inner 1): elements (1, k, 1) at 10 + 2k + 1.
        assert_eq!(
            (0..5).map(|k| l.at(3, k)).collect::<Vec<_>>(),
            vec![11, 13, 15, 17, 19]
        );
    }

    #[test]
    fn reduction_offsets_and_shapes() {
        let mask = axes_mask(&[-1, 0], 3).unwrap();
        assert_eq!(mask, vec![true, false, true]);
        let r = Reduction::new(&[2, 3, 2], &mask).unwrap();
        assert_eq!(r.kept_shape, vec![1, 3, 1]);
        assert_eq!(r.offsets, vec![0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
        assert_eq!(r.out_shape(&mask, false), vec![3]);
        assert!(axes_mask(&[3], 3).is_err());
        assert!(axes_mask(&[1, -2], 3).is_err());
    }
}
