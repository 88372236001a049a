//! Exact spellings of constants in C-family source.

use crate::error::Unsupported;
use hidet_ir::dtype::{DataType, ScalarType};

/// An integer literal of `dtype` with value `v`, parenthesized when negative.
/// Fails when `v` does not fit `dtype` or `dtype` is not an integer type.
pub fn int_literal(v: i64, dtype: DataType) -> Result<String, Unsupported> {
    let out_of_range = || Unsupported::new(format!("constant {v} does not fit {dtype}"));
    if dtype.is_vector() {
        return Err(Unsupported::new(format!("vector constant of {dtype}")));
    }
    let text = match dtype.scalar {
        ScalarType::Bool => (if v != 0 { "true" } else { "false" }).to_string(),
        ScalarType::I32 => {
            let x = i32::try_from(v).map_err(|_| out_of_range())?;
            if x == i32::MIN {
                "(-2147483647 - 1)".to_string()
            } else if x < 0 {
                format!("({x})")
            } else {
                x.to_string()
            }
        }
        ScalarType::I64 => {
            if v == i64::MIN {
                "(-9223372036854775807LL - 1LL)".to_string()
            } else if v < 0 {
                format!("({v}LL)")
            } else {
                format!("{v}LL")
            }
        }
        ScalarType::U32 => {
            let x = u32::try_from(v).map_err(|_| out_of_range())?;
            format!("{x}u")
        }
        ScalarType::U64 => {
            let x = u64::try_from(v).map_err(|_| out_of_range())?;
            format!("{x}ull")
        }
        ScalarType::I8 => format!(
            "((int8_t)({}))",
            i8::try_from(v).map_err(|_| out_of_range())?
        ),
        ScalarType::I16 => format!(
            "((int16_t)({}))",
            i16::try_from(v).map_err(|_| out_of_range())?
        ),
        ScalarType::U8 => format!(
            "((uint8_t){}u)",
            u8::try_from(v).map_err(|_| out_of_range())?
        ),
        ScalarType::U16 => format!(
            "((uint16_t){}u)",
            u16::try_from(v).map_err(|_| out_of_range())?
        ),
        s => return Err(Unsupported::new(format!("integer constant of type {s}"))),
    };
    Ok(text)
}

/// A literal of `f32` (`1.5e0f`) or `f64` (`1.5e0`) that parses back to
/// exactly `v` rounded to that type, parenthesized when negative. `None` for
/// non-finite values and other types (the dialect spells those).
pub fn finite_float_literal(v: f64, dtype: DataType) -> Option<String> {
    let text = match (dtype.scalar, dtype.lanes) {
        (ScalarType::F32, 1) => {
            let x = v as f32;
            if !x.is_finite() {
                return None;
            }
            format!("{x:e}f")
        }
        (ScalarType::F64, 1) => {
            if !v.is_finite() {
                return None;
            }
            format!("{v:e}")
        }
        _ => return None,
    };
    Some(if text.starts_with('-') {
        format!("({text})")
    } else {
        text
    })
}

/// `s` as a C string literal, with quotes; every byte that is not printable
/// ASCII (or is `"`, `\`, `?`) is written as a three-digit octal escape.
pub fn c_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' && b != b'?' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\{b:03o}"));
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_literals_round_trip() {
        for &x in &[0.1f32, -3.4028235e38, 1.0e-45, 7.0, -0.0] {
            let lit = finite_float_literal(x as f64, DataType::F32).expect("finite f32");
            let digits = lit.trim_start_matches('(').trim_end_matches(')');
            let digits = digits.trim_end_matches('f');
            let parsed: f32 = digits.parse().expect("Rust parses C-style exponent floats");
            assert_eq!(parsed.to_bits(), x.to_bits(), "{lit}");
        }
        let y = 0.1f64 + 1e-17;
        let lit = finite_float_literal(y, DataType::F64).expect("finite f64");
        assert_eq!(lit.parse::<f64>().ok(), Some(y));
        assert_eq!(finite_float_literal(f64::INFINITY, DataType::F32), None);
    }

    #[test]
    fn int_literals_are_exact_and_range_checked() {
        assert_eq!(int_literal(-5, DataType::I32).ok(), Some("(-5)".into()));
        assert_eq!(
            int_literal(i32::MIN as i64, DataType::I32).ok(),
            Some("(-2147483647 - 1)".into())
        );
        assert_eq!(
            int_literal(1 << 40, DataType::I64).ok(),
            Some("1099511627776LL".into())
        );
        assert!(int_literal(1 << 40, DataType::I32).is_err());
        assert!(int_literal(-1, DataType::U32).is_err());
    }

    #[test]
    fn strings_escape_quotes_and_non_ascii() {
        assert_eq!(c_string("a\"b\\c\n"), "\"a\\042b\\134c\\012\"");
        assert_eq!(c_string("é"), "\"\\303\\251\"");
    }
}
