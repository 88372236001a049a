//! The CPU as a [`TuneBackend`]: candidates are compiled through the build pipeline (and the
//! kernel cache) into one library per unit, and run on arenas of random data.
//!
//! Inputs are measured cold. In a model every convolution's weights come from memory (the
//! weights of ResNet-50 are three times the size of a 32 MiB last-level cache), while a
//! kernel run again and again on one set of buffers finds them in L2 or L3; candidates that
//! re-read their operands then look faster than they are in the model, and tuned models
//! measured slower than untuned ones. So a workload keeps enough copies of the read-only
//! inputs that they exceed [`CpuTuneBackend::cold_bytes`], and each run reads the next copy.
//!
//! Every read-only input is copied, activations included, although in a model a kernel's
//! activation operand often arrives warm from the kernel before it; the in-model check
//! ([`super::model_check`]) corrects what this and other differences from a model get wrong.
//! The default size comes from cpu0's largest cache, one L3 slice on machines with several
//! (multi-CCX or multi-socket), which threads on other slices do not share.

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
    /// The read-only inputs of a workload are copied until the copies together hold at
    /// least this many bytes (see the module docs); 0 measures with one warm copy.
    pub cold_bytes: usize,
}

/// Buffers for one kernel signature: one arena per parameter. The arena of a read-only
/// parameter holds `copies` copies `strides[i]` bytes apart; run `r` reads copy
/// `r % copies`.
#[derive(Debug)]
pub struct CpuWorkload {
    arenas: Vec<CpuArena>,
    strides: Vec<usize>,
    copies: usize,
    next: usize,
}

impl CpuWorkload {
    /// How many copies of its read-only inputs the workload rotates through.
    pub fn copies(&self) -> usize {
        self.copies
    }
}

/// The default of [`CpuTuneBackend::cold_bytes`]: twice the host's last-level cache, or
/// 64 MiB where its size is unknown.
pub fn default_cold_bytes() -> usize {
    crate::target::last_level_cache_bytes().map_or(64 << 20, |b| b.saturating_mul(2))
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
            cold_bytes: default_cold_bytes(),
        }
    }

    /// The same backend measuring with `cold_bytes` of input copies (0: warm inputs).
    pub fn with_cold_bytes(self, cold_bytes: usize) -> CpuTuneBackend {
        CpuTuneBackend { cold_bytes, ..self }
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

    /// Every candidate's kernels into one library (a CPU candidate is one kernel).
    fn compile(
        &self,
        name: &str,
        candidates: Vec<Vec<Function>>,
    ) -> Result<CompiledModule, TuneError> {
        let mut module = IRModule::new(name, Target::Cpu);
        module.functions = candidates.into_iter().flatten().collect();
        crate::build(module, &self.build).map_err(|e| TuneError::Compile {
            task: name.to_string(),
            message: e.to_string(),
        })
    }

    /// Floating-point inputs get random values in `[-1, -0.05] ∪ [0.05, 1]`; integer and
    /// boolean inputs are zero, which is a valid index into any non-empty dimension. Read-only
    /// inputs are replicated until their copies hold [`CpuTuneBackend::cold_bytes`].
    /// The buffers of the candidate's (first) kernel's parameters.
    fn workload(&self, candidate: &[Function]) -> Result<CpuWorkload, TuneError> {
        let Some(function) = candidate.first() else {
            return Err(workload_error("<candidate>", "a candidate without kernels"));
        };
        let fail = |message: String| workload_error(&function.name, message);
        let signature = KernelSignature::of(function).map_err(|e| fail(e.to_string()))?;
        let sizes = buffers(&signature).map_err(fail)?;
        let strides: Vec<usize> = signature
            .params
            .iter()
            .zip(&sizes)
            .map(|(p, (dtype, size))| {
                let bytes = size.max(&1) * dtype.size_in_bytes();
                if p.is_written() {
                    0
                } else {
                    bytes.next_multiple_of(64)
                }
            })
            .collect();
        let read_only = strides
            .iter()
            .try_fold(0usize, |sum, s| sum.checked_add(*s))
            .ok_or_else(|| fail("the inputs' sizes overflow".into()))?;
        let copies = if read_only == 0 {
            1
        } else {
            self.cold_bytes.div_ceil(read_only).max(1)
        };
        let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
        let mut arenas = Vec::with_capacity(sizes.len());
        for ((p, (dtype, size)), stride) in signature.params.iter().zip(sizes).zip(&strides) {
            let bytes = stride
                .checked_mul(copies)
                .ok_or_else(|| fail(format!("{copies} copies of {stride} bytes overflow")))?
                .max(size.max(1) * dtype.size_in_bytes());
            let mut arena = CpuArena::new(bytes).map_err(|e| fail(e.to_string()))?;
            if !p.is_written() && dtype.is_float() {
                let values: Vec<f64> = (0..size).map(|_| noise.next()).collect();
                let t = Tensor::new(vec![size], values)
                    .map_err(|e| fail(e.to_string()))?
                    .cast(dtype);
                for copy in 0..copies {
                    arena
                        .write(copy * stride, &t)
                        .map_err(|e| fail(e.to_string()))?;
                }
            }
            arenas.push(arena);
        }
        Ok(CpuWorkload {
            arenas,
            strides,
            copies,
            next: 0,
        })
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
        handle.check_runs_here().map_err(|e| fail(e.to_string()))?;
        let sizes = buffers(handle.signature()).map_err(fail)?;
        if sizes.len() != workload.arenas.len() {
            return Err(fail(format!(
                "{} parameters, the workload has {} buffers",
                sizes.len(),
                workload.arenas.len()
            )));
        }
        let copy = workload.next;
        for (((dtype, size), arena), stride) in
            sizes.iter().zip(&workload.arenas).zip(&workload.strides)
        {
            let end = copy.checked_mul(*stride).and_then(|start| {
                size.checked_mul(dtype.size_in_bytes())
                    .and_then(|bytes| start.checked_add(bytes))
            });
            if end.is_none_or(|end| end > arena.len()) {
                return Err(fail("a parameter is larger than its buffer".into()));
            }
        }
        workload.next = (copy + 1) % workload.copies;
        // A library without parallel loops may lack the setter; its kernels are serial.
        let _ = unit.set_num_threads(self.threads);
        let pointers: Vec<*mut c_void> = workload
            .arenas
            .iter()
            .zip(&workload.strides)
            .map(|(arena, stride)| (arena.base() as usize + copy * stride) as *mut c_void)
            .collect();
        // SAFETY: the kernel runs on this CPU (checked above); one pointer per parameter, in
        // order (counts checked above); every parameter
        // is a tensor of constant size whose bytes from its copy's offset lie inside its arena
        // (checked above), 64-byte aligned (strides are multiples of 64); the arenas are
        // distinct allocations owned by `workload`, borrowed mutably here, so nothing else
        // accesses them during the call.
        unsafe { handle.call_packed(&pointers) };
        Ok(())
    }
}
