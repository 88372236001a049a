//! Bound (interval) analysis of integer expressions.
//!
//! [`bound_of`] gives a closed interval that contains every value an integer
//! expression can take, given the ranges of the variables and built-ins it
//! reads ([`VarRanges`]). The analysis is sound, not exact: a wider interval
//! is always a correct answer. Passes use it to drop bound checks and
//! redundant `/`, `%`, and the codegen uses [`is_non_negative`] to emit plain
//! C division where floor division coincides with truncation.

use crate::dtype::{DataType, ScalarType};
use crate::expr::{floor_div, BinaryOp, Builtin, Dim, Expr, ExprKind, UnaryOp, Var};
use crate::function::{Function, FunctionKind};
use crate::intrinsic::MathFunc;
use std::collections::HashMap;

/// A closed interval `[lo, hi]` of integers; `None` is unbounded on that side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub lo: Option<i64>,
    pub hi: Option<i64>,
}

/// Internal bounds are `i128` with these sentinels standing for ±∞, so that
/// products of two finite `i64` bounds never overflow.
const POS_INF: i128 = i64::MAX as i128 + 1;
const NEG_INF: i128 = i64::MIN as i128 - 1;

fn clamp(v: i128) -> i128 {
    v.clamp(NEG_INF, POS_INF)
}

impl Interval {
    /// Every integer.
    pub const ALL: Interval = Interval { lo: None, hi: None };

    /// `[lo, hi]`, inclusive.
    pub fn new(lo: i64, hi: i64) -> Interval {
        Interval {
            lo: Some(lo),
            hi: Some(hi),
        }
    }

    /// The single value `v`.
    pub fn exact(v: i64) -> Interval {
        Interval::new(v, v)
    }

    /// `[lo, +∞)`.
    pub fn at_least(lo: i64) -> Interval {
        Interval {
            lo: Some(lo),
            hi: None,
        }
    }

    /// `[0, extent)`: the values of a loop variable over `0..extent`.
    pub fn below(extent: i64) -> Interval {
        Interval::new(0, extent.saturating_sub(1))
    }

    /// The value, when the interval holds exactly one.
    pub fn as_const(&self) -> Option<i64> {
        match (self.lo, self.hi) {
            (Some(l), Some(h)) if l == h => Some(l),
            _ => None,
        }
    }

    /// Whether every value is `>= 0`.
    pub fn is_non_negative(&self) -> bool {
        self.lo.is_some_and(|l| l >= 0)
    }

    /// Whether every value `v` satisfies `0 <= v < n`.
    pub fn within(&self, n: i64) -> bool {
        self.is_non_negative() && self.hi.is_some_and(|h| h < n)
    }

    /// The smallest interval containing both.
    pub fn union(&self, o: &Interval) -> Interval {
        Interval {
            lo: self.lo.zip(o.lo).map(|(a, b)| a.min(b)),
            hi: self.hi.zip(o.hi).map(|(a, b)| a.max(b)),
        }
    }

    /// The intersection (may be empty, i.e. `lo > hi`, when the two are disjoint).
    pub fn intersect(&self, o: &Interval) -> Interval {
        let pick = |a: Option<i64>, b: Option<i64>, f: fn(i64, i64) -> i64| match (a, b) {
            (Some(x), Some(y)) => Some(f(x, y)),
            (x, None) => x,
            (None, y) => y,
        };
        Interval {
            lo: pick(self.lo, o.lo, i64::max),
            hi: pick(self.hi, o.hi, i64::min),
        }
    }

    fn wide(&self) -> (i128, i128) {
        (
            self.lo.map_or(NEG_INF, i128::from),
            self.hi.map_or(POS_INF, i128::from),
        )
    }

    fn from_wide(lo: i128, hi: i128) -> Interval {
        let narrow = |v: i128| i64::try_from(v).ok();
        Interval {
            lo: if lo <= NEG_INF { None } else { narrow(lo) },
            hi: if hi >= POS_INF { None } else { narrow(hi) },
        }
    }

    fn add(&self, o: &Interval) -> Interval {
        let ((a, b), (c, d)) = (self.wide(), o.wide());
        let lo = if a <= NEG_INF || c <= NEG_INF {
            NEG_INF
        } else {
            clamp(a + c)
        };
        let hi = if b >= POS_INF || d >= POS_INF {
            POS_INF
        } else {
            clamp(b + d)
        };
        Interval::from_wide(lo, hi)
    }

    fn neg(&self) -> Interval {
        let (a, b) = self.wide();
        Interval::from_wide(-b, -a)
    }

