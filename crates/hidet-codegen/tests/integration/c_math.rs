//! The inline f32 math helpers of the C dialect (`c_math.rs`): measured
//! accuracy against float64 references (Rust's `f64` functions; `erf` from the
//! `libm` crate) on ~1e6 inputs per function, through scalar `#pragma omp
//! simd` loops and vector-typed (`f32x8`) math, compiled with the CPU
//! backend's flags; and the assembly check that the loops are vectorized and
//! call no libm function.

use crate::common;

use common::{assembly, compile_with, ptr, scalar, Rng, BACKEND_FLAGS};
use hidet_codegen::{emit_module, CDialect};
use hidet_ir::intrinsic::Intrinsic;
use hidet_ir::prelude::*;

#[derive(Clone, Copy, Debug)]
struct Case {
    func: MathFunc,
    name: &'static str,
    reference: fn(f64) -> f64,
    /// The bound on the error measure of [`Case::absolute`].
    bound: f64,
    /// Error as an absolute difference instead of in f32 ulps.
    absolute: bool,
}

fn sigmoid64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

const CASES: [Case; 5] = [
    Case {
        func: MathFunc::Exp,
        name: "exp",
        reference: f64::exp,
        bound: 2.0,
        absolute: false,
    },
    Case {
        func: MathFunc::Log,
        name: "log",
        reference: f64::ln,
        bound: 2.0,
        absolute: false,
    },
    Case {
        func: MathFunc::Tanh,
        name: "tanh",
        reference: f64::tanh,
        bound: 3.0,
        absolute: false,
    },
    Case {
        func: MathFunc::Sigmoid,
        name: "sigmoid",
        reference: sigmoid64,
        bound: 3.0,
        absolute: false,
    },
    Case {
        func: MathFunc::Erf,
        name: "erf",
        reference: libm::erf,
        bound: 2e-7,
        absolute: true,
    },
];

/// Two kernels for `func` over `n` floats: `NAME_s`, a `#pragma omp simd`
/// loop of scalar calls, and `NAME_v`, `f32x8` vector math with a scalar tail.
fn kernels(func: MathFunc, name: &str) -> Vec<Function> {
    let mut out = Vec::new();
    let mut fb = FunctionBuilder::cpu_kernel(format!("{name}_s"));
    let n = fb.param("n", DataType::I32);
    let x = fb.tensor_param("x", DataType::F32, [n.expr()]);
    let y = fb.tensor_param("y", DataType::F32, [n.expr()]);
    fb.for_range_with("i", &n, LoopKind::Vectorize, |fb, i| {
        fb.store(&y, [i.clone()], Expr::math(func, vec![x.at([i.clone()])]));
    });
    out.push(fb.finish());

    let mut fb = FunctionBuilder::cpu_kernel(format!("{name}_v"));
    let n = fb.param("n", DataType::I32);
    let x = fb.tensor_param("x", DataType::F32, [n.expr()]);
    let y = fb.tensor_param("y", DataType::F32, [n.expr()]);
    let v8 = DataType::F32X8;
    fb.for_range("v", &n / 8, |fb, v| {
        let at = |t: &Var| t.at([v.clone() * 8]).address();
        let xv = Expr::call(Intrinsic::VectorLoad { dtype: v8 }, vec![at(&x)]);
        fb.call(
            Intrinsic::VectorStore,
            vec![at(&y), Expr::math(func, vec![xv])],
        );
    });
    fb.for_range("t", &n % 8, |fb, t| {
        let i = (&n / 8) * 8 + t;
        fb.store(&y, [i.clone()], Expr::math(func, vec![x.at([i])]));
    });
    out.push(fb.finish());
    out
}

/// One module with both kernels of every case.
fn module(cases: &[Case]) -> String {
    let mut m = IRModule::new("c_math", Target::Cpu);
    for c in cases {
        for f in kernels(c.func, c.name) {
            m = m.with(f);
        }
    }
    emit_module(&m, &CDialect).expect("module emits")
}

/// A uniform f32 in `[lo, hi)`.
fn uniform(rng: &mut Rng, lo: f64, hi: f64) -> f32 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (lo + (hi - lo) * u) as f32
}

