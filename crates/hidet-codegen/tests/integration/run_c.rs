//! Compile-and-run tests of the C dialect: emitted C is compiled with `cc`,
//! loaded, called through `NAME__packed` and compared against float64 (or
//! exact integer) references computed in Rust.

use crate::common;

use common::{assembly, compile, max_rel_err, ptr, scalar, Rng};
use hidet_codegen::{emit_module, CDialect};
use hidet_ir::expr::{floor_div, floor_mod};
use hidet_ir::intrinsic::Intrinsic;
use hidet_ir::prelude::*;

fn emit(f: Function) -> String {
    let m = IRModule::new("test", Target::Cpu).with(f);
    emit_module(&m, &CDialect).expect("module emits")
}

#[test]
fn elementwise_with_broadcasting_layouts() {
    let (m, n) = (37i64, 53i64);
    let mut fb = FunctionBuilder::cpu_kernel("bcast");
    let a = fb.tensor_param("a", DataType::F32, [m, n]);
    // b is a row vector broadcast over rows, c a column vector over columns.
    let b =
        fb.tensor_param_with_layout("b", DataType::F32, strided([m, n], [0, 1]).expect("rank 2"));
    let c =
        fb.tensor_param_with_layout("c", DataType::F32, strided([m, n], [1, 0]).expect("rank 2"));
    let out = fb.tensor_param("out", DataType::F32, [m, n]);
    fb.for_range_with("i", m, LoopKind::Parallel, |fb, i| {
        fb.for_range_with("j", n, LoopKind::Vectorize, |fb, j| {
            let idx = [i.clone(), j.clone()];
            let v = a.at(idx.clone()) * b.at(idx.clone()) + c.at(idx.clone()).exp();
            fb.store(&out, idx, v);
        });
    });
    let lib = compile(&emit(fb.finish()));

    let mut rng = Rng::new(1);
    let (mu, nu) = (m as usize, n as usize);
    let mut av = rng.vec_f32(mu * nu);
    let mut bv = rng.vec_f32(nu);
    let mut cv = rng.vec_f32(mu);
    let mut outv = vec![0.0f32; mu * nu];
    lib.call(
        "bcast",
        &mut [ptr(&mut av), ptr(&mut bv), ptr(&mut cv), ptr(&mut outv)],
    );
    let want: Vec<f64> = (0..mu * nu)
        .map(|k| {
            let (i, j) = (k / nu, k % nu);
            av[k] as f64 * bv[j] as f64 + (cv[i] as f64).exp()
        })
        .collect();
    let err = max_rel_err(&outv, &want);
    assert!(err < 1e-5, "max rel err {err}");
}

#[test]
fn parallel_row_reduction() {
    let (m, n) = (61i64, 77i64);
    let mut fb = FunctionBuilder::cpu_kernel("rms_rows");
    let a = fb.tensor_param("a", DataType::F32, [m, n]);
    let out = fb.tensor_param("out", DataType::F32, [m]);
    fb.for_range_with("i", m, LoopKind::Parallel, |fb, i| {
        let acc = fb.var("acc", Expr::f32(0.0));
        fb.for_range("j", n, |fb, j| {
            let x = a.at([i.clone(), j]);
            fb.assign(&acc, &acc + x.clone() * x);
        });
        fb.store(&out, [i], (&acc / Expr::f32(n as f32)).sqrt());
    });
    let lib = compile(&emit(fb.finish()));
    assert_eq!(lib.set_num_threads(3), 1, "serial until a launcher is set");
    assert_eq!(
        lib.set_num_threads(4),
        3,
        "returns the previous thread count"
    );

    let mut rng = Rng::new(2);
    let (mu, nu) = (m as usize, n as usize);
    let mut av = rng.vec_f32(mu * nu);
    let mut outv = vec![0.0f32; mu];
    lib.call("rms_rows", &mut [ptr(&mut av), ptr(&mut outv)]);
    let want: Vec<f64> = (0..mu)
        .map(|i| {
            let s: f64 = (0..nu).map(|j| (av[i * nu + j] as f64).powi(2)).sum();
            (s / nu as f64).sqrt()
        })
        .collect();
    let err = max_rel_err(&outv, &want);
    assert!(err < 1e-5, "max rel err {err}");
}

