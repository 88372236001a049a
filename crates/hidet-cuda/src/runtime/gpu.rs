//! [`Gpu`]: an opened CUDA device with one stream, and the operations on device addresses.

use super::context::Context;
use super::driver::{check, driver};
use crate::arch::Arch;
use crate::error::CudaError;
use cudarc::driver::sys;
use std::ffi::{c_int, CStr};
use std::sync::Arc;

/// What the driver reports about an opened device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device ordinal given to [`Gpu::open`].
    pub ordinal: usize,
    /// The marketing name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// The compute capability as an architecture (`sm_90`).
    pub arch: Arch,
    pub multiprocessors: u32,
    /// Total device memory in bytes.
    pub total_memory: usize,
    /// Shared memory one block may use with the opt-in attribute, in bytes (static and
    /// dynamic together).
    pub max_shared_per_block_optin: usize,
    pub max_threads_per_block: u32,
    /// The driver's CUDA version, 1000 × major + 10 × minor (13000 for CUDA 13.0).
    pub driver_version: i32,
}

/// An opened CUDA device: its primary context and one stream.
///
/// Every operation is enqueued on that stream, in call order; operations that read or write
/// host memory ([`Gpu::upload`], [`Gpu::download`]) wait for their copy to finish before
/// they return, the others ([`Gpu::copy_device`], [`Gpu::memset`], launches, graph replays)
/// return at once — [`Gpu::synchronize`] waits for them. Device memory is addressed by `u64`
/// device pointers; every address passed in is checked to lie inside a live allocation of
/// this `Gpu` ([`CudaError::InvalidDeviceRange`] otherwise). This runtime never maps host
/// memory into the device's address space, so a faulty kernel can corrupt device memory or
/// fault the context, never the host's memory.
///
/// `Gpu` is cheap to clone (clones share the stream) and may be used from any thread: each
/// call makes the context current on the calling thread first.
#[derive(Clone)]
pub struct Gpu {
    pub(crate) context: Arc<Context>,
    info: Arc<DeviceInfo>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("info", &*self.info).finish()
    }
}

