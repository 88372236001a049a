//! Variadic broadcasting reductions over inputs: Min, Max, Sum, Mean.

use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;
use hidet_ir::intrinsic::MathFunc;

use crate::kernels::broadcast::map2;
use crate::operator::{arg, ComputeDef, ComputeInput, InferInput, OpError, Operator};
use crate::ops::common::infer_broadcast;
use crate::ops::compute_util::{
    broadcast, broadcast_read, grid_def, input, konst, math1, placeholders, trunc_div,
};
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
    for (name, kind) in [
        ("Min", Kind::Min),
        ("Max", Kind::Max),
        ("Sum", Kind::Sum),
        ("Mean", Kind::Mean),
    ] {
        r.register("", name, 8..=LATEST_OPSET, move |_| {
            Ok(Box::new(Variadic { kind }))
        });
    }
}

impl Operator for Variadic {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let t = infer_broadcast(inputs, None, true)?;
        if t[0].dtype == crate::DType::Bool {
            return Err(OpError::DType {
                index: 0,
                dtype: t[0].dtype,
            });
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
                return Err(OpError::Invalid(format!(
                    "input dtypes differ: {dt} and {}",
                    t.dtype()
                )));
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

    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let dt = input(inputs, 0)?.dtype;
        if dt == crate::DType::Bool {
            return Err(OpError::DType {
                index: 0,
                dtype: dt,
            });
        }
        let present: Vec<(usize, ComputeInput<'_>)> = inputs
            .iter()
            .enumerate()
            .filter_map(|(i, x)| x.map(|x| (i, x)))
            .collect();
        if let Some((_, x)) = present.iter().find(|(_, x)| x.dtype != dt) {
            return Err(OpError::Invalid(format!(
                "input dtypes differ: {dt} and {}",
                x.dtype
            )));
        }
        let shapes: Vec<&[usize]> = present.iter().map(|(_, x)| x.shape).collect();
        let shape = broadcast(&shapes)?;
        let t = dt.to_ir();
        let kind = self.kind;
        let vars = placeholders(inputs);
        let def = grid_def(vars.clone(), t, &shape, |i| {
            let mut values = present
                .iter()
                .map(|(k, x)| broadcast_read(&vars[*k], x.shape, i));
            let first = values.next().unwrap_or_else(|| Expr::zero(t));
            let acc = values.fold(first, |a, b| combine_ir(kind, a, b, t));
            if kind != Kind::Mean {
                acc
            } else if t.is_float() {
                acc / konst(present.len() as f64, t)
            } else if t.scalar.is_signed() {
                trunc_div(acc, Expr::int_of(present.len() as i64, t), t)
            } else {
                acc / Expr::int_of(present.len() as i64, t)
            }
        })?;
        Ok(Some(def))
    }
}

/// [`combine`] on IR elements of type `t`: float `Min`/`Max` propagate NaN like `eval`.
fn combine_ir(kind: Kind, a: Expr, b: Expr, t: DataType) -> Expr {
    match kind {
        Kind::Sum | Kind::Mean => a + b,
        Kind::Min | Kind::Max if t.is_float() => {
            let b_wins = if kind == Kind::Min {
                b.lt(a.clone())
            } else {
                b.gt(a.clone())
            };
            Expr::select(math1(MathFunc::IsNan, b.clone()).or(b_wins), b, a)
        }
        Kind::Min => a.min(b),
        Kind::Max => a.max(b),
    }
}

fn combine<T: Element>(kind: Kind, a: T, b: T) -> T {
    let is_float = T::DTYPE.is_float();
    match kind {
        Kind::Min | Kind::Max => {
            if is_float && (a.to_f64().is_nan() || b.to_f64().is_nan()) {
                return T::from_f64(f64::NAN);
            }
            let a_smaller = if is_float {
                a.to_f64() < b.to_f64()
            } else {
                a.to_i128() < b.to_i128()
            };
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
