//! The CPU backend of hidet: host CPU detection, compilation of generated C
//! with the system compiler into a content-addressed cache, loading the
//! libraries and calling their kernels with checked arguments, and CPU
//! schedule templates.
//!
//! The usual entry point is [`build`], which takes an IR module through
//! verification, lowering and C generation to a [`CompiledModule`].

pub mod arg;
pub mod cache;
pub mod compile;
pub mod error;
pub mod graph_backend;
pub mod graph_ops;
pub mod graph_passes;
pub mod module;
pub mod options;
pub mod parallel;
pub mod pipeline;
pub mod schedule;
pub mod signature;
pub mod target;
pub mod templates;

pub use arg::{Element, KernelArg, Scalar, TensorArg};
pub use cache::{CacheOutcome, CachedLibrary, KernelCache};
pub use compile::{compiler_invocations, Compiler};
pub use error::{ArgError, CpuError, TemplateError};
pub use module::{CompiledModule, KernelHandle};
pub use options::BuildOptions;
pub use pipeline::{build, build_from_source, emit_source};
pub use signature::{KernelSignature, ParamKind, ParamSpec};
pub use target::{Arch, CpuFeatures, CpuTarget, TargetError, CPU_FEATURES_ENV};
