//! Scalar semantics: the value of every IR scalar type held in one 64-bit word, and the
//! operations on such words with the semantics of the CUDA C the dialect emits.
//!
//! Encoding (the type is always known statically, from the IR):
//! - `bool`: 0 or 1;
//! - integers: the value sign- or zero-extended to 64 bits (`u64` as its bits);
//! - floats: the `f64` bits of the value, which is exactly representable in its type
//!   (`f32`, `f16`, `bf16` values are rounded, to nearest even, after every operation).
//!
//! Integer arithmetic is exact and checked like the IR interpreter's: signed overflow is a
//! [`Fault::Arithmetic`] (undefined behaviour in CUDA C), unsigned arithmetic wraps, `/` and
//! `%` use floor semantics. `f32` arithmetic is IEEE single precision; `f16`/`bf16`
//! `+ - * /` are correctly rounded (CUDA's `__hadd` …), their math functions are computed in
//! `float` and rounded back (as the dialect emits them), `fma` of 16-bit floats is rounded
//! once. Transcendental functions use Rust's `f64` functions rounded to the type: within
//! CUDA's documented error bounds, but not bit-identical to libdevice.

use super::error::Fault;
use half::{bf16, f16};
use hidet_ir::dtype::ScalarType as S;
use hidet_ir::expr::{floor_div, floor_mod, BinaryOp};
use hidet_ir::intrinsic::MathFunc;

/// One scalar value; see the module documentation for the encoding.
pub(crate) type Word = u64;

/// The word of the float `v` (already rounded to its type).
#[inline]
pub(crate) fn fw(v: f64) -> Word {
    v.to_bits()
}

/// The float value of a float word.
#[inline]
pub(crate) fn wf(w: Word) -> f64 {
    f64::from_bits(w)
}

/// The integer value of an integer (or bool) word of type `t`.
#[inline]
pub(crate) fn wi(w: Word, t: S) -> i128 {
    if t == S::U64 {
        i128::from(w)
    } else {
        i128::from(w as i64)
    }
}

