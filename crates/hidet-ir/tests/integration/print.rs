//! Golden tests of the IR printer: exact text for small kernels, and every
//! expression, statement, type and function kind.

use hidet_ir::expr::Dim;
use hidet_ir::prelude::*;
use hidet_ir::print::Printer;

fn i32_var(name: &str) -> Var {
    Var::new(name, DataType::I32)
}

#[test]
fn cuda_kernel_golden() {
    let mut fb = FunctionBuilder::cuda_kernel("scale_rows", [5, 1, 1], [128, 1, 1]);
    let a = fb.tensor_param("a", DataType::F32, [37, 64]);
    let b = fb.tensor_param("b", DataType::F32, [37, 64]);
    let alpha = fb.param("alpha", DataType::F32);
    let tile = fb.shared_tensor("tile", DataType::F32, row_major([8, 64]));
    let rows = repeat([4, 1]).unwrap() * spatial([2, 64]).unwrap();
    let row0 = Expr::block_idx(Dim::X) * 8;
    fb.for_each(rows.on(Expr::thread_idx(Dim::X)), |fb, ij| {
        let r = &row0 + &ij[0];
        fb.if_then(r.lt(37), |fb| {
            fb.store(&tile, [&ij[0], &ij[1]], a.at([r.clone(), ij[1].clone()]));
        });
    });
    fb.sync_threads();
    fb.for_each(rows.on(Expr::thread_idx(Dim::X)), |fb, ij| {
        let r = &row0 + &ij[0];
        fb.if_then(r.lt(37), |fb| {
            fb.store(
                &b,
                [r.clone(), ij[1].clone()],
                tile.at([&ij[0], &ij[1]]) * &alpha,
            );
        });
    });
    let expected = "\
@cuda_kernel(grid=(5, 1, 1), block=(128, 1, 1), dynamic_shared_bytes=0)
def scale_rows(a: f32[37, 64], b: f32[37, 64], alpha: f32):
    shared tile: f32[8, 64]
    for (i, j) in repeat(4, 1) * spatial(2, 64) on threadIdx.x:
        if blockIdx.x * 8 + i < 37:
            tile[i, j] = a[blockIdx.x * 8 + i, j]
    sync_threads()
    for (i_1, j_1) in repeat(4, 1) * spatial(2, 64) on threadIdx.x:
        if blockIdx.x * 8 + i_1 < 37:
            b[blockIdx.x * 8 + i_1, j_1] = tile[i_1, j_1] * alpha";
    assert_eq!(fb.finish().to_string(), expected);
}

#[test]
fn cpu_kernel_golden() {
    let mut fb = FunctionBuilder::cpu_kernel("row_sum");
    let n = fb.param("n", DataType::I32);
    let x = fb.tensor_param("x", DataType::F32, [n.expr(), Expr::int(13)]);
    let y = fb.tensor_param("y", DataType::F32, [n.expr()]);
    let per_thread = (&n + 3) / 4;
    fb.for_range_with("t", 4, LoopKind::Parallel, |fb, t| {
        fb.for_range("i", per_thread.clone(), |fb, i| {
            fb.let_in("r", t * per_thread.clone() + i, |fb, r| {
                fb.if_then(r.lt(&n), |fb| {
                    let acc = fb.var("acc", Expr::f32(0.0));
                    fb.for_range_with("j", 13, LoopKind::Unroll(None), |fb, j| {
                        fb.assign(&acc, acc.expr() + x.at([r.clone(), j]));
                    });
                    fb.store(&y, [r.clone()], &acc);
                });
            });
        });
    });
    let expected = "\
@cpu_kernel
def row_sum(n: i32, x: f32[n, 13], y: f32[n]):
    for t in range(4) parallel:
        for i in range((n + 3) / 4):
            let r: i32 = t * ((n + 3) / 4) + i in
                if r < n:
                    register acc: f32 = 0.0
                    for j in range(13) unroll:
                        acc = acc + x[r, j]
                    y[r] = acc";
    assert_eq!(fb.finish().to_string(), expected);
}

