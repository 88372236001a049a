//! The SIMT matmul template's emitted CUDA C, run on the CPU (every thread a
//! POSIX thread, see `common/host_threads.rs`), against a float64 reference
//! on shapes that are not multiples of any tile.

use crate::common;

use common::host_threads::HostKernel;
use common::{matmul_f64, Rng};
use hidet_cuda::emit_cuda;
use hidet_cuda::templates::matmul_simt::{
    build, kernel_name, showcase_schedules, LaneOrder, MatmulSimtSchedule,
};
use hidet_ir::function::FunctionKind;

fn check(schedule: &MatmulSimtSchedule, m: usize, n: usize, k: usize, seed: u64) {
    let module = build(m as i64, n as i64, k as i64, schedule).expect("valid schedule and shape");
    let kernel = &module.functions[0];
    let FunctionKind::CudaKernel(launch) = &kernel.kind else {
        panic!("the first function is the kernel");
    };
    let grid: Vec<u32> = launch
        .grid
        .iter()
        .map(|g| g.as_int().expect("constant grid") as u32)
        .collect();
    let threads = launch.threads_per_block() as u32;
    let source = emit_cuda(&module).expect("the template emits CUDA C");
    let host = HostKernel::compile(&source, &kernel_name(schedule), 3);

    let mut rng = Rng::new(seed);
    let mut a = rng.vec(m * k);
    let mut b = rng.vec(k * n);
    let sentinel = 1234.5f32;
    let mut c = vec![sentinel; m * n + 64];
    host.run(
        [grid[0], grid[1], grid[2]],
        threads,
        &mut [&mut a, &mut b, &mut c],
    );

    let (reference, scale) = matmul_f64(&a, &b, m, n, k);
    let mut worst = 0f64;
    for (i, (&got, (&want, &s))) in c.iter().zip(reference.iter().zip(&scale)).enumerate() {
        let err = (f64::from(got) - want).abs();
        let tol = 4.0 * f64::from(f32::EPSILON) * (k as f64).sqrt() * s.max(1e-30) + 1e-12;
        assert!(
            err <= tol,
            "{schedule}: C[{}, {}] = {got}, expected {want} (error {err:e} > {tol:e}), {m}x{n}x{k}",
            i / n,
            i % n
        );
        worst = worst.max(err / s.max(1e-30));
    }
    assert!(
        c[m * n..].iter().all(|&v| v == sentinel),
        "{schedule}: the kernel wrote past the end of C"
    );
    assert!(worst < 1e-5, "{schedule}: relative error {worst:e}");
}

#[test]
fn small_tile_schedule_matches_float64_reference_with_remainders_everywhere() {
    // 32x16x4 tiles, 64 threads: 3x5 blocks with partial tiles in M, N and K.
    let s = showcase_schedules()[3];
    assert_eq!(s.block_tile(), [32, 16]);
    check(&s, 70, 45, 37, 1);
}

#[test]
fn paper_schedule_matches_float64_reference() {
    // 128x128x8 tiles, 256 threads, on a shape smaller than one tile in N
    // and with a partial k-tile.
    check(&showcase_schedules()[0], 131, 77, 29, 2);
}

#[test]
fn column_major_lane_layouts_match_float64_reference() {
    // 256x16 tiles with 16x2 column-major lanes (the case that caught a
    // simplifier bug in lane coordinates) and 32x128x16 with 4x8 column-major.
    check(&showcase_schedules()[6], 300, 41, 19, 3);
    check(&showcase_schedules()[2], 45, 150, 50, 4);
}

#[test]
fn single_k_tile_and_single_element_edges() {
    let s = MatmulSimtSchedule {
        block_warps: [2, 1],
        warp_outer: [1, 1],
        lanes: [8, 4],
        lane_order: LaneOrder::RowMajor,
        warp_inner: [2, 2],
        block_k: 8,
    };
    check(&s, 33, 9, 3, 5);
    check(&s, 1, 1, 1, 6);
}
