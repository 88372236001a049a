//! A GPU simulator: runs the lowered IR of a CUDA kernel — the function the CUDA dialect
//! emits — on the CPU with GPU semantics, and checks it.
//!
//! - [`simulator`]: the public API ([`Simulator`], [`DeviceBuffer`], [`SimArg`],
//!   [`LaunchOptions`]);
//! - `program`: the kernel translated once into instructions over dense variable slots;
//! - `warp`: a block's warps run in lockstep under active masks, barriers between warps;
//! - `eval`: expressions evaluated for all active lanes of a warp at once;
//! - `intrinsics`: shuffles, `mma.sync`, `ldmatrix`, `cp.async`, vector stores;
//! - `memory`: byte-addressed regions (bounds, alignment, poisoned bytes);
//! - `checks`: the checkers on memory accesses (data races, pending `cp.async` targets,
//!   outputs written twice or never);
//! - `value`: scalar semantics (exact integer and float rounding of each type);
//! - [`error`]: the typed errors ([`SimError`], [`Fault`]).
//!
//! What it models and what it does not is written down in `ARCHITECTURE.md` ("The GPU
//! simulator").

mod checks;
pub mod error;
mod eval;
mod intrinsics;
mod memory;
mod program;
pub mod simulator;
mod value;
mod warp;

pub use error::{Fault, FaultReport, Idx3, RaceKind, SimError};
pub use simulator::{BlockSelection, DeviceBuffer, LaunchOptions, LaunchReport, SimArg, Simulator};