/// A parallel loop's task reads scalars bound outside it by value and shares an array
/// declared outside it (a scratch the serial code after the loop reads), on 3 threads.
#[test]
fn parallel_tasks_capture_scalars_and_share_outer_arrays() {
    let n = 29i64;
    let mut fb = FunctionBuilder::cpu_kernel("scaled");
    let a = fb.tensor_param("a", DataType::F32, [n]);
    let s = fb.param("s", DataType::F32);
    let out = fb.tensor_param("out", DataType::F32, [n]);
    let scratch = fb.register_tensor("scratch", DataType::F32, row_major([n]));
    fb.let_in("twice", s.expr() * Expr::f32(2.0), |fb, twice| {
        fb.for_range_with("i", n, LoopKind::Parallel, |fb, i| {
            fb.store(&scratch, [i.clone()], a.at([i]) * twice.clone());
        });
    });
    fb.for_range("i", n, |fb, i| {
        fb.store(&out, [i.clone()], scratch.at([i]) + Expr::f32(1.0));
    });
    let lib = compile(&emit(fb.finish()));
    lib.set_num_threads(3);
    let mut rng = Rng::new(9);
    let mut av = rng.vec_f32(n as usize);
    let mut sv = 0.75f32;
    let mut outv = vec![0.0f32; n as usize];
    lib.call(
        "scaled",
        &mut [ptr(&mut av), scalar(&mut sv), ptr(&mut outv)],
    );
    let want: Vec<f64> = av.iter().map(|&x| x as f64 * 1.5 + 1.0).collect();
    let err = max_rel_err(&outv, &want);
    assert!(err < 1e-6, "max rel err {err}");
}

/// A parallel loop inside a parallel loop becomes a task function of its own (named apart
/// from the enclosing one) launched from inside the enclosing task.
#[test]
fn nested_parallel_loops_are_outlined_separately() {
    let (m, n) = (4i64, 7i64);
    let mut fb = FunctionBuilder::cpu_kernel("nested");
    let a = fb.tensor_param("a", DataType::F32, [m, n]);
    let out = fb.tensor_param("out", DataType::F32, [m, n]);
    fb.for_range_with("i", m, LoopKind::Parallel, |fb, i| {
        fb.for_range_with("j", n, LoopKind::Parallel, |fb, j| {
            let idx = [i.clone(), j.clone()];
            let v = a.at(idx.clone()) * Expr::f32(3.0) + i.cast(DataType::F32);
            fb.store(&out, idx, v);
        });
    });
    let source = emit(fb.finish());
    assert!(source.contains("hidet_nested_task0") && source.contains("hidet_nested_task1"));
    let lib = compile(&source);
    lib.set_num_threads(3);
    let mut rng = Rng::new(12);
    let (mu, nu) = (m as usize, n as usize);
    let mut av = rng.vec_f32(mu * nu);
    let mut outv = vec![0.0f32; mu * nu];
    lib.call("nested", &mut [ptr(&mut av), ptr(&mut outv)]);
    let want: Vec<f64> = (0..mu * nu)
        .map(|k| av[k] as f64 * 3.0 + (k / nu) as f64)
        .collect();
    let err = max_rel_err(&outv, &want);
    assert!(err < 1e-6, "max rel err {err}");
}

/// `C[3, 16] = A[3, K] · B[K, 16]` with a register tile of 3×2 `f32x8`
/// accumulators, broadcast `A` elements and vector FMA.
fn microkernel(k: i64) -> Function {
    let v8 = DataType::F32X8;
    let mut fb = FunctionBuilder::cpu_kernel("micro");
    let a = fb.tensor_param("a", DataType::F32, [3, k]);
    let b = fb.tensor_param("b", DataType::F32, [k, 16]);
    let c = fb.tensor_param("c", DataType::F32, [3, 16]);
    let acc = fb.register_tensor("acc", v8, row_major([3i64, 2]));
    fb.for_range_with("r", 3, LoopKind::Unroll(None), |fb, r| {
        fb.for_range_with("v", 2, LoopKind::Unroll(None), |fb, v| {
            fb.store(&acc, [r.clone(), v], Expr::zero(v8));
        });
    });
    fb.for_range_with("kk", k, LoopKind::Unroll(Some(4)), |fb, kk| {
        fb.for_range_with("r", 3, LoopKind::Unroll(None), |fb, r| {
            let a_bcast = a.at([r.clone(), kk.clone()]).broadcast(8);
            fb.for_range_with("v", 2, LoopKind::Unroll(None), |fb, v| {
                let b_vec = Expr::call(
                    Intrinsic::VectorLoad { dtype: v8 },
                    vec![b.at([kk.clone(), v.clone() * 8]).address()],
                );
                let idx = [r.clone(), v];
                fb.store(&acc, idx.clone(), a_bcast.fma(b_vec, acc.at(idx)));
            });
        });
    });
    fb.for_range("r", 3, |fb, r| {
        fb.for_range("v", 2, |fb, v| {
            let dst = c.at([r.clone(), v.clone() * 8]).address();
            fb.call(Intrinsic::VectorStore, vec![dst, acc.at([r, v])]);
        });
    });
    fb.finish()
}