    fn mul(&self, o: &Interval) -> Interval {
        let ((a, b), (c, d)) = (self.wide(), o.wide());
        let corners = [a * c, a * d, b * c, b * d].map(clamp);
        let lo = corners.iter().copied().min().unwrap_or(NEG_INF);
        let hi = corners.iter().copied().max().unwrap_or(POS_INF);
        Interval::from_wide(lo, hi)
    }

    /// Floor division by an interval of strictly positive or strictly
    /// negative divisors; `ALL` when the divisor may be zero.
    fn div(&self, o: &Interval) -> Interval {
        let ((a, b), (c, d)) = (self.wide(), o.wide());
        if c <= 0 && d >= 0 {
            return Interval::ALL;
        }
        let q = |x: i128, y: i128| -> i128 {
            if x >= POS_INF || x <= NEG_INF {
                if (x > 0) == (y > 0) {
                    POS_INF
                } else {
                    NEG_INF
                }
            } else if y >= POS_INF || y <= NEG_INF {
                if x == 0 || (x > 0) == (y > 0) {
                    0
                } else {
                    -1
                }
            } else {
                let q = x / y;
                if x % y != 0 && ((x < 0) != (y < 0)) {
                    q - 1
                } else {
                    q
                }
            }
        };
        let corners = [q(a, c), q(a, d), q(b, c), q(b, d)];
        let lo = corners.iter().copied().min().unwrap_or(NEG_INF);
        let hi = corners.iter().copied().max().unwrap_or(POS_INF);
        Interval::from_wide(lo, hi)
    }

    /// Floor modulo.
    fn rem(&self, o: &Interval) -> Interval {
        let ((a, b), (c, d)) = (self.wide(), o.wide());
        if c > 0 {
            if let Some(k) = o.as_const() {
                if a > NEG_INF && b < POS_INF {
                    let (qa, qb) = (floor_div(a as i64, k), floor_div(b as i64, k));
                    if qa == qb {
                        return Interval::from_wide(a - i128::from(qa) * c, b - i128::from(qa) * c);
                    }
                }
            }
            let hi = if a >= 0 { b.min(d - 1) } else { d - 1 };
            return Interval::from_wide(0, hi);
        }
        if d < 0 {
            return Interval::from_wide(c + 1, 0);
        }
        Interval::ALL
    }
}

/// What is known of the variables and built-ins of a scope.
///
/// Variables without a recorded range take the range of their type (e.g.
/// `[0, 2^32)` for `u32`, everything for `i64`). Built-ins without a recorded
/// range take what CUDA guarantees (`threadIdx` in `[0, 1024)`, `blockIdx >= 0`).
#[derive(Clone, Debug, Default)]
pub struct VarRanges {
    vars: HashMap<Var, Interval>,
    builtins: HashMap<Builtin, Interval>,
}

impl VarRanges {
    /// No variable has a recorded range.
    pub fn new() -> VarRanges {
        VarRanges::default()
    }

    /// The ranges of `f`'s built-ins: for a CUDA kernel, `threadIdx.d` in
    /// `[0, block_d)`, `blockDim.d == block_d`, and `blockIdx.d` in
    /// `[0, grid_d)` when the grid dimension is a constant.
    pub fn for_function(f: &Function) -> VarRanges {
        let mut r = VarRanges::new();
        if let FunctionKind::CudaKernel(launch) = &f.kind {
            for (i, d) in [Dim::X, Dim::Y, Dim::Z].into_iter().enumerate() {
                let block = launch.block[i];
                r.builtins
                    .insert(Builtin::ThreadIdx(d), Interval::below(block));
                r.builtins
                    .insert(Builtin::BlockDim(d), Interval::exact(block));
                if let Some(g) = launch.grid[i].as_int() {
                    r.builtins.insert(Builtin::BlockIdx(d), Interval::below(g));
                    r.builtins.insert(Builtin::GridDim(d), Interval::exact(g));
                }
            }
        }
        r
    }

    /// Records the range of `var`; returns the previous record, to be given
    /// back to [`VarRanges::restore`] when the scope ends.
    pub fn set(&mut self, var: &Var, range: Interval) -> Option<Interval> {
        self.vars.insert(var.clone(), range)
    }

    /// Puts back the record [`VarRanges::set`] returned.
    pub fn restore(&mut self, var: &Var, previous: Option<Interval>) {
        match previous {
            Some(r) => self.vars.insert(var.clone(), r),
            None => self.vars.remove(var),
        };
    }

    /// Records the range of a built-in; returns the previous record.
    pub fn set_builtin(&mut self, b: Builtin, range: Interval) -> Option<Interval> {
        self.builtins.insert(b, range)
    }

