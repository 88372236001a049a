//! The fp32 matmul / batch-matmul template against a float64 reference, on
//! shapes that are multiples of nothing, with several schedules, thread
//! splits (parallel-k included) and 1, 2 and 3 threads.

use crate::common;

use common::{options_in, Rng};
use hidet_cpu::templates::matmul::{
    batch_matmul_f32_with_layouts, matmul_f32_with_layouts, ALayout, BLayout, CLayout, Layouts,
    MatmulShape, ThreadGrid, ThreadSplit, B_PANEL_WIDTH,
};
use hidet_cpu::templates::{batch_matmul_f32, matmul_f32, MatmulSchedule};
use hidet_cpu::{build, CpuError, CpuTarget, KernelArg, TemplateError};
use hidet_ir::function::{IRModule, Target};

/// Checks `c[b]` against `a[b or 0] · b[b or 0]` in float64, each element
/// within `1e-5 · Σ_k |a_ik·b_kj|`.
fn assert_matches(s: &MatmulShape, a: &[f32], b: &[f32], c: &[f32], what: &str) {
    let (m, n, k) = (s.m as usize, s.n as usize, s.k as usize);
    for bi in 0..s.batch as usize {
        let ao = if s.a_batch == 1 { 0 } else { bi * m * k };
        let bo = if s.b_batch == 1 { 0 } else { bi * k * n };
        for i in 0..m {
            for j in 0..n {
                let (mut exact, mut magnitude) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let term = f64::from(a[ao + i * k + p]) * f64::from(b[bo + p * n + j]);
                    exact += term;
                    magnitude += term.abs();
                }
                let got = f64::from(c[(bi * m + i) * n + j]);
                assert!(
                    (got - exact).abs() <= 1e-5 * magnitude + 1e-30,
                    "{what}: C[{bi}][{i}][{j}] = {got}, float64 reference {exact}"
                );
            }
        }
    }
}

/// Builds and runs the template for `shape` (rank 3 when `batched`) and
/// checks every output element.
fn check_shape(shape: MatmulShape, batched: bool, schedule: &MatmulSchedule, seed: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let f = if batched {
        batch_matmul_f32("mm", &shape, schedule)
    } else {
        matmul_f32("mm", shape.m, shape.n, shape.k, schedule)
    }
    .expect("valid instantiation");
    let module = IRModule::new("mm_test", Target::Cpu).with(f);
    let compiled = build(module, &options_in(dir.path())).expect("builds");
    compiled
        .set_num_threads(schedule.threads as usize)
        .expect("exported by the C dialect");
    let mut rng = Rng::new(seed);
    let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
    let a = rng.vec_f32(shape.a_batch as usize * m * k);
    let b = rng.vec_f32(shape.b_batch as usize * k * n);
    let mut c = vec![f32::NAN; shape.batch as usize * m * n];
    let dims = |batch: i64, r: usize, col: usize| -> Vec<usize> {
        if batched {
            vec![batch as usize, r, col]
        } else {
            vec![r, col]
        }
    };
    let (da, db, dc) = (
        dims(shape.a_batch, m, k),
        dims(shape.b_batch, k, n),
        dims(shape.batch, m, n),
    );
    compiled
        .kernel("mm")
        .expect("kernel exists")
        .call(&mut [
            KernelArg::tensor(&a, &da),
            KernelArg::tensor(&b, &db),
            KernelArg::tensor_mut(&mut c, &dc),
        ])
        .expect("arguments match");
    assert_matches(&shape, &a, &b, &c, &format!("{shape:?} {schedule:?}"));
}

fn check(m: i64, n: i64, k: i64, schedule: &MatmulSchedule, seed: u64) {
    check_shape(MatmulShape::plain(m, n, k), false, schedule, seed);
}

fn small_schedule(lanes: u16, threads: i64) -> MatmulSchedule {
    let w = i64::from(lanes);
    MatmulSchedule::new(3, 2 * w, lanes, 6, 4 * w, 16, threads)
}

fn with_split(s: MatmulSchedule, split: ThreadSplit) -> MatmulSchedule {
    MatmulSchedule { split, ..s }
}

#[test]
fn host_schedule_on_odd_shapes_with_one_and_two_threads() {
    let host = CpuTarget::host();
    for threads in [1, 2] {
        let schedule = MatmulSchedule::for_target(host, threads);
        check(37, 45, 19, &schedule, 11 + threads as u64);
        check(67, 101, 300, &schedule, 21 + threads as u64);
    }
}

