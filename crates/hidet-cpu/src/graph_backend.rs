//! The CPU implementation of the graph layer's [`Backend`]: every fused task becomes one C
//! kernel, and every distinct kernel its own translation unit, compiled in parallel (one
//! compiler per core) through the content-addressed cache. Kernels are named by content, so
//! identical kernels are compiled once and reused across models.
//!
//! How a task becomes a kernel:
//! - an anchored task whose anchor is an f32 matmul or batch matmul uses the matmul template,
//!   with its prologues and epilogue fused by [`hidet_ir::fusion::fuse`]; when `fuse` refuses, the
//!   task is refused ([`BackendError::Refused`]) and the graph layer splits it into separate
//!   kernels — never a wrong result;
//! - every other task goes through the rule-based scheduler ([`crate::schedule::schedule`]);
//!   a fused task it does not cover is refused (and split), a single operator it does not
//!   cover gets the inlining fallback ([`naive::schedule_naive`]), which handles any
//!   definition by recomputing reductions where they are read.

pub mod anchor;
pub mod arena;
mod huge_pages;
pub mod kernel_memo;
pub mod naive;
pub mod output_pool;
mod saved;
pub mod size_generic;
pub mod tuning;

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

use crate::graph_passes::PassOptions;
use hidet_graph::compiled::{
    ArgAddress, Backend, BackendError, CompileOptions, CompileProgress, ModuleReport, OutputSlot,
};
use hidet_graph::fusion::FusedTask;
use hidet_graph::passes::DerivedConstants;
use hidet_graph::tensor::Element;
use hidet_graph::{DType, Tensor};
use hidet_ir::function::{Function, IRModule, Target};

use crate::module::CompiledModule;
use crate::options::BuildOptions;
use crate::signature::ParamKind;
use crate::templates::int4_linear::Int4LinearSchedule;
use crate::templates::integer_linear::{depth_group_for, IntegerLinearSchedule};
use crate::templates::integer_matmul::IntegerMatmulSchedule;
use crate::templates::matmul::MatmulSchedule;
use anchor::{
    int4_linear_kernel, integer_linear_kernel, integer_matmul_kernel, matmul_kernel,
    TemplateOutcome,
};
pub use arena::CpuArena;
use kernel_memo::{KernelMemo, Lowered, LoweringKey};
use output_pool::{OutputPool, Pooled};
use size_generic::{SizeChoice, SizeMemo};

/// The graph-pass options for running on `target`: the defaults, except that a constant left
/// operand is stored in panels as tall as the target's level-0 register tile
/// ([`MatmulSchedule::for_target`]), so each tile of the micro-kernel broadcasts from one
/// contiguous panel (measured on AVX2, 6-row tiles: 6-row panels against 16-row ones, in
/// paired runs ResNet-50 1.7% and Inception-V3 0.5% faster on a quiet host, both about 4.5%
/// when a busy neighbour shares the cores). A direct convolution's
/// gathered pixels are read in place through offset tables (`hidet::OffsetGather`), one
/// table read per element and column panel, so its output channels need not fit one register
/// tile (measured on AVX2: ResNet-50's 64-channel stem 2.2 → 1.4 ms and Inception-V3's 147²
/// convolutions 3.6 + 5.6 → 2.3 + 4.7 ms against their im2col products). The 8-bit linear
/// products' weight panels are grouped for the target's multiply-add
/// ([`depth_group_for`]: pairs without VNNI).
pub fn pass_options(target: &crate::CpuTarget) -> PassOptions {
    let rows = MatmulSchedule::for_target(target, 1).mr;
    let defaults = PassOptions::default();
    PassOptions {
        left_panel_rows: usize::try_from(rows).unwrap_or(defaults.left_panel_rows),
        integer_depth_group: usize::try_from(depth_group_for(target))
            .unwrap_or(defaults.integer_depth_group),
        ..defaults
    }
}

/// One translation unit: a kernel function under its content name, its C source, and the
/// kernels of the model (by index) that are this same source.
struct Unit {
    module: IRModule,
    source: String,
    kernels: Vec<usize>,
}

