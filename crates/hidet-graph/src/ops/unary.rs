//! Elementwise unary operators: math functions, activations, rounding, predicates (IsNaN,
//! IsInf), Not and BitwiseNot.
//!
//! Float functions are evaluated in f64 and rounded to the input's float type; integer
//! variants (where ONNX allows ints) are evaluated in i128 and wrap like numpy.

use std::fmt;
use std::sync::Arc;

use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, ExprKind, UnaryOp};
use hidet_ir::intrinsic::MathFunc;

use crate::dtype::DType;
use crate::kernels::broadcast::map1;
use crate::operator::{arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator};
use crate::ops::common::{self, infer_same};
use crate::ops::compute_util::{clamp, grid_def, input, konst, math1, math_dtype, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_int};

type FloatFn = Arc<dyn Fn(f64) -> f64 + Send + Sync>;
type IntFn = Arc<dyn Fn(i128) -> i128 + Send + Sync>;
/// The IR form of a unary function: the result for the element `x`, both of type `t`
/// (`f32` for `f16`/`bf16` inputs, see [`math_dtype`]; the integer type for integer inputs).
type ExprFn = Arc<dyn Fn(Expr, DataType) -> Expr + Send + Sync>;

/// A unary elementwise operator defined by a float function and, optionally, an integer one.
struct Unary {
    name: &'static str,
    float: FloatFn,
    int: Option<IntFn>,
    /// The compute definition's element function, for every dtype `eval` accepts.
    ir: ExprFn,
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
            return Err(OpError::DType {
                index: 0,
                dtype: x.ty.dtype,
            });
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

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        if !self.accepts(x.dtype) {
            return Err(OpError::DType {
                index: 0,
                dtype: x.dtype,
            });
        }
        let dt = x.dtype.to_ir();
        let t = math_dtype(dt);
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), dt, x.shape, |i| {
            let v = vars[0].at(i.to_vec());
            if t == dt {
                (self.ir)(v, t)
            } else {
                (self.ir)(v.cast(t), t).cast(dt)
            }
        })?;
        Ok(Some(def))
    }
}

fn reg_float(
    r: &mut Registry,
    name: &'static str,
    since: i64,
    f: fn(f64) -> f64,
    ir: fn(Expr, DataType) -> Expr,
) {
    r.register("", name, since..=LATEST_OPSET, move |_| {
        Ok(Box::new(Unary {
            name,
            float: Arc::new(f),
            int: None,
            ir: Arc::new(ir),
        }))
    });
}

fn reg_math(r: &mut Registry, name: &'static str, since: i64, f: fn(f64) -> f64, m: MathFunc) {
    r.register("", name, since..=LATEST_OPSET, move |_| {
        Ok(Box::new(Unary {
            name,
            float: Arc::new(f),
            int: None,
            ir: Arc::new(move |x, _| math1(m, x)),
        }))
    });
}

fn reg_both(
    r: &mut Registry,
    name: &'static str,
    since: i64,
    f: fn(f64) -> f64,
    g: fn(i128) -> i128,
    ir: fn(Expr, DataType) -> Expr,
) {
    r.register("", name, since..=LATEST_OPSET, move |_| {
        Ok(Box::new(Unary {
            name,
            float: Arc::new(f),
            int: Some(Arc::new(g)),
            ir: Arc::new(ir),
        }))
    });
}

