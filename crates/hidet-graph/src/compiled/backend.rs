//! The one trait through which the graph layer talks to a backend (DESIGN §3): lower fused
//! tasks to kernels, build them into one module, allocate memory arenas, move tensors in and
//! out of them, and launch a kernel on addresses inside them.
//!
//! Addresses are plain integers (`u64`): host pointers for the CPU, device pointers for CUDA.
//! The executor computes every kernel argument's address once per arena and launches with
//! those, so a run makes no allocation on the compiled path.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::artifact::{ArtifactReader, ArtifactWriter};
use crate::dtype::DType;
use crate::fusion::FusedTask;
use crate::tensor::Tensor;

/// Host storage for one graph output that a run's kernels write in place (see
/// [`Backend::output_in_place`]). Dropping an unfinished slot frees it without reading it.
pub trait OutputSlot: Send {
    /// The kernel-visible address of the first element.
    fn address(&self) -> u64;

    /// The tensor, once written.
    ///
    /// # Safety
    /// Every element must have been written through [`OutputSlot::address`] since the slot
    /// was made (until then its storage may be uninitialized).
    unsafe fn finish(self: Box<Self>) -> Tensor;
}

/// Errors of a backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend will not fuse this task as one kernel (e.g. a template cannot follow a
    /// fused tensor); the graph layer splits the task and asks again. Never an error to the
    /// user unless a single-operator task is refused.
    #[error("task `{task}` refused: {reason}")]
    Refused { task: String, reason: String },
    /// Lowering, code generation or compilation failed.
    #[error("task `{task}`: {message}")]
    Compile { task: String, message: String },
    /// Building the module failed.
    #[error("building the module failed: {0}")]
    Build(String),
    /// Memory could not be allocated or accessed.
    #[error("memory: {0}")]
    Memory(String),
    /// A kernel launch failed or was given unusable arguments.
    #[error("launch of kernel #{kernel}: {message}")]
    Launch { kernel: usize, message: String },
    /// A module could not be saved, or a saved one cannot be loaded or run here.
    #[error("{0}")]
    Artifact(String),
}

/// One step of a compilation, reported to [`CompileOptions::progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileProgress {
    /// `done` of `total` kernels are lowered (`total` grows when a refused group is split).
    Lowered { done: usize, total: usize },
    /// Lowering is over; building `kernels` kernels starts.
    Building { kernels: usize },
    /// `kernels` more kernels are built (one compiler invocation finished or hit the cache).
    Built { kernels: usize },
}

/// Receives [`CompileProgress`] events; backends may call it from several threads at once.
#[derive(Clone)]
pub struct ProgressSink(pub Arc<dyn Fn(CompileProgress) + Send + Sync>);

impl ProgressSink {
    /// A sink calling `f` for every event.
    pub fn new(f: impl Fn(CompileProgress) + Send + Sync + 'static) -> ProgressSink {
        ProgressSink(Arc::new(f))
    }

    /// Reports `event`.
    pub fn report(&self, event: CompileProgress) {
        (self.0)(event)
    }
}

impl fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProgressSink")
    }
}

/// Options of a compilation, shared by every backend.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// Worker threads a kernel is scheduled for; `None` = all cores.
    pub threads: Option<usize>,
    /// When set, every generated kernel's source is written under this folder.
    pub emit_source_dir: Option<std::path::PathBuf>,
    /// One kernel per operator (the unfused baseline, for tests and comparisons).
    pub no_fusion: bool,
    /// Where lowering and building report their progress (a progress bar), if anywhere.
    pub progress: Option<ProgressSink>,
    /// How many sets of input shapes a [`super::CompiledModel`] keeps compiled graphs for
    /// (at least 1); `None` = [`super::MAX_SHAPE_SIGNATURES`].
    pub kept_shapes: Option<usize>,
}

