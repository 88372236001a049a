//! `hidet tune MODEL --device cuda --level N`: compile the model for GPU 0 while tuning every
//! SIMT matmul and convolution task at level N on it (candidates compiled by NVRTC in
//! parallel, timed one at a time with CUDA events; `hidet_cuda::tuning`), with a progress bar,
//! then print the summary table and the total time. Results go to the tuning cache
//! (`$HIDET_CACHE_DIR/tuning`, keyed by the GPU's name, architecture and SM count and the
//! NVRTC version), so later `hidet run`, `bench` and `compile --device cuda` on this GPU use
//! them. There is no in-model check on the GPU yet: winners are used as measured alone.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use hidet::graph::compiled::CompileOptions;
use hidet::graph::Tensor;
use hidet::pipeline::{self, PipelineError};
use hidet::zoo::inputs::complete_inputs;
use hidet::zoo::SEED;
use hidet_cuda::tuning::CudaTuning;
use hidet_tune::observer::ResultSource;
use hidet_tune::report::{format_seconds, render_table};
use hidet_tune::{ProgressReporter, TuneLevel};

use super::tune::TuneArgs;
use super::{npy, source, CliError};

/// Runs `hidet tune --device cuda` (see the module docs); the device was checked
/// ([`super::tune::check_device`]).
pub fn run(args: &TuneArgs, level: TuneLevel) -> Result<(), CliError> {
    if args.threads.is_some() {
        eprintln!("note: --threads has no effect with --device cuda");
    }
    let start = Instant::now();
    let specs = super::run::parse_inputs(&args.inputs)?;
    let loaded = source::load(&args.model)?;
    let graph = &loaded.model.graph;
    let given: Vec<(String, Tensor)> = specs
        .iter()
        .map(|(name, path): &(String, PathBuf)| Ok((name.clone(), npy::read(path)?)))
        .collect::<Result<_, CliError>>()?;
    let shapes: Vec<Vec<usize>> = complete_inputs(graph, &given, SEED)?
        .into_iter()
        .map(|(_, t, _)| t.shape().to_vec())
        .collect();
    let reporter = Arc::new(ProgressReporter::new());
    let tuning = CudaTuning {
        level: Some(level),
        ignore_cache: args.retune,
        candidate_limit: args.max_candidates,
        observer: Some(reporter.clone()),
        ..CudaTuning::default()
    };
    let model = pipeline::compile_gpu_tuned(&loaded.model, CompileOptions::default(), tuning)?;
    let compiled = model.compiled(&shapes);
    reporter.finish();
    let compiled = compiled.map_err(PipelineError::from)?;
    let total = start.elapsed().as_secs_f64();
    let summaries = reporter.summaries();
    // A task used by several kernels has one summary per use but was tuned once.
    let tuned: f64 = summaries
        .iter()
        .filter(|s| s.source == ResultSource::Tuned)
        .map(|s| (s.task.as_str(), s.seconds))
        .collect::<std::collections::HashMap<&str, f64>>()
        .values()
        .sum();
    if args.json {
        let obj = serde_json::json!({
            "model": loaded.label,
            "device": "cuda",
            "level": level.number(),
            "kernels": compiled.report().kernels,
            "total_seconds": total,
            "tasks": summaries,
            "model_check": serde_json::Value::Null,
        });
        println!("{obj}");
        return Ok(());
    }
    println!(
        "{}: {} kernels on cuda, tuning level {level}",
        loaded.label,
        compiled.report().kernels
    );
    if !level.measures() {
        println!("level 0: nothing measured (cached winners where recorded, else the heuristic)");
    } else if summaries.is_empty() {
        println!("no tunable task (SIMT matmul or convolution anchors) in this model");
    } else {
        print!("{}", render_table(&summaries));
    }
    println!(
        "total {} (tuning {}, the rest loading, lowering and building; no in-model check on cuda)",
        format_seconds(total),
        format_seconds(tuned)
    );
    Ok(())
}
