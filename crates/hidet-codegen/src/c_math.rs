//! Vectorizable f32 transcendental functions of the C dialect: `exp`, `log`,
//! `tanh`, `sigmoid` and `erf` as branch-free inline C helpers.
//!
//! libm's `expf`/`logf`/`tanhf`/`erff` are opaque calls, so a `#pragma omp
//! simd` loop around them stays scalar. These helpers use only arithmetic,
//! comparisons feeding bitwise blends (never `?:`, see `select_source`),
//! and float↔integer bit casts through `__builtin_memcpy`, and are
//! `always_inline`, so GCC and Clang inline them and vectorize the loop (and
//! the per-lane loops of vector-typed math) on any SIMD ISA, masked (AVX-512)
//! or not (SSE, AVX2, NEON).
//!
//! # Contract (f32, round-to-nearest, no `-ffast-math`)
//! | helper | method | error bound asserted by `tests/integration/c_math.rs` (measured max, GCC 12, AVX-512) |
//! |---|---|---|
//! | `hidet_exp_f32` | Cody–Waite `x = n·ln2 + r`, degree-6 minimax `e^r`, `2^n` applied in two exact steps | ≤ 2 ulp (0.97) |
//! | `hidet_log_f32` | `x = 2^k·m`, `m ∈ [√½, √2)`, `log1p(m-1) = 2·atanh(s)` with a minimax odd series in `s = f/(2+f)` | ≤ 2 ulp (0.85) |
//! | `hidet_tanh_f32` | odd minimax polynomial for `|x| < 0.5625`, else `1 - 2/(e^{2|x|}+1)` | ≤ 3 ulp (1.37) |
//! | `hidet_sigmoid_f32` | `e = e^{-|x|}`, then `1/(1+e)` or `e/(1+e)` | ≤ 3 ulp (2.13) |
//! | `hidet_erf_f32` | `x + x·R(x²)` for `|x| < 1`, `1 - e^{G(|x|-1)}` (G ≈ log erfc) below 3.9375, else ±1 | ≤ 2e-7 absolute (5.7e-8) |
//!
//! Special values: `exp` gives `+inf` above ≈88.7228 and `0` below
//! ≈−103.972 (subnormal results are rounded once); `log(±0) = -inf`,
//! `log(x<0) = NaN`, `log(+inf) = +inf`, subnormal inputs are exact inputs;
//! `tanh` and `erf` are odd (`-0` maps to `-0`) and saturate to exactly ±1;
//! `sigmoid(+inf) = 1`, `sigmoid(-inf) = 0`; NaN maps to NaN everywhere. No
//! helper reads or writes `errno`. The polynomial coefficients come from
//! `scripts/remez.py` (minimax in float64, then rounded to f32 one by one
//! with refits).

use crate::dialect::Uses;
use hidet_ir::intrinsic::MathFunc;

/// Qualifiers of every helper: inlining is what makes a caller's loop
/// vectorizable, so it is forced.
const QUALIFIER: &str = "static inline __attribute__((always_inline))";

const SELECT: &str = "hidet_select_f32";
const EXP: &str = "hidet_exp_f32";
const LOG: &str = "hidet_log_f32";
const TANH: &str = "hidet_tanh_f32";
const SIGMOID: &str = "hidet_sigmoid_f32";
const ERF: &str = "hidet_erf_f32";

/// Requires the inline f32 helper implementing `func` (and the helpers it
/// calls, defined first) and returns its name, or `None` when `func` has no
/// helper and stays on libm. The helper takes and returns `float`.
pub fn require_f32(func: MathFunc, uses: &mut Uses) -> Option<&'static str> {
    if !matches!(
        func,
        MathFunc::Exp | MathFunc::Log | MathFunc::Tanh | MathFunc::Sigmoid | MathFunc::Erf
    ) {
        return None;
    }
    uses.require_helper(SELECT, select_source);
    match func {
        MathFunc::Exp => {
            uses.require_helper(EXP, exp_source);
            Some(EXP)
        }
        MathFunc::Log => {
            uses.require_helper(LOG, log_source);
            Some(LOG)
        }
        MathFunc::Tanh => {
            uses.require_helper(EXP, exp_source);
            uses.require_helper(TANH, tanh_source);
            Some(TANH)
        }
        MathFunc::Sigmoid => {
            uses.require_helper(EXP, exp_source);
            uses.require_helper(SIGMOID, sigmoid_source);
            Some(SIGMOID)
        }
        MathFunc::Erf => {
            uses.require_helper(EXP, exp_source);
            uses.require_helper(ERF, erf_source);
            Some(ERF)
        }
        _ => None,
    }
}

