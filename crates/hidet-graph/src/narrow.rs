//! Narrow element types: the four ONNX 8-bit float formats and the 4-bit integers.
//!
//! They are storage types: a tensor holds one byte per element (the float8 bit pattern, or
//! the 4-bit integer sign-extended / zero-extended to a byte; the ONNX file format packs
//! 4-bit integers two per byte, see `hidet-onnx`). Operators convert them to and from wider
//! types (Cast, QuantizeLinear, DequantizeLinear) and move them around (Reshape, ...); there
//! is no arithmetic on them and no kernel IR type for them.
//!
//! Conversions follow the ONNX Cast specification (opset 19+):
//! - float8 → wider float is exact.
//! - wider float → float8: the value is first rounded to f32 (as the ONNX reference does),
//!   then rounded to nearest, ties to even, at the target precision (subnormals included).
//!   A result whose magnitude exceeds the format's largest finite value `max` becomes
//!   `±max` when saturating, otherwise NaN (E4M3FN, the FNUZ formats) or `±inf` (E5M2).
//!   Infinities behave like out-of-range values (`±max` when saturating, which is what the
//!   ONNX reference implementation and its node tests do for every format). NaN stays NaN.
//!   The FNUZ formats have no negative zero: values that round to zero become `+0`.
//! - to a 4-bit integer: the value (as f32) is clamped to the type's range and rounded to
//!   nearest, ties to even (NaN becomes 0); this also applies to integer sources.

use std::cmp::Ordering;

/// The layout and special values of one float8 format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Float8Format {
    /// Mantissa (fraction) bits.
    pub man_bits: u32,
    /// Exponent bias.
    pub bias: i32,
    /// How infinities and NaN are encoded.
    pub kind: Float8Kind,
}

/// The special-value conventions of the float8 formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Float8Kind {
    /// IEEE-like (E5M2): all-ones exponent is inf (mantissa 0) or NaN.
    Ieee,
    /// Finite only (E4M3FN): `S.1111.111` is NaN, everything else is finite.
    Fn,
    /// Finite, unsigned zero (E4M3FNUZ, E5M2FNUZ): `0x80` is the only NaN, no `-0`.
    Fnuz,
}

pub const E4M3FN: Float8Format = Float8Format {
    man_bits: 3,
    bias: 7,
    kind: Float8Kind::Fn,
};
pub const E4M3FNUZ: Float8Format = Float8Format {
    man_bits: 3,
    bias: 8,
    kind: Float8Kind::Fnuz,
};
pub const E5M2: Float8Format = Float8Format {
    man_bits: 2,
    bias: 15,
    kind: Float8Kind::Ieee,
};
pub const E5M2FNUZ: Float8Format = Float8Format {
    man_bits: 2,
    bias: 16,
    kind: Float8Kind::Fnuz,
};

impl Float8Format {
    fn exp_bits(self) -> u32 {
        7 - self.man_bits
    }

    /// The largest finite value.
    pub fn max(self) -> f64 {
        let top_exp = (1i32 << self.exp_bits()) - 1;
        let m = self.man_bits as i32;
        match self.kind {
            // The all-ones exponent is reserved.
            Float8Kind::Ieee => (2.0 - 2f64.powi(-m)) * 2f64.powi(top_exp - 1 - self.bias),
            // All-ones exponent and mantissa is NaN: the largest mantissa is one less.
            Float8Kind::Fn => (2.0 - 2f64.powi(1 - m)) * 2f64.powi(top_exp - self.bias),
            Float8Kind::Fnuz => (2.0 - 2f64.powi(-m)) * 2f64.powi(top_exp - self.bias),
        }
    }

    fn nan(self, negative: bool) -> u8 {
        match self.kind {
            Float8Kind::Fnuz => 0x80,
            _ => 0x7f | if negative { 0x80 } else { 0 },
        }
    }

