//! PRelu: `x < 0 ? slope * x : x`, slope broadcast to x.

use hidet_ir::expr::Expr;

use crate::dispatch_numeric;
use crate::kernels::broadcast::map2;
use crate::operator::{arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::{self, infer_broadcast};
use crate::ops::compute_util::{broadcast, broadcast_read, grid_def, input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::{Element, Tensor};

#[derive(Debug)]
struct PRelu;

/// Registers PRelu.
pub fn register(r: &mut Registry) {
    r.register("", "PRelu", 7..=LATEST_OPSET, |_| Ok(Box::new(PRelu)));
}

impl Operator for PRelu {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        infer_broadcast(inputs, None, true)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (x, s) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let dt = x.dtype();
        let out = dispatch_numeric!(dt, T => map2::<T, T, T>(x, s, |v, k| {
            if v.to_f64() < 0.0 { T::from_f64(v.to_f64() * k.to_f64()) } else { v }
        })?, else return Err(OpError::DType { index: 0, dtype: dt }));
        Ok(vec![out])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (x, s) = (input(inputs, 0)?, input(inputs, 1)?);
        if !common::numeric(x.dtype) {
            return Err(OpError::DType {
                index: 0,
                dtype: x.dtype,
            });
        }
        if s.dtype != x.dtype {
            return Err(OpError::Invalid(format!(
                "slope is {}, x is {}",
                s.dtype, x.dtype
            )));
        }
        let shape = broadcast(&[x.shape, s.shape])?;
        let t = x.dtype.to_ir();
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), t, &shape, |i| {
            let v = broadcast_read(&vars[0], x.shape, i);
            let k = broadcast_read(&vars[1], s.shape, i);
            Expr::select(v.lt(Expr::zero(t)), &v * k, v)
        })?;
        Ok(Some(def))
    }
}
