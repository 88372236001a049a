//! Variadic broadcasting reductions over inputs: Min, Max, Sum, Mean.

use crate::kernels::broadcast::map2;
use crate::operator::{arg, InferInput, OpError, Operator};
use crate::ops::common::infer_broadcast;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_numeric};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Min,
    Max,
    Sum,
    Mean,
}

#[derive(Debug)]
struct Variadic {
    kind: Kind,
}

/// Registers Min, Max, Sum, Mean.
pub fn register(r: &mut Registry) {
    for (name, kind) in [("Min", Kind::Min), ("Max", Kind::Max), ("Sum", Kind::Sum), ("Mean", Kind::Mean)] {
        r.register("", name, 8..=LATEST_OPSET, move |_| Ok(Box::new(Variadic { kind })));
    }
}

impl Operator for Variadic {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let t = infer_broadcast(inputs, None, true)?;
        if t[0].dtype == crate::DType::Bool {
            return Err(OpError::DType { index: 0, dtype: t[0].dtype });
        }
        Ok(t)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let mut acc = arg(inputs, 0)?.clone();
        let dt = acc.dtype();
        let kind = self.kind;
        let present: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
        for t in &present[1..] {
            if t.dtype() != dt {
                return Err(OpError::Invalid(format!("input dtypes differ: {dt} and {}", t.dtype())));
            }
            acc = dispatch_numeric!(dt, T => map2::<T, T, T>(&acc, t, |a, b| combine(kind, a, b))?,
                else return Err(OpError::DType { index: 0, dtype: dt }));
        }
        if kind == Kind::Mean {
            let n = present.len() as f64;
            acc = dispatch_float!(dt, T => crate::kernels::broadcast::map1::<T, T>(&acc, |a| T::from_f64(a.to_f64() / n))?,
                else crate::dispatch_int!(dt, T => crate::kernels::broadcast::map1::<T, T>(&acc, |a| T::from_i128(a.to_i128() / present.len() as i128))?,
                    else return Err(OpError::DType { index: 0, dtype: dt })));
        }
        Ok(vec![acc])
    }
}

fn combine<T: Element>(kind: Kind, a: T, b: T) -> T {
    let is_float = T::DTYPE.is_float();
    match kind {
        Kind::Min | Kind::Max => {
            if is_float && (a.to_f64().is_nan() || b.to_f64().is_nan()) {
                return T::from_f64(f64::NAN);
            }
            let a_smaller = if is_float { a.to_f64() < b.to_f64() } else { a.to_i128() < b.to_i128() };
            if a_smaller == (kind == Kind::Min) {
                a
            } else {
                b
            }
        }
        Kind::Sum | Kind::Mean => {
            if is_float {
                T::from_f64(a.to_f64() + b.to_f64())
            } else {
                T::from_i128(a.to_i128() + b.to_i128())
            }
        }
    }
}
