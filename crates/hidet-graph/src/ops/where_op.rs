//! Where: `cond ? x : y` with three-way broadcasting.

use hidet_ir::expr::Expr;

use crate::dispatch_all;
use crate::kernels::broadcast::map3;
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::compute_util::{broadcast, broadcast_read, grid_def, input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{broadcast_types, TensorType};
use crate::tensor::Tensor;
use crate::DType;

#[derive(Debug)]
struct Where;

/// Registers Where.
pub fn register(r: &mut Registry) {
    r.register("", "Where", 9..=LATEST_OPSET, |_| Ok(Box::new(Where)));
}

impl Operator for Where {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let (c, x, y) = (
            infer_arg(inputs, 0)?,
            infer_arg(inputs, 1)?,
            infer_arg(inputs, 2)?,
        );
        if c.ty.dtype != DType::Bool {
            return Err(OpError::DType {
                index: 0,
                dtype: c.ty.dtype,
            });
        }
        if x.ty.dtype != y.ty.dtype {
            return Err(OpError::Invalid(format!(
                "x is {}, y is {}",
                x.ty.dtype, y.ty.dtype
            )));
        }
        let shape = broadcast_types(&[
            c.ty.shape.as_ref(),
            x.ty.shape.as_ref(),
            y.ty.shape.as_ref(),
        ])
        .map_err(OpError::Shape)?;
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (c, x, y) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        if x.dtype() != y.dtype() {
            return Err(OpError::Invalid(format!(
                "x is {}, y is {}",
                x.dtype(),
                y.dtype()
            )));
        }
        let out = dispatch_all!(x.dtype(), T => map3::<bool, T, T, T>(c, x, y, |c, a, b| if c { a } else { b })?);
        Ok(vec![out])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (c, x, y) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
        if c.dtype != DType::Bool {
            return Err(OpError::DType {
                index: 0,
                dtype: c.dtype,
            });
        }
        if x.dtype != y.dtype {
            return Err(OpError::Invalid(format!(
                "x is {}, y is {}",
                x.dtype, y.dtype
            )));
        }
        let shape = broadcast(&[c.shape, x.shape, y.shape])?;
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), x.dtype.to_ir(), &shape, |i| {
            Expr::select(
                broadcast_read(&vars[0], c.shape, i),
                broadcast_read(&vars[1], x.shape, i),
                broadcast_read(&vars[2], y.shape, i),
            )
        })?;
        Ok(Some(def))
    }
}
