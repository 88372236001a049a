//! Clip: bounds from attributes (opset 6-10) or optional inputs (opset 11+).

use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;

use crate::dispatch_numeric;
use crate::kernels::broadcast::map1;
use crate::operator::{arg, opt_arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::{self, infer_same};
use crate::ops::compute_util::{grid_def, input, int_bounds, konst, opt_input, placeholders};
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
        Ok(Box::new(Clip {
            attr_bounds: Some((lo, hi)),
        }))
    });
    r.register("", "Clip", 11..=LATEST_OPSET, |_| {
        Ok(Box::new(Clip { attr_bounds: None }))
    });
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
                Some(t) => Err(OpError::Invalid(format!(
                    "bound #{i} must be a scalar of dtype {dt}, got {}{:?}",
                    t.dtype(),
                    t.shape()
                ))),
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

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let dt = x.dtype;
        if !common::numeric(dt) {
            return Err(OpError::DType {
                index: 0,
                dtype: dt,
            });
        }
        let t = dt.to_ir();
        let vars = placeholders(inputs);
        let (lo, hi) = match self.attr_bounds {
            Some((l, h)) => match (
                attr_bound(l as f64, t, true),
                attr_bound(h as f64, t, false),
            ) {
                (AttrBound::Inexpressible, _) | (_, AttrBound::Inexpressible) => return Ok(None),
                (l, h) => (l.applied(), h.applied()),
            },
            None => {
                let bound = |i: usize| -> Result<Option<Bound>, OpError> {
                    match opt_input(inputs, i) {
                        None => Ok(None),
                        Some(b) if b.shape.iter().product::<usize>() == 1 && b.dtype == dt => {
                            let v = vars[i].at(vec![Expr::int(0); b.shape.len()]);
                            Ok(Some(Bound {
                                test: v.clone(),
                                value: v,
                            }))
                        }
                        Some(b) => Err(OpError::Invalid(format!(
                            "bound #{i} must be a scalar of dtype {dt}, got {}{:?}",
                            b.dtype, b.shape
                        ))),
                    }
                };
                (bound(1)?, bound(2)?)
            }
        };
        let def = grid_def(vars.clone(), t, x.shape, |i| {
            let v = vars[0].at(i.to_vec());
            let clamp = |y: Expr, b: Option<Bound>, below: bool| match b {
                None => y,
                Some(b) => {
                    let probe = if b.test.dtype() == Some(t) {
                        y.clone()
                    } else {
                        y.cast(DataType::F64)
                    };
                    let out = if below {
                        probe.lt(b.test)
                    } else {
                        probe.gt(b.test)
                    };
                    Expr::select(out, b.value, y)
                }
            };
            clamp(clamp(v, lo, true), hi, false)
        })?;
        Ok(Some(def))
    }
}

/// A bound of the clip: `y` is replaced by `value` where `y < test` (lower) or `y > test`
/// (upper), `y` compared in `test`'s type.
struct Bound {
    test: Expr,
    value: Expr,
}

/// How an attribute bound (opset 6-10) acts on elements of a given type.
enum AttrBound {
    Applies(Bound),
    /// No element of the type is beyond the bound.
    Never,
    /// The replacement value has no IR constant (beyond `i64::MAX`).
    Inexpressible,
}

impl AttrBound {
    fn applied(self) -> Option<Bound> {
        match self {
            AttrBound::Applies(b) => Some(b),
            AttrBound::Never | AttrBound::Inexpressible => None,
        }
    }
}

/// An attribute bound `b` for elements of `t`, as `eval` applies it: compared in `f64`,
/// replaced by `b` converted to `t` (truncated and saturated for integers). Float bounds
/// are compared in `t` directly, which selects the same elements because rounding to `t`
/// is monotonic and the replacement is that same rounded value.
fn attr_bound(b: f64, t: DataType, lower: bool) -> AttrBound {
    if t.is_float() {
        return AttrBound::Applies(Bound {
            test: konst(b, t),
            value: konst(b, t),
        });
    }
    let (min, max) = int_bounds(t);
    if (lower && b <= min as f64) || (!lower && b >= max as f64) {
        return AttrBound::Never;
    }
    let value = (b.trunc() as i128).clamp(min, max);
    match i64::try_from(value) {
        Ok(v) => AttrBound::Applies(Bound {
            test: Expr::float_of(b, DataType::F64),
            value: Expr::int_of(v, t),
        }),
        Err(_) => AttrBound::Inexpressible,
    }
}