#[test]
fn small_blocks_exercise_every_edge_and_k_slice() {
    let lanes = CpuTarget::host().f32_lanes().max(4);
    for threads in [1, 2, 3] {
        let schedule = small_schedule(lanes, threads);
        check(
            29,
            3 * i64::from(lanes) + 5,
            53,
            &schedule,
            31 + threads as u64,
        );
        // One `K`-slice and several row blocks: `B` is packed once per column block.
        check(
            29,
            3 * i64::from(lanes) + 5,
            13,
            &schedule,
            37 + threads as u64,
        );
    }
    check(1, 1, 1, &small_schedule(lanes, 2), 41);
    check(7, 2, 40, &small_schedule(lanes, 2), 43);
}

#[test]
fn every_thread_split_on_odd_shapes() {
    let lanes = CpuTarget::host().f32_lanes().max(4);
    for split in [
        ThreadSplit::Auto,
        ThreadSplit::Rows,
        ThreadSplit::Columns,
        ThreadSplit::ParallelK,
    ] {
        for threads in [2, 3] {
            let s = with_split(small_schedule(lanes, threads), split);
            check(13, 2 * i64::from(lanes) + 3, 71, &s, 61 + threads as u64);
            check(1, 5 * i64::from(lanes) + 1, 37, &s, 67 + threads as u64);
        }
    }
}

#[test]
fn parallel_k_on_a_gemv_like_shape() {
    let host = CpuTarget::host();
    let s = with_split(MatmulSchedule::for_target(host, 2), ThreadSplit::ParallelK);
    let shape = MatmulShape::plain(1, 77, 1001);
    assert_eq!(s.thread_grid(&shape).k, 2, "parallel-k splits K");
    check(1, 77, 1001, &s, 71);
    check(3, 130, 517, &s, 73);
}

#[test]
fn batch_matmul_with_and_without_broadcast() {
    let host = CpuTarget::host();
    let lanes = host.f32_lanes().max(4);
    let shapes = [
        (5, 5, 5, 13, 37, 21),
        (4, 1, 4, 9, 19, 300),
        (3, 3, 1, 17, 23, 29),
    ];
    for (i, &(batch, a_batch, b_batch, m, n, k)) in shapes.iter().enumerate() {
        let shape = MatmulShape {
            batch,
            a_batch,
            b_batch,
            m,
            n,
            k,
        };
        for threads in [1, 2, 3] {
            let seed = 100 + 10 * i as u64 + threads as u64;
            check_shape(
                shape,
                true,
                &MatmulSchedule::for_target(host, threads),
                seed,
            );
            check_shape(shape, true, &small_schedule(lanes, threads), seed + 5);
        }
    }
    let attention = MatmulShape {
        batch: 12,
        a_batch: 12,
        b_batch: 12,
        m: 128,
        n: 128,
        k: 64,
    };
    check_shape(attention, true, &MatmulSchedule::for_target(host, 2), 151);
}

/// `matrix` (`rows × cols`, row-major) as `w`-wide panels along `rows` when `by_rows`, else
/// along `cols`: `P[r / w][c][r % w]` or `P[c / w][r][c % w]`, the padding NaN so that
/// reading it into a stored element would show.
fn panels(
    matrix: &[f32],
    rows: usize,
    cols: usize,
    by_rows: bool,
    w: usize,
) -> (Vec<f32>, Vec<usize>) {
    let (split, other) = if by_rows { (rows, cols) } else { (cols, rows) };
    let count = split.div_ceil(w);
    let mut p = vec![f32::NAN; count * other * w];
    for r in 0..rows {
        for c in 0..cols {
            let (s, o) = if by_rows { (r, c) } else { (c, r) };
            p[((s / w) * other + o) * w + s % w] = matrix[r * cols + c];
        }
    }
    (p, vec![count, other, w])
}

