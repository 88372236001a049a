//! PRelu: `x < 0 ? slope * x : x`, slope broadcast to x.

use crate::dispatch_numeric;
use crate::kernels::broadcast::map2;
use crate::operator::{arg, InferInput, OpError, Operator};
use crate::ops::common::infer_broadcast;
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
}
