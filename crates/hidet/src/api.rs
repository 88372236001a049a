//! The embedding API: load a model, compile it, run it.
//!
//! ```no_run
//! use hidet::{Model, Options, Tensor};
//!
//! # fn main() -> Result<(), hidet::Error> {
//! let model = Model::load("model.onnx")?;
//! let compiled = model.compile(&Options::default().threads(2))?;
//! let x = Tensor::new(vec![1, 3, 224, 224], vec![0f32; 3 * 224 * 224])?;
//! let outputs = compiled.run(&[("input", x)])?;
//! for (name, tensor) in &outputs {
//!     println!("{name}: {:?} {}", tensor.shape(), tensor.dtype());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! - [`Model`] is a model as imported (an `.onnx` file or its bytes, a zoo model, or a
//!   [`Graph`] built with the graph API); nothing is compiled yet, and [`Model::inputs`] /
//!   [`Model::outputs`] describe it, symbolic dimensions included.
//! - [`Model::compile`] turns it into a [`CompiledModel`] for the CPU with [`Options`]
//!   (threads, tuning level). A model whose inputs all have fixed shapes is compiled at once;
//!   one with symbolic dimensions is compiled on its first run with each distinct set of
//!   input shapes (or ahead of time with [`CompiledModel::prepare`]), and every set keeps its
//!   compiled kernels for the later runs. Kernels are also cached on disk
//!   (`HIDET_CACHE_DIR`), so compiling a model again is quick.
//! - [`CompiledModel::run`] (inputs by name) and [`CompiledModel::run_positional`] (in the
//!   model's input order) return every output as `(name, Tensor)`, in output order.
//!
//! A [`CompiledModel`] is `Send + Sync` and cheap to clone (clones share the compiled
//! kernels): any number of threads may run it at once, each run in its own memory.
//!
//! # Memory
//! A [`Tensor`] owns its elements behind an `Arc`: [`Tensor::new`] takes the caller's `Vec`
//! without copying it, and cloning a tensor shares it. The compiled kernels read a graph
//! input where its tensor keeps it (no copy into the model's working memory) unless the
//! input is also a graph output or is read by a step that runs on the host, and write each
//! graph output that is a buffer of its own straight into the tensor that is returned (no
//! copy out). [`CompiledModel::report`] tells how many inputs and outputs of a compiled shape
//! do so (`inputs_in_place`, `outputs_in_place`). Memory the caller does not own as a `Vec`
//! (a numpy array, a torch tensor) is wrapped without a copy by the unsafe
//! [`Tensor::from_external`], which keeps an owner handle alive as long as the tensor (the
//! Python package does this for every C-contiguous array).
//!
//! Weights are read by the CPU kernels where the model holds them, never copied; the ones
//! the compiler repacks (matrix panels, 4-bit blocks) exist twice while the [`Model`] they
//! came from is alive. A CPU model whose inputs all have fixed shapes is compiled once and
//! keeps no source graph, so dropping its [`Model`] frees the weights it repacked.
//!
//! # Saved models
//! [`CompiledModel::save`] writes a compiled model to one file and [`CompiledModel::load`]
//! runs it without compiling anything (no C compiler needed on that machine).
//!
//! # Errors
//! Every failure is an [`Error`] whose message is the one the `hidet` command-line tool
//! prints after `error: ` for the same failure.

use std::path::Path;
use std::sync::Arc;

use hidet_cpu::graph_backend::tuning::CpuTuning;
use hidet_cuda::graph_backend::CudaBackendOptions;
use hidet_cuda::tuning::CudaTuning;
use hidet_graph::compiled::{CompileOptions, CompileReport};
use hidet_graph::{Datum, Graph, ValueKind};
use hidet_onnx::OnnxModel;

pub use hidet_graph::{DType, Dim, Tensor, TensorError};
pub use hidet_tune::TuneLevel;

use crate::pipeline::{self, CpuModel, GpuModel, LoadedCpuModel, PipelineError, SimModel};
use crate::zoo;

