//! Load a model and run it: the path shared by `hidet run` and the conformance suite.
//!
//! Two executors: the compiled path ([`compile`], [`run`]: fused CPU kernels, the default;
//! [`compile_sim`]: fused CUDA kernels run in the GPU simulator; [`compile_gpu`]: on an
//! NVIDIA GPU, see [`Device`]) and the
//! reference executor ([`run_reference`]: every operator's `eval`, the oracle).
//!
//! [`load`] gives the graph exactly as imported. The reference executor runs that graph, so
//! it shares no graph rewrite with the path it checks; [`compile`] binds the graph to each
//! run's input shapes and applies the backend's graph passes itself.

use std::path::Path;

use hidet_cpu::graph_backend::tuning::CpuTuning;
use hidet_cpu::graph_backend::{CpuBackend, CpuBackendOptions};
use hidet_cuda::gpu_device::RuntimeDevice;
use hidet_cuda::graph_backend::{CudaBackend, CudaBackendOptions, NvrtcCheck};
use hidet_cuda::runtime::Gpu;
use hidet_cuda::sim_device::{SimDevice, SimDeviceOptions};
use hidet_cuda::tuning::CudaTuning;
use hidet_cuda::CudaKernelCache;
use hidet_graph::compiled::{
    ArtifactReader, Backend, CompileOptions, CompiledError, CompiledModel, LoadedModel,
};
use hidet_graph::passes::{run_passes, GraphPass};
use hidet_graph::{
    run_reference as reference_executor, run_reference_data as reference_executor_data, Datum,
    ExecError, Graph, GraphError, Tensor,
};
use hidet_onnx::{OnnxError, OnnxModel};

use crate::zoo::{self, ZooError};

/// A model compiled for the CPU (lazily, once per distinct set of input shapes).
pub type CpuModel = CompiledModel<CpuBackend>;

/// A model compiled for the CUDA backend on the simulator device (`--device cuda-sim`).
pub type SimModel = CompiledModel<CudaBackend<SimDevice>>;

/// A model compiled for the CUDA backend on an NVIDIA GPU (`--device cuda`).
pub type GpuModel = CompiledModel<CudaBackend<RuntimeDevice>>;

/// A compiled CPU model loaded from a file that [`CompiledModel::save`] wrote.
pub type LoadedCpuModel = LoadedModel<CpuBackend>;

/// Where compiled kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Fused C kernels on this host's CPU (the default).
    Cpu,
    /// Fused CUDA kernels run by the GPU simulator on the CPU: slow, for small models and
    /// tests.
    CudaSim,
    /// Fused CUDA kernels on NVIDIA GPU 0, through the CUDA driver loaded at run time
    /// ([`compile_gpu`]); a [`PipelineError::Device`] where there is no driver or GPU.
    Cuda,
}

impl Device {
    /// The environment variable that sets the default device.
    pub const ENV: &'static str = "HIDET_DEVICE";

    /// `explicit` if given, else `$HIDET_DEVICE` when set and not empty, else [`Device::Cpu`].
    pub fn resolve(explicit: Option<Device>) -> Result<Device, PipelineError> {
        if let Some(d) = explicit {
            return Ok(d);
        }
        match std::env::var(Self::ENV) {
            Ok(v) if !v.trim().is_empty() => v
                .trim()
                .parse()
                .map_err(|e: String| PipelineError::Device(format!("{}: {e}", Self::ENV))),
            _ => Ok(Device::Cpu),
        }
    }

    /// The device's name as `--device` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::CudaSim => "cuda-sim",
            Device::Cuda => "cuda",
        }
    }

    /// Fails for a device this machine cannot run kernels on: [`Device::Cuda`] without an
    /// NVIDIA driver or device (the error says which).
    pub fn check_runnable(self) -> Result<(), PipelineError> {
        match self {
            Device::Cuda => match Gpu::device_count() {
                Ok(0) => Err(cuda_unavailable("the driver reports no CUDA device")),
                Ok(_) => Ok(()),
                Err(e) => Err(cuda_unavailable(e)),
            },
            Device::Cpu | Device::CudaSim => Ok(()),
        }
    }
}

