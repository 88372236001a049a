//! Tuning in the CUDA graph backend: the SIMT matmul template's schedules (tile schedule and
//! parallel-k parts) measured on the GPU.
//!
//! Every matmul or convolution anchor the template implements is a [`SimtTask`]. When a task
//! is lowered ([`simt_choice`]), its choice is the tuning cache's record for this task on
//! this GPU with this NVRTC ([`CudaTuning::environment`], known only on a real GPU) — the
//! record's [`chosen`](hidet_tune::TuningRecord::chosen) candidate — else the heuristic
//! ([`crate::schedule::matmul_anchor::heuristic_choice`]: the showcase schedule and
//! parallel-k parts the cost model ranks fastest). When tuning is requested ([`CudaTuning::level`] 1 or 2), building the module
//! first tunes every such task the cache cannot answer on the backend's own device
//! ([`runner::CudaTuneBackend`]: candidates compiled in parallel, measured one at a time with
//! the device's timer), stores the records, and rebuilds those kernels with the winners.
//!
//! - [`simt`]: the [`hidet_tune::Tunable`] (keys, candidates per level, template version);
//! - [`candidates`]: the schedule space of a product and the level-1 ranking;
//! - [`runner`]: the [`hidet_tune::TuneBackend`] over a [`crate::device::GpuDevice`].

pub mod candidates;
pub mod runner;
pub mod simt;

use std::fmt;
use std::sync::Arc;

use hidet_graph::fusion::FusedTask;
use hidet_tune::{
    Environment, Lookup, MeasureConfig, TaskIdentity, TaskResults, Tunable, TuneConfig, TuneError,
    TuneEvent, TuneLevel, TuneObserver, Tuner, TuningCache,
};

use crate::device::GpuDevice;
use crate::schedule::matmul_anchor::SimtChoice;
use crate::schedule::simt_anchor::SimtAnchor;
use crate::schedule::GpuTarget;
pub use runner::CudaTuneBackend;
pub use simt::{SimtCandidate, SimtTask, SIMT_SPACE};

/// How the CUDA graph backend uses tuning. The default consults no cache (no environment)
/// and tunes nothing.
#[derive(Clone, Default)]
pub struct CudaTuning {
    /// The GPU and toolchain measurements belong to; `None` (the simulator, or compiling
    /// without a GPU) means no record can apply: every anchor uses the heuristic.
    pub environment: Option<Environment>,
    /// When set to level 1 or 2, building a module tunes every SIMT task the cache does not
    /// answer at that level, on the backend's device (which must time kernels: a GPU).
    pub level: Option<TuneLevel>,
    /// Ignore recorded winners (lowering uses the heuristic; tuning measures again).
    pub ignore_cache: bool,
    /// The tuning cache; `None` means [`TuningCache::from_env`] (`$HIDET_CACHE_DIR/tuning`).
    pub cache: Option<TuningCache>,
    /// At most this many candidates per task (heuristic first); `None` tries them all.
    pub candidate_limit: Option<usize>,
    /// How candidates are timed; `None` means [`default_measure`].
    pub measure: Option<MeasureConfig>,
    /// Bytes of copies of the read-only inputs a workload rotates through
    /// ([`runner::CudaTuneBackend::cold_bytes`]); `None` means the runner's default.
    pub cold_bytes: Option<usize>,
    /// Receives tuning events; without one, warnings go to stderr.
    pub observer: Option<Arc<dyn TuneObserver>>,
}

impl fmt::Debug for CudaTuning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaTuning")
            .field("environment", &self.environment)
            .field("level", &self.level)
            .field("ignore_cache", &self.ignore_cache)
            .field("cache", &self.cache)
            .field("candidate_limit", &self.candidate_limit)
            .field("measure", &self.measure)
            .field("cold_bytes", &self.cold_bytes)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl CudaTuning {
    /// The tuning cache read and written.
    pub fn cache(&self) -> TuningCache {
        self.cache.clone().unwrap_or_else(TuningCache::from_env)
    }

    /// Whether building tunes (a measuring level is set).
    pub fn measures(&self) -> bool {
        self.level.is_some_and(|l| l.measures())
    }

    fn warn(&self, message: &str) {
        match &self.observer {
            Some(o) => o.event(&TuneEvent::Warning(message)),
            None => eprintln!("warning: {message}"),
        }
    }
}

