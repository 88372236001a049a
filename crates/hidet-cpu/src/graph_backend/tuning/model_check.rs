//! The in-model check of tuned schedules.
//!
//! The tuner times each candidate alone, again and again on one workload. Inside a model a
//! kernel finds its input where the previous kernel left it (in the caches of the cores that
//! wrote it, split the way that kernel was split) and its weights in memory; a schedule that
//! wins alone can lose there (on ResNet-50, level-1 winners made the model slower than the
//! heuristics). So after tuning, a model built with the winners and one built with the
//! heuristics run one after the other, every step timed. For every tuned task the sum over
//! its kernels of their median times under each schedule goes into the task's record
//! ([`InModelCheck`]), and later builds compile whichever was faster
//! ([`TuningRecord::chosen`](hidet_tune::TuningRecord::chosen)); the heuristic replaces the
//! winner only when faster by more than [`IN_MODEL_MARGIN`](hidet_tune::IN_MODEL_MARGIN).
//!
//! A task is checked once: records that already carry a check, or whose winner is the
//! heuristic, are left alone (`hidet tune --retune` measures afresh and checks again).
//!
//! A busy machine makes the verdicts noise: when the whole-model run times of either build
//! spread by more than [`CheckPlan::max_spread`] (median absolute deviation over the
//! median), the check reports what it measured but stores nothing, so the tasks await a
//! check on a quieter run.

use std::collections::HashMap;

use hidet_graph::compiled::{CompiledError, CompiledGraph};
use hidet_graph::Tensor;
use hidet_tune::{InModelCheck, Lookup, Stats, TaskIdentity, TuneError, TuningCache, TuningRecord};

use super::{task_identity, MatmulCandidate};
use crate::graph_backend::CpuBackend;
use crate::options::BuildOptions;

