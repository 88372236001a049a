//! [`DeviceBuffer`]: one device allocation, freed on drop, addressed by a `u64` pointer.

use super::context::Context;
use super::driver::check;
use super::gpu::Gpu;
use crate::error::CudaError;
use cudarc::driver::sys;
use std::sync::Arc;

/// The alignment `cuMemAlloc` guarantees, in bytes.
pub const DRIVER_ALIGNMENT: usize = 256;

/// A device allocation of [`DeviceBuffer::len`] bytes starting at [`DeviceBuffer::ptr`],
/// aligned as asked. Freed when dropped (the driver waits for work that still uses it).
/// Its contents start undefined.
pub struct DeviceBuffer {
    gpu: Gpu,
    /// What `cuMemAlloc` returned (freed on drop).
    base: u64,
    /// The aligned start handed out.
    ptr: u64,
    bytes: usize,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({:#x}, {} bytes)", self.ptr, self.bytes)
    }
}

impl Gpu {
    /// Allocates `bytes` bytes of device memory whose start is a multiple of `align` (a
    /// power of two; up to [`DRIVER_ALIGNMENT`] costs nothing extra, more over-allocates by
    /// `align`). A zero-byte buffer still has a distinct, valid address.
    pub fn alloc(&self, bytes: usize, align: usize) -> Result<DeviceBuffer, CudaError> {
        if !align.is_power_of_two() {
            return Err(CudaError::BadAlignment(align));
        }
        let padding = if align > DRIVER_ALIGNMENT { align } else { 0 };
        let (mut base, mut ptr) = self.alloc_raw(bytes, padding, align)?;
        if ptr + bytes as u64 > base + (bytes.max(1) + padding) as u64 {
            // The driver returned less alignment than it guarantees: pad and try again.
            // SAFETY: `base` came from cuMemAlloc just now and is not referenced elsewhere.
            unsafe {
                sys::cuMemFree_v2(base);
            }
            (base, ptr) = self.alloc_raw(bytes, align, align)?;
        }
        self.context.register(ptr, bytes);
        Ok(DeviceBuffer {
            gpu: self.clone(),
            base,
            ptr,
            bytes,
        })
    }

    /// `cuMemAlloc` of `max(bytes, 1) + padding` bytes: the base and its first multiple of
    /// `align`.
    fn alloc_raw(
        &self,
        bytes: usize,
        padding: usize,
        align: usize,
    ) -> Result<(u64, u64), CudaError> {
        let request = bytes.max(1).checked_add(padding).ok_or(CudaError::Driver {
            call: "cuMemAlloc",
            code: 2,
            name: "CUDA_ERROR_OUT_OF_MEMORY".to_string(),
            message: format!("{bytes} bytes aligned to {align} overflow the address space"),
        })?;
        self.context.bind()?;
        let mut base: sys::CUdeviceptr = 0;
        // SAFETY: a context is current; the out-pointer is valid for writes.
        check("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut base, request)
        })?;
        Ok((base, base.next_multiple_of(align as u64)))
    }
}

impl DeviceBuffer {
    /// The device address of the first byte.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the buffer holds zero bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The device the buffer lives on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The device address `offset` bytes in; fails past the end.
    pub fn ptr_at(&self, offset: usize) -> Result<u64, CudaError> {
        if offset > self.bytes {
            return Err(CudaError::InvalidDeviceRange {
                address: self.ptr.wrapping_add(offset as u64),
                bytes: 0,
            });
        }
        Ok(self.ptr + offset as u64)
    }

    /// Copies `src` into the buffer at byte `offset` ([`Gpu::upload`]).
    pub fn upload(&self, offset: usize, src: &[u8]) -> Result<(), CudaError> {
        self.gpu.upload(self.ptr_at(offset)?, src)
    }

    /// Fills `dst` from the buffer at byte `offset` ([`Gpu::download`]).
    pub fn download(&self, offset: usize, dst: &mut [u8]) -> Result<(), CudaError> {
        self.gpu.download(self.ptr_at(offset)?, dst)
    }

    /// Copies `values` to the start of the buffer.
    pub fn upload_f32(&self, values: &[f32]) -> Result<(), CudaError> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        self.upload(0, &bytes)
    }

    /// The first `count` `f32` values of the buffer.
    pub fn download_f32(&self, count: usize) -> Result<Vec<f32>, CudaError> {
        let mut bytes = vec![0u8; count * 4];
        self.download(0, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Enqueues setting every byte to zero.
    pub fn zero(&self) -> Result<(), CudaError> {
        self.gpu.memset(self.ptr, 0, self.bytes)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let context: &Arc<Context> = &self.gpu.context;
        context.unregister(self.ptr);
        if context.bind().is_ok() {
            // SAFETY: `base` came from cuMemAlloc in this context and is freed exactly once;
            // its range was unregistered above, so no later call of this runtime can name it.
            unsafe {
                sys::cuMemFree_v2(self.base);
            }
        }
    }
}