/// How GPU candidates are timed by default: kernels take microseconds, so more runs than on
/// the CPU (each timed by the device), a few warm-up runs, and at least 10 ms of kernel time.
pub fn default_measure() -> MeasureConfig {
    MeasureConfig {
        warmup: 3,
        min_runs: 10,
        max_runs: 200,
        min_time: std::time::Duration::from_millis(10),
        ..MeasureConfig::default()
    }
}

/// The identity `task`'s record is stored under in `environment`.
pub fn task_identity(task: &SimtTask, environment: &Environment) -> TaskIdentity {
    TaskIdentity {
        task: task.key(),
        space: task.space(),
        template_version: task.template_version(),
        environment: environment.clone(),
    }
}

/// The choice a SIMT anchor is lowered with, and the task when it is to be tuned.
#[derive(Debug)]
pub struct ChoiceFor {
    pub choice: SimtChoice,
    /// Whether `choice` comes from a tuning record (else it is the heuristic).
    pub recorded: bool,
    pub tunable: Option<Arc<SimtTask>>,
}

/// The choice for `task` (whose SIMT anchor is `anchor`) on `target`: the cached record's
/// chosen candidate when the cache has one for this environment (a corrupt record is a
/// warning and ignored), else the heuristic; `None` when the template has no schedule for it.
/// The task is returned for tuning when a measuring level is requested.
pub fn simt_choice(
    tuning: &CudaTuning,
    task: &FusedTask,
    anchor: &SimtAnchor,
    target: &GpuTarget,
) -> Option<ChoiceFor> {
    let heuristic = anchor.heuristic(target)?;
    let wanted = tuning.measures() || (tuning.environment.is_some() && !tuning.ignore_cache);
    let simt = wanted.then(|| SimtTask::from_fused(task, target)).flatten();
    let mut choice = heuristic;
    let mut recorded = false;
    if let (Some(simt), Some(environment), false) =
        (&simt, &tuning.environment, tuning.ignore_cache)
    {
        match tuning
            .cache()
            .lookup::<SimtCandidate>(&task_identity(simt, environment))
        {
            Lookup::Hit(record) => {
                if let Some(c) = record.chosen() {
                    choice = c.schedule.0;
                    recorded = true;
                }
            }
            Lookup::Miss => {}
            Lookup::Corrupt { path, reason } => tuning.warn(&format!(
                "ignoring the tuning record {}: {reason}",
                path.display()
            )),
        }
    }
    let tunable = simt
        .filter(|_| tuning.measures())
        .map(|t| Arc::new(t.with_limit(tuning.candidate_limit)));
    Some(ChoiceFor {
        choice,
        recorded,
        tunable,
    })
}

/// Tunes `tasks` at `tuning`'s level on `device` (see the module docs): one result per task.
/// Fails when no measuring level is set or no environment is known (tuning needs a GPU).
pub fn tune_tasks<D: GpuDevice>(
    tuning: &CudaTuning,
    device: Arc<D>,
    tasks: &[SimtTask],
) -> Result<TaskResults<SimtCandidate>, TuneError> {
    let level = tuning
        .level
        .filter(|l| l.measures())
        .ok_or(TuneError::BadLevel(0))?;
    let environment = tuning.environment.clone().ok_or_else(|| TuneError::Run {
        kernel: "<tuning>".into(),
        message: format!(
            "the {} device cannot time kernels: tuning needs a GPU",
            device.name()
        ),
    })?;
    let mut runner = CudaTuneBackend::new(device, environment);
    if let Some(bytes) = tuning.cold_bytes {
        runner = runner.with_cold_bytes(bytes);
    }
    let mut config = TuneConfig::new(level, Some(tuning.cache()));
    config.reuse = !tuning.ignore_cache;
    config.measure = tuning.measure.clone().unwrap_or_else(default_measure);
    let tuner = Tuner::new(&runner, config);
    let tuner = match tuning.observer.as_deref() {
        Some(o) => tuner.with_observer(o),
        None => tuner,
    };
    tuner.tune(tasks)
}
