//! Expressions and variables.
//!
//! An [`Expr`] is an immutable tree shared through `Arc`, so cloning is cheap
//! and expressions can be rebuilt by passes without copying whole programs.
//!
//! Integer division and modulo ([`BinaryOp::Div`], [`BinaryOp::Mod`]) use
//! *floor* semantics: `-7 / 2 == -4` and `-7 % 2 == 1` (the remainder has the
//! sign of the divisor). Backends must honour this for negative operands.

use crate::dtype::DataType;
use crate::intrinsic::{Intrinsic, MathFunc};
use crate::ty::Type;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static NEXT_VAR_ID: AtomicU64 = AtomicU64::new(1);

/// A named variable. Two `Var`s are the same variable iff they have the same
/// id; names are hints for printing and need not be unique.
#[derive(Clone)]
pub struct Var(Arc<VarData>);

#[derive(Debug)]
struct VarData {
    id: u64,
    name: String,
    ty: Type,
}

impl Var {
    /// A fresh variable, distinct from every other variable ever created.
    pub fn new(name: impl Into<String>, ty: impl Into<Type>) -> Var {
        Var(Arc::new(VarData {
            id: NEXT_VAR_ID.fetch_add(1, Ordering::Relaxed),
            name: name.into(),
            ty: ty.into(),
        }))
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn ty(&self) -> &Type {
        &self.0.ty
    }

    /// This variable as an expression.
    pub fn expr(&self) -> Expr {
        Expr::new(ExprKind::Var(self.clone()))
    }

    /// The element `self[indices]` of a tensor variable (through its layout),
    /// or `self[index]` of a pointer variable.
    pub fn at<I: Into<Expr>>(&self, indices: impl IntoIterator<Item = I>) -> Expr {
        Expr::new(ExprKind::TensorElement {
            tensor: self.clone(),
            indices: indices.into_iter().map(Into::into).collect(),
        })
    }
}

impl PartialEq for Var {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for Var {}

impl Hash for Var {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.id.hash(state)
    }
}

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.0.name, self.0.id)
    }
}

/// A compile-time constant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Constant {
    Bool(bool),
    /// An integer of an integer type.
    Int(i64, DataType),
    /// A floating-point number of a float type.
    Float(f64, DataType),
}

impl Constant {
    pub fn dtype(&self) -> DataType {
        match self {
            Constant::Bool(_) => DataType::BOOL,
            Constant::Int(_, t) | Constant::Float(_, t) => *t,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Constant::Int(v, _) => Some(*v),
            Constant::Bool(b) => Some(*b as i64),
            Constant::Float(..) => None,
        }
    }
}

/// Built-in index variables of a CUDA launch.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Builtin {
    ThreadIdx(Dim),
    BlockIdx(Dim),
    BlockDim(Dim),
    GridDim(Dim),
}

/// One of the three launch dimensions.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Dim {
    X,
    Y,
    Z,
}

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, dim) = match self {
            Builtin::ThreadIdx(d) => ("threadIdx", d),
            Builtin::BlockIdx(d) => ("blockIdx", d),
            Builtin::BlockDim(d) => ("blockDim", d),
            Builtin::GridDim(d) => ("gridDim", d),
        };
        let dim = match dim {
            Dim::X => "x",
            Dim::Y => "y",
            Dim::Z => "z",
        };
        write!(f, "{name}.{dim}")
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum UnaryOp {
    Neg,
    /// Logical not of a `bool`.
    Not,
    /// Bitwise complement of an integer.
    BitNot,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Floor division for integers, true division for floats.
    Div,
    /// Floor modulo for integers (sign of the divisor), `fmod` for floats.
    Mod,
    And,
    Or,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    /// Arithmetic shift for signed integers, logical for unsigned.
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinaryOp {
    /// True for comparisons, whose result is `bool`.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }

    /// True for `And`/`Or`, whose operands and result are `bool`.
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or)
    }

    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::And => "&&",
            BinaryOp::Or => "||",
            BinaryOp::BitAnd => "&",
            BinaryOp::BitOr => "|",
            BinaryOp::BitXor => "^",
            BinaryOp::Shl => "<<",
            BinaryOp::Shr => ">>",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
        }
    }
}

