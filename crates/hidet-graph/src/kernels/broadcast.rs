//! Numpy broadcasting for reference kernels.

use crate::operator::OpError;
use crate::tensor::{checked_numel, Element, Tensor};

/// The numpy broadcast of `shapes`, or a shape error naming them.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> Result<Vec<usize>, OpError> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(OpError::Shape(format!(
                    "shapes {shapes:?} do not broadcast"
                )));
            }
        }
    }
    Ok(out)
}

/// `x` broadcast to `shape` (numpy rules; `x`'s rank at most `shape`'s), copied a contiguous
/// run at a time: the trailing axes `x` has in full are copied as one block, repeated along
/// the broadcast axes just before them (an index `[N, 1, 1, 1]` expanded to `[N, C, H, W]`
/// is one fill per row).
pub fn broadcast_to(x: &Tensor, shape: &[usize]) -> Result<Tensor, OpError> {
    use crate::kernels::movement::{alloc, numel};
    let rank = shape.len();
    if x.rank() > rank {
        return Err(OpError::Shape(format!(
            "{:?} does not broadcast to {shape:?}",
            x.shape()
        )));
    }
    let mut xs = vec![1usize; rank - x.rank()];
    xs.extend_from_slice(x.shape());
    if xs.iter().zip(shape).any(|(&a, &b)| a != b && a != 1) {
        return Err(OpError::Shape(format!(
            "{:?} does not broadcast to {shape:?}",
            x.shape()
        )));
    }
    let total = numel(shape)?;
    let mut axis = rank;
    let mut block = 1usize;
    while axis > 0 && xs[axis - 1] == shape[axis - 1] {
        axis -= 1;
        block *= shape[axis];
    }
    let mut repeat = 1usize;
    while axis > 0 && xs[axis - 1] == 1 {
        axis -= 1;
        repeat *= shape[axis];
    }
    let outer = &shape[..axis];
    // Offset step of each outer axis in `x` (0 where broadcast).
    let mut steps = vec![0usize; axis];
    let mut stride = block;
    for d in (0..axis).rev() {
        if xs[d] != 1 {
            steps[d] = stride;
            stride *= xs[d];
        }
    }
    crate::dispatch_all!(x.dtype(), T => {
        let src = x.as_slice::<T>()?;
        let mut out: Vec<T> = alloc(total)?;
        if total > 0 {
            let mut idx = vec![0usize; axis];
            let mut at = 0usize;
            loop {
                let run = &src[at..at + block];
                for _ in 0..repeat {
                    out.extend_from_slice(run);
                }
                let mut d = axis;
                loop {
                    if d == 0 {
                        return Ok(Tensor::new(shape.to_vec(), out)?);
                    }
                    d -= 1;
                    idx[d] += 1;
                    at += steps[d];
                    if idx[d] < outer[d] {
                        break;
                    }
                    at -= steps[d] * idx[d];
                    idx[d] = 0;
                }
            }
        }
        Ok(Tensor::new(shape.to_vec(), out)?)
    })
}

/// For each element of `out_shape` (row-major), the offset of the element of a tensor of
/// shape `in_shape` that broadcasts to it. `in_shape` must broadcast to `out_shape`.
pub fn broadcast_offsets(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let n = checked_numel(out_shape).unwrap_or(0);
    let rank = out_shape.len();
    let off = rank - in_shape.len();
    // Stride of each output dim in the input (0 where broadcast).
    let mut strides = vec![0usize; rank];
    let mut s = 1usize;
    for i in (0..in_shape.len()).rev() {
        strides[off + i] = if in_shape[i] == 1 { 0 } else { s };
        s *= in_shape[i];
    }
    let mut result = Vec::with_capacity(n);
    let mut idx = vec![0usize; rank];
    let mut cur = 0usize;
    for _ in 0..n {
        result.push(cur);
        // Odometer increment.
        for d in (0..rank).rev() {
            idx[d] += 1;
            cur += strides[d];
            if idx[d] < out_shape[d] {
                break;
            }
            cur -= strides[d] * idx[d];
            idx[d] = 0;
        }
    }
    result
}

