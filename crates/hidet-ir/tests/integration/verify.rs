//! Tests of the IR verifier: well-formed CPU and CUDA kernels pass; each
//! check rejects a kernel that breaks it, with an error naming the function,
//! the offending statement and the problem.

use hidet_ir::expr::Dim;
use hidet_ir::prelude::*;
use hidet_ir::verify::{verify_function, verify_module, Problem, VerifyError, MAX_SHARED_BYTES};
use proptest::prelude::*;

fn tid() -> Expr {
    Expr::thread_idx(Dim::X)
}

fn reject(f: &Function, target: Target) -> VerifyError {
    match verify_function(f, target) {
        Ok(()) => panic!("the verifier accepted an ill-formed kernel:\n{f}"),
        Err(e) => e,
    }
}

/// Asserts that the error text contains every part, and names the function.
fn assert_mentions(err: &VerifyError, parts: &[&str]) {
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("in function `{}`: ", err.function)),
        "{text}"
    );
    for p in parts {
        assert!(text.contains(p), "missing {p:?} in:\n{text}");
    }
}

// ----- kernels that pass ---------------------------------------------------

/// `c[i] = a[i] * b[i] + 1` over 1003 elements: 4 parallel CPU threads, each
/// running a contiguous 251-task tile (1004 tasks, so the last is guarded).
fn cpu_kernel() -> Function {
    let mut fb = FunctionBuilder::cpu_kernel("cpu_fma");
    let a = fb.tensor_param("a", DataType::F32, [1003]);
    let b = fb.tensor_param("b", DataType::F32, [1003]);
    let c = fb.tensor_param("c", DataType::F32, [1003]);
    let tiles = spatial([4]).unwrap() * repeat_unrolled([251]).unwrap();
    fb.for_range_with("t", 4, LoopKind::Parallel, |fb, t| {
        fb.for_each(tiles.on(t), |fb, i| {
            fb.if_then(i[0].lt(1003), |fb| {
                let prod = fb.var("prod", a.at(i) * b.at(i));
                fb.store(&c, i, &prod + 1);
            });
        });
    });
    fb.finish()
}

/// One warp-level 16x8x16 tensor-core tile per warp of a 128-thread block,
/// staged through shared memory, plus a warp-shuffle row reduction.
fn cuda_kernel() -> Function {
    let mut fb =
        FunctionBuilder::cuda_kernel("cuda_mma", [Expr::int(3), 1.into(), 1.into()], [128, 1, 1]);
    let a = fb.tensor_param("a", DataType::F16, [37, 16]);
    let out = fb.tensor_param("out", DataType::F32, [37, 8]);
    let smem = fb.shared_tensor("smem_a", DataType::F16, row_major([64, 16]));
    let row0 = Expr::block_idx(Dim::X) * 16;
    fb.for_each(
        (repeat([8, 1]).unwrap() * spatial([8, 16]).unwrap()).on(tid()),
        |fb, ij| {
            let r = &row0 + &ij[0];
            fb.if_then_else(
                r.lt(37),
                |fb| fb.store(&smem, ij, a.at([r.clone(), ij[1].clone()])),
                |fb| fb.store(&smem, ij, Expr::float_of(0.0, DataType::F16)),
            );
        },
    );
    fb.sync_threads();
    let a_frag = fb.register_tensor("a_frag", DataType::F16, row_major([8]));
    let b_frag = fb.register_tensor("b_frag", DataType::F16, row_major([4]));
    let c_frag = fb.register_tensor("c_frag", DataType::F32, row_major([4]));
    fb.for_each(spatial([4]).unwrap().on(tid() / 32), |fb, w| {
        fb.call(
            Intrinsic::LdMatrix {
                count: 4,
                trans: false,
            },
            vec![
                a_frag.at([0]).address(),
                smem.at([&w[0] * 16 + tid() % 16, Expr::int(0)]).address(),
            ],
        );
        fb.for_range_with("k", 4, LoopKind::Unroll(None), |fb, k| {
            fb.store(&b_frag, [k.clone()], Expr::float_of(1.0, DataType::F16));
            fb.store(&c_frag, [k], Expr::f32(0.0));
        });
        fb.call(
            Intrinsic::Mma {
                shape: MmaShape::M16N8K16,
                input: DataType::F16,
                acc: DataType::F32,
            },
            vec![
                a_frag.at([0]).address(),
                b_frag.at([0]).address(),
                c_frag.at([0]).address(),
            ],
        );
    });
    fb.for_each(spatial([8, 4]).unwrap().on(tid() % 32), |fb, lane| {
        let sum = fb.var("sum", c_frag.at([&lane[1]]));
        let shfl = Intrinsic::WarpShuffle {
            kind: ShuffleKind::Xor,
            width: 4,
        };
        fb.assign(
            &sum,
            &sum + Expr::call(shfl, vec![sum.expr(), Expr::int(1)]),
        );
        fb.if_then((&row0 + &lane[0]).lt(37), |fb| {
            fb.store(&out, [&row0 + &lane[0], lane[1].clone()], &sum);
        });
    });
    fb.finish()
}

