//! A [`GpuDevice`] as a [`TuneBackend`]: candidates are loaded as device modules (on a GPU,
//! compiled by NVRTC through the cubin/PTX cache), run on buffers in device memory filled with
//! random non-zero values, and timed by the device ([`GpuDevice::time`]: CUDA events around
//! the launches, so a 20 µs kernel is not timed with the host's launch and synchronization
//! overhead).
//!
//! A candidate is one kernel (parameters: the task's inputs, then its output) or a parallel-k
//! pair ([`super::simt`]): the partial products `(inputs…, workspace)` then their reduction
//! `(workspace, inputs…, output)`; the workspace is the workload's, grown to the largest any
//! candidate run on it needs.
//!
//! Inputs are measured cold, as on the CPU: read-only inputs are copied until the copies
//! hold [`CudaTuneBackend::cold_bytes`] (by default [`DEFAULT_COLD_BYTES`], over twice the
//! L2 cache of an H100 or H200), and each run reads the next copy, as a model's weights come
//! from device memory.
//!
//! The simulator device runs the same plumbing (compile, workloads, runs, outputs) without
//! timing: [`TuneBackend::time`] fails there, so tuning on `cuda-sim` is an error.

use std::collections::HashMap;
use std::sync::Arc;

use hidet_ir::dtype::DataType;
use hidet_ir::function::{Function, IRModule, Target};
use hidet_tune::{Environment, TuneBackend, TuneError};

use crate::device::{DeviceError, DeviceKernel, GpuDevice, KernelParam};
use crate::graph_backend::{kernel_image, kernel_params};

/// The default of [`CudaTuneBackend::cold_bytes`]: 128 MiB.
pub const DEFAULT_COLD_BYTES: usize = 128 << 20;

/// Compiles and runs SIMT candidates on device `D` (see the module docs).
#[derive(Debug)]
pub struct CudaTuneBackend<D: GpuDevice> {
    device: Arc<D>,
    environment: Environment,
    /// Read-only inputs are copied until their copies hold this many bytes; 0 measures with
    /// one warm copy.
    pub cold_bytes: usize,
}

impl<D: GpuDevice> CudaTuneBackend<D> {
    /// Candidates run on `device`; their measurements belong to `environment` (on a GPU,
    /// [`crate::gpu_device::RuntimeDevice::tuning_environment`]).
    pub fn new(device: Arc<D>, environment: Environment) -> CudaTuneBackend<D> {
        CudaTuneBackend {
            device,
            environment,
            cold_bytes: DEFAULT_COLD_BYTES,
        }
    }

    /// The same backend measuring with `cold_bytes` of input copies (0: warm inputs).
    pub fn with_cold_bytes(self, cold_bytes: usize) -> CudaTuneBackend<D> {
        CudaTuneBackend { cold_bytes, ..self }
    }

    /// The device candidates run on.
    pub fn device(&self) -> &Arc<D> {
        &self.device
    }
}

/// How one candidate runs: its kernels in the unit's module, the task's parameters, and the
/// workspace a parallel-k pair needs.
#[derive(Debug, Clone)]
struct Plan {
    /// One kernel, or the partial products then their reduction.
    kernels: Vec<usize>,
    params: Vec<KernelParam>,
    workspace_bytes: usize,
}

/// A compiled unit: the loaded candidates.
#[derive(Debug)]
pub struct CudaUnit<D: GpuDevice> {
    module: D::Module,
    plans: HashMap<String, Plan>,
}

/// One parameter's buffer: `copies` copies `stride` bytes apart (one for a written one).
#[derive(Debug)]
struct Slot {
    base: u64,
    param: KernelParam,
    stride: usize,
    copies: usize,
}

/// The device buffers a task's candidates run on (freed on drop).
#[derive(Debug)]
pub struct CudaWorkload<D: GpuDevice> {
    device: Arc<D>,
    slots: Vec<Slot>,
    /// The parallel-k workspace: address and bytes.
    workspace: Option<(u64, usize)>,
    next: usize,
}

impl<D: GpuDevice> CudaWorkload<D> {
    /// The task's parameters with the address of the copy the next run reads.
    pub fn buffers(&self) -> Vec<(u64, KernelParam)> {
        self.slots
            .iter()
            .map(|s| {
                let copy = self.next % s.copies;
                (s.base + (copy * s.stride) as u64, s.param.clone())
            })
            .collect()
    }

    /// How many copies of its read-only inputs the workload rotates through.
    pub fn copies(&self) -> usize {
        self.slots.iter().map(|s| s.copies).max().unwrap_or(1)
    }

    fn release(&mut self) {
        // Frees only after every launch on the buffers has finished; a failed wait leaves
        // them allocated (leaked until the device is dropped) rather than freed in use.
        if self.device.synchronize().is_err() {
            return;
        }
        let ptrs = self
            .slots
            .drain(..)
            .map(|s| s.base)
            .chain(self.workspace.take().map(|(p, _)| p));
        for ptr in ptrs {
            // SAFETY: the device finished every launch (synchronized above); the pointers
            // were allocated by this workload and are never used again (drained).
            let _ = unsafe { self.device.free(ptr) };
        }
    }
}

