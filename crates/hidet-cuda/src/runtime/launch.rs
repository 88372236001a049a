//! Launching a [`Kernel`]: the grid, block and dynamic shared memory ([`LaunchConfig`]) and
//! the arguments ([`KernelParam`]).

use super::driver::check;
use super::gpu::Gpu;
use super::module::Kernel;
use crate::error::CudaError;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Arc;

/// Shared memory a block may use without raising the kernel's attribute, in bytes.
pub const DEFAULT_SHARED_LIMIT: usize = 48 * 1024;

/// The shape of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks along x, y, z (each at least 1).
    pub grid: [u32; 3],
    /// Threads per block along x, y, z (each at least 1).
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub dynamic_shared_bytes: u32,
}

impl LaunchConfig {
    /// `grid` blocks of `block` threads, no dynamic shared memory.
    pub fn new(grid: [u32; 3], block: [u32; 3]) -> LaunchConfig {
        LaunchConfig {
            grid,
            block,
            dynamic_shared_bytes: 0,
        }
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub fn with_dynamic_shared(self, bytes: u32) -> LaunchConfig {
        LaunchConfig {
            dynamic_shared_bytes: bytes,
            ..self
        }
    }

    /// Threads per block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&d| u64::from(d)).product()
    }
}

/// One kernel argument, passed by value. A pointer argument is a device address that must
/// lie in (or at the end of) a live allocation of the launching [`Gpu`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelParam {
    /// A device pointer (`T*`).
    Ptr(u64),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl KernelParam {
    /// The size of the argument in bytes, as the kernel's parameter must have.
    pub fn size(&self) -> usize {
        match self {
            KernelParam::I32(_) | KernelParam::U32(_) | KernelParam::F32(_) => 4,
            KernelParam::Ptr(_)
            | KernelParam::I64(_)
            | KernelParam::U64(_)
            | KernelParam::F64(_) => 8,
        }
    }

    fn slot(&self) -> Slot {
        let mut bytes = [0u8; 8];
        match *self {
            KernelParam::Ptr(v) | KernelParam::U64(v) => bytes.copy_from_slice(&v.to_ne_bytes()),
            KernelParam::I64(v) => bytes.copy_from_slice(&v.to_ne_bytes()),
            KernelParam::F64(v) => bytes.copy_from_slice(&v.to_ne_bytes()),
            KernelParam::I32(v) => bytes[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelParam::U32(v) => bytes[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelParam::F32(v) => bytes[..4].copy_from_slice(&v.to_ne_bytes()),
        }
        Slot(bytes)
    }
}

/// One argument's bytes, aligned for any scalar.
#[repr(C, align(8))]
struct Slot([u8; 8]);

impl Gpu {
    /// Enqueues `kernel` on this GPU's stream with `config` and `params`.
    ///
    /// Checked before anything is enqueued: the kernel belongs to this GPU; the grid and
    /// block are non-empty and the block fits the kernel; the arguments match the kernel's
    /// parameters in number and size (where the driver reports them); every
    /// [`KernelParam::Ptr`] lies in a live allocation of this GPU. Dynamic shared memory
    /// above the kernel's current limit (48 KiB minus its static shared memory until raised)
    /// raises the limit first ([`Kernel::set_max_dynamic_shared_bytes`]), up to the device's
    /// opt-in maximum. Errors of the kernel itself surface at the next synchronizing call.
    pub fn launch(
        &self,
        kernel: &Kernel,
        config: &LaunchConfig,
        params: &[KernelParam],
    ) -> Result<(), CudaError> {
        let fail = |reason: String| CudaError::Launch {
            kernel: kernel.name().to_string(),
            reason,
        };
        if !Arc::ptr_eq(&kernel.module.context, &self.context) {
            return Err(fail("the kernel was loaded by another Gpu".to_string()));
        }
        if config.grid.contains(&0) || config.block.contains(&0) {
            return Err(fail(format!(
                "empty grid {:?} or block {:?}",
                config.grid, config.block
            )));
        }
        if config.threads_per_block() > u64::from(kernel.max_threads_per_block()) {
            return Err(fail(format!(
                "{} threads per block; the kernel allows at most {}",
                config.threads_per_block(),
                kernel.max_threads_per_block()
            )));
        }
        if let Some(sizes) = kernel.param_sizes() {
            let given: Vec<usize> = params.iter().map(KernelParam::size).collect();
            if given != sizes {
                return Err(fail(format!(
                    "argument sizes {given:?} do not match the kernel's parameters {sizes:?}"
                )));
            }
        }
        for param in params {
            if let KernelParam::Ptr(address) = *param {
                self.context
                    .check_range(address, 0)
                    .map_err(|e| fail(format!("pointer argument: {e}")))?;
            }
        }
        let dynamic = config.dynamic_shared_bytes as usize;
        if dynamic > kernel.max_dynamic_shared_bytes() {
            kernel.set_max_dynamic_shared_bytes(dynamic)?;
        }
        let slots: Vec<Slot> = params.iter().map(KernelParam::slot).collect();
        let mut pointers: Vec<*mut c_void> = slots
            .iter()
            .map(|s| s.0.as_ptr().cast_mut().cast())
            .collect();
        self.context.bind()?;
        let [gx, gy, gz] = config.grid;
        let [bx, by, bz] = config.block;
        // SAFETY: the function is live in the current context (its module is held by
        // `kernel`); `pointers` holds one pointer per kernel parameter (count and sizes
        // checked against the driver's report above), each to 8 readable bytes that outlive
        // the call (the driver copies the arguments before returning); `extra` is null.
        let rc = unsafe {
            sys::cuLaunchKernel(
                kernel.function,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                config.dynamic_shared_bytes,
                self.context.stream,
                pointers.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check("cuLaunchKernel", rc)?;
        self.context.note_launch(&kernel.module);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_packed_in_native_order_at_the_start_of_their_slot() {
        let p = KernelParam::Ptr(0x1234_5678_9abc_def0).slot();
        assert_eq!(p.0, 0x1234_5678_9abc_def0u64.to_ne_bytes());
        let i = KernelParam::I32(-7).slot();
        assert_eq!(&i.0[..4], &(-7i32).to_ne_bytes());
        assert_eq!(&i.0[4..], &[0; 4]);
        let f = KernelParam::F32(1.5).slot();
        assert_eq!(&f.0[..4], &1.5f32.to_ne_bytes());
        let d = KernelParam::F64(-2.25).slot();
        assert_eq!(d.0, (-2.25f64).to_ne_bytes());
        assert_eq!(std::mem::align_of::<Slot>(), 8);
    }

    #[test]
    fn argument_sizes_follow_their_c_types() {
        let sizes: Vec<usize> = [
            KernelParam::Ptr(0),
            KernelParam::I32(0),
            KernelParam::U32(0),
            KernelParam::I64(0),
            KernelParam::U64(0),
            KernelParam::F32(0.0),
            KernelParam::F64(0.0),
        ]
        .iter()
        .map(KernelParam::size)
        .collect();
        assert_eq!(sizes, [8, 4, 4, 8, 8, 4, 8]);
    }

    #[test]
    fn launch_config_counts_threads_and_carries_dynamic_shared_memory() {
        let c = LaunchConfig::new([8, 4, 1], [32, 4, 2]).with_dynamic_shared(96 * 1024);
        assert_eq!(c.threads_per_block(), 256);
        assert_eq!(c.dynamic_shared_bytes, 96 * 1024);
        assert_eq!(c.grid, [8, 4, 1]);
    }
}