/// The error for [`Device::Cuda`] where no GPU can be used, naming why.
fn cuda_unavailable(why: impl std::fmt::Display) -> PipelineError {
    PipelineError::Device(format!(
        "--device cuda: {why} (--device cuda-sim runs the same CUDA kernels in the GPU \
         simulator)"
    ))
}

impl std::str::FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> Result<Device, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda-sim" => Ok(Device::CudaSim),
            "cuda" => Ok(Device::Cuda),
            _ => Err(format!("unknown device `{s}` (cpu, cuda-sim or cuda)")),
        }
    }
}

/// Errors of loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Onnx(#[from] OnnxError),
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    Compiled(#[from] CompiledError),
    /// The device cannot be used (unknown, or no runtime for it).
    #[error("{0}")]
    Device(String),
}

/// Imports `path`: the graph as imported, no graph pass applied (see the module docs).
pub fn load(path: &Path) -> Result<OnnxModel, PipelineError> {
    Ok(hidet_onnx::load_model(path)?)
}

/// Imports the bytes of an `.onnx` file (external data is refused: there is no folder to
/// confine it to); otherwise as [`load`].
pub fn load_bytes(bytes: &[u8]) -> Result<OnnxModel, PipelineError> {
    let proto = hidet_onnx::decode_model(bytes)?;
    Ok(hidet_onnx::import_model(
        &proto,
        None,
        hidet_graph::Registry::global(),
    )?)
}

/// The zoo model `name` (without the `zoo:` prefix) as a model as imported, the way
/// `hidet bench zoo:NAME` loads it.
pub fn zoo_model(name: &str) -> Result<OnnxModel, ZooError> {
    Ok(OnnxModel {
        graph: zoo::build(name)?,
        ir_version: 8,
        opsets: vec![(String::new(), zoo::net::OPSET)],
        producer: "hidet zoo".into(),
    })
}

/// The CPU backend's graph passes on this host ([`CpuBackend`]'s
/// [`Backend::graph_passes`]).
pub fn default_passes() -> Vec<Box<dyn GraphPass>> {
    CpuBackend::new(CpuBackendOptions::default()).graph_passes()
}

/// `graph` rewritten by the [`default_passes`]: for a graph with static input shapes, the
/// graph the CPU backend compiles (a symbolic one is first bound to each run's shapes).
pub fn optimize(graph: Graph) -> Result<Graph, PipelineError> {
    Ok(run_passes(graph, &default_passes())?)
}

/// The compiled CPU model of `model`, a model as imported ([`load`]). Nothing is compiled
/// until the first run (or [`CompiledModel::compiled`]) with concrete input shapes: each
/// distinct set of shapes binds the graph's symbolic dimensions, applies the
/// [`default_passes`] and compiles (see [`CompiledModel`]); compiled kernels are cached on
/// disk (`HIDET_CACHE_DIR`) and in the returned model per input shapes.
pub fn compile(model: &OnnxModel, opts: CompileOptions) -> CpuModel {
    compile_tuned(model, opts, CpuTuning::default())
}

/// [`compile`] with `tuning`: the tuning level, cache and observer of the matmul tasks
/// (measured when a shape is compiled, see [`CpuTuning`]).
pub fn compile_tuned(model: &OnnxModel, opts: CompileOptions, tuning: CpuTuning) -> CpuModel {
    CompiledModel::new(
        model.graph.clone(),
        CpuBackend::new(CpuBackendOptions::default()).with_tuning(tuning),
        opts,
    )
}

/// The CUDA backend on a fresh simulator device, with `options`.
/// Whether the file at `path` is a saved compiled model (by its first bytes) rather than an
/// ONNX model.
pub fn is_compiled_model(path: &Path) -> bool {
    ArtifactReader::is_artifact_file(path)
}