/// `A` given as panels of a few rows or row-major and read as it is ([`ALayout::InPlace`]), and/or
/// `B` as 16-column panels: operands the micro-kernel reads in place; `C` stored in either
/// order.
fn check_panels(m: i64, n: i64, k: i64, layouts: Layouts, schedule: &MatmulSchedule) {
    let dir = tempfile::tempdir().expect("temp dir");
    let f = matmul_f32_with_layouts("mm", m, n, k, layouts, schedule).expect("valid instantiation");
    let module = IRModule::new("mm_panels", Target::Cpu).with(f);
    let compiled = build(module, &options_in(dir.path())).expect("builds");
    compiled
        .set_num_threads(schedule.threads as usize)
        .expect("exported by the C dialect");
    let mut rng = Rng::new((m * 1000 + n * 10 + k) as u64);
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    let a = rng.vec_f32(mu * ku);
    let b = rng.vec_f32(ku * nu);
    let (ap, ad) = match layouts.a {
        ALayout::Panels { rows } => panels(&a, mu, ku, true, rows as usize),
        _ => (a.clone(), vec![mu, ku]),
    };
    let (bp, bd) = match layouts.b {
        BLayout::Panels => panels(&b, ku, nu, false, B_PANEL_WIDTH as usize),
        BLayout::RowMajor => (b.clone(), vec![ku, nu]),
    };
    let mut c = vec![f32::NAN; mu * nu];
    compiled
        .kernel("mm")
        .expect("kernel exists")
        .call(&mut [
            KernelArg::tensor(&ap, &ad),
            KernelArg::tensor(&bp, &bd),
            KernelArg::tensor_mut(&mut c, &[mu, nu]),
        ])
        .expect("arguments match");
    let shape = MatmulShape::plain(m, n, k);
    let what = format!("panels {layouts:?} {shape:?} {schedule:?}");
    assert_matches(&shape, &a, &b, &c, &what);
}

#[test]
fn operands_in_panels_are_read_in_place() {
    let host = CpuTarget::host();
    let lanes = host.f32_lanes().max(4);
    // Left panels as tall as the default tile, the 16 rows of earlier versions, and 5 rows
    // (tiles straddling panels).
    let tile_rows = MatmulSchedule::for_target(host, 1).mr;
    let all = [
        (ALayout::RowMajor, BLayout::Panels),
        (ALayout::Panels { rows: tile_rows }, BLayout::RowMajor),
        (ALayout::Panels { rows: 16 }, BLayout::RowMajor),
        (ALayout::Panels { rows: 5 }, BLayout::Panels),
        (ALayout::Panels { rows: tile_rows }, BLayout::Panels),
        (ALayout::InPlace, BLayout::Panels),
        (ALayout::InPlace, BLayout::RowMajor),
    ];
    let stored = [CLayout::RowMajor, CLayout::ColumnMajor];
    let all = all
        .into_iter()
        .flat_map(|(a, b)| stored.map(|c| Layouts { a, b, c }));
    for layouts in all {
        for threads in [1, 2] {
            let s = MatmulSchedule::for_target(host, threads);
            check_panels(37, 45, 19, layouts, &s);
            check_panels(1, 1000, 300, layouts, &s);
            check_panels(67, 16, 130, layouts, &s);
        }
        for split in [
            ThreadSplit::Auto,
            ThreadSplit::Columns,
            ThreadSplit::ParallelK,
        ] {
            let s = with_split(small_schedule(lanes, 2), split);
            check_panels(13, 2 * i64::from(lanes) + 3, 71, layouts, &s);
            check_panels(1, 5 * i64::from(lanes) + 1, 37, layouts, &s);
        }
        // Register tiles of 8 columns (4 lanes): tiles that are not whole panels.
        check_panels(23, 41, 35, layouts, &small_schedule(4, 2));
    }
}

