//! `hidet::IntegerMatMul`: the 8-bit product of a quantized convolution or matrix product,
//! accumulated in 32 bits, that the quantized-product pass
//! ([`crate::graph_passes::QuantizedProducts`]) makes of `DequantizeLinear` pairs.
//!
//! `IntegerMatMul(A, X)` with `A` of `int8` `[M, Kp]` and `X` of `uint8` `[B, K, N]`, where `Kp`
//! is `K` rounded up to a multiple of 4 (the template reads `A` four columns at a time;
//! columns from `K` on are never part of the result), gives `int32` `[B, M, N]`:
//! `Y[b, m, n] = Σ_{k<K} A[m, k] · X[b, k, n]`, wrapping on `int32` overflow. `A` may also be
//! `int16` (8-bit weights widened ahead, for a target without VNNI: the template multiplies
//! pairs of 16-bit values, see [`crate::templates::integer_matmul`]). Its kernel is the
//! integer-product template.

use crate::graph_ops::HIDET_DOMAIN;
use crate::templates::integer_matmul::padded_depth;
use hidet_graph::dtype::DType;
use hidet_graph::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use hidet_graph::ops::common::check_dtype;
use hidet_graph::ops::common::typed_input;
use hidet_graph::ops::compute_util::{dims, finish, input, placeholders};
use hidet_graph::registry::{Registry, LATEST_OPSET};
use hidet_graph::shape::{Dim, TensorType};
use hidet_graph::tensor::Tensor;
use hidet_ir::compute::{reduce, ReduceKind};
use hidet_ir::dtype::DataType;

/// The operator's name in [`HIDET_DOMAIN`].
pub const OP_TYPE: &str = "IntegerMatMul";

/// An `IntegerMatMul` node (see the module docs).
#[derive(Debug)]
struct IntegerMatMul;

/// Registers `hidet::IntegerMatMul` (every opset of the domain).
pub fn register(r: &mut Registry) {
    r.register(
        HIDET_DOMAIN,
        OP_TYPE,
        1..=LATEST_OPSET,
        |_: &OpContext<'_>| Ok(Box::new(IntegerMatMul)),
    );
}

/// `(B, M, N, K)` of operands of shapes `a` and `x`, after checking them.
fn sizes(a: &[usize], x: &[usize]) -> Result<(usize, usize, usize, usize), OpError> {
    let ([m, kp], [b, k, n]) = (a, x) else {
        return Err(OpError::Shape(format!(
            "IntegerMatMul needs A [M, Kp] and X [B, K, N], got {a:?} and {x:?}"
        )));
    };
    let padded = i64::try_from(*k).map(padded_depth).ok();
    if padded != i64::try_from(*kp).ok() {
        return Err(OpError::Shape(format!(
            "IntegerMatMul: A has {kp} columns, X has {k} rows: A's columns must be X's rows \
             rounded up to a multiple of 4"
        )));
    }
    Ok((*b, *m, *n, *k))
}

impl Operator for IntegerMatMul {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (a, x) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        check_dtype(0, a.ty.dtype, |d| matches!(d, DType::I8 | DType::I16))?;
        check_dtype(1, x.ty.dtype, |d| d == DType::U8)?;
        let shape = match (a.ty.fixed_shape(), x.ty.fixed_shape()) {
            (Some(a), Some(x)) => {
                let (b, m, n, _) = sizes(&a, &x)?;
                vec![Dim::Fixed(b), Dim::Fixed(m), Dim::Fixed(n)]
            }
            _ => vec![Dim::Unknown; 3],
        };
        Ok(vec![TensorType {
            dtype: DType::I32,
            shape: Some(shape),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (a, x) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let (b, m, n, k) = sizes(a.shape(), x.shape())?;
        let av: Vec<i64> = match a.dtype() {
            DType::I16 => typed_input::<i16>(a, 0)?
                .iter()
                .map(|&v| v.into())
                .collect(),
            _ => typed_input::<i8>(a, 0)?.iter().map(|&v| v.into()).collect(),
        };
        let xv = typed_input::<u8>(x, 1)?;
        let kp = a.shape()[1];
        let mut y = Vec::with_capacity(b * m * n);
        for bi in 0..b {
            for mi in 0..m {
                for ni in 0..n {
                    let sum: i64 = (0..k)
                        .map(|ki| av[mi * kp + ki] * i64::from(xv[(bi * k + ki) * n + ni]))
                        .sum();
                    // Wrapping, as the kernel's 32-bit accumulators.
                    y.push(sum as i32);
                }
            }
        }
        Ok(vec![Tensor::new(vec![b, m, n], y)?])
    }

    /// `Y[b, m, n] = Σ_{k<K} i32(A[m, k]) · i32(X[b, k, n])`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (a, x) = (input(inputs, 0)?, input(inputs, 1)?);
        check_dtype(0, a.dtype, |d| matches!(d, DType::I8 | DType::I16))?;
        check_dtype(1, x.dtype, |d| d == DType::U8)?;
        let (b, m, n, k) = sizes(a.shape, x.shape)?;
        let vars = placeholders(inputs);
        let (va, vx) = (vars[0].clone(), vars[1].clone());
        let (sum, node) = reduce(
            "acc",
            DataType::I32,
            dims(&[b, m, n]),
            [k as i64],
            ReduceKind::Sum,
            |i, r| {
                let w = va.at([i[1].clone(), r[0].clone()]).cast(DataType::I32);
                let v = vx.at([i[0].clone(), r[0].clone(), i[2].clone()]);
                w * v.cast(DataType::I32)
            },
        );
        finish(vars, vec![(sum.clone(), node)], vec![sum]).map(Some)
    }
}