/// The translation units of `kernels`, one per distinct C source and parameter types,
/// emitted on `jobs` threads (a kernel whose source `memo` remembers is not emitted again,
/// unless the IR is to be dumped).
/// A function is named by its task name without the model-specific `k<N>_` position, so that
/// identical kernels (the repeated blocks of a network) emit identical C, share one unit
/// here and one entry of the content-addressed cache across models. The module of a unit
/// has the function's name.
fn distinct_units(
    kernels: Vec<CpuKernel>,
    jobs: usize,
    build_opts: &BuildOptions,
    memo: &KernelMemo,
) -> Result<Vec<Unit>, crate::error::CpuError> {
    let keys: Vec<Option<LoweringKey>> = kernels
        .iter()
        .map(|k| k.memo_key.filter(|_| !build_opts.dump_ir))
        .collect();
    let lowered: Vec<bool> = kernels.iter().map(|k| k.lowered).collect();
    let lifted_sources: Vec<Option<Arc<std::sync::OnceLock<Arc<str>>>>> =
        kernels.iter().map(|k| k.lifted_source.clone()).collect();
    let modules: Vec<IRModule> = kernels
        .into_iter()
        .map(|kernel| {
            let mut function = kernel.function;
            function.name = hidet_graph::fusion::content_name(&function.name);
            let mut module = IRModule::new(function.name.clone(), Target::Cpu);
            module.functions.push(function);
            module
        })
        .collect();
    let indexed: Vec<(usize, &IRModule)> = modules.iter().enumerate().collect();
    let known: Vec<Option<Arc<str>>> = keys
        .iter()
        .zip(&lifted_sources)
        .map(|(k, lifted)| match lifted {
            Some(slot) => slot.get().cloned(),
            None => k.as_ref().and_then(|k| memo.source(k)),
        })
        .collect();
    let missing: Vec<usize> = (0..modules.len()).filter(|&i| known[i].is_none()).collect();
    let emitted = parallel_map(&indexed, jobs, Some(&missing), |&(i, m)| {
        if lowered[i] {
            crate::pipeline::emit_lowered_source(m)
        } else {
            crate::emit_source(m, build_opts)
        }
    });
    let sources: Vec<Result<String, crate::error::CpuError>> = emitted
        .into_iter()
        .zip(known)
        .zip(keys.iter().zip(&lifted_sources))
        .map(|((fresh, known), (key, lifted))| match known {
            Some(source) => Ok(source.to_string()),
            None => {
                if let (Ok(source), Some(key)) = (&fresh, key) {
                    memo.remember_source(key, source);
                }
                if let (Ok(source), Some(slot)) = (&fresh, lifted) {
                    let _ = slot.set(Arc::from(source.as_str()));
                }
                fresh
            }
        })
        .collect();
    let mut units: Vec<Unit> = Vec::new();
    // Units by source; equal C may still differ in the parameters' shapes, which the loaded
    // kernel checks, so a kernel joins a unit of its source only with equal parameter types.
    let mut by_source: std::collections::HashMap<String, Vec<usize>> = Default::default();
    for (k, (module, source)) in modules.into_iter().zip(sources).enumerate() {
        let source = source?;
        let params = &module.functions[0].params;
        let same_params = |unit: &Unit| {
            let theirs = &unit.module.functions[0].params;
            theirs.len() == params.len() && theirs.iter().zip(params).all(|(a, b)| a.ty() == b.ty())
        };
        let candidates = by_source.get(&source).map_or(&[][..], Vec::as_slice);
        if let Some(&u) = candidates.iter().find(|&&u| same_params(&units[u])) {
            units[u].kernels.push(k);
            continue;
        }
        by_source
            .entry(source.clone())
            .or_default()
            .push(units.len());
        units.push(Unit {
            module,
            source,
            kernels: vec![k],
        });
    }
    Ok(units)
}

/// `f` applied to every item on at most `jobs` threads, taking items in `order` (indices of
/// `items`; all of them in turn when `None`). Results are in item order; an item whose call
/// panicked gets `CpuError::Unsupported` with the panic's message (the other items still
/// run), and an item `order` leaves out gets `CpuError::Unsupported` too.
fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    order: Option<&[usize]>,
    f: impl Fn(&T) -> Result<R, crate::error::CpuError> + Sync,
) -> Vec<Result<R, crate::error::CpuError>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<R, crate::error::CpuError>>>> =
        items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let item = match order {
                    Some(order) => order.get(i).copied(),
                    None => (i < items.len()).then_some(i),
                };
                let Some(item) = item else { break };
                let call = std::panic::AssertUnwindSafe(|| f(&items[item]));
                let result = std::panic::catch_unwind(call).unwrap_or_else(|payload| {
                    Err(crate::error::CpuError::Unsupported(format!(
                        "a compile job panicked: {}",
                        panic_message(payload.as_ref())
                    )))
                });
                *slots[item].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            });
        }
    });
    slots
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| {
                    Err(crate::error::CpuError::Unsupported(
                        "a compile job did not run".into(),
                    ))
                })
        })
        .collect()
}

/// The text of a panic's payload (`panic!` with a literal or a formatted message).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

/// Compiles every unit with at most `jobs` compiler invocations at a time, longest source
/// first, and reports each finished unit's kernels to the progress sink. Results are in unit
/// order.
fn build_in_parallel(
    units: &[Unit],
    jobs: usize,
    build_opts: &BuildOptions,
    opts: &CompileOptions,
) -> Vec<Result<CompiledModule, crate::error::CpuError>> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by_key(|&u| std::cmp::Reverse(units[u].source.len()));
    parallel_map(units, jobs, Some(&order), |unit| {
        let built = crate::build_from_source(&unit.module, &unit.source, build_opts);
        if let (Ok(_), Some(p)) = (&built, opts.progress.as_ref()) {
            p.report(CompileProgress::Built {
                kernels: unit.kernels.len(),
            });
        }
        built
    })
}

/// Options of the CPU graph backend.
#[derive(Debug, Clone)]
pub struct CpuBackendOptions {
    /// How modules are compiled (cache, target, kept sources).
    pub build: BuildOptions,
    /// Use the matmul template for f32 matmul and batch-matmul anchors (else the scheduler).
    pub matmul_template: bool,
    /// Compiler invocations run concurrently; `None` = one per core.
    pub compile_jobs: Option<usize>,
    /// Threads the kernels of a module loaded from a saved model run on; `None` = all cores.
    /// (A module built here runs on [`CompileOptions::threads`].)
    pub loaded_threads: Option<usize>,
}

