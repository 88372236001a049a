//! Index-set splitting of vectorized loops around guarded reads: the split
//! loop computes what the original computes (interpreter, against values
//! computed here), for guards of either sign of coefficient, strides 1 to 3,
//! ranges that are empty, partial or whole, and uniform conditions; and no
//! vectorized loop is left whose store reads under a condition.

use hidet_ir::interp::{run_function, Arg, Buffer, Scalar};
use hidet_ir::passes::lower_function;
use hidet_ir::prelude::*;
use std::ops::BitAnd;

const WIDTH: i64 = 40;
const ROWS: i64 = 6;
const FILL: i64 = -1;

/// `out[j] = (0 <= x < WIDTH && 0 <= y < ROWS) ? image[y, x] : FILL` for `j < n`
/// vectorized, with `x = x0 + stride·j` and `y` a parameter: one padded
/// convolution's im2col row (a negative stride reads it backwards).
fn kernel(n: i64, stride: i64) -> Function {
    let mut fb = FunctionBuilder::cpu_kernel("pack");
    let x0 = fb.param("x0", DataType::I32);
    let y = fb.param("y", DataType::I32);
    let image = fb.tensor_param("image", DataType::I32, [ROWS, WIDTH]);
    let out = fb.tensor_param("out", DataType::I32, [n]);
    let (x0, y) = (x0.expr(), y.expr());
    fb.for_range_with("j", n, LoopKind::Vectorize, |fb, j| {
        let x = &x0 + &j * stride;
        let inside = x.ge(0).and(x.lt(WIDTH)).bitand(y.ge(0)).bitand(y.lt(ROWS));
        let value = Expr::select(inside, image.at([y.clone(), x]), Expr::int(FILL));
        fb.store(&out, [j.clone()], value);
    });
    fb.finish()
}

fn run(f: &Function, x0: i64, y: i64, n: i64) -> Vec<i64> {
    let image: Vec<i64> = (0..ROWS * WIDTH).map(|i| i * 7 + 3).collect();
    let mut args = vec![
        Arg::Scalar(Scalar::Int(x0)),
        Arg::Scalar(Scalar::Int(y)),
        Arg::Buffer(Buffer::from_i64(DataType::I32, &image)),
        Arg::Buffer(Buffer::from_i64(DataType::I32, &vec![-5; n as usize])),
    ];
    run_function(f, &mut args).expect("kernel runs");
    match &args[3] {
        Arg::Buffer(b) => b.to_i64(),
        Arg::Scalar(_) => unreachable!("argument 3 is a buffer"),
    }
}

fn expected(x0: i64, y: i64, n: i64, stride: i64) -> Vec<i64> {
    (0..n)
        .map(|j| {
            let x = x0 + stride * j;
            if (0..WIDTH).contains(&x) && (0..ROWS).contains(&y) {
                (y * WIDTH + x) * 7 + 3
            } else {
                FILL
            }
        })
        .collect()
}

/// Vectorized loops whose store's value is a select that reads memory.
fn guarded_vector_reads(s: &Stmt) -> usize {
    let mut n = 0;
    s.visit(&mut |s| {
        if let Stmt::For {
            kind: LoopKind::Vectorize,
            body,
            ..
        } = s
        {
            body.visit(&mut |inner| {
                if let Stmt::Store { value, .. } = inner {
                    n += usize::from(matches!(value.kind(), ExprKind::Select(..)));
                }
            });
        }
    });
    n
}

#[test]
fn a_guarded_read_is_cut_where_its_guard_holds_and_computes_the_same() {
    for stride in [1, 2, 3, -1, -2] {
        for n in [1, 7, 16, 45] {
            let original = kernel(n, stride);
            let lowered = lower_function(original.clone()).unwrap();
            assert_eq!(
                guarded_vector_reads(&lowered.body),
                0,
                "stride {stride} n {n}:\n{lowered}"
            );
            for x0 in [-100, -9, -4, -1, 0, 1, 5, 20, 39, 40, 41, 100] {
                for y in [-1, 0, 3, ROWS] {
                    let want = expected(x0, y, n, stride);
                    let at = format!("stride {stride} n {n} x0 {x0} y {y}");
                    assert_eq!(run(&original, x0, y, n), want, "original, {at}");
                    assert_eq!(run(&lowered, x0, y, n), want, "split, {at}\n{lowered}");
                }
            }
        }
    }
}

