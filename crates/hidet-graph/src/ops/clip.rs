//! Clip: bounds from attributes (opset 6-10) or optional inputs (opset 11+).

use crate::dispatch_numeric;
use crate::kernels::broadcast::map1;
use crate::operator::{arg, opt_arg, InferInput, OpError, Operator};
use crate::ops::common::{self, infer_same};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::{Element, Tensor};

/// Clip with bounds taken from attributes (`Some`) or from inputs 1 and 2 (`None`).
#[derive(Debug)]
struct Clip {
    attr_bounds: Option<(f32, f32)>,
}

/// Registers Clip.
pub fn register(r: &mut Registry) {
    r.register("", "Clip", 6..=10, |c| {
        let lo = c.attrs.float_or("min", f32::MIN)?;
        let hi = c.attrs.float_or("max", f32::MAX)?;
        Ok(Box::new(Clip { attr_bounds: Some((lo, hi)) }))
    });
    r.register("", "Clip", 11..=LATEST_OPSET, |_| Ok(Box::new(Clip { attr_bounds: None })));
}

impl Operator for Clip {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        infer_same(inputs, common::numeric)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let dt = x.dtype();
        let bound = |i: usize| -> Result<Option<f64>, OpError> {
            match opt_arg(inputs, i) {
                None => Ok(None),
                Some(t) if t.numel() == 1 && t.dtype() == dt => Ok(t.to_f64_vec().first().copied()),
                Some(t) => Err(OpError::Invalid(format!("bound #{i} must be a scalar of dtype {dt}, got {}{:?}", t.dtype(), t.shape()))),
            }
        };
        let (lo, hi) = match self.attr_bounds {
            Some((l, h)) => (Some(l as f64), Some(h as f64)),
            None => (bound(1)?, bound(2)?),
        };
        let out = dispatch_numeric!(dt, T => map1::<T, T>(x, |v| {
            let mut y = v;
            if let Some(l) = lo { if y.to_f64() < l { y = T::from_f64(l); } }
            if let Some(h) = hi { if y.to_f64() > h { y = T::from_f64(h); } }
            y
        })?, else return Err(OpError::DType { index: 0, dtype: dt }));
        Ok(vec![out])
    }
}