impl Default for CpuBackendOptions {
    fn default() -> Self {
        CpuBackendOptions {
            build: BuildOptions::default(),
            matmul_template: true,
            compile_jobs: None,
            loaded_threads: None,
        }
    }
}

/// How a kernel was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelOrigin {
    /// The matmul template alone.
    Template,
    /// The matmul template with prologues/epilogue fused in.
    FusedTemplate,
    /// The rule-based scheduler, from the task's composed definition.
    Scheduler,
    /// The inlining fallback ([`naive::schedule_naive`]), for a single operator the
    /// scheduler does not cover.
    Inlined,
}

/// A lowered kernel.
#[derive(Debug, Clone)]
pub struct CpuKernel {
    pub function: Function,
    pub origin: KernelOrigin,
    /// The matmul task behind a template kernel, when tuning is requested.
    pub tunable: Option<std::sync::Arc<tuning::MatmulTask>>,
    /// The key its backend remembers it by ([`kernel_memo`]), when remembered.
    pub memo_key: Option<LoweringKey>,
    /// Whether `function` is lowered already (`hidet_ir::passes::lower_function`), as a
    /// kernel given size parameters is ([`size_generic`]).
    pub lowered: bool,
    /// The values of `function`'s size parameters, its last `sizes.len()` parameters, for
    /// this task ([`size_generic`]); empty for a kernel without them.
    pub sizes: Vec<i64>,
    /// For a kernel with size parameters, its C source once emitted, shared with every
    /// other instance of the same function.
    pub lifted_source: Option<Arc<std::sync::OnceLock<Arc<str>>>>,
}

/// A graph output's storage: a vector with capacity for `len` elements and length 0 until
/// the run's kernels have written them all, or for a large output, storage from the backend's
/// [`OutputPool`]. Not zeroed: a model's outputs (GPT-2's logits are 25 MB) would otherwise
/// be cleared on every run before the kernels overwrite them.
struct HostOutput<T> {
    storage: OutputStorage<T>,
    len: usize,
    shape: Vec<usize>,
}

enum OutputStorage<T> {
    Owned(Vec<T>),
    /// At least `len · size_of::<T>()` bytes, 8-byte aligned.
    Pooled(Pooled),
}

impl<T: Element> OutputSlot for HostOutput<T> {
    fn address(&self) -> u64 {
        match &self.storage {
            OutputStorage::Owned(data) => data.as_ptr() as usize as u64,
            OutputStorage::Pooled(pooled) => pooled.address() as usize as u64,
        }
    }

    unsafe fn finish(self: Box<Self>) -> Tensor {
        let HostOutput {
            storage,
            len,
            shape,
        } = *self;
        match storage {
            OutputStorage::Owned(mut data) => {
                // SAFETY: the capacity is at least `len` (reserved when the slot was made,
                // and the vector was never touched since), and the caller guarantees that
                // all `len` elements were written through `address` (kernels write valid
                // values of `T`).
                unsafe { data.set_len(len) };
                Tensor::new(shape, data).expect("`len` is the element count of `shape`")
            }
            OutputStorage::Pooled(pooled) => {
                let ptr = pooled.address().cast::<T>();
                // SAFETY: the storage holds at least `len` elements of `T` (its size was
                // asked for them), is 8-byte aligned (enough for every element type), and
                // the caller guarantees that all of them were written; `pooled` owns it,
                // and nothing writes it again until `pooled` is dropped with the tensor's
                // last clone and returns it to the pool.
                unsafe { Tensor::from_external(shape, ptr, len, Box::new(pooled)) }
                    .expect("`len` is the element count of `shape`")
            }
        }
    }
}

/// The built kernels of a model.
#[derive(Debug)]
pub struct CpuGraphModule {
    units: Vec<CompiledModule>,
    /// `(unit, handle index)` of kernel `i`.
    index: Vec<(usize, usize)>,
    origins: Vec<KernelOrigin>,
    tunables: Vec<Option<std::sync::Arc<tuning::MatmulTask>>>,
    /// The size parameters of each kernel given them ([`size_generic`]).
    bound: Vec<Option<BoundSizes>>,
}

/// What a kernel with size parameters is called with beyond the graph's buffers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BoundSizes {
    /// One value per size parameter, in order (the kernel's last parameters).
    values: Vec<crate::arg::Scalar>,
    /// The values as the packed calling convention passes them (by address), one per value.
    slots: Vec<crate::arg::ScalarSlot>,
    /// Elements each tensor parameter spans under these values, in parameter order.
    elements: Vec<usize>,
}

