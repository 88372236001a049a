//! Reductions over axes: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
//! ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare, and the index reductions
//! ArgMax / ArgMin.
//!
//! Axes are an attribute before opset 13 (ReduceSum) or 18 (the others) and the optional
//! input #1 from then on, together with `noop_with_empty_axes`. Float inputs accumulate in
//! f64 and round once to the input type; integer sums and products accumulate in i128 and
//! wrap to the input width like numpy. Reducing an empty set gives the identity of the
//! reduction (0, 1, -inf for Max / LogSum / LogSumExp, +inf for Min; the dtype's extreme
//! values for integers).

use crate::dtype::DType;
use crate::kernels::axis::{axes_mask, Lanes, Reduction};
use crate::operator::{
    arg, infer_arg, infer_opt, opt_arg, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use crate::ops::common::{check_dtype, int_list, norm_axis};
use crate::ops::compute_util::{
    dims, finish, float_to_int, grid_def, input, math1, math_dtype, opt_input, placeholders,
    wrapping_type, AxisReduction,
};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::{Element, Tensor};
use crate::{dispatch_float, dispatch_int, dispatch_numeric};
use hidet_ir::compute::{grid, ComputeDef, ComputeNode, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, Var};
use hidet_ir::intrinsic::MathFunc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

/// Where the reduced axes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AxesFrom {
    /// The `axes` attribute (`None`: reduce every axis).
    Attr(Option<Vec<i64>>),
    /// The optional input #1.
    Input,
}

/// One of the `Reduce*` operators.
#[derive(Debug)]
struct Reduce {
    kind: Kind,
    axes: AxesFrom,
    keepdims: bool,
    noop_with_empty_axes: bool,
}

/// ArgMax / ArgMin along one axis; the output is i64.
#[derive(Debug)]
struct ArgReduce {
    max: bool,
    axis: i64,
    keepdims: bool,
    select_last_index: bool,
}

/// Registers the reduction family.
pub fn register(r: &mut Registry) {
    // (name, kind, first opset taking axes as an input)
    let family: &[(&str, Kind, i64)] = &[
        ("ReduceSum", Kind::Sum, 13),
        ("ReduceMean", Kind::Mean, 18),
        ("ReduceMax", Kind::Max, 18),
        ("ReduceMin", Kind::Min, 18),
        ("ReduceProd", Kind::Prod, 18),
        ("ReduceL1", Kind::L1, 18),
        ("ReduceL2", Kind::L2, 18),
        ("ReduceLogSum", Kind::LogSum, 18),
        ("ReduceLogSumExp", Kind::LogSumExp, 18),
        ("ReduceSumSquare", Kind::SumSquare, 18),
    ];
    for &(name, kind, input_since) in family {
        r.register("", name, 1..=input_since - 1, move |c| {
            let axes = c.attrs.ints("axes")?.cloned();
            Ok(Box::new(Reduce {
                kind,
                axes: AxesFrom::Attr(axes),
                keepdims: flag(c, "keepdims", 1)?,
                noop_with_empty_axes: false,
            }))
        });
        r.register("", name, input_since..=LATEST_OPSET, move |c| {
            Ok(Box::new(Reduce {
                kind,
                axes: AxesFrom::Input,
                keepdims: flag(c, "keepdims", 1)?,
                noop_with_empty_axes: flag(c, "noop_with_empty_axes", 0)?,
            }))
        });
    }
    for (name, max) in [("ArgMax", true), ("ArgMin", false)] {
        // select_last_index (opset 12) defaults to the older behaviour.
        r.register("", name, 1..=LATEST_OPSET, move |c| {
            Ok(Box::new(ArgReduce {
                max,
                axis: c.attrs.int_or("axis", 0)?,
                keepdims: flag(c, "keepdims", 1)?,
                select_last_index: flag(c, "select_last_index", 0)?,
            }))
        });
    }
}

/// A 0/1 integer attribute as a bool.
pub(crate) fn flag(c: &OpContext<'_>, name: &str, default: i64) -> Result<bool, OpError> {
    match c.attrs.int_or(name, default)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::attr(name, format!("must be 0 or 1, got {v}"))),
    }
}

impl Reduce {
    fn accepts(&self, d: DType) -> bool {
        d != DType::Bool || matches!(self.kind, Kind::Max | Kind::Min)
    }

    /// The reduced-axes mask, or `None` when the input passes through unchanged.
    fn plan(&self, rank: usize, axes: Option<&[i64]>) -> Result<Option<Vec<bool>>, OpError> {
        match axes {
            Some(a) if !a.is_empty() => Ok(Some(axes_mask(a, rank)?)),
            _ if self.noop_with_empty_axes => Ok(None),
            _ => Ok(Some(vec![true; rank])),
        }
    }
}