/// Errors of [`check_in_model`].
#[derive(Debug, thiserror::Error)]
pub enum ModelCheckError {
    /// The two builds do not launch the same kernels in the same order.
    #[error("the tuned and the heuristic builds differ: {0}")]
    Mismatch(String),
    /// A build failed to run.
    #[error("running the model: {0}")]
    Run(#[from] CompiledError),
    /// A record could not be read or stored.
    #[error(transparent)]
    Tune(#[from] TuneError),
}

/// How [`check_in_model`] measures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckPlan {
    /// Interleaved runs of each build.
    pub runs: usize,
    /// The largest spread of either build's whole-model run times (median absolute
    /// deviation over the median) at which the verdicts are stored.
    pub max_spread: f64,
}

/// [`CheckPlan::max_spread`] by default: on a quiet machine the run times of a model spread
/// by well under 1%; a neighbour's load spreads them by 10% and more.
pub const DEFAULT_MAX_SPREAD: f64 = 0.05;

/// The check of one tuned task.
#[derive(Debug, Clone)]
pub struct TaskCheck {
    /// The task's key.
    pub task: String,
    /// The steps of the model that run this task's kernel.
    pub kernels: usize,
    /// The winner's label.
    pub winner: String,
    /// The heuristic's label.
    pub heuristic: String,
    /// What was measured (also stored in the task's record).
    pub check: InModelCheck,
}

/// What [`check_in_model`] measured. Times are sums of per-step medians (seconds per run).
#[derive(Debug, Clone, Default)]
pub struct ModelCheckReport {
    /// The checked tasks, in the order their kernels first run.
    pub tasks: Vec<TaskCheck>,
    /// Interleaved runs of each build (0 when nothing needed checking).
    pub runs: usize,
    /// Every step, built with the winners.
    pub tuned_seconds: f64,
    /// Every step, built with the heuristics.
    pub heuristic_seconds: f64,
    /// An estimate for the build with each checked task on its chosen schedule: the tuned
    /// build's steps, less each checked task's gain. It assumes a task's schedule does not
    /// change the other tasks' times; [`time_alternately`] measures the real build.
    pub estimated_seconds: f64,
    /// The larger of the two builds' whole-model run-time spreads ([`run_spread`]).
    pub spread: f64,
    /// Whether the verdicts went into the records (the spread was at most the plan's limit).
    pub stored: bool,
}

/// A task awaiting its check: its identity, record and the steps running its kernel.
struct Pending {
    identity: TaskIdentity,
    record: TuningRecord<MatmulCandidate>,
    steps: Vec<usize>,
}

/// The tasks of a tuned build that await an in-model check ([`pending_checks`]).
pub struct PendingChecks(Vec<Pending>);

impl PendingChecks {
    /// Whether no task awaits a check (a caller can then skip building the heuristic model).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Runs `tuned` (built with the tuned winners, at a measuring level so its module knows its
/// tasks) and `heuristic` (the same graph built with heuristic schedules only) `plan.runs`
/// times each, alternating, on `inputs`, and stores in `cache` an [`InModelCheck`] in the
/// record of every task of `pending` (found by [`pending_checks`] on `tuned`), unless the
/// run times spread by more than `plan.max_spread` (then nothing is stored and the report
/// says so); `model` labels the checks.
pub fn check_in_model(
    tuned: &CompiledGraph<CpuBackend>,
    heuristic: &CompiledGraph<CpuBackend>,
    inputs: &[(String, Tensor)],
    pending: PendingChecks,
    cache: &TuningCache,
    plan: &CheckPlan,
    model: &str,
) -> Result<ModelCheckReport, ModelCheckError> {
    let runs = plan.runs;
    let (tuned_steps, heuristic_steps) = (tuned.steps(), heuristic.steps());
    if tuned_steps != heuristic_steps {
        let first = tuned_steps
            .iter()
            .zip(&heuristic_steps)
            .position(|(a, b)| a != b)
            .unwrap_or(tuned_steps.len().min(heuristic_steps.len()));
        return Err(ModelCheckError::Mismatch(format!(
            "{} and {} steps, first difference at step {first}",
            tuned_steps.len(),
            heuristic_steps.len()
        )));
    }
    let PendingChecks(pending) = pending;
    if pending.is_empty() || runs == 0 {
        return Ok(ModelCheckReport::default());
    }
    let samples = || -> Vec<Vec<f64>> {
        (0..tuned_steps.len())
            .map(|_| Vec::with_capacity(runs.min(1024)))
            .collect()
    };
    let mut times: [Vec<Vec<f64>>; 2] = [samples(), samples()];
    alternately([tuned, heuristic], inputs, runs, |side, graph| {
        let (_, steps) = graph.run_profiled(inputs)?;
        for (samples, t) in times[side].iter_mut().zip(steps) {
            samples.push(t.as_secs_f64());
        }
        Ok(())
    })?;
    let spread = times
        .iter()
        .map(|per_step| {
            let totals: Vec<f64> = (0..runs)
                .map(|r| per_step.iter().map(|s| s[r]).sum())
                .collect();
            run_spread(&totals)
        })
        .fold(0.0, f64::max);
    let [tuned_medians, heuristic_medians] =
        times.map(|per_step| per_step.iter().map(|s| median(s)).collect::<Vec<f64>>());
    let mut report = ModelCheckReport {
        runs,
        tuned_seconds: tuned_medians.iter().sum(),
        heuristic_seconds: heuristic_medians.iter().sum(),
        estimated_seconds: tuned_medians.iter().sum(),
        spread,
        stored: spread <= plan.max_spread,
        ..ModelCheckReport::default()
    };
    for mut p in pending {
        let sum = |m: &[f64]| p.steps.iter().map(|&s| m[s]).sum::<f64>();
        let check = InModelCheck {
            winner_seconds: sum(&tuned_medians),
            heuristic_seconds: sum(&heuristic_medians),
            runs,
            model: model.to_string(),
        };
        if check.prefers_heuristic() {
            report.estimated_seconds -= check.winner_seconds - check.heuristic_seconds;
        }
        let label = |c: Option<&hidet_tune::CandidateRecord<MatmulCandidate>>| {
            c.map(|c| c.label.clone()).unwrap_or_default()
        };
        report.tasks.push(TaskCheck {
            task: p.identity.task.clone(),
            kernels: p.steps.len(),
            winner: label(p.record.winner()),
            heuristic: label(p.record.heuristic()),
            check: check.clone(),
        });
        if report.stored {
            p.record.in_model = Some(Box::new(check));
            cache.store(&p.record)?;
        }
    }
    Ok(report)
}

/// The spread of a model's run times: their median absolute deviation over their median
/// (0 for fewer than two runs or a zero median).
pub fn run_spread(run_seconds: &[f64]) -> f64 {
    match Stats::from_samples(run_seconds) {
        Some(s) if run_seconds.len() > 1 && s.median > 0.0 => s.mad / s.median,
        _ => 0.0,
    }
}

/// The tuned tasks of `tuned` (built with `build`, whose options the records' identities
/// depend on) that await a check: their record in `cache` has none and its winner is not
/// its heuristic. In order of first appearance, with their steps.
pub fn pending_checks(
    tuned: &CompiledGraph<CpuBackend>,
    build: &BuildOptions,
    cache: &TuningCache,
) -> Result<PendingChecks, TuneError> {
    let mut pending: Vec<Pending> = Vec::new();
    let mut by_identity: HashMap<TaskIdentity, Option<usize>> = HashMap::new();
    for (step, kernel) in tuned.step_kernels().into_iter().enumerate() {
        let Some(task) = kernel.and_then(|k| tuned.module().tunable(k)) else {
            continue;
        };
        let identity = task_identity(build, task)?;
        if let Some(slot) = by_identity.get(&identity) {
            if let Some(i) = slot {
                pending[*i].steps.push(step);
            }
            continue;
        }
        let record = match cache.lookup::<MatmulCandidate>(&identity) {
            Lookup::Hit(r)
                if r.in_model.is_none() && r.heuristic.is_some_and(|h| h != r.winner) =>
            {
                Some(r)
            }
            _ => None,
        };
        let slot = record.map(|record| {
            pending.push(Pending {
                identity: identity.clone(),
                record,
                steps: vec![step],
            });
            pending.len() - 1
        });
        by_identity.insert(identity, slot);
    }
    Ok(PendingChecks(pending))
}

/// The median of `samples`, which are `runs > 0` elapsed times (finite, non-negative).
fn median(samples: &[f64]) -> f64 {
    // `check_in_model` and `time_alternately` return before timing anything when `runs` is
    // 0, so every step has at least one sample, and elapsed times are finite.
    Stats::from_samples(samples)
        .expect("at least one finite sample per step")
        .median
}

/// The median wall time of one run of `a` and of `b` (seconds), each run `runs` times on
/// `inputs`, alternating (after one untimed run each). `runs` must be at least 1.
pub fn time_alternately(
    a: &CompiledGraph<CpuBackend>,
    b: &CompiledGraph<CpuBackend>,
    inputs: &[(String, Tensor)],
    runs: usize,
) -> Result<(f64, f64), CompiledError> {
    let runs = runs.max(1);
    let mut times = [
        Vec::with_capacity(runs.min(1024)),
        Vec::with_capacity(runs.min(1024)),
    ];
    alternately([a, b], inputs, runs, |side, graph| {
        let start = std::time::Instant::now();
        graph.run(inputs)?;
        times[side].push(start.elapsed().as_secs_f64());
        Ok(())
    })?;
    Ok((median(&times[0]), median(&times[1])))
}

/// Runs each of `graphs` once untimed on `inputs`, then calls `run(side, graph)` `runs`
/// times per graph, alternating in ABBA order so a drift of the machine's speed hits both
/// alike.
fn alternately(
    graphs: [&CompiledGraph<CpuBackend>; 2],
    inputs: &[(String, Tensor)],
    runs: usize,
    mut run: impl FnMut(usize, &CompiledGraph<CpuBackend>) -> Result<(), CompiledError>,
) -> Result<(), CompiledError> {
    for g in graphs {
        g.run(inputs)?;
    }
    for round in 0..runs {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            run(side, graphs[side])?;
        }
    }
    Ok(())
}
