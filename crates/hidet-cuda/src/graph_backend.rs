//! The CUDA implementation of the graph layer's [`Backend`], over any [`GpuDevice`]: the
//! simulator device ([`crate::sim_device::SimDevice`], `--device cuda-sim`) or a real GPU
//! through the driver-API runtime ([`crate::gpu_device::RuntimeDevice`], `--device cuda`).
//!
//! How a task becomes a kernel: an anchored task whose anchor is an f32 (batched) matmul uses the
//! SIMT matmul template with its prologues and epilogue fused
//! ([`crate::schedule::matmul_anchor`]), an f32 2-D convolution the same template as an
//! implicit GEMM ([`crate::schedule::conv_anchor`]), each with the tuning cache's choice for
//! this GPU where one is recorded, else the heuristic, and tuned while the module is built when
//! [`CudaTuning::level`] asks ([`crate::tuning`]); when fusion is refused, a fused task is
//! refused and the graph layer splits it; every other task goes through the default GPU scheduler
//! ([`crate::schedule`]), which turns the task's composed compute definition into one CUDA
//! kernel. Every kernel is verified,
//! lowered and emitted as CUDA C when it is lowered (so a kernel the CUDA dialect cannot
//! express fails at compile time, naming the task), and, with [`NvrtcCheck`], compiled to
//! PTX by NVRTC when the module is built.
//!
//! Memory: an arena is one device allocation ([`arena::CudaArena`]); addresses are device
//! pointers. A run of kernels only is replayed as a device graph, or streamed and waited for
//! once ([`CudaBackendOptions::cuda_graphs`]); any other launch is the device's launch
//! followed by a synchronize.

pub mod arena;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use hidet_graph::compiled::{
    ArgAddress, Backend, BackendError, CompileOptions, CompileProgress, ModuleReport,
};
use hidet_graph::fusion::FusedTask;
use hidet_graph::{DType, Tensor};
use hidet_ir::compute::tensor_dtype;
use hidet_ir::function::{Function, FunctionKind, IRModule, Target};

use crate::arch::Arch;
use crate::device::{DeviceKernel, GpuDevice, KernelParam};
use crate::ptxas::PtxasReport;
use crate::schedule::matmul_anchor::TemplateOutcome;
use crate::schedule::simt_anchor::SimtAnchor;
use crate::schedule::GpuTarget;
use crate::schedule::{self, ScheduleKind};
use crate::tuning::{simt_choice, tune_tasks, CudaTuning, SimtTask};
pub use arena::CudaArena;

/// Whether [`Backend::build`] compiles every kernel with NVRTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NvrtcCheck {
    /// Never (the simulator needs no PTX).
    #[default]
    Off,
    /// When NVRTC can be loaded on this machine; skipped silently otherwise.
    IfAvailable,
    /// Always; building fails when NVRTC is missing or rejects a kernel.
    Required,
}

/// Options of the CUDA backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaBackendOptions {
    /// The architecture kernels are compiled for.
    pub arch: Arch,
    /// Whether building compiles every kernel to PTX with NVRTC.
    pub nvrtc: NvrtcCheck,
    /// Also assemble every kernel's PTX with `ptxas -v` (when NVRTC ran and `ptxas` is
    /// found) and keep the resource reports ([`CudaModule::ptxas_reports`]).
    pub ptxas: bool,
    /// When NVRTC runs, also store every kernel's image for `arch` in the cubin/PTX cache
    /// (`CudaKernelCache::from_env`), so that a GPU of that architecture finds it there
    /// without compiling (the GPU device compiles through the same cache).
    pub cache_images: bool,
    /// Whether matmul and convolution anchors with too few output tiles for the GPU split
    /// their reduction (parallel-k, [`crate::schedule::matmul_anchor`]).
    pub parallel_k: bool,
    /// Whether a run of kernels only is recorded once as a device graph (a CUDA graph on a
    /// GPU) and replayed: the first run of a set of argument addresses (one per run state:
    /// inputs are copied into the run's fixed arena first) captures its launches, later runs
    /// replay them with one launch. Off, a run enqueues its kernels on the stream and waits
    /// once at its end. (A profiled run, or one with host steps, launches and waits for each
    /// kernel either way.)
    pub cuda_graphs: bool,
    /// The fewest threads a vectorized elementwise kernel may have
    /// ([`GpuTarget::min_vector_threads`]); `None`: the architecture's reference GPU's.
    /// Tests set 0 to vectorize every task whose layout allows it.
    pub min_vector_threads: Option<i64>,
}

