//! Elementwise unary operators: math functions, activations, rounding, predicates (IsNaN,
//! IsInf), Not and BitwiseNot.
//!
//! Float functions are evaluated in f64 and rounded to the input's float type; integer
//! variants (where ONNX allows ints) are evaluated in i128 and wrap like numpy.

use std::fmt;
use std::sync::Arc;

use crate::dtype::DType;
use crate::kernels::broadcast::map1;
use crate::operator::{arg, InferInput, OpContext, OpError, Operator};
use crate::ops::common::{self, infer_same};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_int};

type FloatFn = Arc<dyn Fn(f64) -> f64 + Send + Sync>;
type IntFn = Arc<dyn Fn(i128) -> i128 + Send + Sync>;

/// A unary elementwise operator defined by a float function and, optionally, an integer one.
struct Unary {
    name: &'static str,
    float: FloatFn,
    int: Option<IntFn>,
}

impl fmt::Debug for Unary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Unary({})", self.name)
    }
}

impl Unary {
    fn accepts(&self, d: DType) -> bool {
        d.is_float() || (self.int.is_some() && d.is_int())
    }
}

impl Operator for Unary {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = crate::operator::infer_arg(inputs, 0)?;
        if !self.accepts(x.ty.dtype) {
            return Err(OpError::DType { index: 0, dtype: x.ty.dtype });
        }
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let dt = x.dtype();
        let f = &self.float;
        let out = dispatch_float!(dt, T => map1::<T, T>(x, |v| T::from_f64(f(v.to_f64())))?,
            else match &self.int {
                Some(g) => dispatch_int!(dt, T => map1::<T, T>(x, |v| T::from_i128(g(v.to_i128())))?,
                    else return Err(OpError::DType { index: 0, dtype: dt })),
                None => return Err(OpError::DType { index: 0, dtype: dt }),
            });
        Ok(vec![out])
    }
}

fn reg_float(r: &mut Registry, name: &'static str, since: i64, f: fn(f64) -> f64) {
    r.register("", name, since..=LATEST_OPSET, move |_| Ok(Box::new(Unary { name, float: Arc::new(f), int: None })));
}

fn reg_both(r: &mut Registry, name: &'static str, since: i64, f: fn(f64) -> f64, g: fn(i128) -> i128) {
    r.register("", name, since..=LATEST_OPSET, move |_| {
        Ok(Box::new(Unary { name, float: Arc::new(f), int: Some(Arc::new(g)) }))
    });
}

/// Registers a float unary op whose function depends on attributes.
fn reg_attr<B>(r: &mut Registry, name: &'static str, since: i64, build: B)
where
    B: Fn(&OpContext<'_>) -> Result<FloatFn, OpError> + Send + Sync + 'static,
{
    r.register("", name, since..=LATEST_OPSET, move |ctx| Ok(Box::new(Unary { name, float: build(ctx)?, int: None })));
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn softplus(x: f64) -> f64 {
    // log(1 + exp(x)) without overflow.
    if x > 30.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

fn sign_f(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x // 0 or NaN
    }
}

/// Registers the unary family.
pub fn register(r: &mut Registry) {
    reg_both(r, "Neg", 6, |x| -x, |x| -x);
    reg_both(r, "Abs", 6, f64::abs, i128::abs);
    reg_both(r, "Sign", 9, sign_f, i128::signum);
    reg_both(r, "Relu", 6, |x| if x > 0.0 || x.is_nan() { x } else { 0.0 }, |x| x.max(0));
    reg_float(r, "Sqrt", 6, f64::sqrt);
    reg_float(r, "Reciprocal", 6, |x| 1.0 / x);
    reg_float(r, "Exp", 6, f64::exp);
    reg_float(r, "Log", 6, f64::ln);
    reg_float(r, "Erf", 9, libm::erf);
    reg_float(r, "Sigmoid", 6, sigmoid);
    reg_float(r, "Tanh", 6, f64::tanh);
    reg_float(r, "Floor", 6, f64::floor);
    reg_float(r, "Ceil", 6, f64::ceil);
    reg_float(r, "Round", 11, f64::round_ties_even);
    reg_float(r, "Softplus", 1, softplus);
    reg_float(r, "Softsign", 1, |x| x / (1.0 + x.abs()));
    reg_float(r, "Mish", 18, |x| x * softplus(x).tanh());
    reg_float(r, "HardSwish", 14, |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0));
    reg_float(r, "Sin", 7, f64::sin);
    reg_float(r, "Cos", 7, f64::cos);
    reg_float(r, "Tan", 7, f64::tan);
    reg_float(r, "Asin", 7, f64::asin);
    reg_float(r, "Acos", 7, f64::acos);
    reg_float(r, "Atan", 7, f64::atan);
    reg_float(r, "Sinh", 9, f64::sinh);
    reg_float(r, "Cosh", 9, f64::cosh);
    reg_float(r, "Asinh", 9, f64::asinh);
    reg_float(r, "Acosh", 9, f64::acosh);
    reg_float(r, "Atanh", 9, f64::atanh);

    reg_attr(r, "LeakyRelu", 6, |c| {
        let a = c.attrs.float_or("alpha", 0.01)? as f64;
        Ok(Arc::new(move |x| if x >= 0.0 { x } else { a * x }))
    });
    reg_attr(r, "Elu", 6, |c| {
        let a = c.attrs.float_or("alpha", 1.0)? as f64;
        Ok(Arc::new(move |x| if x >= 0.0 { x } else { a * x.exp_m1() }))
    });
    reg_attr(r, "Selu", 6, |c| {
        let a = c.attrs.float_or("alpha", 1.673_263_2)? as f64;
        let g = c.attrs.float_or("gamma", 1.050_701)? as f64;
        Ok(Arc::new(move |x| if x > 0.0 { g * x } else { g * a * x.exp_m1() }))
    });
    reg_attr(r, "Celu", 12, |c| {
        let a = c.attrs.float_or("alpha", 1.0)? as f64;
        Ok(Arc::new(move |x| x.max(0.0) + (a * (x / a).exp_m1()).min(0.0)))
    });
    reg_attr(r, "HardSigmoid", 6, |c| {
        let a = c.attrs.float_or("alpha", 0.2)? as f64;
        let b = c.attrs.float_or("beta", 0.5)? as f64;
        Ok(Arc::new(move |x| (a * x + b).clamp(0.0, 1.0)))
    });
    reg_attr(r, "ThresholdedRelu", 10, |c| {
        let a = c.attrs.float_or("alpha", 1.0)? as f64;
        Ok(Arc::new(move |x| if x > a { x } else { 0.0 }))
    });
    reg_attr(r, "Gelu", 20, |c| {
        let approx = c.attrs.string_or("approximate", "none")?;
        match approx.as_str() {
            "none" => Ok(Arc::new(|x: f64| 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)))),
            "tanh" => Ok(Arc::new(|x: f64| {
                let k = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
            })),
            other => Err(OpError::attr("approximate", format!("must be none or tanh, got `{other}`"))),
        }
    });
    r.register("", "Shrink", 9..=LATEST_OPSET, |c| {
        let bias = c.attrs.float_or("bias", 0.0)? as f64;
        let lambd = c.attrs.float_or("lambd", 0.5)? as f64;
        let f = move |x: f64| {
            if x < -lambd {
                x + bias
            } else if x > lambd {
                x - bias
            } else {
                0.0
            }
        };
        let g = move |x: i128| f(x as f64) as i128;
        Ok(Box::new(Unary { name: "Shrink", float: Arc::new(f), int: Some(Arc::new(g)) }))
    });

    r.register("", "Not", 1..=LATEST_OPSET, |_| Ok(Box::new(Predicate::Not)));
    r.register("", "BitwiseNot", 18..=LATEST_OPSET, |_| Ok(Box::new(Predicate::BitwiseNot)));
    r.register("", "IsNaN", 9..=LATEST_OPSET, |_| Ok(Box::new(Predicate::IsNaN)));
    r.register("", "IsInf", 10..=LATEST_OPSET, |c| {
        let neg = c.attrs.int_or("detect_negative", 1)? != 0;
        let pos = c.attrs.int_or("detect_positive", 1)? != 0;
        Ok(Box::new(Predicate::IsInf { neg, pos }))
    });
}

