//! The CPU implementation of the graph layer's [`Backend`]: every fused task becomes one C
//! kernel, and all kernels of a model go into one IR module, compiled as a few translation
//! units in parallel through the content-addressed cache.
//!
//! How a task becomes a kernel:
//! - an anchored task whose anchor is a 2-D f32 matmul uses the matmul template, with its
//!   prologues and epilogue fused by [`hidet_ir::fusion::fuse`]; when `fuse` refuses, the
//!   task is refused ([`BackendError::Refused`]) and the graph layer splits it into separate
//!   kernels — never a wrong result;
//! - every other task goes through the rule-based scheduler ([`crate::schedule::schedule`]);
//!   a fused task it does not cover is refused (and split), a single operator it does not
//!   cover gets the inlining fallback ([`naive::schedule_naive`]), which handles any
//!   definition by recomputing reductions where they are read.

pub mod anchor;
pub mod arena;
pub mod naive;
pub mod tuning;

use std::ffi::c_void;
use std::time::Instant;

use hidet_graph::compiled::{
    ArgAddress, Backend, BackendError, CompileOptions, CompileProgress, ModuleReport,
};
use hidet_graph::fusion::FusedTask;
use hidet_graph::{DType, Tensor};
use hidet_ir::function::{Function, IRModule, Target};

use crate::module::CompiledModule;
use crate::options::BuildOptions;
use crate::signature::ParamKind;
use anchor::{matmul_kernel, TemplateOutcome};
pub use arena::CpuArena;

/// Options of the CPU graph backend.
#[derive(Debug, Clone)]
pub struct CpuBackendOptions {
    /// How modules are compiled (cache, target, kept sources).
    pub build: BuildOptions,
    /// Use the matmul template for 2-D f32 matmul anchors (else the scheduler).
    pub matmul_template: bool,
    /// Translation units compiled concurrently; `None` = one per core.
    pub compile_jobs: Option<usize>,
}

