//! Base pointers for gathering loads: a direct convolution's micro-kernel (rows of a register
//! tile read at `x[rows[p0 + i] + cols[kk]]`) lowered with `hoist_gather_bases` reads `x`
//! only through pointers declared before its loop, one per tile row, and computes what the
//! original computes (interpreter, against sums computed here), also when the loop runs zero
//! times with rows past the end of the table (never read then); loads under a condition, or
//! through a table the loop writes, are left alone.

use hidet_ir::interp::{run_function, Arg, Buffer, Scalar};
use hidet_ir::passes::lower_function;
use hidet_ir::prelude::*;

const ROWS: i64 = 4;
const TABLE: i64 = 9;
const COLS: i64 = 7;
const X_LEN: i64 = 64;

/// `out[i] = Σ_{kk < n} x[rows[p0 + i] + cols[kk]] · (kk + 1)` for `i < ROWS`, the row loop
/// unrolled inside the serial `kk` loop; with `guard`, each read sits under `if kk < 5`;
/// with `write_table`, the loop also writes `rows[0]`.
fn kernel(guard: bool, write_table: bool) -> Function {
    let mut fb = FunctionBuilder::cpu_kernel("gather_dot");
    let n = fb.param("n", DataType::I32);
    let p0 = fb.param("p0", DataType::I32);
    let x = fb.tensor_param("x", DataType::F32, [X_LEN]);
    let rows = fb.tensor_param("rows", DataType::I32, [TABLE]);
    let cols = fb.tensor_param("cols", DataType::I32, [COLS]);
    let out = fb.tensor_param("out", DataType::F32, [ROWS]);
    let acc = fb.register_tensor("acc", DataType::F32, row_major([ROWS]));
    fb.for_range_with("i", ROWS, LoopKind::Unroll(None), |fb, i| {
        fb.store(&acc, [i.clone()], Expr::f32(0.0));
    });
    fb.for_range("kk", n.expr(), |fb, kk| {
        fb.for_range_with("i", ROWS, LoopKind::Unroll(None), |fb, i| {
            let read = x.at([rows.at([p0.expr() + &i]) + cols.at([kk.clone()])]);
            let weight = (&kk + 1).cast(DataType::F32);
            let sum = acc.at([i.clone()]) + read * weight;
            if guard {
                fb.if_then(kk.lt(5), |fb| fb.store(&acc, [i.clone()], sum));
            } else {
                fb.store(&acc, [i.clone()], sum);
            }
        });
        if write_table {
            fb.store(&rows, [Expr::int(0)], rows.at([Expr::int(0)]));
        }
    });
    fb.for_range_with("i", ROWS, LoopKind::Unroll(None), |fb, i| {
        fb.store(&out, [i.clone()], acc.at([i.clone()]));
    });
    fb.finish()
}

fn table_rows() -> Vec<i64> {
    (0..TABLE).map(|r| (r * 5) % 40).collect()
}

fn table_cols() -> Vec<i64> {
    (0..COLS).map(|c| (c * 3 + 1) % 20).collect()
}

fn x_values() -> Vec<f64> {
    (0..X_LEN).map(|v| ((v * 37) % 23) as f64 - 11.0).collect()
}

fn run(f: &Function, n: i64, p0: i64) -> Vec<f64> {
    let mut args = vec![
        Arg::Scalar(Scalar::Int(n)),
        Arg::Scalar(Scalar::Int(p0)),
        Arg::Buffer(Buffer::from_f64(DataType::F32, &x_values())),
        Arg::Buffer(Buffer::from_i64(DataType::I32, &table_rows())),
        Arg::Buffer(Buffer::from_i64(DataType::I32, &table_cols())),
        Arg::Buffer(Buffer::from_f64(DataType::F32, &[7.5; ROWS as usize])),
    ];
    run_function(f, &mut args).unwrap_or_else(|e| panic!("n {n} p0 {p0}: {e}\n{f}"));
    match &args[5] {
        Arg::Buffer(b) => b.to_f64(),
        Arg::Scalar(_) => unreachable!("argument 5 is a buffer"),
    }
}