/// One batched product with `A` row-major (`[a_batch, m, k]`) or, with `ALayout::Panels`,
/// its one matrix as panels of rows, and `B` row-major or as 16-column panels per batch
/// (`[b_batch, ⌈n / 16⌉, k, 16]`), the padding NaN; checked against a float64 product.
fn check_batched(shape: &MatmulShape, layouts: Layouts, schedule: &MatmulSchedule, seed: u64) {
    let width = B_PANEL_WIDTH as usize;
    let dir = tempfile::tempdir().expect("temp dir");
    let f = batch_matmul_f32_with_layouts("bmm", shape, layouts, schedule)
        .expect("valid instantiation");
    let module = IRModule::new("bmm_panels", Target::Cpu).with(f);
    let compiled = build(module, &options_in(dir.path())).expect("builds");
    compiled
        .set_num_threads(schedule.threads as usize)
        .expect("exported by the C dialect");
    let mut rng = Rng::new(seed);
    let (mu, nu, ku) = (shape.m as usize, shape.n as usize, shape.k as usize);
    let (batch, a_batch, b_batch) = (
        shape.batch as usize,
        shape.a_batch as usize,
        shape.b_batch as usize,
    );
    let a = rng.vec_f32(a_batch * mu * ku);
    let b = rng.vec_f32(b_batch * ku * nu);
    let (ap, ad) = match layouts.a {
        ALayout::Panels { rows } => panels(&a, mu, ku, true, rows as usize),
        _ => (a.clone(), vec![a_batch, mu, ku]),
    };
    let (bp, bd) = match layouts.b {
        BLayout::Panels => {
            let mut bp = Vec::new();
            for matrix in b.chunks(ku * nu) {
                bp.extend(panels(matrix, ku, nu, false, width).0);
            }
            (bp, vec![b_batch, nu.div_ceil(width), ku, width])
        }
        BLayout::RowMajor => (b.clone(), vec![b_batch, ku, nu]),
    };
    let mut c = vec![f32::NAN; batch * mu * nu];
    compiled
        .kernel("bmm")
        .expect("kernel exists")
        .call(&mut [
            KernelArg::tensor(&ap, &ad),
            KernelArg::tensor(&bp, &bd),
            KernelArg::tensor_mut(&mut c, &[batch, mu, nu]),
        ])
        .expect("arguments match");
    let what = format!("batched {layouts:?} {shape:?} {schedule:?}");
    assert_matches(shape, &a, &b, &c, &what);
}

/// Schedules for the batched layout tests: the host's defaults and small tiles split over
/// columns and over `k`.
fn batched_schedules() -> Vec<MatmulSchedule> {
    let host = CpuTarget::host();
    let lanes = host.f32_lanes().max(4);
    vec![
        MatmulSchedule::for_target(host, 1),
        MatmulSchedule::for_target(host, 2),
        with_split(small_schedule(lanes, 2), ThreadSplit::Columns),
        with_split(small_schedule(lanes, 2), ThreadSplit::ParallelK),
        small_schedule(4, 3),
    ]
}

/// A batch of `B` matrices stored as 16-column panels, read in place by the batched template,
/// with and without broadcast of `A` or `B`, over several schedules and thread splits.
#[test]
fn batched_panels_of_b_are_read_in_place() {
    let shapes = [
        (4, 4, 4, 49, 40, 37),
        (3, 1, 3, 13, 16, 70),
        (5, 5, 1, 7, 33, 9),
    ];
    for (i, &(batch, a_batch, b_batch, m, n, k)) in shapes.iter().enumerate() {
        let shape = MatmulShape {
            batch,
            a_batch,
            b_batch,
            m,
            n,
            k,
        };
        for (j, schedule) in batched_schedules().iter().enumerate() {
            let layouts = Layouts::of(ALayout::RowMajor, BLayout::Panels);
            check_batched(&shape, layouts, schedule, 300 + 10 * i as u64 + j as u64);
        }
    }
}

/// One left matrix for every batch (a convolution weight beside each image's pixels) stored
/// as panels of rows, read in place by the batched template, beside row-major and paneled
/// `B`; a batch of left matrices in panels is refused.
#[test]
fn batched_products_read_one_left_matrix_from_panels() {
    let tile_rows = MatmulSchedule::for_target(CpuTarget::host(), 1).mr;
    let shapes = [
        (3, 1, 3, 37, 45, 19),
        (8, 1, 8, 67, 169, 130),
        (2, 1, 2, 5, 16, 7),
    ];
    for (i, &(batch, a_batch, b_batch, m, n, k)) in shapes.iter().enumerate() {
        let shape = MatmulShape {
            batch,
            a_batch,
            b_batch,
            m,
            n,
            k,
        };
        for rows in [tile_rows, 5] {
            for b in [BLayout::RowMajor, BLayout::Panels] {
                for c in [CLayout::RowMajor, CLayout::ColumnMajor] {
                    let layouts = Layouts {
                        a: ALayout::Panels { rows },
                        b,
                        c,
                    };
                    for (j, schedule) in batched_schedules().iter().enumerate() {
                        check_batched(&shape, layouts, schedule, 500 + 10 * i as u64 + j as u64);
                    }
                }
            }
        }
    }
    let batch_of_left = MatmulShape {
        batch: 2,
        a_batch: 2,
        b_batch: 2,
        m: 8,
        n: 16,
        k: 4,
    };
    let layouts = Layouts::of(ALayout::Panels { rows: 4 }, BLayout::RowMajor);
    let schedule = MatmulSchedule::for_target(CpuTarget::host(), 1);
    let refused = batch_matmul_f32_with_layouts("bmm", &batch_of_left, layouts, &schedule);
    assert!(refused.is_err(), "A panels with a_batch 2 must be refused");
}

