//! Data-movement kernels: row-major index arithmetic, gathers and scatters by precomputed
//! element offsets.
//!
//! Shape and data-movement operators compute *where* each output element comes from as plain
//! offsets (dtype-agnostic) and then call [`take`] / [`take_or_fill`] / [`scatter`], which do
//! the typed copy once for every dtype.

use crate::dispatch_all;
use crate::dtype::DType;
use crate::operator::OpError;
use crate::tensor::{checked_numel, Element, Tensor};

/// The values of an index tensor (the operator's input 1) as `i64`; a dtype error naming
/// input 1 unless it is int32 or int64.
pub fn index_values(t: &Tensor) -> Result<Vec<i64>, OpError> {
    if !is_index_dtype(t.dtype()) {
        return Err(OpError::DType {
            index: 1,
            dtype: t.dtype(),
        });
    }
    Ok(t.to_i64_vec())
}

/// The flat offsets into a tensor of `shape` that `op` (GatherElements, ScatterElements)
/// addresses: for each element of `indices` in row-major order, its own position with the
/// coordinate along `axis` replaced by its value (negative values count from the end).
/// Requires `indices` to have `shape`'s rank. Errors, naming `op`: `indices` longer than
/// `shape` along another axis, a non-index dtype, an index out of range.
pub fn element_offsets(
    op: &str,
    shape: &[usize],
    indices: &Tensor,
    axis: usize,
) -> Result<Vec<usize>, OpError> {
    for (d, (&n, &m)) in shape.iter().zip(indices.shape()).enumerate() {
        if d != axis && m > n {
            return Err(OpError::Shape(format!(
                "{op}: indices dimension {d} ({m}) exceeds data's ({n})"
            )));
        }
    }
    let idx = index_values(indices)?;
    let st = strides(shape);
    let dim = shape[axis];
    let extent = indices.shape();
    let mut out = alloc(numel(extent)?)?;
    // Odometer over the indices' positions; `base` is the offset of the position with its
    // `axis` coordinate dropped.
    let mut pos = vec![0usize; extent.len()];
    let mut base = 0usize;
    for &i in &idx {
        out.push(base + wrap_index(i, dim, op)? * st[axis]);
        for d in (0..extent.len()).rev() {
            pos[d] += 1;
            let step = if d == axis { 0 } else { st[d] };
            base += step;
            if pos[d] < extent[d] {
                break;
            }
            base -= step * pos[d];
            pos[d] = 0;
        }
    }
    Ok(out)
}

/// Row-major strides (in elements) of `shape`. Saturates instead of overflowing; callers
/// check the element count of the shapes they allocate with [`numel`].
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// Number of elements of `shape`, or a shape error if it overflows `usize`.
pub fn numel(shape: &[usize]) -> Result<usize, OpError> {
    checked_numel(shape)
        .ok_or_else(|| OpError::Shape(format!("shape {shape:?} has too many elements")))
}

/// An empty vector with room for `n` elements; an error (not an abort) if that much memory
/// cannot be reserved.
pub fn alloc<T>(n: usize) -> Result<Vec<T>, OpError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|e| OpError::Invalid(format!("cannot allocate {n} elements: {e}")))?;
    Ok(v)
}

