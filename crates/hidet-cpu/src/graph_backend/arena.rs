//! Host memory arenas for compiled graphs.

use hidet_graph::{DType, Tensor};

use hidet_graph::compiled::BackendError;

/// One 64-byte, 64-aligned block of arena storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// A zero-initialized, 64-byte aligned block of host memory. Every access, by kernels and by
/// [`CpuArena::write`]/[`CpuArena::read`] alike, goes through the base address taken once at
/// allocation; the vector only owns the storage.
pub struct CpuArena {
    blocks: Vec<Block>,
    base: u64,
    bytes: usize,
}

impl std::fmt::Debug for CpuArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuArena")
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl CpuArena {
    /// `bytes` zero bytes.
    pub fn new(bytes: usize) -> Result<CpuArena, BackendError> {
        let count = bytes.div_ceil(64);
        let mut blocks: Vec<Block> = Vec::new();
        blocks
            .try_reserve_exact(count)
            .map_err(|e| BackendError::Memory(format!("cannot allocate {bytes} bytes: {e}")))?;
        super::huge_pages::advise(blocks.as_ptr().cast(), count * 64);
        blocks.resize(count, Block([0; 64]));
        let base = blocks.as_mut_ptr() as usize as u64;
        Ok(CpuArena {
            blocks,
            base,
            bytes: count * 64,
        })
    }

    /// The address of the first byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), BackendError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.bytes => Ok(()),
            _ => Err(BackendError::Memory(format!(
                "{len} bytes at offset {offset} exceed the arena of {} bytes",
                self.bytes
            ))),
        }
    }

    /// Copies `tensor`'s elements to `offset`.
    pub fn write(&mut self, offset: usize, tensor: &Tensor) -> Result<(), BackendError> {
        let len = tensor.size_in_bytes();
        self.check(offset, len)?;
        let src = element_bytes(tensor)?;
        let dst = (self.base as usize + offset) as *mut u8;
        // SAFETY: `check` keeps `[offset, offset + len)` inside this arena, which `&mut self`
        // borrows exclusively; the source is the tensor's element buffer of exactly `len`
        // bytes (element types are plain data without padding); the two cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        Ok(())
    }

    /// A tensor of `dtype` and `shape` read from `offset`.
    pub fn read(
        &self,
        offset: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Tensor, BackendError> {
        let numel = hidet_graph::tensor::checked_numel(shape)
            .ok_or_else(|| BackendError::Memory(format!("shape {shape:?} is too large")))?;
        let len = numel * dtype.size_in_bytes();
        self.check(offset, len)?;
        let src = (self.base as usize + offset) as *const u8;
        let tensor = hidet_graph::dispatch_dtypes!(dtype, T => {
            let mut elements: Vec<T> = Vec::with_capacity(numel);
            // SAFETY: the range lies inside this arena (checked above), which is initialized
            // (zeroed at allocation, then written by kernels and `write` in the host's byte
            // order) and not written while `&self` is held by the caller's run; the
            // destination has capacity for exactly `numel` elements of `len` bytes, all of
            // which the copy initializes before `set_len`, and every bit pattern is a valid
            // value of these element types (plain numbers).
            unsafe {
                std::ptr::copy_nonoverlapping(src, elements.as_mut_ptr().cast::<u8>(), len);
                elements.set_len(numel);
            };
            Tensor::new(shape.to_vec(), elements)
        }, else {
            // SAFETY: as above, for the bytes only; the element-wise conversion checks them.
            let bytes = unsafe { std::slice::from_raw_parts(src, len) };
            Tensor::from_le_bytes(dtype, shape.to_vec(), bytes)
        };
            F32: f32, F64: f64, F16: hidet_graph::half::f16, BF16: hidet_graph::half::bf16,
            I8: i8, I16: i16, I32: i32, I64: i64, U8: u8, U16: u16, U32: u32, U64: u64);
        tensor.map_err(|e| BackendError::Memory(e.to_string()))
    }
}

/// The first byte of `tensor`'s element buffer (`size_in_bytes()` bytes of plain data).
pub fn element_bytes(tensor: &Tensor) -> Result<*const u8, BackendError> {
    Ok(
        hidet_graph::dispatch_all!(tensor.dtype(), T => match tensor.as_slice::<T>() {
            Ok(s) => s.as_ptr().cast::<u8>(),
            Err(e) => return Err(BackendError::Memory(e.to_string())),
        }),
    )
}
