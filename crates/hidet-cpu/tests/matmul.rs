//! The fp32 matmul template against a float64 reference, on shapes that are
//! multiples of nothing, with several schedules and 1, 2 and 3 threads.

mod common;

use common::{options_in, Rng};
use hidet_cpu::templates::{matmul_f32, MatmulSchedule};
use hidet_cpu::{build, CpuError, CpuTarget, KernelArg, TemplateError};
use hidet_ir::function::{IRModule, Target};

/// Builds and runs the template for `m × n × k` and checks every output
/// element against float64 within a bound proportional to `Σ|a||b|`.
fn check(m: usize, n: usize, k: usize, schedule: &MatmulSchedule, seed: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let f = matmul_f32("mm", m as i64, n as i64, k as i64, schedule).expect("valid instantiation");
    let module = IRModule::new("mm_test", Target::Cpu).with(f);
    let compiled = build(module, &options_in(dir.path())).expect("builds");
    compiled
        .set_num_threads(schedule.threads as usize)
        .expect("exported by the C dialect");
    let mut rng = Rng::new(seed);
    let a = rng.vec_f32(m * k);
    let b = rng.vec_f32(k * n);
    let mut c = vec![f32::NAN; m * n];
    compiled
        .kernel("mm")
        .expect("kernel exists")
        .call(&mut [
            KernelArg::tensor(&a, &[m, k]),
            KernelArg::tensor(&b, &[k, n]),
            KernelArg::tensor_mut(&mut c, &[m, n]),
        ])
        .expect("arguments match");
    for i in 0..m {
        for j in 0..n {
            let (mut exact, mut magnitude) = (0.0f64, 0.0f64);
            for p in 0..k {
                let term = f64::from(a[i * k + p]) * f64::from(b[p * n + j]);
                exact += term;
                magnitude += term.abs();
            }
            let got = f64::from(c[i * n + j]);
            let tolerance = 1e-5 * magnitude + 1e-30;
            assert!(
                (got - exact).abs() <= tolerance,
                "{m}x{n}x{k} {schedule:?}: C[{i}][{j}] = {got}, float64 reference {exact}"
            );
        }
    }
}

fn small_schedule(lanes: u16, threads: i64) -> MatmulSchedule {
    let w = i64::from(lanes);
    MatmulSchedule {
        mr: 3,
        nr: 2 * w,
        lanes,
        mc: 6,
        nc: 4 * w,
        kc: 16,
        threads,
    }
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
            3 * lanes as usize + 5,
            53,
            &schedule,
            31 + threads as u64,
        );
    }
    check(1, 1, 1, &small_schedule(lanes, 2), 41);
    check(7, 2, 40, &small_schedule(lanes, 2), 43);
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
    assert!(matches!(
        matmul_f32("mm", 0, 8, 8, &good),
        Err(TemplateError::InvalidShape(_))
    ));
    assert!(matches!(
        matmul_f32("mm", 1 << 20, 1 << 12, 8, &good),
        Err(TemplateError::InvalidShape(_))
    ));
    let err: CpuError = TemplateError::InvalidShape("x".into()).into();
    assert!(err.to_string().contains("invalid shape"));
}

#[test]
fn thread_grid_minimizes_the_busiest_thread() {
    let s = MatmulSchedule {
        threads: 4,
        ..small_schedule(8, 4)
    };
    assert_eq!(s.thread_grid(8, 1), (4, 1));
    assert_eq!(s.thread_grid(1, 8), (1, 4));
    assert_eq!(s.thread_grid(2, 2), (2, 2));
    let two = MatmulSchedule { threads: 2, ..s };
    assert_eq!(two.thread_grid(7, 2), (1, 2));
}