#[test]
fn cpu_kernel_with_parallel_loop_and_mapping_passes() {
    let f = cpu_kernel();
    assert_eq!(verify_function(&f, Target::Cpu), Ok(()));
    let m = IRModule::new("cpu", Target::Cpu).with(f);
    assert_eq!(verify_module(&m), Ok(()));
}

#[test]
fn cuda_kernel_with_shared_barrier_shuffle_and_mma_passes() {
    let kernel = cuda_kernel();
    assert_eq!(verify_function(&kernel, Target::Cuda), Ok(()));
    let mut host = FunctionBuilder::host_launcher("launch");
    let a = host.param("a", Type::pointer_to(DataType::F16.into()));
    let out = host.param("out", Type::pointer_to(DataType::F32.into()));
    host.launch(&kernel, vec![a.expr(), out.expr()]);
    let m = IRModule::new("cuda", Target::Cuda)
        .with(kernel)
        .with(host.finish());
    assert_eq!(verify_module(&m), Ok(()));
}

#[test]
fn constants_widening_and_fewer_workers_than_threads_pass() {
    let mut fb = FunctionBuilder::cuda_kernel("lenient", [1, 1, 1], [96, 1, 1]);
    let x = fb.tensor_param("x", DataType::F32, [7, 11]);
    let n = fb.param("n", DataType::I64);
    fb.for_each(auto_map(&[7, 11], 77).unwrap().on(tid()), |fb, ij| {
        // An integer constant with a float, an i32 index with an i64 bound.
        fb.if_then(ij[0].lt(&n), |fb| fb.store(&x, ij, x.at(ij) * 2 + 1));
        fb.store(&x, ij, 0);
    });
    let f = fb.finish();
    assert_eq!(verify_function(&f, Target::Cuda), Ok(()));
}

// ----- (b) variables defined before use -------------------------------------

#[test]
fn undefined_variable_is_named_with_its_statement() {
    let mut fb = FunctionBuilder::cpu_kernel("use_undefined");
    let y = fb.tensor_param("y", DataType::F32, [13]);
    let stray = Var::new("scale", DataType::F32);
    fb.for_range("i", 13, |fb, i| {
        fb.store(&y, [i.clone()], y.at([i]) * &stray);
    });
    let err = reject(&fb.finish(), Target::Cpu);
    assert!(matches!(&*err.problem, Problem::UndefinedVariable { name } if name == "scale"));
    assert_eq!(
        err.to_string(),
        "in function `use_undefined`: undefined variable `scale`: not a parameter, \
         nor declared or bound in an enclosing scope\n  at:\n    \
         for i in range(13):\n        y[i] = y[i] * scale"
    );
}

#[test]
fn loop_variable_used_after_its_loop_is_undefined() {
    let mut fb = FunctionBuilder::cpu_kernel("escaped_loop_var");
    let y = fb.tensor_param("y", DataType::I32, [5]);
    let mut escaped = None;
    fb.for_range("j", 5, |fb, j| {
        fb.store(&y, [j.clone()], j.clone());
        escaped = Some(j);
    });
    let j = escaped.expect("the loop body ran");
    fb.store(&y, [Expr::int(0)], j);
    let err = reject(&fb.finish(), Target::Cpu);
    assert!(matches!(&*err.problem, Problem::UndefinedVariable { .. }));
    assert_mentions(&err, &["undefined variable `j`", "y[0] = j"]);
}

