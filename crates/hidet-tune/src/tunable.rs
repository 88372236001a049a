//! What a tunable task and a tuning backend provide.

use std::fmt;

use hidet_ir::function::Function;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::environment::Environment;
use crate::error::TuneError;
use crate::level::TuneLevel;

/// A task with a schedule space: e.g. "matmul 1024×1024×1024 f32 with this fused epilogue,
/// on 2 threads". Each schedule of the space yields a kernel computing the same result.
pub trait Tunable: Sync {
    /// One point of the space; stored in the tuning cache as JSON.
    type Schedule: Clone + PartialEq + fmt::Debug + Serialize + DeserializeOwned + Send + Sync;

    /// A key that identifies the task's work exactly (shapes, dtypes, fused operations,
    /// threads) and is stable across processes and models: no variable names or ids.
    fn key(&self) -> String;

    /// The name of the schedule space (the template), e.g. `cpu.matmul_f32`.
    fn space(&self) -> String;

    /// The template's version: changes whenever the kernels a schedule yields may change, so
    /// older measurements are not reused.
    fn template_version(&self) -> String;

    /// The level-0 pick.
    fn heuristic(&self) -> Self::Schedule;

    /// The schedules tried at `level`: at level 1 a few dozen promising ones, at level 2 the
    /// whole space, at level 0 just the heuristic. Order matters only in that the tuner
    /// measures in this order (the heuristic is always measured first).
    fn candidates(&self, level: TuneLevel) -> Vec<Self::Schedule>;

    /// A short readable description of `schedule` for reports.
    fn label(&self, schedule: &Self::Schedule) -> String;

    /// The kernel of `schedule`, named `name` (a C identifier). Fails (with a reason) when
    /// this schedule cannot implement the task, e.g. a fusion it cannot absorb, or when the
    /// schedule needs several kernels ([`Tunable::kernels`]).
    fn function(&self, schedule: &Self::Schedule, name: &str) -> Result<Function, String>;

    /// Every kernel a candidate of `schedule` runs, in launch order, the first named `name`
    /// (the others named by the template, e.g. `<name>_reduce`): what the tuner compiles and
    /// its backend runs as one candidate. By default [`Tunable::function`] alone; a template
    /// whose schedules may take several kernels (a parallel-k product and the reduction of its
    /// parts) overrides it, and its [`TuneBackend`] knows how they connect.
    fn kernels(&self, schedule: &Self::Schedule, name: &str) -> Result<Vec<Function>, String> {
        Ok(vec![self.function(schedule, name)?])
    }
}

/// Compiles and runs candidate kernels on one device.
///
/// A candidate is the kernels [`Tunable::kernels`] gave for one schedule (one kernel on the
/// CPU), named after its first kernel.
///
/// [`TuneBackend::compile`] is called from several threads at once; the other methods are
/// called from the thread that measures.
pub trait TuneBackend: Sync {
    /// A loaded library of several candidates.
    type Unit: Send;
    /// The buffers a task's kernels run on.
    type Workload;

    /// The machine and toolchain measurements on this backend depend on.
    fn environment(&self) -> Result<Environment, TuneError>;

    /// Compiles `candidates` (each the kernels of one candidate, in launch order) into one
    /// library named `name` (a C identifier) and loads it.
    fn compile(&self, name: &str, candidates: Vec<Vec<Function>>) -> Result<Self::Unit, TuneError>;

    /// Buffers for running the task with `candidate`'s kernels (any candidate of the task:
    /// they all compute the same outputs from the same inputs): inputs filled with random,
    /// non-zero values (where the element type allows), outputs allocated.
    fn workload(&self, candidate: &[Function]) -> Result<Self::Workload, TuneError>;

    /// Runs candidate `candidate` (its first kernel's name) of `unit` once on `workload` and
    /// waits for it. Fails (running nothing) when its parameters do not match the workload.
    fn run(
        &self,
        unit: &Self::Unit,
        candidate: &str,
        workload: &mut Self::Workload,
    ) -> Result<(), TuneError>;

    /// Runs `candidate` once as [`TuneBackend::run`] does and returns how long it took, in
    /// seconds: by default the wall-clock time around [`TuneBackend::run`] (right for a CPU
    /// kernel, which runs on the calling thread). A device whose launches are asynchronous
    /// overrides it with the device's own timing (a GPU's events around the launches), so
    /// that neither launch nor synchronization overhead is counted.
    fn time(
        &self,
        unit: &Self::Unit,
        candidate: &str,
        workload: &mut Self::Workload,
    ) -> Result<f64, TuneError> {
        let start = std::time::Instant::now();
        self.run(unit, candidate, workload)?;
        Ok(start.elapsed().as_secs_f64())
    }
}
