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
    /// this schedule cannot implement the task, e.g. a fusion it cannot absorb.
    fn function(&self, schedule: &Self::Schedule, name: &str) -> Result<Function, String>;
}

/// Compiles and runs candidate kernels on one device.
///
/// [`TuneBackend::compile`] is called from several threads at once; the other methods are
/// called from the thread that measures.
pub trait TuneBackend: Sync {
    /// A loaded library of several candidate kernels.
    type Unit: Send;
    /// The buffers a task's kernels run on.
    type Workload;

    /// The machine and toolchain measurements on this backend depend on.
    fn environment(&self) -> Result<Environment, TuneError>;

    /// Compiles `functions` into one library named `name` (a C identifier) and loads it.
    fn compile(&self, name: &str, functions: Vec<Function>) -> Result<Self::Unit, TuneError>;

    /// Buffers for running kernels with `function`'s parameters: inputs filled with random,
    /// non-zero values (where the element type allows), outputs allocated.
    fn workload(&self, function: &Function) -> Result<Self::Workload, TuneError>;

    /// Runs kernel `kernel` of `unit` once on `workload` and waits for it. Fails (running
    /// nothing) when the kernel's parameters do not match the workload.
    fn run(
        &self,
        unit: &Self::Unit,
        kernel: &str,
        workload: &mut Self::Workload,
    ) -> Result<(), TuneError>;
}