#[test]
fn vector_fma_microkernel() {
    let k = 37i64;
    let source = emit(microkernel(k));
    assert!(source.contains("typedef float hidet_f32x8 __attribute__((vector_size(32)));"));
    let lib = compile(&source);
    let mut rng = Rng::new(3);
    let ku = k as usize;
    let mut av = rng.vec_f32(3 * ku);
    let mut bv = rng.vec_f32(ku * 16);
    let mut cv = vec![0.0f32; 3 * 16];
    lib.call("micro", &mut [ptr(&mut av), ptr(&mut bv), ptr(&mut cv)]);
    let want: Vec<f64> = (0..48)
        .map(|x| {
            let (r, col) = (x / 16, x % 16);
            (0..ku)
                .map(|kk| av[r * ku + kk] as f64 * bv[kk * 16 + col] as f64)
                .sum()
        })
        .collect();
    let err = max_rel_err(&cv, &want);
    assert!(err < 1e-4, "max rel err {err}");
}

#[test]
fn vector_fma_compiles_to_fused_instructions() {
    let has_fma = std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.split_whitespace().any(|w| w == "fma"))
        .unwrap_or(false);
    if !has_fma || !cfg!(target_arch = "x86_64") {
        eprintln!("skipped: host has no x86 FMA");
        return;
    }
    let source = emit(microkernel(64));
    let dir = tempfile::tempdir().expect("temp dir");
    let asm = assembly(&source, dir.path(), "micro", &[]);
    let fmas = asm.matches("vfmadd").count();
    assert!(fmas >= 6, "expected vector FMAs, found {fmas}");
}

#[test]
fn vector_axpy_with_scalar_params_and_tail() {
    let mut fb = FunctionBuilder::cpu_kernel("axpy");
    let n = fb.param("n", DataType::I32);
    let alpha = fb.param("alpha", DataType::F32);
    let x = fb.tensor_param("x", DataType::F32, [n.expr()]);
    let y = fb.tensor_param("y", DataType::F32, [n.expr()]);
    let v8 = DataType::F32X8;
    fb.for_range("v", &n / 8, |fb, v| {
        let at = |t: &Var| t.at([v.clone() * 8]).address();
        let xv = Expr::call(Intrinsic::VectorLoad { dtype: v8 }, vec![at(&x)]);
        let yv = Expr::call(Intrinsic::VectorLoad { dtype: v8 }, vec![at(&y)]);
        let r = alpha.expr().broadcast(8).fma(xv, yv);
        fb.call(Intrinsic::VectorStore, vec![at(&y), r]);
    });
    fb.for_range("t", &n % 8, |fb, t| {
        let i = (&n / 8) * 8 + t;
        fb.store(
            &y,
            [i.clone()],
            alpha.expr().fma(x.at([i.clone()]), y.at([i])),
        );
    });
    let lib = compile(&emit(fb.finish()));

    let mut rng = Rng::new(4);
    let len = 203usize;
    let mut xv = rng.vec_f32(len);
    let mut yv = rng.vec_f32(len);
    let y0 = yv.clone();
    let mut nv = len as i32;
    let mut av = rng.f32_nonzero();
    lib.call(
        "axpy",
        &mut [scalar(&mut nv), scalar(&mut av), ptr(&mut xv), ptr(&mut yv)],
    );
    let want: Vec<f64> = (0..len)
        .map(|i| av as f64 * xv[i] as f64 + y0[i] as f64)
        .collect();
    let err = max_rel_err(&yv, &want);
    assert!(err < 1e-5, "max rel err {err}");
}