#[test]
fn variable_used_before_its_declaration_is_undefined() {
    let x = Var::new("acc", DataType::F32);
    let out = Var::new("out", Type::pointer_to(DataType::F32.into()));
    let body = Stmt::seq(vec![
        Stmt::Store {
            tensor: out.clone(),
            indices: vec![Expr::int(0)],
            value: x.expr(),
        },
        Stmt::Declare {
            var: x.clone(),
            scope: Scope::Register,
            init: Some(Expr::f32(0.5)),
        },
    ]);
    let f = Function {
        name: "early_use".into(),
        kind: FunctionKind::CpuKernel,
        params: vec![out],
        ret: Type::Void,
        body,
    };
    let err = reject(&f, Target::Cpu);
    assert_mentions(&err, &["undefined variable `acc`", "out[0] = acc"]);
}

// ----- (c) scopes and features valid for the target -------------------------

#[test]
fn shared_tensor_in_cpu_kernel_is_rejected() {
    let mut fb = FunctionBuilder::cpu_kernel("cpu_with_smem");
    let x = fb.tensor_param("x", DataType::F32, [33]);
    let tile = fb.shared_tensor("tile", DataType::F32, row_major([33]));
    fb.for_range("i", 33, |fb, i| fb.store(&tile, [i.clone()], x.at([i])));
    let err = reject(&fb.finish(), Target::Cpu);
    assert!(matches!(&*err.problem, Problem::NotAvailable { .. }));
    assert_eq!(
        err.to_string(),
        "in function `cpu_with_smem`: shared memory (`shared tile`) is not available in CPU code\
         \n  at:\n    shared tile: f32[33]"
    );
}

#[test]
fn cuda_features_are_rejected_in_cpu_code() {
    let cases: Vec<(&str, Stmt, &str)> = vec![
        ("barrier", Stmt::Barrier(Barrier::Block), "sync_threads()"),
        (
            "shuffle",
            Stmt::Evaluate(Expr::call(
                Intrinsic::WarpShuffle {
                    kind: ShuffleKind::Down,
                    width: 32,
                },
                vec![Expr::f32(1.5), Expr::int(2)],
            )),
            "the CUDA intrinsic `shfl_down<32>`",
        ),
        (
            "builtin",
            Stmt::Assert {
                cond: tid().lt(7),
                message: "t".into(),
            },
            "the CUDA builtin `threadIdx.x`",
        ),
        (
            "cp_async_wait",
            Stmt::Evaluate(Expr::call(Intrinsic::CpAsyncWait { n: 0 }, vec![])),
            "cp_async_wait<0>",
        ),
    ];
    for (name, stmt, what) in cases {
        let f = Function {
            name: name.into(),
            kind: FunctionKind::CpuKernel,
            params: vec![],
            ret: Type::Void,
            body: stmt,
        };
        let err = reject(&f, Target::Cpu);
        assert!(
            matches!(&*err.problem, Problem::NotAvailable { .. }),
            "{err}"
        );
        assert_mentions(&err, &[what, "is not available in CPU code"]);
        // The same internal function is fine in a CUDA module.
        let internal = Function {
            kind: FunctionKind::Internal,
            ..f
        };
        assert_eq!(verify_function(&internal, Target::Cuda), Ok(()));
    }
}

#[test]
fn parallel_loop_in_cuda_kernel_is_rejected() {
    let mut fb = FunctionBuilder::cuda_kernel("par", [1, 1, 1], [32, 1, 1]);
    let x = fb.tensor_param("x", DataType::F32, [9]);
    fb.for_range_with("i", 9, LoopKind::Parallel, |fb, i| {
        fb.store(&x, [i], 1.0f32)
    });
    let err = reject(&fb.finish(), Target::Cuda);
    assert_eq!(*err.problem, Problem::ParallelInCuda);
    assert_mentions(&err, &["for i in range(9) parallel:"]);

    let mut fb = FunctionBuilder::cuda_kernel("par_mapping", [1, 1, 1], [32, 1, 1]);
    let x = fb.tensor_param("x", DataType::F32, [9]);
    let m = repeat_with([9], vec![0], vec![LoopKind::Parallel]).unwrap();
    fb.for_each(m.on(0), |fb, i| fb.store(&x, i, 1.0f32));
    let err = reject(&fb.finish(), Target::Cuda);
    assert_eq!(*err.problem, Problem::ParallelInCuda);
}