/// Horner's scheme over `x` for coefficients of increasing power, as C text.
fn horner(x: &str, coeffs: &[&str]) -> String {
    let mut iter = coeffs.iter().rev();
    let mut text = iter.next().map(|c| c.to_string()).unwrap_or_default();
    for c in iter {
        text = format!("{c} + {x} * ({text})");
    }
    text
}

/// `c ? a : b` as a bitwise blend. A `?:` lets GCC thread or sink the
/// computation of one operand into a branch, and a branch holding
/// (possibly trapping) float arithmetic blocks if-conversion, so the caller's
/// loop stays scalar unless the target has masked vector instructions.
fn select_source() -> String {
    format!(
        "/* c ? a : b without control flow (keeps callers' loops vectorizable). */
{QUALIFIER} float {SELECT}(bool c, float a, float b) {{
    uint32_t m = (uint32_t)0 - (uint32_t)c, ua, ub;
    __builtin_memcpy(&ua, &a, sizeof ua);
    __builtin_memcpy(&ub, &b, sizeof ub);
    uint32_t r = (ua & m) | (ub & ~m);
    float f;
    __builtin_memcpy(&f, &r, sizeof f);
    return f;
}}"
    )
}

fn exp_source() -> String {
    // e^r ≈ 1 + r + r²·Q(r) on |r| ≤ ln2/2: relative error 3.2e-9.
    let q = horner(
        "r",
        &[
            "0x1.fffffcp-2f",
            "0x1.55548cp-3f",
            "0x1.555858p-5f",
            "0x1.123dep-7f",
            "0x1.6ac74ep-10f",
        ],
    );
    format!(
        "/* e^x, branch-free; see c_math.rs for the error bound and special values. */
{QUALIFIER} float {EXP}(float x) {{
    /* Clamp (NaN passes through): beyond these every result is 0 or +inf. */
    float xc = {SELECT}(x < -104.0f, -104.0f, x);
    xc = {SELECT}(xc > 89.0f, 89.0f, xc);
    /* n = round(x / ln2) by the 1.5*2^23 shifter; its low bits hold n. */
    float t = xc * 0x1.715476p+0f + 0x1.8p23f;
    float n = t - 0x1.8p23f;
    uint32_t tb;
    __builtin_memcpy(&tb, &t, sizeof tb);
    int32_t ni = (int32_t)(tb - 0x4b400000u);
    /* r = x - n*ln2 in two steps; n*ln2_hi is exact (16-bit ln2_hi, |n| <= 150). */
    float r = xc - n * 0x1.62e4p-1f;
    r = r - n * 0x1.7f7d1cp-20f;
    float q = {q};
    float p = 1.0f + (r + (r * r) * q);
    /* 2^n as two normal factors: p*2^n1 is exact, the second product rounds once. */
    int32_t n1 = ni >> 1;
    int32_t n2 = ni - n1;
    uint32_t b1 = (uint32_t)(n1 + 127) << 23;
    uint32_t b2 = (uint32_t)(n2 + 127) << 23;
    float s1, s2;
    __builtin_memcpy(&s1, &b1, sizeof s1);
    __builtin_memcpy(&s2, &b2, sizeof s2);
    return (p * s1) * s2;
}}"
    )
}