impl Gpu {
    /// The number of CUDA devices. Fails with [`CudaError::DriverNotFound`] where there is no
    /// NVIDIA driver; 0 devices is `Ok(0)` (or [`CudaError::NoDevice`] when the driver
    /// refuses to initialise without one).
    pub fn device_count() -> Result<usize, CudaError> {
        driver()?;
        let mut count: c_int = 0;
        // SAFETY: the driver is initialised; the out-pointer is valid for writes.
        check("cuDeviceGetCount", unsafe {
            sys::cuDeviceGetCount(&mut count)
        })?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// Opens device `ordinal`: retains its primary context and creates a stream.
    ///
    /// On a machine without the driver library this is [`CudaError::DriverNotFound`], with a
    /// driver but no GPU [`CudaError::NoDevice`], with fewer devices
    /// [`CudaError::DeviceOrdinal`]; it never panics.
    pub fn open(ordinal: usize) -> Result<Gpu, CudaError> {
        let driver_version = driver()?.version;
        let count = Gpu::device_count()?;
        if count == 0 {
            return Err(CudaError::NoDevice {
                detail: "cuDeviceGetCount returned 0".to_string(),
            });
        }
        if ordinal >= count {
            return Err(CudaError::DeviceOrdinal { ordinal, count });
        }
        let mut device: sys::CUdevice = 0;
        // SAFETY: the driver is initialised; `ordinal` < the device count (fits c_int, as
        // the count did); the out-pointer is valid for writes.
        check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut device, ordinal as c_int)
        })?;
        let info = query_info(device, ordinal, driver_version)?;
        let context = Context::open(device, info.max_shared_per_block_optin)?;
        Ok(Gpu {
            context: Arc::new(context),
            info: Arc::new(info),
        })
    }

    /// [`Gpu::open`] of device 0.
    pub fn open_default() -> Result<Gpu, CudaError> {
        Gpu::open(0)
    }

    /// What the driver reported about this device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The device's architecture (its compute capability).
    pub fn arch(&self) -> Arch {
        self.info.arch
    }

    /// Free and total device memory in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize), CudaError> {
        self.context.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: a context is current; both out-pointers are valid for writes.
        check("cuMemGetInfo", unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok((free, total))
    }

    /// Copies `src` to device address `dst` and waits for the copy to finish (after all
    /// work enqueued before it).
    pub fn upload(&self, dst: u64, src: &[u8]) -> Result<(), CudaError> {
        self.context.check_range(dst, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.context.bind()?;
        // SAFETY: `dst..dst+len` lies in a live device allocation (checked above); `src` is
        // valid for `len` bytes and stays borrowed until the stream is synchronized below,
        // after which the driver no longer reads it.
        check("cuMemcpyHtoDAsync", unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), self.context.stream)
        })?;
        self.context.synchronize()
    }

    /// Copies `dst.len()` bytes from device address `src` into `dst`, after all work
    /// enqueued before it, and waits for the copy to finish.
    pub fn download(&self, src: u64, dst: &mut [u8]) -> Result<(), CudaError> {
        self.context.check_range(src, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.context.bind()?;
        // SAFETY: `src..src+len` lies in a live device allocation (checked above); `dst` is
        // valid for writes of `len` bytes and stays mutably borrowed until the stream is
        // synchronized below, after which the driver no longer writes it.
        check("cuMemcpyDtoHAsync", unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), src, dst.len(), self.context.stream)
        })?;
        self.context.synchronize()
    }

    /// Enqueues a copy of `bytes` bytes from device address `src` to `dst` (the ranges may
    /// not overlap). Capturable into a CUDA graph.
    pub fn copy_device(&self, dst: u64, src: u64, bytes: usize) -> Result<(), CudaError> {
        self.context.check_range(dst, bytes)?;
        self.context.check_range(src, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        self.context.bind()?;
        // SAFETY: both ranges lie in live device allocations of this context (checked).
        check("cuMemcpyDtoDAsync", unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.context.stream)
        })
    }

    /// Enqueues setting `bytes` bytes at device address `dst` to `value`. Capturable into a
    /// CUDA graph.
    pub fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<(), CudaError> {
        self.context.check_range(dst, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        self.context.bind()?;
        // SAFETY: the range lies in a live device allocation of this context (checked).
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(dst, value, bytes, self.context.stream)
        })
    }

    /// Waits until everything enqueued on the stream has finished; reports errors of
    /// earlier asynchronous work (a kernel fault) too.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.context.synchronize()
    }
}

fn query_info(
    device: sys::CUdevice,
    ordinal: usize,
    driver_version: i32,
) -> Result<DeviceInfo, CudaError> {
    use sys::CUdevice_attribute::*;
    let attribute = |attribute: sys::CUdevice_attribute| -> Result<i32, CudaError> {
        let mut value: c_int = 0;
        // SAFETY: the driver is initialised; `device` came from cuDeviceGet; the
        // out-pointer is valid for writes.
        check("cuDeviceGetAttribute", unsafe {
            sys::cuDeviceGetAttribute(&mut value, attribute, device)
        })?;
        Ok(value)
    };
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer holds `len` bytes; the driver writes a NUL-terminated name into it.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, device)
    })?;
    // SAFETY: the driver NUL-terminated the name inside the buffer.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let mut total_memory = 0usize;
    // SAFETY: as for the attributes.
    check("cuDeviceTotalMem", unsafe {
        sys::cuDeviceTotalMem_v2(&mut total_memory, device)
    })?;
    let major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let capability = u32::try_from(major * 10 + minor).unwrap_or(0);
    Ok(DeviceInfo {
        ordinal,
        name,
        arch: Arch::new(capability)?,
        multiprocessors: attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        total_memory,
        max_shared_per_block_optin: attribute(
            CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )? as usize,
        max_threads_per_block: attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)? as u32,
        driver_version,
    })
}