#[test]
fn launch_outside_host_launcher_is_rejected() {
    let kernel = cuda_kernel();
    let mut fb = FunctionBuilder::cuda_kernel("nested_launch", [1, 1, 1], [32, 1, 1]);
    let a = fb.param("a", Type::pointer_to(DataType::F16.into()));
    let o = fb.param("o", Type::pointer_to(DataType::F32.into()));
    fb.launch(&kernel, vec![a.expr(), o.expr()]);
    let err = reject(&fb.finish(), Target::Cuda);
    assert!(matches!(
        &*err.problem,
        Problem::LaunchOutsideHostLauncher { .. }
    ));
    assert_mentions(
        &err,
        &[
            "only allowed in host launchers, not in CUDA device code",
            "launch cuda_mma<<<(3, 1, 1), (128, 1, 1), 0>>>(a, o)",
        ],
    );
}

#[test]
fn function_kinds_must_suit_the_module_target() {
    let err = reject(&cuda_kernel(), Target::Cpu);
    assert_eq!(
        err.to_string(),
        "in function `cuda_mma`: a CUDA kernel cannot be part of a CPU module"
    );
    let err = reject(&cpu_kernel(), Target::Cuda);
    assert_mentions(&err, &["a CPU kernel cannot be part of a CUDA module"]);
}

// ----- (d) launch shape consistent with the mappings ------------------------