impl CudaBackendOptions {
    /// What the schedules know of the target.
    pub fn gpu_target(&self) -> GpuTarget {
        let reference = GpuTarget::for_arch(self.arch);
        GpuTarget {
            parallel_k: self.parallel_k,
            min_vector_threads: self
                .min_vector_threads
                .unwrap_or(reference.min_vector_threads),
            ..reference
        }
    }
}

impl Default for CudaBackendOptions {
    fn default() -> Self {
        CudaBackendOptions {
            arch: Arch::SM80,
            nvrtc: NvrtcCheck::Off,
            ptxas: false,
            cache_images: false,
            parallel_k: true,
            cuda_graphs: cuda_graphs_from_env(),
            min_vector_threads: None,
        }
    }
}

/// Whether CUDA graphs are on by default: yes, unless the environment variable
/// `HIDET_CUDA_GRAPHS` is `0`, `off` or `false` (the device check's rows without graphs).
pub fn cuda_graphs_from_env() -> bool {
    !matches!(
        std::env::var("HIDET_CUDA_GRAPHS").as_deref(),
        Ok("0" | "off" | "false")
    )
}

/// One launch of the graph layer: (task kernel, argument addresses).
type TaskLaunch = (usize, Vec<u64>);

/// What a run in progress (between `begin_run` and `end_run`) does with its launches.
#[derive(Debug)]
enum RunLog {
    /// With CUDA graphs: records them, for `end_run` to replay as one graph.
    Recording(Vec<TaskLaunch>),
    /// Without: enqueues them on the device's stream without waiting; `end_run` waits.
    Streaming,
}

/// The most device graphs a module keeps (one per run state, i.e. per concurrent run);
/// beyond it the oldest is dropped and captured again when needed.
const MAX_GRAPHS: usize = 8;

/// How a kernel was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelOrigin {
    /// The SIMT matmul template alone.
    Template,
    /// The SIMT matmul template with prologues/epilogue fused in.
    FusedTemplate,
    /// The default scheduler, with the schedule it chose.
    Scheduler(ScheduleKind),
}

/// The second kernel of a parallel-k task and its workspace.
#[derive(Debug, Clone)]
pub struct ParallelKImage {
    /// Sums the partial products and applies the task's epilogue: parameters the workspace,
    /// the task's inputs, then the task's output.
    pub reduce: DeviceKernel,
    pub parts: i64,
    /// Bytes of the workspace `[parts, out…]` (f32) the partial products go to.
    pub workspace_bytes: usize,
}

/// A lowered kernel: one device kernel, or two for a parallel-k task (`image` then writes
/// the partial products: parameters the task's inputs then the workspace).
#[derive(Debug, Clone)]
pub struct CudaKernel {
    pub image: DeviceKernel,
    pub origin: KernelOrigin,
    pub parallel_k: Option<ParallelKImage>,
    /// The SIMT task, when it is to be tuned while the module is built
    /// ([`CudaTuning::level`]).
    pub tunable: Option<Arc<SimtTask>>,
    /// Whether the template's schedule is a tuned one (from a tuning record, or tuned while
    /// building) rather than the heuristic.
    pub tuned: bool,
}

/// How one kernel of the graph layer (one task) runs on the device.
#[derive(Debug, Clone)]
enum Plan {
    /// Device kernel `kernel` on the task's arguments.
    Single { kernel: usize },
    /// Device kernel `partial` on the task's inputs and the module's workspace, then
    /// `reduce` on the workspace, the task's inputs and its output.
    ParallelK { partial: usize, reduce: usize },
}

/// The built kernels of a model on device `D`.
#[derive(Debug)]
pub struct CudaModule<D: GpuDevice> {
    loaded: D::Module,
    images: Vec<DeviceKernel>,
    /// One per task kernel: how it runs, and the parameters the graph layer passes.
    plans: Vec<(Plan, Vec<KernelParam>)>,
    origins: Vec<KernelOrigin>,
    k_parts: Vec<Option<i64>>,
    tuned: Vec<bool>,
    /// The workspace of the parallel-k kernels (the largest any needs), shared by them:
    /// `workspace_lock` is held from a partial kernel's launch to its reduction's, so the
    /// two are adjacent on the device's stream.
    workspace: Option<CudaArena<D>>,
    workspace_lock: std::sync::Mutex<()>,
    /// The runs in progress, by thread (see [`RunLog`]).
    runs: std::sync::Mutex<std::collections::HashMap<std::thread::ThreadId, RunLog>>,
    /// Captured graphs by their launch list, oldest first; and how many runs replayed one.
    graphs: std::sync::Mutex<Vec<(Vec<TaskLaunch>, D::Graph)>>,
    replays: std::sync::atomic::AtomicUsize,
    ptx_compiled: bool,
    ptxas_reports: Vec<(String, PtxasReport)>,
}