impl Operator for Reduce {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        if !self.accepts(x.ty.dtype) {
            return Err(OpError::DType {
                index: 0,
                dtype: x.ty.dtype,
            });
        }
        // Outer None: the axes are not known statically.
        let axes: Option<Option<Vec<i64>>> = match &self.axes {
            AxesFrom::Attr(a) => Some(a.clone()),
            AxesFrom::Input => match infer_opt(inputs, 1) {
                None => Some(None),
                Some(a) => a.value.map(|t| int_list(t, "axes")).transpose()?.map(Some),
            },
        };
        let shape = match (&x.ty.shape, axes) {
            (Some(dims), Some(axes)) => match self.plan(dims.len(), axes.as_deref())? {
                None => Some(dims.clone()),
                Some(mask) => Some(
                    dims.iter()
                        .zip(&mask)
                        .filter(|(_, &m)| self.keepdims || !m)
                        .map(|(d, &m)| if m { Dim::Fixed(1) } else { d.clone() })
                        .collect(),
                ),
            },
            (Some(dims), None) if self.keepdims => Some(vec![Dim::Unknown; dims.len()]),
            _ => None,
        };
        Ok(vec![TensorType {
            dtype: x.ty.dtype,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let dt = x.dtype();
        if !self.accepts(dt) {
            return Err(OpError::DType {
                index: 0,
                dtype: dt,
            });
        }
        let axes = match &self.axes {
            AxesFrom::Attr(a) => a.clone(),
            AxesFrom::Input => opt_arg(inputs, 1)
                .map(|t| int_list(t, "axes"))
                .transpose()?,
        };
        let Some(mask) = self.plan(x.rank(), axes.as_deref())? else {
            return Ok(vec![x.clone()]);
        };
        let red = Reduction::new(x.shape(), &mask)?;
        let shape = red.out_shape(&mask, self.keepdims);
        let kind = self.kind;
        let out = if dt == DType::Bool {
            Tensor::new(
                shape,
                reduce_bool(x.as_slice::<bool>()?, &red, kind == Kind::Max),
            )?
        } else {
            dispatch_float!(dt, T => {
                let v = reduce_f64(x.as_slice::<T>()?, &red, kind);
                Tensor::new(shape, v.into_iter().map(T::from_f64).collect::<Vec<T>>())?
            }, else dispatch_int!(dt, T => Tensor::new(shape, reduce_int(x.as_slice::<T>()?, &red, kind))?,
                else return Err(OpError::DType { index: 0, dtype: dt })))
        };
        Ok(vec![out])
    }

    /// The fold as reduce nodes over the output shape and, where the result needs
    /// post-processing (mean, root, logarithm, a cast), a final grid. Floats accumulate in
    /// f32 (f64 for f64 inputs); integer sums and products wrap like `eval`'s (see
    /// [`wrapping_type`]; i64 ones must not overflow); integer means sum in i64, and integer
    /// L2 / LogSum / LogSumExp go through f64.
    /// `Ok(None)` when the axes input is not known, and for u64 Min and u64 float-valued
    /// reductions (the IR's constants cannot hold `u64::MAX`). Float Max/Min/LogSumExp count the
    /// row's NaNs, so that a NaN propagates like in `eval` whether or not the target's
    /// `max`/`min` drops NaN.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        if !self.accepts(x.dtype) {
            return Err(OpError::DType {
                index: 0,
                dtype: x.dtype,
            });
        }
        let axes = match &self.axes {
            AxesFrom::Attr(a) => a.clone(),
            AxesFrom::Input => match opt_input(inputs, 1) {
                None => None,
                Some(a) => match a.value {
                    Some(t) => Some(int_list(t, "axes")?),
                    None => return Ok(None),
                },
            },
        };
        let vars = placeholders(inputs);
        let dt = x.dtype.to_ir();
        let Some(mask) = self.plan(x.shape.len(), axes.as_deref())? else {
            return grid_def(vars.clone(), dt, x.shape, |i| vars[0].at(i.to_vec())).map(Some);
        };
        let red = AxisReduction::new(x.shape, &mask, self.keepdims);
        let Some((nodes, out)) = reduce_nodes(self.kind, &vars[0], dt, &red) else {
            return Ok(None);
        };
        finish(vars, nodes, vec![out]).map(Some)
    }
}

