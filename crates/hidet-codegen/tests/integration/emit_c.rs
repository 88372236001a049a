//! Checks of the emitted C text and of the errors for bad input.

use hidet_codegen::{emit_module, CDialect, CodegenError};
use hidet_ir::prelude::*;

fn emit(f: Function) -> Result<String, CodegenError> {
    emit_module(&IRModule::new("m", Target::Cpu).with(f), &CDialect)
}

#[test]
fn division_by_proven_non_negative_operands_is_plain_c() {
    let mut fb = FunctionBuilder::cpu_kernel("k");
    let n = fb.param("n", DataType::I32);
    let out = fb.tensor_param("out", DataType::I32, [24]);
    fb.for_range("i", 24, |fb, i| {
        // Loop variables and constants are non-negative: plain `/` and `%`.
        fb.store(&out, [i.clone()], (i.clone() / 5) * 7 + i.clone() % 3);
    });
    fb.for_range("j", 24, |fb, j| {
        // `n` may be negative: floor helpers.
        fb.store(&out, [j.clone()], (&n + j.clone()) / 4 + (&n - j) % 4);
    });
    let c = emit(fb.finish()).expect("emits");
    assert!(c.contains("((i / 5) * 7)"), "{c}");
    assert!(c.contains("(i % 3)"), "{c}");
    assert!(c.contains("hidet_floordiv_i32((n + j), 4)"), "{c}");
    assert!(c.contains("hidet_floormod_i32((n - j), 4)"), "{c}");
    assert_eq!(
        c.matches("static inline int32_t hidet_floordiv_i32(")
            .count(),
        1
    );
}

#[test]
fn no_floor_helpers_when_nothing_needs_them() {
    let mut fb = FunctionBuilder::cpu_kernel("k");
    let out = fb.tensor_param("out", DataType::I64, [10]);
    fb.for_range("i", 10, |fb, i| {
        fb.store(
            &out,
            [i.clone()],
            i.cast(DataType::I64) / Expr::int_of(3, DataType::I64),
        );
    });
    let c = emit(fb.finish()).expect("emits");
    assert!(!c.contains("hidet_floor"), "{c}");
}

#[test]
fn loop_kinds_become_pragmas_and_parallel_loops_tasks() {
    let mut fb = FunctionBuilder::cpu_kernel("k");
    let out = fb.tensor_param("out", DataType::F32, [6, 8, 4]);
    fb.for_range_with("i", 6, LoopKind::Parallel, |fb, i| {
        fb.for_range_with("j", 8, LoopKind::Vectorize, |fb, j| {
            fb.for_range_with("k", 4, LoopKind::Unroll(None), |fb, k| {
                fb.for_range_with("l", 3, LoopKind::Unroll(Some(2)), |fb, _l| {
                    fb.store(&out, [i.clone(), j.clone(), k], Expr::f32(1.5));
                });
            });
        });
    });
    let c = emit(fb.finish()).expect("emits");
    for needle in [
        "static void hidet_k_task0(void *hidet_env_ptr, int32_t hidet_task) {",
        "float* __restrict__ out = hidet_env->out;",
        "const int32_t i = hidet_task;",
        "struct hidet_k_task0_env hidet_args = { out };",
        "hidet_parallel_for(hidet_k_task0, &hidet_args, 6);",
        "#pragma omp simd",
        "#pragma GCC unroll 4",
        "#pragma GCC unroll 2",
        "1.5e0f",
    ] {
        assert!(c.contains(needle), "missing `{needle}` in\n{c}");
    }
}

#[test]
fn a_parallel_loop_may_not_assign_a_scalar_declared_outside_it() {
    let mut fb = FunctionBuilder::cpu_kernel("k");
    let out = fb.tensor_param("out", DataType::F32, [4]);
    let total = fb.var("total", Expr::f32(0.0));
    fb.for_range_with("i", 4, LoopKind::Parallel, |fb, i| {
        fb.assign(&total, &total + Expr::f32(1.0));
        fb.store(&out, [i], Expr::f32(2.0));
    });
    let err = emit(fb.finish()).expect_err("a race on `total`");
    assert!(err.to_string().contains("assigning `total`"), "{err}");
}

#[test]
fn abi_symbols_and_visibility() {
    let mut fb = FunctionBuilder::cpu_kernel("scale");
    let x = fb.tensor_param("x", DataType::F32, [5]);
    let s = fb.param("s", DataType::F64);
    fb.for_range("i", 5, |fb, i| {
        fb.store(&x, [i.clone()], x.at([i]) * s.expr().cast(DataType::F32));
    });
    let c = emit(fb.finish()).expect("emits");
    assert!(
        c.contains("static void scale(float* __restrict__ x, double s)"),
        "{c}"
    );
    assert!(c.contains(
        "HIDET_EXPORT void scale__packed(void *const *args) {\n    scale((float*)args[0], *(const double*)args[1]);"
    ), "{c}");
    assert_eq!(
        c.matches("HIDET_EXPORT int hidet_set_launcher(hidet_launch_fn launch, int threads)")
            .count(),
        1
    );
}