    /// Puts back the record [`VarRanges::set_builtin`] returned.
    pub fn restore_builtin(&mut self, b: Builtin, previous: Option<Interval>) {
        match previous {
            Some(r) => self.builtins.insert(b, r),
            None => self.builtins.remove(&b),
        };
    }

    /// The range of `var` (its type's range when none was recorded).
    pub fn var(&self, var: &Var) -> Interval {
        match self.vars.get(var) {
            Some(r) => *r,
            None => var.ty().as_data().map_or(Interval::ALL, type_range),
        }
    }

    /// The range of a built-in.
    pub fn builtin(&self, b: Builtin) -> Interval {
        if let Some(r) = self.builtins.get(&b) {
            return *r;
        }
        match b {
            Builtin::ThreadIdx(Dim::Z) => Interval::below(64),
            Builtin::ThreadIdx(_) => Interval::below(1024),
            Builtin::BlockDim(Dim::Z) => Interval::new(1, 64),
            Builtin::BlockDim(_) => Interval::new(1, 1024),
            Builtin::BlockIdx(_) => Interval::new(0, i64::from(i32::MAX) - 1),
            Builtin::GridDim(_) => Interval::new(1, i64::from(i32::MAX)),
        }
    }
}

/// The values of an integer (or bool) data type; `ALL` for other types.
pub fn type_range(dtype: DataType) -> Interval {
    if dtype.is_vector() {
        return Interval::ALL;
    }
    match dtype.scalar {
        ScalarType::Bool => Interval::new(0, 1),
        ScalarType::I8 => Interval::new(i8::MIN.into(), i8::MAX.into()),
        ScalarType::I16 => Interval::new(i16::MIN.into(), i16::MAX.into()),
        ScalarType::I32 => Interval::new(i32::MIN.into(), i32::MAX.into()),
        ScalarType::I64 => Interval::new(i64::MIN, i64::MAX),
        ScalarType::U8 => Interval::new(0, u8::MAX.into()),
        ScalarType::U16 => Interval::new(0, u16::MAX.into()),
        ScalarType::U32 => Interval::new(0, u32::MAX.into()),
        ScalarType::U64 => Interval::at_least(0),
        _ => Interval::ALL,
    }
}

/// Whether `v` is a value of the integer (or bool) type `dtype`.
pub fn fits(v: i64, dtype: DataType) -> bool {
    let r = type_range(dtype);
    r.lo.is_none_or(|l| v >= l) && r.hi.is_none_or(|h| v <= h)
}

/// An interval containing every value of the integer or bool expression `e`
/// (`ALL` for expressions of other types or that the analysis cannot follow).
pub fn bound_of(e: &Expr, ranges: &VarRanges) -> Interval {
    let Some(dtype) = e.dtype() else {
        return Interval::ALL;
    };
    if dtype.is_vector() || dtype.is_float() {
        return Interval::ALL;
    }
    let ty = type_range(dtype);
    let raw = match e.kind() {
        ExprKind::Const(c) => c.as_int().map_or(Interval::ALL, Interval::exact),
        ExprKind::Var(v) => ranges.var(v),
        ExprKind::Builtin(b) => ranges.builtin(*b),
        ExprKind::Unary(UnaryOp::Neg, a) => bound_of(a, ranges).neg(),
        ExprKind::Unary(UnaryOp::Not, _) => Interval::new(0, 1),
        ExprKind::Unary(UnaryOp::BitNot, a) => {
            // !x == -x - 1
            bound_of(a, ranges).neg().add(&Interval::exact(-1))
        }
        ExprKind::Binary(op, a, b) => binary_bound(*op, a, b, ranges),
        ExprKind::Select(_, a, b) => bound_of(a, ranges).union(&bound_of(b, ranges)),
        ExprKind::Cast(a, _) => match a.dtype() {
            Some(from) if !from.is_float() => bound_of(a, ranges),
            _ => Interval::ALL,
        },
        ExprKind::Math(MathFunc::Min, args) | ExprKind::Math(MathFunc::Max, args)
            if args.len() == 2 =>
        {
            let (x, y) = (bound_of(&args[0], ranges), bound_of(&args[1], ranges));
            let is_min = matches!(e.kind(), ExprKind::Math(MathFunc::Min, _));
            let pick = |p: Option<i64>, q: Option<i64>, lower_side: bool| match (p, q) {
                (Some(p), Some(q)) => Some(if is_min { p.min(q) } else { p.max(q) }),
                // min(x, unbounded) keeps x's upper bound; max keeps the lower bound.
                (Some(p), None) | (None, Some(p)) if is_min != lower_side => Some(p),
                _ => None,
            };
            Interval {
                lo: pick(x.lo, y.lo, true),
                hi: pick(x.hi, y.hi, false),
            }
        }
        ExprKind::Math(MathFunc::Abs, args) if args.len() == 1 => {
            let x = bound_of(&args[0], ranges);
            let m = x.union(&x.neg());
            Interval {
                lo: Some(if x.is_non_negative() {
                    x.lo.unwrap_or(0)
                } else if x.hi.is_some_and(|h| h <= 0) {
                    x.hi.map_or(0, |h| -h)
                } else {
                    0
                }),
                hi: m.hi,
            }
        }
        _ => Interval::ALL,
    };
    let clipped = raw.intersect(&ty);
    let unsigned = !dtype.scalar.is_signed() && !dtype.is_bool();
    let converts = matches!(e.kind(), ExprKind::Cast(..));
    if (unsigned || converts) && clipped != raw {
        // Unsigned arithmetic and conversions wrap: a result outside the
        // type's range may be anything.
        ty
    } else {
        clipped
    }
}