/// Errors of the embedding API. Each message is the one `hidet` prints for the same failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model could not be read or imported (I/O, a malformed or truncated file, an
    /// unsupported operator), or compiling or running it failed (bad inputs, a kernel that
    /// failed to build).
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// No zoo model of that name, or it could not be built.
    #[error(transparent)]
    Zoo(#[from] zoo::ZooError),
    /// A tensor could not be made (its data does not fill its shape).
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// An option is out of range (threads of 0).
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// [`CompiledModel::run_positional`] was given another number of inputs than the model
    /// takes.
    #[error("the model takes {expected} inputs ({names}), given {given}")]
    InputCount {
        expected: usize,
        given: usize,
        names: String,
    },
}

impl From<hidet_onnx::OnnxError> for Error {
    fn from(e: hidet_onnx::OnnxError) -> Error {
        Error::Pipeline(e.into())
    }
}

impl From<hidet_graph::compiled::CompiledError> for Error {
    fn from(e: hidet_graph::compiled::CompiledError) -> Error {
        Error::Pipeline(e.into())
    }
}

pub use crate::pipeline::Device;

/// How [`Model::compile`] compiles. Build with [`Options::default`] and the setters, or as
/// a struct literal with `..Options::default()`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the kernels run.
    pub device: Device,
    /// Threads the kernels are scheduled for and run on; `None` = every core. Must be at
    /// least 1. The count belongs to each kernel library: a library shared with another
    /// model of this process (same kernel, same schedule) runs with the count set last.
    pub threads: Option<usize>,
    /// Level 0 ([`TuneLevel::Heuristic`], the default) measures nothing: every matmul task
    /// (on `cuda`, every SIMT matmul and convolution task) uses the schedule recorded by an
    /// earlier tuning in the tuning cache (`$HIDET_CACHE_DIR/tuning`), else the heuristic.
    /// Levels 1 and 2 measure the tasks the cache does not answer at that level (seconds to
    /// minutes per task; on `cuda`, on the GPU) and record the winners. `cuda-sim` takes
    /// level 0 only (the simulator has no timing).
    pub tuning: TuneLevel,
    /// Ignore recorded tuning winners: level 0 then uses the heuristic, levels 1 and 2
    /// measure again.
    pub retune: bool,
}

impl Default for Options {
    /// The CPU, every core, tuning level 0, recorded tuning winners used.
    fn default() -> Options {
        Options {
            device: Device::Cpu,
            threads: None,
            tuning: TuneLevel::Heuristic,
            retune: false,
        }
    }
}

impl Options {
    /// These options with `threads` threads.
    pub fn threads(mut self, threads: usize) -> Options {
        self.threads = Some(threads);
        self
    }

    /// These options with tuning level `level`.
    pub fn tuning(mut self, level: TuneLevel) -> Options {
        self.tuning = level;
        self
    }

