//! fp32 matmul on the CPU with the task-mapped template of
//! `hidet_cpu::templates::matmul`, checked against a float64 reference.
//!
//! Run with `cargo run --release -p hidet-cpu --example matmul_cpu`.
//!
//! For 257×513×129 and 1024×1024×1024 on 2 threads it prints the schedule,
//! the error and the speed. The error is
//! `max_rel_err = max over (i, j) of |C[i,j] - ref[i,j]| / max(|ref[i,j]|, 1e-6)`
//! where `ref` is computed in float64 from the same (float32) inputs; inputs
//! are uniform in [0.05, 1), so no output is near zero and the element-wise
//! relative error is meaningful. Speed is `2·M·N·K / t` for the median `t`
//! of several timed runs after warm-up. The last two lines are
//! `max_rel_err <value>` and `gflops <value>` for the 1024³ case.

use hidet_cpu::templates::{matmul_f32, MatmulSchedule};
use hidet_cpu::{build, BuildOptions, CpuTarget, KernelArg};
use hidet_ir::function::{IRModule, Target};
use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

const THREADS: i64 = 2;
const TIMED_RUNS: usize = 15;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Outcome {
    max_rel_err: f64,
    gflops: f64,
}

fn run() -> Result<(), Box<dyn Error>> {
    let target = CpuTarget::host();
    println!("host: {target}");
    let schedule = MatmulSchedule::for_target(target, THREADS);
    println!("schedule: {schedule:?}");
    let mut last = None;
    for (m, n, k) in [(257, 513, 129), (1024, 1024, 1024)] {
        let outcome = run_case(m, n, k, &schedule)?;
        println!(
            "{m}x{n}x{k}: max_rel_err {:.3e}, {:.1} GFLOP/s",
            outcome.max_rel_err, outcome.gflops
        );
        last = Some(outcome);
    }
    if let Some(peak) = fma_peak_gflops(target, THREADS) {
        let gflops = last.as_ref().map_or(0.0, |o| o.gflops);
        println!(
            "fma peak estimate {peak:.0} GFLOP/s ({} lanes x 2 FMA pipes x 2 flops x {:.2} GHz x {THREADS} threads); achieved {:.0}%",
            target.f32_lanes(),
            peak / (f64::from(target.f32_lanes()) * 4.0 * THREADS as f64),
            100.0 * gflops / peak
        );
    }
    let last = last.ok_or("no case ran")?;
    println!("max_rel_err {:.3e}", last.max_rel_err);
    println!("gflops {:.1}", last.gflops);
    Ok(())
}

fn run_case(m: i64, n: i64, k: i64, schedule: &MatmulSchedule) -> Result<Outcome, Box<dyn Error>> {
    let kernel_ir = matmul_f32("matmul", m, n, k, schedule)?;
    let module = IRModule::new(format!("matmul_{m}x{n}x{k}"), Target::Cpu).with(kernel_ir);
    let compiled = build(module, &BuildOptions::default())?;
    compiled.set_num_threads(THREADS as usize)?;
    let kernel = compiled.kernel("matmul")?;
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    let mut rng = Rng(0x5eed ^ (m * 31 + n * 7 + k) as u64);
    let a: Vec<f32> = (0..mu * ku).map(|_| rng.uniform()).collect();
    let b: Vec<f32> = (0..ku * nu).map(|_| rng.uniform()).collect();
    let mut c = vec![f32::NAN; mu * nu];
    let call = |c: &mut [f32]| {
        kernel.call(&mut [
            KernelArg::tensor(&a, &[mu, ku]),
            KernelArg::tensor(&b, &[ku, nu]),
            KernelArg::tensor_mut(c, &[mu, nu]),
        ])
    };
    call(&mut c)?;
    let reference = reference_f64(&a, &b, mu, nu, ku);
    let max_rel_err = c
        .iter()
        .zip(&reference)
        .map(|(&x, &r)| (f64::from(x) - r).abs() / r.abs().max(1e-6))
        .fold(0.0f64, |acc, e| {
            if e.is_nan() {
                f64::INFINITY
            } else {
                acc.max(e)
            }
        });
    for _ in 0..2 {
        call(&mut c)?;
    }
    let mut times = Vec::with_capacity(TIMED_RUNS);
    for _ in 0..TIMED_RUNS {
        let start = Instant::now();
        call(&mut c)?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    Ok(Outcome {
        max_rel_err,
        gflops: 2.0 * (m * n * k) as f64 / median / 1e9,
    })
}

/// `A · B` in float64, rows split over two threads.
fn reference_f64(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; m * n];
    let half = m.div_ceil(2) * n;
    let (top, bottom) = out.split_at_mut(half.min(m * n));
    std::thread::scope(|s| {
        for (row0, part) in [(0, top), (m.div_ceil(2), bottom)] {
            s.spawn(move || {
                for (r, row) in part.chunks_mut(n).enumerate() {
                    let i = row0 + r;
                    for p in 0..k {
                        let aip = f64::from(a[i * k + p]);
                        for (o, &bv) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                            *o += aip * f64::from(bv);
                        }
                    }
                }
            });
        }
    });
    out
}

/// A rough single-precision FMA peak: lanes × 2 FMA pipes × 2 flops × the
/// clock the OS reports × threads. `None` when the clock is unknown.
fn fma_peak_gflops(target: &CpuTarget, threads: i64) -> Option<f64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz: f64 = info.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "cpu MHz").then(|| value.trim().parse().ok())?
    })?;
    Some(f64::from(target.f32_lanes()) * 2.0 * 2.0 * mhz / 1e3 * threads as f64)
}

/// xorshift64* for reproducible inputs.
struct Rng(u64);

impl Rng {
    /// Uniform in [0.05, 1).
    fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        0.05 + 0.95 * (bits as f32 / (1u64 << 24) as f32)
    }
}