/// The inputs of `case`: special values, ±400 ulps around each boundary,
/// subnormals, every-exponent random bit patterns, and a dense uniform sweep
/// of the range where the function varies.
fn inputs(case: &Case, rng: &mut Rng) -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(1),
        f32::MAX,
        f32::MIN,
        1.0,
        -1.0,
    ];
    let (lo, hi, edges): (f64, f64, &[f64]) = match case.func {
        MathFunc::Exp => (
            -110.0,
            95.0,
            &[88.722839, -87.336544, -103.972084, 0.346574, -0.346574],
        ),
        MathFunc::Log => (
            0.0,
            8.0,
            &[
                1.0,
                std::f64::consts::FRAC_1_SQRT_2,
                std::f64::consts::SQRT_2,
                2.0,
                0.5,
            ],
        ),
        MathFunc::Tanh => (-12.0, 12.0, &[0.5625, -0.5625, 9.01, 1e-3]),
        MathFunc::Sigmoid => (-110.0, 110.0, &[-87.336544, -103.972084, 16.6]),
        _ => (-5.0, 5.0, &[1.0, -1.0, 3.9375, 3.92, 1e-3]),
    };
    for &e in edges {
        let b = (e as f32).to_bits() as i64;
        for d in -400..=400 {
            v.push(f32::from_bits((b + d) as u32));
        }
    }
    for _ in 0..20_000 {
        let bits = (rng.next_u64() as u32) & 0x807f_ffff;
        v.push(f32::from_bits(bits));
    }
    for _ in 0..200_000 {
        let mut bits = rng.next_u64() as u32;
        if case.func == MathFunc::Log {
            bits &= 0x7fff_ffff;
        }
        v.push(f32::from_bits(bits));
    }
    if case.func == MathFunc::Log {
        // Around 1, where log(x) is tiny and must stay relatively accurate.
        for _ in 0..100_000 {
            v.push(uniform(rng, 0.9, 1.1));
        }
    }
    while v.len() < 1_000_003 {
        v.push(uniform(rng, lo, hi));
    }
    v
}

/// The f32 unit in the last place at the magnitude of `w` (2^-149 for
/// subnormals, 2^104 beyond `f32::MAX`).
fn ulp_f32(w: f64) -> f64 {
    let a = w.abs();
    if a < f32::MIN_POSITIVE as f64 {
        return 2f64.powi(-149);
    }
    let e = a.log2().floor().min(127.0) as i32;
    2f64.powi(e - 23)
}

/// Error of `got` against `want`: in f32 ulps of `want`, or absolute. NaN
/// must match NaN, zero results must have the reference's sign, and an
/// infinite result counts as ±2^128 (one ulp past `f32::MAX`) unless the
/// reference itself rounds to that infinity.
fn error(got: f32, want: f64, absolute: bool) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let rounded = want as f32;
    if rounded.is_infinite() && got == rounded {
        return 0.0;
    }
    if want == 0.0 && got == 0.0 && got.is_sign_negative() != want.is_sign_negative() {
        return f64::INFINITY;
    }
    let g = if got.is_infinite() {
        2f64.powi(128).copysign(got as f64)
    } else {
        got as f64
    };
    let w = if want.is_infinite() {
        2f64.powi(128).copysign(want)
    } else {
        want
    };
    if absolute {
        (g - w).abs()
    } else {
        (g - w).abs() / ulp_f32(w)
    }
}

/// The largest error and the input where it occurs.
fn max_error(case: &Case, xs: &[f32], ys: &[f32]) -> (f64, f32) {
    xs.iter()
        .zip(ys)
        .map(|(&x, &y)| (error(y, (case.reference)(x as f64), case.absolute), x))
        .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
}

#[test]
fn helpers_meet_their_error_bounds_in_scalar_and_vector_loops() {
    let lib = compile_with(&module(&CASES), BACKEND_FLAGS);
    let mut rng = Rng::new(17);
    let mut report = String::new();
    for case in &CASES {
        let mut xs = inputs(case, &mut rng);
        let mut n = xs.len() as i32;
        for suffix in ["s", "v"] {
            let mut ys = vec![f32::from_bits(0x7fa0_0001); xs.len()];
            lib.call(
                &format!("{}_{suffix}", case.name),
                &mut [scalar(&mut n), ptr(&mut xs), ptr(&mut ys)],
            );
            let (err, at) = max_error(case, &xs, &ys);
            report.push_str(&format!(
                "{}_{suffix}: max error {err:.3e}{} at x = {at:e} ({} points)\n",
                case.name,
                if case.absolute { "" } else { " ulp" },
                xs.len()
            ));
            assert!(
                err <= case.bound,
                "{}_{suffix}: error {err:e} at x = {at:e} ({:#010x}) exceeds {}; f(x) = {}",
                case.name,
                at.to_bits(),
                case.bound,
                (case.reference)(at as f64)
            );
        }
    }
    eprint!("{report}");
}