#[test]
fn narrower_vectors_than_the_host_also_work() {
    for lanes in [4u16, 8] {
        check(23, 41, 35, &small_schedule(lanes, 2), 51 + u64::from(lanes));
    }
}

#[test]
fn invalid_schedules_and_shapes_are_errors() {
    let good = small_schedule(8, 1);
    let bad_nr = MatmulSchedule { nr: 12, ..good };
    assert!(matches!(
        matmul_f32("mm", 8, 8, 8, &bad_nr),
        Err(TemplateError::InvalidSchedule(_))
    ));
    let bad_mc = MatmulSchedule { mc: 7, ..good };
    assert!(matches!(
        matmul_f32("mm", 8, 8, 8, &bad_mc),
        Err(TemplateError::InvalidSchedule(_))
    ));
    let bad_lanes = MatmulSchedule {
        lanes: 6,
        nr: 12,
        nc: 24,
        ..good
    };
    assert!(matches!(
        matmul_f32("mm", 8, 8, 8, &bad_lanes),
        Err(TemplateError::InvalidSchedule(_))
    ));
    assert!(matches!(
        matmul_f32("mm", 0, 8, 8, &good),
        Err(TemplateError::InvalidShape(_))
    ));
    assert!(matches!(
        matmul_f32("mm", 1 << 20, 1 << 12, 8, &good),
        Err(TemplateError::InvalidShape(_))
    ));
    let bad_broadcast = MatmulShape {
        batch: 4,
        a_batch: 2,
        ..MatmulShape::plain(3, 3, 3)
    };
    assert!(matches!(
        batch_matmul_f32("mm", &bad_broadcast, &good),
        Err(TemplateError::InvalidShape(_))
    ));
    for rows in [0, 65] {
        let layouts = (ALayout::Panels { rows }, BLayout::RowMajor);
        assert!(matches!(
            matmul_f32_with_layouts("mm", 8, 8, 8, Layouts::of(layouts.0, layouts.1), &good),
            Err(TemplateError::InvalidShape(_))
        ));
    }
    let err: CpuError = TemplateError::InvalidShape("x".into()).into();
    assert!(err.to_string().contains("invalid shape"));
}

#[test]
fn thread_grid_follows_the_split() {
    let s = MatmulSchedule::new(4, 16, 16, 64, 256, 128, 4);
    let grid = |split, shape: MatmulShape| with_split(s, split).thread_grid(&shape);
    let g = |k, batch, rows, cols| ThreadGrid {
        k,
        batch,
        rows,
        cols,
    };
    // 32 row panels, 1 column panel: rows.
    assert_eq!(
        grid(ThreadSplit::Auto, MatmulShape::plain(128, 16, 64)),
        g(1, 1, 4, 1)
    );
    // 1 row panel, 8 column panels: columns.
    assert_eq!(
        grid(ThreadSplit::Auto, MatmulShape::plain(4, 128, 64)),
        g(1, 1, 1, 4)
    );
    // One tile only and a deep K: parallel-k.
    assert_eq!(
        grid(ThreadSplit::Auto, MatmulShape::plain(1, 16, 4096)),
        g(4, 1, 1, 1)
    );
    let batched = MatmulShape {
        batch: 8,
        a_batch: 8,
        b_batch: 1,
        ..MatmulShape::plain(64, 64, 64)
    };
    assert_eq!(grid(ThreadSplit::Auto, batched), g(1, 4, 1, 1));
    let rows_only = grid(ThreadSplit::Rows, MatmulShape::plain(4, 128, 64));
    assert_eq!((rows_only.k, rows_only.cols), (1, 1));
    let cols_only = grid(ThreadSplit::Columns, MatmulShape::plain(128, 16, 64));
    assert_eq!((cols_only.k, cols_only.rows), (1, 1));
    assert_eq!(
        grid(ThreadSplit::ParallelK, MatmulShape::plain(128, 16, 64)),
        g(4, 1, 1, 1)
    );
    // Partial sums too large for parallel-k: falls back to Auto.
    let big = MatmulShape::plain(1024, 1024, 64);
    assert_eq!(grid(ThreadSplit::ParallelK, big).k, 1);
}
