//! Loading cubin/PTX images into a device ([`LoadedModule`]) and looking kernels up in them
//! ([`Kernel`]).

use super::context::Context;
use super::driver::{check, describe};
use super::gpu::Gpu;
use crate::error::CudaError;
use crate::image::{ImageKind, KernelImage};
use cudarc::driver::sys;
use std::ffi::{c_int, c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The size of the JIT error log buffer, in bytes.
const JIT_LOG_BYTES: usize = 16 * 1024;

/// A loaded `CUmodule`, unloaded when the last [`LoadedModule`], [`Kernel`] or captured
/// graph using it is dropped.
pub(crate) struct ModuleHandle {
    pub(crate) context: Arc<Context>,
    module: sys::CUmodule,
}

// SAFETY: a CUmodule may be used from any thread whose current context is its context; every
// use binds the context first.
unsafe impl Send for ModuleHandle {}
// SAFETY: as above; the driver API is thread-safe for modules.
unsafe impl Sync for ModuleHandle {}

impl Drop for ModuleHandle {
    fn drop(&mut self) {
        // Launches of its kernels may still run on the stream: wait for them first. (A
        // failed wait, e.g. after a kernel fault, still unloads: the context is unusable.)
        if self.context.synchronize().is_ok() || self.context.bind().is_ok() {
            // SAFETY: the module was loaded in this context and is unloaded exactly once;
            // no kernel or graph refers to it any more (they hold this handle), and the
            // stream has drained (or the context failed, and nothing can run in it).
            unsafe {
                sys::cuModuleUnload(self.module);
            }
        }
    }
}

/// A cubin or PTX image loaded into a device.
#[derive(Clone)]
pub struct LoadedModule {
    handle: Arc<ModuleHandle>,
    kind: ImageKind,
}

impl std::fmt::Debug for LoadedModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedModule({})", self.kind)
    }
}

/// A kernel (`__global__` function) of a loaded module, with the attributes a launch is
/// checked against. Keeps its module loaded.
pub struct Kernel {
    pub(crate) module: Arc<ModuleHandle>,
    pub(crate) function: sys::CUfunction,
    name: String,
    /// Byte sizes of the parameters, as the driver reports them (`cuFuncGetParamInfo`);
    /// `None` when the driver cannot tell.
    param_sizes: Option<Vec<usize>>,
    max_threads_per_block: u32,
    static_shared_bytes: usize,
    registers: u32,
    /// The current `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
    max_dynamic_shared: AtomicUsize,
}

// SAFETY: a CUfunction may be used from any thread whose current context is its module's;
// every use binds that context first. The mutable attribute is atomic.
unsafe impl Send for Kernel {}
// SAFETY: as above.
unsafe impl Sync for Kernel {}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("param_sizes", &self.param_sizes)
            .field("max_threads_per_block", &self.max_threads_per_block)
            .field("static_shared_bytes", &self.static_shared_bytes)
            .field("registers", &self.registers)
            .finish()
    }
}

impl Gpu {
    /// Loads `image` into this device. A cubin must be for this device's architecture
    /// family; PTX is JIT-compiled by the driver for this device (a failure carries the
    /// JIT's log).
    pub fn load_module(&self, image: &KernelImage) -> Result<LoadedModule, CudaError> {
        // The image is copied into 8-byte aligned storage (ELF headers are read in place)
        // and, for PTX, NUL-terminated.
        let mut words = vec![0u64; image.bytes.len().div_ceil(8) + 1];
        for (word, chunk) in words.iter_mut().zip(image.bytes.chunks(8)) {
            let mut bytes = [0u8; 8];
            bytes[..chunk.len()].copy_from_slice(chunk);
            *word = u64::from_ne_bytes(bytes);
        }
        let mut log = vec![0u8; JIT_LOG_BYTES];
        let mut options = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), JIT_LOG_BYTES as *mut c_void];
        self.context.bind()?;
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: a context is current; `words` holds the whole image (NUL-padded) and
        // outlives the call; the two options take a writable buffer of JIT_LOG_BYTES bytes
        // (which outlives the call) and that size passed by value in the pointer, as
        // cuModuleLoadDataEx documents.
        let rc = unsafe {
            sys::cuModuleLoadDataEx(
                &mut module,
                words.as_ptr().cast(),
                options.len() as std::ffi::c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if rc != sys::CUresult::CUDA_SUCCESS {
            let (name, message) = describe(rc);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let jit_log = String::from_utf8_lossy(&log[..end]).trim().to_string();
            return Err(CudaError::ModuleLoad {
                kind: match image.kind {
                    ImageKind::Cubin => "cubin",
                    ImageKind::Ptx => "PTX",
                },
                code: rc as i32,
                name,
                log: if jit_log.is_empty() { message } else { jit_log },
            });
        }
        Ok(LoadedModule {
            handle: Arc::new(ModuleHandle {
                context: Arc::clone(&self.context),
                module,
            }),
            kind: image.kind,
        })
    }
}

