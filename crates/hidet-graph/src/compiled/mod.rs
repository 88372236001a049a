//! The compiled graph (DESIGN §1): a graph specialized for concrete input shapes, fused into
//! tasks, built by a [`Backend`] into one module, with a static memory plan and a flat launch
//! list that runs with no interpretation and no allocation per run.
//!
//! - [`backend`]: the one trait between the graph layer and a backend.
//! - [`plan`]: the liveness-based memory plan; `concat_in_place`: concatenations whose
//!   inputs are placed in their output; `slice_in_place`: contiguous slices that become
//!   views of their input.
//! - [`graph`]: [`CompiledGraph`], compile and run for one set of input shapes.
//! - [`model`]: [`CompiledModel`], the per-shape cache; [`constant_pool`]: the constants its
//!   graphs for different shapes share.
//! - [`artifact`]: the checksummed file format of a saved compiled model; [`saved`]: saving a
//!   [`CompiledModel`]'s compiled graphs into one and loading them as a [`LoadedModel`],
//!   which runs without compiling anything.

pub mod artifact;
pub mod backend;
mod concat_in_place;
pub mod constant_pool;
pub mod graph;
pub mod model;
pub mod plan;
pub mod saved;
mod slice_in_place;

pub use artifact::{ArtifactError, ArtifactReader, ArtifactWriter, BlobId};
pub use backend::{
    ArgAddress, Backend, BackendError, CompileOptions, CompileProgress, ModuleReport, OutputSlot,
    ProgressSink,
};
pub use constant_pool::ConstantPool;
pub use graph::{CompileReport, CompiledError, CompiledGraph, HostStep, StepInfo};
pub use model::{CompiledModel, MAX_SHAPE_SIGNATURES};
pub use plan::{plan_memory, BufferRequest, MemoryPlan};
pub use saved::{LoadedModel, SavedDecl};