#[test]
fn floor_division_and_modulo_of_negative_values() {
    for dtype in [DataType::I32, DataType::I64] {
        let len = 211i64;
        let mut fb = FunctionBuilder::cpu_kernel("floordm");
        let x = fb.tensor_param("x", dtype, [len]);
        let d = fb.tensor_param("d", dtype, [len]);
        let q = fb.tensor_param("q", dtype, [len]);
        let r = fb.tensor_param("r", dtype, [len]);
        fb.for_range("i", len, |fb, i| {
            let (xi, di) = (x.at([i.clone()]), d.at([i.clone()]));
            fb.store(&q, [i.clone()], xi.clone() / di.clone());
            // Modulo by a constant of a possibly negative value.
            fb.store(
                &r,
                [i.clone()],
                xi.clone() % di + (xi % Expr::int_of(5, dtype)) * 1000,
            );
        });
        let source = emit(fb.finish());
        let suffix = dtype.scalar.name();
        assert!(source.contains(&format!("hidet_floordiv_{suffix}(")));
        assert!(source.contains(&format!("hidet_floormod_{suffix}(")));
        let lib = compile(&source);

        let mut rng = Rng::new(5);
        let n = len as usize;
        let xs: Vec<i64> = (0..n).map(|_| rng.int(-1000, 1000)).collect();
        let ds: Vec<i64> = (0..n)
            .map(|_| {
                let v = rng.int(1, 9);
                if rng.next_u64() & 1 == 0 {
                    v
                } else {
                    -v
                }
            })
            .collect();
        let want_q: Vec<i64> = xs.iter().zip(&ds).map(|(&a, &b)| floor_div(a, b)).collect();
        let want_r: Vec<i64> = xs
            .iter()
            .zip(&ds)
            .map(|(&a, &b)| floor_mod(a, b) + floor_mod(a, 5) * 1000)
            .collect();
        assert!(xs.iter().zip(&ds).any(|(&a, &b)| a < 0 && a % b != 0));
        if dtype == DataType::I32 {
            let mut xv: Vec<i32> = xs.iter().map(|&v| v as i32).collect();
            let mut dv: Vec<i32> = ds.iter().map(|&v| v as i32).collect();
            let (mut qv, mut rv) = (vec![0i32; n], vec![0i32; n]);
            lib.call(
                "floordm",
                &mut [ptr(&mut xv), ptr(&mut dv), ptr(&mut qv), ptr(&mut rv)],
            );
            assert_eq!(qv.iter().map(|&v| v as i64).collect::<Vec<_>>(), want_q);
            assert_eq!(rv.iter().map(|&v| v as i64).collect::<Vec<_>>(), want_r);
        } else {
            let (mut xv, mut dv) = (xs.clone(), ds.clone());
            let (mut qv, mut rv) = (vec![0i64; n], vec![0i64; n]);
            lib.call(
                "floordm",
                &mut [ptr(&mut xv), ptr(&mut dv), ptr(&mut qv), ptr(&mut rv)],
            );
            assert_eq!(qv, want_q);
            assert_eq!(rv, want_r);
        }
    }
}

#[test]
fn lowered_task_mapping_kernel_with_bound_check() {
    let len = 1001i64;
    let mut fb = FunctionBuilder::cpu_kernel("mapped");
    let a = fb.tensor_param("a", DataType::F32, [len]);
    let b = fb.tensor_param("b", DataType::F32, [len]);
    let c = fb.tensor_param("c", DataType::F32, [len]);
    let mapping = &spatial([4]).expect("valid") * &repeat([251]).expect("valid");
    fb.for_range_with("t", 4, LoopKind::Parallel, |fb, t| {
        fb.for_each(mapping.on(t), |fb, i| {
            let i = i[0].clone();
            fb.if_then(i.lt(len), |fb| {
                let v = a.at([i.clone()]) - b.at([i.clone()]) * Expr::f32(2.5);
                fb.store(&c, [i], v.max(Expr::f32(-0.25)));
            });
        });
    });
    let f = hidet_ir::passes::lower_function(fb.finish()).expect("lowers");
    let source = emit(f);
    assert!(
        !source.contains("hidet_floordiv"),
        "indices are provably non-negative"
    );
    let lib = compile(&source);
    lib.set_num_threads(4);
    let mut rng = Rng::new(6);
    let n = len as usize;
    let (mut av, mut bv) = (rng.vec_f32(n), rng.vec_f32(n));
    let mut cv = vec![0.0f32; n];
    lib.call("mapped", &mut [ptr(&mut av), ptr(&mut bv), ptr(&mut cv)]);
    let want: Vec<f64> = (0..n)
        .map(|i| (av[i] as f64 - bv[i] as f64 * 2.5).max(-0.25))
        .collect();
    let err = max_rel_err(&cv, &want);
    assert!(err < 1e-6, "max rel err {err}");
}

