//! Tuning in the CPU graph backend.
//!
//! Every matmul anchor is a [`MatmulTask`]. When a task is lowered
//! ([`matmul_choice`]), its schedule is the record's chosen candidate
//! ([`TuningRecord::chosen`](hidet_tune::TuningRecord::chosen): the winner, or the heuristic
//! where the [`model_check`] found it faster in a model) if the tuning cache has a record for
//! this task, machine and compiler, else the level-0 heuristic. When tuning is requested
//! ([`CpuTuning::level`] 1 or 2), building the module ([`tune_kernels`]) first tunes every
//! matmul task the cache cannot answer — all tasks' candidates compiled in parallel, measured
//! one at a time — stores the results, and rebuilds those kernels with the chosen schedules,
//! so the module built by that compilation already uses them.

pub mod matmul;
pub mod model_check;
pub mod runner;

use std::fmt;
use std::sync::Arc;

use hidet_graph::compiled::BackendError;
use hidet_graph::fusion::FusedTask;
use hidet_tune::{
    Lookup, MeasureConfig, TaskIdentity, Tunable, TuneConfig, TuneError, TuneEvent, TuneLevel,
    TuneObserver, Tuner, TuningCache,
};

use super::{CpuBackend, CpuKernel};
use crate::options::BuildOptions;
use crate::templates::matmul::MatmulSchedule;
pub use matmul::{MatmulCandidate, MatmulTask, MATMUL_SPACE};
pub use runner::CpuTuneBackend;

/// How the CPU graph backend uses tuning. The default uses cached winners and tunes nothing.
#[derive(Clone, Default)]
pub struct CpuTuning {
    /// When set to level 1 or 2, building a module tunes every matmul task the cache does not
    /// answer at that level. `None` or level 0: nothing is measured.
    pub level: Option<TuneLevel>,
    /// Ignore recorded winners (lowering uses the heuristic; tuning measures again).
    pub ignore_cache: bool,
    /// The tuning cache; `None` means `tuning/` under the kernel cache's directory (so
    /// `$HIDET_CACHE_DIR/tuning` by default).
    pub cache: Option<TuningCache>,
    /// At most this many candidates per task (the first of the level's list, heuristic
    /// first); `None` tries them all.
    pub candidate_limit: Option<usize>,
    /// How candidates are timed; `None` means [`MeasureConfig::default`].
    pub measure: Option<MeasureConfig>,
    /// Receives tuning events (progress, warnings, task summaries). Without one, warnings go
    /// to stderr.
    pub observer: Option<Arc<dyn TuneObserver>>,
}

impl fmt::Debug for CpuTuning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuTuning")
            .field("level", &self.level)
            .field("ignore_cache", &self.ignore_cache)
            .field("cache", &self.cache)
            .field("candidate_limit", &self.candidate_limit)
            .field("measure", &self.measure)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

/// The schedule a matmul task is lowered with, and the task when it is to be tuned.
#[derive(Debug)]
pub struct MatmulChoice {
    pub schedule: MatmulSchedule,
    pub tunable: Option<Arc<MatmulTask>>,
}

/// The tuning cache `backend` reads and writes.
pub fn tuning_cache(backend: &CpuBackend) -> TuningCache {
    backend
        .tuning
        .cache
        .clone()
        .unwrap_or_else(|| TuningCache::in_cache_dir(backend.options.build.cache().root()))
}

fn warn(backend: &CpuBackend, message: &str) {
    match &backend.tuning.observer {
        Some(o) => o.event(&TuneEvent::Warning(message)),
        None => eprintln!("warning: {message}"),
    }
}

/// The identity `task`'s tuning record is stored under when built with `build`.
pub fn task_identity(build: &BuildOptions, task: &MatmulTask) -> Result<TaskIdentity, TuneError> {
    Ok(TaskIdentity {
        task: task.key(),
        space: task.space(),
        template_version: task.template_version(),
        environment: runner::environment(build)?,
    })
}

