//! Elementwise binary operators with numpy broadcasting: arithmetic, Pow, Mod, comparisons,
//! logical and bitwise operators.
//!
//! Floats are computed in f64 and rounded to the output type (for f32 this equals the
//! correctly rounded f32 result for + - * /); integers are computed in i128 and wrap to the
//! output width like numpy.

use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;
use hidet_ir::intrinsic::MathFunc;

use crate::dtype::DType;
use crate::kernels::broadcast::map2;
use crate::operator::{arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator};
use crate::ops::common::{self, infer_broadcast};
use crate::ops::compute_util::{
    broadcast, broadcast_read, float_to_int, input, placeholders, trunc_div, trunc_rem,
    try_grid_def,
};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::TensorType;
use crate::string::Str;
use crate::tensor::{Element, Tensor};
use crate::{dispatch_all, dispatch_float, dispatch_int};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Mod { fmod: bool },
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    And,
    Or,
    Xor,
    BitShift { left: bool },
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
}

/// A broadcasting binary elementwise operator.
#[derive(Debug)]
struct Binary {
    kind: Kind,
}

/// Registers the binary family.
pub fn register(r: &mut Registry) {
    let simple: &[(&str, i64, Kind)] = &[
        ("Add", 7, Kind::Add),
        ("Sub", 7, Kind::Sub),
        ("Mul", 7, Kind::Mul),
        ("Div", 7, Kind::Div),
        ("Pow", 7, Kind::Pow),
        ("Equal", 7, Kind::Equal),
        ("Less", 7, Kind::Less),
        ("Greater", 7, Kind::Greater),
        ("LessOrEqual", 12, Kind::LessOrEqual),
        ("GreaterOrEqual", 12, Kind::GreaterOrEqual),
        ("And", 7, Kind::And),
        ("Or", 7, Kind::Or),
        ("Xor", 7, Kind::Xor),
        ("BitwiseAnd", 18, Kind::BitwiseAnd),
        ("BitwiseOr", 18, Kind::BitwiseOr),
        ("BitwiseXor", 18, Kind::BitwiseXor),
    ];
    for &(name, since, kind) in simple {
        r.register("", name, since..=LATEST_OPSET, move |_| {
            Ok(Box::new(Binary { kind }))
        });
    }
    r.register("", "Mod", 10..=LATEST_OPSET, |ctx: &OpContext<'_>| {
        let fmod = ctx.attrs.int_or("fmod", 0)?;
        if fmod != 0 && fmod != 1 {
            return Err(OpError::attr("fmod", format!("must be 0 or 1, got {fmod}")));
        }
        Ok(Box::new(Binary {
            kind: Kind::Mod { fmod: fmod == 1 },
        }))
    });
    r.register("", "BitShift", 11..=LATEST_OPSET, |ctx: &OpContext<'_>| {
        let dir = ctx.attrs.string_or("direction", "")?;
        let left = match dir.as_str() {
            "LEFT" => true,
            "RIGHT" => false,
            other => {
                return Err(OpError::attr(
                    "direction",
                    format!("must be LEFT or RIGHT, got `{other}`"),
                ))
            }
        };
        Ok(Box::new(Binary {
            kind: Kind::BitShift { left },
        }))
    });
}

impl Binary {
    fn accepts(&self, d: DType) -> bool {
        match self.kind {
            Kind::Add | Kind::Sub | Kind::Mul | Kind::Div | Kind::Pow | Kind::Mod { .. } => {
                common::numeric(d)
            }
            Kind::Less | Kind::LessOrEqual | Kind::Greater | Kind::GreaterOrEqual => {
                common::numeric(d)
            }
            // Equal also compares booleans and strings (not the storage-only types).
            Kind::Equal => !d.is_storage_only(),
            Kind::And | Kind::Or | Kind::Xor => common::boolean(d),
            Kind::BitShift { .. } => d.is_unsigned_int(),
            Kind::BitwiseAnd | Kind::BitwiseOr | Kind::BitwiseXor => common::int(d),
        }
    }

    fn is_comparison(&self) -> bool {
        matches!(
            self.kind,
            Kind::Equal | Kind::Less | Kind::LessOrEqual | Kind::Greater | Kind::GreaterOrEqual
        )
    }
}