/// Calls `f(index)` for every multi-index of `shape` in row-major order, stopping at the
/// first error. Nothing is called when `shape` has no elements; a rank-0 shape calls `f(&[])`
/// once.
pub fn try_for_each_index(
    shape: &[usize],
    mut f: impl FnMut(&[usize]) -> Result<(), OpError>,
) -> Result<(), OpError> {
    let n = numel(shape)?;
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        f(&idx)?;
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

/// The offsets of every element of `shape` (row-major) computed by `f(index)`, collected.
pub fn offsets(
    shape: &[usize],
    mut f: impl FnMut(&[usize]) -> Result<usize, OpError>,
) -> Result<Vec<usize>, OpError> {
    let mut out = alloc(numel(shape)?)?;
    try_for_each_index(shape, |i| {
        out.push(f(i)?);
        Ok(())
    })?;
    Ok(out)
}

/// Like [`offsets`], for maps where some output elements have no source (`None`).
pub fn opt_offsets(
    shape: &[usize],
    mut f: impl FnMut(&[usize]) -> Result<Option<usize>, OpError>,
) -> Result<Vec<Option<usize>>, OpError> {
    let mut out = alloc(numel(shape)?)?;
    try_for_each_index(shape, |i| {
        out.push(f(i)?);
        Ok(())
    })?;
    Ok(out)
}

/// Normalizes an element index along a dimension of size `dim`: negative values count from
/// the end. Errors if the index is outside `[-dim, dim)`.
pub fn wrap_index(i: i64, dim: usize, what: &str) -> Result<usize, OpError> {
    let d = dim as i128;
    let j = if i < 0 { i as i128 + d } else { i as i128 };
    if j < 0 || j >= d {
        return Err(OpError::Invalid(format!(
            "{what}: index {i} is out of range for a dimension of size {dim}"
        )));
    }
    Ok(j as usize)
}

fn out_of_range(offset: usize, len: usize) -> OpError {
    OpError::Invalid(format!(
        "element offset {offset} is out of range for {len} elements"
    ))
}

/// A tensor of `shape` whose k-th element (row-major) is `x`'s element at flat offset
/// `src[k]`. Requires `src.len()` to equal the element count of `shape`; every offset is
/// bounds-checked.
pub fn take(x: &Tensor, shape: Vec<usize>, src: &[usize]) -> Result<Tensor, OpError> {
    dispatch_all!(x.dtype(), T => {
        let xs = x.as_slice::<T>()?;
        let mut v: Vec<T> = alloc(src.len())?;
        for &o in src {
            v.push(*xs.get(o).ok_or_else(|| out_of_range(o, xs.len()))?);
        }
        Ok(Tensor::new(shape, v)?)
    })
}

/// Like [`take`], with `None` offsets filled by the first element of `fill` (which must have
/// `x`'s dtype and at least one element), or by zero (false) when `fill` is `None`.
pub fn take_or_fill(
    x: &Tensor,
    fill: Option<&Tensor>,
    shape: Vec<usize>,
    src: &[Option<usize>],
) -> Result<Tensor, OpError> {
    if let Some(f) = fill {
        if f.dtype() != x.dtype() {
            return Err(OpError::Invalid(format!(
                "fill value has dtype {}, data has {}",
                f.dtype(),
                x.dtype()
            )));
        }
    }
    dispatch_all!(x.dtype(), T => {
        let xs = x.as_slice::<T>()?;
        let fill_value: T = match fill {
            Some(f) => *f
                .as_slice::<T>()?
                .first()
                .ok_or_else(|| OpError::Invalid("fill value is empty".into()))?,
            None => T::default(),
        };
        let mut v: Vec<T> = alloc(src.len())?;
        for o in src {
            v.push(match o {
                Some(o) => *xs.get(*o).ok_or_else(|| out_of_range(*o, xs.len()))?,
                None => fill_value,
            });
        }
        Ok(Tensor::new(shape, v)?)
    })
}

/// How [`scatter`] combines an existing element with an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// The update replaces the element.
    None,
    /// Sum (logical or for bool).
    Add,
    /// Product (logical and for bool).
    Mul,
    /// The larger of the two.
    Max,
    /// The smaller of the two.
    Min,
}

impl Reduction {
    /// Parses an ONNX `reduction` attribute value (`none`, `add`, `mul`, `max`, `min`).
    pub fn parse(s: &str) -> Option<Reduction> {
        Some(match s {
            "none" => Reduction::None,
            "add" => Reduction::Add,
            "mul" => Reduction::Mul,
            "max" => Reduction::Max,
            "min" => Reduction::Min,
            _ => return None,
        })
    }

    /// `old` combined with `new`. Floats are combined in f64 and rounded to `T`; integers in
    /// i128 and wrapped to `T`'s width (like numpy).
    pub fn apply<T: Element>(self, old: T, new: T) -> T {
        let float = T::DTYPE.is_float();
        match self {
            Reduction::None => new,
            Reduction::Add if float => T::from_f64(old.to_f64() + new.to_f64()),
            Reduction::Add => T::from_i128(old.to_i128().wrapping_add(new.to_i128())),
            Reduction::Mul if float => T::from_f64(old.to_f64() * new.to_f64()),
            Reduction::Mul => T::from_i128(old.to_i128().wrapping_mul(new.to_i128())),
            Reduction::Max => {
                if new > old {
                    new
                } else {
                    old
                }
            }
            Reduction::Min => {
                if new < old {
                    new
                } else {
                    old
                }
            }
        }
    }
}

/// A copy of `data` in which, for k = 0, 1, ... in order, the element at flat offset `dst[k]`
/// becomes `reduction.apply(element, updates[k])` (`updates` read row-major). Requires
/// `updates` to have `data`'s dtype and `dst.len()` elements; offsets are bounds-checked.
pub fn scatter(
    data: &Tensor,
    updates: &Tensor,
    dst: &[usize],
    reduction: Reduction,
) -> Result<Tensor, OpError> {
    if updates.dtype() != data.dtype() {
        return Err(OpError::Invalid(format!(
            "updates have dtype {}, data has {}",
            updates.dtype(),
            data.dtype()
        )));
    }
    if updates.numel() != dst.len() {
        return Err(OpError::Shape(format!(
            "{} updates for {} target positions",
            updates.numel(),
            dst.len()
        )));
    }
    dispatch_all!(data.dtype(), T => {
        let mut out: Vec<T> = data.as_slice::<T>()?.to_vec();
        let ups = updates.as_slice::<T>()?;
        let len = out.len();
        for (&o, &u) in dst.iter().zip(ups) {
            let slot = out.get_mut(o).ok_or_else(|| out_of_range(o, len))?;
            *slot = reduction.apply(*slot, u);
        }
        Ok(Tensor::new(data.shape().to_vec(), out)?)
    })
}

