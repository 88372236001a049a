//! The machine's single-precision FMA peak, measured with a register-only
//! kernel: every thread runs `ITERS` iterations of [`chains`] independent
//! vector FMAs (`acc[r] = acc[r] · x + y`, fully unrolled, enough chains to
//! cover the FMA latency on every pipe, few enough that they, `x` and `y` stay in
//! the vector registers), then stores the sum of its accumulators so nothing is
//! optimized away.
//!
//! Run with `cargo run --release -p hidet-cpu --example fma_peak`. It
//! prints the median of `RUNS` timed runs for 1 and 2 threads as
//! `peak_gflops_1t <value>` and `peak_gflops_2t <value>`, and the 1-minute
//! load average of the machine (other jobs lower the 2-thread figure).

use hidet_cpu::{build, BuildOptions, CpuTarget, KernelArg};
use hidet_ir::prelude::*;
use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

/// Independent FMA chains per thread: as many as the registers hold beside `x`, `y` and
/// two spare, at most 16 (two FMA pipes of latency up to 8).
fn chains(target: &CpuTarget) -> i64 {
    (target.vector_registers() as i64 - 4).min(16)
}
const ITERS: i64 = 4_000_000;
const RUNS: usize = 15;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `fma_peak(xy: f32[2], out: f32[threads])`.
fn peak_kernel(lanes: u16, chains: i64, threads: i64) -> Function {
    let vec_t = DataType::vector(ScalarType::F32, lanes);
    let mut fb = FunctionBuilder::cpu_kernel("fma_peak");
    let xy = fb.tensor_param("xy", DataType::F32, [2]);
    let out = fb.tensor_param("out", DataType::F32, [threads]);
    fb.for_range_with("t", threads, LoopKind::Parallel, |fb, t| {
        let acc = fb.register_tensor("acc", vec_t, row_major([chains]));
        let chains = repeat_unrolled([chains]).expect("every target has more than 4 registers");
        let x = xy.at([0]).broadcast(lanes);
        let y = xy.at([1]).broadcast(lanes);
        fb.for_each(chains.on(0), |fb, r| {
            let start = (r[0].cast(DataType::F32) + t.cast(DataType::F32)).broadcast(lanes);
            fb.store(&acc, r.to_vec(), start);
        });
        fb.for_range("it", ITERS, |fb, _| {
            fb.for_each(chains.on(0), |fb, r| {
                let next = acc.at(r.to_vec()).fma(x.clone(), y.clone());
                fb.store(&acc, r.to_vec(), next);
            });
        });
        let total = fb.register_tensor("total", vec_t, row_major([1]));
        fb.store(&total, [0], Expr::zero(vec_t));
        fb.for_each(chains.on(0), |fb, r| {
            fb.store(&total, [0], total.at([0]) + acc.at(r.to_vec()));
        });
        let sum = fb.register_tensor("sum", DataType::F32, row_major([i64::from(lanes)]));
        fb.call(
            Intrinsic::VectorStore,
            vec![sum.at([0]).address(), total.at([0])],
        );
        fb.store(&out, [t.clone()], sum.at([0]));
    });
    fb.finish()
}

fn run() -> Result<(), Box<dyn Error>> {
    let target = CpuTarget::host();
    let lanes = target.f32_lanes();
    println!("host: {target}");
    for threads in [1i64, 2] {
        let module = IRModule::new(format!("fma_peak_{threads}t"), Target::Cpu).with(peak_kernel(
            lanes,
            chains(target),
            threads,
        ));
        let compiled = build(module, &BuildOptions::default())?;
        compiled.set_num_threads(threads as usize)?;
        let kernel = compiled.kernel("fma_peak")?;
        let xy = [0.999_999f32, 1e-7];
        let mut out = vec![0.0f32; threads as usize];
        let mut call = || {
            kernel.call(&mut [
                KernelArg::tensor(&xy, &[2]),
                KernelArg::tensor_mut(&mut out, &[threads as usize]),
            ])
        };
        call()?;
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let start = Instant::now();
            call()?;
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let flops = (threads * ITERS * chains(target) * i64::from(lanes) * 2) as f64;
        println!(
            "peak_gflops_{threads}t {:.1}",
            flops / times[times.len() / 2] / 1e9
        );
    }
    println!(
        "loadavg {}",
        load_average().unwrap_or_else(|| "unknown".into())
    );
    Ok(())
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