/// The node of an expression tree.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Const(Constant),
    Var(Var),
    Builtin(Builtin),
    Unary(UnaryOp, Expr),
    Binary(BinaryOp, Expr, Expr),
    /// `cond ? on_true : on_false`.
    Select(Expr, Expr, Expr),
    Cast(Expr, DataType),
    /// A scalar repeated over `lanes` SIMD lanes.
    Broadcast(Expr, u16),
    Math(MathFunc, Vec<Expr>),
    Call(Intrinsic, Vec<Expr>),
    /// `tensor[indices]` through the tensor's layout; for a pointer variable,
    /// exactly one index, the element offset.
    TensorElement {
        tensor: Var,
        indices: Vec<Expr>,
    },
    /// The address of an element: `&tensor[indices]`.
    Address(Expr),
}

/// An expression: a cheaply clonable, immutable tree.
#[derive(Clone, PartialEq)]
pub struct Expr(Arc<ExprKind>);

impl Expr {
    pub fn new(kind: ExprKind) -> Expr {
        Expr(Arc::new(kind))
    }

    pub fn kind(&self) -> &ExprKind {
        &self.0
    }

    /// An `i32` constant (the default index type).
    pub fn int(v: i64) -> Expr {
        Expr::constant(Constant::Int(v, DataType::I32))
    }

    /// An integer constant of a given integer type.
    pub fn int_of(v: i64, dtype: DataType) -> Expr {
        Expr::constant(Constant::Int(v, dtype))
    }

    pub fn f32(v: f32) -> Expr {
        Expr::constant(Constant::Float(v as f64, DataType::F32))
    }

    pub fn float_of(v: f64, dtype: DataType) -> Expr {
        Expr::constant(Constant::Float(v, dtype))
    }

    pub fn bool(v: bool) -> Expr {
        Expr::constant(Constant::Bool(v))
    }

    /// The zero of `dtype` (broadcast over lanes for vector types).
    pub fn zero(dtype: DataType) -> Expr {
        let scalar = if dtype.is_float() {
            Expr::float_of(0.0, dtype.element())
        } else if dtype.is_bool() {
            Expr::bool(false)
        } else {
            Expr::int_of(0, dtype.element())
        };
        if dtype.is_vector() {
            scalar.broadcast(dtype.lanes)
        } else {
            scalar
        }
    }

    pub fn constant(c: Constant) -> Expr {
        Expr::new(ExprKind::Const(c))
    }

    pub fn builtin(b: Builtin) -> Expr {
        Expr::new(ExprKind::Builtin(b))
    }

    pub fn thread_idx(d: Dim) -> Expr {
        Expr::builtin(Builtin::ThreadIdx(d))
    }

    pub fn block_idx(d: Dim) -> Expr {
        Expr::builtin(Builtin::BlockIdx(d))
    }

    /// The integer value, if this is an integer (or bool) constant.
    pub fn as_int(&self) -> Option<i64> {
        match self.kind() {
            ExprKind::Const(c) => c.as_int(),
            _ => None,
        }
    }

    pub fn as_var(&self) -> Option<&Var> {
        match self.kind() {
            ExprKind::Var(v) => Some(v),
            _ => None,
        }
    }

    pub fn binary(op: BinaryOp, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        Expr::new(ExprKind::Binary(op, a.into(), b.into()))
    }

    pub fn math(f: MathFunc, args: Vec<Expr>) -> Expr {
        Expr::new(ExprKind::Math(f, args))
    }

    pub fn call(intrinsic: Intrinsic, args: Vec<Expr>) -> Expr {
        Expr::new(ExprKind::Call(intrinsic, args))
    }

    pub fn select(cond: impl Into<Expr>, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        Expr::new(ExprKind::Select(cond.into(), a.into(), b.into()))
    }

    pub fn cast(&self, dtype: DataType) -> Expr {
        Expr::new(ExprKind::Cast(self.clone(), dtype))
    }

    pub fn broadcast(&self, lanes: u16) -> Expr {
        Expr::new(ExprKind::Broadcast(self.clone(), lanes))
    }

    /// `&self`, for a tensor element.
    pub fn address(&self) -> Expr {
        Expr::new(ExprKind::Address(self.clone()))
    }