impl LoadedModule {
    /// The kind of image the module was loaded from.
    pub fn kind(&self) -> ImageKind {
        self.kind
    }

    /// The kernel called `name` (its `extern "C"` or mangled name), with its attributes.
    pub fn kernel(&self, name: &str) -> Result<Kernel, CudaError> {
        let c_name = CString::new(name).map_err(|_| CudaError::NulByte {
            what: "kernel name",
        })?;
        self.handle.context.bind()?;
        let mut function: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: the module is loaded in the current context; the name is NUL-terminated
        // and outlives the call; the out-pointer is valid for writes.
        let rc =
            unsafe { sys::cuModuleGetFunction(&mut function, self.handle.module, c_name.as_ptr()) };
        if rc == sys::CUresult::CUDA_ERROR_NOT_FOUND {
            return Err(CudaError::KernelNotFound {
                name: name.to_string(),
            });
        }
        check("cuModuleGetFunction", rc)?;
        use sys::CUfunction_attribute::*;
        let attribute = |attribute: sys::CUfunction_attribute| -> Result<usize, CudaError> {
            let mut value: c_int = 0;
            // SAFETY: `function` is a live function of the current context; the
            // out-pointer is valid for writes.
            check("cuFuncGetAttribute", unsafe {
                sys::cuFuncGetAttribute(&mut value, attribute, function)
            })?;
            Ok(usize::try_from(value).unwrap_or(0))
        };
        Ok(Kernel {
            module: Arc::clone(&self.handle),
            function,
            name: name.to_string(),
            param_sizes: param_sizes(function)?,
            max_threads_per_block: attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)? as u32,
            static_shared_bytes: attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            registers: attribute(CU_FUNC_ATTRIBUTE_NUM_REGS)? as u32,
            max_dynamic_shared: AtomicUsize::new(attribute(
                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            )?),
        })
    }
}

/// The parameters' byte sizes, or `None` where the driver does not report them.
fn param_sizes(function: sys::CUfunction) -> Result<Option<Vec<usize>>, CudaError> {
    let mut sizes = Vec::new();
    // A kernel has at most 32764 bytes of parameters, so at most that many parameters.
    for index in 0..32_768usize {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `function` is a live function of the current context; both out-pointers
        // are valid for writes.
        let rc = unsafe { sys::cuFuncGetParamInfo(function, index, &mut offset, &mut size) };
        match rc {
            sys::CUresult::CUDA_SUCCESS => sizes.push(size),
            // One past the last parameter.
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Ok(Some(sizes)),
            _ if index == 0 => return Ok(None),
            other => return check("cuFuncGetParamInfo", other).map(|()| None),
        }
    }
    Ok(None)
}

impl Kernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The byte size of each parameter, when the driver reports them.
    pub fn param_sizes(&self) -> Option<&[usize]> {
        self.param_sizes.as_deref()
    }

    /// The most threads a block of this kernel may have (its registers and
    /// `__launch_bounds__` limit it).
    pub fn max_threads_per_block(&self) -> u32 {
        self.max_threads_per_block
    }

    /// Statically declared shared memory per block, in bytes.
    pub fn static_shared_bytes(&self) -> usize {
        self.static_shared_bytes
    }

    /// Registers per thread.
    pub fn registers(&self) -> u32 {
        self.registers
    }

    /// The dynamic shared memory a launch may currently ask for, in bytes (48 KiB minus the
    /// static shared memory until raised).
    pub fn max_dynamic_shared_bytes(&self) -> usize {
        self.max_dynamic_shared.load(Ordering::Relaxed)
    }

    /// Raises (or lowers) the dynamic shared memory launches may ask for to `bytes`: needed
    /// above 48 KiB. Fails when static plus dynamic shared memory would exceed the device's
    /// opt-in limit.
    pub fn set_max_dynamic_shared_bytes(&self, bytes: usize) -> Result<(), CudaError> {
        let limit = self.module.context.max_shared_optin;
        if self.static_shared_bytes + bytes > limit {
            return Err(CudaError::Launch {
                kernel: self.name.clone(),
                reason: format!(
                    "{bytes} bytes of dynamic shared memory plus {} static exceed the device's {limit} per block",
                    self.static_shared_bytes
                ),
            });
        }
        let value = c_int::try_from(bytes).map_err(|_| CudaError::Launch {
            kernel: self.name.clone(),
            reason: format!("{bytes} bytes of dynamic shared memory do not fit an int"),
        })?;
        self.module.context.bind()?;
        // SAFETY: `function` is a live function of the current context.
        check("cuFuncSetAttribute", unsafe {
            sys::cuFuncSetAttribute(
                self.function,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                value,
            )
        })?;
        self.max_dynamic_shared.store(bytes, Ordering::Relaxed);
        Ok(())
    }
}