/// The schedule for `task` on `threads` threads: the cached choice (the winner, or the
/// heuristic where an in-model check found it faster) when the cache has one
/// (a corrupt record is reported as a warning and ignored), else the heuristic. The task is
/// returned for tuning when it is a matmul task and a measuring level is requested.
pub fn matmul_choice(backend: &CpuBackend, task: &FusedTask, threads: i64) -> MatmulChoice {
    let target = backend.options.build.target();
    let heuristic = MatmulSchedule::for_target(target, threads);
    let Some(matmul) = MatmulTask::from_fused(task, target, threads) else {
        return MatmulChoice {
            schedule: heuristic,
            tunable: None,
        };
    };
    let mut schedule = matmul.heuristic().0;
    if !backend.tuning.ignore_cache {
        match task_identity(&backend.options.build, &matmul) {
            Ok(identity) => match tuning_cache(backend).lookup::<MatmulCandidate>(&identity) {
                Lookup::Hit(record) => {
                    if let Some(c) = record.chosen() {
                        schedule = c.schedule.0;
                    }
                }
                Lookup::Miss => {}
                Lookup::Corrupt { path, reason } => warn(
                    backend,
                    &format!("ignoring the tuning record {}: {reason}", path.display()),
                ),
            },
            Err(e) => warn(backend, &format!("tuning cache not consulted: {e}")),
        }
    }
    let tunable = backend
        .tuning
        .level
        .filter(|l| l.measures())
        .map(|_| Arc::new(matmul.with_limit(backend.tuning.candidate_limit)));
    MatmulChoice { schedule, tunable }
}

/// When a measuring level is requested: tunes the matmul tasks of `kernels` (see the module
/// docs) and returns the kernels with every tuned task rebuilt with its chosen schedule. A task that
/// cannot be tuned keeps its kernel (with a warning). Otherwise returns `kernels` unchanged.
pub fn tune_kernels(
    backend: &CpuBackend,
    mut kernels: Vec<CpuKernel>,
) -> Result<Vec<CpuKernel>, BackendError> {
    let Some(level) = backend.tuning.level.filter(|l| l.measures()) else {
        return Ok(kernels);
    };
    let tuned: Vec<usize> = (0..kernels.len())
        .filter(|&i| kernels[i].tunable.is_some())
        .collect();
    let tasks: Vec<MatmulTask> = tuned
        .iter()
        .filter_map(|&i| kernels[i].tunable.as_deref().cloned())
        .collect();
    if tasks.is_empty() {
        return Ok(kernels);
    }
    let threads = usize::try_from(tasks[0].threads()).unwrap_or(1);
    let runner = CpuTuneBackend::new(&backend.options.build, threads);
    let mut config = TuneConfig::new(level, Some(tuning_cache(backend)));
    config.reuse = !backend.tuning.ignore_cache;
    config.jobs = backend
        .options
        .compile_jobs
        .unwrap_or_else(|| backend.options.build.target().cores);
    if let Some(m) = &backend.tuning.measure {
        config.measure = m.clone();
    }
    let tuner = Tuner::new(&runner, config);
    let tuner = match backend.tuning.observer.as_deref() {
        Some(o) => tuner.with_observer(o),
        None => tuner,
    };
    let results = tuner
        .tune(&tasks)
        .map_err(|e| BackendError::Build(format!("tuning: {e}")))?;
    for ((&i, task), result) in tuned.iter().zip(&tasks).zip(results) {
        let kernel = &mut kernels[i];
        match result.and_then(|r| {
            task.function(&r.winner, &kernel.function.name)
                .map_err(|message| hidet_tune::TuneError::Compile {
                    task: task.key(),
                    message,
                })
        }) {
            Ok(function) => kernel.function = function,
            Err(e) => warn(
                backend,
                &format!(
                    "`{}` keeps its heuristic schedule: {e}",
                    kernel.function.name
                ),
            ),
        }
    }
    Ok(kernels)
}