    /// The value of a bit pattern (exact).
    pub fn decode(self, bits: u8) -> f32 {
        let negative = bits & 0x80 != 0;
        let m = self.man_bits;
        let exp = ((bits & 0x7f) >> m) as i32;
        let man = (bits & ((1 << m) - 1)) as i32;
        let top_exp = (1i32 << self.exp_bits()) - 1;
        match self.kind {
            Float8Kind::Fnuz if bits == 0x80 => return f32::NAN,
            Float8Kind::Fn if bits & 0x7f == 0x7f => return f32::NAN,
            Float8Kind::Ieee if exp == top_exp => {
                return if man != 0 {
                    f32::NAN
                } else if negative {
                    f32::NEG_INFINITY
                } else {
                    f32::INFINITY
                }
            }
            _ => {}
        }
        let mag = if exp == 0 {
            man as f64 * 2f64.powi(1 - self.bias - m as i32)
        } else {
            (1.0 + man as f64 * 2f64.powi(-(m as i32))) * 2f64.powi(exp - self.bias)
        };
        (if negative { -mag } else { mag }) as f32
    }

    /// The bit pattern of `v` (see the module docs for rounding, saturation and specials).
    pub fn encode(self, v: f32, saturate: bool) -> u8 {
        let negative = v.is_sign_negative();
        let sign: u8 = if negative { 0x80 } else { 0 };
        if v.is_nan() {
            return self.nan(negative);
        }
        let max = self.max();
        let overflow = || -> u8 {
            if saturate {
                sign | self.encode_exact(max)
            } else {
                match self.kind {
                    Float8Kind::Ieee => sign | (0x7f & !((1 << self.man_bits) - 1)),
                    _ => self.nan(negative),
                }
            }
        };
        if v.is_infinite() {
            return overflow();
        }
        let a = (v as f64).abs();
        let m = self.man_bits as i32;
        let min_exp = 1 - self.bias;
        let rounded = if a == 0.0 {
            0.0
        } else {
            // `a` is a normal f64 (every f32 is): its binary exponent is exact.
            let e = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(min_exp);
            let step = 2f64.powi(e - m);
            (a / step).round_ties_even() * step
        };
        if rounded > max {
            return overflow();
        }
        if rounded == 0.0 {
            return if self.kind == Float8Kind::Fnuz {
                0
            } else {
                sign
            };
        }
        sign | self.encode_exact(rounded)
    }

    /// The pattern (without sign) of a positive value representable in this format.
    fn encode_exact(self, a: f64) -> u8 {
        let m = self.man_bits as i32;
        let min_exp = 1 - self.bias;
        let e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        if e < min_exp {
            (a / 2f64.powi(min_exp - m)) as u8
        } else {
            let man = (a / 2f64.powi(e - m)) as i32 - (1 << m);
            (((e + self.bias) << m) | man) as u8
        }
    }
}

