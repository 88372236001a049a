//! The CPU as a [`TuneBackend`]: candidates are compiled through the build pipeline (and the
//! kernel cache) into one library per unit, and run on arenas of random data.

use std::ffi::c_void;

use hidet_graph::{DType, Tensor};
use hidet_ir::function::{Function, IRModule, Target};
use hidet_tune::{Environment, TuneBackend, TuneError};

use crate::compile::Compiler;
use crate::graph_backend::arena::CpuArena;
use crate::module::CompiledModule;
use crate::options::BuildOptions;
use crate::signature::{KernelSignature, ParamKind};

/// Compiles and runs candidate kernels on the host CPU on `threads` threads.
#[derive(Debug, Clone)]
pub struct CpuTuneBackend {
    pub build: BuildOptions,
    pub threads: usize,
}

/// Buffers for one kernel signature: one arena per parameter.
#[derive(Debug)]
pub struct CpuWorkload {
    arenas: Vec<CpuArena>,
    pointers: Vec<u64>,
}

impl CpuTuneBackend {
    /// Candidates go through `build` (its kept-source folder is dropped) and run on
    /// `threads` threads.
    pub fn new(build: &BuildOptions, threads: usize) -> CpuTuneBackend {
        CpuTuneBackend {
            build: BuildOptions {
                keep_source_dir: None,
                dump_ir: false,
                ..build.clone()
            },
            threads: threads.max(1),
        }
    }
}

/// The environment tuning results on `build`'s target with the system compiler belong to.
pub fn environment(build: &BuildOptions) -> Result<Environment, TuneError> {
    let compiler = Compiler::system().map_err(|e| TuneError::Compile {
        task: "<environment>".into(),
        message: e.to_string(),
    })?;
    let target = build.target();
    Ok(Environment {
        device: target.model.clone(),
        features: target
            .features
            .names()
            .into_iter()
            .map(String::from)
            .collect(),
        compiler: compiler.identity(),
        flags: build.cflags(),
    })
}

/// A deterministic generator of values in `[-1, -0.05] ∪ [0.05, 1]` (xorshift64*).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
        let magnitude = 0.05 + 0.95 * unit;
        if bits & 1 == 0 {
            magnitude
        } else {
            -magnitude
        }
    }
}

fn workload_error(kernel: &str, message: impl Into<String>) -> TuneError {
    TuneError::Workload {
        task: kernel.to_string(),
        message: message.into(),
    }
}

/// The element count and dtype of every parameter of `signature` (all must be tensors of
/// constant size).
fn buffers(signature: &KernelSignature) -> Result<Vec<(DType, usize)>, String> {
    signature
        .params
        .iter()
        .map(|p| {
            let ParamKind::Tensor { dtype, size, .. } = &p.kind else {
                return Err(format!("parameter `{}` is not a tensor", p.name()));
            };
            let dtype = DType::ALL
                .into_iter()
                .find(|d| d.to_ir() == *dtype)
                .ok_or_else(|| format!("parameter `{}` has element type {dtype}", p.name()))?;
            let size = size
                .as_int()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| format!("parameter `{}` has a non-constant size", p.name()))?;
            Ok((dtype, size))
        })
        .collect()
}

impl TuneBackend for CpuTuneBackend {
    type Unit = CompiledModule;
    type Workload = CpuWorkload;

    fn environment(&self) -> Result<Environment, TuneError> {
        environment(&self.build)
    }

    fn compile(&self, name: &str, functions: Vec<Function>) -> Result<CompiledModule, TuneError> {
        let mut module = IRModule::new(name, Target::Cpu);
        module.functions = functions;
        crate::build(module, &self.build).map_err(|e| TuneError::Compile {
            task: name.to_string(),
            message: e.to_string(),
        })
    }

    /// Floating-point inputs get random values in `[-1, -0.05] ∪ [0.05, 1]`; integer and
    /// boolean inputs are zero, which is a valid index into any non-empty dimension.
    fn workload(&self, function: &Function) -> Result<CpuWorkload, TuneError> {
        let signature = KernelSignature::of(function)
            .map_err(|e| workload_error(&function.name, e.to_string()))?;
        let sizes = buffers(&signature).map_err(|m| workload_error(&function.name, m))?;
        let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
        let mut arenas = Vec::with_capacity(sizes.len());
        for (p, (dtype, size)) in signature.params.iter().zip(sizes) {
            let mut arena = CpuArena::new(size.max(1) * dtype.size_in_bytes())
                .map_err(|e| workload_error(&function.name, e.to_string()))?;
            if !p.is_written() && dtype.is_float() {
                let values: Vec<f64> = (0..size).map(|_| noise.next()).collect();
                let t = Tensor::new(vec![size], values)
                    .map_err(|e| workload_error(&function.name, e.to_string()))?
                    .cast(dtype);
                arena
                    .write(0, &t)
                    .map_err(|e| workload_error(&function.name, e.to_string()))?;
            }
            arenas.push(arena);
        }
        let pointers = arenas.iter().map(CpuArena::base).collect();
        Ok(CpuWorkload { arenas, pointers })
    }

    fn run(
        &self,
        unit: &CompiledModule,
        kernel: &str,
        workload: &mut CpuWorkload,
    ) -> Result<(), TuneError> {
        let fail = |message: String| TuneError::Run {
            kernel: kernel.to_string(),
            message,
        };
        let handle = unit.kernel(kernel).map_err(|e| fail(e.to_string()))?;
        let sizes = buffers(handle.signature()).map_err(fail)?;
        if sizes.len() != workload.arenas.len() {
            return Err(fail(format!(
                "{} parameters, the workload has {} buffers",
                sizes.len(),
                workload.arenas.len()
            )));
        }
        for ((dtype, size), arena) in sizes.iter().zip(&workload.arenas) {
            if size * dtype.size_in_bytes() > arena.len() {
                return Err(fail("a parameter is larger than its buffer".into()));
            }
        }
        // A library without parallel loops may lack the setter; its kernels are serial.
        let _ = unit.set_num_threads(self.threads);
        let pointers: Vec<*mut c_void> = workload
            .pointers
            .iter()
            .map(|a| *a as usize as *mut c_void)
            .collect();
        // SAFETY: one pointer per parameter, in order (counts checked above); every parameter
        // is a tensor of constant size whose arena holds at least its bytes (checked above),
        // 64-byte aligned; the arenas are distinct allocations owned by `workload`, borrowed
        // mutably here, so nothing else accesses them during the call.
        unsafe { handle.call_packed(&pointers) };
        Ok(())
    }
}