/// The nodes of `kind` over `red` of input `x` (of `dtype`) and the output variable; `None`
/// where the IR cannot express it (see [`Reduce::compute`]).
fn reduce_nodes(
    kind: Kind,
    x: &Var,
    dtype: DataType,
    red: &AxisReduction,
) -> Option<(Vec<(Var, ComputeNode)>, Var)> {
    let out_shape = dims(&red.out_shape());
    let count = red.count() as f64;
    if dtype.is_bool() {
        let rk = if kind == Kind::Max {
            ReduceKind::Max
        } else {
            ReduceKind::Min
        };
        let (acc, node) = red.node("acc", DataType::I32, rk, |i| {
            Expr::select(x.at(i.to_vec()), Expr::int(1), Expr::int(0))
        });
        let (out, post) = grid("out", dtype, out_shape, |i| {
            acc.at(i.to_vec()).gt(Expr::int(0))
        });
        return Some((vec![(acc, node), (out.clone(), post)], out));
    }
    let float_valued = matches!(kind, Kind::L2 | Kind::LogSum | Kind::LogSumExp | Kind::Mean);
    if !dtype.is_float() && !float_valued {
        let wrap = if matches!(kind, Kind::Max | Kind::Min) {
            if kind == Kind::Min && dtype == DataType::U64 {
                return None;
            }
            dtype
        } else {
            wrapping_type(dtype)
        };
        let rk = match kind {
            Kind::Prod => ReduceKind::Prod,
            Kind::Max => ReduceKind::Max,
            Kind::Min => ReduceKind::Min,
            _ => ReduceKind::Sum,
        };
        let (acc, node) = red.node("acc", wrap, rk, |i| {
            let v = x.at(i.to_vec());
            let w = if wrap == dtype {
                v.clone()
            } else {
                v.cast(wrap)
            };
            match kind {
                Kind::L1 if dtype.scalar.is_signed() => Expr::select(
                    v.lt(Expr::int_of(0, dtype)),
                    Expr::int_of(0, wrap) - w.clone(),
                    w,
                ),
                Kind::SumSquare => w.clone() * w,
                _ => w,
            }
        });
        if wrap == dtype {
            return Some((vec![(acc.clone(), node)], acc));
        }
        let (out, post) = grid("out", dtype, out_shape, |i| acc.at(i.to_vec()).cast(dtype));
        return Some((vec![(acc, node), (out.clone(), post)], out));
    }
    // Float-valued: accumulate in the math type (f64 for integer inputs).
    let t = if dtype.is_float() {
        math_dtype(dtype)
    } else if dtype == DataType::U64 {
        return None;
    } else {
        DataType::F64
    };
    let exact_int_sum = !dtype.is_float() && kind == Kind::Mean;
    let read = |i: &[Expr]| {
        let v = x.at(i.to_vec());
        if t == dtype {
            v
        } else {
            v.cast(t)
        }
    };
    let mut nodes = Vec::new();
    // `max` is the LogSumExp shift; `acc` the fold that the final value is computed from.
    let mut max: Option<Var> = None;
    let acc = if kind == Kind::LogSumExp {
        let (m, m_node) = red.node("max", t, ReduceKind::Max, read);
        let (s, s_node) = red.node("sum", t, ReduceKind::Sum, |i| {
            (read(i) - m.at(red.row_index(i))).exp()
        });
        nodes.push((m.clone(), m_node));
        max = Some(m);
        nodes.push((s.clone(), s_node));
        s
    } else if exact_int_sum {
        let (acc, node) = red.node("acc", DataType::I64, ReduceKind::Sum, |i| {
            x.at(i.to_vec()).cast(DataType::I64)
        });
        nodes.push((acc.clone(), node));
        acc
    } else {
        let rk = match kind {
            Kind::Prod => ReduceKind::Prod,
            Kind::Max => ReduceKind::Max,
            Kind::Min => ReduceKind::Min,
            _ => ReduceKind::Sum,
        };
        let (acc, node) = red.node("acc", t, rk, |i| {
            let v = read(i);
            match kind {
                Kind::L1 => math1(MathFunc::Abs, v),
                Kind::L2 | Kind::SumSquare => v.clone() * v,
                _ => v,
            }
        });
        nodes.push((acc.clone(), node));
        acc
    };
    // Float Max/Min/LogSumExp: how many NaNs the row holds (an `i32` sum, which a compiler
    // vectorizes where a float sum would be a serial chain), so that a NaN propagates like
    // in `eval` whichever NaN behaviour the target's `max`/`min` has.
    let nans =
        (matches!(kind, Kind::Max | Kind::Min | Kind::LogSumExp) && dtype.is_float()).then(|| {
            let (n, node) = red.node("nans", DataType::I32, ReduceKind::Sum, |i| {
                Expr::select(
                    math1(MathFunc::IsNan, read(i)),
                    Expr::int_of(1, DataType::I32),
                    Expr::int_of(0, DataType::I32),
                )
            });
            nodes.push((n.clone(), node));
            n
        });
    let post = |i: &[Expr]| -> Expr {
        let a = acc.at(i.to_vec());
        let value = match (kind, &max) {
            (Kind::LogSumExp, Some(m)) => {
                let m = m.at(i.to_vec());
                Expr::select(
                    math1(MathFunc::IsInf, m.clone()),
                    m.clone(),
                    m + math1(MathFunc::Log, a),
                )
            }
            (Kind::Mean, _) if a.dtype() != Some(t) => a.cast(t) / Expr::float_of(count, t),
            (Kind::Mean, _) => a / Expr::float_of(count, t),
            (Kind::L2, _) => a.sqrt(),
            (Kind::LogSum, _) => math1(MathFunc::Log, a),
            _ => a,
        };
        match &nans {
            Some(n) => Expr::select(
                n.at(i.to_vec()).gt(Expr::int_of(0, DataType::I32)),
                Expr::float_of(f64::NAN, t),
                value,
            ),
            None => value,
        }
    };
    let plain = matches!(
        kind,
        Kind::Sum | Kind::Prod | Kind::Max | Kind::Min | Kind::L1 | Kind::SumSquare
    );
    if plain && t == dtype && nans.is_none() {
        return Some((nodes, acc));
    }
    let mut expressible = true;
    let (out, node) = grid("out", dtype, out_shape, |i| {
        let v = post(i);
        if dtype.is_float() {
            if t == dtype {
                v
            } else {
                v.cast(dtype)
            }
        } else {
            float_to_int(v, t, dtype).unwrap_or_else(|| {
                expressible = false;
                Expr::zero(dtype)
            })
        }
    });
    if !expressible {
        return None;
    }
    nodes.push((out.clone(), node));
    Some((nodes, out))
}