impl<D: GpuDevice> Drop for CudaWorkload<D> {
    fn drop(&mut self) {
        self.release();
    }
}

/// The task parameters and workspace bytes of a candidate's kernels (see the module docs).
fn plan_params(kernels: &[Function]) -> Result<(Vec<KernelParam>, usize), String> {
    match kernels {
        [single] => Ok((
            kernel_params(single, single.params.len().saturating_sub(1))?,
            0,
        )),
        [partial, reduce] => {
            let inputs = partial.params.len().saturating_sub(1);
            let mut params = kernel_params(partial, inputs)?;
            let workspace = params.pop().ok_or("the partial kernel has no parameters")?;
            let reduced = kernel_params(reduce, reduce.params.len().saturating_sub(1))?;
            // (workspace, inputs…, output): the same inputs, the same workspace.
            let same = reduced.len() == params.len() + 2
                && reduced[0].dtype == workspace.dtype
                && reduced[0].elements == workspace.elements
                && reduced[1..=params.len()]
                    .iter()
                    .zip(&params)
                    .all(|(a, b)| (a.dtype, a.elements) == (b.dtype, b.elements));
            if !same {
                return Err(format!(
                    "`{}` and `{}` are not a parallel-k pair",
                    partial.name, reduce.name
                ));
            }
            params.extend(reduced.last().cloned());
            Ok((params, workspace.bytes()))
        }
        _ => Err(format!(
            "a candidate of {} kernels (one, or a parallel-k pair)",
            kernels.len()
        )),
    }
}

/// A deterministic generator of values in `[-1, -0.05] ∪ [0.05, 1]` (xorshift64*).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let magnitude = 0.05 + 0.95 * ((bits >> 11) as f64 / (1u64 << 53) as f64);
        if bits & 1 == 0 {
            magnitude
        } else {
            -magnitude
        }
    }
}

/// The bytes of `param` filled with random non-zero values for float types, zeros (a valid
/// index into any non-empty dimension) otherwise.
fn random_bytes(param: &KernelParam, noise: &mut Noise) -> Vec<u8> {
    let n = param.elements;
    match param.dtype {
        DataType::F32 => (0..n)
            .flat_map(|_| (noise.next() as f32).to_le_bytes())
            .collect(),
        DataType::F64 => (0..n).flat_map(|_| noise.next().to_le_bytes()).collect(),
        DataType::F16 => (0..n)
            .flat_map(|_| half::f16::from_f64(noise.next()).to_le_bytes())
            .collect(),
        DataType::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f64(noise.next()).to_le_bytes())
            .collect(),
        _ => vec![0; param.bytes()],
    }
}

fn device_error(kernel: &str, e: DeviceError) -> TuneError {
    TuneError::Run {
        kernel: kernel.to_string(),
        message: e.to_string(),
    }
}

impl<D: GpuDevice> CudaTuneBackend<D> {
    /// The launches of `candidate` on `workload` (growing its workspace when needed), after
    /// checking its parameters against the workload's buffers.
    fn launches(
        &self,
        unit: &CudaUnit<D>,
        candidate: &str,
        workload: &mut CudaWorkload<D>,
    ) -> Result<Vec<(usize, Vec<u64>)>, TuneError> {
        let fail = |message: String| TuneError::Run {
            kernel: candidate.to_string(),
            message,
        };
        let plan = unit
            .plans
            .get(candidate)
            .ok_or_else(|| fail("no such candidate in the unit".into()))?;
        let buffers = workload.buffers();
        let matches = plan.params.len() == buffers.len()
            && plan.params.iter().zip(&buffers).all(|(p, (_, b))| {
                p.dtype == b.dtype && p.elements == b.elements && p.written == b.written
            });
        if !matches {
            return Err(fail(
                "its parameters do not match the workload's buffers".into(),
            ));
        }
        if plan.workspace_bytes > workload.workspace.map_or(0, |w| w.1) {
            if let Some((old, _)) = workload.workspace.take() {
                self.device
                    .synchronize()
                    .map_err(|e| device_error(candidate, e))?;
                // SAFETY: every launch finished (synchronized above); the workspace was
                // allocated by this backend for this workload and is forgotten (taken).
                unsafe { self.device.free(old) }.map_err(|e| device_error(candidate, e))?;
            }
            let ptr = self
                .device
                .alloc(plan.workspace_bytes)
                .map_err(|e| device_error(candidate, e))?;
            workload.workspace = Some((ptr, plan.workspace_bytes));
        }
        workload.next = workload.next.wrapping_add(1);
        let addresses: Vec<u64> = buffers.iter().map(|(a, _)| *a).collect();
        Ok(match plan.kernels.as_slice() {
            [k] => vec![(*k, addresses)],
            [partial, reduce] => {
                let workspace = workload
                    .workspace
                    .map(|w| w.0)
                    .ok_or_else(|| fail("no workspace".into()))?;
                let (output, inputs) = addresses
                    .split_last()
                    .ok_or_else(|| fail("no parameters".into()))?;
                let first = inputs.iter().copied().chain([workspace]).collect();
                let second = std::iter::once(workspace)
                    .chain(inputs.iter().copied())
                    .chain([*output])
                    .collect();
                vec![(*partial, first), (*reduce, second)]
            }
            _ => return Err(fail("a plan of neither one nor two kernels".into())),
        })
    }
}

