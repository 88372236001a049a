//! Tunes one plain f32 matmul `M × N × K` at a level and reports the tuning time, the winner
//! and its speedup over the level-0 heuristic.
//!
//! `cargo run --release -p hidet-cpu --example tune_matmul -- [M N K] [--level N]
//! [--threads N] [--max-candidates N]`
//!
//! Uses a fresh temporary kernel cache and tuning cache, so the time includes compiling every
//! candidate.

use std::time::Instant;

use hidet_cpu::graph_backend::tuning::{CpuTuneBackend, MatmulTask};
use hidet_cpu::{BuildOptions, CpuTarget, KernelCache};
use hidet_tune::report::{format_seconds, render_table};
use hidet_tune::{ProgressReporter, TuneConfig, TuneLevel, Tuner, TuningCache};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut sizes = Vec::new();
    let (mut level, mut threads, mut limit) = (1u32, CpuTarget::host().cores, None);
    let mut i = 0;
    while i < args.len() {
        let value = |i: usize| -> Result<usize, String> {
            args.get(i + 1)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{} needs a number", args[i]))
        };
        match args[i].as_str() {
            "--level" => level = value(i)? as u32,
            "--threads" => threads = value(i)?,
            "--max-candidates" => limit = Some(value(i)?),
            s => {
                sizes.push(s.parse::<i64>().map_err(|_| format!("bad size `{s}`"))?);
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    let (m, n, k) = match sizes.as_slice() {
        [] => (1024, 1024, 1024),
        [m, n, k] => (*m, *n, *k),
        _ => return Err("give M N K or nothing".into()),
    };
    let level = TuneLevel::from_number(level).map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let build = BuildOptions {
        cache: Some(KernelCache::new(dir.path())),
        ..BuildOptions::default()
    };
    let target = CpuTarget::host();
    let task = MatmulTask::plain(m, n, k, target, threads as i64).with_limit(limit);
    let runner = CpuTuneBackend::new(&build, threads);
    let mut config = TuneConfig::new(level, Some(TuningCache::in_cache_dir(dir.path())));
    config.jobs = target.cores;
    let reporter = ProgressReporter::new();
    let start = Instant::now();
    let results = Tuner::new(&runner, config)
        .with_observer(&reporter)
        .tune(std::slice::from_ref(&task))
        .map_err(|e| e.to_string())?;
    reporter.finish();
    let total = start.elapsed().as_secs_f64();
    let result = results
        .into_iter()
        .next()
        .ok_or("no result")?
        .map_err(|e| e.to_string())?;
    print!("{}", render_table(std::slice::from_ref(&result.summary)));
    let flops = 2.0 * (m * n * k) as f64;
    let gflops = |t: f64| flops / t / 1e9;
    if let (Some(b), Some(h)) = (&result.summary.best, &result.summary.heuristic) {
        println!(
            "winner {:.1} GFLOP/s, heuristic {:.1} GFLOP/s",
            gflops(b.median),
            gflops(h.median)
        );
    }
    println!(
        "matmul {m}x{n}x{k}, {threads} threads, level {level}: {} candidates tuned in {} on {}",
        result.summary.candidates,
        format_seconds(total),
        target.model
    );
    Ok(())
}
