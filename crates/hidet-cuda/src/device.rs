//! The device abstraction under the CUDA graph backend ([`crate::graph_backend`]): memory
//! addressed by `u64` device pointers, kernels loaded as a module, launches on pointers.
//!
//! Two implementations are meant to exist: the simulator device ([`crate::sim_device`],
//! host memory standing for device memory, kernels run by [`crate::sim::Simulator`]) and a
//! real GPU through the CUDA driver API (a separate runtime; not part of this file). The
//! backend only ever talks to this trait, so it runs unchanged on either.

use std::fmt;

use hidet_ir::dtype::DataType;
use hidet_ir::function::IRModule;

/// Errors of a device.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DeviceError {
    /// An allocation failed (out of memory, or a size the device cannot address).
    #[error("allocating {bytes} bytes: {message}")]
    Alloc { bytes: usize, message: String },
    /// A pointer range lies outside every live allocation.
    #[error("{what}: {bytes} bytes at {address:#x} are not inside one live allocation")]
    BadAddress {
        what: String,
        address: u64,
        bytes: usize,
    },
    /// A kernel could not be loaded (compiled, prepared for simulation, linked).
    #[error("loading kernel `{kernel}`: {message}")]
    Load { kernel: String, message: String },
    /// A launch failed or faulted.
    #[error("kernel `{kernel}`: {message}")]
    Launch { kernel: String, message: String },
    /// A copy between host and device failed.
    #[error("{what}: {message}")]
    Transfer { what: String, message: String },
    /// The device has no runtime on this machine.
    #[error("{0}")]
    Unavailable(String),
}

/// One tensor parameter of a kernel: a dense buffer of `elements` values of `dtype`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelParam {
    pub name: String,
    pub dtype: DataType,
    pub elements: usize,
    /// Whether the kernel writes it (the kernel then writes every element exactly once and
    /// reads none before writing it).
    pub written: bool,
}

impl KernelParam {
    /// Bytes the buffer takes.
    pub fn bytes(&self) -> usize {
        self.elements * self.dtype.bytes()
    }
}

/// A kernel ready for a device: its IR (for the simulator), its CUDA C (for NVRTC on a real
/// GPU), and the launch configuration, all constant.
///
/// Contract: `module` holds a CUDA kernel named `name` (plus any helpers) whose parameters
/// are exactly `params`, in order, all tensors; it launches on `grid` blocks of `block`
/// threads with `dynamic_shared_bytes` of dynamic shared memory.
#[derive(Debug, Clone)]
pub struct DeviceKernel {
    pub name: String,
    pub module: IRModule,
    /// The module as CUDA C (`crate::emit_cuda`).
    pub source: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared_bytes: u32,
    pub params: Vec<KernelParam>,
}

/// A GPU, real or simulated (see the module docs).
///
/// Addresses are device pointers as `u64`. Implementations must reject (with
/// [`DeviceError::BadAddress`]) any copy whose range is not inside one live allocation they
/// made, so that the safe copy methods cannot corrupt memory.
pub trait GpuDevice: Send + Sync + fmt::Debug {
    /// Loaded kernels (one module per compiled model).
    type Module: Send + Sync + fmt::Debug;

    /// A recorded sequence of launches, replayed as one unit (a CUDA graph).
    type Graph: Send + Sync + fmt::Debug;

    /// A short name for reports (`"cuda-sim"`, `"cuda"`).
    fn name(&self) -> &'static str;

    /// The alignment of every allocation and the one the memory plan must keep inside an
    /// arena (bytes).
    fn alignment(&self) -> usize {
        256
    }

    /// A zero-filled allocation of `bytes` bytes (at least one byte is allocated), aligned to
    /// [`GpuDevice::alignment`].
    fn alloc(&self, bytes: usize) -> Result<u64, DeviceError>;

    /// Frees an allocation made by [`GpuDevice::alloc`].
    ///
    /// # Safety
    /// No launch that uses the allocation may be in flight, and the pointer must not be used
    /// again.
    unsafe fn free(&self, ptr: u64) -> Result<(), DeviceError>;

    /// Copies `data` to device address `dst`.
    fn upload(&self, dst: u64, data: &[u8]) -> Result<(), DeviceError>;

    /// Copies `out.len()` bytes from device address `src` into `out`.
    fn download(&self, src: u64, out: &mut [u8]) -> Result<(), DeviceError>;

    /// Loads kernels; kernel `i` of the module is `kernels[i]`.
    fn load(&self, kernels: &[DeviceKernel]) -> Result<Self::Module, DeviceError>;

    /// Launches kernel `kernel` of `module` on one device pointer per parameter (with the
    /// launch configuration of its [`DeviceKernel`]). It may return before the kernel
    /// finishes; [`GpuDevice::synchronize`] waits. Launches (and graph replays) run in the
    /// order they were made, each after the previous one finished (one stream).
    ///
    /// # Safety
    /// Each pointer must lie in a live allocation of this device with the parameter's bytes
    /// available; written buffers must not overlap any other argument nor be touched by
    /// anything else until the launch has finished.
    unsafe fn launch(
        &self,
        module: &Self::Module,
        kernel: usize,
        args: &[u64],
    ) -> Result<(), DeviceError>;

    /// Waits for every launch so far.
    fn synchronize(&self) -> Result<(), DeviceError>;

    /// Runs `launches` — `(kernel of module, one device pointer per parameter)`, in order, as
    /// [`GpuDevice::launch`] each — between two timing marks on the device's stream, waits for
    /// them, and returns the device's time between the marks in seconds (a GPU's events: no
    /// launch or synchronization overhead of the host is counted). A device that cannot time
    /// (the simulator: its time is the CPU's, block after block) fails with
    /// [`DeviceError::Unavailable`], running nothing: the default.
    ///
    /// # Safety
    /// As for [`GpuDevice::launch`], for every launch.
    unsafe fn time(
        &self,
        module: &Self::Module,
        launches: &[(usize, Vec<u64>)],
    ) -> Result<f64, DeviceError> {
        let _ = (module, launches);
        Err(DeviceError::Unavailable(format!(
            "the {} device cannot time kernels",
            self.name()
        )))
    }

    /// Records `launches` — `(kernel of module, one device pointer per parameter)`, in order —
    /// as one graph, without running them. No other work of this device is recorded into it,
    /// whatever other threads do meanwhile.
    ///
    /// # Safety
    /// As for [`GpuDevice::launch`], for every launch, whenever the graph is replayed: the
    /// pointers must then lie in live allocations, and each launch's written buffers must not
    /// overlap its other arguments. Later launches of the list may read what earlier ones
    /// wrote (they run in order).
    unsafe fn capture(
        &self,
        module: &Self::Module,
        launches: &[(usize, Vec<u64>)],
    ) -> Result<Self::Graph, DeviceError>;

    /// Enqueues one run of `graph` (captured from `module`'s kernels): its launches in order,
    /// after everything enqueued before. [`GpuDevice::synchronize`] waits for it.
    ///
    /// # Safety
    /// The capture's contract must hold now (every pointer live, nothing else touching the
    /// written buffers until the replay has finished).
    unsafe fn replay(&self, module: &Self::Module, graph: &Self::Graph) -> Result<(), DeviceError>;
}
