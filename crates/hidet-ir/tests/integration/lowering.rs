//! Lowering of task mappings: the generated index arithmetic is as small as
//! hand-written code, bound checks appear exactly when needed, and the
//! lowered function computes what the original computes (interpreter).

use hidet_ir::interp::{run_cuda_block, run_function, Arg, Buffer};
use hidet_ir::passes::{lower_function, PassError};
use hidet_ir::prelude::*;

fn count(s: &Stmt, pred: &mut impl FnMut(&Expr) -> bool) -> usize {
    let mut n = 0;
    s.visit(&mut |s| {
        for e in s.exprs() {
            e.visit(&mut |x| {
                if pred(x) {
                    n += 1;
                }
            });
        }
    });
    n
}

fn stmts(s: &Stmt, pred: &mut impl FnMut(&Stmt) -> bool) -> usize {
    let mut n = 0;
    s.visit(&mut |s| {
        if pred(s) {
            n += 1;
        }
    });
    n
}

fn lets(s: &Stmt) -> Vec<(String, Expr)> {
    let mut out = Vec::new();
    s.visit(&mut |s| {
        if let Stmt::Let { var, value, .. } = s {
            out.push((var.name().to_string(), value.clone()));
        }
    });
    out
}

fn size(e: &Expr) -> usize {
    let mut n = 0;
    e.visit(&mut |_| n += 1);
    n
}

fn is_op(e: &Expr, op: BinaryOp) -> bool {
    matches!(e.kind(), ExprKind::Binary(o, ..) if *o == op)
}

/// `out[i, j] = 100 * i + j` for every task of `mapping.on(threadIdx.x)`.
fn tile_kernel(mapping: &TaskMapping, threads: i64, shape: [i64; 2]) -> Function {
    let mut fb = FunctionBuilder::cuda_kernel("tile", [1, 1, 1], [threads, 1, 1]);
    let out = fb.tensor_param("out", DataType::I32, shape);
    fb.for_each(mapping.on(Expr::thread_idx(Dim::X)), |fb, ij| {
        fb.store(&out, ij.to_vec(), &ij[0] * 100 + &ij[1]);
    });
    fb.finish()
}

fn run_block(f: &Function, len: usize) -> Vec<i64> {
    let mut args = vec![Arg::Buffer(Buffer::from_i64(DataType::I32, &vec![-1; len]))];
    run_cuda_block(f, [0, 0, 0], &mut args).expect("kernel runs");
    match &args[0] {
        Arg::Buffer(b) => b.to_i64(),
        Arg::Scalar(_) => unreachable!("argument 0 is a buffer"),
    }
}

#[test]
fn warp_tile_indices_are_as_small_as_hand_written_code() {
    let m = spatial([4, 8]).unwrap() * repeat([2, 2]).unwrap();
    let f = tile_kernel(&m, 32, [8, 16]);
    let lowered = lower_function(f.clone()).unwrap();
    let body = &lowered.body;

    assert_eq!(
        stmts(body, &mut |s| matches!(s, Stmt::ForMapping { .. })),
        0
    );
    assert_eq!(
        stmts(body, &mut |s| matches!(s, Stmt::If { .. })),
        0,
        "no bound check: 32 threads, 32 workers"
    );
    assert_eq!(stmts(body, &mut |s| matches!(s, Stmt::For { .. })), 2);
    assert_eq!(
        count(body, &mut |e| is_op(e, BinaryOp::Div)
            || is_op(e, BinaryOp::Mod)),
        0
    );

    // i = (tid >> 3) * 2 + i_r and j = (tid & 7) * 2 + j_r: 7 nodes each.
    let bound = lets(body);
    assert_eq!(bound.len(), 2, "{lowered}");
    let tid = Expr::thread_idx(Dim::X);
    for (name, value) in &bound {
        assert_eq!(size(value), 7, "{name} = {value}");
        let ExprKind::Binary(BinaryOp::Add, scaled, r) = value.kind() else {
            panic!("{name} = {value} is not `_ * 2 + r`");
        };
        assert!(r.as_var().is_some());
        let ExprKind::Binary(BinaryOp::Mul, part, two) = scaled.kind() else {
            panic!("{name} = {value}");
        };
        assert_eq!(two.as_int(), Some(2));
        let expected = if name == "i" {
            &tid >> Expr::int(3)
        } else {
            &tid & Expr::int(7)
        };
        assert_eq!(part, &expected, "{name} = {value}");
    }

    assert_eq!(run_block(&lowered, 128), run_block(&f, 128));
    let expected: Vec<i64> = (0..128).map(|k| 100 * (k / 16) + k % 16).collect();
    assert_eq!(run_block(&lowered, 128), expected);
}