/// The bf16 value nearest to `x` (ties to even), found by comparing the two
/// bf16 neighbours of `x` in float64.
fn nearest_bf16(x: f32) -> f32 {
    let down = f32::from_bits(x.to_bits() & 0xffff_0000);
    let up = f32::from_bits((x.to_bits() & 0xffff_0000) + 0x1_0000);
    let (dd, du) = ((x as f64 - down as f64).abs(), (up as f64 - x as f64).abs());
    if dd < du || (dd == du && (down.to_bits() >> 16) & 1 == 0) {
        down
    } else {
        up
    }
}

#[test]
fn bf16_and_f16_storage_with_an_internal_helper() {
    let len = 57i64;
    let mut helper = FunctionBuilder::internal("twice_plus", DataType::F32);
    let hx = helper.param("x", DataType::F32);
    helper.ret(&hx * Expr::f32(2.0) + Expr::f32(0.125));
    let helper = helper.finish();

    let mut fb = FunctionBuilder::cpu_kernel("convert");
    let x = fb.tensor_param("x", DataType::F32, [len]);
    let b = fb.tensor_param("b", DataType::BF16, [len]);
    let h = fb.tensor_param("h", DataType::F16, [len]);
    let back = fb.tensor_param("back", DataType::F32, [len]);
    fb.for_range("i", len, |fb, i| {
        let call = Expr::call(
            Intrinsic::Function {
                name: "twice_plus".into(),
                ret: Type::Data(DataType::F32),
            },
            vec![x.at([i.clone()])],
        );
        fb.store(&b, [i.clone()], call.cast(DataType::BF16));
        fb.store(&h, [i.clone()], x.at([i.clone()]).cast(DataType::F16));
        fb.store(&back, [i.clone()], b.at([i.clone()]).cast(DataType::F32));
    });
    let m = IRModule::new("conv", Target::Cpu)
        .with(helper)
        .with(fb.finish());
    let lib = compile(&emit_module(&m, &CDialect).expect("emits"));
    assert!(!lib.exports("twice_plus"), "helpers stay static");

    let mut rng = Rng::new(7);
    let n = len as usize;
    let mut xv: Vec<f32> = (0..n).map(|_| rng.f32_nonzero() * 300.0).collect();
    let mut bv = vec![0u16; n];
    let mut hv = vec![0u16; n];
    let mut backv = vec![0.0f32; n];
    lib.call(
        "convert",
        &mut [ptr(&mut xv), ptr(&mut bv), ptr(&mut hv), ptr(&mut backv)],
    );
    for i in 0..n {
        let want = nearest_bf16(xv[i] * 2.0 + 0.125);
        assert_eq!(f32::from_bits((bv[i] as u32) << 16), want, "bf16 at {i}");
        assert_eq!(backv[i], want, "bf16 read back at {i}");
        // f16: decode the bits and check it is within half an ulp (2^-11 relative).
        let bits = hv[i];
        let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
        let exp = ((bits >> 10) & 0x1f) as i32;
        let frac = (bits & 0x3ff) as f64;
        assert!(exp > 0 && exp < 31, "normal f16 expected at {i}");
        let value = sign * (1.0 + frac / 1024.0) * 2f64.powi(exp - 15);
        let rel = (value - xv[i] as f64).abs() / (xv[i] as f64).abs();
        assert!(rel <= 1.0 / 2048.0, "f16 at {i}: {value} vs {}", xv[i]);
    }
}

/// Guard selects written as bitwise blends return either operand bit for bit: infinities,
/// NaN, negative zero, and fills other than zero.
#[test]
fn guard_selects_keep_every_bit_of_the_chosen_value() {
    let len = 37i64;
    let mut fb = FunctionBuilder::cpu_kernel("blend");
    let x = fb.tensor_param("x", DataType::F32, [len]);
    let y = fb.tensor_param("y", DataType::F32, [len]);
    let out = fb.tensor_param("out", DataType::F32, [3, len]);
    fb.for_range("r", 3, |fb, r| {
        fb.for_range_with("j", len, LoopKind::Vectorize, |fb, j| {
            let a = fb.var("a", x.at([j.clone()]));
            let b = fb.var("b", y.at([j.clone()]));
            let inside = r.clone().ge(1).and((j.clone() % 3).ne(0));
            fb.store(
                &out,
                [r.clone(), j.clone()],
                Expr::select(inside, a.expr(), b.expr()),
            );
        });
    });
    let source = emit(fb.finish());
    assert!(source.contains("hidet_guard_select_f32("), "{source}");
    let lib = compile(&source);
    let special = [
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -0.0,
        0.0,
        f32::MIN_POSITIVE / 2.0,
    ];
    let mut rng = Rng::new(11);
    let n = len as usize;
    let mut xs: Vec<f32> = (0..n)
        .map(|i| special.get(i).copied().unwrap_or_else(|| rng.f32_nonzero()))
        .collect();
    let mut ys: Vec<f32> = (0..n)
        .map(|i| {
            special
                .get(n - 1 - i)
                .copied()
                .unwrap_or_else(|| rng.f32_nonzero())
        })
        .collect();
    let mut got = vec![1.0f32; 3 * n];
    lib.call("blend", &mut [ptr(&mut xs), ptr(&mut ys), ptr(&mut got)]);
    for r in 0..3 {
        for j in 0..n {
            let want = if r >= 1 && j % 3 != 0 { xs[j] } else { ys[j] };
            assert_eq!(got[r * n + j].to_bits(), want.to_bits(), "r {r} j {j}");
        }
    }
}

