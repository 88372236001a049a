//! Linear quantization helpers: saturating round-half-to-even conversion to integer types
//! and the layout of quantization parameters (per tensor, per axis, per block).

use crate::dtype::DType;
use crate::operator::OpError;
use crate::tensor::{Element, Tensor};
use crate::{dispatch_dtypes, dispatch_int};

/// The representable range of an integer quantization type.
pub fn int_range(dtype: DType) -> Option<(f64, f64)> {
    Some(match dtype {
        DType::I8 => (i8::MIN as f64, i8::MAX as f64),
        DType::U8 => (0.0, u8::MAX as f64),
        DType::I16 => (i16::MIN as f64, i16::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::U32 => (0.0, u32::MAX as f64),
        DType::I4 => (crate::narrow::I4::MIN as f64, crate::narrow::I4::MAX as f64),
        DType::U4 => (crate::narrow::U4::MIN as f64, crate::narrow::U4::MAX as f64),
        _ => return None,
    })
}

/// `clamp(round_half_even(v) + zero_point)` to the range of `dtype`. NaN maps to the
/// zero point.
pub fn saturate_round(v: f64, zero_point: f64, lo: f64, hi: f64) -> f64 {
    let r = if v.is_nan() { 0.0 } else { v.round_ties_even() };
    (r + zero_point).clamp(lo, hi)
}

/// Quantizes already-scaled values (`v / scale`) to an integer tensor of `dtype` with one
/// zero point.
pub fn quantize_to(
    v: &[f64],
    shape: Vec<usize>,
    zero_point: f64,
    dtype: DType,
) -> Result<Tensor, OpError> {
    let (lo, hi) = int_range(dtype).ok_or(OpError::DType { index: 0, dtype })?;
    dispatch_dtypes!(dtype, T => Ok(Tensor::new(shape, v.iter().map(|&x| T::from_f64(saturate_round(x, zero_point, lo, hi))).collect::<Vec<T>>())?),
        else Err(OpError::DType { index: 0, dtype });
        I8: i8, I16: i16, I32: i32, I64: i64, U8: u8, U16: u16, U32: u32, U64: u64,
        I4: crate::narrow::I4, U4: crate::narrow::U4)
}

/// The single value of a scalar or one-element tensor.
pub fn scalar_f64(t: &Tensor, what: &str) -> Result<f64, OpError> {
    match t.to_f64_vec().as_slice() {
        [v] => Ok(*v),
        _ => Err(OpError::Shape(format!(
            "{what} must have one element, got shape {:?}",
            t.shape()
        ))),
    }
}

/// A parameter that is either one value for all `n` channels or a 1-D tensor of `n` values.
pub fn per_channel(t: &Tensor, n: usize, what: &str) -> Result<Vec<f64>, OpError> {
    let v = t.to_f64_vec();
    match v.len() {
        1 => Ok(vec![v[0]; n]),
        l if l == n && t.rank() == 1 => Ok(v),
        _ => Err(OpError::Shape(format!(
            "{what} must be a scalar or have {n} elements, got shape {:?}",
            t.shape()
        ))),
    }
}

/// For each element of a tensor of shape `x` (row-major), the index of its quantization
/// parameter in a tensor of shape `param`: per tensor (`param` has one element), per axis
/// (`param` is 1-D of length `x[axis]`), or blocked (`block_size > 0`: same rank as `x`,
/// `param[axis] = ceil(x[axis] / block_size)`, other dims equal).
pub fn param_index(
    x: &[usize],
    param: &[usize],
    axis: i64,
    block_size: i64,
) -> Result<Vec<usize>, OpError> {
    let n: usize = x.iter().product();
    let np: usize = param.iter().product();
    if np == 1 && param.len() <= 1 {
        return Ok(vec![0; n]);
    }
    let rank = x.len() as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    if a < 0 || a >= rank {
        return Err(OpError::attr(
            "axis",
            format!("{axis} is out of range for rank {rank}"),
        ));
    }
    let a = a as usize;
    let inner: usize = x[a + 1..].iter().product();
    if block_size <= 0 {
        if param.len() != 1 || param[0] != x[a] {
            return Err(OpError::Shape(format!(
                "per-axis parameter shape {param:?} does not match dimension {a} of {x:?}"
            )));
        }
        return Ok((0..n).map(|i| (i / inner.max(1)) % x[a]).collect());
    }
    let bs = block_size as usize;
    let ok = param.len() == x.len()
        && param.iter().zip(x).enumerate().all(|(d, (&p, &xd))| {
            if d == a {
                p == xd.div_ceil(bs)
            } else {
                p == xd
            }
        });
    if !ok {
        return Err(OpError::Shape(format!(
            "blocked parameter shape {param:?} does not match {x:?} with block_size {bs} on axis {a}"
        )));
    }
    let pa = param[a];
    Ok((0..n)
        .map(|i| {
            let (outer, rest) = (i / (x[a] * inner).max(1), i % (x[a] * inner).max(1));
            let (j, k) = (rest / inner.max(1), rest % inner.max(1));
            (outer * pa + j / bs) * inner + k
        })
        .collect())
}

/// Elements of an integer tensor converted to f64, or a dtype error naming `index`.
pub fn int_values(t: &Tensor, index: usize) -> Result<Vec<f64>, OpError> {
    let dt = t.dtype();
    dispatch_int!(dt, T => Ok(t.as_slice::<T>()?.iter().map(|v| v.to_f64()).collect()),
        else Err(OpError::DType { index, dtype: dt }))
}