macro_rules! float8_type {
    ($(#[$doc:meta])* $name:ident, $format:expr) => {
        $(#[$doc])*
        ///
        /// Equality is bitwise (NaN patterns equal themselves, `+0 != -0`); ordering compares
        /// values and is `None` between distinct patterns of equal value (`+0`, `-0`) and
        /// with NaN, so it agrees with equality.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(pub u8);

        impl $name {
            /// The format of this type.
            pub const FORMAT: Float8Format = $format;

            /// The value as f32 (exact).
            pub fn to_f32(self) -> f32 {
                Self::FORMAT.decode(self.0)
            }

            /// Rounds `v` to this type (see the module docs).
            pub fn from_f32(v: f32, saturate: bool) -> Self {
                $name(Self::FORMAT.encode(v, saturate))
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                if self.0 == other.0 {
                    return Some(Ordering::Equal);
                }
                match self.to_f32().partial_cmp(&other.to_f32()) {
                    Some(Ordering::Equal) | None => None,
                    o => o,
                }
            }
        }
    };
}

float8_type!(
    /// ONNX FLOAT8E4M3FN: 4 exponent bits (bias 7), 3 mantissa bits, no infinities, max 448.
    F8E4M3FN,
    E4M3FN
);
float8_type!(
    /// ONNX FLOAT8E4M3FNUZ: 4 exponent bits (bias 8), 3 mantissa bits, no infinities and
    /// no negative zero (`0x80` is NaN), max 240.
    F8E4M3FNUZ,
    E4M3FNUZ
);
float8_type!(
    /// ONNX FLOAT8E5M2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE infinities and NaN,
    /// max 57344.
    F8E5M2,
    E5M2
);
float8_type!(
    /// ONNX FLOAT8E5M2FNUZ: 5 exponent bits (bias 16), 2 mantissa bits, no infinities and
    /// no negative zero (`0x80` is NaN), max 57344.
    F8E5M2FNUZ,
    E5M2FNUZ
);

/// ONNX INT4: a signed 4-bit integer in `[-8, 7]`, held in one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[repr(transparent)]
pub struct I4(pub i8);

/// ONNX UINT4: an unsigned 4-bit integer in `[0, 15]`, held in one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[repr(transparent)]
pub struct U4(pub u8);

impl I4 {
    pub const MIN: i8 = -8;
    pub const MAX: i8 = 7;

    /// `v` rounded (ties to even) and clamped to `[-8, 7]`; NaN gives 0.
    pub fn from_f32(v: f32) -> I4 {
        I4(round_clamp(v, Self::MIN as f32, Self::MAX as f32) as i8)
    }

    /// The value of the low nibble of `b`, sign-extended.
    pub fn from_nibble(b: u8) -> I4 {
        I4(((b << 4) as i8) >> 4)
    }
}

impl U4 {
    pub const MIN: u8 = 0;
    pub const MAX: u8 = 15;

    /// `v` rounded (ties to even) and clamped to `[0, 15]`; NaN gives 0.
    pub fn from_f32(v: f32) -> U4 {
        U4(round_clamp(v, Self::MIN as f32, Self::MAX as f32) as u8)
    }

    /// The value of the low nibble of `b`.
    pub fn from_nibble(b: u8) -> U4 {
        U4(b & 0x0f)
    }
}

fn round_clamp(v: f32, lo: f32, hi: f32) -> f32 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(lo, hi).round_ties_even()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORMATS: [Float8Format; 4] = [E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ];

    #[test]
    fn max_values() {
        assert_eq!(E4M3FN.max(), 448.0);
        assert_eq!(E4M3FNUZ.max(), 240.0);
        assert_eq!(E5M2.max(), 57344.0);
        assert_eq!(E5M2FNUZ.max(), 57344.0);
    }

    /// Every finite pattern decodes to a value that encodes back to the same pattern (the
    /// canonical zero for the FNUZ formats), and the decoded values are strictly increasing
    /// over the positive patterns.
    #[test]
    fn every_pattern_round_trips() {
        for f in FORMATS {
            let mut prev = -1.0f32;
            for bits in 0u8..=0x7f {
                let v = f.decode(bits);
                if v.is_nan() || v.is_infinite() {
                    continue;
                }
                assert!(v > prev, "{f:?} {bits:#x}: {v} after {prev}");
                prev = v;
                assert_eq!(f.encode(v, false), bits, "{f:?} {v}");
                assert_eq!(f.encode(v, true), bits, "{f:?} {v}");
                let neg = f.encode(-v, true);
                if v == 0.0 && f.kind == Float8Kind::Fnuz {
                    assert_eq!(neg, 0);
                } else {
                    assert_eq!(neg, bits | 0x80);
                    assert_eq!(f.decode(neg), -v);
                }
            }
            assert_eq!(prev as f64, f.max());
        }
    }

    /// Midpoints between neighbours round to the even pattern; values just off a midpoint
    /// round to the nearer neighbour.
    #[test]
    fn rounds_to_nearest_even() {
        for f in FORMATS {
            let finite: Vec<(u8, f32)> = (0u8..=0x7f)
                .map(|b| (b, f.decode(b)))
                .filter(|(_, v)| v.is_finite())
                .collect();
            for w in finite.windows(2) {
                let ((b0, v0), (b1, v1)) = (w[0], w[1]);
                let mid = ((v0 as f64 + v1 as f64) / 2.0) as f32;
                let even = if b0 % 2 == 0 { b0 } else { b1 };
                assert_eq!(f.encode(mid, true), even, "{f:?} mid {mid}");
                let below = mid - (v1 - v0) / 8.0;
                let above = mid + (v1 - v0) / 8.0;
                assert_eq!(f.encode(below, true), b0);
                assert_eq!(f.encode(above, true), b1);
            }
        }
    }

    #[test]
    fn overflow_and_specials() {
        // E4M3FN: 448 (mantissa 110) is max; 464 is the midpoint to the next step, 480
        // (mantissa 111, odd), so it rounds to even 448 and anything above overflows.
        assert_eq!(E4M3FN.encode(460.0, false), 0x7e);
        assert_eq!(E4M3FN.encode(464.0, false), 0x7e);
        assert_eq!(E4M3FN.encode(465.0, false), 0x7f);
        assert_eq!(E4M3FN.encode(465.0, true), 0x7e);
        assert_eq!(E4M3FN.encode(-1e6, true), 0xfe);
        assert_eq!(E4M3FN.encode(-1e6, false), 0xff);
        assert_eq!(E4M3FN.encode(f32::INFINITY, true), 0x7e);
        assert_eq!(E4M3FN.encode(f32::NEG_INFINITY, false), 0xff);
        assert_eq!(E5M2.encode(1e6, false), 0x7c);
        assert_eq!(E5M2.encode(-1e6, false), 0xfc);
        assert_eq!(E5M2.encode(f32::INFINITY, true), 0x7b);
        assert_eq!(E5M2.decode(0x7c), f32::INFINITY);
        assert!(E5M2.decode(0x7d).is_nan());
        for f in [E4M3FNUZ, E5M2FNUZ] {
            assert_eq!(f.encode(1e6, false), 0x80);
            assert_eq!(f.encode(f32::NEG_INFINITY, true), 0xff);
            assert_eq!(f.encode(-0.0, true), 0x00);
            assert_eq!(f.encode(-1e-30, false), 0x00);
            assert!(f.decode(0x80).is_nan());
            assert_eq!(f.encode(f32::NAN, true), 0x80);
        }
        assert_eq!(E4M3FN.encode(-0.0, true), 0x80);
        // Smallest subnormals: 2^-9 (E4M3FN), 2^-16 (E5M2).
        assert_eq!(E4M3FN.encode(2f32.powi(-9), true), 0x01);
        assert_eq!(E4M3FN.encode(2f32.powi(-10), true), 0x00);
        assert_eq!(E4M3FN.encode(1.5 * 2f32.powi(-10), true), 0x01);
        assert_eq!(E5M2.encode(2f32.powi(-16), true), 0x01);
    }

    #[test]
    fn int4_rounding_and_nibbles() {
        let v = [-9.0f32, -8.5, -7.5, -0.5, 0.5, 1.5, 2.5, 6.5, 7.5, f32::NAN];
        let i: Vec<i8> = v.iter().map(|&x| I4::from_f32(x).0).collect();
        assert_eq!(i, [-8, -8, -8, 0, 0, 2, 2, 6, 7, 0]);
        let u: Vec<u8> = [-1.0f32, 0.5, 14.5, 15.5, 100.0]
            .iter()
            .map(|&x| U4::from_f32(x).0)
            .collect();
        assert_eq!(u, [0, 0, 14, 15, 15]);
        assert_eq!(I4::from_nibble(0xf8), I4(-8));
        assert_eq!(I4::from_nibble(0x07), I4(7));
        assert_eq!(U4::from_nibble(0xab), U4(11));
        assert!(F8E4M3FN(0x00).partial_cmp(&F8E4M3FN(0x80)).is_none());
        assert!(F8E4M3FN(0x38) > F8E4M3FN(0x30));
    }
}