impl BoundSizes {
    /// The size values `values` of a kernel with signature `signature`, and the storage
    /// its tensor parameters span under them; an error when a value does not fit its
    /// parameter or a size cannot be evaluated.
    fn of(
        signature: &crate::signature::KernelSignature,
        values: &[i64],
    ) -> Result<BoundSizes, String> {
        let (scalars, env) = Self::scalars(signature, values)?;
        let tensors = signature.params.len() - scalars.len();
        let elements = signature.params[..tensors]
            .iter()
            .map(|p| match &p.kind {
                ParamKind::Tensor { size, .. } => {
                    let n = crate::signature::eval_index(size, &env)?;
                    usize::try_from(n).map_err(|_| format!("parameter `{}` spans {n}", p.name()))
                }
                _ => Err(format!("parameter `{}` is not a tensor", p.name())),
            })
            .collect::<Result<_, _>>()?;
        Ok(BoundSizes {
            slots: scalars.iter().map(|s| s.to_slot()).collect(),
            values: scalars,
            elements,
        })
    }

    /// The size values `values` and buffer sizes `elements` recorded for a kernel of a
    /// saved module with signature `signature`; an error unless they fit it.
    fn loaded(
        signature: &crate::signature::KernelSignature,
        values: &[i64],
        elements: Vec<usize>,
    ) -> Result<BoundSizes, String> {
        let (scalars, _) = Self::scalars(signature, values)?;
        if elements.len() + scalars.len() != signature.params.len() {
            return Err(format!(
                "{} buffer sizes for {} buffer parameters",
                elements.len(),
                signature.params.len() - scalars.len()
            ));
        }
        Ok(BoundSizes {
            slots: scalars.iter().map(|s| s.to_slot()).collect(),
            values: scalars,
            elements,
        })
    }

    /// `values` as the kernel's last parameters take them, and the map from those
    /// parameters to their values.
    fn scalars(
        signature: &crate::signature::KernelSignature,
        values: &[i64],
    ) -> Result<(Vec<crate::arg::Scalar>, std::collections::HashMap<u64, i64>), String> {
        if values.len() > size_generic::MAX_PARAMS {
            return Err(format!(
                "{} size values, more than the {} a kernel takes",
                values.len(),
                size_generic::MAX_PARAMS
            ));
        }
        let first = signature
            .params
            .len()
            .checked_sub(values.len())
            .ok_or("more size values than parameters")?;
        let mut env = std::collections::HashMap::new();
        let mut scalars = Vec::with_capacity(values.len());
        for (p, &v) in signature.params[first..].iter().zip(values) {
            let ParamKind::Scalar(dtype) = p.kind else {
                return Err(format!("parameter `{}` is not a size", p.name()));
            };
            let scalar = crate::arg::Scalar::from_index(dtype, v)
                .ok_or_else(|| format!("size {v} does not fit parameter `{}`", p.name()))?;
            env.insert(p.var.id(), v);
            scalars.push(scalar);
        }
        Ok((scalars, env))
    }
}

impl CpuGraphModule {
    /// How each kernel was produced, in kernel order.
    pub fn origins(&self) -> &[KernelOrigin] {
        &self.origins
    }

    /// The values kernel `kernel` is called with for its size parameters, in order: empty
    /// for a kernel specialized to its task's sizes ([`size_generic`]).
    pub fn size_values(&self, kernel: usize) -> Vec<i64> {
        self.bound
            .get(kernel)
            .and_then(Option::as_ref)
            .map_or_else(Vec::new, |b| {
                b.values.iter().filter_map(|v| v.as_index()).collect()
            })
    }

    /// The matmul task behind kernel `kernel`, when the module was built with a measuring
    /// tuning level and the kernel is a template kernel.
    pub fn tunable(&self, kernel: usize) -> Option<&tuning::MatmulTask> {
        self.tunables.get(kernel)?.as_deref()
    }

    fn handle(
        &self,
        kernel: usize,
    ) -> Result<(&CompiledModule, &crate::module::KernelHandle), BackendError> {
        let (u, h) = *self.index.get(kernel).ok_or_else(|| BackendError::Launch {
            kernel,
            message: "no such kernel".into(),
        })?;
        let unit = &self.units[u];
        Ok((unit, &unit.kernels()[h]))
    }
}

/// The CPU backend (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct CpuBackend {
    pub options: CpuBackendOptions,
    /// How matmul schedules are chosen and tuned ([`tuning`]).
    pub tuning: tuning::CpuTuning,
    /// Weights packed by the graph passes, kept for this backend's later compilations (a
    /// model compiled for another set of input shapes packs each weight once).
    derived: Arc<DerivedConstants>,
    /// Tasks lowered and emitted before, kept for this backend's later tasks.
    memo: Arc<KernelMemo>,
    /// Storage of large outputs the caller dropped, for the next run's ([`output_pool`]).
    outputs: Arc<OutputPool>,
    /// The lowerings of tasks whose sizes change between compilations ([`size_generic`]).
    sizes: Arc<SizeMemo>,
}

impl CpuBackend {
    pub fn new(options: CpuBackendOptions) -> CpuBackend {
        CpuBackend {
            options,
            tuning: tuning::CpuTuning::default(),
            derived: Arc::default(),
            memo: Arc::default(),
            outputs: Arc::default(),
            sizes: Arc::default(),
        }
    }

    /// The constants this backend's graph passes derived (packed weights), remembered for
    /// its later compilations; each derivation once however many input shapes use it.
    pub fn derived_constants(&self) -> &DerivedConstants {
        &self.derived
    }

