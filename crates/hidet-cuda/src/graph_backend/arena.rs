//! An arena of the CUDA backend: one device allocation, freed when the arena is dropped,
//! and the conversions between host tensors and the bytes the device holds.

use std::sync::Arc;

use hidet_graph::compiled::BackendError;
use hidet_graph::{DType, Tensor};

use crate::device::GpuDevice;

/// One device allocation of `bytes` bytes at `ptr` (see the module docs).
#[derive(Debug)]
pub struct CudaArena<D: GpuDevice> {
    device: Arc<D>,
    ptr: u64,
    bytes: usize,
}

impl<D: GpuDevice> CudaArena<D> {
    /// A zero-filled arena of `bytes` bytes on `device`.
    pub fn new(device: Arc<D>, bytes: usize) -> Result<CudaArena<D>, BackendError> {
        let ptr = device
            .alloc(bytes)
            .map_err(|e| BackendError::Memory(e.to_string()))?;
        Ok(CudaArena { device, ptr, bytes })
    }

    /// The device address of the first byte.
    pub fn base(&self) -> u64 {
        self.ptr
    }

    /// Bytes in the arena.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the arena has no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    fn check(&self, offset: usize, len: usize) -> Result<u64, BackendError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.bytes => Ok(self.ptr + offset as u64),
            _ => Err(BackendError::Memory(format!(
                "{len} bytes at offset {offset} exceed the arena of {} bytes",
                self.bytes
            ))),
        }
    }

    /// Copies `tensor`'s elements to `offset`.
    pub fn write(&mut self, offset: usize, tensor: &Tensor) -> Result<(), BackendError> {
        let bytes = le_bytes(tensor)?;
        let dst = self.check(offset, bytes.len())?;
        self.device
            .upload(dst, &bytes)
            .map_err(|e| BackendError::Memory(e.to_string()))
    }

    /// Reads a tensor of `dtype` and `shape` at `offset`.
    pub fn read(
        &self,
        offset: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Tensor, BackendError> {
        let numel = hidet_graph::tensor::checked_numel(shape)
            .ok_or_else(|| BackendError::Memory(format!("shape {shape:?} is too large")))?;
        let len = numel
            .checked_mul(dtype.size_in_bytes())
            .ok_or_else(|| BackendError::Memory(format!("shape {shape:?} is too large")))?;
        let src = self.check(offset, len)?;
        let mut bytes = vec![0u8; len];
        if len > 0 {
            self.device
                .download(src, &mut bytes)
                .map_err(|e| BackendError::Memory(e.to_string()))?;
        }
        Tensor::from_le_bytes(dtype, shape.to_vec(), &bytes)
            .map_err(|e| BackendError::Memory(e.to_string()))
    }
}

impl<D: GpuDevice> Drop for CudaArena<D> {
    fn drop(&mut self) {
        // SAFETY: launches are synchronous in the backend (`launch` waits), so none that
        // uses this arena is in flight, and the pointer dies with the arena. A failed free
        // (the device lost the allocation) leaves nothing to clean up.
        let _ = unsafe { self.device.free(self.ptr) };
    }
}

/// `tensor`'s elements as the little-endian bytes a device stores (`bool` as one byte 0/1).
pub fn le_bytes(tensor: &Tensor) -> Result<Vec<u8>, BackendError> {
    fn bytes_of<T: hidet_graph::tensor::Element, const N: usize>(
        t: &Tensor,
        f: impl Fn(T) -> [u8; N],
    ) -> Result<Vec<u8>, BackendError> {
        let s = t
            .as_slice::<T>()
            .map_err(|e| BackendError::Memory(e.to_string()))?;
        Ok(s.iter().flat_map(|&x| f(x)).collect())
    }
    use hidet_graph::half::{bf16, f16};
    use hidet_graph::narrow;
    match tensor.dtype() {
        DType::F32 => bytes_of(tensor, f32::to_le_bytes),
        DType::F64 => bytes_of(tensor, f64::to_le_bytes),
        DType::F16 => bytes_of(tensor, |x: f16| x.to_bits().to_le_bytes()),
        DType::BF16 => bytes_of(tensor, |x: bf16| x.to_bits().to_le_bytes()),
        DType::I8 => bytes_of(tensor, i8::to_le_bytes),
        DType::I16 => bytes_of(tensor, i16::to_le_bytes),
        DType::I32 => bytes_of(tensor, i32::to_le_bytes),
        DType::I64 => bytes_of(tensor, i64::to_le_bytes),
        DType::U8 => bytes_of(tensor, u8::to_le_bytes),
        DType::U16 => bytes_of(tensor, u16::to_le_bytes),
        DType::U32 => bytes_of(tensor, u32::to_le_bytes),
        DType::U64 => bytes_of(tensor, u64::to_le_bytes),
        DType::Bool => bytes_of(tensor, |x: bool| [u8::from(x)]),
        // Storage-only types: their bytes (kernels never compute on them, see
        // `DType::to_ir`).
        DType::F8E4M3FN => bytes_of(tensor, |x: narrow::F8E4M3FN| [x.0]),
        DType::F8E4M3FNUZ => bytes_of(tensor, |x: narrow::F8E4M3FNUZ| [x.0]),
        DType::F8E5M2 => bytes_of(tensor, |x: narrow::F8E5M2| [x.0]),
        DType::F8E5M2FNUZ => bytes_of(tensor, |x: narrow::F8E5M2FNUZ| [x.0]),
        DType::I4 => bytes_of(tensor, |x: narrow::I4| x.0.to_le_bytes()),
        DType::U4 => bytes_of(tensor, |x: narrow::U4| [x.0]),
        other => Err(BackendError::Memory(format!(
            "{other} tensors cannot be stored on a GPU"
        ))),
    }
}
