//! `hidet tune MODEL --level N`: compile a model while tuning every matmul task at level N,
//! with a progress bar (stderr, hidden when not a terminal), then print a summary table and
//! the total time. Results go to the tuning cache (`$HIDET_CACHE_DIR/tuning`), so later
//! `hidet run`, `bench` and `compile` use the winners.
//!
//! With `--device cuda` the SIMT matmul and convolution tasks are tuned on GPU 0 instead
//! ([`super::tune_cuda`]).
//!
//! Then the in-model check (`--model-check-runs`, see
//! [`hidet_cpu::graph_backend::tuning::model_check`]): the model built with the winners and
//! built with the heuristics run alternately, each task not yet checked keeps whichever
//! schedule was faster inside the model, and the build later commands will make is timed
//! against the heuristic one. A check that fails is a warning: the tuning results stay.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use hidet::graph::compiled::{CompileOptions, CompiledGraph, CompiledModel};
use hidet::graph::{Graph, Tensor};
use hidet::pipeline::PipelineError;
use hidet::zoo::inputs::complete_inputs;
use hidet::zoo::SEED;
use hidet_cpu::graph_backend::tuning::model_check::{
    check_in_model, pending_checks, time_alternately, CheckPlan, ModelCheckReport,
};
use hidet_cpu::graph_backend::tuning::{tuning_cache, CpuTuning};
use hidet_cpu::graph_backend::{CpuBackend, CpuBackendOptions};
use hidet_tune::report::{align_columns, format_seconds, render_table};
use hidet_tune::{ProgressReporter, TuneLevel, TuningCache};

use super::{npy, source, CliError};

/// Options of `hidet tune`.
#[derive(Debug, Clone)]
pub struct TuneArgs {
    /// The device tuned for (checked by [`check_device`]).
    pub device: hidet::pipeline::Device,
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
    /// Interleaved runs of each build for the in-model check (0: no check).
    pub model_check_runs: usize,
    /// The largest run-time spread at which the check stores its verdicts.
    pub model_check_max_spread: f64,
    /// Print one JSON object (the task summaries) as the last stdout line.
    pub json: bool,
}