impl Operator for Binary {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let a = crate::operator::infer_arg(inputs, 0)?;
        if !self.accepts(a.ty.dtype) {
            return Err(OpError::DType {
                index: 0,
                dtype: a.ty.dtype,
            });
        }
        let out = if self.is_comparison() {
            Some(DType::Bool)
        } else {
            None
        };
        // Pow's exponent may have another dtype.
        infer_broadcast(&inputs[..inputs.len().min(2)], out, self.kind != Kind::Pow)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let dt = a.dtype();
        if !self.accepts(dt) {
            return Err(OpError::DType {
                index: 0,
                dtype: dt,
            });
        }
        if self.kind != Kind::Pow && b.dtype() != dt {
            return Err(OpError::Invalid(format!(
                "input dtypes differ: {dt} and {}",
                b.dtype()
            )));
        }
        let out = match self.kind {
            Kind::Pow => pow(a, b)?,
            Kind::Equal | Kind::Less | Kind::LessOrEqual | Kind::Greater | Kind::GreaterOrEqual => {
                compare(self.kind, a, b)?
            }
            Kind::And | Kind::Or | Kind::Xor => {
                let k = self.kind;
                map2::<bool, bool, bool>(a, b, move |x, y| match k {
                    Kind::And => x && y,
                    Kind::Or => x || y,
                    _ => x ^ y,
                })?
            }
            _ => arith(self.kind, a, b)?,
        };
        Ok(vec![out])
    }

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (a, b) = (input(inputs, 0)?, input(inputs, 1)?);
        let dt = a.dtype;
        if !self.accepts(dt) {
            return Err(OpError::DType {
                index: 0,
                dtype: dt,
            });
        }
        if self.kind == Kind::Pow && b.dtype == DType::Bool {
            return Err(OpError::DType {
                index: 1,
                dtype: b.dtype,
            });
        }
        if self.kind != Kind::Pow && b.dtype != dt {
            return Err(OpError::Invalid(format!(
                "input dtypes differ: {dt} and {}",
                b.dtype
            )));
        }
        let shape = broadcast(&[a.shape, b.shape])?;
        let (ta, tb) = (dt.to_ir(), b.dtype.to_ir());
        let out = if self.is_comparison() {
            DataType::BOOL
        } else {
            ta
        };
        let vars = placeholders(inputs);
        try_grid_def(vars.clone(), out, &shape, |i| {
            let x = broadcast_read(&vars[0], a.shape, i);
            let y = broadcast_read(&vars[1], b.shape, i);
            self.element(x, y, ta, tb)
        })
    }
}

impl Binary {
    /// The output element for elements `x: ta` and `y: tb`, with `eval`'s semantics; `None`
    /// where the IR has no equivalent (integer `Pow`, float-to-`u64` results).
    fn element(&self, x: Expr, y: Expr, ta: DataType, tb: DataType) -> Option<Expr> {
        let signed = ta.is_integer() && ta.scalar.is_signed();
        let zero = Expr::zero(ta);
        Some(match self.kind {
            Kind::Add => x + y,
            Kind::Sub => x - y,
            Kind::Mul => x * y,
            Kind::Div if signed => trunc_div(x, y, ta),
            Kind::Div => x / y,
            Kind::Pow if ta.is_float() && ta == tb => Expr::math(MathFunc::Pow, vec![x, y]),
            Kind::Pow => {
                let p = Expr::math(
                    MathFunc::Pow,
                    vec![x.cast(DataType::F64), y.cast(DataType::F64)],
                );
                match (ta.is_float(), tb.is_float()) {
                    (true, _) => p.cast(ta),
                    (false, true) => float_to_int(p, DataType::F64, ta)?,
                    (false, false) => return None,
                }
            }
            Kind::Mod { fmod: true } if signed => trunc_rem(x, y, ta),
            Kind::Mod { fmod: true } => x % y,
            Kind::Mod { fmod: false } if ta.is_float() => {
                let r = &x % y.clone();
                let fix = r.ne(zero.clone()).and(r.lt(zero.clone()).ne(y.lt(zero)));
                Expr::select(fix, &r + y, r)
            }
            Kind::Mod { fmod: false } => x % y,
            Kind::Equal => x.eq(y),
            Kind::Less => x.lt(y),
            Kind::LessOrEqual => x.le(y),
            Kind::Greater => x.gt(y),
            Kind::GreaterOrEqual => x.ge(y),
            Kind::And => x.and(y),
            Kind::Or => x.or(y),
            Kind::Xor => x.ne(y),
            Kind::BitShift { left } => {
                let bits = Expr::int_of((ta.bytes() * 8) as i64, ta);
                let shifted = if left { x << y.clone() } else { x >> y.clone() };
                Expr::select(y.lt(bits), shifted, zero)
            }
            Kind::BitwiseAnd => x & y,
            Kind::BitwiseOr => x | y,
            Kind::BitwiseXor => x ^ y,
        })
    }
}

fn float_op(kind: Kind, x: f64, y: f64) -> f64 {
    match kind {
        Kind::Add => x + y,
        Kind::Sub => x - y,
        Kind::Mul => x * y,
        Kind::Div => x / y,
        Kind::Mod { fmod: true } => x % y,
        Kind::Mod { fmod: false } => {
            // numpy.mod: result has the sign of the divisor.
            let r = x % y;
            if r != 0.0 && ((r < 0.0) != (y < 0.0)) {
                r + y
            } else {
                r
            }
        }
        _ => f64::NAN,
    }
}