/// One tensor argument of a kernel launch: an address inside an arena with what lies there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgAddress {
    pub address: u64,
    /// Bytes available at `address`.
    pub bytes: usize,
    /// Whether the kernel writes through it.
    pub written: bool,
}

/// What a built module reports about itself.
#[derive(Debug, Clone, Default)]
pub struct ModuleReport {
    /// Kernels in the module.
    pub kernels: usize,
    /// Compiler invocations that ran (cache misses).
    pub compiled: usize,
    /// Compiler invocations avoided by the cache.
    pub cached: usize,
    /// Wall time of the build.
    pub build_time: Duration,
    /// `(kernel name, source text)` of every kernel, when the backend keeps sources.
    pub sources: Vec<(String, String)>,
}

/// A compute backend (see the module docs).
///
/// Contract: a kernel built from task `t` takes one argument per `t.def.inputs` then one per
/// `t.def.outputs`, each a dense row-major buffer of the tensor's dtype and shape; it reads
/// only its inputs and writes every element of its outputs. Arguments never alias.
pub trait Backend: Send + Sync + fmt::Debug {
    /// A lowered, not yet built kernel.
    type Kernel: Send;
    /// A built module of kernels.
    type Module: Send + Sync;
    /// A block of memory kernels can address.
    type Arena: Send;

    /// A short name for reports (`"cpu"`, `"cuda"`).
    fn name(&self) -> &'static str;

    /// The graph passes to run on a graph bound to concrete input shapes, before fusion
    /// ([`crate::compiled::CompiledModel`] runs them on every graph it compiles). The default
    /// is [`crate::passes::default_passes`].
    fn graph_passes(&self) -> Vec<Box<dyn crate::passes::GraphPass>> {
        crate::passes::default_passes()
    }

    /// Lowers one task. [`BackendError::Refused`] asks the graph layer to split the task.
    fn lower(&self, task: &FusedTask, opts: &CompileOptions) -> Result<Self::Kernel, BackendError>;

    /// Builds every kernel into one module; kernel `i` of the module is `kernels[i]`.
    fn build(
        &self,
        kernels: Vec<Self::Kernel>,
        opts: &CompileOptions,
    ) -> Result<(Self::Module, ModuleReport), BackendError>;

    /// Checks that kernel `kernel` accepts `args` (count, sizes, writability). Called once
    /// per arena before any launch with these addresses.
    fn check_args(
        &self,
        module: &Self::Module,
        kernel: usize,
        args: &[ArgAddress],
    ) -> Result<(), BackendError>;

    /// Launches kernel `kernel` on `args` and waits for it (between [`Backend::begin_run`]
    /// and [`Backend::end_run`], its work may instead finish by `end_run`).
    ///
    /// # Safety
    /// `args` must have passed [`Backend::check_args`] for this kernel; every address must
    /// point into a live arena of this backend with `bytes` bytes available; buffers written
    /// must not be accessed by anything else during the call, and no two arguments overlap.
    unsafe fn launch(
        &self,
        module: &Self::Module,
        kernel: usize,
        args: &[u64],
    ) -> Result<(), BackendError>;

    /// Called by the compiled graph before the steps of a run whose steps are all kernels
    /// (never for a profiled run, whose launches are timed one by one). Until the matching
    /// [`Backend::end_run`] on the same thread, the graph layer calls only
    /// [`Backend::launch`] for that run, and `launch` may defer its work (enqueue it, record
    /// it) instead of waiting for it; other threads' runs may interleave. The default does
    /// nothing (launches stay synchronous).
    fn begin_run(&self, module: &Self::Module) -> Result<(), BackendError> {
        let _ = module;
        Ok(())
    }

    /// Ends the run begun by [`Backend::begin_run`] on this thread: with `completed`, every
    /// launch since then has run and finished when this returns `Ok`; without (a step failed),
    /// deferred work may be discarded. Called exactly once per `begin_run`, also on failure.
    fn end_run(&self, module: &Self::Module, completed: bool) -> Result<(), BackendError> {
        let _ = (module, completed);
        Ok(())
    }