/// Elements per output (0 when the output is empty).
fn group_size(n_in: usize, n_out: usize) -> usize {
    n_in.checked_div(n_out).unwrap_or(0)
}

/// Float reduction in f64 (also used for integer L2 / LogSum / LogSumExp).
fn reduce_f64<T: Element>(xs: &[T], red: &Reduction, kind: Kind) -> Vec<f64> {
    let n_out = red.out_len();
    let count = group_size(xs.len(), n_out) as f64;
    let init = match kind {
        Kind::Prod => 1.0,
        Kind::Max => f64::NEG_INFINITY,
        Kind::Min => f64::INFINITY,
        _ => 0.0,
    };
    let mut acc = vec![init; n_out];
    let mut shift = vec![0.0f64; n_out];
    if kind == Kind::LogSumExp {
        shift.fill(f64::NEG_INFINITY);
        for (x, &o) in xs.iter().zip(&red.offsets) {
            let v = x.to_f64();
            if v > shift[o] || v.is_nan() {
                shift[o] = v;
            }
        }
    }
    for (x, &o) in xs.iter().zip(&red.offsets) {
        let v = x.to_f64();
        let a = &mut acc[o];
        *a = match kind {
            Kind::Sum | Kind::Mean | Kind::LogSum => *a + v,
            Kind::L1 => *a + v.abs(),
            Kind::L2 | Kind::SumSquare => *a + v * v,
            Kind::Prod => *a * v,
            Kind::Max if v > *a || v.is_nan() => v,
            Kind::Min if v < *a || v.is_nan() => v,
            Kind::Max | Kind::Min => *a,
            Kind::LogSumExp => *a + (v - shift[o]).exp(),
        };
    }
    for (a, &s) in acc.iter_mut().zip(&shift) {
        *a = match kind {
            Kind::Mean => *a / count,
            Kind::L2 => a.sqrt(),
            Kind::LogSum => a.ln(),
            Kind::LogSumExp if s.is_finite() => s + a.ln(),
            Kind::LogSumExp => s,
            _ => *a,
        };
    }
    acc
}

