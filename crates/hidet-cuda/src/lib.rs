//! The CUDA backend of hidet.
//!
//! - [`nvrtc`]: compiles CUDA C to PTX or cubins with NVRTC, loaded at run time (no
//!   CUDA toolkit is needed to build this crate);
//! - [`cache`]: the content-addressed on-disk cache of cubins and PTX, which lets kernels
//!   compiled on a machine without a GPU be carried to one;
//! - [`runtime`]: the CUDA driver API (through `cudarc`, loaded at run time): devices,
//!   memory, modules, launches, events and CUDA graphs;
//! - [`ptxas`]: assembles PTX with `ptxas -v` and reads registers, spills and
//!   shared memory per kernel;
//! - [`templates`]: CUDA schedule templates written with task mappings;
//! - [`sim`]: a GPU simulator that runs the lowered IR of a CUDA kernel on the CPU with
//!   GPU semantics (lockstep warps, barriers, shared memory, the IR's intrinsics) and
//!   checkers (data races, uninitialised reads, pending `cp.async`, out-of-bounds,
//!   divergence, outputs written twice or never);
//! - [`graph_backend`]: the graph layer's backend ([`graph_backend::CudaBackend`]) over a
//!   [`device::GpuDevice`] (device memory addressed by `u64` pointers, modules, launches);
//!   [`sim_device::SimDevice`] is the device that runs kernels in the simulator;
//! - [`schedule`]: the default GPU scheduler for any fused task;
//! - [`tuning`]: the SIMT template's schedules tuned by measurement on a GPU (the
//!   `hidet_tune` traits implemented for the template and the device).
//!
//! CUDA C itself is emitted by `hidet-codegen`'s CUDA dialect.

pub mod arch;
pub mod artifacts;
pub mod cache;
pub mod device;
pub mod error;
pub mod gpu_device;
pub mod graph_backend;
pub mod image;
pub mod locate;
pub mod nvrtc;
pub mod ptxas;
pub mod runtime;
pub mod schedule;
pub mod sim;
pub mod sim_device;
pub mod source;
pub mod templates;
pub mod tuning;

pub use arch::Arch;
pub use cache::{CacheOutcome, CachedKernel, CudaKernelCache};
pub use error::CudaError;
pub use image::{ImageKind, KernelImage};
pub use nvrtc::{compile_to_ptx, CompileOptions, Nvrtc, Ptx};
pub use ptxas::{assemble, locate_ptxas, KernelResources, PtxasReport};
pub use source::{emit_cuda, module_to_ptx};