#[test]
fn a_select_on_data_or_without_a_read_is_left_whole() {
    let mut fb = FunctionBuilder::cpu_kernel("relu");
    let x = fb.tensor_param("x", DataType::I32, [24i64]);
    let out = fb.tensor_param("out", DataType::I32, [24i64]);
    fb.for_range_with("j", 24, LoopKind::Vectorize, |fb, j| {
        let v = x.at([j.clone()]);
        fb.store(&out, [j.clone()], Expr::select(v.lt(0), Expr::int(0), v));
    });
    fb.for_range_with("j", 24, LoopKind::Vectorize, |fb, j| {
        fb.store(
            &out,
            [j.clone()],
            Expr::select(j.lt(9), Expr::int(1), Expr::int(2)),
        );
    });
    let lowered = lower_function(fb.finish()).unwrap();
    assert_eq!(guarded_vector_reads(&lowered.body), 2, "{lowered}");
}

/// `out[r, j] = r < 2 ? a[r, j] : (r < 5 ? b[r - 2, j] : c[r - 5, j])` for 7 rows of 13
/// (a concatenation of three inputs along rows, `j` vectorized): each row's loop copies from
/// one input, with no select left, and computes the same.
#[test]
fn a_uniform_choice_becomes_one_loop_per_input() {
    const N: i64 = 13;
    let mut fb = FunctionBuilder::cpu_kernel("concat");
    let a = fb.tensor_param("a", DataType::I32, [2, N]);
    let b = fb.tensor_param("b", DataType::I32, [3, N]);
    let c = fb.tensor_param("c", DataType::I32, [2, N]);
    let out = fb.tensor_param("out", DataType::I32, [7, N]);
    fb.for_range("r", 7, |fb, r| {
        fb.for_range_with("j", N, LoopKind::Vectorize, |fb, j| {
            let value = Expr::select(
                r.lt(2),
                a.at([r.clone(), j.clone()]),
                Expr::select(
                    r.lt(5),
                    b.at([r.clone() - 2, j.clone()]),
                    c.at([r.clone() - 5, j.clone()]),
                ),
            );
            fb.store(&out, [r.clone(), j.clone()], value);
        });
    });
    let original = fb.finish();
    let lowered = lower_function(original.clone()).unwrap();
    assert_eq!(guarded_vector_reads(&lowered.body), 0, "{lowered}");
    let input = |rows: i64, seed: i64| {
        let v: Vec<i64> = (0..rows * N).map(|i| i * seed + 1).collect();
        Arg::Buffer(Buffer::from_i64(DataType::I32, &v))
    };
    let run = |f: &Function| {
        let mut args = vec![
            input(2, 3),
            input(3, 5),
            input(2, 7),
            Arg::Buffer(Buffer::from_i64(DataType::I32, &[-9; (7 * N) as usize])),
        ];
        run_function(f, &mut args).expect("kernel runs");
        match &args[3] {
            Arg::Buffer(out) => out.to_i64(),
            Arg::Scalar(_) => unreachable!("argument 3 is a buffer"),
        }
    };
    let want: Vec<i64> = (0..7 * N)
        .map(|i| {
            let (r, j) = (i / N, i % N);
            match r {
                0..2 => (r * N + j) * 3 + 1,
                2..5 => ((r - 2) * N + j) * 5 + 1,
                _ => ((r - 5) * N + j) * 7 + 1,
            }
        })
        .collect();
    assert_eq!(run(&original), want);
    assert_eq!(run(&lowered), want);
}
