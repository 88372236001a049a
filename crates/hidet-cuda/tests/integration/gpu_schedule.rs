//! The default GPU scheduler (`hidet_cuda::schedule`) on compute definitions, run in the
//! simulator (every block, all checkers) against values computed on the host in f64.

use hidet_cuda::schedule::{self, elementwise, rowwise, GpuTarget, ScheduleKind};
use hidet_cuda::sim::{DeviceBuffer, LaunchOptions, SimArg, Simulator};
use hidet_ir::compute::{grid, reduce, tensor_input, ComputeDef, ReduceKind};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{Expr, Var};
use hidet_ir::function::{Function, FunctionKind, IRModule, Target};

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
    // count that leaves the last block's warps partly idle; rows long enough for a block of
    // 8 warps per row (folded across warps through shared memory).
    for (rows, cols) in [(7usize, 19usize), (5, 64), (9, 130), (3, 2100)] {
        let def = softmax(rows as i64, cols as i64);
        let (f, kind) = schedule::schedule(&def, "softmax", &GpuTarget::default()).unwrap();
        assert_eq!(kind, ScheduleKind::Rowwise, "{rows}x{cols}");
        let row_threads = 32 * rowwise::warps_per_row(cols as i64);
        assert_eq!(row_threads, if cols > 1000 { 256 } else { 32 });
        if row_threads > 32 {
            let FunctionKind::CudaKernel(launch) = &f.kind else {
                panic!("not a CUDA kernel");
            };
            assert_eq!(launch.block, [row_threads, 1, 1]);
            assert_eq!(
                launch.grid[0].as_int(),
                Some(rows as i64),
                "one block per row"
            );
        }
        let x = input(rows, cols);
        let got = simulate(f, &x, rows * cols);
        // The serial schedule folds each row once per element: short rows only.
        let serial = if cols < 1000 {
            let f =
                elementwise::schedule_elementwise(&def, "softmax_serial", &GpuTarget::default());
            simulate(f.unwrap(), &x, rows * cols)
        } else {
            got.clone()
        };
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

/// `s[r, 0] = Σ_c f(x[r, c])` over `x: [rows, cols]`; returns `x` and the definition.
fn row_sum(rows: i64, cols: i64, f: impl Fn(Expr) -> Expr) -> (Var, ComputeDef) {
    let x = tensor_input("x", DataType::F32, [rows, cols]);
    let (s, node) = reduce(
        "s",
        DataType::F32,
        [rows, 1],
        [cols],
        ReduceKind::Sum,
        |i, r| f(x.at([i[0].clone(), r[0].clone()])),
    );
    let def = ComputeDef::new(vec![x.clone()], vec![(s.clone(), node)], vec![s]).unwrap();
    (x, def)
}

#[test]
fn a_reduction_per_row_is_folded_by_one_warp_and_a_column_reduction_is_not() {
    let (rows, cols) = (6i64, 45i64);
    let (x, def) = row_sum(rows, cols, |v| v);
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
    let (f, kind) = schedule::schedule(&def, "col_sum", &GpuTarget::default()).unwrap();
    assert_eq!(kind, ScheduleKind::Elementwise);
    let got = simulate(f, &xs, cols as usize);
    for j in 0..cols as usize {
        let want: f64 = (0..rows as usize)
            .map(|r| f64::from(xs[r * cols as usize + j]))
            .sum();
        assert!((f64::from(got[j]) - want).abs() <= 1e-4, "column {j}");
    }
}

/// Runs kernel `f` on `inputs` (f32) in the simulator; returns its outputs of `out_lens`.
fn simulate_many(f: Function, inputs: &[Vec<f32>], out_lens: &[usize]) -> Vec<Vec<f32>> {
    let name = f.name.clone();
    let module = IRModule::new(name.clone(), Target::Cuda).with(f);
    hidet_cuda::emit_cuda(&module).expect("the CUDA dialect emits the kernel");
    let sim = Simulator::from_module(&module, &name).unwrap();
    let mut args: Vec<SimArg> = inputs
        .iter()
        .map(|x| SimArg::Buffer(DeviceBuffer::from_f32(x)))
        .chain(
            out_lens
                .iter()
                .map(|&n| SimArg::Buffer(DeviceBuffer::output(DataType::F32, n))),
        )
        .collect();
    sim.launch(&mut args, &LaunchOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    args[inputs.len()..]
        .iter()
        .map(|a| a.buffer().and_then(DeviceBuffer::to_f32).unwrap())
        .collect()
}

#[test]
fn large_elementwise_tasks_are_vectorized_and_read_only_what_each_element_needs() {
    // Outputs [3, 50, 1028] (a last axis that is a multiple of 4 but of no tile): `y` reads
    // `a` contiguously (a vector load), `b` broadcast over the leading axes (a vector load
    // of the same row), `c` transposed (scalar loads) and `s` shifted by one element (an
    // unaligned contiguous read); `z` reads `a` and `s` only under a select (scalar loads:
    // a vector read there could cross into elements the other branch owns).
    let (n, h, w) = (3i64, 50i64, 1028i64);
    let a = tensor_input("a", DataType::F32, [n, h, w]);
    let b = tensor_input("b", DataType::F32, [1, w]);
    let c = tensor_input("c", DataType::F32, [n, w, h]);
    let s = tensor_input("s", DataType::F32, [n, h, w + 1]);
    let (y, y_node) = grid("y", DataType::F32, [n, h, w], |i| {
        a.at([i[0].clone(), i[1].clone(), i[2].clone()])
            + b.at([Expr::int(0), i[2].clone()]) * Expr::f32(2.0)
            + c.at([i[0].clone(), i[2].clone(), i[1].clone()])
            - s.at([i[0].clone(), i[1].clone(), i[2].clone() + 1])
    });
    let (z, z_node) = grid("z", DataType::F32, [n, h, w], |i| {
        Expr::select(
            i[2].lt(500),
            a.at([i[0].clone(), i[1].clone(), i[2].clone()]),
            s.at([i[0].clone(), i[1].clone(), i[2].clone()]).exp(),
        )
    });
    let def = ComputeDef::new(
        vec![a, b, c, s],
        vec![(y.clone(), y_node), (z.clone(), z_node)],
        vec![y, z],
    )
    .unwrap();
    let (f, kind) = schedule::schedule(&def, "vectorized", &GpuTarget::default()).unwrap();
    assert_eq!(kind, ScheduleKind::Elementwise);
    let module = IRModule::new("vectorized", Target::Cuda).with(f.clone());
    let source = hidet_cuda::emit_cuda(&module).unwrap();
    assert!(source.contains("hidet_store_f32x4"), "{source}");
    if std::env::var("DUMP").is_ok() {
        eprintln!("{source}");
    }
    // `a` and `b` in `y`, and `s` shifted: three vector loads; `c` and the select's reads
    // are scalar.
    assert_eq!(
        source.matches("hidet_load_f32x4(").count() - 1,
        3,
        "{source}"
    );
    let (nu, hu, wu) = (n as usize, h as usize, w as usize);
    let mut rng = 0x9e37_79b9_u64;
    let mut random = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    };
    let xs = [
        random(nu * hu * wu),
        random(wu),
        random(nu * wu * hu),
        random(nu * hu * (wu + 1)),
    ];
    let outs = simulate_many(f, &xs, &[nu * hu * wu, nu * hu * wu]);
    for i in 0..nu {
        for j in 0..hu {
            for k in 0..wu {
                let e = (i * hu + j) * wu + k;
                let sv = f64::from(xs[3][(i * hu + j) * (wu + 1) + k]);
                let want_y = f64::from(xs[0][e])
                    + 2.0 * f64::from(xs[1][k])
                    + f64::from(xs[2][(i * wu + k) * hu + j])
                    - f64::from(xs[3][(i * hu + j) * (wu + 1) + k + 1]);
                let want_z = if k < 500 {
                    f64::from(xs[0][e])
                } else {
                    sv.exp()
                };
                assert!(
                    (f64::from(outs[0][e]) - want_y).abs() <= 1e-5,
                    "y[{i},{j},{k}]"
                );
                assert!(
                    (f64::from(outs[1][e]) - want_z).abs() <= 1e-5 * want_z.abs().max(1.0),
                    "z[{i},{j},{k}]"
                );
            }
        }
    }
}

#[test]
fn a_long_row_is_folded_by_a_block_of_warps() {
    // 40 000 elements per row: 32 warps per row, one block each; a sum of squares, so the
    // 32 warps' partial sums all matter.
    let (rows, cols) = (2i64, 40_000i64);
    let (_, def) = row_sum(rows, cols, |v| v.clone() * v);
    assert_eq!(rowwise::warps_per_row(cols), 32);
    let (f, kind) = schedule::schedule(&def, "row_sum_squares", &GpuTarget::default()).unwrap();
    assert_eq!(kind, ScheduleKind::Rowwise);
    let xs = input(rows as usize, cols as usize);
    let got = simulate(f, &xs, rows as usize);
    for r in 0..rows as usize {
        let want: f64 = xs[r * cols as usize..(r + 1) * cols as usize]
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum();
        assert!(
            (f64::from(got[r]) - want).abs() <= 1e-5 * want,
            "row {r}: {} vs {want}",
            got[r]
        );
    }
}