#[test]
fn mapping_with_more_workers_than_threads_is_rejected() {
    let mut fb = FunctionBuilder::cuda_kernel("too_wide", [1, 1, 1], [128, 1, 1]);
    let x = fb.tensor_param("x", DataType::F32, [16, 16]);
    fb.for_each(spatial([16, 16]).unwrap().on(tid()), |fb, ij| {
        fb.store(&x, ij, 0.5f32)
    });
    let err = reject(&fb.finish(), Target::Cuda);
    assert_eq!(
        *err.problem,
        Problem::TooManyWorkers {
            mapping: "spatial(16, 16)".into(),
            workers: 256,
            available: 128,
            provider: "the launch provides 128 threads".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "in function `too_wide`: mapping spatial(16, 16) has 256 workers but the launch \
         provides 128 threads\n  at:\n    for (i, j) in spatial(16, 16) on threadIdx.x:"
    );
}

#[test]
fn warp_and_lane_mappings_are_bounded_by_interval_reasoning() {
    // 160 threads = 5 warps; a mapping over 6 warps is one too many.
    let mut fb = FunctionBuilder::cuda_kernel("warps", [1, 1, 1], [160, 1, 1]);
    let x = fb.tensor_param("x", DataType::F32, [6]);
    fb.for_each(spatial([6]).unwrap().on(tid() / 32), |fb, w| {
        fb.store(&x, w, 1.0f32)
    });
    let err = reject(&fb.finish(), Target::Cuda);
    assert_mentions(
        &err,
        &[
            "mapping spatial(6) has 6 workers but the launch provides 5 workers for `threadIdx.x / 32`",
            "for i in spatial(6) on threadIdx.x / 32:",
        ],
    );

    // Lanes: threadIdx.x % 32 gives 32 workers; 2 * 17 is too many.
    let mut fb = FunctionBuilder::cuda_kernel("lanes", [1, 1, 1], [64, 1, 1]);
    let x = fb.tensor_param("x", DataType::F32, [2, 17]);
    fb.for_each(spatial([2, 17]).unwrap().on(tid() % 32), |fb, ij| {
        fb.store(&x, ij, 1.0f32)
    });
    let err = reject(&fb.finish(), Target::Cuda);
    assert!(matches!(
        &*err.problem,
        Problem::TooManyWorkers {
            workers: 34,
            available: 32,
            ..
        }
    ));

    // threadIdx.y is bounded by the block's y extent.
    let mut fb = FunctionBuilder::cuda_kernel("rows", [1, 1, 1], [32, 3, 1]);
    let x = fb.tensor_param("x", DataType::F32, [4]);
    fb.for_each(
        spatial([4]).unwrap().on(Expr::thread_idx(Dim::Y)),
        |fb, i| fb.store(&x, i, 1.0f32),
    );
    let err = reject(&fb.finish(), Target::Cuda);
    assert_mentions(&err, &["the launch provides 3 values of threadIdx.y"]);
}

#[test]
fn cpu_mapping_on_a_loop_variable_is_bounded_by_the_extent() {
    let mut fb = FunctionBuilder::cpu_kernel("cpu_too_wide");
    let x = fb.tensor_param("x", DataType::F32, [30]);
    let m = spatial([6]).unwrap() * repeat([5]).unwrap();
    fb.for_range_with("t", 5, LoopKind::Parallel, |fb, t| {
        fb.for_each(m.on(t), |fb, i| fb.store(&x, i, 2.0f32));
    });
    let err = reject(&fb.finish(), Target::Cpu);
    assert_mentions(
        &err,
        &[
            "mapping spatial(6) * repeat(5) has 6 workers but the loop over `t` provides 5 workers",
            "for t in range(5) parallel:\n        for i in spatial(6) * repeat(5) on t:",
        ],
    );
}

#[test]
fn mapping_bound_through_let_and_nested_mapping_variables() {
    let mut fb = FunctionBuilder::cpu_kernel("nested");
    let x = fb.tensor_param("x", DataType::F32, [12]);
    fb.for_each(repeat([3]).unwrap().on(0), |fb, r| {
        fb.let_in("w", &r[0] * 2 + 1, |fb, w| {
            // w ranges over 1..=5, so 6 workers are available, 7 are not.
            fb.for_each(spatial([6]).unwrap().on(w.clone()), |fb, i| {
                fb.store(&x, i, 1.0f32)
            });
            fb.for_each(spatial([7]).unwrap().on(w), |fb, i| fb.store(&x, i, 1.0f32));
        });
    });
    let err = reject(&fb.finish(), Target::Cpu);
    assert_mentions(
        &err,
        &["mapping spatial(7) has 7 workers but the worker `w` takes at most 6 values"],
    );
}

/// A worker expression over `t = threadIdx.x`, built both as IR and as an
/// independent Rust function.
#[derive(Clone, Debug)]
enum WorkerForm {
    Div(i64),
    Mod(i64),
    DivMod(i64, i64),
    ShrMask(i64, i64),
    Affine(i64, i64),
    MinWith(i64),
}

impl WorkerForm {
    fn expr(&self) -> Expr {
        match *self {
            WorkerForm::Div(k) => tid() / k,
            WorkerForm::Mod(k) => tid() % k,
            WorkerForm::DivMod(k, m) => tid() / k % m,
            WorkerForm::ShrMask(s, m) => (tid() >> s) & m,
            WorkerForm::Affine(a, b) => tid() * a + b,
            WorkerForm::MinWith(c) => tid().min(c),
        }
    }

    fn eval(&self, t: i64) -> i64 {
        match *self {
            WorkerForm::Div(k) => t.div_euclid(k),
            WorkerForm::Mod(k) => t.rem_euclid(k),
            WorkerForm::DivMod(k, m) => t.div_euclid(k).rem_euclid(m),
            WorkerForm::ShrMask(s, m) => (t >> s) & m,
            WorkerForm::Affine(a, b) => t * a + b,
            WorkerForm::MinWith(c) => t.min(c),
        }
    }

    /// Whether interval reasoning finds the exact maximum of this form.
    fn tight(&self) -> bool {
        match *self {
            WorkerForm::ShrMask(_, m) => (m + 1) & m == 0,
            _ => true,
        }
    }
}

fn worker_form() -> impl Strategy<Value = WorkerForm> {
    prop_oneof![
        (1i64..70).prop_map(WorkerForm::Div),
        (1i64..70).prop_map(WorkerForm::Mod),
        (1i64..40, 1i64..9).prop_map(|(k, m)| WorkerForm::DivMod(k, m)),
        (0i64..6, 0i64..40).prop_map(|(s, m)| WorkerForm::ShrMask(s, m)),
        (1i64..4, 0i64..5).prop_map(|(a, b)| WorkerForm::Affine(a, b)),
        (0i64..300).prop_map(WorkerForm::MinWith),
    ]
}

proptest! {
    /// The verifier never rejects a mapping that the workers can cover
    /// (checked against the brute-force maximum of the worker expression over
    /// every thread), and for forms whose bound interval arithmetic gets
    /// exactly, it rejects every mapping that they cannot.
    #[test]
    fn worker_bounds_match_brute_force(
        block in 1i64..300,
        form in worker_form(),
        shape in proptest::collection::vec(1i64..9, 1..3),
    ) {
        let available = (0..block).map(|t| form.eval(t)).max().unwrap_or(-1) + 1;
        let mapping = spatial(shape.clone()).unwrap();
        let mut fb = FunctionBuilder::cuda_kernel("k", [1, 1, 1], [block, 1, 1]);
        let x = fb.tensor_param("x", DataType::F32, shape.clone());
        fb.for_each(mapping.on(form.expr()), |fb, idx| fb.store(&x, idx, 1.0f32));
        let verdict = verify_function(&fb.finish(), Target::Cuda);
        let workers: i64 = shape.iter().product();
        if workers <= available {
            prop_assert_eq!(verdict, Ok(()));
        } else if form.tight() {
            let err = verdict.expect_err("too many workers must be rejected");
            let is_too_many = matches!(
                &*err.problem,
                Problem::TooManyWorkers { workers: w, available: a, .. }
                    if *w == workers && *a == available
            );
            prop_assert!(is_too_many, "{}", err);
        }
    }
}

// ----- (a) types --------------------------------------------------------------

/// A CPU kernel with parameters `x: f32[7, 9]`, `v: f32x4`, `p: i32*`, `n: i32`
/// whose body is `body(x, v, p, n)`.
fn kernel_with(body: impl FnOnce(&mut FunctionBuilder, &Var, &Var, &Var, &Var)) -> Function {
    let mut fb = FunctionBuilder::cpu_kernel("typed");
    let x = fb.tensor_param("x", DataType::F32, [7, 9]);
    let v = fb.param("v", DataType::F32X4);
    let p = fb.param("p", Type::pointer_to(DataType::I32.into()));
    let n = fb.param("n", DataType::I32);
    body(&mut fb, &x, &v, &p, &n);
    fb.finish()
}

#[test]
fn int_float_mix_without_cast_is_rejected() {
    let f = kernel_with(|fb, x, _, _, n| {
        fb.for_range("i", 7, |fb, i| {
            fb.store(x, [i.clone(), Expr::int(0)], x.at([i, Expr::int(1)]) + n)
        })
    });
    let err = reject(&f, Target::Cpu);
    assert!(matches!(
        &*err.problem,
        Problem::IncompatibleOperands { .. }
    ));
    assert_mentions(
        &err,
        &[
            "operands of `+` have incompatible types: `x[i, 1]` is f32 but `n` is i32",
            "for i in range(7):\n        x[i, 0] = x[i, 1] + n",
        ],
    );
    // With a cast it is fine.
    let ok = kernel_with(|fb, x, _, _, n| {
        fb.store(x, [0, 0], x.at([0, 1]) + n.expr().cast(DataType::F32))
    });
    assert_eq!(verify_function(&ok, Target::Cpu), Ok(()));
}

#[test]
fn float_constant_with_integer_and_mismatched_lanes_are_rejected() {
    let f = kernel_with(|fb, _, _, p, n| fb.store(p, [0], n * 0.5f32));
    let err = reject(&f, Target::Cpu);
    assert_mentions(&err, &["operands of `*`", "`n` is i32 but `0.5` is f32"]);

    let f = kernel_with(|fb, _, v, _, _| {
        let w = fb.var("w", Expr::zero(DataType::F32X8));
        fb.assign(&w, &w + v);
    });
    let err = reject(&f, Target::Cpu);
    assert_mentions(&err, &["`w` is f32x8 but `v` is f32x4", "w = w + v"]);

    let ok = kernel_with(|fb, _, v, _, _| {
        let w = fb.var("w", v.expr());
        fb.assign(&w, &w * Expr::f32(3.0) + v);
    });
    assert_eq!(verify_function(&ok, Target::Cpu), Ok(()));
}

#[test]
fn conditions_must_be_bool() {
    let f = kernel_with(|fb, x, _, _, n| fb.if_then(n, |fb| fb.store(x, [0, 0], 1.0f32)));
    let err = reject(&f, Target::Cpu);
    assert_mentions(
        &err,
        &[
            "`n` has type i32, but a scalar bool condition is required here",
            "at:\n    if n:",
        ],
    );

    let f = kernel_with(|fb, _, _, p, n| fb.store(p, [0], Expr::select(n, 1, 2)));
    assert_mentions(
        &reject(&f, Target::Cpu),
        &["`n` has type i32", "p[0] = select(n, 1, 2)"],
    );

    let f = kernel_with(|fb, _, _, _, n| fb.assert(n - 1, "n must be 1"));
    assert_mentions(
        &reject(&f, Target::Cpu),
        &["`n - 1` has type i32", "assert n - 1, \"n must be 1\""],
    );
}

#[test]
fn stored_values_must_match_the_element_type() {
    let f = kernel_with(|fb, x, _, _, n| {
        fb.store(
            x,
            [n.expr(), Expr::int(2)],
            n.expr().cast(DataType::F64) * 1.25,
        )
    });
    let err = reject(&f, Target::Cpu);
    assert!(matches!(&*err.problem, Problem::ValueMismatch { .. }));
    assert_mentions(
        &err,
        &[
            "an element of `x` has type f32, but the value `cast<f64>(n) * 1.25` has type f64",
            "x[n, 2] = cast<f64>(n) * 1.25",
        ],
    );
    // A constant of another float type converts.
    let ok = kernel_with(|fb, x, _, _, _| fb.store(x, [0, 2], Expr::float_of(1.25, DataType::F64)));
    assert_eq!(verify_function(&ok, Target::Cpu), Ok(()));

    let f = kernel_with(|fb, _, _, p, _| fb.store(p, [1], Expr::f32(3.5)));
    assert_mentions(
        &reject(&f, Target::Cpu),
        &["an element of `p` has type i32"],
    );
}

#[test]
fn element_access_needs_one_index_per_dimension() {
    let f = kernel_with(|fb, x, _, p, _| fb.store(p, [0], x.at([3]).cast(DataType::I32)));
    let err = reject(&f, Target::Cpu);
    assert_eq!(
        *err.problem,
        Problem::IndexCount {
            tensor: "x".into(),
            ty: "f32[7, 9]".into(),
            rank: 2,
            got: 1
        }
    );
    assert_mentions(&err, &["p[0] = cast<i32>(x[3])"]);

    let f = kernel_with(|fb, _, _, p, _| fb.store(p, [1, 2], 5));
    assert_mentions(
        &reject(&f, Target::Cpu),
        &["`p` of type i32* has rank 1 but is indexed with 2"],
    );

    let f = kernel_with(|fb, x, v, _, _| fb.store(x, [v.expr(), Expr::int(0)], 1.0f32));
    assert_mentions(
        &reject(&f, Target::Cpu),
        &["`v` has type f32x4, but an integer index"],
    );
}

#[test]
fn assignments_need_mutable_scalar_variables() {
    let f = kernel_with(|fb, x, _, _, _| fb.assign(x, Expr::f32(0.0)));
    let err = reject(&f, Target::Cpu);
    assert!(matches!(&*err.problem, Problem::AssignNonScalar { .. }));
    assert_mentions(
        &err,
        &["`x` of type f32[7, 9] cannot be assigned", "x = 0.0"],
    );

    let f = kernel_with(|fb, _, _, _, _| {
        fb.for_range("i", 3, |fb, i| {
            let i = i.as_var().cloned().expect("a loop variable");
            fb.assign(&i, 2);
        })
    });
    assert_mentions(
        &reject(&f, Target::Cpu),
        &["`i` is bound by a `let`, a loop or a task mapping"],
    );
}

#[test]
fn math_and_intrinsic_arity_is_checked() {
    let f = kernel_with(|fb, x, _, _, _| {
        fb.store(x, [0, 0], Expr::math(MathFunc::Max, vec![Expr::f32(1.0)]))
    });
    let err = reject(&f, Target::Cpu);
    assert_eq!(
        *err.problem,
        Problem::Arity {
            func: "max".into(),
            expected: 2,
            got: 1
        }
    );
    assert_mentions(&err, &["x[0, 0] = max(1.0)"]);

    let f = kernel_with(|fb, x, _, _, n| fb.store(x, [0, 0], n.expr().exp()));
    assert_mentions(&reject(&f, Target::Cpu), &["a float argument of `exp`"]);

    let f =
        kernel_with(|fb, x, _, _, _| fb.call(Intrinsic::VectorStore, vec![x.at([0, 0]).address()]));
    assert_mentions(
        &reject(&f, Target::Cpu),
        &["`vector_store` takes 2 argument(s) but is given 1"],
    );
}

#[test]
fn return_values_must_match_the_signature() {
    let mut fb = FunctionBuilder::internal("half_of", DataType::F32);
    let x = fb.param("x", DataType::I32);
    fb.ret(&x / 2);
    let err = reject(&fb.finish(), Target::Cpu);
    assert_mentions(
        &err,
        &["the result of `half_of` has type f32", "return x / 2"],
    );
}

// ----- (e) memory -------------------------------------------------------------

#[test]
fn register_tensors_need_constant_shapes() {
    let mut fb = FunctionBuilder::cpu_kernel("dyn_regs");
    let n = fb.param("n", DataType::I32);
    let r = fb.register_tensor("acc", DataType::F32, row_major([n.expr(), Expr::int(4)]));
    fb.store(&r, [0, 0], 1.0f32);
    let err = reject(&fb.finish(), Target::Cpu);
    assert_eq!(
        err.to_string(),
        "in function `dyn_regs`: register tensor `acc` of type f32[n, 4] needs a constant shape\
         \n  at:\n    register acc: f32[n, 4]"
    );
}

#[test]
fn shared_memory_beyond_the_limit_is_reported_in_bytes() {
    let mut fb = FunctionBuilder::cuda_kernel("big_smem", [1, 1, 1], [256, 1, 1]);
    fb.dynamic_shared_bytes(1000);
    // 127 * 257 * 4 = 130556 bytes each: the second one crosses 228 KiB.
    let a = fb.shared_tensor("sa", DataType::F32, row_major([127, 257]));
    let b = fb.shared_tensor("sb", DataType::F32, row_major([127, 257]));
    fb.store(&a, [0, 0], 0.0f32);
    fb.store(&b, [0, 0], 0.0f32);
    let err = reject(&fb.finish(), Target::Cuda);
    let expected_bytes = 2 * 127 * 257 * 4 + 1000;
    assert!(expected_bytes > MAX_SHARED_BYTES);
    assert_eq!(
        *err.problem,
        Problem::SharedMemoryExceeded {
            bytes: expected_bytes,
            dynamic: 1000,
            limit: 233472
        }
    );
    assert_mentions(&err, &["262112 bytes", "shared sb: f32[127, 257]"]);

    // One of them fits.
    let mut fb = FunctionBuilder::cuda_kernel("ok_smem", [1, 1, 1], [256, 1, 1]);
    let a = fb.shared_tensor("sa", DataType::F32, row_major([127, 257]));
    fb.store(&a, [0, 0], 0.0f32);
    assert_eq!(verify_function(&fb.finish(), Target::Cuda), Ok(()));
}

#[test]
fn oversized_blocks_are_rejected() {
    let f = FunctionBuilder::cuda_kernel("huge_block", [1, 1, 1], [64, 32, 1]).finish();
    assert_eq!(
        reject(&f, Target::Cuda).to_string(),
        "in function `huge_block`: CUDA block (64, 32, 1) has 2048 threads; a block needs 1 to 1024 threads"
    );
    let f = FunctionBuilder::cuda_kernel("overflowing", [1, 1, 1], [i64::MAX, 3, 0]).finish();
    assert!(matches!(
        *reject(&f, Target::Cuda).problem,
        Problem::BadBlock { .. }
    ));
}

// ----- module-level checks ------------------------------------------------------

#[test]
fn module_checks_launches_calls_and_names() {
    let kernel = cuda_kernel();
    let mut host = FunctionBuilder::host_launcher("launch");
    let a = host.param("a", Type::pointer_to(DataType::F16.into()));
    host.launch(&kernel, vec![a.expr()]);
    let m = IRModule::new("m", Target::Cuda)
        .with(kernel.clone())
        .with(host.finish());
    let err = verify_module(&m).expect_err("one argument is missing");
    assert_mentions(
        &err,
        &[
            "in function `launch`: launch of `cuda_mma`: the kernel takes 2 argument(s) but is given 1",
            "launch cuda_mma<<<",
        ],
    );

    let mut caller = FunctionBuilder::cpu_kernel("caller");
    let out = caller.tensor_param("out", DataType::F32, [3]);
    let call = Expr::call(
        Intrinsic::Function {
            name: "missing".into(),
            ret: DataType::F32.into(),
        },
        vec![Expr::f32(1.0)],
    );
    caller.store(&out, [2], call);
    let m = IRModule::new("c", Target::Cpu).with(caller.finish());
    assert_mentions(
        &verify_module(&m).expect_err("the callee does not exist"),
        &["call of `missing`: the module has no function of that name"],
    );

    let m = IRModule::new("dup", Target::Cuda)
        .with(kernel.clone())
        .with(kernel);
    assert_eq!(
        verify_module(&m).expect_err("duplicate").to_string(),
        "in function `cuda_mma`: the module has more than one function named `cuda_mma`"
    );
}