#[test]
fn module_prints_every_function_kind() {
    let mut k = FunctionBuilder::cuda_kernel("k", [3, 2, 1], [64, 2, 1]);
    k.dynamic_shared_bytes(4096);
    k.min_blocks_per_sm(2);
    let p = k.param("p", Type::pointer_to(DataType::F16.into()));
    k.push(Stmt::Store {
        tensor: p.clone(),
        indices: vec![Expr::thread_idx(Dim::Y)],
        value: Expr::float_of(1.5, DataType::F16),
    });
    let kernel = k.finish();
    let mut h = FunctionBuilder::host_launcher("launch_k");
    let hp = h.param("p", Type::pointer_to(DataType::F16.into()));
    h.launch(&kernel, vec![hp.expr()]);
    let mut d = FunctionBuilder::internal("twice", DataType::I64);
    let x = d.param("x", DataType::I64);
    d.ret(&x * Expr::int_of(2, DataType::I64));
    let m = IRModule::new("demo", Target::Cuda)
        .with(kernel)
        .with(h.finish())
        .with(d.finish());
    let expected = "\
# module demo (target: cuda)

@cuda_kernel(grid=(3, 2, 1), block=(64, 2, 1), dynamic_shared_bytes=4096, min_blocks_per_sm=2)
def k(p: f16*):
    p[threadIdx.y] = 1.5f16

@host_launcher
def launch_k(p: f16*):
    launch k<<<(3, 2, 1), (64, 2, 1), 4096>>>(p)

@internal
def twice(x: i64) -> i64:
    return x * 2i64";
    assert_eq!(m.to_string(), expected);

    let cpu = FunctionBuilder::cpu_kernel("empty").finish();
    assert_eq!(cpu.to_string(), "@cpu_kernel\ndef empty():\n    pass");
}

#[test]
fn every_expression_kind_prints() {
    let (a, b, c) = (i32_var("a"), i32_var("b"), i32_var("c"));
    let f = Var::new("f", DataType::F32);
    let p = Var::new("p", DataType::BOOL);
    let v = Var::new("v", DataType::F32X4);
    let t = Var::new("t", Type::tensor(DataType::F32, row_major([5, 7])));
    let cases: Vec<(Expr, &str)> = vec![
        (Expr::int(42), "42"),
        (Expr::int(-3), "-3"),
        (Expr::int_of(7, DataType::I64), "7i64"),
        (Expr::int_of(9, DataType::U8), "9u8"),
        (Expr::f32(0.1), "0.1"),
        (Expr::f32(3.0), "3.0"),
        (Expr::f32(1e-7), "1e-7"),
        (Expr::float_of(f64::NEG_INFINITY, DataType::F32), "-inf"),
        (Expr::float_of(0.25, DataType::F64), "0.25f64"),
        (Expr::float_of(2.0, DataType::BF16), "2.0bf16"),
        (Expr::bool(true), "true"),
        (a.expr(), "a"),
        (Expr::builtin(Builtin::BlockDim(Dim::Z)), "blockDim.z"),
        (Expr::builtin(Builtin::GridDim(Dim::Y)), "gridDim.y"),
        (-a.expr(), "-a"),
        (-Expr::int(-3), "-(-3)"),
        (-(&a + 1), "-(a + 1)"),
        (!p.expr(), "!p"),
        (Expr::new(ExprKind::Unary(UnaryOp::BitNot, a.expr())), "~a"),
        ((&a + &b) * &c, "(a + b) * c"),
        (&a + &b * &c, "a + b * c"),
        (&a - (&b - &c), "a - (b - c)"),
        ((&a - &b) - &c, "a - b - c"),
        (&a / &b % &c, "a / b % c"),
        (&a / (&b % &c), "a / (b % c)"),
        ((&a & 7).eq(0), "(a & 7) == 0"),
        ((&a + &b) << 2, "(a + b) << 2"),
        ((&a >> 1) ^ &b, "(a >> 1) ^ b"),
        (&a | &b | &c, "a | b | c"),
        (a.expr().lt(&b).and(b.expr().ge(&c)), "a < b && b >= c"),
        (
            a.expr().ne(1).or(p.expr().and(b.expr().le(2))),
            "a != 1 || p && b <= 2",
        ),
        (a.expr().gt(&b).eq(p.expr()), "a > b == p"),
        (Expr::select(&p, &a, 0), "select(p, a, 0)"),
        (f.expr().cast(DataType::F16), "cast<f16>(f)"),
        (f.expr().broadcast(4), "broadcast<4>(f)"),
        (f.expr().exp(), "exp(f)"),
        (f.expr().fma(&f, 1.0f32), "fma(f, f, 1.0)"),
        (f.expr().max(Expr::f32(0.0)), "max(f, 0.0)"),
        (Expr::math(MathFunc::IsNan, vec![f.expr()]), "isnan(f)"),
        (
            Expr::call(
                Intrinsic::WarpShuffle {
                    kind: ShuffleKind::Xor,
                    width: 32,
                },
                vec![f.expr(), Expr::int(16)],
            ),
            "shfl_xor<32>(f, 16)",
        ),
        (
            Expr::call(
                Intrinsic::VectorLoad {
                    dtype: DataType::F32X4,
                },
                vec![t.at([&a, &b]).address()],
            ),
            "vector_load<f32x4>(&t[a, b])",
        ),
        (
            Expr::call(
                Intrinsic::Function {
                    name: "helper".into(),
                    ret: DataType::F32.into(),
                },
                vec![f.expr(), v.expr()],
            ),
            "helper(f, v)",
        ),
        (t.at([&a + 1, b.expr()]), "t[a + 1, b]"),
        (t.at([&a, &b]).address(), "&t[a, b]"),
        (
            Expr::call(Intrinsic::CpAsyncCommit, vec![]),
            "cp_async_commit()",
        ),
    ];
    for (e, text) in cases {
        assert_eq!(e.to_string(), text, "{e:?}");
    }
}