#[test]
fn special_values_are_exact() {
    let lib = compile_with(&module(&CASES), BACKEND_FLAGS);
    let inf = f32::INFINITY;
    let tiny = f32::from_bits(1);
    // (function, input, expected bits); NaN expectations only check NaN-ness.
    let table: &[(&str, f32, f32)] = &[
        ("exp", 0.0, 1.0),
        ("exp", -0.0, 1.0),
        ("exp", inf, inf),
        ("exp", -inf, 0.0),
        ("exp", 89.0, inf),
        ("exp", -104.0, 0.0),
        ("exp", f32::NAN, f32::NAN),
        ("log", 1.0, 0.0),
        ("log", 0.0, -inf),
        ("log", -0.0, -inf),
        ("log", -tiny, f32::NAN),
        ("log", -inf, f32::NAN),
        ("log", inf, inf),
        ("log", f32::NAN, f32::NAN),
        ("tanh", -0.0, -0.0),
        ("tanh", 0.0, 0.0),
        ("tanh", -tiny, -tiny),
        ("tanh", 10.0, 1.0),
        ("tanh", -inf, -1.0),
        ("tanh", f32::MAX, 1.0),
        ("tanh", f32::NAN, f32::NAN),
        ("sigmoid", -0.0, 0.5),
        ("sigmoid", inf, 1.0),
        ("sigmoid", -inf, 0.0),
        ("sigmoid", 40.0, 1.0),
        ("sigmoid", f32::NAN, f32::NAN),
        ("erf", -0.0, -0.0),
        ("erf", 4.0, 1.0),
        ("erf", -inf, -1.0),
        ("erf", f32::MIN, -1.0),
        ("erf", f32::NAN, f32::NAN),
    ];
    for suffix in ["s", "v"] {
        for &(name, x, want) in table {
            // Nine copies: one full vector plus a tail element.
            let mut xs = vec![x; 9];
            let mut ys = vec![1234.5f32; 9];
            let mut n = 9i32;
            lib.call(
                &format!("{name}_{suffix}"),
                &mut [scalar(&mut n), ptr(&mut xs), ptr(&mut ys)],
            );
            for &y in &ys {
                let ok = if want.is_nan() {
                    y.is_nan()
                } else {
                    y.to_bits() == want.to_bits()
                };
                assert!(ok, "{name}_{suffix}({x:e}) = {y:e}, want {want:e}");
            }
        }
    }
}

/// The targets of call and tail-call instructions (`expf@PLT` as `expf`).
fn call_targets(asm: &str) -> Vec<String> {
    asm.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let op = words.next()?;
            let is_call =
                op.starts_with("call") || op == "bl" || op == "b" || op.starts_with("jmp");
            let target = words.next()?;
            is_call.then(|| target.split('@').next().unwrap_or(target).to_string())
        })
        .collect()
}

/// Whether `asm` has a packed single-precision AVX instruction on ymm/zmm.
fn has_packed_f32(asm: &str) -> bool {
    asm.lines().any(|l| {
        let mut words = l.split_whitespace();
        let mnemonic = words.next().unwrap_or("");
        mnemonic.starts_with('v')
            && mnemonic.ends_with("ps")
            && (l.contains("%ymm") || l.contains("%zmm"))
    })
}

#[test]
fn simd_loops_are_vectorized_without_libm_calls() {
    // The host ISA, and on x86-64 also AVX2 without AVX-512: without masked
    // instructions GCC vectorizes only loops it can if-convert.
    let mut isas: Vec<(&str, &[&str], bool)> = vec![(
        "native",
        &[],
        cfg!(target_arch = "x86_64") && std::arch::is_x86_feature_detected!("avx2"),
    )];
    if cfg!(target_arch = "x86_64") {
        isas.push(("avx2", &["-march=x86-64-v3"], true));
    }
    let libm = ["expf", "logf", "tanhf", "erff", "exp", "log", "tanh", "erf"];
    let dir = tempfile::tempdir().expect("temp dir");
    for case in &CASES {
        // The omp-simd loop and the f32x8 kernel in separate modules, so each
        // must vectorize on its own.
        for (kind, f) in ["s", "v"].into_iter().zip(kernels(case.func, case.name)) {
            let source = emit_module(&IRModule::new("m", Target::Cpu).with(f), &CDialect)
                .expect("module emits");
            for (isa, flags, packed) in &isas {
                let stem = format!("{}_{kind}_{isa}", case.name);
                let asm = assembly(&source, dir.path(), &stem, flags);
                let calls = call_targets(&asm);
                assert!(
                    !calls.iter().any(|t| libm.contains(&t.as_str())),
                    "{stem}: libm calls {calls:?}"
                );
                if *packed {
                    assert!(
                        has_packed_f32(&asm),
                        "{stem}: no packed f32 ymm/zmm instruction"
                    );
                }
            }
        }
    }
}

#[test]
fn asm_scanners_see_calls_and_packed_instructions() {
    let asm = "\tcall\texpf@PLT\n\tjmp\t.L3\n\tvfmadd132ps\t%zmm1, %zmm2, %zmm0\n";
    assert_eq!(call_targets(asm), ["expf", ".L3"]);
    assert!(has_packed_f32(asm));
    assert!(!has_packed_f32("\tvfmadd132ss\t%xmm1, %xmm2, %xmm0\n"));
}