impl<D: GpuDevice> TuneBackend for CudaTuneBackend<D> {
    type Unit = CudaUnit<D>;
    type Workload = CudaWorkload<D>;

    fn environment(&self) -> Result<Environment, TuneError> {
        Ok(self.environment.clone())
    }

    /// Every candidate's kernels emitted as CUDA C and loaded in one device module (on a GPU,
    /// each compiled by NVRTC through the cubin/PTX cache).
    fn compile(
        &self,
        name: &str,
        candidates: Vec<Vec<Function>>,
    ) -> Result<CudaUnit<D>, TuneError> {
        let fail = |message: String| TuneError::Compile {
            task: name.to_string(),
            message,
        };
        let mut images: Vec<DeviceKernel> = Vec::new();
        let mut plans = HashMap::new();
        for kernels in candidates {
            let first = kernels
                .first()
                .map(|f| f.name.clone())
                .ok_or_else(|| fail("a candidate without kernels".into()))?;
            let (params, workspace_bytes) = plan_params(&kernels).map_err(fail)?;
            let mut indices = Vec::new();
            for f in kernels {
                let inputs = f.params.len().saturating_sub(1);
                let module = IRModule::new(f.name.clone(), Target::Cuda).with(f);
                indices.push(images.len());
                images.push(kernel_image(inputs, module).map_err(fail)?);
            }
            plans.insert(
                first,
                Plan {
                    kernels: indices,
                    params,
                    workspace_bytes,
                },
            );
        }
        let module = self.device.load(&images).map_err(|e| fail(e.to_string()))?;
        Ok(CudaUnit { module, plans })
    }

    /// Buffers for the task's parameters in device memory: read-only ones random and
    /// replicated until [`CudaTuneBackend::cold_bytes`], written ones zeroed.
    fn workload(&self, candidate: &[Function]) -> Result<CudaWorkload<D>, TuneError> {
        let name = candidate.first().map_or("<candidate>", |f| f.name.as_str());
        let fail = |message: String| TuneError::Workload {
            task: name.to_string(),
            message,
        };
        let (params, _) = plan_params(candidate).map_err(fail)?;
        let align = self.device.alignment().max(1);
        let read_only: usize = params
            .iter()
            .filter(|p| !p.written)
            .map(|p| p.bytes().max(1).next_multiple_of(align))
            .sum();
        let copies = if read_only == 0 {
            1
        } else {
            self.cold_bytes.div_ceil(read_only).max(1)
        };
        let mut workload = CudaWorkload {
            device: self.device.clone(),
            slots: Vec::new(),
            workspace: None,
            next: 0,
        };
        let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
        for param in params {
            let stride = param.bytes().max(1).next_multiple_of(align);
            let copies = if param.written { 1 } else { copies };
            let bytes = stride
                .checked_mul(copies)
                .ok_or_else(|| fail(format!("{copies} copies of {stride} bytes")))?;
            let base = self.device.alloc(bytes).map_err(|e| fail(e.to_string()))?;
            // Pushed before filling, so a failure frees it with the rest.
            workload.slots.push(Slot {
                base,
                param: param.clone(),
                stride,
                copies,
            });
            if !param.written {
                let data = random_bytes(&param, &mut noise);
                for copy in 0..copies {
                    self.device
                        .upload(base + (copy * stride) as u64, &data)
                        .map_err(|e| fail(e.to_string()))?;
                }
            }
        }
        Ok(workload)
    }

    fn run(
        &self,
        unit: &CudaUnit<D>,
        candidate: &str,
        workload: &mut CudaWorkload<D>,
    ) -> Result<(), TuneError> {
        let launches = self.launches(unit, candidate, workload)?;
        for (kernel, args) in &launches {
            // SAFETY: `launches` checked the candidate's parameters against the workload's
            // buffers (count, dtype, elements, written), which are live allocations of this
            // device owned by the workload (borrowed mutably: nothing else uses them), one per
            // parameter and disjoint, with the workspace its own allocation of at least the
            // bytes the pair needs; launches run in order on the device's stream.
            unsafe { self.device.launch(&unit.module, *kernel, args) }
                .map_err(|e| device_error(candidate, e))?;
        }
        self.device
            .synchronize()
            .map_err(|e| device_error(candidate, e))
    }

    /// The device's own time of the candidate's launches ([`GpuDevice::time`]); fails on a
    /// device without timing (the simulator).
    fn time(
        &self,
        unit: &CudaUnit<D>,
        candidate: &str,
        workload: &mut CudaWorkload<D>,
    ) -> Result<f64, TuneError> {
        let launches = self.launches(unit, candidate, workload)?;
        // SAFETY: as for `run`: checked parameters, live disjoint buffers owned by the
        // workload, the workspace large enough.
        unsafe { self.device.time(&unit.module, &launches) }.map_err(|e| device_error(candidate, e))
    }
}