fn log_source() -> String {
    // T(z) ≈ 2·atanh(s)/s - 2, z = s², s ∈ [0, 0.1716]: error 1.6e-9.
    let t = horner("z", &["0x1.55557ap-1f", "0x1.995ed4p-2f", "0x1.31e0dap-2f"]);
    format!(
        "/* log(x), branch-free; see c_math.rs for the error bound and special values. */
{QUALIFIER} float {LOG}(float x) {{
    /* Subnormal inputs are scaled by 2^23 first. */
    bool sub = x < 0x1p-126f;
    float xs = {SELECT}(sub, x * 0x1p23f, x);
    int32_t kadj = -23 & -(int32_t)sub;
    /* x = 2^k * m with m in [sqrt(1/2), sqrt(2)): offset the bits by those of sqrt(1/2). */
    uint32_t u;
    __builtin_memcpy(&u, &xs, sizeof u);
    uint32_t d = u - 0x3f3504f3u;
    int32_t k = ((int32_t)d >> 23) + kadj;
    uint32_t mb = (d & 0x007fffffu) + 0x3f3504f3u;
    float m;
    __builtin_memcpy(&m, &mb, sizeof m);
    /* log1p(f) = 2 atanh(s) = f - s*(f - T(s^2)), s = f / (2 + f); f is exact. */
    float f = m - 1.0f;
    float s = f / (2.0f + f);
    float z = s * s;
    float tz = z * ({t});
    float kf = (float)k;
    float r = kf * 0x1.62e4p-1f + (f - (s * (f - tz) - kf * 0x1.7f7d1cp-20f));
    r = {SELECT}(x == __builtin_inff(), x, r);
    r = {SELECT}(x == 0.0f, -__builtin_inff(), r);
    r = {SELECT}(x < 0.0f, __builtin_nanf(\"\"), r);
    return {SELECT}(x != x, x, r);
}}"
    )
}

fn tanh_source() -> String {
    // tanh(a) ≈ a + a·z·Q(z), z = a², a < 0.5625: relative error 1.4e-9.
    let q = horner(
        "z",
        &[
            "-0x1.555548p-2f",
            "0x1.110c5ep-3f",
            "-0x1.b905c4p-5f",
            "0x1.5812e2p-6f",
            "-0x1.9463p-8f",
        ],
    );
    format!(
        "/* tanh(x), branch-free and odd; see c_math.rs for the error bound. */
{QUALIFIER} float {TANH}(float x) {{
    float a = __builtin_fabsf(x);
    float z = a * a;
    float small = a + (a * z) * ({q});
    /* 1 - 2/(e^2a + 1): exactly 1 once e^2a is large, 1 - 0 when it is +inf. */
    float big = 1.0f - 2.0f / ({EXP}(2.0f * a) + 1.0f);
    float r = {SELECT}(a < 0x1.2p-1f, small, big);
    return __builtin_copysignf(r, x);
}}"
    )
}

fn sigmoid_source() -> String {
    format!(
        "/* 1 / (1 + e^-x) without overflow; see c_math.rs for the error bound. */
{QUALIFIER} float {SIGMOID}(float x) {{
    float e = {EXP}(-__builtin_fabsf(x));
    float num = {SELECT}(x >= 0.0f, 1.0f, e);
    return num / (1.0f + e);
}}"
    )
}

fn erf_source() -> String {
    // erf(a) ≈ a + a·R(z), z = a², a < 1: relative error 1.4e-9.
    let r = horner(
        "z",
        &[
            "0x1.06eba8p-3f",
            "-0x1.81273ep-2f",
            "0x1.ce2ce6p-4f",
            "-0x1.b7f71ap-6f",
            "0x1.53f224p-8f",
            "-0x1.a3515ep-11f",
            "0x1.4771fep-14f",
        ],
    );
    // log(erfc(a)) ≈ G(t), t = a - 1, a ∈ [1, 3.9375]: absolute error of erf
    // 8.0e-9.
    let g = horner(
        "t",
        &[
            "-0x1.d97fcp+0f",
            "-0x1.51c982p+1f",
            "-0x1.afb754p-1f",
            "-0x1.5070dcp-5f",
            "0x1.2115cap-7f",
            "-0x1.2052dep-11f",
            "-0x1.14d2e2p-11f",
            "0x1.37e19ap-13f",
        ],
    );
    format!(
        "/* erf(x), branch-free and odd; see c_math.rs for the error bound. */
{QUALIFIER} float {ERF}(float x) {{
    float a = __builtin_fabsf(x);
    float z = a * a;
    float small = a + a * ({r});
    float t = a - 1.0f;
    float big = 1.0f - {EXP}({g});
    float r = {SELECT}(a < 1.0f, small, big);
    /* erfc(3.9375) < 2^-25: the f32 result is 1 from here on. */
    r = {SELECT}(a >= 0x1.f8p+1f, 1.0f, r);
    return __builtin_copysignf(r, x);
}}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn horner_nests_from_the_highest_power() {
        assert_eq!(horner("x", &["a", "b", "c"]), "a + x * (b + x * (c))");
        assert_eq!(horner("x", &["a"]), "a");
    }

    #[test]
    fn dependencies_come_first_and_once() {
        let mut uses = Uses::default();
        assert_eq!(require_f32(MathFunc::Erf, &mut uses), Some(ERF));
        assert_eq!(require_f32(MathFunc::Tanh, &mut uses), Some(TANH));
        assert_eq!(require_f32(MathFunc::Exp, &mut uses), Some(EXP));
        let names: Vec<&str> = uses.helpers().map(|(n, _)| n).collect();
        assert_eq!(names, [SELECT, EXP, ERF, TANH]);
        assert_eq!(require_f32(MathFunc::Sin, &mut uses), None);
    }
}
