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
}