/// Unary operators with their own dtype rules.
#[derive(Debug)]
enum Predicate {
    Not,
    BitwiseNot,
    IsNaN,
    IsInf { neg: bool, pos: bool },
}

impl Operator for Predicate {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        match self {
            Predicate::Not => infer_same(inputs, common::boolean),
            Predicate::BitwiseNot => infer_same(inputs, common::int),
            Predicate::IsNaN | Predicate::IsInf { .. } => {
                let mut t = infer_same(inputs, common::float)?;
                t[0].dtype = DType::Bool;
                Ok(t)
            }
        }
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let dt = x.dtype();
        let bad = || OpError::DType { index: 0, dtype: dt };
        let out = match *self {
            Predicate::Not => map1::<bool, bool>(x, |v| !v)?,
            Predicate::BitwiseNot => dispatch_int!(dt, T => map1::<T, T>(x, |v| T::from_i128(!v.to_i128()))?, else return Err(bad())),
            Predicate::IsNaN => dispatch_float!(dt, T => map1::<T, bool>(x, |v| v.to_f64().is_nan())?, else return Err(bad())),
            Predicate::IsInf { neg, pos } => dispatch_float!(dt, T => map1::<T, bool>(x, |v| {
                let v = v.to_f64();
                v.is_infinite() && ((v > 0.0 && pos) || (v < 0.0 && neg))
            })?, else return Err(bad())),
        };
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(name: &str, attrs: crate::Attributes) -> Box<dyn Operator> {
        let r = Registry::global();
        let ctx = OpContext { domain: "", op_type: name, opset: 20, attrs: &attrs, num_inputs: 1, num_outputs: 1 };
        r.lookup("", name, 20).unwrap().build(&ctx).unwrap()
    }

    #[test]
    fn relu_and_abs_on_ints_and_floats() {
        let x = Tensor::new(vec![3], vec![-2i32, 0, 5]).unwrap();
        let op = build("Relu", Default::default());
        assert_eq!(op.eval(&[Some(&x)]).unwrap()[0].as_slice::<i32>().unwrap(), &[0, 0, 5]);
        let y = Tensor::new(vec![2], vec![-1.5f32, 2.0]).unwrap();
        let op = build("Abs", Default::default());
        assert_eq!(op.eval(&[Some(&y)]).unwrap()[0].as_slice::<f32>().unwrap(), &[1.5, 2.0]);
    }

    #[test]
    fn float_only_ops_reject_ints() {
        let x = Tensor::new(vec![1], vec![1i32]).unwrap();
        assert!(build("Exp", Default::default()).eval(&[Some(&x)]).is_err());
    }

    #[test]
    fn round_is_half_to_even() {
        let x = Tensor::new(vec![4], vec![0.5f32, 1.5, 2.5, -0.5]).unwrap();
        let y = build("Round", Default::default()).eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[0.0, 2.0, 2.0, -0.0]);
    }
}