#[test]
fn more_threads_than_workers_get_a_bound_check() {
    let m = repeat([3, 1]).unwrap() * spatial([5, 6]).unwrap();
    let f = tile_kernel(&m, 37, [15, 6]);
    let lowered = lower_function(f.clone()).unwrap();
    let ifs = stmts(&lowered.body, &mut |s| matches!(s, Stmt::If { .. }));
    assert_eq!(ifs, 1, "{lowered}");
    assert_eq!(run_block(&lowered, 90), run_block(&f, 90));
}

#[test]
fn loop_variable_workers_with_small_extents_need_no_check() {
    let m = spatial([3]).unwrap() * repeat([7]).unwrap();
    for (extent, checks) in [(3, 0), (2, 0), (5, 1)] {
        let mut fb = FunctionBuilder::cpu_kernel("k");
        let out = fb.tensor_param("out", DataType::I32, [21i64]);
        fb.for_range("t", extent, |fb, t| {
            fb.for_each(m.on(t.clone()), |fb, i| {
                fb.store(&out, i.to_vec(), &t * 1000 + &i[0]);
            });
        });
        let f = fb.finish();
        let lowered = lower_function(f.clone()).unwrap();
        let ifs = stmts(&lowered.body, &mut |s| matches!(s, Stmt::If { .. }));
        assert_eq!(ifs, checks, "extent {extent}: {lowered}");
        let run = |f: &Function| {
            let mut args = vec![Arg::Buffer(Buffer::from_i64(DataType::I32, &[-3; 21]))];
            run_function(f, &mut args).unwrap();
            args
        };
        assert_eq!(run(&lowered), run(&f));
    }
}

#[test]
fn mismatched_rank_is_a_typed_error() {
    let mut fb = FunctionBuilder::cpu_kernel("bad");
    let m = spatial([2, 2]).unwrap();
    fb.for_each(m.on(Expr::int(0)), |_, _| {});
    let mut f = fb.finish();
    if let Stmt::ForMapping { vars, .. } = &mut f.body {
        vars.pop();
    }
    let err = lower_function(f).unwrap_err();
    assert!(
        matches!(err, PassError::MappingRankMismatch { ref function, rank: 2, .. } if function == "bad")
    );
    assert!(err.to_string().contains("spatial(2, 2)"), "{err}");
}

#[test]
fn lets_whose_uses_simplify_away_are_dropped() {
    let mut fb = FunctionBuilder::cuda_kernel("k", [1, 1, 1], [64, 1, 1]);
    let out = fb.tensor_param("out", DataType::I32, [64i64]);
    let tid = Expr::thread_idx(Dim::X);
    fb.let_in("warp", &tid / 32, |fb, warp| {
        let erased = Expr::binary(BinaryOp::Mul, warp, Expr::int(0));
        fb.store(&out, [tid.clone()], erased + 5);
    });
    let lowered = lower_function(fb.finish()).unwrap();
    assert!(lets(&lowered.body).is_empty(), "{lowered}");
    assert_eq!(run_block(&lowered, 64), vec![5; 64]);
}