    /// The tasks this backend remembers having lowered ([`kernel_memo`]).
    pub fn memo(&self) -> &KernelMemo {
        &self.memo
    }

    /// This backend with `tuning`.
    pub fn with_tuning(self, tuning: tuning::CpuTuning) -> CpuBackend {
        CpuBackend { tuning, ..self }
    }

    fn threads(&self, opts: &CompileOptions) -> usize {
        opts.threads
            .unwrap_or_else(|| self.options.build.target().cores)
            .max(1)
    }

    /// `kernels`, those whose C this backend does not remember lowered now, each either as
    /// lowered or, for a task whose sizes keep changing, as a kernel with size parameters
    /// ([`size_generic`]). A kernel that fails verification or lowering is left as it is
    /// (building it reports the failure).
    fn choose_sizes(&self, kernels: Vec<CpuKernel>, jobs: usize) -> Vec<CpuKernel> {
        // Equal tasks (a network's repeated blocks) are lowered once: the first of each key.
        let mut first_of: std::collections::HashMap<LoweringKey, usize> = Default::default();
        let mut todo = Vec::new();
        let mut lowered_as: Vec<Option<usize>> = vec![None; kernels.len()];
        for (i, kernel) in kernels.iter().enumerate() {
            let Some(key) = kernel.memo_key.filter(|_| !kernel.lowered) else {
                continue;
            };
            if self.memo.source(&key).is_some() {
                continue;
            }
            lowered_as[i] = Some(*first_of.entry(key).or_insert_with(|| {
                todo.push(i);
                i
            }));
        }
        let lowered = parallel_map(&kernels, jobs, Some(&todo), |k| {
            let function = crate::pipeline::verify_and_lower(k.function.clone())?;
            let sites = hidet_ir::size_params::Sites::of(&function)
                .ok_or_else(|| crate::error::CpuError::Unsupported("not a CPU kernel".into()))?;
            Ok((function, sites))
        });
        kernels
            .into_iter()
            .zip(lowered_as)
            .map(|(mut kernel, lowered_as)| {
                let Some(Ok((function, sites))) = lowered_as.map(|i| &lowered[i]) else {
                    return kernel;
                };
                match self.sizes.choose(&kernel.function.name, sites, function) {
                    SizeChoice::Specialized => {
                        kernel.function = Function {
                            name: std::mem::take(&mut kernel.function.name),
                            ..function.clone()
                        }
                    }
                    SizeChoice::Lifted {
                        function,
                        values,
                        source,
                    } => {
                        kernel.lifted_source = Some(source);
                        let name = std::mem::take(&mut kernel.function.name);
                        kernel.function = Function {
                            name,
                            ..Function::clone(&function)
                        };
                        kernel.sizes = values;
                        // The task's C is not this kernel's: not remembered under its key.
                        kernel.memo_key = None;
                    }
                }
                kernel.lowered = true;
                kernel
            })
            .collect()
    }

    /// The kernel of `task`, lowered now (see the module docs).
    fn lower_task(
        &self,
        task: &FusedTask,
        opts: &CompileOptions,
    ) -> Result<CpuKernel, BackendError> {
        let fused = task.nodes.len() > 1;
        if self.options.matmul_template {
            let threads = i64::try_from(self.threads(opts)).unwrap_or(1);
            let choice = tuning::matmul_choice(self, task, threads);
            match matmul_kernel(task, &choice.schedule) {
                TemplateOutcome::Kernel(function) => {
                    let origin = if fused {
                        KernelOrigin::FusedTemplate
                    } else {
                        KernelOrigin::Template
                    };
                    return Ok(CpuKernel {
                        function: *function,
                        origin,
                        tunable: choice.tunable,
                        memo_key: None,
                        lowered: false,
                        sizes: Vec::new(),
                        lifted_source: None,
                    });
                }
                TemplateOutcome::Refused(reason) if fused => {
                    return Err(BackendError::Refused {
                        task: task.name.clone(),
                        reason,
                    })
                }
                TemplateOutcome::Refused(_) | TemplateOutcome::NotApplicable => {}
            }
        }
        let threads = i64::try_from(self.threads(opts)).unwrap_or(1);
        let target = self.options.build.target();
        let integer = match integer_matmul_kernel(
            task,
            &IntegerMatmulSchedule::for_target(target, threads),
        ) {
            TemplateOutcome::NotApplicable => {
                match integer_linear_kernel(
                    task,
                    &IntegerLinearSchedule::for_target(target, threads),
                ) {
                    TemplateOutcome::NotApplicable => {
                        int4_linear_kernel(task, &Int4LinearSchedule::for_target(target, threads))
                    }
                    outcome => outcome,
                }
            }
            outcome => outcome,
        };
        match integer {
            TemplateOutcome::Kernel(function) => {
                let origin = if fused {
                    KernelOrigin::FusedTemplate
                } else {
                    KernelOrigin::Template
                };
                return Ok(CpuKernel {
                    function: *function,
                    origin,
                    tunable: None,
                    memo_key: None,
                    lowered: false,
                    sizes: Vec::new(),
                    lifted_source: None,
                });
            }
            TemplateOutcome::Refused(reason) if fused => {
                return Err(BackendError::Refused {
                    task: task.name.clone(),
                    reason,
                })
            }
            TemplateOutcome::Refused(_) | TemplateOutcome::NotApplicable => {}
        }
        match crate::schedule::schedule(&task.def, &task.name, self.options.build.target(), threads)
        {
            Ok(function) => Ok(CpuKernel {
                function,
                origin: KernelOrigin::Scheduler,
                tunable: None,
                memo_key: None,
                lowered: false,
                sizes: Vec::new(),
                lifted_source: None,
            }),
            Err(e) if fused => Err(BackendError::Refused {
                task: task.name.clone(),
                reason: format!("scheduler: {e}"),
            }),
            Err(_) => {
                let function = naive::schedule_naive(&task.def, &task.name).map_err(|e| {
                    BackendError::Compile {
                        task: task.name.clone(),
                        message: e.to_string(),
                    }
                })?;
                Ok(CpuKernel {
                    function,
                    origin: KernelOrigin::Inlined,
                    tunable: None,
                    memo_key: None,
                    lowered: false,
                    sizes: Vec::new(),
                    lifted_source: None,
                })
            }
        }
    }
}