fn binary_bound(op: BinaryOp, a: &Expr, b: &Expr, ranges: &VarRanges) -> Interval {
    if op.is_comparison() || op.is_logical() {
        return Interval::new(0, 1);
    }
    let (x, y) = (bound_of(a, ranges), bound_of(b, ranges));
    match op {
        BinaryOp::Add => x.add(&y),
        BinaryOp::Sub => x.add(&y.neg()),
        BinaryOp::Mul => x.mul(&y),
        BinaryOp::Div => x.div(&y),
        BinaryOp::Mod => x.rem(&y),
        BinaryOp::BitAnd => match (x.is_non_negative(), y.is_non_negative()) {
            (true, true) => Interval {
                lo: Some(0),
                hi: match (x.hi, y.hi) {
                    (Some(p), Some(q)) => Some(p.min(q)),
                    (p, None) => p,
                    (None, q) => q,
                },
            },
            (true, false) => Interval {
                lo: Some(0),
                hi: x.hi,
            },
            (false, true) => Interval {
                lo: Some(0),
                hi: y.hi,
            },
            (false, false) => Interval::ALL,
        },
        BinaryOp::BitOr | BinaryOp::BitXor => {
            if x.is_non_negative() && y.is_non_negative() {
                match x.hi.zip(y.hi) {
                    Some((p, q)) => {
                        let bits = 64 - (p.max(q) as u64).leading_zeros();
                        let hi = if bits >= 63 {
                            None
                        } else {
                            Some((1i64 << bits) - 1)
                        };
                        Interval { lo: Some(0), hi }
                    }
                    None => Interval::at_least(0),
                }
            } else {
                Interval::ALL
            }
        }
        BinaryOp::Shr => match y.as_const() {
            Some(k) if (0..63).contains(&k) => x.div(&Interval::exact(1i64 << k)),
            _ if x.is_non_negative() => Interval {
                lo: Some(0),
                hi: x.hi,
            },
            _ => Interval::ALL,
        },
        BinaryOp::Shl => match y.as_const() {
            Some(k) if (0..63).contains(&k) => x.mul(&Interval::exact(1i64 << k)),
            _ => Interval::ALL,
        },
        _ => Interval::ALL,
    }
}

/// Whether the integer expression `e` is `>= 0` for every value of the
/// variables allowed by `ranges`. False when it cannot be proven.
pub fn is_non_negative(e: &Expr, ranges: &VarRanges) -> bool {
    bound_of(e, ranges).is_non_negative()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_index_arithmetic_is_bounded_by_the_launch() {
        let mut r = VarRanges::new();
        r.set_builtin(Builtin::ThreadIdx(Dim::X), Interval::below(128));
        let tid = Expr::thread_idx(Dim::X);
        assert_eq!(bound_of(&(&tid / 32), &r), Interval::new(0, 3));
        assert_eq!(bound_of(&(&tid % 32), &r), Interval::new(0, 31));
        assert_eq!(bound_of(&(&tid - 200), &r), Interval::new(-200, -73));
        assert_eq!(bound_of(&((&tid - 200) / 8), &r), Interval::new(-25, -10));
        assert_eq!(bound_of(&((&tid - 200) % 8), &r), Interval::new(0, 7));
        assert!(is_non_negative(&(&tid >> 2), &r));
        assert!(!is_non_negative(&(&tid - 1), &r));
    }

    #[test]
    fn unknown_signed_variables_may_be_negative() {
        let x = Var::new("x", DataType::I32);
        let r = VarRanges::new();
        assert!(!is_non_negative(&x.expr(), &r));
        assert_eq!(bound_of(&(&x % 7), &r), Interval::new(0, 6));
        let u = Var::new("u", DataType::U32);
        assert!(is_non_negative(&(&u / 3), &r));
    }
}