    pub fn eq(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinaryOp::Eq, self.clone(), o)
    }
    pub fn ne(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinaryOp::Ne, self.clone(), o)
    }
    pub fn lt(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinaryOp::Lt, self.clone(), o)
    }
    pub fn le(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinaryOp::Le, self.clone(), o)
    }
    pub fn gt(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinaryOp::Gt, self.clone(), o)
    }
    pub fn ge(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinaryOp::Ge, self.clone(), o)
    }
    pub fn and(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinaryOp::And, self.clone(), o)
    }
    pub fn or(&self, o: impl Into<Expr>) -> Expr {
        Expr::binary(BinaryOp::Or, self.clone(), o)
    }
    pub fn min(&self, o: impl Into<Expr>) -> Expr {
        Expr::math(MathFunc::Min, vec![self.clone(), o.into()])
    }
    pub fn max(&self, o: impl Into<Expr>) -> Expr {
        Expr::math(MathFunc::Max, vec![self.clone(), o.into()])
    }
    pub fn exp(&self) -> Expr {
        Expr::math(MathFunc::Exp, vec![self.clone()])
    }
    pub fn sqrt(&self) -> Expr {
        Expr::math(MathFunc::Sqrt, vec![self.clone()])
    }
    /// `self * b + c` with one rounding.
    pub fn fma(&self, b: impl Into<Expr>, c: impl Into<Expr>) -> Expr {
        Expr::math(MathFunc::Fma, vec![self.clone(), b.into(), c.into()])
    }

    /// The type of this expression. Binary arithmetic between a constant and
    /// a non-constant takes the non-constant's type; between two integers of
    /// different widths, the wider one. The verifier rejects other mixes.
    pub fn ty(&self) -> Type {
        match self.kind() {
            ExprKind::Const(c) => Type::Data(c.dtype()),
            ExprKind::Var(v) => v.ty().clone(),
            ExprKind::Builtin(_) => Type::Data(DataType::I32),
            ExprKind::Unary(UnaryOp::Not, _) => Type::Data(DataType::BOOL),
            ExprKind::Unary(_, a) => a.ty(),
            ExprKind::Binary(op, a, b) => {
                if op.is_comparison() || op.is_logical() {
                    let lanes = a.ty().as_data().map_or(1, |d| d.lanes);
                    return Type::Data(DataType::BOOL.with_lanes(lanes));
                }
                binary_result_type(a, b)
            }
            ExprKind::Select(_, a, b) => binary_result_type(a, b),
            ExprKind::Cast(_, t) => Type::Data(*t),
            ExprKind::Broadcast(a, lanes) => match a.ty() {
                Type::Data(d) => Type::Data(d.with_lanes(*lanes)),
                other => other,
            },
            ExprKind::Math(f, args) => {
                if f.returns_bool() {
                    Type::Data(DataType::BOOL)
                } else if let [a, b, ..] = args.as_slice() {
                    binary_result_type(a, b)
                } else {
                    args.first().map_or(Type::Void, Expr::ty)
                }
            }
            ExprKind::Call(intr, args) => {
                let tys: Vec<Type> = args.iter().map(Expr::ty).collect();
                intr.result_type(&tys)
            }
            ExprKind::TensorElement { tensor, .. } => match tensor.ty().element_dtype() {
                Some(d) => Type::Data(d),
                None => Type::Void,
            },
            ExprKind::Address(e) => Type::pointer_to(e.ty()),
        }
    }

    /// The data type of this expression; `None` for pointers, tensors and void.
    pub fn dtype(&self) -> Option<DataType> {
        self.ty().as_data()
    }

    /// Visits every sub-expression (including `self`) in pre-order.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        for child in self.children() {
            child.visit(f);
        }
    }

    /// The direct sub-expressions, in evaluation order.
    pub fn children(&self) -> Vec<&Expr> {
        match self.kind() {
            ExprKind::Const(_) | ExprKind::Var(_) | ExprKind::Builtin(_) => vec![],
            ExprKind::Unary(_, a)
            | ExprKind::Cast(a, _)
            | ExprKind::Broadcast(a, _)
            | ExprKind::Address(a) => vec![a],
            ExprKind::Binary(_, a, b) => vec![a, b],
            ExprKind::Select(c, a, b) => vec![c, a, b],
            ExprKind::Math(_, args) | ExprKind::Call(_, args) => args.iter().collect(),
            ExprKind::TensorElement { indices, .. } => indices.iter().collect(),
        }
    }

    /// Rebuilds this node with new children (same order as [`Expr::children`]).
    /// Requires `children.len()` to match.
    pub fn with_children(&self, children: Vec<Expr>) -> Expr {
        let mut it = children.into_iter();
        let mut next = || it.next().expect("with_children: too few children");
        let kind = match self.kind() {
            ExprKind::Const(_) | ExprKind::Var(_) | ExprKind::Builtin(_) => return self.clone(),
            ExprKind::Unary(op, _) => ExprKind::Unary(*op, next()),
            ExprKind::Cast(_, t) => ExprKind::Cast(next(), *t),
            ExprKind::Broadcast(_, l) => ExprKind::Broadcast(next(), *l),
            ExprKind::Address(_) => ExprKind::Address(next()),
            ExprKind::Binary(op, _, _) => {
                let a = next();
                ExprKind::Binary(*op, a, next())
            }
            ExprKind::Select(..) => {
                let c = next();
                let a = next();
                ExprKind::Select(c, a, next())
            }
            ExprKind::Math(f, args) => ExprKind::Math(*f, args.iter().map(|_| next()).collect()),
            ExprKind::Call(i, args) => {
                ExprKind::Call(i.clone(), args.iter().map(|_| next()).collect())
            }
            ExprKind::TensorElement { tensor, indices } => ExprKind::TensorElement {
                tensor: tensor.clone(),
                indices: indices.iter().map(|_| next()).collect(),
            },
        };
        Expr::new(kind)
    }

    /// Rewrites bottom-up: children first, then `f` on the rebuilt node;
    /// where `f` returns `None` the node is kept.
    pub fn rewrite(&self, f: &mut impl FnMut(&Expr) -> Option<Expr>) -> Expr {
        let children: Vec<Expr> = self.children().into_iter().map(|c| c.rewrite(f)).collect();
        let rebuilt = if children.is_empty() {
            self.clone()
        } else {
            self.with_children(children)
        };
        f(&rebuilt).unwrap_or(rebuilt)
    }

    /// Whether `var` occurs anywhere in this expression.
    pub fn mentions(&self, var: &Var) -> bool {
        let mut found = false;
        self.visit(&mut |x| found |= x.as_var() == Some(var));
        found
    }

    /// The terms of this expression's top-level `+`/`-` chain, in order, each with whether
    /// it is subtracted: `a - (b - c) + d` gives `[(a, false), (b, true), (c, false),
    /// (d, false)]`; an expression that is no sum is its own single term.
    pub fn additive_terms(&self) -> Vec<(Expr, bool)> {
        fn split(e: &Expr, negative: bool, out: &mut Vec<(Expr, bool)>) {
            match e.kind() {
                ExprKind::Binary(BinaryOp::Add, a, b) => {
                    split(a, negative, out);
                    split(b, negative, out);
                }
                ExprKind::Binary(BinaryOp::Sub, a, b) => {
                    split(a, negative, out);
                    split(b, !negative, out);
                }
                _ => out.push((e.clone(), negative)),
            }
        }
        let mut terms = Vec::new();
        split(self, false, &mut terms);
        terms
    }

    /// Replaces variables by expressions.
    pub fn substitute(&self, map: &std::collections::HashMap<Var, Expr>) -> Expr {
        self.rewrite(&mut |e| match e.kind() {
            ExprKind::Var(v) => map.get(v).cloned(),
            _ => None,
        })
    }
}