#[test]
fn bf16_is_stored_as_bits_and_computed_in_float() {
    let mut fb = FunctionBuilder::cpu_kernel("k");
    let x = fb.tensor_param("x", DataType::BF16, [3]);
    let y = fb.tensor_param("y", DataType::F16, [3]);
    fb.for_range("i", 3, |fb, i| {
        let v = x.at([i.clone()]) * Expr::float_of(2.0, DataType::BF16);
        fb.store(&x, [i.clone()], v);
        fb.store(&y, [i.clone()], y.at([i]).exp());
    });
    let c = emit(fb.finish()).expect("emits");
    assert!(c.contains("uint16_t* __restrict__ x"), "{c}");
    assert!(
        c.contains("x[i] = hidet_f32_to_bf16((hidet_bf16_to_f32(x[i]) * 2e0f));"),
        "{c}"
    );
    assert!(c.contains("_Float16* __restrict__ y"), "{c}");
    assert!(c.contains("((_Float16)hidet_exp_f32((float)y[i]))"), "{c}");
}

#[test]
fn task_mapping_loops_must_be_lowered_first() {
    let mut fb = FunctionBuilder::cpu_kernel("unlowered");
    let out = fb.tensor_param("out", DataType::F32, [8]);
    let m = spatial([8]).expect("valid");
    fb.for_range("w", 8, |fb, w| {
        fb.for_each(m.on(w), |fb, i| {
            fb.store(&out, [i[0].clone()], Expr::f32(1.0))
        });
    });
    match emit(fb.finish()) {
        Err(CodegenError::NotLowered { function, stmt }) => {
            assert_eq!(function, "unlowered");
            assert!(!stmt.is_empty());
        }
        other => panic!("expected NotLowered, got {other:?}"),
    }
}

