//! The real-GPU implementation of [`GpuDevice`]: memory, modules and launches through the CUDA
//! runtime ([`crate::runtime`], the driver API loaded at run time), every kernel's CUDA C
//! compiled for the GPU's architecture by NVRTC through the cubin/PTX cache, or taken from
//! the cache where it was compiled on another machine ([`CudaKernelCache::resolve`]).
//!
//! Allocations are owned here, by their device address, until [`GpuDevice::free`]; launches
//! are enqueued on the GPU's stream and [`GpuDevice::synchronize`] waits for them.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::cache::CudaKernelCache;
use crate::device::{DeviceError, DeviceKernel, GpuDevice};
use crate::nvrtc::CompileOptions;
use crate::runtime::{CapturedGraph, DeviceBuffer, Gpu, Kernel, KernelParam, LaunchConfig};
use crate::{Arch, CudaError};

/// A CUDA GPU driven through the runtime (see the module docs).
#[derive(Debug)]
pub struct RuntimeDevice {
    gpu: Gpu,
    cache: CudaKernelCache,
    allocations: Mutex<HashMap<u64, DeviceBuffer>>,
    /// Held by every call that enqueues on (or waits for) the one stream — launches, copies,
    /// allocations and frees — and by a whole capture, so that a capture records no other
    /// thread's work and no other thread's synchronous call meets a capturing stream.
    stream: Mutex<()>,
}

/// The kernels of one compiled model, loaded on the GPU, each with its launch
/// configuration.
#[derive(Debug)]
pub struct RuntimeModule {
    kernels: Vec<(Kernel, LaunchConfig)>,
}

impl RuntimeDevice {
    /// Opens GPU `ordinal` with kernels cached in `cache`. Fails with a typed error where
    /// there is no driver, no such device or a driver too old for the runtime.
    pub fn open(ordinal: usize, cache: CudaKernelCache) -> Result<RuntimeDevice, CudaError> {
        Ok(RuntimeDevice {
            gpu: Gpu::open(ordinal)?,
            cache,
            allocations: Mutex::new(HashMap::new()),
            stream: Mutex::new(()),
        })
    }

    /// The architecture kernels must be compiled for.
    pub fn arch(&self) -> Arch {
        self.gpu.arch()
    }

    /// The opened GPU.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// What tuning measurements on this GPU depend on: its name, architecture and SM count,
    /// the NVRTC that compiles candidates (its version, or `unavailable` where none is found:
    /// kernels then come from the cubin cache only) and the compile options.
    pub fn tuning_environment(&self) -> hidet_tune::Environment {
        let info = self.gpu.info();
        let compiler = match crate::nvrtc::Nvrtc::global() {
            Ok(nvrtc) => {
                let (major, minor) = nvrtc.version();
                format!("nvrtc {major}.{minor}")
            }
            Err(_) => "nvrtc unavailable".to_string(),
        };
        let options = CompileOptions::default();
        let mut flags = options.extra.clone();
        if options.debug {
            flags.push("debug".into());
        }
        hidet_tune::Environment {
            device: info.name.clone(),
            features: vec![
                info.arch.real_name(),
                format!("sms={}", info.multiprocessors),
            ],
            compiler,
            flags,
        }
    }

    fn allocations(&self) -> MutexGuard<'_, HashMap<u64, DeviceBuffer>> {
        // A poisoned lock only means another thread panicked while holding the map; the map
        // itself is never left half-updated (single insert/remove calls).
        self.allocations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn load_kernel(&self, kernel: &DeviceKernel) -> Result<(Kernel, LaunchConfig), DeviceError> {
        let fail = |e: CudaError| DeviceError::Load {
            kernel: kernel.name.clone(),
            message: e.to_string(),
        };
        let image = self
            .cache
            .resolve(
                &kernel.name,
                &kernel.source,
                self.arch(),
                &CompileOptions::default(),
            )
            .map_err(fail)?
            .image;
        let module = self.gpu.load_module(&image).map_err(fail)?;
        let loaded = module.kernel(&kernel.name).map_err(fail)?;
        let config = LaunchConfig::new(kernel.grid, kernel.block)
            .with_dynamic_shared(kernel.dynamic_shared_bytes);
        Ok((loaded, config))
    }
}

impl RuntimeDevice {
    fn stream_lock(&self) -> MutexGuard<'_, ()> {
        // Guards no data: a poisoned lock is as good as a clean one.
        self.stream.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enqueues kernel `kernel` of `module` on `args` (the caller holds the stream lock).
    fn enqueue(
        gpu: &Gpu,
        module: &RuntimeModule,
        kernel: usize,
        args: &[u64],
    ) -> Result<(), DeviceError> {
        let (loaded, config) = module
            .kernels
            .get(kernel)
            .ok_or_else(|| DeviceError::Launch {
                kernel: format!("#{kernel}"),
                message: format!("the module has {} kernels", module.kernels.len()),
            })?;
        let params: Vec<KernelParam> = args.iter().map(|&a| KernelParam::Ptr(a)).collect();
        gpu.launch(loaded, config, &params)
            .map_err(|e| DeviceError::Launch {
                kernel: loaded.name().to_string(),
                message: e.to_string(),
            })
    }
}