fn binary_result_type(a: &Expr, b: &Expr) -> Type {
    let (ta, tb) = (a.ty(), b.ty());
    let a_const = matches!(a.kind(), ExprKind::Const(_));
    let b_const = matches!(b.kind(), ExprKind::Const(_));
    match (ta.as_data(), tb.as_data()) {
        (Some(x), Some(y)) if x != y => {
            if x.lanes != y.lanes {
                return if x.lanes > y.lanes { ta } else { tb };
            }
            if a_const && !b_const {
                tb
            } else if b_const && !a_const {
                ta
            } else if x.is_integer() && y.is_integer() && y.bytes() > x.bytes() {
                tb
            } else {
                ta
            }
        }
        _ => ta,
    }
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.kind(), f)
    }
}

impl From<&Var> for Expr {
    fn from(v: &Var) -> Self {
        v.expr()
    }
}

impl From<Var> for Expr {
    fn from(v: Var) -> Self {
        v.expr()
    }
}

impl From<&Expr> for Expr {
    fn from(e: &Expr) -> Self {
        e.clone()
    }
}

impl From<i64> for Expr {
    fn from(v: i64) -> Self {
        Expr::int(v)
    }
}

impl From<i32> for Expr {
    fn from(v: i32) -> Self {
        Expr::int(v as i64)
    }
}