/// Loads a compiled CPU model saved with [`CompiledModel::save`] (`hidet compile -o`), its
/// kernels on `threads` threads (`None`: all cores). Nothing is compiled: no C compiler is
/// needed, and a model compiled for CPU features this one lacks is refused, naming them.
pub fn load_compiled(path: &Path, threads: Option<usize>) -> Result<LoadedCpuModel, PipelineError> {
    let backend = CpuBackend::new(CpuBackendOptions {
        loaded_threads: threads,
        ..CpuBackendOptions::default()
    });
    Ok(LoadedModel::load(path, backend)?)
}

pub fn sim_backend(options: CudaBackendOptions) -> CudaBackend<SimDevice> {
    CudaBackend::new(
        std::sync::Arc::new(SimDevice::new(SimDeviceOptions::default())),
        options,
    )
}

/// [`compile`] for the CUDA backend on the simulator device ([`Device::CudaSim`]): the
/// target-neutral graph passes, fused CUDA kernels, every launch simulated.
pub fn compile_sim(
    model: &OnnxModel,
    opts: CompileOptions,
    options: CudaBackendOptions,
) -> SimModel {
    CompiledModel::new(model.graph.clone(), sim_backend(options), opts)
}

/// [`compile`] for the CUDA backend on GPU 0 ([`Device::Cuda`]): the target-neutral graph
/// passes, fused CUDA kernels compiled for the GPU's architecture by NVRTC through the
/// cubin/PTX cache (`$HIDET_CACHE_DIR/cuda`; a kernel compiled on another machine is taken from
/// there without NVRTC). Fails, naming why, where no GPU can be opened.
///
/// The SIMT matmul and convolution anchors use the tuning cache's records for this GPU and
/// NVRTC (`hidet tune --device cuda`), the heuristic where there is none.
pub fn compile_gpu(model: &OnnxModel, opts: CompileOptions) -> Result<GpuModel, PipelineError> {
    compile_gpu_tuned(model, opts, CudaTuning::default())
}

/// [`compile_gpu`] with `tuning` (its environment is set to the opened GPU's, so cached
/// records apply; with a measuring level, the SIMT tasks are tuned on the GPU when a shape is
/// compiled, see [`CudaTuning`]).
pub fn compile_gpu_tuned(
    model: &OnnxModel,
    opts: CompileOptions,
    tuning: CudaTuning,
) -> Result<GpuModel, PipelineError> {
    Device::Cuda.check_runnable()?;
    let device = RuntimeDevice::open(0, CudaKernelCache::from_env()).map_err(cuda_unavailable)?;
    let options = CudaBackendOptions {
        arch: device.arch(),
        nvrtc: NvrtcCheck::Off,
        ptxas: false,
        cache_images: false,
        ..CudaBackendOptions::default()
    };
    let tuning = CudaTuning {
        environment: Some(device.tuning_environment()),
        ..tuning
    };
    let backend = CudaBackend::new(std::sync::Arc::new(device), options).with_tuning(tuning);
    Ok(CompiledModel::new(model.graph.clone(), backend, opts))
}

/// Runs a compiled model on named inputs and returns every graph output as (name, tensor).
/// Input errors name the input and what was expected.
pub fn run<B: Backend>(
    model: &CompiledModel<B>,
    inputs: &[(String, Tensor)],
) -> Result<Vec<(String, Tensor)>, PipelineError> {
    Ok(model.run(inputs)?)
}

/// Runs the model with the reference executor (the oracle); same contract as [`run`].
pub fn run_reference(
    model: &OnnxModel,
    inputs: &[(String, Tensor)],
) -> Result<Vec<(String, Tensor)>, PipelineError> {
    Ok(reference_executor(&model.graph, inputs)?)
}

/// [`run`] for inputs and outputs of any kind (tensors, sequences, optionals).
pub fn run_data<B: Backend>(
    model: &CompiledModel<B>,
    inputs: &[(String, Datum)],
) -> Result<Vec<(String, Datum)>, PipelineError> {
    Ok(model.run_data(inputs)?)
}

/// [`run_reference`] for inputs and outputs of any kind (tensors, sequences, optionals).
pub fn run_reference_data(
    model: &OnnxModel,
    inputs: &[(String, Datum)],
) -> Result<Vec<(String, Datum)>, PipelineError> {
    Ok(reference_executor_data(&model.graph, inputs)?)
}