impl<D: GpuDevice> CudaModule<D> {
    /// How each kernel was produced, in (task) kernel order.
    pub fn origins(&self) -> &[KernelOrigin] {
        &self.origins
    }

    /// For each (task) kernel, whether its template schedule is a tuned one (a tuning
    /// record's, or tuned while building) rather than the heuristic.
    pub fn tuned(&self) -> &[bool] {
        &self.tuned
    }

    /// For each (task) kernel, the parts of its parallel-k split (`None`: not split).
    pub fn parallel_k(&self) -> &[Option<i64>] {
        &self.k_parts
    }

    /// The device kernels as given to the device: one per task kernel, two (partial
    /// products, then their reduction) for a parallel-k one.
    pub fn images(&self) -> &[DeviceKernel] {
        &self.images
    }

    /// Device graphs this module holds (captured, not yet dropped), and runs that replayed
    /// one (see [`CudaBackendOptions::cuda_graphs`]).
    pub fn graph_counts(&self) -> (usize, usize) {
        let held = self.graphs.lock().map_or(0, |g| g.len());
        (
            held,
            self.replays.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Bytes of the parallel-k workspace (0 when no kernel splits k).
    pub fn workspace_bytes(&self) -> usize {
        self.workspace.as_ref().map_or(0, CudaArena::len)
    }

    /// Whether every kernel was compiled to PTX by NVRTC.
    pub fn ptx_compiled(&self) -> bool {
        self.ptx_compiled
    }

    /// `(kernel name, ptxas report)` of every kernel, when `ptxas` ran.
    pub fn ptxas_reports(&self) -> &[(String, PtxasReport)] {
        &self.ptxas_reports
    }
}

/// The CUDA backend on device `D` (see the module docs).
#[derive(Debug)]
pub struct CudaBackend<D: GpuDevice> {
    device: Arc<D>,
    pub options: CudaBackendOptions,
    /// Tuned choices for the SIMT anchors, and tuning while building ([`crate::tuning`]).
    pub tuning: CudaTuning,
}

impl<D: GpuDevice> CudaBackend<D> {
    /// The backend on `device`, without tuning (every SIMT anchor uses the heuristic).
    pub fn new(device: Arc<D>, options: CudaBackendOptions) -> CudaBackend<D> {
        CudaBackend {
            device,
            options,
            tuning: CudaTuning::default(),
        }
    }

    /// This backend with `tuning`: cached choices for its environment, and tuning while
    /// building when a measuring level is set.
    pub fn with_tuning(self, tuning: CudaTuning) -> CudaBackend<D> {
        CudaBackend { tuning, ..self }
    }

    /// The device kernels run on.
    pub fn device(&self) -> &Arc<D> {
        &self.device
    }
}

/// The parameters of CUDA kernel `f` as a device sees them: the first `inputs` read, the
/// rest written; every one a tensor of constant shape.
pub fn kernel_params(f: &Function, inputs: usize) -> Result<Vec<KernelParam>, String> {
    f.params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let shape = schedule::const_shape(p).map_err(|e| e.to_string())?;
            let elements = shape
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
                .ok_or_else(|| format!("parameter `{}` has an invalid shape", p.name()))?;
            let dtype = tensor_dtype(p)
                .ok_or_else(|| format!("parameter `{}` is not a tensor", p.name()))?;
            Ok(KernelParam {
                name: p.name().to_string(),
                dtype,
                elements,
                written: i >= inputs,
            })
        })
        .collect()
}

/// The image of CUDA kernel function `module.functions[0]`, whose first `inputs` parameters
/// it reads and the rest it writes: parameters, launch configuration and CUDA C (verified,
/// lowered and emitted: a kernel the CUDA dialect cannot express fails here).
///
/// A function named after its task (`k<N>_…`) is renamed by content
/// ([`hidet_graph::fusion::content_name`]), so that identical tasks give identical images.
pub fn kernel_image(inputs: usize, mut module: IRModule) -> Result<DeviceKernel, String> {
    if let Some(f) = module.functions.first_mut() {
        f.name = hidet_graph::fusion::content_name(&f.name);
        module.name = f.name.clone();
    }
    let f = module
        .functions
        .first()
        .ok_or_else(|| "the module has no kernel".to_string())?;
    let FunctionKind::CudaKernel(launch) = &f.kind else {
        return Err(format!("`{}` is not a CUDA kernel", f.name));
    };
    let dim = |e: &hidet_ir::expr::Expr, what: &str| {
        e.as_int()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| format!("{what} `{e}` is not a constant 32-bit size"))
    };
    let grid = [
        dim(&launch.grid[0], "grid")?,
        dim(&launch.grid[1], "grid")?,
        dim(&launch.grid[2], "grid")?,
    ];
    let block = launch
        .block
        .map(|b| u32::try_from(b).map_err(|_| format!("block dimension {b}")));
    let block = [block[0].clone()?, block[1].clone()?, block[2].clone()?];
    let dynamic_shared_bytes = dim(&launch.dynamic_shared_bytes, "dynamic shared memory")?;
    let params = kernel_params(f, inputs)?;
    let source = crate::emit_cuda(&module).map_err(|e| e.to_string())?;
    Ok(DeviceKernel {
        name: f.name.clone(),
        grid,
        block,
        dynamic_shared_bytes,
        params,
        source,
        module,
    })
}