/// `f` applied elementwise to `a` and `b` with numpy broadcasting.
/// Fails if the dtypes are not `A`/`B` or the shapes do not broadcast.
pub fn map2<A: Element, B: Element, O: Element>(
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(A, B) -> O,
) -> Result<Tensor, OpError> {
    let (xa, xb) = (a.as_slice::<A>()?, b.as_slice::<B>()?);
    if a.shape() == b.shape() {
        let v = xa.iter().zip(xb).map(|(&x, &y)| f(x, y)).collect();
        return Ok(Tensor::new(a.shape().to_vec(), v)?);
    }
    let shape = broadcast_shapes(&[a.shape(), b.shape()])?;
    let (oa, ob) = (
        broadcast_offsets(a.shape(), &shape),
        broadcast_offsets(b.shape(), &shape),
    );
    let v = oa.iter().zip(&ob).map(|(&i, &j)| f(xa[i], xb[j])).collect();
    Ok(Tensor::new(shape, v)?)
}

/// `f` applied elementwise to `a`, `b`, `c` with numpy broadcasting.
pub fn map3<A: Element, B: Element, C: Element, O: Element>(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    f: impl Fn(A, B, C) -> O,
) -> Result<Tensor, OpError> {
    let (xa, xb, xc) = (a.as_slice::<A>()?, b.as_slice::<B>()?, c.as_slice::<C>()?);
    let shape = broadcast_shapes(&[a.shape(), b.shape(), c.shape()])?;
    let oa = broadcast_offsets(a.shape(), &shape);
    let ob = broadcast_offsets(b.shape(), &shape);
    let oc = broadcast_offsets(c.shape(), &shape);
    let v = (0..oa.len())
        .map(|k| f(xa[oa[k]], xb[ob[k]], xc[oc[k]]))
        .collect();
    Ok(Tensor::new(shape, v)?)
}

/// `f` applied to every element of `a`.
pub fn map1<A: Element, O: Element>(a: &Tensor, f: impl Fn(A) -> O) -> Result<Tensor, OpError> {
    let v = a.as_slice::<A>()?.iter().map(|&x| f(x)).collect();
    Ok(Tensor::new(a.shape().to_vec(), v)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_manual_broadcast() {
        assert_eq!(broadcast_shapes(&[&[3, 1], &[4]]).unwrap(), vec![3, 4]);
        assert_eq!(
            broadcast_offsets(&[3, 1], &[3, 4]),
            vec![0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
        );
        assert_eq!(
            broadcast_offsets(&[4], &[2, 4]),
            vec![0, 1, 2, 3, 0, 1, 2, 3]
        );
        assert_eq!(broadcast_offsets(&[], &[2]), vec![0, 0]);
        assert!(broadcast_shapes(&[&[2], &[3]]).is_err());
    }

    #[test]
    fn map2_broadcasts() {
        let a = Tensor::new(vec![2, 1], vec![1.0f32, 2.0]).unwrap();
        let b = Tensor::new(vec![3], vec![10.0f32, 20.0, 30.0]).unwrap();
        let c = map2::<f32, f32, f32>(&a, &b, |x, y| x + y).unwrap();
        assert_eq!(c.shape(), &[2, 3]);
        assert_eq!(
            c.as_slice::<f32>().unwrap(),
            &[11.0, 21.0, 31.0, 12.0, 22.0, 32.0]
        );
    }

    /// Against the element-by-element offsets, for broadcasts leading, trailing and in the
    /// middle, rank growth, size-0 outputs and an integer dtype; shapes that do not
    /// broadcast are errors.
    #[test]
    fn broadcast_to_matches_the_offsets() {
        let cases: [(&[usize], &[usize]); 7] = [
            (&[3, 1, 1, 1], &[3, 5, 2, 4]),
            (&[1, 4], &[3, 2, 4]),
            (&[2, 1, 3], &[2, 4, 3]),
            (&[5], &[2, 3, 5]),
            (&[1, 1], &[1, 1]),
            (&[2, 1], &[2, 0]),
            (&[3, 1, 2, 1], &[3, 4, 2, 5]),
        ];
        for (from, to) in cases {
            let n: usize = from.iter().product();
            let x = Tensor::new(from.to_vec(), (0..n as i64).map(|v| v * 3 - 7).collect()).unwrap();
            let got = broadcast_to(&x, to).unwrap();
            let xs = x.as_slice::<i64>().unwrap();
            let want: Vec<i64> = broadcast_offsets(from, to).iter().map(|&o| xs[o]).collect();
            assert_eq!(got.shape(), to);
            assert_eq!(
                got.as_slice::<i64>().unwrap(),
                want.as_slice(),
                "{from:?} -> {to:?}"
            );
        }
        let x = Tensor::new(vec![2, 3], vec![0f32; 6]).unwrap();
        assert!(broadcast_to(&x, &[4, 3]).is_err());
        assert!(broadcast_to(&x, &[3]).is_err());
    }
}