#[test]
fn every_statement_kind_prints() {
    let i = i32_var("i");
    let x = Var::new("x", DataType::F32);
    let t = Var::new("t", Type::tensor(DataType::F32, row_major([6, 10])));
    let body = Stmt::Assign {
        var: x.clone(),
        value: Expr::f32(2.5),
    };
    let cases: Vec<(Stmt, &str)> = vec![
        (
            Stmt::Declare {
                var: x.clone(),
                scope: Scope::Register,
                init: None,
            },
            "register x: f32",
        ),
        (
            Stmt::Declare {
                var: t.clone(),
                scope: Scope::Global,
                init: Some(Expr::int(0)),
            },
            "global t: f32[6, 10] = 0",
        ),
        (
            Stmt::Store {
                tensor: t.clone(),
                indices: vec![i.expr(), Expr::int(3)],
                value: x.expr(),
            },
            "t[i, 3] = x",
        ),
        (body.clone(), "x = 2.5"),
        (
            Stmt::Let {
                var: i.clone(),
                value: Expr::int(4),
                body: Box::new(body.clone()),
            },
            "let i: i32 = 4 in\n    x = 2.5",
        ),
        (
            Stmt::For {
                var: i.clone(),
                extent: Expr::int(8),
                kind: LoopKind::Unroll(Some(4)),
                body: Box::new(body.clone()),
            },
            "for i in range(8) unroll(4):\n    x = 2.5",
        ),
        (
            Stmt::For {
                var: i.clone(),
                extent: Expr::int(16),
                kind: LoopKind::Vectorize,
                body: Box::new(Stmt::nop()),
            },
            "for i in range(16) vectorize:\n    pass",
        ),
        (
            Stmt::ForMapping {
                vars: vec![i.clone()],
                mapping: repeat_with([3], vec![0], vec![LoopKind::Unroll(None)]).unwrap()
                    * spatial_ranked([4], vec![0]).unwrap(),
                worker: Expr::thread_idx(Dim::X) % 32,
                body: Box::new(body.clone()),
            },
            "for i in repeat(3, attrs=[unroll]) * spatial(4) on threadIdx.x % 32:\n    x = 2.5",
        ),
        (
            Stmt::ForMapping {
                vars: vec![i32_var("p"), i32_var("q")],
                mapping: column_spatial([2, 3]).unwrap(),
                worker: Expr::int(0),
                body: Box::new(body.clone()),
            },
            "for (p, q) in spatial(2, 3, ranks=[1, 0]) on 0:\n    x = 2.5",
        ),
        (
            Stmt::If {
                cond: i.expr().lt(3),
                then_body: Box::new(body.clone()),
                else_body: Some(Box::new(Stmt::If {
                    cond: i.expr().lt(5),
                    then_body: Box::new(Stmt::Return(None)),
                    else_body: Some(Box::new(Stmt::Barrier(Barrier::Warp))),
                })),
            },
            "if i < 3:\n    x = 2.5\nelif i < 5:\n    return\nelse:\n    sync_warp()",
        ),
        (
            Stmt::seq(vec![Stmt::Barrier(Barrier::Block), body.clone()]),
            "sync_threads()\nx = 2.5",
        ),
        (Stmt::nop(), ""),
        (
            Stmt::Evaluate(Expr::call(Intrinsic::CpAsyncWait { n: 1 }, vec![])),
            "cp_async_wait<1>()",
        ),
        (
            Stmt::Assert {
                cond: i.expr().ge(0),
                message: "i is \"negative\"".into(),
            },
            "assert i >= 0, \"i is \\\"negative\\\"\"",
        ),
        (
            Stmt::Launch {
                kernel: "gemm".into(),
                grid: [i.expr(), Expr::int(1), Expr::int(1)],
                block: [Expr::int(256), Expr::int(1), Expr::int(1)],
                shared_bytes: Expr::int(0),
                args: vec![i.expr(), t.expr()],
            },
            "launch gemm<<<(i, 1, 1), (256, 1, 1), 0>>>(i, t)",
        ),
        (Stmt::Return(Some(&i * 2)), "return i * 2"),
    ];
    for (s, text) in cases {
        assert_eq!(s.to_string(), text, "{s:?}");
    }
}