/// `v` rounded to nearest (ties to even) in the float type `t`.
#[inline]
pub(crate) fn round(v: f64, t: S) -> f64 {
    match t {
        S::F32 => f64::from(v as f32),
        S::F16 => f16::from_f64(v).to_f64(),
        S::BF16 => bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

fn arith(what: String) -> Fault {
    Fault::Arithmetic { what }
}

/// `v` as a value of the integer type `t`: unsigned types wrap, signed ones must fit.
#[inline]
pub(crate) fn fit(v: i128, t: S) -> Result<Word, Fault> {
    if t == S::Bool {
        return Ok(Word::from(v != 0));
    }
    let bits = (t.bytes() * 8) as u32;
    if t.is_signed() {
        let (lo, hi) = (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1);
        if v < lo || v > hi {
            return Err(arith(format!("{v} overflows {t}")));
        }
        Ok(v as i64 as u64)
    } else {
        // Modulo 2^bits of a two's-complement value: its low bits.
        Ok((v as u128 & ((1u128 << bits) - 1)) as u64)
    }
}

/// Whether converting a `from` value to `to` keeps the word unchanged: a bool or an integer
/// to an integer type that holds every value of `from` (words are sign- or zero-extended).
#[inline]
pub(crate) fn lossless(from: S, to: S) -> bool {
    if from == to {
        return true;
    }
    if !to.is_integer() || !(from.is_integer() || from == S::Bool) {
        return false;
    }
    if from == S::Bool {
        return true;
    }
    match (from.is_signed(), to.is_signed()) {
        (true, true) | (false, false) => to.bytes() >= from.bytes(),
        (false, true) => to.bytes() > from.bytes(),
        (true, false) => false,
    }
}

/// The word of the `t` value stored little-endian in `bytes` (`bytes.len() == t.bytes()`).
#[inline]
pub(crate) fn decode(bytes: &[u8], t: S) -> Word {
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(bytes);
    let raw = u64::from_le_bytes(b);
    match t {
        S::Bool => Word::from(raw != 0),
        S::I8 => raw as u8 as i8 as i64 as u64,
        S::I16 => raw as u16 as i16 as i64 as u64,
        S::I32 => raw as u32 as i32 as i64 as u64,
        S::I64 | S::U64 | S::U8 | S::U16 | S::U32 => raw,
        S::F16 => fw(f16::from_bits(raw as u16).to_f64()),
        S::BF16 => fw(bf16::from_bits(raw as u16).to_f64()),
        S::F32 => fw(f64::from(f32::from_bits(raw as u32))),
        S::F64 => raw,
    }
}

/// Stores the `t` word `w` little-endian into `out` (`out.len() == t.bytes()`).
#[inline]
pub(crate) fn encode(w: Word, t: S, out: &mut [u8]) {
    let raw: u64 = match t {
        S::F16 => u64::from(f16::from_f64(wf(w)).to_bits()),
        S::BF16 => u64::from(bf16::from_f64(wf(w)).to_bits()),
        S::F32 => u64::from((wf(w) as f32).to_bits()),
        _ => w,
    };
    let n = out.len();
    out.copy_from_slice(&raw.to_le_bytes()[..n]);
}

/// The arithmetic or bitwise operation `op` on two words of type `t` (the result's type).
pub(crate) fn binary(op: BinaryOp, t: S, a: Word, b: Word) -> Result<Word, Fault> {
    if t.is_float() {
        let (x, y) = (wf(a), wf(b));
        let v = match (t, op) {
            (S::F32, BinaryOp::Add) => f64::from(x as f32 + y as f32),
            (S::F32, BinaryOp::Sub) => f64::from(x as f32 - y as f32),
            (S::F32, BinaryOp::Mul) => f64::from(x as f32 * y as f32),
            (S::F32, BinaryOp::Div) => f64::from(x as f32 / y as f32),
            (_, BinaryOp::Add) => round(x + y, t),
            (_, BinaryOp::Sub) => round(x - y, t),
            (_, BinaryOp::Mul) => round(x * y, t),
            (_, BinaryOp::Div) => round(x / y, t),
            (_, BinaryOp::Mod) => round(x % y, t),
            _ => {
                return Err(Fault::Invalid {
                    what: format!("`{}` on {t}", op.symbol()),
                })
            }
        };
        return Ok(fw(v));
    }
    // Fast paths: i32/i64 addition, subtraction and multiplication (index arithmetic).
    if matches!(t, S::I32 | S::I64) && matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul) {
        let (x, y) = (a as i64, b as i64);
        let r = match op {
            BinaryOp::Add => x.checked_add(y),
            BinaryOp::Sub => x.checked_sub(y),
            _ => x.checked_mul(y),
        };
        if let Some(r) = r {
            if t == S::I64 || i32::try_from(r).is_ok() {
                return Ok(r as u64);
            }
        }
    }
    let (p, q) = (wi(a, t), wi(b, t));
    let bits = (t.bytes() * 8) as i128;
    let v = match op {
        BinaryOp::Add => p + q,
        BinaryOp::Sub => p - q,
        BinaryOp::Mul => p * q,
        BinaryOp::Div | BinaryOp::Mod if q == 0 => {
            return Err(arith(format!("{p} {} 0", op.symbol())))
        }
        BinaryOp::Div | BinaryOp::Mod => {
            match (i64::try_from(p), i64::try_from(q)) {
                (Ok(x), Ok(y)) if !(x == i64::MIN && y == -1) => {
                    if op == BinaryOp::Div {
                        i128::from(floor_div(x, y))
                    } else {
                        i128::from(floor_mod(x, y))
                    }
                }
                // u64 operands beyond i64: floor and truncation agree on non-negatives.
                _ if p >= 0 && q > 0 => {
                    if op == BinaryOp::Div {
                        p / q
                    } else {
                        p % q
                    }
                }
                _ => return Err(arith(format!("{p} {} {q} overflows {t}", op.symbol()))),
            }
        }
        BinaryOp::BitAnd => p & q,
        BinaryOp::BitOr => p | q,
        BinaryOp::BitXor => p ^ q,
        BinaryOp::Shl | BinaryOp::Shr if !(0..bits).contains(&q) => {
            return Err(arith(format!("shift by {q} of a {t}")))
        }
        BinaryOp::Shl => {
            if p < 0 && t.is_signed() {
                return Err(arith(format!("left shift of the negative {p}")));
            }
            p << q
        }
        BinaryOp::Shr => p >> q,
        _ => {
            return Err(Fault::Invalid {
                what: format!("`{}` on {t}", op.symbol()),
            })
        }
    };
    fit(v, t)
}

/// The comparison `op` of two words of type `t` (both operands have this type).
#[inline]
pub(crate) fn compare(op: BinaryOp, t: S, a: Word, b: Word) -> bool {
    use std::cmp::Ordering::*;
    let ord = if t.is_float() {
        wf(a).partial_cmp(&wf(b))
    } else {
        Some(wi(a, t).cmp(&wi(b, t)))
    };
    match (op, ord) {
        (BinaryOp::Ne, None) => true,
        (_, None) => false,
        (BinaryOp::Eq, Some(o)) => o == Equal,
        (BinaryOp::Ne, Some(o)) => o != Equal,
        (BinaryOp::Lt, Some(o)) => o == Less,
        (BinaryOp::Le, Some(o)) => o != Greater,
        (BinaryOp::Gt, Some(o)) => o == Greater,
        _ => ord != Some(Less),
    }
}

/// `-a`, `!a` or `~a` of type `t`.
pub(crate) fn unary(op: hidet_ir::expr::UnaryOp, t: S, a: Word) -> Result<Word, Fault> {
    use hidet_ir::expr::UnaryOp as U;
    match op {
        U::Not => Ok(Word::from(a == 0)),
        U::Neg if t.is_float() => Ok(fw(-wf(a))),
        U::Neg => fit(-wi(a, t), t),
        U::BitNot if t.is_integer() => fit(!wi(a, t), t),
        U::BitNot => Err(Fault::Invalid {
            what: format!("`~` on {t}"),
        }),
    }
}

/// The C cast of the `from` word `w` to `to`, as the CUDA dialect emits it: 16-bit floats
/// convert through `float` (an integer is rounded to `float` first), `f64` converts to a
/// 16-bit float with one rounding, a float converted to an integer is truncated and must
/// fit (a NaN or out-of-range value is a fault; CUDA would saturate silently).
pub(crate) fn cast(w: Word, from: S, to: S) -> Result<Word, Fault> {
    if lossless(from, to) {
        return Ok(w);
    }
    if to == S::Bool {
        return Ok(Word::from(if from.is_float() {
            wf(w) != 0.0
        } else {
            w != 0
        }));
    }
    if to.is_float() {
        let v = if from.is_float() {
            wf(w)
        } else {
            let i = wi(w, from);
            match to {
                S::F64 => i as f64,
                // `(float)i`, then (for 16-bit floats) rounded again from `float`.
                _ => f64::from(i as f32),
            }
        };
        return Ok(fw(match (from, to) {
            (S::F64, _) => round(v, to),
            (_, S::F16 | S::BF16) => round(f64::from(v as f32), to),
            _ => round(v, to),
        }));
    }
    // An integer target.
    if from.is_float() {
        let v = wf(w).trunc();
        if !v.is_finite() || v.abs() > 1.8e19 {
            return Err(arith(format!("{} does not fit {to}", wf(w))));
        }
        let i = v as i128;
        let bits = (to.bytes() * 8) as u32;
        let ok = if to.is_signed() {
            i >= -(1i128 << (bits - 1)) && i < (1i128 << (bits - 1))
        } else {
            i >= 0 && i < (1i128 << bits)
        };
        if !ok {
            return Err(arith(format!("{} does not fit {to}", wf(w))));
        }
        return fit(i, to);
    }
    // Integer to integer: C's modular conversion.
    let bits = (to.bytes() * 8) as u32;
    let m = 1i128 << bits;
    let mut v = (wi(w, from) as u128 & (m as u128 - 1)) as i128;
    if to.is_signed() && v >= m / 2 {
        v -= m;
    }
    fit(v, to)
}

/// `v` moved by one unit in the last place of `f64` towards the sign of `dir`.
fn nudge(v: f64, dir: f64) -> f64 {
    if !v.is_finite() || dir == 0.0 {
        return v;
    }
    if v == 0.0 {
        return f64::from_bits(1).copysign(dir);
    }
    let bits = v.to_bits();
    let away = (dir > 0.0) == (v > 0.0);
    f64::from_bits(if away { bits + 1 } else { bits - 1 })
}

/// `a * b + c` rounded once to the 16-bit float type `t` (`__hfma`): the product is exact in
/// `f64`, the sum's rounding error is recovered exactly (two-sum) and breaks a tie that the
/// `f64` rounding might have created.
fn fma16(a: f64, b: f64, c: f64, t: S) -> f64 {
    let p = a * b;
    let s = p + c;
    let bb = s - p;
    let err = (p - (s - bb)) + (c - bb);
    round(nudge(s, err), t)
}

/// `func` in `float` on `x`, as the dialect emits it for `f32` (and, promoted, for 16-bit
/// floats).
fn f32_func(func: MathFunc, x: &[f64]) -> f64 {
    let r32 = |v: f64| f64::from(v as f32);
    let a = x[0];
    r32(match func {
        MathFunc::Sigmoid => {
            let e = r32((-a).exp());
            let d = r32(1.0 + e);
            1.0 / d
        }
        MathFunc::Fma => return f64::from((a as f32).mul_add(x[1] as f32, x[2] as f32)),
        other => f64_func(other, x),
    })
}

/// `func` in `double`.
fn f64_func(func: MathFunc, x: &[f64]) -> f64 {
    let a = x[0];
    let b = || x[1];
    match func {
        MathFunc::Exp => a.exp(),
        MathFunc::Exp2 => a.exp2(),
        MathFunc::Log => a.ln(),
        MathFunc::Log2 => a.log2(),
        MathFunc::Sqrt => a.sqrt(),
        MathFunc::Rsqrt => 1.0 / a.sqrt(),
        MathFunc::Tanh => a.tanh(),
        MathFunc::Sigmoid => 1.0 / (1.0 + (-a).exp()),
        MathFunc::Erf => libm::erf(a),
        MathFunc::Sin => a.sin(),
        MathFunc::Cos => a.cos(),
        MathFunc::Tan => a.tan(),
        MathFunc::Asin => a.asin(),
        MathFunc::Acos => a.acos(),
        MathFunc::Atan => a.atan(),
        MathFunc::Sinh => a.sinh(),
        MathFunc::Cosh => a.cosh(),
        MathFunc::Asinh => a.asinh(),
        MathFunc::Acosh => a.acosh(),
        MathFunc::Atanh => a.atanh(),
        MathFunc::Abs => a.abs(),
        MathFunc::Floor => a.floor(),
        MathFunc::Ceil => a.ceil(),
        MathFunc::Round => a.round_ties_even(),
        MathFunc::Trunc => a.trunc(),
        MathFunc::Pow => a.powf(b()),
        MathFunc::Min => a.min(b()),
        MathFunc::Max => a.max(b()),
        MathFunc::Atan2 => a.atan2(b()),
        MathFunc::Fma => a.mul_add(b(), x[2]),
        MathFunc::IsNan | MathFunc::IsInf => f64::NAN,
    }
}

/// The math function `func` of type `t` on `args` (words of type `t`; `IsNan`/`IsInf`
/// return a bool word).
pub(crate) fn math(func: MathFunc, t: S, args: &[Word]) -> Result<Word, Fault> {
    if !t.is_float() {
        let ints: Vec<i128> = args.iter().map(|&a| wi(a, t)).collect();
        let v = match (func, ints.as_slice()) {
            (MathFunc::Min, [a, b]) => *a.min(b),
            (MathFunc::Max, [a, b]) => *a.max(b),
            (MathFunc::Abs, [a]) => a.abs(),
            _ => {
                return Err(Fault::Invalid {
                    what: format!("{} of {t}", func.name()),
                })
            }
        };
        return fit(v, t);
    }
    let x: Vec<f64> = args.iter().map(|&a| wf(a)).collect();
    if x.len() != func.arity() {
        return Err(Fault::Invalid {
            what: format!("{} with {} arguments", func.name(), x.len()),
        });
    }
    match func {
        MathFunc::IsNan => return Ok(Word::from(x[0].is_nan())),
        MathFunc::IsInf => return Ok(Word::from(x[0].is_infinite())),
        _ => {}
    }
    let v = match t {
        S::F64 => f64_func(func, &x),
        S::F32 => f32_func(func, &x),
        _ if func == MathFunc::Fma => fma16(x[0], x[1], x[2], t),
        _ => round(f32_func(func, &x), t),
    };
    Ok(fw(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_bit_rounding_is_to_nearest_even() {
        assert_eq!(round(1.0 + 2f64.powi(-11), S::F16), 1.0);
        assert_eq!(
            round(1.0 + 3.0 * 2f64.powi(-11), S::F16),
            1.0 + 2f64.powi(-9)
        );
        assert_eq!(round(65520.0, S::F16), f64::INFINITY);
        assert_eq!(round(1.0 / 3.0, S::BF16), 0.333984375);
    }

    #[test]
    fn fma16_rounds_once() {
        // a*b = 1 + 3*2^-8 is a bf16 tie; c = -2^-60 breaks it downwards.
        let a = 1.0 + 2f64.powi(-7) + 2f64.powi(-8);
        let v = fma16(a, 1.0, -(2f64.powi(-60)), S::BF16);
        assert_eq!(v, 1.0 + 2f64.powi(-7));
        assert_eq!(fma16(3.0, 4.0, 1.0, S::F16), 13.0);
    }

    #[test]
    fn casts_follow_the_emitted_c() {
        let w = cast(fw(-2.75), S::F32, S::I32).unwrap();
        assert_eq!(wi(w, S::I32), -2);
        assert!(cast(fw(3e9), S::F32, S::I32).is_err());
        let w = cast(300u64, S::I32, S::U8).unwrap();
        assert_eq!(w, 44);
        let w = cast((-1i64) as u64, S::I32, S::U32).unwrap();
        assert_eq!(w, 0xffff_ffff);
        let w = cast(fw(0.1), S::F64, S::F16).unwrap();
        assert_eq!(f16::from_f64(wf(w)).to_bits(), 0x2e66);
    }

    #[test]
    fn integer_arithmetic_is_checked_and_floored() {
        let m7 = (-7i64) as u64;
        assert_eq!(binary(BinaryOp::Div, S::I32, m7, 2).unwrap() as i64, -4);
        assert_eq!(binary(BinaryOp::Mod, S::I32, m7, 2).unwrap(), 1);
        assert!(binary(BinaryOp::Add, S::I32, i32::MAX as u64, 1).is_err());
        assert_eq!(binary(BinaryOp::Add, S::U8, 255, 1).unwrap(), 0);
        assert!(binary(BinaryOp::Div, S::I32, 1, 0).is_err());
    }
}
