//! Loop-invariant scalar reads leave vectorized loops (`hoist_invariant_loads`): a
//! dequantization's zero point read at every element is read once before the loop, and the
//! lowered kernel computes what the original computes (interpreter), also when the loop never
//! runs and the read's index is out of range (never read then); its copies in branches of a
//! `?:` are replaced too; reads made only in a branch of a `?:`, and reads of a tensor the
//! loop writes, stay in the loop.

use hidet_ir::interp::{run_function, Arg, Buffer, Scalar};
use hidet_ir::passes::lower_function;
use hidet_ir::prelude::*;

const N: i64 = 13;

/// `y[j] = (x[j] - zp[p]) · 0.5 + (mask[j] > 0 ? zp[1] : 0) + (x[j] > 2 ? zp[p] : 0)` over a
/// vectorized `j < n`; with `write_zp`, the loop also writes `zp[0] = y[j]`.
fn dequantize(write_zp: bool) -> Function {
    let mut fb = FunctionBuilder::cpu_kernel("dequantize");
    let n = fb.param("n", DataType::I32);
    let p = fb.param("p", DataType::I32);
    let x = fb.tensor_param("x", DataType::F32, [N]);
    let zp = fb.tensor_param("zp", DataType::F32, [2]);
    let mask = fb.tensor_param("mask", DataType::F32, [N]);
    let y = fb.tensor_param("y", DataType::F32, [N]);
    fb.for_range_with("j", n.expr(), LoopKind::Vectorize, |fb, j| {
        let shifted = (x.at([j.clone()]) - zp.at([p.expr()])) * Expr::f32(0.5);
        let guarded = Expr::select(
            mask.at([j.clone()]).gt(Expr::f32(0.0)),
            zp.at([Expr::int(1)]),
            Expr::f32(0.0),
        );
        // Also read unconditionally: replaced in the branch too.
        let repeated = Expr::select(
            x.at([j.clone()]).gt(Expr::f32(2.0)),
            zp.at([p.expr()]),
            Expr::f32(0.0),
        );
        fb.store(&y, [j.clone()], shifted + guarded + repeated);
        if write_zp {
            fb.store(&zp, [Expr::int(0)], y.at([j]));
        }
    });
    fb.finish()
}

fn run(f: &Function, n: i64, p: i64) -> Vec<f64> {
    let x: Vec<f64> = (0..N).map(|v| (v * 5 % 7) as f64 - 2.0).collect();
    let mask: Vec<f64> = (0..N).map(|v| (v % 3) as f64 - 1.0).collect();
    let mut args = vec![
        Arg::Scalar(Scalar::Int(n)),
        Arg::Scalar(Scalar::Int(p)),
        Arg::Buffer(Buffer::from_f64(DataType::F32, &x)),
        Arg::Buffer(Buffer::from_f64(DataType::F32, &[1.5, -4.0])),
        Arg::Buffer(Buffer::from_f64(DataType::F32, &mask)),
        Arg::Buffer(Buffer::from_f64(DataType::F32, &[9.0; N as usize])),
    ];
    run_function(f, &mut args).unwrap_or_else(|e| panic!("n {n} p {p}: {e}\n{f}"));
    match &args[5] {
        Arg::Buffer(b) => b.to_f64(),
        Arg::Scalar(_) => unreachable!("argument 5 is a buffer"),
    }
}

/// Reads of `zp` inside vectorized loops.
fn reads_in_loop(s: &Stmt) -> usize {
    let mut reads = 0;
    s.visit(&mut |s| {
        if let Stmt::For {
            kind: LoopKind::Vectorize,
            body,
            ..
        } = s
        {
            body.visit(&mut |s| {
                for e in s.exprs() {
                    e.visit(&mut |e| {
                        if let ExprKind::TensorElement { tensor, .. } = e.kind() {
                            reads += usize::from(tensor.name() == "zp");
                        }
                    });
                }
            });
        }
    });
    reads
}

#[test]
fn an_invariant_read_leaves_the_loop_and_a_guarded_one_stays() {
    let original = dequantize(false);
    let lowered = lower_function(original.clone()).unwrap();
    assert_eq!(reads_in_loop(&lowered.body), 1, "{lowered}");
    for (n, p) in [(N, 0), (N, 1), (4, 1)] {
        assert_eq!(
            run(&lowered, n, p),
            run(&original, n, p),
            "n {n} p {p}\n{lowered}"
        );
    }
    // The loop never runs: the out-of-range zp[7] is never read.
    assert_eq!(run(&lowered, 0, 7), vec![9.0; N as usize]);
}

#[test]
fn reads_of_a_tensor_the_loop_writes_stay() {
    let original = dequantize(true);
    let lowered = lower_function(original.clone()).unwrap();
    assert_eq!(reads_in_loop(&lowered.body), 3, "{lowered}");
    assert_eq!(run(&lowered, N, 0), run(&original, N, 0), "{lowered}");
}