/// Integer op; `None` for division by zero.
fn int_op(kind: Kind, x: i128, y: i128) -> Option<i128> {
    Some(match kind {
        Kind::Add => x + y,
        Kind::Sub => x - y,
        Kind::Mul => x.wrapping_mul(y),
        Kind::Div => x.checked_div(y)?,
        Kind::Mod { fmod: true } => x.checked_rem(y)?,
        Kind::Mod { fmod: false } => {
            let r = x.checked_rem(y)?;
            if r != 0 && ((r < 0) != (y < 0)) {
                r + y
            } else {
                r
            }
        }
        Kind::BitwiseAnd => x & y,
        Kind::BitwiseOr => x | y,
        Kind::BitwiseXor => x ^ y,
        Kind::BitShift { left: true } => {
            if (0..128).contains(&y) {
                x << y
            } else {
                0
            }
        }
        Kind::BitShift { left: false } => {
            if (0..128).contains(&y) {
                x >> y
            } else {
                0
            }
        }
        _ => return None,
    })
}

fn arith(kind: Kind, a: &Tensor, b: &Tensor) -> Result<Tensor, OpError> {
    let dt = a.dtype();
    dispatch_float!(dt, T => map2::<T, T, T>(a, b, |x, y| T::from_f64(float_op(kind, x.to_f64(), y.to_f64()))),
        else dispatch_int!(dt, T => {
            let div_by_zero = std::cell::Cell::new(false);
            let t = map2::<T, T, T>(a, b, |x, y| match int_op(kind, x.to_i128(), y.to_i128()) {
                Some(v) => T::from_i128(v),
                None => { div_by_zero.set(true); T::default() }
            })?;
            if div_by_zero.get() {
                return Err(OpError::Invalid("integer division by zero".into()));
            }
            Ok(t)
        }, else Err(OpError::DType { index: 0, dtype: dt })))
}

fn compare(kind: Kind, a: &Tensor, b: &Tensor) -> Result<Tensor, OpError> {
    fn cmp<V: PartialOrd>(kind: Kind, x: V, y: V) -> bool {
        match kind {
            Kind::Equal => x == y,
            Kind::Less => x < y,
            Kind::LessOrEqual => x <= y,
            Kind::Greater => x > y,
            _ => x >= y,
        }
    }
    let dt = a.dtype();
    if dt.is_string() {
        map2::<Str, Str, bool>(a, b, |x, y| cmp(kind, x, y))
    } else if dt.is_float() {
        dispatch_float!(dt, T => map2::<T, T, bool>(a, b, |x, y| cmp(kind, x.to_f64(), y.to_f64())),
            else Err(OpError::DType { index: 0, dtype: dt }))
    } else {
        dispatch_all!(dt, T => map2::<T, T, bool>(a, b, |x, y| cmp(kind, x.to_i128(), y.to_i128())))
    }
}

fn pow(a: &Tensor, b: &Tensor) -> Result<Tensor, OpError> {
    let (da, db) = (a.dtype(), b.dtype());
    if db == DType::Bool {
        return Err(OpError::DType {
            index: 1,
            dtype: db,
        });
    }
    dispatch_all!(da, A => dispatch_all!(db, B => {
        if da.is_int() && db.is_int() {
            map2::<A, B, A>(a, b, |x, y| A::from_i128(int_pow(x.to_i128(), y.to_i128())))
        } else {
            map2::<A, B, A>(a, b, |x, y| A::from_f64(x.to_f64().powf(y.to_f64())))
        }
    }))
}

/// Integer power with wrapping; negative exponents give the truncated real result.
fn int_pow(x: i128, y: i128) -> i128 {
    if y < 0 {
        return (x as f64).powf(y as f64) as i128;
    }
    let mut result: i128 = 1;
    let mut base = x;
    let mut e = y;
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(kind: Kind, a: Tensor, b: Tensor) -> Tensor {
        Binary { kind }
            .eval(&[Some(&a), Some(&b)])
            .unwrap()
            .remove(0)
    }

    #[test]
    fn mod_signs_follow_numpy_and_c() {
        let a = Tensor::new(vec![4], vec![-4i32, 7, 5, -9]).unwrap();
        let b = Tensor::new(vec![4], vec![3i32, -3, 8, -2]).unwrap();
        assert_eq!(
            run(Kind::Mod { fmod: false }, a.clone(), b.clone())
                .as_slice::<i32>()
                .unwrap(),
            &[2, -2, 5, -1]
        );
        assert_eq!(
            run(Kind::Mod { fmod: true }, a, b)
                .as_slice::<i32>()
                .unwrap(),
            &[-1, 1, 5, -1]
        );
    }

    #[test]
    fn int_div_by_zero_is_error() {
        let a = Tensor::new(vec![1], vec![1i64]).unwrap();
        let b = Tensor::new(vec![1], vec![0i64]).unwrap();
        assert!(Binary { kind: Kind::Div }
            .eval(&[Some(&a), Some(&b)])
            .is_err());
    }

    #[test]
    fn add_broadcasts_f16() {
        use half::f16;
        let a = Tensor::new(vec![2, 1], vec![f16::from_f32(1.5), f16::from_f32(-2.0)]).unwrap();
        let b = Tensor::new(vec![2], vec![f16::from_f32(0.25), f16::from_f32(3.0)]).unwrap();
        let c = run(Kind::Add, a, b);
        assert_eq!(c.shape(), &[2, 2]);
        assert_eq!(c.to_f64_vec(), vec![1.75, 4.5, -1.75, 1.0]);
    }
}
