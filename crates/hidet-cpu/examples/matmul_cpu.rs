//! fp32 matmul on the CPU with the task-mapped template of
//! `hidet_cpu::templates::matmul`, checked against a float64 reference.
//!
//! Run with `cargo run --release -p hidet-cpu --example matmul_cpu -- [OPTIONS]`:
//!
//! - `--candidates N`: also time the first `N` level-1 candidates
//!   (`matmul_candidates`) and report the fastest (default 0: the level-0
//!   schedule only);
//! - `--peak GFLOPS`: the machine's FMA peak for the thread count (see the
//!   `fma_peak` example), to print achieved fractions;
//! - `--runs N`: timed runs per measurement (default 31);
//! - `--threads N`: threads (default 2).
//!
//! Cases (M × N × K, 2 threads): 257×513×129, 1024×1024×1024,
//! 128×3072×768 (BERT's first FFN matmul: 128 tokens, 768 → 3072),
//! 1×768×768 and 1×3072×768 (GEMV-like). For each it prints the schedule,
//! `max_rel_err = max |C - ref| / max(|ref|, 1e-6)` against float64
//! (inputs uniform in [0.05, 1), so no output is near zero) and the GFLOP/s
//! of the median and of the fastest run after warm-up; then the load average, since the
//! machine may be shared.

use hidet_cpu::templates::{matmul_candidates, matmul_f32, MatmulSchedule};
use hidet_cpu::{build, BuildOptions, CpuTarget, KernelArg};
use hidet_ir::function::{IRModule, Target};
use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Options {
    candidates: usize,
    peak: Option<f64>,
    runs: usize,
    threads: i64,
}

fn parse_options() -> Result<Options, Box<dyn Error>> {
    let mut o = Options {
        candidates: 0,
        peak: None,
        runs: 31,
        threads: 2,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--candidates" => o.candidates = value.parse()?,
            "--peak" => o.peak = Some(value.parse()?),
            "--runs" => o.runs = value.parse::<usize>()?.max(1),
            "--threads" => o.threads = value.parse::<i64>()?.max(1),
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    Ok(o)
}

fn run() -> Result<(), Box<dyn Error>> {
    let options = parse_options()?;
    let target = CpuTarget::host();
    println!("host: {target}");
    let level0 = MatmulSchedule::for_target(target, options.threads);
    let mut schedules = vec![level0];
    for s in matmul_candidates(target, options.threads, options.candidates) {
        if !schedules.contains(&s) {
            schedules.push(s);
        }
    }
    let cases = [
        (257, 513, 129),
        (1024, 1024, 1024),
        (128, 3072, 768),
        (1, 768, 768),
        (1, 3072, 768),
    ];
    for (m, n, k) in cases {
        let mut best: Option<(f64, MatmulSchedule)> = None;
        for (i, schedule) in schedules.iter().enumerate() {
            let outcome = run_case(m, n, k, schedule, options.runs, options.threads)?;
            if outcome.max_rel_err > 1e-4 {
                return Err(format!(
                    "{m}x{n}x{k} {schedule:?}: max_rel_err {:.3e}",
                    outcome.max_rel_err
                )
                .into());
            }
            if i == 0 {
                println!(
                    "{m}x{n}x{k} level-0: max_rel_err {:.3e}, median {}, best run {}",
                    outcome.max_rel_err,
                    rate(outcome.gflops, options.peak),
                    rate(outcome.best_gflops, options.peak)
                );
            }
            if best.is_none_or(|(g, _)| outcome.gflops > g) {
                best = Some((outcome.gflops, *schedule));
            }
        }
        if let (Some((gflops, schedule)), true) = (best, schedules.len() > 1) {
            println!(
                "{m}x{n}x{k} best of {}: {} with {schedule:?}",
                schedules.len(),
                rate(gflops, options.peak)
            );
        }
    }
    println!(
        "loadavg {}",
        load_average().unwrap_or_else(|| "unknown".into())
    );
    Ok(())
}

fn rate(gflops: f64, peak: Option<f64>) -> String {
    match peak {
        Some(p) => format!("{gflops:.1} GFLOP/s ({:.0}% of {p:.0})", 100.0 * gflops / p),
        None => format!("{gflops:.1} GFLOP/s"),
    }
}

struct Outcome {
    max_rel_err: f64,
    /// From the median run.
    gflops: f64,
    /// From the fastest run.
    best_gflops: f64,
}

fn run_case(
    m: i64,
    n: i64,
    k: i64,
    schedule: &MatmulSchedule,
    runs: usize,
    threads: i64,
) -> Result<Outcome, Box<dyn Error>> {
    let kernel_ir = matmul_f32("matmul", m, n, k, schedule)?;
    let module = IRModule::new(format!("matmul_{m}x{n}x{k}"), Target::Cpu).with(kernel_ir);
    let compiled = build(module, &BuildOptions::default())?;
    compiled.set_num_threads(threads as usize)?;
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
    for _ in 0..3 {
        call(&mut c)?;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        call(&mut c)?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let flops = 2.0 * (m * n * k) as f64;
    Ok(Outcome {
        max_rel_err,
        gflops: flops / times[times.len() / 2] / 1e9,
        best_gflops: flops / times[0] / 1e9,
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

fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
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
