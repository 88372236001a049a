//! The CUDA runtime: the driver API through `cudarc`, loaded at run time.
//!
//! Nothing at build time needs a CUDA toolkit, a GPU or `libcuda`: the driver library is
//! opened when first needed ([`driver`]), and on a machine without it every entry point
//! returns [`crate::CudaError::DriverNotFound`] (without a GPU,
//! [`crate::CudaError::NoDevice`]) instead of panicking.
//!
//! - [`Gpu`]: an opened device (its primary context) with one stream; host↔device copies,
//!   device copies and memsets on `u64` device addresses, synchronisation;
//! - [`DeviceBuffer`]: one allocation with a chosen alignment, freed on drop;
//! - [`LoadedModule`] and [`Kernel`]: cubin or PTX images ([`crate::KernelImage`]) loaded into
//!   the device, and their kernels with the attributes launches are checked against;
//! - [`LaunchConfig`] and [`KernelParam`]: launches with a grid, a block, dynamic shared
//!   memory (the kernel's limit raised above 48 KiB when asked) and by-value arguments;
//! - [`GpuEvent`]: events for timing;
//! - [`CapturedGraph`]: a stream's work captured as a CUDA graph and replayed.
//!
//! Device memory is addressed by `u64` device pointers throughout, checked against the
//! registry of live allocations of the [`Gpu`], so a graph backend can keep its memory plan
//! as offsets into one allocation.

pub mod driver;
pub mod event;
pub mod gpu;
pub mod graph;
pub mod launch;
pub mod memory;
pub mod module;

mod context;
mod registry;

pub use event::GpuEvent;
pub use gpu::{DeviceInfo, Gpu};
pub use graph::CapturedGraph;
pub use launch::{KernelParam, LaunchConfig, DEFAULT_SHARED_LIMIT};
pub use memory::{DeviceBuffer, DRIVER_ALIGNMENT};
pub use module::{Kernel, LoadedModule};