fn expected(n: i64, p0: i64, guard: bool) -> Vec<f64> {
    let (rows, cols, x) = (table_rows(), table_cols(), x_values());
    (0..ROWS)
        .map(|i| {
            (0..n)
                .filter(|&kk| !guard || kk < 5)
                .map(|kk| {
                    let at = rows[(p0 + i) as usize] + cols[kk as usize];
                    x[at as usize] * (kk + 1) as f64
                })
                .sum()
        })
        .collect()
}

/// `(reads of x inside serial loops, pointer declarations)` of a lowered body.
fn shape(s: &Stmt, x_name: &str) -> (usize, usize) {
    let mut pointers = 0;
    s.visit(&mut |s| {
        if let Stmt::Declare { var, .. } = s {
            pointers += usize::from(matches!(var.ty(), Type::Pointer(_)));
        }
    });
    let mut reads = 0;
    s.visit(&mut |s| {
        if let Stmt::For {
            kind: LoopKind::Serial,
            body,
            ..
        } = s
        {
            body.visit(&mut |s| {
                for e in s.exprs() {
                    e.visit(&mut |e| {
                        if let ExprKind::TensorElement { tensor, .. } = e.kind() {
                            reads += usize::from(tensor.name() == x_name);
                        }
                    });
                }
            });
        }
    });
    (reads, pointers)
}

#[test]
fn each_tile_row_reads_through_its_own_pointer_and_computes_the_same() {
    let original = kernel(false, false);
    let lowered = lower_function(original.clone()).unwrap();
    assert_eq!(
        shape(&lowered.body, "x"),
        (0, 1 + ROWS as usize),
        "{lowered}"
    );
    for n in [1, 3, COLS] {
        for p0 in [0, 2, TABLE - ROWS] {
            let want = expected(n, p0, false);
            assert_eq!(run(&original, n, p0), want, "original, n {n} p0 {p0}");
            assert_eq!(
                run(&lowered, n, p0),
                want,
                "lowered, n {n} p0 {p0}\n{lowered}"
            );
        }
    }
}

#[test]
fn a_loop_that_never_runs_reads_no_table_row() {
    let lowered = lower_function(kernel(false, false)).unwrap();
    // Rows p0 + i reach past the table's end: only the loop's reads would touch them.
    assert_eq!(run(&lowered, 0, TABLE - 1), vec![0.0; ROWS as usize]);
}

#[test]
fn guarded_reads_and_written_tables_are_left_alone() {
    for (guard, write_table) in [(true, false), (false, true)] {
        let original = kernel(guard, write_table);
        let lowered = lower_function(original.clone()).unwrap();
        let (reads, pointers) = shape(&lowered.body, "x");
        assert!(reads > 0, "guard {guard} write {write_table}:\n{lowered}");
        assert_eq!(pointers, 0, "guard {guard} write {write_table}:\n{lowered}");
        for (n, p0) in [(4, 1), (COLS, 3)] {
            let want = expected(n, p0, guard);
            assert_eq!(run(&lowered, n, p0), want, "n {n} p0 {p0}\n{lowered}");
        }
    }
}

const IDS: i64 = 5;
const VOCAB: i64 = 6;
const WIDTH: i64 = 11;