#[test]
fn cuda_constructs_are_typed_errors_in_c() {
    let mut fb = FunctionBuilder::cpu_kernel("k");
    let t = fb.shared_tensor("tile", DataType::F32, row_major([4i64]));
    fb.store(&t, [Expr::int(0)], Expr::f32(1.0));
    match emit(fb.finish()) {
        Err(CodegenError::Unsupported { function, what, .. }) => {
            assert_eq!(function, "k");
            assert!(what.contains("shared memory"), "{what}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }

    let mut fb = FunctionBuilder::cpu_kernel("k2");
    let out = fb.tensor_param("out", DataType::I32, [4]);
    fb.store(&out, [Expr::int(0)], Expr::thread_idx(Dim::X));
    assert!(matches!(
        emit(fb.finish()),
        Err(CodegenError::Unsupported { .. })
    ));

    let fb = FunctionBuilder::cuda_kernel("gpu", [1, 1, 1], [32, 1, 1]);
    assert!(matches!(
        emit(fb.finish()),
        Err(CodegenError::Unsupported { .. })
    ));
}

#[test]
fn bad_function_names_are_rejected() {
    for name in ["int", "hidet_x", "a-b", ""] {
        let fb = FunctionBuilder::cpu_kernel(name);
        assert!(
            matches!(emit(fb.finish()), Err(CodegenError::BadFunctionName { .. })),
            "{name}"
        );
    }
    let m = IRModule::new("m", Target::Cpu)
        .with(FunctionBuilder::cpu_kernel("same").finish())
        .with(FunctionBuilder::cpu_kernel("same").finish());
    assert!(matches!(
        emit_module(&m, &CDialect),
        Err(CodegenError::BadFunctionName { .. })
    ));
}

#[test]
fn asserts_report_the_kernel_and_message() {
    let mut fb = FunctionBuilder::cpu_kernel("checked");
    let n = fb.param("n", DataType::I32);
    fb.assert(n.expr().gt(0), "n must be \"positive\"");
    let c = emit(fb.finish()).expect("emits");
    assert!(c.contains("if (!(n > 0)) {"), "{c}");
    assert!(
        c.contains(r#"hidet_assert_fail("checked", "n must be \042positive\042");"#),
        "{c}"
    );
}

/// Element offsets are simplified (`(x / 8) * 8 + x % 8` is `x`) and summed in 64 bits, term
/// by term, so that addresses stay affine in the loop variables for the C compiler.
#[test]
fn element_offsets_are_simplified_and_summed_in_64_bits() {
    let mut fb = FunctionBuilder::cpu_kernel("k");
    let x = fb.tensor_param("x", DataType::F32, [4, 8]);
    let out = fb.tensor_param("out", DataType::F32, [32]);
    fb.for_range("i", 32, |fb, i| {
        let v = x.at([i.clone() / 8, i.clone() % 8]);
        fb.store(&out, [i], v);
    });
    fb.for_range("r", 4, |fb, r| {
        fb.for_range("c", 8, |fb, c| {
            let v = x.at([r.clone(), c.clone()]);
            fb.store(&out, [r.clone() * 8 + c], v);
        });
    });
    let c = emit(fb.finish()).expect("emits");
    assert!(c.contains("out[i] = x[i];"), "{c}");
    assert!(c.contains("x[(int64_t)((r * 8)) + (int64_t)(c)]"), "{c}");
}

/// A guarded read whose offset divides the innermost loop variable (a strided im2col
/// column) is a gather: its offset is one 32-bit expression, and the load is unconditional
/// at an offset masked to 0, with the guard evaluated without branches.
#[test]
fn guarded_gathers_load_unconditionally() {
    let mut fb = FunctionBuilder::cpu_kernel("k");
    let x = fb.tensor_param("x", DataType::F32, [8, 20]);
    let out = fb.tensor_param("out", DataType::F32, [40]);
    fb.for_range_with("j", 40, LoopKind::Vectorize, |fb, j| {
        let row = j.clone() / 10 * 2 - 1;
        let col = j.clone() % 10 * 2;
        let inside = row.ge(0).and(col.lt(20));
        let v = Expr::select(inside, x.at([row, col]), Expr::f32(0.0));
        fb.store(&out, [j], v);
    });
    let c = emit(fb.finish()).expect("emits");
    assert!(c.contains("static inline float hidet_load_or_f32("), "{c}");
    assert!(c.contains("out[j] = hidet_load_or_f32(x, "), "{c}");
    assert!(c.contains(") & ("), "the guard has no short-circuit: {c}");
    assert!(!c.contains("&&"), "{c}");
}

/// A select on index guards between values already computed is a bitwise blend (C compilers
/// vectorize it without if-converting the guard); a select on a float comparison, or one
/// whose arm reads memory, keeps `?:`.
#[test]
fn selects_on_a_mask_element_are_bitwise_blends() {
    let mut fb = FunctionBuilder::cpu_kernel("k");
    let x = fb.tensor_param("x", DataType::F32, [40]);
    let mask = fb.tensor_param("mask", DataType::BOOL, [40]);
    let out = fb.tensor_param("out", DataType::F32, [2, 40]);
    fb.for_range_with("j", 40, LoopKind::Vectorize, |fb, j| {
        let v = fb.var("v", x.at([j.clone()]));
        let v = v.expr() / Expr::f32(8.0);
        let masked = Expr::select(mask.at([j.clone()]), v, Expr::f32(f32::MIN));
        fb.store(&out, [Expr::int(0), j.clone()], masked);
        let read = Expr::select(mask.at([j.clone()]), x.at([j.clone()]), Expr::f32(0.0));
        fb.store(&out, [Expr::int(1), j.clone()], read);
    });
    let c = emit(fb.finish()).expect("emits");
    assert_eq!(c.matches("hidet_guard_select_f32(mask[").count(), 1, "{c}");
    assert!(
        c.contains("? x["),
        "a branch that reads keeps ?: (it may be what the mask guards): {c}"
    );
}

#[test]
fn guard_selects_between_computed_values_are_bitwise_blends() {
    let mut fb = FunctionBuilder::cpu_kernel("k");
    let x = fb.tensor_param("x", DataType::F32, [40]);
    let out = fb.tensor_param("out", DataType::F32, [3, 40]);
    fb.for_range("r", 3, |fb, r| {
        fb.for_range_with("j", 40, LoopKind::Vectorize, |fb, j| {
            let v = fb.var("v", x.at([j.clone()]));
            let inside = (r.clone() - 1).ge(0).and(r.clone().lt(2));
            let guarded = Expr::select(inside, v.expr(), Expr::f32(f32::NEG_INFINITY));
            let relu = Expr::select(v.expr().lt(Expr::f32(0.0)), Expr::f32(0.0), v.expr());
            fb.store(&out, [r.clone(), j.clone()], guarded + relu);
        });
    });
    let c = emit(fb.finish()).expect("emits");
    assert!(
        c.contains("static inline float hidet_guard_select_f32(bool c,"),
        "{c}"
    );
    assert_eq!(c.matches("hidet_guard_select_f32(").count(), 2, "{c}");
    assert!(
        c.contains("? 0e0f : v)"),
        "the float comparison keeps ?: {c}"
    );
}