impl GpuDevice for RuntimeDevice {
    type Module = RuntimeModule;
    type Graph = CapturedGraph;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn alloc(&self, bytes: usize) -> Result<u64, DeviceError> {
        let fail = |e: CudaError| DeviceError::Alloc {
            bytes,
            message: e.to_string(),
        };
        let _stream = self.stream_lock();
        let buffer = self
            .gpu
            .alloc(bytes.max(1), self.alignment())
            .map_err(fail)?;
        buffer.zero().map_err(fail)?;
        let ptr = buffer.ptr();
        self.allocations().insert(ptr, buffer);
        Ok(ptr)
    }

    unsafe fn free(&self, ptr: u64) -> Result<(), DeviceError> {
        let _stream = self.stream_lock();
        match self.allocations().remove(&ptr) {
            Some(_) => Ok(()),
            None => Err(DeviceError::BadAddress {
                what: "free".into(),
                address: ptr,
                bytes: 0,
            }),
        }
    }

    fn upload(&self, dst: u64, data: &[u8]) -> Result<(), DeviceError> {
        let _stream = self.stream_lock();
        self.gpu
            .upload(dst, data)
            .map_err(|e| DeviceError::Transfer {
                what: format!("upload of {} bytes to {dst:#x}", data.len()),
                message: e.to_string(),
            })
    }

    fn download(&self, src: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        let bytes = out.len();
        let _stream = self.stream_lock();
        self.gpu
            .download(src, out)
            .map_err(|e| DeviceError::Transfer {
                what: format!("download of {bytes} bytes from {src:#x}"),
                message: e.to_string(),
            })
    }

    fn load(&self, kernels: &[DeviceKernel]) -> Result<RuntimeModule, DeviceError> {
        let kernels = kernels
            .iter()
            .map(|k| self.load_kernel(k))
            .collect::<Result<_, _>>()?;
        Ok(RuntimeModule { kernels })
    }

    unsafe fn launch(
        &self,
        module: &RuntimeModule,
        kernel: usize,
        args: &[u64],
    ) -> Result<(), DeviceError> {
        let _stream = self.stream_lock();
        Self::enqueue(&self.gpu, module, kernel, args)
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.gpu.synchronize().map_err(|e| DeviceError::Launch {
            kernel: "(synchronize)".into(),
            message: e.to_string(),
        })
    }

    /// Events recorded on the stream before the first launch and after the last, under the
    /// stream lock (so no other thread's work falls between them); the time between them.
    unsafe fn time(
        &self,
        module: &RuntimeModule,
        launches: &[(usize, Vec<u64>)],
    ) -> Result<f64, DeviceError> {
        let fail = |e: CudaError| DeviceError::Launch {
            kernel: "(event timing)".into(),
            message: e.to_string(),
        };
        let (start, end) = {
            let _stream = self.stream_lock();
            let start = self.gpu.record_event().map_err(fail)?;
            for (kernel, args) in launches {
                Self::enqueue(&self.gpu, module, *kernel, args)?;
            }
            (start, self.gpu.record_event().map_err(fail)?)
        };
        let ms = start.elapsed_ms(&end).map_err(fail)?;
        // A fault of the kernels shows on the stream, not on the events.
        self.synchronize()?;
        Ok(f64::from(ms) * 1e-3)
    }

    unsafe fn capture(
        &self,
        module: &RuntimeModule,
        launches: &[(usize, Vec<u64>)],
    ) -> Result<CapturedGraph, DeviceError> {
        let _stream = self.stream_lock();
        let mut failed = None;
        let graph = self.gpu.capture(|gpu| {
            for (kernel, args) in launches {
                if let Err(e) = Self::enqueue(gpu, module, *kernel, args) {
                    let reason = e.to_string();
                    failed = Some(e);
                    return Err(CudaError::Launch {
                        kernel: format!("#{kernel}"),
                        reason,
                    });
                }
            }
            Ok(())
        });
        match (graph, failed) {
            (Ok(graph), _) => Ok(graph),
            (Err(_), Some(e)) => Err(e),
            (Err(e), None) => Err(DeviceError::Launch {
                kernel: "(graph capture)".into(),
                message: e.to_string(),
            }),
        }
    }

    unsafe fn replay(
        &self,
        _module: &RuntimeModule,
        graph: &CapturedGraph,
    ) -> Result<(), DeviceError> {
        let _stream = self.stream_lock();
        graph.replay().map_err(|e| DeviceError::Launch {
            kernel: "(graph replay)".into(),
            message: e.to_string(),
        })
    }
}