/// Whether `hidet tune` can tune for `device`: the CPU, or a GPU this machine has. The GPU
/// simulator has no timing (it runs kernels on the CPU, block after block), so tuning on it is
/// refused; `cuda` without an NVIDIA driver or GPU fails naming which is missing.
pub fn check_device(device: hidet::pipeline::Device) -> Result<(), CliError> {
    use hidet::pipeline::Device;
    match device {
        Device::Cpu => Ok(()),
        Device::CudaSim => Err(CliError::Other(
            "cannot tune on --device cuda-sim: the GPU simulator has no timing (it runs \
             kernels on the CPU); tune with --device cpu, or --device cuda on a GPU"
                .into(),
        )),
        Device::Cuda => Ok(device.check_runnable()?),
    }
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
    if args.device == hidet::pipeline::Device::Cuda {
        return super::tune_cuda::run(args, level);
    }
    let start = Instant::now();
    let specs = super::run::parse_inputs(&args.inputs)?;
    let loaded = source::load(&args.model)?;
    let graph = &loaded.model.graph;
    let given: Vec<(String, Tensor)> = specs
        .iter()
        .map(|(name, path): &(String, PathBuf)| Ok((name.clone(), npy::read(path)?)))
        .collect::<Result<_, CliError>>()?;
    let inputs: Vec<(String, Tensor)> = complete_inputs(graph, &given, SEED)?
        .into_iter()
        .map(|(name, t, _)| (name, t))
        .collect();
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t)| t.shape().to_vec()).collect();

    let reporter = Arc::new(ProgressReporter::new());
    let tuning = CpuTuning {
        level: Some(level),
        ignore_cache: args.retune,
        candidate_limit: args.max_candidates,
        observer: Some(reporter.clone()),
        ..CpuTuning::default()
    };
    let options = CpuBackendOptions::default();
    let backend = CpuBackend::new(options.clone()).with_tuning(tuning);
    let cache = tuning_cache(&backend);
    let opts = CompileOptions {
        threads: args.threads,
        ..CompileOptions::default()
    };
    let model = CompiledModel::new(graph.clone(), backend, opts.clone());
    let compiled = model.compiled(&shapes);
    reporter.finish();
    let compiled = compiled.map_err(PipelineError::from)?;
    let check = (level.measures() && args.model_check_runs > 0).then(|| {
        let started = Instant::now();
        let setup = CheckSetup {
            graph,
            shapes: &shapes,
            inputs: &inputs,
            options: &options,
            opts: &opts,
            cache: &cache,
            plan: CheckPlan {
                runs: args.model_check_runs,
                max_spread: args.model_check_max_spread,
            },
            label: &loaded.label,
            quiet: args.json,
        };
        let outcome = check_model(&setup, &compiled);
        if let Err(e) = &outcome {
            eprintln!("warning: in-model check not done: {e}");
        }
        (outcome, started.elapsed().as_secs_f64())
    });
    let total = start.elapsed().as_secs_f64();
    let summaries = reporter.summaries();
    // A task used by several kernels has one summary per use but was tuned once.
    let tuned: f64 = summaries
        .iter()
        .filter(|s| s.source == hidet_tune::observer::ResultSource::Tuned)
        .map(|s| (s.task.as_str(), s.seconds))
        .collect::<std::collections::HashMap<&str, f64>>()
        .values()
        .fold(0.0, |a, b| a + b);
    if args.json {
        let obj = serde_json::json!({
            "model": loaded.label,
            "level": level.number(),
            "kernels": compiled.report().kernels,
            "total_seconds": total,
            "tasks": summaries,
            "model_check": check.as_ref().map(|(outcome, seconds)| check_json(outcome, *seconds)),
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
    let check_seconds = match &check {
        Some((Ok(checked), seconds)) => {
            print!("{}", render_check(checked));
            *seconds
        }
        Some((Err(_), seconds)) => *seconds,
        None => 0.0,
    };
    println!(
        "total {} (tuning {}, in-model check {}, the rest loading, lowering and building)",
        format_seconds(total),
        format_seconds(tuned),
        format_seconds(check_seconds)
    );
    Ok(())
}

/// What the in-model check needs besides the tuned build.
struct CheckSetup<'a> {
    graph: &'a Graph,
    shapes: &'a [Vec<usize>],
    inputs: &'a [(String, Tensor)],
    /// The options of the tuned build; the other builds use the same.
    options: &'a CpuBackendOptions,
    opts: &'a CompileOptions,
    cache: &'a TuningCache,
    plan: CheckPlan,
    label: &'a str,
    quiet: bool,
}

/// The check's report and, when it ran, the median time of one run built with the
/// heuristics and built with the chosen schedules (seconds), measured alternately.
struct Checked {
    report: ModelCheckReport,
    measured: Option<(f64, f64)>,
}

/// Runs the in-model check when a task awaits one (see the module docs), then times the
/// build that later commands will make against the heuristic one.
fn check_model(
    setup: &CheckSetup<'_>,
    tuned: &CompiledGraph<CpuBackend>,
) -> Result<Checked, String> {
    let pending =
        pending_checks(tuned, &setup.options.build, setup.cache).map_err(|e| e.to_string())?;
    if pending.is_empty() {
        return Ok(Checked {
            report: ModelCheckReport::default(),
            measured: None,
        });
    }
    if !setup.quiet {
        eprintln!(
            "checking the tuned schedules in the model ({} runs with the winners, {} with the heuristics)",
            setup.plan.runs, setup.plan.runs
        );
    }
    let compile = |tuning: CpuTuning| {
        let backend = CpuBackend::new(setup.options.clone()).with_tuning(tuning);
        CompiledModel::new(setup.graph.clone(), backend, setup.opts.clone())
            .compiled(setup.shapes)
            .map_err(|e| format!("building the model: {e}"))
    };
    let heuristic = compile(CpuTuning {
        ignore_cache: true,
        ..CpuTuning::default()
    })?;
    let report = check_in_model(
        tuned,
        &heuristic,
        setup.inputs,
        pending,
        setup.cache,
        &setup.plan,
        setup.label,
    )
    .map_err(|e| e.to_string())?;
    let chosen = compile(CpuTuning::default())?;
    let measured = time_alternately(&heuristic, &chosen, setup.inputs, setup.plan.runs)
        .map_err(|e| format!("running the model: {e}"))?;
    Ok(Checked {
        report,
        measured: Some(measured),
    })
}

fn check_json(outcome: &Result<Checked, String>, seconds: f64) -> serde_json::Value {
    let checked = match outcome {
        Ok(c) => c,
        Err(e) => return serde_json::json!({ "error": e, "seconds": seconds }),
    };
    let check = &checked.report;
    serde_json::json!({
        "seconds": seconds,
        "runs": check.runs,
        "tuned_seconds": check.tuned_seconds,
        "heuristic_seconds": check.heuristic_seconds,
        "estimated_seconds": check.estimated_seconds,
        "spread": check.spread,
        "stored": check.stored,
        "measured": checked.measured.map(|(heuristic, chosen)| serde_json::json!({
            "heuristic_seconds": heuristic,
            "chosen_seconds": chosen,
        })),
        "tasks": check.tasks.iter().map(|t| serde_json::json!({
            "task": t.task,
            "kernels": t.kernels,
            "winner": t.winner,
            "heuristic": t.heuristic,
            "winner_seconds": t.check.winner_seconds,
            "heuristic_seconds": t.check.heuristic_seconds,
            "keeps": if t.check.prefers_heuristic() { "heuristic" } else { "winner" },
        })).collect::<Vec<_>>(),
    })
}

/// The in-model check as a table and summary lines.
fn render_check(checked: &Checked) -> String {
    let check = &checked.report;
    if check.tasks.is_empty() {
        return "in-model check: no task awaits one\n".into();
    }
    let mut out = String::from("in-model check (time per run in the task's kernels):\n");
    let mut table = vec![["task", "kernels", "winner", "heuristic", "keeps"].map(str::to_string)];
    for t in &check.tasks {
        table.push([
            t.task.clone(),
            t.kernels.to_string(),
            format!("{} {}", format_seconds(t.check.winner_seconds), t.winner),
            format!(
                "{} {}",
                format_seconds(t.check.heuristic_seconds),
                t.heuristic
            ),
            if t.check.prefers_heuristic() {
                "heuristic"
            } else {
                "winner"
            }
            .to_string(),
        ]);
    }
    out.push_str(&align_columns(&table));
    if !check.stored {
        out.push_str(&format!(
            "warning: the model's run times spread by {:.1}% (more than --model-check-max-spread): \
             the machine is busy or the model too short to time steadily, so these verdicts were \
             not stored; run `hidet tune` again to check these tasks, or raise the limit\n",
            100.0 * check.spread
        ));
    }
    let kept = check
        .tasks
        .iter()
        .filter(|t| t.check.prefers_heuristic())
        .count();
    out.push_str(&format!(
        "{kept} of {} checked tasks keep the heuristic; sums of kernel medians over {} alternating runs: heuristics {}, winners {}, estimated with the choices {}\n",
        check.tasks.len(),
        check.runs,
        format_seconds(check.heuristic_seconds),
        format_seconds(check.tuned_seconds),
        format_seconds(check.estimated_seconds),
    ));
    if let Some((heuristic, chosen)) = checked.measured {
        out.push_str(&format!(
            "measured, median of {} alternating runs: built with the heuristics {}, with the chosen schedules {} ({:.3}x)\n",
            check.runs,
            format_seconds(heuristic),
            format_seconds(chosen),
            chosen / heuristic
        ));
    }
    out
}