    fn check(&self) -> Result<(), Error> {
        if self.threads == Some(0) {
            return Err(Error::InvalidOption("threads must be at least 1".into()));
        }
        if self.device == Device::CudaSim && self.tuning != TuneLevel::Heuristic {
            return Err(Error::InvalidOption(
                "tuning measures kernels on the CPU or a GPU, and the GPU simulator has no \
                 timing; compile for cuda-sim with tuning level 0"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// A graph input or output: name, kind, dtype and declared shape.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// A tensor, or a sequence or optional of tensors of `dtype`.
    pub kind: ValueKind,
    pub dtype: DType,
    /// Fixed, symbolic ([`Dim::Symbol`], bound by the inputs of each run) or unknown sizes;
    /// `None` when even the rank is unknown.
    pub shape: Option<Vec<Dim>>,
}

fn infos(graph: &Graph, ids: &[hidet_graph::ValueId]) -> Vec<TensorInfo> {
    ids.iter()
        .map(|id| {
            let v = graph.value(*id);
            TensorInfo {
                name: v.name.clone(),
                kind: v.kind,
                dtype: v.ty.dtype,
                shape: v.ty.shape.clone(),
            }
        })
        .collect()
}

/// A model as imported: nothing is compiled (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct Model {
    onnx: OnnxModel,
}

impl Model {
    /// Reads and imports the `.onnx` file at `path`; external data is read from the file's
    /// folder (and only from there). A missing, malformed or truncated file, or one with an
    /// operator hidet lacks, is an error naming the cause.
    ///
    /// ```
    /// let err = hidet::Model::load("/nonexistent/model.onnx").unwrap_err();
    /// assert!(err.to_string().starts_with("cannot read `/nonexistent/model.onnx`"));
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Model, Error> {
        Ok(Model {
            onnx: pipeline::load(path.as_ref())?,
        })
    }

    /// Imports an `.onnx` file's bytes. Such a model has no folder, so weights stored as
    /// external data are refused.
    ///
    /// ```
    /// let err = hidet::Model::from_bytes(b"not a model").unwrap_err();
    /// assert!(err.to_string().starts_with("malformed ONNX protobuf"));
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Model, Error> {
        Ok(Model {
            onnx: pipeline::load_bytes(bytes)?,
        })
    }

    /// The built-in zoo model `name` (`"resnet50"`, `"tiny_mlp"`, …; see [`zoo::entries`]),
    /// with its seeded random weights.
    ///
    /// ```
    /// let model = hidet::Model::zoo("tiny_mlp")?;
    /// assert_eq!(model.inputs()[0].name, "input");
    /// # Ok::<(), hidet::Error>(())
    /// ```
    pub fn zoo(name: &str) -> Result<Model, Error> {
        Ok(Model {
            onnx: pipeline::zoo_model(name)?,
        })
    }

    /// A model of a graph built with the graph API (no graph pass applied yet).
    pub fn from_graph(graph: Graph) -> Model {
        Model {
            onnx: OnnxModel {
                graph,
                ir_version: 8,
                opsets: vec![(String::new(), hidet_graph::LATEST_OPSET)],
                producer: "hidet graph API".into(),
            },
        }
    }

    /// Writes the model as an `.onnx` file at `path` (the graph as imported or built, no
    /// graph pass applied), so other runtimes can run a zoo model; returns the bytes written.
    /// Graphs with subgraphs (If, Loop, Scan) or sequence values, and models above
    /// protobuf's 2 GiB, are refused with an error naming why.
    ///
    /// ```
    /// let path = std::env::temp_dir().join("hidet_doc_tiny_mlp.onnx");
    /// let bytes = hidet::Model::zoo("tiny_mlp")?.save_onnx(&path)?;
    /// let again = hidet::Model::load(&path)?;
    /// assert_eq!(again.inputs()[0].name, "input");
    /// # std::fs::remove_file(&path).ok();
    /// # assert!(bytes > 0);
    /// # Ok::<(), hidet::Error>(())
    /// ```
    pub fn save_onnx(&self, path: impl AsRef<Path>) -> Result<usize, Error> {
        Ok(hidet_onnx::save_model(&self.onnx, path.as_ref())?)
    }

    /// The graph as imported.
    pub fn graph(&self) -> &Graph {
        &self.onnx.graph
    }

    /// The runtime inputs (initializers excluded), in the order
    /// [`CompiledModel::run_positional`] takes them.
    pub fn inputs(&self) -> Vec<TensorInfo> {
        infos(&self.onnx.graph, self.onnx.graph.inputs())
    }

    /// The outputs, in the order runs return them.
    pub fn outputs(&self) -> Vec<TensorInfo> {
        infos(&self.onnx.graph, self.onnx.graph.outputs())
    }

    /// Runs the reference executor on inputs given by name: every operator's own
    /// implementation, node by node, on the graph as imported (no graph pass, no kernel).
    /// It is the oracle compiled runs are checked against; slow, single-threaded. Same
    /// contract as [`CompiledModel::run`].
    pub fn run_reference<N: AsRef<str>>(
        &self,
        inputs: &[(N, Tensor)],
    ) -> Result<Vec<(String, Tensor)>, Error> {
        let named: Vec<(String, Tensor)> = inputs
            .iter()
            .map(|(n, t)| (n.as_ref().to_string(), t.clone()))
            .collect();
        Ok(pipeline::run_reference(&self.onnx, &named)?)
    }

    /// Compiles the model for the CPU (see the [module docs](self)). When every input has a
    /// fixed shape the kernels are built (and tuned, at a tuning level above 0) before this
    /// returns, so compile errors surface here; otherwise on the first run with each set of
    /// shapes, or at [`CompiledModel::prepare`].
    ///
    /// ```
    /// use hidet::{Model, Options, Tensor};
    ///
    /// let compiled = Model::zoo("tiny_mlp")?.compile(&Options::default().threads(1))?;
    /// let x = Tensor::new(vec![3, 37], vec![0.5f32; 3 * 37])?;
    /// let outputs = compiled.run(&[("input", x)])?;
    /// assert_eq!(outputs[0].0, "probs");
    /// assert_eq!(outputs[0].1.shape(), &[3, 11]);
    /// # Ok::<(), hidet::Error>(())
    /// ```
    pub fn compile(&self, options: &Options) -> Result<CompiledModel, Error> {
        options.check()?;
        let opts = CompileOptions {
            threads: options.threads,
            ..CompileOptions::default()
        };
        let inner = match options.device {
            Device::Cpu => {
                let tuning = CpuTuning {
                    level: Some(options.tuning),
                    ignore_cache: options.retune,
                    ..CpuTuning::default()
                };
                let model = pipeline::compile_tuned(&self.onnx, opts, tuning);
                match static_shapes(&self.inputs()) {
                    // Fixed shapes compile once: the source graph, and the weights only it
                    // holds (those repacked for the kernels), are not needed any more.
                    Some(shapes) => {
                        model.compiled(&shapes)?;
                        Compiled::Fixed(model.into_fixed()?)
                    }
                    None => Compiled::Cpu(model),
                }
            }
            Device::CudaSim => Compiled::CudaSim(pipeline::compile_sim(
                &self.onnx,
                opts,
                CudaBackendOptions::default(),
            )),
            Device::Cuda => {
                let tuning = CudaTuning {
                    level: Some(options.tuning),
                    ignore_cache: options.retune,
                    ..CudaTuning::default()
                };
                Compiled::Cuda(pipeline::compile_gpu_tuned(&self.onnx, opts, tuning)?)
            }
        };
        let compiled = CompiledModel {
            inner: Arc::new(inner),
            inputs: self.inputs().into(),
            outputs: self.outputs().into(),
        };
        if let Some(shapes) = compiled.static_shapes() {
            compiled.prepare(&shapes)?;
        }
        return_freed_memory();
        Ok(compiled)
    }
}

/// A model compiled for a device ([`Options::device`]): run it any number of times, from any number of threads
/// (see the [module docs](self)). Clones share the compiled kernels.
#[derive(Debug, Clone)]
pub struct CompiledModel {
    inner: Arc<Compiled>,
    inputs: Arc<[TensorInfo]>,
    outputs: Arc<[TensorInfo]>,
}

/// Hands heap memory the process has freed back to the system, so its resident size is
/// what it still holds: both allocators a process using hidet may run on keep freed blocks
/// for later allocations, glibc's malloc (below its mmap threshold, which rises as large
/// blocks are freed) and mimalloc (the allocator of the `hidet` tool and the Python module,
/// until its purge delay passes). [`Model::compile`] calls it; call it again after dropping
/// the [`Model`] of a compiled model of fixed input shapes, whose repacked weights that
/// frees. glibc's part does nothing where the C library is not glibc.
pub fn return_freed_memory() {
    // SAFETY: `mi_collect` has no preconditions; it frees what mimalloc's heaps hold unused
    // (nothing when mimalloc is not the allocator).
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` has no preconditions; it only releases free heap pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The input shapes when every input is a tensor of fixed shape.
fn static_shapes(inputs: &[TensorInfo]) -> Option<Vec<Vec<usize>>> {
    inputs
        .iter()
        .map(|i| {
            if i.kind != ValueKind::Tensor {
                return None;
            }
            i.shape.as_ref()?.iter().map(Dim::fixed).collect()
        })
        .collect()
}

/// The per-shape compiled model of one device.
#[derive(Debug)]
enum Compiled {
    Cpu(CpuModel),
    CudaSim(SimModel),
    Cuda(GpuModel),
    /// CPU, inputs of fixed shapes: compiled once, without its source graph.
    Fixed(LoadedCpuModel),
    /// Loaded from a saved model: runs the saved shapes only, compiles nothing.
    Saved(LoadedCpuModel),
}

// The API promises that compiled models can be shared across threads: fail the build, not
// a user, if a change to the executor ever breaks that.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledModel>();
    assert_send_sync::<Model>();
};

impl CompiledModel {
    /// The inputs, as [`Model::inputs`].
    pub fn inputs(&self) -> &[TensorInfo] {
        &self.inputs
    }

    /// The outputs, as [`Model::outputs`].
    pub fn outputs(&self) -> &[TensorInfo] {
        &self.outputs
    }

    /// The input shapes when every input is a tensor of fixed shape.
    fn static_shapes(&self) -> Option<Vec<Vec<usize>>> {
        static_shapes(&self.inputs)
    }

    /// Compiles for `shapes` (one per input, in input order) now, so the first run with
    /// those shapes does not compile; nothing happens when they were compiled already. An
    /// error names the input and dimension that contradict the model.
    pub fn prepare(&self, shapes: &[Vec<usize>]) -> Result<(), Error> {
        if shapes.len() != self.inputs.len() {
            return Err(self.count_error(shapes.len()));
        }
        match &*self.inner {
            Compiled::Cpu(m) => m.compiled(shapes).map(drop)?,
            Compiled::CudaSim(m) => m.compiled(shapes).map(drop)?,
            Compiled::Cuda(m) => m.compiled(shapes).map(drop)?,
            Compiled::Fixed(m) | Compiled::Saved(m) => m.compiled(shapes).map(drop)?,
        }
        Ok(())
    }

    /// What compiling for `shapes` produced (kernels, steps on the host, inputs read and
    /// outputs written in place, memory), compiling first if needed.
    pub fn report(&self, shapes: &[Vec<usize>]) -> Result<CompileReport, Error> {
        if shapes.len() != self.inputs.len() {
            return Err(self.count_error(shapes.len()));
        }
        Ok(match &*self.inner {
            Compiled::Cpu(m) => m.compiled(shapes)?.report().clone(),
            Compiled::CudaSim(m) => m.compiled(shapes)?.report().clone(),
            Compiled::Cuda(m) => m.compiled(shapes)?.report().clone(),
            Compiled::Fixed(m) | Compiled::Saved(m) => m.compiled(shapes)?.report().clone(),
        })
    }

    /// Saves the model as compiled so far to one file at `path` (written whole or not at
    /// all): every compiled set of input shapes with its kernels' machine code, memory plan,
    /// weights and the CPU features the kernels need. [`CompiledModel::load`] runs it on
    /// another machine with no C compiler. A model with fixed input shapes is compiled by
    /// [`Model::compile`]; one with symbolic dimensions saves the shapes it was run or
    /// [prepared](CompiledModel::prepare) with. Returns how many sets of shapes were saved.
    ///
    /// Fails for a model compiled for another device than the CPU, one with nothing
    /// compiled yet, or one with a step run on the host that has a subgraph (If, Loop, Scan).
    ///
    /// ```no_run
    /// use hidet::{CompiledModel, Model, Options};
    ///
    /// let compiled = Model::load("model.onnx")?.compile(&Options::default())?;
    /// compiled.save("model.hidet")?;
    /// // Later, elsewhere (no C compiler needed):
    /// let loaded = CompiledModel::load("model.hidet", &Options::default())?;
    /// # Ok::<(), hidet::Error>(())
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<usize, Error> {
        let saved = match &*self.inner {
            Compiled::Cpu(m) => m.save(path.as_ref())?,
            Compiled::Fixed(m) => m.save(path.as_ref())?,
            Compiled::CudaSim(_) | Compiled::Cuda(_) => {
                return Err(Error::InvalidOption(
                    "only models compiled for the CPU can be saved".into(),
                ))
            }
            Compiled::Saved(_) => {
                return Err(Error::InvalidOption(
                    "this model was loaded from a saved file: copy that file instead".into(),
                ))
            }
        };
        Ok(saved)
    }

    /// Loads a model that [`CompiledModel::save`] (or `hidet compile -o`) wrote, without
    /// compiling anything: no C compiler is needed. `options.threads` sets the threads its
    /// kernels run on; the device must be the CPU, and tuning does not apply. Fails with an
    /// error naming the problem for a file that is not a saved model or is truncated or
    /// corrupted, and for kernels that need CPU features this machine lacks (naming them).
    /// The model runs the input shapes it was saved with.
    ///
    /// A saved model holds machine code that loading runs: load only files you trust.
    pub fn load(path: impl AsRef<Path>, options: &Options) -> Result<CompiledModel, Error> {
        options.check()?;
        if options.device != Device::Cpu {
            return Err(Error::InvalidOption(format!(
                "saved models run on the CPU, not {}",
                options.device.name()
            )));
        }
        let loaded = pipeline::load_compiled(path.as_ref(), options.threads)?;
        let info = |d: &hidet_graph::compiled::SavedDecl| TensorInfo {
            name: d.name.clone(),
            kind: d.kind,
            dtype: d.dtype,
            shape: d.dims(),
        };
        Ok(CompiledModel {
            inputs: loaded.inputs().iter().map(info).collect(),
            outputs: loaded.outputs().iter().map(info).collect(),
            inner: Arc::new(Compiled::Saved(loaded)),
        })
    }

    fn count_error(&self, given: usize) -> Error {
        Error::InputCount {
            expected: self.inputs.len(),
            given,
            names: self
                .inputs
                .iter()
                .map(|i| format!("`{}`", i.name))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Runs on inputs given by name (every input exactly once, any order) and returns every
    /// output as `(name, tensor)`, in output order. A missing or unknown input, or one
    /// whose dtype or shape contradicts the model, is an error naming it; a new set of
    /// shapes compiles first (see [`Model::compile`]). The inputs are only read.
    pub fn run<N: AsRef<str>>(
        &self,
        inputs: &[(N, Tensor)],
    ) -> Result<Vec<(String, Tensor)>, Error> {
        let data: Vec<(String, Datum)> = inputs
            .iter()
            .map(|(n, t)| (n.as_ref().to_string(), Datum::Tensor(t.clone())))
            .collect();
        self.run_data(data)
    }

    /// [`CompiledModel::run`] with the inputs in the model's input order
    /// ([`CompiledModel::inputs`]).
    ///
    /// ```
    /// use hidet::{Model, Options, Tensor};
    ///
    /// let compiled = Model::zoo("tiny_mlp")?.compile(&Options::default())?;
    /// let err = compiled.run_positional(&[]).unwrap_err();
    /// assert_eq!(err.to_string(), "the model takes 1 inputs (`input`), given 0");
    /// let bad = Tensor::new(vec![2, 37], vec![0f32; 2 * 37])?;
    /// let err = compiled.run_positional(&[bad]).unwrap_err();
    /// assert!(err.to_string().starts_with("input `input`: expected shape"));
    /// # Ok::<(), hidet::Error>(())
    /// ```
    pub fn run_positional(&self, inputs: &[Tensor]) -> Result<Vec<(String, Tensor)>, Error> {
        if inputs.len() != self.inputs.len() {
            return Err(self.count_error(inputs.len()));
        }
        let data: Vec<(String, Datum)> = self
            .inputs
            .iter()
            .zip(inputs)
            .map(|(info, t)| (info.name.clone(), Datum::Tensor(t.clone())))
            .collect();
        self.run_data(data)
    }

    fn run_data(&self, data: Vec<(String, Datum)>) -> Result<Vec<(String, Tensor)>, Error> {
        let outputs = match &*self.inner {
            Compiled::Cpu(m) => pipeline::run_data(m, &data)?,
            Compiled::CudaSim(m) => pipeline::run_data(m, &data)?,
            Compiled::Cuda(m) => pipeline::run_data(m, &data)?,
            Compiled::Fixed(m) | Compiled::Saved(m) => {
                m.run_data(&data).map_err(|e| Error::Pipeline(e.into()))?
            }
        };
        outputs
            .into_iter()
            .map(|(name, d)| match d {
                Datum::Tensor(t) => Ok((name, t)),
                other => Err(Error::Pipeline(PipelineError::Exec(
                    hidet_graph::ExecError::WrongKind {
                        name,
                        expected: ValueKind::Tensor,
                        given: other.describe(),
                    },
                ))),
            })
            .collect()
    }

    /// The underlying per-shape compiled model (launch lists, profiles, reports), when the
    /// model was compiled for the CPU with symbolic input dimensions (one of fixed input
    /// shapes keeps only its compiled graph, see [`CompiledModel::report`]).
    pub fn as_cpu_model(&self) -> Option<&CpuModel> {
        match &*self.inner {
            Compiled::Cpu(m) => Some(m),
            Compiled::CudaSim(_) | Compiled::Cuda(_) | Compiled::Fixed(_) | Compiled::Saved(_) => {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_mlp_input(scale: f32) -> Tensor {
        let data: Vec<f32> = (0..3 * 37)
            .map(|i| (i as f32 * 0.37).sin() * scale)
            .collect();
        Tensor::new(vec![3, 37], data).expect("3 * 37 elements fill [3, 37]")
    }

    #[test]
    fn compiled_matches_the_reference_executor_and_reads_inputs_in_place() {
        let model = Model::zoo("tiny_mlp").expect("zoo model builds");
        let compiled = model
            .compile(&Options::default().threads(2))
            .expect("compiles");
        let x = tiny_mlp_input(1.0);
        let got = compiled.run(&[("input", x.clone())]).expect("runs");
        let want = model
            .run_reference(&[("input", x)])
            .expect("reference runs");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, want[0].0);
        for (g, w) in got[0].1.to_f64_vec().iter().zip(want[0].1.to_f64_vec()) {
            assert!((g - w).abs() <= 1e-5, "{g} vs {w}");
        }
        let report = compiled.report(&[vec![3, 37]]).expect("compiled already");
        assert_eq!(
            report.inputs_in_place, 1,
            "the caller's tensor is read where it is"
        );
        assert_eq!(
            report.outputs_in_place, 1,
            "the output is written into the returned tensor"
        );
    }

    #[test]
    fn threads_share_one_compiled_model() {
        let compiled = Model::zoo("tiny_mlp")
            .and_then(|m| m.compile(&Options::default()))
            .expect("compiles");
        let inputs: Vec<Tensor> = (0..4).map(|i| tiny_mlp_input(i as f32 + 0.5)).collect();
        let expected: Vec<Vec<f64>> = inputs
            .iter()
            .map(|x| {
                compiled
                    .run_positional(std::slice::from_ref(x))
                    .expect("runs")[0]
                    .1
                    .to_f64_vec()
            })
            .collect();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (compiled, inputs, expected) = (compiled.clone(), &inputs, &expected);
                s.spawn(move || {
                    for k in 0..20 {
                        let i = (t + k) % 4;
                        let out = compiled.run(&[("input".to_string(), inputs[i].clone())]);
                        assert_eq!(out.expect("runs")[0].1.to_f64_vec(), expected[i]);
                    }
                });
            }
        });
    }

    #[test]
    fn bad_options_and_inputs_are_typed_errors() {
        let model = Model::zoo("tiny_mlp").expect("zoo model builds");
        let err = model.compile(&Options::default().threads(0)).unwrap_err();
        assert!(matches!(err, Error::InvalidOption(_)), "{err:?}");
        let sim = Options {
            device: Device::CudaSim,
            ..Options::default()
        };
        let err = model.compile(&sim.tuning(TuneLevel::Subset)).unwrap_err();
        assert!(err.to_string().contains("no timing"), "{err:?}");
        let compiled = model.compile(&Options::default()).expect("compiles");
        let err = compiled.run::<&str>(&[]).unwrap_err();
        assert_eq!(err.to_string(), "missing input `input`");
        let wrong = Tensor::new(vec![3, 37], vec![0f64; 3 * 37]).expect("fills");
        let err = compiled.run(&[("input", wrong)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "input `input`: expected dtype f32, given f64"
        );
        let err = compiled.prepare(&[]).unwrap_err();
        assert!(matches!(
            err,
            Error::InputCount {
                expected: 1,
                given: 0,
                ..
            }
        ));
        assert!(matches!(
            Model::zoo("nope").unwrap_err(),
            Error::Zoo(zoo::ZooError::UnknownModel { .. })
        ));
    }

    #[test]
    fn inputs_and_outputs_describe_the_model() {
        let model = Model::zoo("tiny_bert").expect("zoo model builds");
        let inputs = model.inputs();
        assert_eq!(inputs.len(), 3);
        assert!(inputs.iter().all(|i| i.dtype == DType::I64));
        assert_eq!(inputs[0].shape, Some(vec![Dim::Fixed(1), Dim::Fixed(19)]));
        assert_eq!(model.outputs().len(), 2);
    }
}