    /// Called when no graph will be compiled with this backend any more
    /// ([`crate::compiled::CompiledModel::into_fixed`]): drops what it remembers only for
    /// later compilations (constants derived from the model's weights, which keep those
    /// weights alive). The default remembers nothing.
    fn forget_compilation_memos(&self) {}

    /// Called after a model with symbolic inputs compiled a set of shapes: the initializers
    /// of its source graph (`source`) that this backend can rebuild from what it derived from
    /// them (a weight from its packed panels), each as `(value, tensor)` with a tensor of the
    /// same elements computed only when read ([`Tensor::deferred`]). The model puts them in
    /// its source graph, so the originals are freed unless something else holds them; a
    /// later compilation that finds the derivation remembered reads none of them. The
    /// default rebuilds nothing.
    fn defer_rebuildable_initializers(
        &self,
        source: &crate::graph::Graph,
    ) -> Vec<(crate::graph::ValueId, Tensor)> {
        let _ = source;
        Vec::new()
    }

    /// A zero-filled arena of `bytes` bytes, aligned for any element type (64 bytes).
    fn alloc(&self, bytes: usize) -> Result<Self::Arena, BackendError>;

    /// The address of the arena's first byte.
    fn base(&self, arena: &Self::Arena) -> u64;

    /// The kernel-visible address of `tensor`'s elements, when kernels can read the caller's
    /// memory where it is: the compiled graph then passes a graph input to kernels without
    /// copying it into the arena. `Some` promises that kernels may read the tensor's
    /// `size_in_bytes()` bytes at the address for as long as the tensor is borrowed and
    /// unchanged. The default, `None`, always copies.
    fn host_address(&self, tensor: &Tensor) -> Option<u64> {
        let _ = tensor;
        None
    }

    /// Fresh host storage for a tensor of `dtype` and `shape` that kernels may write where
    /// it is: the compiled graph then has kernels write a graph output there instead of
    /// into the arena, and returns it without a copy. `Some` promises that kernels may read
    /// and write the tensor's bytes at [`OutputSlot::address`] until the slot is finished
    /// or dropped. The storage need not be initialized (no zeroing per run). The default,
    /// `None`, always copies.
    fn output_in_place(&self, dtype: DType, shape: &[usize]) -> Option<Box<dyn OutputSlot>> {
        let _ = (dtype, shape);
        None
    }

    /// Copies `tensor`'s elements to `offset` in `arena`.
    fn upload(
        &self,
        arena: &mut Self::Arena,
        offset: usize,
        tensor: &Tensor,
    ) -> Result<(), BackendError>;

    /// Reads a tensor of `dtype` and `shape` at `offset` in `arena`.
    fn download(
        &self,
        arena: &Self::Arena,
        offset: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Tensor, BackendError>;

    /// What [`Backend::load_module`] needs to load `module` again without compiling
    /// anything: a manifest, with the bytes it refers to (machine code, the target it was
    /// built for) added to `blobs`. The default refuses: the backend cannot save modules.
    fn save_module(
        &self,
        module: &Self::Module,
        blobs: &mut ArtifactWriter,
    ) -> Result<serde_json::Value, BackendError> {
        let _ = (module, blobs);
        Err(BackendError::Artifact(format!(
            "the {} backend cannot save compiled models",
            self.name()
        )))
    }

    /// Loads a module that [`Backend::save_module`] wrote, with the same kernels in the same
    /// order, never invoking a compiler. Refuses a module this machine cannot run (naming
    /// what it lacks) and a manifest it does not understand.
    fn load_module(
        &self,
        manifest: &serde_json::Value,
        blobs: &ArtifactReader,
    ) -> Result<Self::Module, BackendError> {
        let _ = (manifest, blobs);
        Err(BackendError::Artifact(format!(
            "the {} backend cannot load compiled models",
            self.name()
        )))
    }
}