impl From<usize> for Expr {
    fn from(v: usize) -> Self {
        Expr::int(v as i64)
    }
}

impl From<f32> for Expr {
    fn from(v: f32) -> Self {
        Expr::f32(v)
    }
}

impl From<bool> for Expr {
    fn from(v: bool) -> Self {
        Expr::bool(v)
    }
}

macro_rules! impl_binary_operator {
    ($trait:ident, $method:ident, $op:expr) => {
        impl<T: Into<Expr>> std::ops::$trait<T> for Expr {
            type Output = Expr;
            fn $method(self, rhs: T) -> Expr {
                Expr::binary($op, self, rhs)
            }
        }
        impl<T: Into<Expr>> std::ops::$trait<T> for &Expr {
            type Output = Expr;
            fn $method(self, rhs: T) -> Expr {
                Expr::binary($op, self.clone(), rhs)
            }
        }
        impl<T: Into<Expr>> std::ops::$trait<T> for &Var {
            type Output = Expr;
            fn $method(self, rhs: T) -> Expr {
                Expr::binary($op, self.expr(), rhs)
            }
        }
    };
}

impl_binary_operator!(Add, add, BinaryOp::Add);
impl_binary_operator!(Sub, sub, BinaryOp::Sub);
impl_binary_operator!(Mul, mul, BinaryOp::Mul);
impl_binary_operator!(Div, div, BinaryOp::Div);
impl_binary_operator!(Rem, rem, BinaryOp::Mod);
impl_binary_operator!(BitAnd, bitand, BinaryOp::BitAnd);
impl_binary_operator!(BitOr, bitor, BinaryOp::BitOr);
impl_binary_operator!(BitXor, bitxor, BinaryOp::BitXor);
impl_binary_operator!(Shl, shl, BinaryOp::Shl);
impl_binary_operator!(Shr, shr, BinaryOp::Shr);

impl std::ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::new(ExprKind::Unary(UnaryOp::Neg, self))
    }
}

impl std::ops::Not for Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        Expr::new(ExprKind::Unary(UnaryOp::Not, self))
    }
}

