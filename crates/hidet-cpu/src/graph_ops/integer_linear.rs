//! `hidet::IntegerLinear`: the 8-bit product of activations by a constant weight stored in
//! panels, accumulated in 32 bits, that the quantized-product pass
//! ([`crate::graph_passes::QuantizedProducts`]) makes of a quantized `MatMul` or `Gemm`.
//!
//! `IntegerLinear(X, W; columns = N)` with `X` of `uint8` `[R, K]` and `W` of `int8`
//! `[⌈N/32⌉, Kp/4, 32, 4]` (`Kp` = `K` rounded up to a multiple of 4: column `n`'s weights for
//! `k = 4g … 4g+3` at `W[n / 32, g, n % 32, 0…3]`) gives `int32` `[R, N]`:
//! `Y[r, n] = Σ_{k<K} X[r, k] · W[n / 32, k / 4, n % 32, k % 4]`, wrapping on `int32` overflow;
//! entries of `W` past `N` or `K` are never part of the result. Its kernel is
//! [`crate::templates::integer_linear`].

use crate::graph_ops::{count_attr, HIDET_DOMAIN};
use crate::templates::integer_linear::LINEAR_PANEL_WIDTH;
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
pub const OP_TYPE: &str = "IntegerLinear";

/// An `IntegerLinear` node (see the module docs).
#[derive(Debug)]
struct IntegerLinear {
    columns: usize,
}

/// Registers `hidet::IntegerLinear` (every opset of the domain).
pub fn register(r: &mut Registry) {
    r.register(
        HIDET_DOMAIN,
        OP_TYPE,
        1..=LATEST_OPSET,
        |c: &OpContext<'_>| {
            let columns = count_attr(c, "columns")?;
            Ok(Box::new(IntegerLinear { columns }))
        },
    );
}

/// The weight's shape for `columns` columns and a depth of `k`.
pub fn panel_shape(columns: usize, k: usize) -> Vec<usize> {
    let width = LINEAR_PANEL_WIDTH as usize;
    let groups = padded_depth(k as i64) as usize / 4;
    vec![columns.div_ceil(width), groups, width, 4]
}

impl IntegerLinear {
    /// `(R, K)` of operands of shapes `x` and `w`, after checking them.
    fn sizes(&self, x: &[usize], w: &[usize]) -> Result<(usize, usize), OpError> {
        let [rows, k] = x else {
            return Err(OpError::Shape(format!(
                "IntegerLinear needs X [R, K], got {x:?}"
            )));
        };
        if w != panel_shape(self.columns, *k).as_slice() {
            return Err(OpError::Shape(format!(
                "IntegerLinear: W of shape {w:?} is not {:?}, the panels of {} columns of \
                 depth {k}",
                panel_shape(self.columns, *k),
                self.columns
            )));
        }
        Ok((*rows, *k))
    }
}

impl Operator for IntegerLinear {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (x, w) = (infer_arg(inputs, 0)?, infer_arg(inputs, 1)?);
        check_dtype(0, x.ty.dtype, |d| d == DType::U8)?;
        check_dtype(1, w.ty.dtype, |d| d == DType::I8)?;
        let shape = match (x.ty.fixed_shape(), w.ty.fixed_shape()) {
            (Some(x), Some(w)) => {
                let (rows, _) = self.sizes(&x, &w)?;
                vec![Dim::Fixed(rows), Dim::Fixed(self.columns)]
            }
            _ => vec![Dim::Unknown, Dim::Fixed(self.columns)],
        };
        Ok(vec![TensorType {
            dtype: DType::I32,
            shape: Some(shape),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, w) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let (rows, k) = self.sizes(x.shape(), w.shape())?;
        let xv = typed_input::<u8>(x, 0)?;
        let wv = typed_input::<i8>(w, 1)?;
        let width = LINEAR_PANEL_WIDTH as usize;
        let groups = w.shape()[1];
        let weight = |n: usize, k: usize| {
            i64::from(wv[(((n / width) * groups + k / 4) * width + n % width) * 4 + k % 4])
        };
        let mut y = Vec::with_capacity(rows * self.columns);
        for r in 0..rows {
            for n in 0..self.columns {
                let sum: i64 = (0..k)
                    .map(|kk| i64::from(xv[r * k + kk]) * weight(n, kk))
                    .sum();
                // Wrapping, as the kernel's 32-bit accumulators.
                y.push(sum as i32);
            }
        }
        Ok(vec![Tensor::new(vec![rows, self.columns], y)?])
    }

    /// `Y[r, n] = Σ_{k<K} i32(X[r, k]) · i32(W[n / 32, k / 4, n % 32, k % 4])`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
        check_dtype(0, x.dtype, |d| d == DType::U8)?;
        check_dtype(1, w.dtype, |d| d == DType::I8)?;
        let (rows, k) = self.sizes(x.shape, w.shape)?;
        let vars = placeholders(inputs);
        let (vx, vw) = (vars[0].clone(), vars[1].clone());
        let width = LINEAR_PANEL_WIDTH;
        let (sum, node) = reduce(
            "acc",
            DataType::I32,
            dims(&[rows, self.columns]),
            [k as i64],
            ReduceKind::Sum,
            |i, r| {
                let (n, kk) = (&i[1], &r[0]);
                let v = vx.at([i[0].clone(), kk.clone()]).cast(DataType::I32);
                let wi = [n / width, kk / 4, n % width, kk % 4];
                v * vw.at(wi).cast(DataType::I32)
            },
        );
        finish(vars, vec![(sum.clone(), node)], vec![sum]).map(Some)
    }
}