/// The first element of `t` as i64 (shape-like scalars: `k`, `depth`, ...). Accepts a rank-0
/// or one-element tensor of an integer (or, where `allow_float`, float) dtype.
pub fn scalar_i64(t: &Tensor, what: &str, allow_float: bool) -> Result<i64, OpError> {
    let dt = t.dtype();
    if !(dt.is_int() || (allow_float && dt.is_float())) || t.numel() != 1 {
        return Err(OpError::Invalid(format!(
            "{what} must be a single {} value, got {dt}{:?}",
            if allow_float { "numeric" } else { "integer" },
            t.shape()
        )));
    }
    Ok(t.to_i64_vec()[0])
}

/// True if `dt` is an ONNX index dtype (int32 or int64).
pub fn is_index_dtype(dt: DType) -> bool {
    matches!(dt, DType::I32 | DType::I64)
}

/// Deterministic pseudo-random test data (xorshift), so unit tests use random, non-zero
/// values without an external crate.
#[cfg(test)]
pub(crate) mod testing {
    use crate::tensor::Tensor;

    /// A small xorshift64* generator.
    pub struct Rng(u64);

    impl Rng {
        pub fn new(seed: u64) -> Rng {
            Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }

        pub fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        /// Non-zero float in `(-2, -0.1] ∪ [0.1, 2)`.
        pub fn nonzero(&mut self) -> f32 {
            let m = 0.1 + (self.next_u64() % 1900) as f32 / 1000.0;
            if self.next_u64() & 1 == 0 {
                m
            } else {
                -m
            }
        }

        /// An f32 tensor of `shape` with non-zero random values.
        pub fn tensor(&mut self, shape: &[usize]) -> Tensor {
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n).map(|_| self.nonzero()).collect();
            Tensor::new(shape.to_vec(), v).expect("length is the product of the shape")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_index_order() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(strides(&[]), Vec::<usize>::new());
        let mut seen = Vec::new();
        try_for_each_index(&[2, 3], |i| {
            seen.push((i[0], i[1]));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]);
        let mut calls = 0;
        try_for_each_index(&[], |_| {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 1);
        try_for_each_index(&[3, 0], |_| panic!("no elements")).unwrap();
    }

    #[test]
    fn take_checks_bounds_and_fills() {
        let x = Tensor::new(vec![3], vec![1.5f32, -2.0, 7.25]).unwrap();
        let y = take(&x, vec![2, 2], &[2, 0, 1, 2]).unwrap();
        assert_eq!(y.as_slice::<f32>().unwrap(), &[7.25, 1.5, -2.0, 7.25]);
        assert!(take(&x, vec![1], &[3]).is_err());
        let fill = Tensor::scalar(9.5f32);
        let y = take_or_fill(&x, Some(&fill), vec![3], &[None, Some(1), None]).unwrap();
        assert_eq!(y.as_slice::<f32>().unwrap(), &[9.5, -2.0, 9.5]);
        let bad_fill = Tensor::scalar(1i32);
        assert!(take_or_fill(&x, Some(&bad_fill), vec![1], &[None]).is_err());
    }

    #[test]
    fn scatter_reductions() {
        let d = Tensor::new(vec![3], vec![5i32, -3, 2]).unwrap();
        let u = Tensor::new(vec![4], vec![4i32, 6, -7, 3]).unwrap();
        let dst = [0, 0, 2, 1];
        let got = |r| {
            scatter(&d, &u, &dst, r)
                .unwrap()
                .as_slice::<i32>()
                .unwrap()
                .to_vec()
        };
        assert_eq!(got(Reduction::None), vec![6, 3, -7]);
        assert_eq!(got(Reduction::Add), vec![15, 0, -5]);
        assert_eq!(got(Reduction::Mul), vec![120, -9, -14]);
        assert_eq!(got(Reduction::Max), vec![6, 3, 2]);
        assert_eq!(got(Reduction::Min), vec![4, -3, -7]);
        assert!(scatter(&d, &u, &[0, 1, 2, 3], Reduction::None).is_err());
        let b = Tensor::new(vec![2], vec![true, false]).unwrap();
        let ub = Tensor::new(vec![2], vec![false, true]).unwrap();
        let add = scatter(&b, &ub, &[0, 1], Reduction::Add).unwrap();
        assert_eq!(add.as_slice::<bool>().unwrap(), &[true, true]);
        let mul = scatter(&b, &ub, &[0, 1], Reduction::Mul).unwrap();
        assert_eq!(mul.as_slice::<bool>().unwrap(), &[false, false]);
    }

    #[test]
    fn wrap_index_range() {
        assert_eq!(wrap_index(-1, 4, "t").unwrap(), 3);
        assert_eq!(wrap_index(3, 4, "t").unwrap(), 3);
        assert!(wrap_index(4, 4, "t").is_err());
        assert!(wrap_index(-5, 4, "t").is_err());
        assert!(wrap_index(i64::MIN, 4, "t").is_err());
    }
}