/// Stores `image` compiled for `arch` in the cubin/PTX cache of the environment, keyed as
/// the GPU device looks it up ([`crate::gpu_device`]).
fn cache_image(image: &DeviceKernel, arch: crate::Arch) -> Result<(), String> {
    let nvrtc = crate::nvrtc::Nvrtc::global().map_err(|e| e.to_string())?;
    crate::cache::CudaKernelCache::from_env()
        .get_or_compile(
            nvrtc,
            &image.name,
            &image.source,
            arch,
            &crate::nvrtc::CompileOptions::default(),
        )
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Compiles every image with NVRTC (and `ptxas` when asked, and into the kernel cache when
/// [`CudaBackendOptions::cache_images`]) on `jobs` threads; returns the ptxas reports (empty
/// without `ptxas`).
fn compile_all(
    images: &[DeviceKernel],
    options: &CudaBackendOptions,
    jobs: usize,
    progress: Option<&hidet_graph::compiled::ProgressSink>,
) -> Result<Vec<(String, PtxasReport)>, BackendError> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    /// Kernel index and what compiling it gave.
    type Compiled = (usize, Result<Option<PtxasReport>, String>);
    let results: Mutex<Vec<Compiled>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, images.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(image) = images.get(i) else { break };
                let result = crate::nvrtc::compile_to_ptx(
                    &image.name,
                    &image.source,
                    options.arch,
                    &crate::nvrtc::CompileOptions::default(),
                )
                .map_err(|e| e.to_string())
                .and_then(|ptx| {
                    if options.cache_images {
                        cache_image(image, options.arch)?;
                    }
                    if !options.ptxas || crate::ptxas::locate_ptxas().is_err() {
                        return Ok(None);
                    }
                    crate::ptxas::assemble(&image.name, &ptx)
                        .map(Some)
                        .map_err(|e| e.to_string())
                });
                if let Some(p) = progress {
                    p.report(CompileProgress::Built { kernels: 1 });
                }
                results
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((i, result));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(i, _)| *i);
    let mut reports = Vec::new();
    for (i, r) in results {
        match r {
            Ok(Some(report)) => reports.push((images[i].name.clone(), report)),
            Ok(None) => {}
            Err(message) => {
                return Err(BackendError::Build(format!(
                    "NVRTC, kernel `{}`: {message}",
                    images[i].name
                )))
            }
        }
    }
    Ok(reports)
}

/// The kernel of `task` from what the template made of it: the template's kernel (or
/// parallel-k pair), or, where the template does not apply or refuses a lone anchor, the
/// default scheduler's for `target`; a refused fused task is refused (the graph layer
/// splits it).
fn kernel_of_outcome(
    task: &FusedTask,
    outcome: TemplateOutcome,
    target: &GpuTarget,
) -> Result<CudaKernel, BackendError> {
    let compile_error = |message: String| BackendError::Compile {
        task: task.name.clone(),
        message,
    };
    let fused = task.nodes.len() > 1;
    let inputs = task.def.inputs.len();
    let origin = if fused {
        KernelOrigin::FusedTemplate
    } else {
        KernelOrigin::Template
    };
    let image_of = |f: Function, inputs: usize| {
        let module = IRModule::new(f.name.clone(), Target::Cuda).with(f);
        kernel_image(inputs, module).map_err(compile_error)
    };
    let (function, origin) = match outcome {
        TemplateOutcome::ParallelK(k) => {
            let workspace_bytes = k
                .workspace_elements
                .checked_mul(4)
                .ok_or_else(|| compile_error("the parallel-k workspace is too large".into()))?;
            return Ok(CudaKernel {
                image: image_of(k.partial, inputs)?,
                origin,
                parallel_k: Some(ParallelKImage {
                    reduce: image_of(k.reduce, inputs + 1)?,
                    parts: k.parts,
                    workspace_bytes,
                }),
                tunable: None,
                tuned: false,
            });
        }
        TemplateOutcome::Kernel(f) if fused => (*f, KernelOrigin::FusedTemplate),
        TemplateOutcome::Kernel(f) => (*f, KernelOrigin::Template),
        TemplateOutcome::Refused(reason) if fused => {
            return Err(BackendError::Refused {
                task: task.name.clone(),
                reason,
            })
        }
        TemplateOutcome::Refused(_) | TemplateOutcome::NotApplicable => {
            let (f, kind) = schedule::schedule(&task.def, &task.name, target)
                .map_err(|e| compile_error(e.to_string()))?;
            let serial = largest_reduction(&task.def);
            if fused && kind == ScheduleKind::Elementwise && serial >= MAX_SERIAL_REDUCTION {
                return Err(BackendError::Refused {
                    task: task.name.clone(),
                    reason: format!(
                        "one element per thread would re-run a reduction of {serial} elements \
                         for every output; unfused, it is scheduled a row at a time"
                    ),
                });
            }
            (f, KernelOrigin::Scheduler(kind))
        }
    };
    let module = IRModule::new(task.name.clone(), Target::Cuda).with(function);
    let image = kernel_image(inputs, module).map_err(compile_error)?;
    Ok(CudaKernel {
        image,
        origin,
        parallel_k: None,
        tunable: None,
        tuned: false,
    })
}

