//! The cost of one parallel launch on hidet's thread pool (`hidet_cpu::parallel::launch`):
//! two tasks of a fixed amount of busy work on two threads, against one task alone.
//!
//! Run with `cargo run --release -p hidet-cpu --example launch_overhead`. For each work
//! size it prints the time of one task on the calling thread and the median, 10th and
//! 90th percentile of 20 000 launches of two such tasks on two threads; with both vCPUs
//! free the launch takes about as long as one task.

use std::ffi::c_void;
use std::time::Instant;

/// Busy work: `env` is the number of iterations.
unsafe extern "C" fn spin(env: *mut c_void, _task: i32) {
    let mut x = 0u64;
    for i in 0..env as u64 {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
}

fn main() {
    const LAUNCHES: usize = 20_000;
    for work in [0usize, 1_000, 10_000, 100_000] {
        let env = work as *mut c_void;
        let start = Instant::now();
        for _ in 0..200 {
            // SAFETY: `spin` reads nothing through `env`; any index is fine.
            unsafe { spin(env, 0) };
        }
        let one = start.elapsed().as_nanos() / 200;
        let mut times: Vec<u128> = (0..LAUNCHES)
            .map(|_| {
                let t = Instant::now();
                // SAFETY: as above; `spin` may run on any thread.
                unsafe { hidet_cpu::parallel::launch(spin, env, 2, 2) };
                t.elapsed().as_nanos()
            })
            .collect();
        times.sort_unstable();
        println!(
            "work {work:>6}: one task {one:>7} ns; launch of 2 tasks on 2 threads: median {:>7} ns, p10 {:>7}, p90 {:>7}",
            times[LAUNCHES / 2],
            times[LAUNCHES / 10],
            times[LAUNCHES * 9 / 10]
        );
    }
}