/// An embedding lookup, `out[i, j] = table[r · WIDTH + j]` with `r` the id `ids[i]` taken
/// modulo the vocabulary when negative (ONNX `Gather`) and clamped, over a vectorized `j`; with
/// `guarded`, the read is a branch of `j < 4 ? read : 0`.
fn lookup(guarded: bool) -> Function {
    let mut fb = FunctionBuilder::cpu_kernel("lookup");
    let ids = fb.tensor_param("ids", DataType::I64, [IDS]);
    let table = fb.tensor_param("table", DataType::F32, [VOCAB, WIDTH]);
    let mask = fb.tensor_param("mask", DataType::F32, [WIDTH]);
    let out = fb.tensor_param("out", DataType::F32, [IDS, WIDTH]);
    fb.for_range("i", IDS, |fb, i| {
        fb.for_range_with("j", WIDTH, LoopKind::Vectorize, |fb, j| {
            let id = ids.at([i.clone()]);
            let wrapped = Expr::select(
                id.clone().lt(Expr::int_of(0, DataType::I64)),
                id.clone() + VOCAB,
                id,
            );
            let row = wrapped
                .clone()
                .max(Expr::int_of(0, DataType::I64))
                .min(Expr::int_of(VOCAB - 1, DataType::I64));
            let read = table.at([row, j.clone().cast(DataType::I64)]);
            let value = if guarded {
                Expr::select(
                    mask.at([j.clone()]).gt(Expr::f32(0.0)),
                    read,
                    Expr::f32(0.0),
                )
            } else {
                read
            };
            fb.store(&out, [i.clone(), j], value);
        });
    });
    fb.finish()
}

fn run_lookup(f: &Function) -> Vec<f64> {
    let ids = [3, -1, 0, 40, -6];
    let table: Vec<f64> = (0..VOCAB * WIDTH)
        .map(|v| (v * 7 % 13) as f64 - 6.0)
        .collect();
    let mask: Vec<f64> = (0..WIDTH).map(|j| (j % 3) as f64 - 0.5).collect();
    let mut args = vec![
        Arg::Buffer(Buffer::from_i64(DataType::I64, &ids)),
        Arg::Buffer(Buffer::from_f64(DataType::F32, &table)),
        Arg::Buffer(Buffer::from_f64(DataType::F32, &mask)),
        Arg::Buffer(Buffer::from_f64(
            DataType::F32,
            &[0.5; (IDS * WIDTH) as usize],
        )),
    ];
    run_function(f, &mut args).unwrap_or_else(|e| panic!("{e}\n{f}"));
    match &args[3] {
        Arg::Buffer(b) => b.to_f64(),
        Arg::Scalar(_) => unreachable!("argument 3 is a buffer"),
    }
}

/// `(reads of tensor `name` and `?:` inside vectorized loops, pointer declarations)`.
fn vector_loop_shape(s: &Stmt, name: &str) -> (usize, usize, usize) {
    let (mut reads, mut selects, mut pointers) = (0, 0, 0);
    s.visit(&mut |s| match s {
        Stmt::Declare { var, .. } => pointers += usize::from(matches!(var.ty(), Type::Pointer(_))),
        Stmt::For {
            kind: LoopKind::Vectorize,
            body,
            ..
        } => body.visit(&mut |s| {
            for e in s.exprs() {
                e.visit(&mut |e| match e.kind() {
                    ExprKind::TensorElement { tensor, .. } => {
                        reads += usize::from(tensor.name() == name)
                    }
                    ExprKind::Select(..) => selects += 1,
                    _ => {}
                });
            }
        }),
        _ => {}
    });
    (reads, selects, pointers)
}

/// The row of a vectorized lookup becomes a pointer declared before the loop, and the wrap and
/// clamp of its id leave the loop with it (GCC does not vectorize a loop with conditions in
/// it); a read in a branch of a `?:` stays where it is. Both compute what the original does.
#[test]
fn a_vectorized_lookup_reads_its_row_through_a_pointer() {
    let original = lookup(false);
    let lowered = lower_function(original.clone()).unwrap();
    assert_eq!(
        vector_loop_shape(&lowered.body, "table"),
        (0, 0, 2),
        "{lowered}"
    );
    assert_eq!(run_lookup(&lowered), run_lookup(&original), "{lowered}");
    let guarded = lookup(true);
    let lowered = lower_function(guarded.clone()).unwrap();
    let (reads, _, pointers) = vector_loop_shape(&lowered.body, "table");
    assert_eq!((reads, pointers), (1, 0), "{lowered}");
    assert_eq!(run_lookup(&lowered), run_lookup(&guarded), "{lowered}");
}