/// The longest reduction a fused task may leave to the elementwise schedule, which runs it
/// serially in every output's thread: a pooling window or a short row, not a group
/// normalization's statistics read through the reshape that follows it (36 864 elements per
/// output, a variance that re-reads its mean at every element).
const MAX_SERIAL_REDUCTION: i64 = 1024;

/// The most elements any reduction of `def` folds (0 without one; unknown sizes count as
/// unbounded).
fn largest_reduction(def: &hidet_ir::compute::ComputeDef) -> i64 {
    def.nodes
        .iter()
        .filter_map(|(_, node)| match node {
            hidet_ir::compute::ComputeNode::Reduce { reduce_shape, .. } => Some(
                reduce_shape
                    .iter()
                    .try_fold(1i64, |n, d| d.as_int().and_then(|d| n.checked_mul(d)))
                    .unwrap_or(i64::MAX),
            ),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

impl<D: GpuDevice + 'static> CudaBackend<D> {
    /// When a measuring level is requested: tunes the SIMT tasks of `kernels` on this
    /// backend's device ([`crate::tuning`]) and returns the kernels with every tuned task
    /// rebuilt with its chosen candidate; a task that cannot be tuned keeps its kernel (with a
    /// warning). Otherwise returns `kernels` unchanged.
    fn tune_kernels(&self, mut kernels: Vec<CudaKernel>) -> Result<Vec<CudaKernel>, BackendError> {
        if !self.tuning.measures() {
            return Ok(kernels);
        }
        let target = self.options.gpu_target();
        let tuned: Vec<usize> = (0..kernels.len())
            .filter(|&i| kernels[i].tunable.is_some())
            .collect();
        let tasks: Vec<SimtTask> = tuned
            .iter()
            .filter_map(|&i| kernels[i].tunable.as_deref().cloned())
            .collect();
        if tasks.is_empty() {
            return Ok(kernels);
        }
        let results = tune_tasks(&self.tuning, self.device.clone(), &tasks)
            .map_err(|e| BackendError::Build(format!("tuning: {e}")))?;
        for ((&i, task), result) in tuned.iter().zip(&tasks).zip(results) {
            let rebuilt = result.map_err(|e| e.to_string()).and_then(|r| {
                let outcome = task.anchor().kernel(task.fused(), &r.winner.0);
                kernel_of_outcome(task.fused(), outcome, &target).map_err(|e| e.to_string())
            });
            match rebuilt {
                Ok(mut kernel) => {
                    kernel.tunable = kernels[i].tunable.take();
                    kernel.tuned = true;
                    kernels[i] = kernel;
                }
                Err(e) => {
                    let message =
                        format!("`{}` keeps its heuristic schedule: {e}", task.fused().name);
                    match &self.tuning.observer {
                        Some(o) => o.event(&hidet_tune::TuneEvent::Warning(&message)),
                        None => eprintln!("warning: {message}"),
                    }
                }
            }
        }
        Ok(kernels)
    }
}

impl<D: GpuDevice + 'static> Backend for CudaBackend<D> {
    type Kernel = CudaKernel;
    type Module = CudaModule<D>;
    type Arena = CudaArena<D>;

    fn name(&self) -> &'static str {
        self.device.name()
    }

    /// The target-neutral passes ([`hidet_graph::passes::default_passes`]).
    fn graph_passes(&self) -> Vec<Box<dyn hidet_graph::passes::GraphPass>> {
        hidet_graph::passes::default_passes()
    }

    /// A SIMT anchor with the tuning cache's choice for this environment, else the
    /// heuristic; any other task through the default scheduler (see the module docs).
    fn lower(&self, task: &FusedTask, _opts: &CompileOptions) -> Result<CudaKernel, BackendError> {
        let target = self.options.gpu_target();
        let chosen = SimtAnchor::of(task).and_then(|anchor| {
            let c = simt_choice(&self.tuning, task, &anchor, &target)?;
            Some((anchor.kernel(task, &c.choice), c.tunable, c.recorded))
        });
        let (outcome, tunable, recorded) =
            chosen.unwrap_or((TemplateOutcome::NotApplicable, None, false));
        let mut kernel = kernel_of_outcome(task, outcome, &target)?;
        if matches!(
            kernel.origin,
            KernelOrigin::Template | KernelOrigin::FusedTemplate
        ) {
            kernel.tunable = tunable;
            kernel.tuned = recorded;
        }
        Ok(kernel)
    }

    fn build(
        &self,
        kernels: Vec<CudaKernel>,
        opts: &CompileOptions,
    ) -> Result<(CudaModule<D>, ModuleReport), BackendError> {
        let start = Instant::now();
        let kernels = self.tune_kernels(kernels)?;
        if let Some(p) = &opts.progress {
            p.report(CompileProgress::Building {
                kernels: kernels.len(),
            });
        }
        let mut images = Vec::with_capacity(kernels.len());
        let mut plans = Vec::with_capacity(kernels.len());
        let mut origins = Vec::with_capacity(kernels.len());
        let mut k_parts = Vec::with_capacity(kernels.len());
        let tuned: Vec<bool> = kernels.iter().map(|k| k.tuned).collect();
        let mut workspace_bytes = 0usize;
        // Identical images (content-named kernels of identical tasks) compile and load once.
        let mut distinct: HashMap<String, usize> = HashMap::new();
        let mut intern = |image: DeviceKernel, images: &mut Vec<DeviceKernel>| -> usize {
            let key = format!(
                "{:?}\u{1f}{:?}\u{1f}{}\u{1f}{:?}\u{1f}{}",
                image.grid, image.block, image.dynamic_shared_bytes, image.params, image.source
            );
            *distinct.entry(key).or_insert_with(|| {
                images.push(image);
                images.len() - 1
            })
        };
        for k in kernels {
            origins.push(k.origin);
            match k.parallel_k {
                None => {
                    let params = k.image.params.clone();
                    let kernel = intern(k.image, &mut images);
                    plans.push((Plan::Single { kernel }, params));
                    k_parts.push(None);
                }
                Some(pk) => {
                    // The task's parameters: the partial kernel's inputs, then the
                    // reduction's output.
                    let mut params = k.image.params.clone();
                    params.pop();
                    params.extend(pk.reduce.params.last().cloned());
                    let partial = intern(k.image, &mut images);
                    let reduce = intern(pk.reduce, &mut images);
                    plans.push((Plan::ParallelK { partial, reduce }, params));
                    k_parts.push(Some(pk.parts));
                    workspace_bytes = workspace_bytes.max(pk.workspace_bytes);
                }
            }
        }
        let run_nvrtc = match self.options.nvrtc {
            NvrtcCheck::Off => false,
            NvrtcCheck::IfAvailable => crate::nvrtc::Nvrtc::global().is_ok(),
            NvrtcCheck::Required => true,
        };
        let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ptxas_reports = if run_nvrtc {
            compile_all(&images, &self.options, jobs, opts.progress.as_ref())?
        } else {
            if let Some(p) = &opts.progress {
                p.report(CompileProgress::Built {
                    kernels: images.len(),
                });
            }
            Vec::new()
        };
        let loaded = self
            .device
            .load(&images)
            .map_err(|e| BackendError::Build(e.to_string()))?;
        let workspace = match workspace_bytes {
            0 => None,
            bytes => Some(CudaArena::new(self.device.clone(), bytes)?),
        };
        // Every kernel's CUDA C is at hand (emitted when lowered): always reported.
        let report = ModuleReport {
            kernels: images.len(),
            compiled: if run_nvrtc { images.len() } else { 0 },
            build_time: start.elapsed(),
            sources: images
                .iter()
                .map(|k| (k.name.clone(), k.source.clone()))
                .collect(),
            ..Default::default()
        };
        Ok((
            CudaModule {
                loaded,
                images,
                plans,
                origins,
                k_parts,
                tuned,
                workspace,
                workspace_lock: std::sync::Mutex::new(()),
                runs: Default::default(),
                graphs: Default::default(),
                replays: Default::default(),
                ptx_compiled: run_nvrtc,
                ptxas_reports,
            },
            report,
        ))
    }

    fn check_args(
        &self,
        module: &CudaModule<D>,
        kernel: usize,
        args: &[ArgAddress],
    ) -> Result<(), BackendError> {
        let fail = |message: String| BackendError::Launch { kernel, message };
        let (_, params) = module
            .plans
            .get(kernel)
            .ok_or_else(|| fail("no such kernel".into()))?;
        if params.len() != args.len() {
            return Err(fail(format!(
                "{} arguments for {} parameters",
                args.len(),
                params.len()
            )));
        }
        for (p, a) in params.iter().zip(args) {
            if a.bytes < p.bytes() {
                return Err(fail(format!(
                    "parameter `{}` needs {} bytes, given {}",
                    p.name,
                    p.bytes(),
                    a.bytes
                )));
            }
            if p.written && !a.written {
                return Err(fail(format!(
                    "parameter `{}` is written by the kernel",
                    p.name
                )));
            }
        }
        Ok(())
    }

    unsafe fn launch(
        &self,
        module: &CudaModule<D>,
        kernel: usize,
        args: &[u64],
    ) -> Result<(), BackendError> {
        let fail = |e: crate::device::DeviceError| BackendError::Launch {
            kernel,
            message: e.to_string(),
        };
        let (plan, _) = module
            .plans
            .get(kernel)
            .ok_or_else(|| BackendError::Launch {
                kernel,
                message: "no such kernel".into(),
            })?;
        let streaming = {
            let mut runs = module.runs.lock().unwrap_or_else(|e| e.into_inner());
            match runs.get_mut(&std::thread::current().id()) {
                Some(RunLog::Recording(launches)) => {
                    // Deferred to `end_run`, within the run that borrows these buffers.
                    launches.push((kernel, args.to_vec()));
                    return Ok(());
                }
                Some(RunLog::Streaming) => true,
                None => false,
            }
        };
        // Outside a run each launch is waited for; inside one, `end_run` waits for all.
        let finish = || {
            if streaming {
                Ok(())
            } else {
                self.device.synchronize().map_err(fail)
            }
        };
        match *plan {
            Plan::Single { kernel: k } => {
                // SAFETY: the caller guarantees (`Backend::launch`) that `args` passed
                // `check_args` for this kernel (count and sizes match its parameters) and
                // point into live arenas of this backend — allocations of this device — with
                // no overlap and exclusive access to written buffers, until this call returns
                // or, inside a run, until `end_run` (whose synchronize ends the launch).
                unsafe { self.device.launch(&module.loaded, k, args) }.map_err(fail)?;
                finish()
            }
            Plan::ParallelK { partial, reduce } => {
                let (partial_args, reduce_args) = parallel_k_args(module, args)
                    .map_err(|message| BackendError::Launch { kernel, message })?;
                let _workspace = module
                    .workspace_lock
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                // SAFETY: as above for the task's arguments; the workspace is a live
                // allocation of this device at least as large as any partial kernel's
                // workspace parameter (its size was taken from them at build), distinct from
                // every arena. The lock makes the two launches adjacent in the device's launch
                // order (in which launches run): the partial kernel writes the workspace, the
                // reduction reads it next, and any later user of the workspace runs after.
                unsafe {
                    self.device
                        .launch(&module.loaded, partial, &partial_args)
                        .map_err(fail)?;
                    self.device
                        .launch(&module.loaded, reduce, &reduce_args)
                        .map_err(fail)?;
                }
                finish()
            }
        }
    }

    /// With [`CudaBackendOptions::cuda_graphs`], the run's launches are recorded until
    /// [`Backend::end_run`]; without, they are enqueued without waiting.
    fn begin_run(&self, module: &CudaModule<D>) -> Result<(), BackendError> {
        let log = if self.options.cuda_graphs {
            RunLog::Recording(Vec::new())
        } else {
            RunLog::Streaming
        };
        module
            .runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(std::thread::current().id(), log);
        Ok(())
    }

    /// Waits for a streaming run's launches (completed or not, so its buffers are free
    /// again); runs a recording run's launches as a device graph: replays the graph captured
    /// for exactly this launch list (kernels and addresses), capturing it first when there is
    /// none, and waits for it.
    fn end_run(&self, module: &CudaModule<D>, completed: bool) -> Result<(), BackendError> {
        let taken = module
            .runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&std::thread::current().id());
        let launches = match taken {
            Some(RunLog::Streaming) => {
                return self.device.synchronize().map_err(|e| BackendError::Launch {
                    kernel: 0,
                    message: format!("waiting for the run: {e}"),
                })
            }
            Some(RunLog::Recording(l)) if completed && !l.is_empty() => l,
            _ => return Ok(()),
        };
        let fail = |e: crate::device::DeviceError| BackendError::Launch {
            kernel: launches.first().map_or(0, |l| l.0),
            message: format!("CUDA graph: {e}"),
        };
        // The workspace is shared by the parallel-k kernels of every run of this module.
        let _workspace = module
            .workspace_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut graphs = module.graphs.lock().unwrap_or_else(|e| e.into_inner());
        let index = match graphs.iter().position(|(key, _)| *key == launches) {
            Some(i) => i,
            None => {
                let device_launches = device_launches(module, &launches)?;
                // SAFETY: every launch came through `Backend::launch` in this run, whose
                // caller guaranteed its arguments (checked by `check_args`, live for the
                // run, written buffers exclusive); the workspace lives as long as the module.
                // The graph is replayed only for a run that issued exactly these launches
                // (the key), under the same guarantees.
                let graph = match unsafe { self.device.capture(&module.loaded, &device_launches) } {
                    Ok(graph) => graph,
                    Err(_) => {
                        // The device could not record them (a driver without graph support,
                        // say): run them as plain launches; the next run tries again.
                        drop(graphs);
                        for (kernel, args) in &device_launches {
                            // SAFETY: as for the capture above; these are this run's own
                            // launches, issued now, in order.
                            unsafe { self.device.launch(&module.loaded, *kernel, args) }
                                .map_err(fail)?;
                        }
                        return self.device.synchronize().map_err(fail);
                    }
                };
                if graphs.len() >= MAX_GRAPHS {
                    graphs.remove(0);
                }
                graphs.push((launches.clone(), graph));
                graphs.len() - 1
            }
        };
        // SAFETY: this run issued exactly the captured launches (same kernels, same
        // addresses), so the capture's contract is this run's `launch` contract; the
        // workspace lock keeps other runs of this module off the workspace until the
        // synchronize below.
        unsafe { self.device.replay(&module.loaded, &graphs[index].1) }.map_err(fail)?;
        module
            .replays
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.device.synchronize().map_err(fail)
    }

    fn alloc(&self, bytes: usize) -> Result<CudaArena<D>, BackendError> {
        CudaArena::new(self.device.clone(), bytes)
    }

    fn base(&self, arena: &CudaArena<D>) -> u64 {
        arena.base()
    }

    fn upload(
        &self,
        arena: &mut CudaArena<D>,
        offset: usize,
        tensor: &Tensor,
    ) -> Result<(), BackendError> {
        arena.write(offset, tensor)
    }

    fn download(
        &self,
        arena: &CudaArena<D>,
        offset: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Tensor, BackendError> {
        arena.read(offset, dtype, shape)
    }
}

