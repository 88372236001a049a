//! C-family code generation for hidet.
//!
//! [`emit_module`] turns a lowered [`hidet_ir::function::IRModule`] into one
//! self-contained translation unit. Everything that differs between targets
//! is behind the [`Dialect`] trait; [`CDialect`] is C11 (GNU) for CPU
//! kernels, compiled by GCC or Clang; [`CudaDialect`] is CUDA C++ for NVRTC. See [`c`] for the CPU kernel ABI.

pub mod c;
pub mod c_math;
pub mod cuda;
pub mod dialect;
pub mod emitter;
pub mod error;
pub mod helpers;
pub mod literal;
pub mod names;

pub use c::CDialect;
pub use cuda::CudaDialect;
pub use dialect::{Declaration, Dialect, EmittedFunction, EmittedParam, ParamClass, Uses};
pub use emitter::emit_module;
pub use error::{CodegenError, Unsupported};