impl Default for CpuBackendOptions {
    fn default() -> Self {
        CpuBackendOptions {
            build: BuildOptions::default(),
            matmul_template: true,
            compile_jobs: None,
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
}

/// The built kernels of a model.
#[derive(Debug)]
pub struct CpuGraphModule {
    units: Vec<CompiledModule>,
    /// `(unit, handle index)` of kernel `i`.
    index: Vec<(usize, usize)>,
    origins: Vec<KernelOrigin>,
    threads: Option<usize>,
}

impl CpuGraphModule {
    /// How each kernel was produced, in kernel order.
    pub fn origins(&self) -> &[KernelOrigin] {
        &self.origins
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
}

impl CpuBackend {
    pub fn new(options: CpuBackendOptions) -> CpuBackend {
        CpuBackend {
            options,
            tuning: tuning::CpuTuning::default(),
        }
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
}

impl Backend for CpuBackend {
    type Kernel = CpuKernel;
    type Module = CpuGraphModule;
    type Arena = CpuArena;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn lower(&self, task: &FusedTask, opts: &CompileOptions) -> Result<CpuKernel, BackendError> {
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
        match crate::schedule::schedule(&task.def, &task.name, self.options.build.target(), threads)
        {
            Ok(function) => Ok(CpuKernel {
                function,
                origin: KernelOrigin::Scheduler,
                tunable: None,
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
                })
            }
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
            .clamp(1, kernels.len().max(1));
        let origins: Vec<KernelOrigin> = kernels.iter().map(|k| k.origin).collect();
        let names: Vec<String> = kernels.iter().map(|k| k.function.name.clone()).collect();
        let chunk = kernels.len().div_ceil(jobs).max(1);
        let mut modules: Vec<IRModule> = Vec::new();
        let mut functions = kernels.into_iter().map(|k| k.function).peekable();
        while functions.peek().is_some() {
            let mut m = IRModule::new(format!("graph_unit{}", modules.len()), Target::Cpu);
            m.functions.extend(functions.by_ref().take(chunk));
            modules.push(m);
        }
        let mut build_opts = self.options.build.clone();
        if let Some(dir) = &opts.emit_source_dir {
            build_opts.keep_source_dir = Some(dir.clone());
        }
        let results: Vec<Result<CompiledModule, crate::error::CpuError>> =
            std::thread::scope(|s| {
                let handles: Vec<_> = modules
                    .into_iter()
                    .map(|m| {
                        let o = &build_opts;
                        let progress = opts.progress.as_ref();
                        s.spawn(move || {
                            let count = m.functions.len();
                            let built = crate::build(m, o);
                            if let (Ok(_), Some(p)) = (&built, progress) {
                                p.report(CompileProgress::Built { kernels: count });
                            }
                            built
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(crate::error::CpuError::Unsupported(
                                "a compile job panicked".into(),
                            ))
                        })
                    })
                    .collect()
            });
        let units: Vec<CompiledModule> = results
            .into_iter()
            .collect::<Result<_, _>>()
            .map_err(|e| BackendError::Build(e.to_string()))?;
        let mut index = Vec::with_capacity(names.len());
        for name in &names {
            let found = units.iter().enumerate().find_map(|(u, m)| {
                m.kernels()
                    .iter()
                    .position(|k| k.name() == name)
                    .map(|h| (u, h))
            });
            index.push(
                found.ok_or_else(|| BackendError::Build(format!("kernel `{name}` is missing")))?,
            );
        }
        let mut report = ModuleReport {
            kernels: names.len(),
            build_time: start.elapsed(),
            ..Default::default()
        };
        for u in &units {
            match u.cache_outcome() {
                Some(crate::cache::CacheOutcome::Hit) => report.cached += 1,
                _ => report.compiled += 1,
            }
            if let Some(text) = u
                .source_path()
                .and_then(|p| std::fs::read_to_string(p).ok())
            {
                report.sources.push((u.name().to_string(), text));
            }
        }
        Ok((
            CpuGraphModule {
                units,
                index,
                origins,
                threads: opts.threads,
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
        let params = &handle.signature().params;
        let fail = |message: String| BackendError::Launch { kernel, message };
        if params.len() != args.len() {
            return Err(fail(format!(
                "{} arguments for {} parameters",
                args.len(),
                params.len()
            )));
        }
        for (p, a) in params.iter().zip(args) {
            let ParamKind::Tensor {
                dtype,
                size,
                written,
                ..
            } = &p.kind
            else {
                return Err(fail(format!("parameter `{}` is not a tensor", p.name())));
            };
            let elements = size
                .as_int()
                .and_then(|n| usize::try_from(n).ok())
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
        let (unit, handle) = module.handle(kernel)?;
        if let Some(n) = module.threads {
            // The library exports the setter whenever it was compiled with OpenMP; without
            // it kernels are serial anyway.
            let _ = unit.set_num_threads(n);
        }
        const INLINE: usize = 32;
        let mut inline = [std::ptr::null_mut::<c_void>(); INLINE];
        let heap: Vec<*mut c_void>;
        let pointers: &[*mut c_void] = if args.len() <= INLINE {
            for (slot, a) in inline.iter_mut().zip(args) {
                *slot = *a as usize as *mut c_void;
            }
            &inline[..args.len()]
        } else {
            heap = args.iter().map(|a| *a as usize as *mut c_void).collect();
            &heap
        };
        // SAFETY: the caller guarantees (see `Backend::launch`) that `args` passed
        // `check_args` for this kernel — count, sizes, writability, no scalars — and point
        // into live arenas with no overlap and exclusive access to written buffers.
        unsafe { handle.call_packed(pointers) };
        Ok(())
    }

    fn alloc(&self, bytes: usize) -> Result<CpuArena, BackendError> {
        CpuArena::new(bytes)
    }

    fn base(&self, arena: &CpuArena) -> u64 {
        arena.base()
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
}