/// The arguments of a parallel-k task's two kernels from the task's (its inputs, then its
/// output): the partial kernel gets the inputs and the workspace, the reduction the
/// workspace, the inputs and the output.
fn parallel_k_args<D: GpuDevice>(
    module: &CudaModule<D>,
    args: &[u64],
) -> Result<(Vec<u64>, Vec<u64>), String> {
    let workspace = module
        .workspace
        .as_ref()
        .ok_or("a parallel-k kernel without a workspace")?
        .base();
    let (output, inputs) = args.split_last().ok_or("no arguments")?;
    let partial = inputs.iter().copied().chain([workspace]).collect();
    let reduce = std::iter::once(workspace)
        .chain(inputs.iter().copied())
        .chain([*output])
        .collect();
    Ok((partial, reduce))
}

/// The device launches of task launches: a parallel-k task's two kernels on the workspace.
fn device_launches<D: GpuDevice>(
    module: &CudaModule<D>,
    launches: &[TaskLaunch],
) -> Result<Vec<(usize, Vec<u64>)>, BackendError> {
    let mut out = Vec::with_capacity(launches.len());
    for (kernel, args) in launches {
        let fail = |message: String| BackendError::Launch {
            kernel: *kernel,
            message,
        };
        match module.plans.get(*kernel).map(|p| &p.0) {
            Some(Plan::Single { kernel: k }) => out.push((*k, args.clone())),
            Some(Plan::ParallelK { partial, reduce }) => {
                let (p, r) = parallel_k_args(module, args).map_err(fail)?;
                out.push((*partial, p));
                out.push((*reduce, r));
            }
            None => return Err(fail("no such kernel".into())),
        }
    }
    Ok(out)
}
