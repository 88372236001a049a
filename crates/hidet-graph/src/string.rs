//! The string element type and its numeric conversions.
//!
//! A [`Str`] is a `Copy` handle to an interned UTF-8 string, so string tensors share every
//! generic kernel that moves elements (reshape, gather, concat, where, ...). Interning keeps
//! one copy of each distinct string for the life of the process: string tensors in inference
//! graphs are small (labels, vocabularies, tokens), but a process that feeds unboundedly many
//! distinct strings grows accordingly.
//!
//! Conversions follow ONNX Cast: a string parses as a decimal or scientific number, or as
//! `INF`, `+INF`, `-INF`, `NaN` (any case); numbers format as numpy's `str` does (shortest
//! round-trip digits, positional for `1e-4 <= |x| < 1e16`, scientific with a two-digit
//! exponent otherwise, `nan`, `inf`, `-inf`; `True`/`False` for booleans).

use std::collections::HashSet;
use std::fmt;
use std::sync::{Mutex, OnceLock};

/// An interned, immutable UTF-8 string (see the module docs). Equality and ordering compare
/// the text (byte-wise lexicographic).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Str(&'static str);

fn interner() -> &'static Mutex<HashSet<&'static str>> {
    static SET: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

impl Str {
    /// The handle of `s` (interning it on first use).
    pub fn new(s: &str) -> Str {
        if s.is_empty() {
            return Str("");
        }
        // A poisoned lock still holds a valid set: entries are only ever inserted whole.
        let mut set = interner().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&p) = set.get(s) {
            return Str(p);
        }
        let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
        set.insert(leaked);
        Str(leaked)
    }

    /// The text.
    pub fn as_str(self) -> &'static str {
        self.0
    }

    /// The number the text spells (see the module docs); NaN if it spells none.
    pub fn parse_f64(self) -> f64 {
        let t = self.0.trim();
        t.parse::<f64>().unwrap_or(f64::NAN)
    }

    /// The integer the text spells, or its number truncated toward zero (0 for NaN).
    pub fn parse_i128(self) -> i128 {
        let t = self.0.trim();
        t.parse::<i128>().unwrap_or_else(|_| {
            let f = t.parse::<f64>().unwrap_or(f64::NAN);
            if f.is_nan() {
                0
            } else {
                f as i128
            }
        })
    }
}

impl fmt::Debug for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl fmt::Display for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// numpy-style `str` of a float whose shortest round-trip digits are given by `positional`
/// (Rust's `Display`) and `scientific` (Rust's `LowerExp`) of the same value.
fn numpy_float(v: f64, positional: String, scientific: String) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = v.abs();
    if a == 0.0 || (1e-4..1e16).contains(&a) {
        if positional.contains('.') {
            positional
        } else {
            positional + ".0"
        }
    } else {
        // Rust writes `1.5e-5`; numpy writes `1.5e-05` (sign and at least two digits).
        match scientific.split_once('e') {
            Some((m, e)) => {
                let (sign, digits) = match e.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', e),
                };
                format!("{m}e{sign}{digits:0>2}")
            }
            None => scientific,
        }
    }
}

/// numpy's `str` of a value of a narrow float type: the fewest significant digits that
/// `round_trips` accepts (it tells whether a decimal converts back to the same value).
pub fn format_shortest(v: f64, round_trips: impl Fn(f64) -> bool) -> String {
    if !v.is_finite() {
        return format_f64(v);
    }
    for p in 0..17 {
        let d: f64 = format!("{v:.p$e}").parse().unwrap_or(v);
        if round_trips(d) {
            return format_f64(d);
        }
    }
    format_f64(v)
}

/// numpy's `str` of an f32 value.
pub fn format_f32(v: f32) -> String {
    numpy_float(v as f64, format!("{v}"), format!("{v:e}"))
}

/// numpy's `str` of an f64 value.
pub fn format_f64(v: f64) -> String {
    numpy_float(v, format!("{v}"), format!("{v:e}"))
}

impl PartialEq<str> for Str {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_and_comparison() {
        let a = Str::new("hello");
        let b = Str::new(&(String::from("hel") + "lo"));
        assert_eq!(a, b);
        assert!(std::ptr::eq(a.as_str(), b.as_str()));
        assert!(Str::new("abc") < Str::new("abd"));
        assert_eq!(Str::default(), Str::new(""));
    }

    #[test]
    fn numbers_parse_and_format_like_numpy() {
        for (s, v) in [
            ("0.47892547", 0.47892547f64),
            ("1e-5", 1e-5),
            ("  -3.25 ", -3.25),
            ("INF", f64::INFINITY),
            ("+INF", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
        ] {
            assert_eq!(Str::new(s).parse_f64(), v, "{s}");
        }
        assert!(Str::new("NaN").parse_f64().is_nan());
        assert!(Str::new("hello").parse_f64().is_nan());
        assert_eq!(Str::new("42").parse_i128(), 42);
        assert_eq!(Str::new("-7.9").parse_i128(), -7);
        assert_eq!(format_f32(0.9767611), "0.9767611");
        assert_eq!(format_f32(0.039187793), "0.039187793");
        assert_eq!(format_f32(1.0), "1.0");
        assert_eq!(format_f32(0.0), "0.0");
        assert_eq!(format_f32(1.5e-5), "1.5e-05");
        assert_eq!(format_f64(2e20), "2e+20");
        assert_eq!(format_f32(f32::NAN), "nan");
        assert_eq!(format_f64(f64::NEG_INFINITY), "-inf");
        let h = half::f16::from_f64(0.1);
        assert_eq!(
            format_shortest(h.to_f64(), |d| half::f16::from_f64(d) == h),
            "0.1"
        );
    }
}