/// Registers a float unary op whose function depends on attributes.
fn reg_attr<B>(r: &mut Registry, name: &'static str, since: i64, build: B)
where
    B: Fn(&OpContext<'_>) -> Result<(FloatFn, ExprFn), OpError> + Send + Sync + 'static,
{
    r.register("", name, since..=LATEST_OPSET, move |ctx| {
        let (float, ir) = build(ctx)?;
        Ok(Box::new(Unary {
            name,
            float,
            int: None,
            ir,
        }))
    });
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

/// `log(1 + exp(x))`, `x` itself above 30 where `exp` would overflow `f32`. With `u = exp(x)`
/// and `w = 1 + u`, the logarithm is `log(w)·u / (w - 1)` (Kahan's `log1p`: the rounding of
/// `w` cancels), and `u` itself where `w` rounds to 1, so that far below 0 the result keeps
/// the digits of `exp(x)` instead of being 0.
fn softplus_ir(x: Expr, t: DataType) -> Expr {
    let u = x.exp();
    let w = konst(1.0, t) + u.clone();
    let log1p_exp = Expr::select(
        w.eq(konst(1.0, t)),
        u.clone(),
        math1(MathFunc::Log, w.clone()) * u / (w - konst(1.0, t)),
    );
    Expr::select(x.gt(konst(30.0, t)), x, log1p_exp)
}

fn sign_ir(x: Expr, t: DataType) -> Expr {
    let negative = if t.is_float() || t.scalar.is_signed() {
        Expr::select(x.lt(konst(0.0, t)), konst(-1.0, t), x.clone())
    } else {
        x.clone()
    };
    Expr::select(x.gt(konst(0.0, t)), konst(1.0, t), negative)
}

/// `exp(x) - 1`, accurate to a few ulps also near 0, where the plain difference cancels
/// every digit (`exp(-1e-9) - 1` is 0 in f32): for `|x| < 1/2`, with `u = exp(x)`,
/// `(u - 1)·x / log(u)` (Kahan: the rounding of `u` cancels between the difference, exact
/// there, and the logarithm), and `x` itself where `u` rounds to 1.
fn expm1_ir(x: Expr, t: DataType) -> Expr {
    let u = x.exp();
    let d = &u - konst(1.0, t);
    let small = Expr::select(
        u.eq(konst(1.0, t)),
        x.clone(),
        &d * x.clone() / math1(MathFunc::Log, u),
    );
    Expr::select(
        math1(MathFunc::Abs, x).lt(konst(0.5, t)),
        small,
        d,
    )
}

/// Registers the unary family.
pub fn register(r: &mut Registry) {
    reg_both(r, "Neg", 6, |x| -x, |x| -x, |x, _| -x);
    reg_both(r, "Abs", 6, f64::abs, i128::abs, |x, _| {
        math1(MathFunc::Abs, x)
    });
    reg_both(r, "Sign", 9, sign_f, i128::signum, sign_ir);
    reg_both(
        r,
        "Relu",
        6,
        |x| if x > 0.0 || x.is_nan() { x } else { 0.0 },
        |x| x.max(0),
        |x, t| Expr::select(x.lt(konst(0.0, t)), konst(0.0, t), x),
    );
    reg_math(r, "Sqrt", 6, f64::sqrt, MathFunc::Sqrt);
    reg_float(r, "Reciprocal", 6, |x| 1.0 / x, |x, t| konst(1.0, t) / x);
    reg_math(r, "Exp", 6, f64::exp, MathFunc::Exp);
    reg_math(r, "Log", 6, f64::ln, MathFunc::Log);
    reg_math(r, "Erf", 9, libm::erf, MathFunc::Erf);
    reg_math(r, "Sigmoid", 6, sigmoid, MathFunc::Sigmoid);
    reg_math(r, "Tanh", 6, f64::tanh, MathFunc::Tanh);
    reg_math(r, "Floor", 6, f64::floor, MathFunc::Floor);
    reg_math(r, "Ceil", 6, f64::ceil, MathFunc::Ceil);
    reg_math(r, "Round", 11, f64::round_ties_even, MathFunc::Round);
    reg_float(r, "Softplus", 1, softplus, softplus_ir);
    reg_float(
        r,
        "Softsign",
        1,
        |x| x / (1.0 + x.abs()),
        |x, t| &x / (konst(1.0, t) + math1(MathFunc::Abs, x.clone())),
    );
    reg_float(
        r,
        "Mish",
        18,
        |x| x * softplus(x).tanh(),
        |x, t| &x * math1(MathFunc::Tanh, softplus_ir(x.clone(), t)),
    );
    reg_float(
        r,
        "HardSwish",
        14,
        |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        |x, t| {
            &x * clamp(
                &x / konst(6.0, t) + konst(0.5, t),
                konst(0.0, t),
                konst(1.0, t),
            )
        },
    );
    reg_math(r, "Sin", 7, f64::sin, MathFunc::Sin);
    reg_math(r, "Cos", 7, f64::cos, MathFunc::Cos);
    reg_math(r, "Tan", 7, f64::tan, MathFunc::Tan);
    reg_math(r, "Asin", 7, f64::asin, MathFunc::Asin);
    reg_math(r, "Acos", 7, f64::acos, MathFunc::Acos);
    reg_math(r, "Atan", 7, f64::atan, MathFunc::Atan);
    reg_math(r, "Sinh", 9, f64::sinh, MathFunc::Sinh);
    reg_math(r, "Cosh", 9, f64::cosh, MathFunc::Cosh);
    reg_math(r, "Asinh", 9, f64::asinh, MathFunc::Asinh);
    reg_math(r, "Acosh", 9, f64::acosh, MathFunc::Acosh);
    reg_math(r, "Atanh", 9, f64::atanh, MathFunc::Atanh);

    reg_attr(r, "LeakyRelu", 6, |c| {
        let a = c.attrs.float_or("alpha", 0.01)? as f64;
        Ok((
            Arc::new(move |x| if x >= 0.0 { x } else { a * x }),
            Arc::new(move |x: Expr, t| {
                Expr::select(x.ge(konst(0.0, t)), x.clone(), konst(a, t) * x)
            }),
        ))
    });
    reg_attr(r, "Elu", 6, |c| {
        let a = c.attrs.float_or("alpha", 1.0)? as f64;
        Ok((
            Arc::new(move |x| if x >= 0.0 { x } else { a * x.exp_m1() }),
            Arc::new(move |x: Expr, t| {
                Expr::select(x.ge(konst(0.0, t)), x.clone(), konst(a, t) * expm1_ir(x, t))
            }),
        ))
    });
    reg_attr(r, "Selu", 6, |c| {
        let a = c.attrs.float_or("alpha", 1.673_263_2)? as f64;
        let g = c.attrs.float_or("gamma", 1.050_701)? as f64;
        Ok((
            Arc::new(move |x| if x > 0.0 { g * x } else { g * a * x.exp_m1() }),
            Arc::new(move |x: Expr, t| {
                Expr::select(
                    x.gt(konst(0.0, t)),
                    konst(g, t) * x.clone(),
                    konst(g * a, t) * expm1_ir(x, t),
                )
            }),
        ))
    });
    reg_attr(r, "Celu", 12, |c| {
        let a = c.attrs.float_or("alpha", 1.0)? as f64;
        Ok((
            Arc::new(move |x| x.max(0.0) + (a * (x / a).exp_m1()).min(0.0)),
            Arc::new(move |x: Expr, t| {
                let neg = konst(a, t) * expm1_ir(&x / konst(a, t), t);
                x.max(konst(0.0, t)) + neg.min(konst(0.0, t))
            }),
        ))
    });
    reg_attr(r, "HardSigmoid", 6, |c| {
        let a = c.attrs.float_or("alpha", 0.2)? as f64;
        let b = c.attrs.float_or("beta", 0.5)? as f64;
        Ok((
            Arc::new(move |x| (a * x + b).clamp(0.0, 1.0)),
            Arc::new(move |x: Expr, t| {
                clamp(konst(a, t) * x + konst(b, t), konst(0.0, t), konst(1.0, t))
            }),
        ))
    });
    reg_attr(r, "ThresholdedRelu", 10, |c| {
        let a = c.attrs.float_or("alpha", 1.0)? as f64;
        Ok((
            Arc::new(move |x| if x > a { x } else { 0.0 }),
            Arc::new(move |x: Expr, t| Expr::select(x.gt(konst(a, t)), x.clone(), konst(0.0, t))),
        ))
    });
    reg_attr(r, "Gelu", 20, |c| {
        let approx = c.attrs.string_or("approximate", "none")?;
        match approx.as_str() {
            "none" => Ok((
                Arc::new(|x: f64| 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))),
                Arc::new(|x: Expr, t| {
                    let erf = math1(
                        MathFunc::Erf,
                        &x * konst(std::f64::consts::FRAC_1_SQRT_2, t),
                    );
                    konst(0.5, t) * x * (konst(1.0, t) + erf)
                }),
            )),
            "tanh" => Ok((
                Arc::new(|x: f64| {
                    let k = (2.0 / std::f64::consts::PI).sqrt();
                    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
                }),
                Arc::new(|x: Expr, t| {
                    let k = (2.0 / std::f64::consts::PI).sqrt();
                    let cube = &x * x.clone() * x.clone();
                    let inner = konst(k, t) * (x.clone() + konst(0.044715, t) * cube);
                    konst(0.5, t) * x * (konst(1.0, t) + math1(MathFunc::Tanh, inner))
                }),
            )),
            other => Err(OpError::attr(
                "approximate",
                format!("must be none or tanh, got `{other}`"),
            )),
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
        let float_ir = move |x: Expr, t: DataType| {
            let above = Expr::select(x.gt(konst(lambd, t)), &x - konst(bias, t), konst(0.0, t));
            Expr::select(x.lt(konst(-lambd, t)), &x + konst(bias, t), above)
        };
        let ir = move |x: Expr, t: DataType| {
            if t.is_float() {
                float_ir(x, t)
            } else {
                let y = float_ir(x.cast(DataType::F64), DataType::F64).cast(DataType::I64);
                if t == DataType::I64 {
                    y
                } else {
                    y.cast(t)
                }
            }
        };
        Ok(Box::new(Unary {
            name: "Shrink",
            float: Arc::new(f),
            int: Some(Arc::new(g)),
            ir: Arc::new(ir),
        }))
    });

    r.register("", "Not", 1..=LATEST_OPSET, |_| {
        Ok(Box::new(Predicate::Not))
    });
    r.register("", "BitwiseNot", 18..=LATEST_OPSET, |_| {
        Ok(Box::new(Predicate::BitwiseNot))
    });
    r.register("", "IsNaN", 9..=LATEST_OPSET, |_| {
        Ok(Box::new(Predicate::IsNaN))
    });
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
        let bad = || OpError::DType {
            index: 0,
            dtype: dt,
        };
        let out = match *self {
            Predicate::Not => map1::<bool, bool>(x, |v| !v)?,
            Predicate::BitwiseNot => {
                dispatch_int!(dt, T => map1::<T, T>(x, |v| T::from_i128(!v.to_i128()))?, else return Err(bad()))
            }
            Predicate::IsNaN => {
                dispatch_float!(dt, T => map1::<T, bool>(x, |v| v.to_f64().is_nan())?, else return Err(bad()))
            }
            Predicate::IsInf { neg, pos } => dispatch_float!(dt, T => map1::<T, bool>(x, |v| {
                let v = v.to_f64();
                v.is_infinite() && ((v > 0.0 && pos) || (v < 0.0 && neg))
            })?, else return Err(bad())),
        };
        Ok(vec![out])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        let accepted = match self {
            Predicate::Not => common::boolean(x.dtype),
            Predicate::BitwiseNot => common::int(x.dtype),
            Predicate::IsNaN | Predicate::IsInf { .. } => common::float(x.dtype),
        };
        if !accepted {
            return Err(OpError::DType {
                index: 0,
                dtype: x.dtype,
            });
        }
        let dt = x.dtype.to_ir();
        let out = match self {
            Predicate::Not | Predicate::BitwiseNot => dt,
            Predicate::IsNaN | Predicate::IsInf { .. } => DataType::BOOL,
        };
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), out, x.shape, |i| {
            let v = vars[0].at(i.to_vec());
            match *self {
                Predicate::Not => !v,
                Predicate::BitwiseNot => Expr::new(ExprKind::Unary(UnaryOp::BitNot, v)),
                Predicate::IsNaN => math1(MathFunc::IsNan, v),
                Predicate::IsInf { neg, pos } => {
                    let zero = konst(0.0, dt);
                    let inf = math1(MathFunc::IsInf, v.clone());
                    match (pos, neg) {
                        (true, true) => inf,
                        (true, false) => inf.and(v.gt(zero)),
                        (false, true) => inf.and(v.lt(zero)),
                        (false, false) => Expr::bool(false),
                    }
                }
            }
        })?;
        Ok(Some(def))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(name: &str, attrs: crate::Attributes) -> Box<dyn Operator> {
        let r = Registry::global();
        let ctx = OpContext {
            domain: "",
            op_type: name,
            opset: 20,
            attrs: &attrs,
            num_inputs: 1,
            num_outputs: 1,
        };
        r.lookup("", name, 20).unwrap().build(&ctx).unwrap()
    }

    #[test]
    fn relu_and_abs_on_ints_and_floats() {
        let x = Tensor::new(vec![3], vec![-2i32, 0, 5]).unwrap();
        let op = build("Relu", Default::default());
        assert_eq!(
            op.eval(&[Some(&x)]).unwrap()[0].as_slice::<i32>().unwrap(),
            &[0, 0, 5]
        );
        let y = Tensor::new(vec![2], vec![-1.5f32, 2.0]).unwrap();
        let op = build("Abs", Default::default());
        assert_eq!(
            op.eval(&[Some(&y)]).unwrap()[0].as_slice::<f32>().unwrap(),
            &[1.5, 2.0]
        );
    }

    #[test]
    fn float_only_ops_reject_ints() {
        let x = Tensor::new(vec![1], vec![1i32]).unwrap();
        assert!(build("Exp", Default::default()).eval(&[Some(&x)]).is_err());
    }

    #[test]
    fn round_is_half_to_even() {
        let x = Tensor::new(vec![4], vec![0.5f32, 1.5, 2.5, -0.5]).unwrap();
        let y = build("Round", Default::default())
            .eval(&[Some(&x)])
            .unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[0.0, 2.0, 2.0, -0.0]);
    }
}
