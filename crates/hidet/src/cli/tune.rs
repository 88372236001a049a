//! `hidet tune MODEL --level N`: compile a model while tuning every matmul task at level N,
//! with a progress bar (stderr, hidden when not a terminal), then print a summary table and
//! the total time. Results go to the tuning cache (`$HIDET_CACHE_DIR/tuning`), so later
//! `hidet run`, `bench` and `compile` use the winners.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use hidet::graph::compiled::{CompileOptions, CompiledModel};
use hidet::graph::Tensor;
use hidet::pipeline::PipelineError;
use hidet::zoo::inputs::complete_inputs;
use hidet::zoo::SEED;
use hidet_cpu::graph_backend::tuning::CpuTuning;
use hidet_cpu::graph_backend::{CpuBackend, CpuBackendOptions};
use hidet_tune::report::{format_seconds, render_table};
use hidet_tune::{ProgressReporter, TuneLevel};

use super::{npy, source, CliError};

/// Options of `hidet tune`.
#[derive(Debug, Clone)]
pub struct TuneArgs {
    pub model: String,
    /// `NAME=FILE.npy` inputs fixing input shapes; the others get the shapes `hidet bench`
    /// would synthesize.
    pub inputs: Vec<String>,
    pub level: u32,
    pub threads: Option<usize>,
    /// At most this many candidates per task.
    pub max_candidates: Option<usize>,
    /// Measure again even where the tuning cache has a result.
    pub retune: bool,
    /// Print one JSON object (the task summaries) as the last stdout line.
    pub json: bool,
}

/// Runs `hidet tune` (see the module docs).
pub fn run(args: &TuneArgs) -> Result<(), CliError> {
    let level = TuneLevel::from_number(args.level).map_err(|e| CliError::Other(e.to_string()))?;
    if args.threads == Some(0) {
        return Err(CliError::Other("--threads must be at least 1".into()));
    }
    if args.max_candidates == Some(0) {
        return Err(CliError::Other(
            "--max-candidates must be at least 1".into(),
        ));
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
    let tuning = CpuTuning {
        level: Some(level),
        ignore_cache: args.retune,
        candidate_limit: args.max_candidates,
        observer: Some(reporter.clone()),
        ..CpuTuning::default()
    };
    let backend = CpuBackend::new(CpuBackendOptions::default()).with_tuning(tuning);
    let opts = CompileOptions {
        threads: args.threads,
        ..CompileOptions::default()
    };
    let model = CompiledModel::new(graph.clone(), backend, opts);
    let compiled = model.compiled(&shapes);
    reporter.finish();
    let compiled = compiled.map_err(PipelineError::from)?;
    let total = start.elapsed().as_secs_f64();
    let summaries = reporter.summaries();
    let tuned: f64 = summaries
        .iter()
        .filter(|s| s.source == hidet_tune::observer::ResultSource::Tuned)
        .map(|s| s.seconds)
        .sum();
    if args.json {
        let obj = serde_json::json!({
            "model": loaded.label,
            "level": level.number(),
            "kernels": compiled.report().kernels,
            "total_seconds": total,
            "tasks": summaries,
        });
        println!("{obj}");
        return Ok(());
    }
    println!(
        "{}: {} kernels, tuning level {level}",
        loaded.label,
        compiled.report().kernels
    );
    if !level.measures() {
        println!("level 0: nothing measured (cached winners where recorded, else the heuristic)");
    } else if summaries.is_empty() {
        println!("no tunable task (matmul anchors) in this model");
    } else {
        print!("{}", render_table(&summaries));
    }
    println!(
        "total {} (tuning {}, of which the rest is loading, lowering and building)",
        format_seconds(total),
        format_seconds(tuned)
    );
    Ok(())
}
