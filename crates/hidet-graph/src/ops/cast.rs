//! Cast and CastLike (numpy `astype` semantics, see [`crate::Tensor::cast`]).

use crate::dtype::DType;
use crate::operator::{arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::compute_util::{float_to_int, input, placeholders, try_grid_def};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::Tensor;

/// Cast to a fixed dtype (`Some`) or to input 1's dtype (CastLike, `None`).
#[derive(Debug)]
struct Cast {
    to: Option<DType>,
}

/// Registers Cast and CastLike.
pub fn register(r: &mut Registry) {
    r.register("", "Cast", 6..=LATEST_OPSET, |c| {
        let code = c.attrs.req_int("to")?;
        let to = i32::try_from(code)
            .ok()
            .and_then(DType::from_onnx_code)
            .ok_or_else(|| OpError::Unsupported(format!("Cast to ONNX data type {code}")))?;
        Ok(Box::new(Cast { to: Some(to) }))
    });
    r.register("", "CastLike", 15..=LATEST_OPSET, |_| {
        Ok(Box::new(Cast { to: None }))
    });
}

impl Operator for Cast {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        let to = match self.to {
            Some(d) => d,
            None => infer_arg(inputs, 1)?.ty.dtype,
        };
        Ok(vec![TensorType {
            dtype: to,
            shape: x.ty.shape.clone(),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let to = match self.to {
            Some(d) => d,
            None => arg(inputs, 1)?.dtype(),
        };
        Ok(vec![x.cast(to)])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let to = match self.to {
            Some(d) => d,
            None => input(inputs, 1)?.dtype,
        };
        let (from, to) = (x.dtype.to_ir(), to.to_ir());
        let vars = placeholders(inputs);
        try_grid_def(vars.clone(), to, x.shape, |i| {
            let v = vars[0].at(i.to_vec());
            if from == to {
                Some(v)
            } else if from.is_float() && to.is_integer() {
                float_to_int(v, from, to)
            } else {
                Some(v.cast(to))
            }
        })
    }
}
