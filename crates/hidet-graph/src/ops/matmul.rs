//! MatMul with numpy semantics (1-D promotion, broadcast batch dimensions).

use hidet_ir::compute::{grid, reduce, ReduceKind};

use crate::kernels::gemm::{gemm, gemm_rows, Strides};
use crate::kernels::broadcast::{broadcast_offsets, broadcast_shapes};
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::compute_util::{
    broadcast, broadcast_index, dims, finish, input, math_dtype, placeholders,
};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{broadcast_dims, Dim, TensorType};
use crate::tensor::{Element, Tensor};
use crate::value::Datum;
use crate::{dispatch_float, dispatch_int};

#[derive(Debug)]
struct MatMul;

/// Registers MatMul.
pub fn register(r: &mut Registry) {
    r.register("", "MatMul", 1..=LATEST_OPSET, |_| Ok(Box::new(MatMul)));
}

impl Operator for MatMul {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (a, b) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        if a.ty.dtype != b.ty.dtype || a.ty.dtype == crate::DType::Bool {
            return Err(OpError::Invalid(format!(
                "MatMul of {} and {}",
                a.ty.dtype, b.ty.dtype
            )));
        }
        let shape = match (&a.ty.shape, &b.ty.shape) {
            (Some(sa), Some(sb)) => {
                if sa.is_empty() || sb.is_empty() {
                    return Err(OpError::Shape("MatMul inputs must have rank >= 1".into()));
                }
                let (ba, m) = if sa.len() == 1 {
                    (&sa[..0], None)
                } else {
                    (&sa[..sa.len() - 2], Some(sa[sa.len() - 2].clone()))
                };
                let (bb, n) = if sb.len() == 1 {
                    (&sb[..0], None)
                } else {
                    (&sb[..sb.len() - 2], Some(sb[sb.len() - 1].clone()))
                };
                let ka = &sa[sa.len() - 1];
                let kb = &sb[if sb.len() == 1 { 0 } else { sb.len() - 2 }];
                if let (Dim::Fixed(x), Dim::Fixed(y)) = (ka, kb) {
                    if x != y {
                        return Err(OpError::Shape(format!(
                            "MatMul inner dimensions {x} and {y} differ"
                        )));
                    }
                }
                let mut out = broadcast_dims(ba, bb)
                    .ok_or_else(|| OpError::Shape("MatMul batch dims do not broadcast".into()))?;
                out.extend(m);
                out.extend(n);
                Some(out)
            }
            _ => None,
        };
        Ok(vec![TensorType {
            dtype: a.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let dt = a.dtype();
        if b.dtype() != dt {
            return Err(OpError::Invalid(format!(
                "MatMul of {dt} and {}",
                b.dtype()
            )));
        }
        let out = dispatch_float!(dt, T => matmul::<T>(a, b, true)?,
            else dispatch_int!(dt, T => matmul::<T>(a, b, false)?,
                else return Err(OpError::DType { index: 0, dtype: dt })));
        Ok(vec![out])
    }

    /// `f32` operands are multiplied and summed in `f32` (`matrixmultiply`'s `sgemm`), as
    /// the compiled kernel does; other dtypes run [`Operator::eval`].
    fn eval_host(&self, inputs: &[Option<&Datum>]) -> Result<Vec<Datum>, OpError> {
        match (inputs.first(), inputs.get(1)) {
            (Some(Some(Datum::Tensor(a))), Some(Some(Datum::Tensor(b))))
                if a.dtype() == crate::DType::F32 && b.dtype() == crate::DType::F32 =>
            {
                Ok(vec![Datum::Tensor(matmul_f32(a, b)?)])
            }
            _ => self.eval_data(inputs),
        }
    }

    /// `y[b…, i, j] = Σ_k a[b…, i, k] · b[b…, k, j]` with broadcast batch axes, 1-D operands
    /// promoted (and their unit axis dropped from the output) as in numpy. `f16`/`bf16`
    /// accumulate in `f32` (a reduce node, then a grid rounding to the output type).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
        let dt = a.dtype;
        if b.dtype != dt || dt == crate::DType::Bool {
            return Err(OpError::Invalid(format!("MatMul of {dt} and {}", b.dtype)));
        }
        if a.shape.is_empty() || b.shape.is_empty() {
            return Err(OpError::Shape("MatMul inputs must have rank >= 1".into()));
        }
        let (ra, rb) = (a.shape.len(), b.shape.len());
        let k = a.shape[ra - 1];
        let kb = if rb == 1 { b.shape[0] } else { b.shape[rb - 2] };
        if k != kb {
            return Err(OpError::Shape(format!(
                "MatMul inner dimensions {k} and {kb} differ"
            )));
        }
        let (batch_a, batch_b) = (
            &a.shape[..ra.saturating_sub(2)],
            &b.shape[..rb.saturating_sub(2)],
        );
        let batch = broadcast(&[batch_a, batch_b])?;
        let nb = batch.len();
        let mut shape = batch.clone();
        if ra > 1 {
            shape.push(a.shape[ra - 2]);
        }
        if rb > 1 {
            shape.push(b.shape[rb - 1]);
        }
        let t = dt.to_ir();
        let acc = math_dtype(t);
        let vars = placeholders(inputs);
        let (va, vb) = (vars[0].clone(), vars[1].clone());
        let (sum, sum_node) = reduce(
            "acc",
            acc,
            dims(&shape),
            [k as i64],
            ReduceKind::Sum,
            |i, r| {
                let mut ia = broadcast_index(&i[..nb], batch_a);
                let mut ib = broadcast_index(&i[..nb], batch_b);
                if ra > 1 {
                    ia.push(i[nb].clone());
                }
                ia.push(r[0].clone());
                ib.push(r[0].clone());
                if rb > 1 {
                    ib.push(i[i.len() - 1].clone());
                }
                let (x, y) = (va.at(ia), vb.at(ib));
                if acc == t {
                    x * y
                } else {
                    x.cast(acc) * y.cast(acc)
                }
            },
        );
        if acc == t {
            return finish(vars, vec![(sum.clone(), sum_node)], vec![sum]).map(Some);
        }
        let (out, out_node) = grid("out", t, dims(&shape), |i| sum.at(i.to_vec()).cast(t));
        finish(
            vars,
            vec![(sum, sum_node), (out.clone(), out_node)],
            vec![out],
        )
        .map(Some)
    }
}

/// The sizes of `MatMul(a, b)`: rows, depth, columns, the element offsets of each batch's
/// matrices in `a` and `b` (broadcast), and the output shape.
struct Product {
    m: usize,
    k: usize,
    n: usize,
    oa: Vec<usize>,
    ob: Vec<usize>,
    shape: Vec<usize>,
}

impl Product {
    fn of(a: &Tensor, b: &Tensor) -> Result<Product, OpError> {
        if a.rank() == 0 || b.rank() == 0 {
            return Err(OpError::Shape("MatMul inputs must have rank >= 1".into()));
        }
        let sa: Vec<usize> = if a.rank() == 1 {
            vec![1, a.shape()[0]]
        } else {
            a.shape().to_vec()
        };
        let sb: Vec<usize> = if b.rank() == 1 {
            vec![b.shape()[0], 1]
        } else {
            b.shape().to_vec()
        };
        let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
        let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
        if k != k2 {
            return Err(OpError::Shape(format!(
                "MatMul inner dimensions {k} and {k2} differ"
            )));
        }
        let (ba, bb) = (&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
        let batch = broadcast_shapes(&[ba, bb])?;
        let (oa, ob) = (broadcast_offsets(ba, &batch), broadcast_offsets(bb, &batch));
        let mut shape = batch;
        if a.rank() > 1 {
            shape.push(m);
        }
        if b.rank() > 1 {
            shape.push(n);
        }
        Ok(Product {
            m,
            k,
            n,
            oa,
            ob,
            shape,
        })
    }
}

/// `MatMul` of two `f32` tensors summed in `f32` (see [`Operator::eval_host`]).
fn matmul_f32(a: &Tensor, b: &Tensor) -> Result<Tensor, OpError> {
    let Product {
        m,
        k,
        n,
        oa,
        ob,
        shape,
    } = Product::of(a, b)?;
    let (xa, xb) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
    let mut out = vec![0f32; oa.len() * m * n];
    for ((&pa, &pb), c) in oa.iter().zip(&ob).zip(out.chunks_mut((m * n).max(1))) {
        let (a0, b0) = (pa * m * k, pb * k * n);
        let (a, b) = (&xa[a0..a0 + m * k], &xb[b0..b0 + k * n]);
        gemm(1.0f32, a, Strides::row_major(k), b, Strides::row_major(n), c, k, n);
    }
    Ok(Tensor::new(shape, out)?)
}

/// Batched matmul; accumulates in f64 (floats, through [`gemm_rows`]) or wrapping i128 (ints).
fn matmul<T: Element>(a: &Tensor, b: &Tensor, float: bool) -> Result<Tensor, OpError> {
    let Product {
        m,
        k,
        n,
        oa,
        ob,
        shape,
    } = Product::of(a, b)?;
    let (xa, xb) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
    let mut out = Vec::with_capacity(oa.len() * m * n);
    let fa: Vec<f64> = if float {
        xa.iter().map(|v| v.to_f64()).collect()
    } else {
        vec![]
    };
    let fb: Vec<f64> = if float {
        xb.iter().map(|v| v.to_f64()).collect()
    } else {
        vec![]
    };
    let mut product = vec![0f64; m * n];
    let mut row_i = vec![0i128; n];
    for (&pa, &pb) in oa.iter().zip(&ob) {
        let (a0, b0) = (pa * m * k, pb * k * n);
        if float {
            product.iter_mut().for_each(|v| *v = 0.0);
            gemm_rows(&fa[a0..a0 + m * k], &fb[b0..b0 + k * n], &mut product, k, n);
            out.extend(product.iter().map(|&v| T::from_f64(v)));
            continue;
        }
        for i in 0..m {
            row_i.iter_mut().for_each(|v| *v = 0);
            for p in 0..k {
                let av = xa[a0 + i * k + p].to_i128();
                for (j, acc) in row_i.iter_mut().enumerate() {
                    *acc = acc.wrapping_add(av.wrapping_mul(xb[b0 + p * n + j].to_i128()));
                }
            }
            out.extend(row_i.iter().map(|&v| T::from_i128(v)));
        }
    }
    Ok(Tensor::new(shape, out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_batched_and_vector() {
        let a = Tensor::new(vec![2, 2, 3], (1..=12).map(|x| x as f32).collect()).unwrap();
        let b = Tensor::new(vec![3], vec![1.0f32, -1.0, 2.0]).unwrap();
        let y = MatMul.eval(&[Some(&a), Some(&b)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[5.0, 11.0, 17.0, 23.0]);
    }
}