impl Backend for CpuBackend {
    type Kernel = CpuKernel;
    type Module = CpuGraphModule;
    type Arena = CpuArena;

    fn name(&self) -> &'static str {
        "cpu"
    }

    /// The graph passes with this backend's options for its target ([`pass_options`]).
    fn graph_passes(&self) -> Vec<Box<dyn hidet_graph::passes::GraphPass>> {
        crate::graph_passes::passes_for(&PassOptions {
            derived: Some(Arc::clone(&self.derived)),
            ..pass_options(self.options.build.target())
        })
    }

    /// The kernel of `task`: remembered ([`kernel_memo`]) when this backend lowered an equal
    /// task before, else lowered now (see the module docs) and remembered unless it is
    /// offered for measured tuning.
    fn lower(&self, task: &FusedTask, opts: &CompileOptions) -> Result<CpuKernel, BackendError> {
        let threads = i64::try_from(self.threads(opts)).unwrap_or(1);
        let key = LoweringKey::of(task, threads, self.options.matmul_template);
        match self.memo.lowered(&key) {
            Some(Lowered::Kernel { function, origin }) => {
                let mut function = Function::clone(&function);
                function.name = task.name.clone();
                return Ok(CpuKernel {
                    function,
                    origin,
                    tunable: None,
                    memo_key: Some(key),
                    lowered: false,
                    sizes: Vec::new(),
                    lifted_source: None,
                });
            }
            Some(Lowered::Refused(reason)) => {
                return Err(BackendError::Refused {
                    task: task.name.clone(),
                    reason,
                })
            }
            None => {}
        }
        match self.lower_task(task, opts) {
            Ok(mut kernel) => {
                if kernel.tunable.is_none() {
                    self.memo.remember(
                        key,
                        Lowered::Kernel {
                            function: Arc::new(kernel.function.clone()),
                            origin: kernel.origin,
                        },
                    );
                    kernel.memo_key = Some(key);
                }
                Ok(kernel)
            }
            Err(BackendError::Refused { task, reason }) => {
                self.memo.remember(key, Lowered::Refused(reason.clone()));
                Err(BackendError::Refused { task, reason })
            }
            Err(e) => Err(e),
        }
    }

    fn build(
        &self,
        kernels: Vec<CpuKernel>,
        opts: &CompileOptions,
    ) -> Result<(CpuGraphModule, ModuleReport), BackendError> {
        let start = Instant::now();
        let kernels = tuning::tune_kernels(self, kernels)?;
        let jobs = self
            .options
            .compile_jobs
            .unwrap_or_else(|| self.options.build.target().cores)
            .max(1);
        let kernels = if self.options.build.dump_ir {
            kernels
        } else {
            self.choose_sizes(kernels, jobs)
        };
        let sizes: Vec<Vec<i64>> = kernels.iter().map(|k| k.sizes.clone()).collect();
        let origins: Vec<KernelOrigin> = kernels.iter().map(|k| k.origin).collect();
        let tunables = kernels.iter().map(|k| k.tunable.clone()).collect();
        let names: Vec<String> = kernels.iter().map(|k| k.function.name.clone()).collect();
        let mut build_opts = self.options.build.clone();
        if let Some(dir) = &opts.emit_source_dir {
            build_opts.keep_source_dir = Some(dir.clone());
        }
        let units = distinct_units(kernels, jobs, &build_opts, &self.memo)
            .map_err(|e| BackendError::Build(e.to_string()))?;
        let built = build_in_parallel(&units, jobs, &build_opts, opts);
        let built: Vec<CompiledModule> = built
            .into_iter()
            .collect::<Result<_, _>>()
            .map_err(|e| BackendError::Build(e.to_string()))?;
        let mut index = vec![(0, 0); names.len()];
        for (u, unit) in units.iter().enumerate() {
            for &k in &unit.kernels {
                index[k] = (u, 0);
            }
        }
        let bound = sizes
            .iter()
            .zip(&index)
            .enumerate()
            .map(|(k, (values, &(u, h)))| {
                if values.is_empty() {
                    return Ok(None);
                }
                BoundSizes::of(built[u].kernels()[h].signature(), values)
                    .map(Some)
                    .map_err(|e| BackendError::Build(format!("kernel `{}`: {e}", names[k])))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut report = ModuleReport {
            kernels: names.len(),
            build_time: start.elapsed(),
            ..Default::default()
        };
        for (unit, module) in units.iter().zip(&built) {
            match module.cache_outcome() {
                Some(crate::cache::CacheOutcome::Hit) => report.cached += 1,
                _ => report.compiled += 1,
            }
            if module.source_path().is_some() {
                for &k in &unit.kernels {
                    report.sources.push((names[k].clone(), unit.source.clone()));
                }
            }
        }
        let threads = self.threads(opts);
        for module in &built {
            // A library without parallel loops may lack the setter; its kernels are serial.
            let _ = module.set_num_threads(threads);
        }
        Ok((
            CpuGraphModule {
                units: built,
                index,
                origins,
                tunables,
                bound,
            },
            report,
        ))
    }

    fn check_args(
        &self,
        module: &CpuGraphModule,
        kernel: usize,
        args: &[ArgAddress],
    ) -> Result<(), BackendError> {
        let (_, handle) = module.handle(kernel)?;
        let fail = |message: String| BackendError::Launch { kernel, message };
        handle.check_runs_here().map_err(|e| fail(e.to_string()))?;
        let bound = module.bound.get(kernel).and_then(Option::as_ref);
        let params = &handle.signature().params;
        let tensors = params
            .len()
            .saturating_sub(bound.map_or(0, |b| b.values.len()));
        if tensors != args.len() {
            return Err(fail(format!(
                "{} arguments for {tensors} buffer parameters",
                args.len(),
            )));
        }
        for (i, (p, a)) in params.iter().zip(args).enumerate() {
            let ParamKind::Tensor {
                dtype,
                size,
                written,
                ..
            } = &p.kind
            else {
                return Err(fail(format!("parameter `{}` is not a tensor", p.name())));
            };
            let elements = match bound {
                Some(b) => b.elements.get(i).copied(),
                None => size.as_int().and_then(|n| usize::try_from(n).ok()),
            }
            .ok_or_else(|| fail(format!("parameter `{}` has a non-constant size", p.name())))?;
            if a.bytes < elements * dtype.bytes() {
                return Err(fail(format!(
                    "parameter `{}` needs {} bytes, given {}",
                    p.name(),
                    elements * dtype.bytes(),
                    a.bytes
                )));
            }
            if *written && !a.written {
                return Err(fail(format!(
                    "parameter `{}` is written by the kernel",
                    p.name()
                )));
            }
        }
        Ok(())
    }

    unsafe fn launch(
        &self,
        module: &CpuGraphModule,
        kernel: usize,
        args: &[u64],
    ) -> Result<(), BackendError> {
        let (_, handle) = module.handle(kernel)?;
        let slots: &[crate::arg::ScalarSlot] = module
            .bound
            .get(kernel)
            .and_then(Option::as_ref)
            .map_or(&[], |b| &b.slots);
        let count = args.len() + slots.len();
        const INLINE: usize = 32;
        let mut inline = [std::ptr::null_mut::<c_void>(); INLINE];
        let heap: Vec<*mut c_void>;
        // Size values are passed by the address of their slot; the kernel only reads them.
        let size_pointers = slots.iter().map(|slot| slot.0.as_ptr() as *mut c_void);
        let all = args
            .iter()
            .map(|a| *a as usize as *mut c_void)
            .chain(size_pointers);
        let pointers: &[*mut c_void] = if count <= INLINE {
            for (slot, p) in inline.iter_mut().zip(all) {
                *slot = p;
            }
            &inline[..count]
        } else {
            heap = all.collect();
            &heap
        };
        // SAFETY: the caller guarantees (see `Backend::launch`) that `args` passed
        // `check_args` for this kernel — the kernel runs on this CPU, count, sizes under the
        // kernel's size values, writability — and point into live arenas with no overlap
        // and exclusive access to written buffers; the size values follow as pointers to
        // slots of their parameters' exact types (`BoundSizes`), held by the module through
        // the call and only read by the kernel.
        unsafe { handle.call_packed(pointers) };
        Ok(())
    }

    /// Forgets the packed weights kept for later compilations (they keep the model's
    /// original weights alive; the compiled graphs hold the packed ones they read).
    fn forget_compilation_memos(&self) {
        self.derived.clear();
    }

    /// Weights stored as right-operand panels (`MatMul(x, W)`): rebuilt from their panels.
    fn defer_rebuildable_initializers(
        &self,
        source: &hidet_graph::Graph,
    ) -> Vec<(hidet_graph::graph::ValueId, Tensor)> {
        use crate::graph_ops::column_panels::{from_panels, PANEL_WIDTH};
        use crate::graph_passes::panels_label;
        let (as_stored, transposed) = (
            panels_label(PANEL_WIDTH, false),
            panels_label(PANEL_WIDTH, true),
        );
        source
            .initializers()
            .filter_map(|(id, w)| {
                let columns = *w.shape().last()?;
                let rebuild = move |panels: &Tensor| {
                    from_panels(panels, columns)
                        .expect("the panels were derived from a weight of this shape")
                };
                if let Some(deferred) = self.derived.defer_source(&as_stored, w, rebuild) {
                    return Some((id, deferred));
                }
                // Panels of `wᵀ` (`[K, N]` of a weight stored `[N, K]`): rebuilt, then
                // transposed back.
                let [n, k] = *w.shape() else {
                    return None;
                };
                let rebuild_transposed = move |panels: &Tensor| {
                    let w_t = from_panels(panels, n)
                        .expect("the panels were derived from the transpose of this weight");
                    (0..n * k).map(|i| w_t[(i % k) * n + i / k]).collect()
                };
                let deferred = self
                    .derived
                    .defer_source(&transposed, w, rebuild_transposed)?;
                Some((id, deferred))
            })
            .collect()
    }

    fn alloc(&self, bytes: usize) -> Result<CpuArena, BackendError> {
        CpuArena::new(bytes)
    }

    fn base(&self, arena: &CpuArena) -> u64 {
        arena.base()
    }

    fn host_address(&self, tensor: &Tensor) -> Option<u64> {
        arena::element_bytes(tensor)
            .ok()
            .map(|start| start as usize as u64)
    }

    /// Storage for one output: large ones (at least [`output_pool::MIN_BYTES`]) from this
    /// backend's [`OutputPool`], returned to it when the caller drops the tensor.
    fn output_in_place(&self, dtype: DType, shape: &[usize]) -> Option<Box<dyn OutputSlot>> {
        fn fresh<T: Element>(
            pool: &Arc<OutputPool>,
            shape: &[usize],
        ) -> Option<Box<dyn OutputSlot>> {
            let len = hidet_graph::tensor::checked_numel(shape)?;
            let bytes = len.checked_mul(std::mem::size_of::<T>())?;
            let storage = if bytes >= output_pool::MIN_BYTES {
                OutputStorage::Pooled(Pooled::new(pool.take(bytes)?, Arc::downgrade(pool)))
            } else {
                let mut data: Vec<T> = Vec::new();
                data.try_reserve_exact(len).ok()?;
                OutputStorage::Owned(data)
            };
            Some(Box::new(HostOutput {
                storage,
                len,
                shape: shape.to_vec(),
            }))
        }
        let pool = &self.outputs;
        match dtype {
            DType::F32 => fresh::<f32>(pool, shape),
            DType::F64 => fresh::<f64>(pool, shape),
            DType::F16 => fresh::<hidet_graph::half::f16>(pool, shape),
            DType::BF16 => fresh::<hidet_graph::half::bf16>(pool, shape),
            DType::I8 => fresh::<i8>(pool, shape),
            DType::I16 => fresh::<i16>(pool, shape),
            DType::I32 => fresh::<i32>(pool, shape),
            DType::I64 => fresh::<i64>(pool, shape),
            DType::U8 => fresh::<u8>(pool, shape),
            DType::U16 => fresh::<u16>(pool, shape),
            DType::U32 => fresh::<u32>(pool, shape),
            DType::U64 => fresh::<u64>(pool, shape),
            DType::Bool => fresh::<bool>(pool, shape),
            _ => None,
        }
    }

    fn upload(
        &self,
        arena: &mut CpuArena,
        offset: usize,
        tensor: &Tensor,
    ) -> Result<(), BackendError> {
        arena.write(offset, tensor)
    }

    fn download(
        &self,
        arena: &CpuArena,
        offset: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Tensor, BackendError> {
        arena.read(offset, dtype, shape)
    }

    /// The kernels' libraries, signatures and the target's features ([`saved`]).
    fn save_module(
        &self,
        module: &CpuGraphModule,
        blobs: &mut hidet_graph::compiled::ArtifactWriter,
    ) -> Result<serde_json::Value, BackendError> {
        saved::save(self, module, blobs)
    }

    /// Loads saved libraries without a compiler; refuses a module whose target features
    /// this CPU lacks ([`saved`]).
    fn load_module(
        &self,
        manifest: &serde_json::Value,
        blobs: &hidet_graph::compiled::ArtifactReader,
    ) -> Result<CpuGraphModule, BackendError> {
        let threads = self
            .options
            .loaded_threads
            .unwrap_or_else(|| self.options.build.target().cores)
            .max(1);
        saved::load(manifest, blobs, threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_item_becomes_an_error_and_the_others_run() {
        let items: Vec<u32> = (0..6).collect();
        let results = parallel_map(&items, 2, None, |&i| {
            if i == 3 {
                panic!("item {i} is broken");
            }
            Ok(i * 10)
        });
        for (i, result) in results.into_iter().enumerate() {
            match result {
                Ok(v) => assert_eq!(v, i as u32 * 10),
                Err(e) => {
                    assert_eq!(i, 3);
                    assert!(e.to_string().contains("item 3 is broken"), "{e}");
                }
            }
        }
    }

    #[test]
    fn items_left_out_of_the_order_are_errors() {
        let items = [1, 2, 3];
        let results = parallel_map(&items, 2, Some(&[2, 0]), |&i| Ok(i));
        assert_eq!(results[0].as_ref().ok(), Some(&1));
        assert!(results[1].is_err());
        assert_eq!(results[2].as_ref().ok(), Some(&3));
    }
}