/// Integer reduction: exact (wrapping) for sums and products, f64 for the others.
fn reduce_int<T: Element>(xs: &[T], red: &Reduction, kind: Kind) -> Vec<T> {
    let n_out = red.out_len();
    let count = group_size(xs.len(), n_out);
    match kind {
        Kind::L2 | Kind::LogSum | Kind::LogSumExp => {
            return reduce_f64(xs, red, kind)
                .into_iter()
                .map(T::from_f64)
                .collect();
        }
        Kind::Max | Kind::Min if count == 0 => {
            let edge = if kind == Kind::Max {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            return vec![T::from_f64(edge); n_out];
        }
        _ => {}
    }
    let init: i128 = match kind {
        Kind::Prod => 1,
        Kind::Max => i128::MIN,
        Kind::Min => i128::MAX,
        _ => 0,
    };
    let mut acc = vec![init; n_out];
    for (x, &o) in xs.iter().zip(&red.offsets) {
        let v = x.to_i128();
        let a = &mut acc[o];
        *a = match kind {
            Kind::Prod => a.wrapping_mul(v),
            Kind::Max => (*a).max(v),
            Kind::Min => (*a).min(v),
            Kind::L1 => a.wrapping_add(v.abs()),
            Kind::SumSquare => a.wrapping_add(v.wrapping_mul(v)),
            _ => a.wrapping_add(v),
        };
    }
    acc.into_iter()
        .map(|a| {
            if kind == Kind::Mean {
                T::from_f64(a as f64 / count as f64)
            } else {
                T::from_i128(a)
            }
        })
        .collect()
}

/// Max (any) or Min (all) of bools.
fn reduce_bool(xs: &[bool], red: &Reduction, max: bool) -> Vec<bool> {
    let mut acc = vec![!max; red.out_len()];
    for (&x, &o) in xs.iter().zip(&red.offsets) {
        if x == max {
            acc[o] = max;
        }
    }
    acc
}

impl Operator for ArgReduce {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let x = infer_arg(inputs, 0)?;
        check_dtype(0, x.ty.dtype, |d| d != DType::Bool)?;
        let shape = match &x.ty.shape {
            Some(dims) => {
                let axis = norm_axis(self.axis, dims.len())?;
                let mut out = dims.clone();
                if self.keepdims {
                    out[axis] = Dim::Fixed(1);
                } else {
                    out.remove(axis);
                }
                Some(out)
            }
            None => None,
        };
        Ok(vec![TensorType {
            dtype: DType::I64,
            shape,
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let x = arg(inputs, 0)?;
        let dt = x.dtype();
        let axis = norm_axis(self.axis, x.rank())?;
        let lanes = Lanes::along(x.shape(), axis)?;
        if lanes.len == 0 && lanes.count() > 0 {
            return Err(OpError::Invalid(format!(
                "{} of an empty axis {axis}",
                self.name()
            )));
        }
        let idx = dispatch_numeric!(dt, T => self.arg_lanes(x.as_slice::<T>()?, &lanes),
            else return Err(OpError::DType { index: 0, dtype: dt }));
        let mut shape = x.shape().to_vec();
        if self.keepdims {
            shape[axis] = 1;
        } else {
            shape.remove(axis);
        }
        Ok(vec![Tensor::new(shape, idx)?])
    }

    /// Three reductions along the axis into the output's shape: the extreme value (NaN
    /// left out), the first (or, with `select_last_index`, last) position holding it, and
    /// for floats the first NaN position; the result is the NaN position where a row has a
    /// NaN (NaN counts as the extreme, like `eval`), else the extreme's. Robust to either
    /// NaN behaviour of `max`/`min`, since no NaN reaches them. `Ok(None)` for u64 ArgMin
    /// (the identity `u64::MAX` has no IR constant).
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let x = input(inputs, 0)?;
        check_dtype(0, x.dtype, |d| d != DType::Bool)?;
        let rank = x.shape.len();
        let axis = norm_axis(self.axis, rank)?;
        let len = x.shape[axis];
        let lanes: usize = (0..rank)
            .filter(|&d| d != axis)
            .map(|d| x.shape[d])
            .product();
        if len == 0 && lanes > 0 {
            return Err(OpError::Invalid(format!(
                "{} of an empty axis {axis}",
                self.name()
            )));
        }
        let dt = x.dtype.to_ir();
        if !self.max && dt == DataType::U64 {
            return Ok(None);
        }
        let mask: Vec<bool> = (0..rank).map(|d| d == axis).collect();
        let red = AxisReduction::new(x.shape, &mask, self.keepdims);
        let vars = placeholders(inputs);
        let read = |i: &[Expr]| vars[0].at(i.to_vec());
        let is_nan = |i: &[Expr]| math1(MathFunc::IsNan, read(i));
        let float = dt.is_float();
        let (kind, edge) = if self.max {
            (ReduceKind::Max, f64::NEG_INFINITY)
        } else {
            (ReduceKind::Min, f64::INFINITY)
        };
        let (ext, ext_node) = red.node("extreme", dt, kind, |i| {
            if float {
                Expr::select(is_nan(i), Expr::float_of(edge, dt), read(i))
            } else {
                read(i)
            }
        });
        let position = |i: &[Expr]| -> Expr {
            let k = red
                .reduced_index(i)
                .into_iter()
                .next()
                .unwrap_or_else(|| Expr::int(0));
            k.cast(DataType::I64)
        };
        let past_end = Expr::int_of(len as i64, DataType::I64);
        let (pick, sentinel) = if self.select_last_index {
            (ReduceKind::Max, Expr::int_of(-1, DataType::I64))
        } else {
            (ReduceKind::Min, past_end.clone())
        };
        let (at, at_node) = red.node("position", DataType::I64, pick, |i| {
            Expr::select(read(i).eq(ext.at(red.row_index(i))), position(i), sentinel)
        });
        if !float {
            return finish(vars, vec![(ext, ext_node), (at.clone(), at_node)], vec![at]).map(Some);
        }
        let (nan, nan_node) = red.node("first_nan", DataType::I64, ReduceKind::Min, |i| {
            Expr::select(is_nan(i), position(i), past_end.clone())
        });
        let (out, out_node) = grid("out", DataType::I64, dims(&red.out_shape()), |i| {
            let n = nan.at(i.to_vec());
            Expr::select(n.lt(past_end.clone()), n, at.at(i.to_vec()))
        });
        finish(
            vars,
            vec![
                (ext, ext_node),
                (at, at_node),
                (nan, nan_node),
                (out.clone(), out_node),
            ],
            vec![out],
        )
        .map(Some)
    }
}

impl ArgReduce {
    fn name(&self) -> &'static str {
        if self.max {
            "ArgMax"
        } else {
            "ArgMin"
        }
    }

    /// Index of the extreme element of every lane; NaN counts as the extreme (like numpy).
    fn arg_lanes<T: Element>(&self, xs: &[T], lanes: &Lanes) -> Vec<i64> {
        let better = |v: T, best: T| {
            let nan = |a: T| a.partial_cmp(&a).is_none();
            if nan(best) {
                false
            } else if nan(v) {
                true
            } else if self.max {
                v > best
            } else {
                v < best
            }
        };
        (0..lanes.count())
            .map(|lane| {
                let mut best_k = 0usize;
                for k in 1..lanes.len {
                    let (v, best) = (xs[lanes.at(lane, k)], xs[lanes.at(lane, best_k)]);
                    if better(v, best) || (self.select_last_index && v == best) {
                        best_k = k;
                    }
                }
                best_k as i64
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Deterministic pseudo-random non-zero values in `[-2, -0.05] ∪ [0.05, 2]` (xorshift64).
    pub(crate) fn random(seed: u64, n: usize) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let u = (s >> 11) as f64 / (1u64 << 53) as f64;
                let m = 0.05 + 1.95 * u;
                if s & 1 == 0 {
                    m
                } else {
                    -m
                }
            })
            .collect()
    }

    /// Row-major multi-index of flat offset `i`.
    pub(crate) fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = i % shape[d];
            i /= shape[d];
        }
        idx
    }

    fn f32_tensor(shape: &[usize], seed: u64) -> Tensor {
        let n = shape.iter().product();
        Tensor::new(
            shape.to_vec(),
            random(seed, n).into_iter().map(|v| v as f32).collect(),
        )
        .unwrap()
    }

    fn i64_tensor(t: &[i64]) -> Tensor {
        Tensor::new(vec![t.len()], t.to_vec()).unwrap()
    }

    fn reduce(
        kind: Kind,
        keepdims: bool,
        x: &Tensor,
        axes: Option<&[i64]>,
    ) -> Result<Tensor, OpError> {
        let op = Reduce {
            kind,
            axes: AxesFrom::Input,
            keepdims,
            noop_with_empty_axes: false,
        };
        let a = axes.map(i64_tensor);
        Ok(op.eval(&[Some(x), a.as_ref()])?.remove(0))
    }

    /// Float64 reference: groups elements by their multi-index with reduced axes zeroed.
    fn reference(kind: Kind, x: &Tensor, axes: &[usize]) -> Vec<f64> {
        let shape = x.shape();
        let out_shape: Vec<usize> = shape
            .iter()
            .enumerate()
            .map(|(d, &n)| if axes.contains(&d) { 1 } else { n })
            .collect();
        let n_out: usize = out_shape.iter().product();
        let mut groups: Vec<Vec<f64>> = vec![vec![]; n_out];
        for (i, v) in x.to_f64_vec().into_iter().enumerate() {
            let idx = unravel(i, shape);
            let mut o = 0;
            for d in 0..shape.len() {
                o = o * out_shape[d] + if axes.contains(&d) { 0 } else { idx[d] };
            }
            groups[o].push(v);
        }
        groups
            .into_iter()
            .map(|g| {
                let n = g.len() as f64;
                match kind {
                    Kind::Sum => g.iter().sum(),
                    Kind::Mean => g.iter().sum::<f64>() / n,
                    Kind::Max => g.iter().cloned().fold(f64::MIN, f64::max),
                    Kind::Min => g.iter().cloned().fold(f64::MAX, f64::min),
                    Kind::Prod => g.iter().product(),
                    Kind::L1 => g.iter().map(|v| v.abs()).sum(),
                    Kind::L2 => g.iter().map(|v| v * v).sum::<f64>().sqrt(),
                    Kind::LogSum => g.iter().sum::<f64>().ln(),
                    Kind::LogSumExp => g.iter().map(|v| v.exp()).sum::<f64>().ln(),
                    Kind::SumSquare => g.iter().map(|v| v * v).sum(),
                }
            })
            .collect()
    }

    fn assert_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()),
                "got {g}, want {w}"
            );
        }
    }

    #[test]
    fn every_kind_matches_float64_reference_on_odd_shapes() {
        let kinds = [
            Kind::Sum,
            Kind::Mean,
            Kind::Max,
            Kind::Min,
            Kind::Prod,
            Kind::L1,
            Kind::L2,
            Kind::LogSum,
            Kind::LogSumExp,
            Kind::SumSquare,
        ];
        let x = f32_tensor(&[3, 5, 7], 11);
        let cases: &[(&[i64], &[usize], &[usize])] = &[
            (&[1], &[1], &[3, 7]),
            (&[-1, 0], &[0, 2], &[5]),
            (&[0, 1, 2], &[0, 1, 2], &[]),
        ];
        for &kind in &kinds {
            for &(axes, norm, shape) in cases {
                let y = reduce(kind, false, &x, Some(axes)).unwrap();
                assert_eq!(y.shape(), shape, "{kind:?} {axes:?}");
                assert_eq!(y.dtype(), DType::F32);
                assert_close(&y.to_f64_vec(), &reference(kind, &x, norm));
            }
        }
        let y = reduce(Kind::Sum, true, &x, None).unwrap();
        assert_eq!(y.shape(), &[1, 1, 1]);
    }

    #[test]
    fn integer_and_bool_reductions() {
        let x = Tensor::new(vec![2, 3], vec![5i32, -7, 3, 2, 9, -4]).unwrap();
        let y = reduce(Kind::Sum, true, &x, Some(&[1])).unwrap();
        assert_eq!(y.shape(), &[2, 1]);
        assert_eq!(y.as_slice::<i32>().unwrap(), &[1, 7]);
        // numpy: mean then astype truncates toward zero.
        assert_eq!(
            reduce(Kind::Mean, false, &x, Some(&[0]))
                .unwrap()
                .as_slice::<i32>()
                .unwrap(),
            &[3, 1, 0]
        );
        assert_eq!(
            reduce(Kind::Prod, false, &x, Some(&[-1]))
                .unwrap()
                .as_slice::<i32>()
                .unwrap(),
            &[-105, -72]
        );
        assert_eq!(
            reduce(Kind::Max, false, &x, Some(&[1]))
                .unwrap()
                .as_slice::<i32>()
                .unwrap(),
            &[5, 9]
        );
        // i8 sums wrap like numpy.
        let b = Tensor::new(vec![2], vec![100i8, 100]).unwrap();
        assert_eq!(
            reduce(Kind::Sum, false, &b, None)
                .unwrap()
                .as_slice::<i8>()
                .unwrap(),
            &[-56]
        );
        let t = Tensor::new(vec![2, 2], vec![true, false, false, false]).unwrap();
        assert_eq!(
            reduce(Kind::Max, false, &t, Some(&[1]))
                .unwrap()
                .as_slice::<bool>()
                .unwrap(),
            &[true, false]
        );
        assert_eq!(
            reduce(Kind::Min, false, &t, Some(&[0]))
                .unwrap()
                .as_slice::<bool>()
                .unwrap(),
            &[false, false]
        );
        assert!(matches!(
            reduce(Kind::Sum, false, &t, None),
            Err(OpError::DType { .. })
        ));
    }

    #[test]
    fn empty_set_gives_identity() {
        let x = Tensor::new(vec![2, 0, 3], Vec::<f32>::new()).unwrap();
        let y = reduce(Kind::Max, false, &x, Some(&[1])).unwrap();
        assert_eq!(y.shape(), &[2, 3]);
        assert!(y.to_f64_vec().iter().all(|&v| v == f64::NEG_INFINITY));
        assert!(reduce(Kind::Prod, false, &x, Some(&[1]))
            .unwrap()
            .to_f64_vec()
            .iter()
            .all(|&v| v == 1.0));
        let xi = Tensor::new(vec![0], Vec::<i32>::new()).unwrap();
        assert_eq!(
            reduce(Kind::Min, true, &xi, None)
                .unwrap()
                .as_slice::<i32>()
                .unwrap(),
            &[i32::MAX]
        );
    }

    #[test]
    fn noop_axes_attr_versions_and_errors() {
        let x = f32_tensor(&[2, 3], 5);
        let noop = Reduce {
            kind: Kind::Sum,
            axes: AxesFrom::Input,
            keepdims: true,
            noop_with_empty_axes: true,
        };
        let empty = Tensor::new(vec![0], Vec::<i64>::new()).unwrap();
        assert_eq!(noop.eval(&[Some(&x), Some(&empty)]).unwrap()[0], x);
        assert_eq!(noop.eval(&[Some(&x)]).unwrap()[0], x);
        let attr = Reduce {
            kind: Kind::Mean,
            axes: AxesFrom::Attr(Some(vec![-2])),
            keepdims: false,
            noop_with_empty_axes: false,
        };
        let y = attr.eval(&[Some(&x)]).unwrap().remove(0);
        assert_close(&y.to_f64_vec(), &reference(Kind::Mean, &x, &[0]));
        assert!(matches!(
            reduce(Kind::Sum, false, &x, Some(&[2])),
            Err(OpError::Invalid(_))
        ));
        assert!(matches!(
            reduce(Kind::Sum, false, &x, Some(&[1, -1])),
            Err(OpError::Invalid(_))
        ));
        let bad = Tensor::new(vec![1], vec![0.5f32]).unwrap();
        assert!(Reduce {
            kind: Kind::Sum,
            axes: AxesFrom::Input,
            keepdims: true,
            noop_with_empty_axes: false
        }
        .eval(&[Some(&x), Some(&bad)])
        .is_err());
    }

    #[test]
    fn infer_matches_eval() {
        let x = f32_tensor(&[4, 3, 5], 9);
        let axes = i64_tensor(&[0, -1]);
        let op = Reduce {
            kind: Kind::L2,
            axes: AxesFrom::Input,
            keepdims: false,
            noop_with_empty_axes: false,
        };
        let ty = TensorType::fixed(DType::F32, &[4, 3, 5]);
        let ai = TensorType::fixed(DType::I64, &[2]);
        let inferred = op
            .infer(&[
                Some(InferInput {
                    ty: &ty,
                    value: None,
                }),
                Some(InferInput {
                    ty: &ai,
                    value: Some(&axes),
                }),
            ])
            .unwrap();
        assert_eq!(inferred[0], TensorType::fixed(DType::F32, &[3]));
        let unknown = op
            .infer(&[
                Some(InferInput {
                    ty: &ty,
                    value: None,
                }),
                Some(InferInput {
                    ty: &ai,
                    value: None,
                }),
            ])
            .unwrap();
        assert_eq!(unknown[0].shape, None);
        assert_eq!(op.eval(&[Some(&x), Some(&axes)]).unwrap()[0].shape(), &[3]);
    }

    /// Independent ArgMax/ArgMin: scan with explicit multi-index arithmetic.
    fn arg_reference(x: &Tensor, axis: usize, max: bool, last: bool) -> Vec<i64> {
        let shape = x.shape();
        let v = x.to_f64_vec();
        let mut out_shape = shape.to_vec();
        out_shape[axis] = 1;
        let n_out: usize = out_shape.iter().product();
        (0..n_out)
            .map(|o| {
                let mut idx = unravel(o, &out_shape);
                let mut best: Option<(f64, usize)> = None;
                for k in 0..shape[axis] {
                    idx[axis] = k;
                    let flat = idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i);
                    let val = v[flat];
                    let take = match best {
                        None => true,
                        Some((b, _)) => (if max { val > b } else { val < b }) || (last && val == b),
                    };
                    if take {
                        best = Some((val, k));
                    }
                }
                best.map(|b| b.1 as i64).unwrap_or(0)
            })
            .collect()
    }

    #[test]
    fn argmax_argmin_with_ties_and_negative_axis() {
        // Values rounded to one decimal produce ties.
        let shape = [3, 4, 5];
        let vals: Vec<f32> = random(3, 60)
            .into_iter()
            .map(|v| (v * 2.0).round() as f32)
            .collect();
        let x = Tensor::new(shape.to_vec(), vals).unwrap();
        for max in [true, false] {
            for last in [false, true] {
                for axis in [-3i64, 1, -1] {
                    let op = ArgReduce {
                        max,
                        axis,
                        keepdims: axis != 1,
                        select_last_index: last,
                    };
                    let y = op.eval(&[Some(&x)]).unwrap().remove(0);
                    let a = norm_axis(axis, 3).unwrap();
                    assert_eq!(
                        y.as_slice::<i64>().unwrap(),
                        arg_reference(&x, a, max, last).as_slice()
                    );
                    assert_eq!(y.rank(), if axis == 1 { 2 } else { 3 });
                }
            }
        }
        let small = Tensor::new(vec![2, 3], vec![1i32, 7, 7, 4, 2, 4]).unwrap();
        let op = ArgReduce {
            max: true,
            axis: 1,
            keepdims: false,
            select_last_index: true,
        };
        assert_eq!(
            op.eval(&[Some(&small)]).unwrap()[0]
                .as_slice::<i64>()
                .unwrap(),
            &[2, 2]
        );
        let op = ArgReduce {
            max: false,
            axis: 3,
            keepdims: false,
            select_last_index: false,
        };
        assert!(op.eval(&[Some(&small)]).is_err());
        let empty = Tensor::new(vec![2, 0], Vec::<f32>::new()).unwrap();
        let op = ArgReduce {
            max: true,
            axis: 1,
            keepdims: true,
            select_last_index: false,
        };
        assert!(op.eval(&[Some(&empty)]).is_err());
    }
}