#[test]
fn types_and_layouts_print_with_their_structure() {
    let n = i32_var("n");
    let mut p = Printer::new();
    let cases: Vec<(Type, &str)> = vec![
        (DataType::F32X8.into(), "f32x8"),
        (Type::Void, "void"),
        (
            Type::pointer_to(Type::pointer_to(DataType::U32.into())),
            "u32**",
        ),
        (
            Type::tensor(DataType::F16, row_major([n.expr(), Expr::int(7)])),
            "f16[n, 7]",
        ),
        (
            Type::tensor(DataType::F32, column_major([3, 5])),
            "tensor<f32, column_major(3, 5)>",
        ),
        (
            Type::tensor(DataType::F32, strided([3, 5], [1, 4]).unwrap()),
            "tensor<f32, strided([3, 5], [1, 4])>",
        ),
        (
            Type::tensor(DataType::F32, local([4, 2]) * row_major([3, 3])),
            "tensor<f32, local(4, 2) * row_major(3, 3)>",
        ),
        (
            Type::tensor(DataType::F16, swizzle(row_major([8, 64]), 1, 0, 1).unwrap()),
            "tensor<f16, swizzle(row_major(8, 64), dim=1, regards=0, log_step=1)>",
        ),
    ];
    for (ty, text) in cases {
        assert_eq!(p.ty(&ty), text);
    }
}

#[test]
fn distinct_variables_sharing_a_name_get_suffixes() {
    let i = i32_var("i");
    let i_again = i32_var("i");
    let literal = i32_var("i_1");
    let unnamed = i32_var("");
    let mut p = Printer::new();
    assert_eq!(p.expr(&(&i + &i_again)), "i + i_1");
    // A later variable literally called `i_1` must not collide.
    assert_eq!(p.expr(&(&literal * &i)), "i_1_1 * i");
    assert_eq!(p.name(&unnamed), "v");
    assert_eq!(p.name(&i_again), "i_1");
}

#[test]
fn statement_paths_show_enclosing_headers() {
    let i = i32_var("i");
    let x = Var::new("x", DataType::F32);
    let assign = Stmt::Assign {
        var: x.clone(),
        value: Expr::f32(1.0),
    };
    let lp = Stmt::For {
        var: i.clone(),
        extent: Expr::int(9),
        kind: LoopKind::Serial,
        body: Box::new(Stmt::Seq(vec![
            Stmt::Barrier(Barrier::Block),
            Stmt::If {
                cond: i.expr().lt(2),
                then_body: Box::new(assign.clone()),
                else_body: Some(Box::new(assign)),
            },
        ])),
    };
    let Stmt::For { body, .. } = &lp else {
        unreachable!("built as a loop above")
    };
    let Stmt::Seq(children) = body.as_ref() else {
        unreachable!("built as a sequence above")
    };
    let Stmt::If {
        then_body,
        else_body: Some(else_body),
        ..
    } = &children[1]
    else {
        unreachable!("built as an if/else above")
    };
    let mut p = Printer::new();
    assert_eq!(
        p.stmt_path(&[&lp, body, &children[1], else_body]),
        "for i in range(9):\n    if i < 2: … else:\n        x = 1.0"
    );
    assert_eq!(
        p.stmt_path(&[&lp, body, &children[1], then_body]),
        "for i in range(9):\n    if i < 2:\n        x = 1.0"
    );
    assert_eq!(p.stmt_path(&[&lp]), "for i in range(9):");
    assert_eq!(p.stmt_head(body), "<sequence of 2 statements>");
}

#[test]
fn printer_for_function_reuses_the_dump_names() {
    let mut fb = FunctionBuilder::cpu_kernel("twice_i");
    let out = fb.tensor_param("out", DataType::I32, [12]);
    fb.for_range("i", 6, |fb, i| fb.store(&out, [i.clone()], i));
    let mut captured = None;
    fb.for_range("i", 6, |fb, i| {
        captured = i.as_var().cloned();
        fb.store(&out, [&i + 6], &i * 2)
    });
    let f = fb.finish();
    let second_i = captured.expect("the loop variable is a variable");
    let mut p = Printer::for_function(&f);
    assert_eq!(p.expr(&second_i.expr()), "i_1");
    assert!(f
        .to_string()
        .contains("for i_1 in range(6):\n        out[i_1 + 6] = i_1 * 2"));
}