/// `f[i] = x[i] / 2` and `y[i] = f[i] + 0.5` truncated, eight lanes at a time: vector casts
/// from `u8` and `i8` to `f32` and back.
fn byte_conversions(n: i64) -> Function {
    let mut fb = FunctionBuilder::cpu_kernel("bytes");
    let x = fb.tensor_param("x", DataType::U8, [n]);
    let s = fb.tensor_param("s", DataType::I8, [n]);
    let f = fb.tensor_param("f", DataType::F32, [n]);
    let y = fb.tensor_param("y", DataType::U8, [n]);
    let t = fb.tensor_param("t", DataType::I8, [n]);
    let (u8v, i8v, f32v) = (
        DataType::vector(ScalarType::U8, 8),
        DataType::vector(ScalarType::I8, 8),
        DataType::F32X8,
    );
    let load = |dtype, at: Expr| Expr::call(Intrinsic::VectorLoad { dtype }, vec![at.address()]);
    fb.for_range("v", n / 8, |fb, v| {
        let i = v * 8;
        let half = load(u8v, x.at([i.clone()])).cast(f32v) * Expr::f32(0.5).broadcast(8);
        let signed = load(i8v, s.at([i.clone()])).cast(f32v) + Expr::f32(0.5).broadcast(8);
        fb.call(
            Intrinsic::VectorStore,
            vec![f.at([i.clone()]).address(), half.clone()],
        );
        let rounded = (half + Expr::f32(0.5).broadcast(8)).cast(u8v);
        fb.call(
            Intrinsic::VectorStore,
            vec![y.at([i.clone()]).address(), rounded],
        );
        fb.call(
            Intrinsic::VectorStore,
            vec![t.at([i]).address(), signed.cast(i8v)],
        );
    });
    fb.finish()
}

#[test]
fn byte_vectors_convert_to_and_from_floats() {
    let n = 64usize;
    let source = emit(byte_conversions(n as i64));
    let lib = compile(&source);
    let mut x: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
    let mut s: Vec<i8> = (0..n).map(|i| (i as i32 * 29 % 251 - 125) as i8).collect();
    let (mut f, mut y, mut t) = (vec![0f32; n], vec![0u8; n], vec![0i8; n]);
    lib.call(
        "bytes",
        &mut [
            ptr(&mut x),
            ptr(&mut s),
            ptr(&mut f),
            ptr(&mut y),
            ptr(&mut t),
        ],
    );
    for i in 0..n {
        assert_eq!(f[i], f32::from(x[i]) / 2.0, "f[{i}]");
        assert_eq!(y[i], (f32::from(x[i]) / 2.0 + 0.5) as u8, "y[{i}]");
        assert_eq!(t[i], (f32::from(s[i]) + 0.5) as i8, "t[{i}]");
    }
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    // GCC converts byte vectors (loaded ones, or to floats) one lane at a time unless they are
    // widened to 32-bit lanes in a register first. Checked for AVX2 and AVX-512 targets named
    // here, whatever the host (compiling does not run the code).
    let dir = tempfile::tempdir().expect("temp dir");
    for (isa, march) in [("avx2", "-march=x86-64-v3"), ("avx512", "-march=x86-64-v4")] {
        let asm = assembly(&source, dir.path(), isa, &[march]);
        for scalar in ["cvtsi2ss", "cvtusi2ss", "cvttss2si", "pinsr"] {
            assert!(
                !asm.contains(scalar),
                "a scalar conversion ({scalar}) for {isa} in:\n{asm}"
            );
        }
    }
}
