//! The default GPU scheduler (`hidet_cuda::schedule`) on compute definitions, run in the
//! simulator (every block, all checkers) against values computed on the host in f64.

use hidet_cuda::schedule::{self, elementwise, rowwise, ScheduleKind};
use hidet_cuda::sim::{DeviceBuffer, LaunchOptions, SimArg, Simulator};
use hidet_ir::compute::{grid, reduce, tensor_input, ComputeDef, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;
use hidet_ir::function::{Function, IRModule, Target};

/// `softmax(x)` over the last axis of `[rows, cols]`: max, sum of exponentials, quotient.
fn softmax(rows: i64, cols: i64) -> ComputeDef {
    let x = tensor_input("x", DataType::F32, [rows, cols]);
    let (m, m_node) = reduce(
        "m",
        DataType::F32,
        [rows, 1],
        [cols],
        ReduceKind::Max,
        |i, r| x.at([i[0].clone(), r[0].clone()]),
    );
    let (s, s_node) = reduce(
        "s",
        DataType::F32,
        [rows, 1],
        [cols],
        ReduceKind::Sum,
        |i, r| (x.at([i[0].clone(), r[0].clone()]) - m.at([i[0].clone(), Expr::int(0)])).exp(),
    );
    let (y, y_node) = grid("y", DataType::F32, [rows, cols], |i| {
        (x.at([i[0].clone(), i[1].clone()]) - m.at([i[0].clone(), Expr::int(0)])).exp()
            / s.at([i[0].clone(), Expr::int(0)])
    });
    ComputeDef::new(
        vec![x],
        vec![(m, m_node), (s, s_node), (y.clone(), y_node)],
        vec![y],
    )
    .unwrap()
}

fn input(rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect()
}

/// Runs kernel `f` (one input, one output of `out_len` elements) in the simulator.
fn simulate(f: Function, x: &[f32], out_len: usize) -> Vec<f32> {
    let name = f.name.clone();
    let module = IRModule::new(name.clone(), Target::Cuda).with(f);
    hidet_cuda::emit_cuda(&module).expect("the CUDA dialect emits the kernel");
    let sim = Simulator::from_module(&module, &name).unwrap();
    let mut args = vec![
        SimArg::Buffer(DeviceBuffer::from_f32(x)),
        SimArg::Buffer(DeviceBuffer::output(DataType::F32, out_len)),
    ];
    sim.launch(&mut args, &LaunchOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    args[1].buffer().and_then(DeviceBuffer::to_f32).unwrap()
}

#[test]
fn softmax_is_one_warp_per_row_and_matches_the_elementwise_schedule() {
    // Rows shorter than a warp, a multiple of it, and longer with a partial tail; a row
    // count that leaves the last block's warps partly idle.
    for (rows, cols) in [(7usize, 19usize), (5, 64), (9, 130)] {
        let def = softmax(rows as i64, cols as i64);
        let (f, kind) = schedule::schedule(&def, "softmax").unwrap();
        assert_eq!(kind, ScheduleKind::Rowwise, "{rows}x{cols}");
        let x = input(rows, cols);
        let got = simulate(f, &x, rows * cols);
        let serial = simulate(
            elementwise::schedule_elementwise(&def, "softmax_serial").unwrap(),
            &x,
            rows * cols,
        );
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let max = row
                .iter()
                .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
            let sum: f64 = row.iter().map(|&v| (f64::from(v) - max).exp()).sum();
            for c in 0..cols {
                let want = (f64::from(row[c]) - max).exp() / sum;
                for (what, v) in [
                    ("rowwise", got[r * cols + c]),
                    ("elementwise", serial[r * cols + c]),
                ] {
                    assert!(
                        (f64::from(v) - want).abs() <= 1e-6 * want.abs().max(1e-3),
                        "{what} {rows}x{cols} [{r}, {c}]: {v} vs {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_reduction_per_row_is_folded_by_one_warp_and_a_column_reduction_is_not() {
    let (rows, cols) = (6i64, 45i64);
    let x = tensor_input("x", DataType::F32, [rows, cols]);
    let (s, node) = reduce(
        "s",
        DataType::F32,
        [rows, 1],
        [cols],
        ReduceKind::Sum,
        |i, r| x.at([i[0].clone(), r[0].clone()]),
    );
    let def = ComputeDef::new(vec![x.clone()], vec![(s.clone(), node)], vec![s]).unwrap();
    let f = rowwise::schedule_rowwise(&def, "row_sum")
        .unwrap()
        .expect("rowwise applies");
    let xs = input(rows as usize, cols as usize);
    let got = simulate(f, &xs, rows as usize);
    for r in 0..rows as usize {
        let want: f64 = xs[r * cols as usize..(r + 1) * cols as usize]
            .iter()
            .map(|&v| f64::from(v))
            .sum();
        assert!(
            (f64::from(got[r]) - want).abs() <= 1e-4,
            "row {r}: {} vs {want}",
            got[r]
        );
    }
    // Sums down the columns: each output element reduces along the rows, so its reads depend
    // on the output's last axis: not a per-row reduction.
    let (c, node) = reduce(
        "c",
        DataType::F32,
        [1, cols],
        [rows],
        ReduceKind::Sum,
        |i, r| x.at([r[0].clone(), i[1].clone()]),
    );
    let def = ComputeDef::new(vec![x], vec![(c.clone(), node)], vec![c]).unwrap();
    assert!(rowwise::schedule_rowwise(&def, "col_sum")
        .unwrap()
        .is_none());
    let (f, kind) = schedule::schedule(&def, "col_sum").unwrap();
    assert_eq!(kind, ScheduleKind::Elementwise);
    let got = simulate(f, &xs, cols as usize);
    for j in 0..cols as usize {
        let want: f64 = (0..rows as usize)
            .map(|r| f64::from(xs[r * cols as usize + j]))
            .sum();
        assert!((f64::from(got[j]) - want).abs() <= 1e-4, "column {j}");
    }
}