impl Expr {
    /// The value of this integer expression when each variable `v` it reads has the value
    /// `value_of(v)`: constants, integer arithmetic with the IR's floor division and modulo
    /// ([`floor_div`], [`floor_mod`]), comparisons, `&&`/`||`/`!` (as 0 or 1), selects,
    /// casts between scalar integer types, `min` and `max`.
    ///
    /// Errors (a description): a variable without a value, any other operation, a division
    /// by zero, an overflow of `i64`.
    pub fn eval_int(&self, value_of: &impl Fn(&Var) -> Option<i64>) -> Result<i64, String> {
        let ev = |x: &Expr| x.eval_int(value_of);
        let overflow = || format!("overflow evaluating {self:?}");
        match self.kind() {
            ExprKind::Const(c) => c
                .as_int()
                .ok_or_else(|| format!("{self:?} is not an integer")),
            ExprKind::Var(v) => value_of(v).ok_or_else(|| format!("`{}` has no value", v.name())),
            ExprKind::Unary(UnaryOp::Neg, a) => ev(a)?.checked_neg().ok_or_else(overflow),
            ExprKind::Unary(UnaryOp::Not, a) => Ok((ev(a)? == 0) as i64),
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (ev(a)?, ev(b)?);
                let nonzero = |y: i64| match y {
                    0 => Err(format!("division by zero in {self:?}")),
                    y => Ok(y),
                };
                match op {
                    BinaryOp::Add => x.checked_add(y).ok_or_else(overflow),
                    BinaryOp::Sub => x.checked_sub(y).ok_or_else(overflow),
                    BinaryOp::Mul => x.checked_mul(y).ok_or_else(overflow),
                    BinaryOp::Div => Ok(floor_div(x, nonzero(y)?)),
                    BinaryOp::Mod => Ok(floor_mod(x, nonzero(y)?)),
                    BinaryOp::Eq => Ok((x == y) as i64),
                    BinaryOp::Ne => Ok((x != y) as i64),
                    BinaryOp::Lt => Ok((x < y) as i64),
                    BinaryOp::Le => Ok((x <= y) as i64),
                    BinaryOp::Gt => Ok((x > y) as i64),
                    BinaryOp::Ge => Ok((x >= y) as i64),
                    BinaryOp::And => Ok((x != 0 && y != 0) as i64),
                    BinaryOp::Or => Ok((x != 0 || y != 0) as i64),
                    other => Err(format!("unsupported operator `{}`", other.symbol())),
                }
            }
            ExprKind::Select(c, a, b) => {
                if ev(c)? != 0 {
                    ev(a)
                } else {
                    ev(b)
                }
            }
            ExprKind::Cast(a, t) if t.is_integer() && !t.is_vector() => ev(a),
            ExprKind::Math(f @ (MathFunc::Min | MathFunc::Max), args) if args.len() == 2 => {
                let (x, y) = (ev(&args[0])?, ev(&args[1])?);
                Ok(if *f == MathFunc::Min {
                    x.min(y)
                } else {
                    x.max(y)
                })
            }
            _ => Err(format!("unsupported expression {self:?}")),
        }
    }
}

/// Floor division of integers, the semantics of [`BinaryOp::Div`].
/// Requires `b != 0`.
pub fn floor_div(a: i64, b: i64) -> i64 {
    let q = a / b;
    if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

/// Floor modulo of integers, the semantics of [`BinaryOp::Mod`].
/// Requires `b != 0`.
pub fn floor_mod(a: i64, b: i64) -> i64 {
    a - floor_div(a, b) * b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_expressions_evaluate_with_floor_semantics() {
        let (n, m) = (Var::new("n", DataType::I32), Var::new("m", DataType::I32));
        let value_of = |v: &Var| (v == &n).then_some(-7);
        let eval = |e: Expr| e.eval_int(&value_of);
        assert_eq!(eval(n.expr() / 2), Ok(-4));
        assert_eq!(eval(n.expr() % 2), Ok(1));
        assert_eq!(
            eval(n.expr().max(Expr::int(0)).min(Expr::int(5)) + 1),
            Ok(1)
        );
        assert_eq!(
            eval(Expr::select(n.expr().lt(0), Expr::int(3), Expr::int(4))),
            Ok(3)
        );
        assert!(eval(n.expr() / 0).is_err());
        assert!(eval(m.expr() + 1).unwrap_err().contains("`m`"));
        assert!(eval(Expr::int(i64::MAX) + 1).is_err());
    }

    #[test]
    fn floor_semantics_for_negative_operands() {
        assert_eq!(floor_div(-7, 2), -4);
        assert_eq!(floor_mod(-7, 2), 1);
        assert_eq!(floor_div(7, -2), -4);
        assert_eq!(floor_mod(7, -2), -1);
        assert_eq!(floor_div(6, 3), 2);
    }

    #[test]
    fn constants_adopt_the_type_of_the_other_operand() {
        let x = Var::new("x", DataType::I64);
        assert_eq!((&x + 1).dtype(), Some(DataType::I64));
        let v = Var::new("v", DataType::F32X8);
        assert_eq!((&v * Expr::f32(2.0)).dtype(), Some(DataType::F32X8));
        assert_eq!(x.expr().lt(3).dtype(), Some(DataType::BOOL));
    }

    #[test]
    fn substitute_replaces_variables() {
        let x = Var::new("x", DataType::I32);
        let e = &x * 4 + 1;
        let mut m = std::collections::HashMap::new();
        m.insert(x.clone(), Expr::int(3));
        let s = e.substitute(&m);
        assert!(s.children().iter().all(|c| c.as_var().is_none()));
    }
}
