//! Errors of the CPU backend.

use hidet_ir::dtype::DataType;
use std::path::PathBuf;

/// Any failure of the CPU backend: building, compiling, caching, loading or
/// calling a kernel.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// The C compiler could not be started.
    #[error("cannot run the C compiler `{program}` (set CC to choose another): {source}")]
    NoCompiler {
        program: String,
        source: std::io::Error,
    },
    /// The C compiler rejected a source file.
    #[error(
        "C compilation failed ({status}); the source is kept at {source_path}\ncommand: {command}\n{stderr}"
    )]
    CompileFailed {
        status: String,
        command: String,
        stderr: String,
        source_path: PathBuf,
    },
    /// A file or directory of the kernel cache could not be read or written.
    #[error("I/O error at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A compiled library could not be loaded, or lacks a symbol.
    #[error("cannot load `{what}` from {path}: {source}")]
    Load {
        what: String,
        path: PathBuf,
        source: libloading::Error,
    },
    /// The kernels were compiled for CPU features this machine lacks.
    #[error(
        "the kernels were compiled for a CPU with {} (target `{target}`), which this CPU lacks; \
         compile for this CPU (unset HIDET_CPU_FEATURES) or run on one that has them",
        missing.join(", ")
    )]
    TargetUnavailable {
        target: String,
        missing: Vec<&'static str>,
    },
    /// No kernel of that name in the module.
    #[error("module has no CPU kernel named `{0}`")]
    NoSuchKernel(String),
    /// The module cannot be built for the CPU (wrong target, unsupported IR).
    #[error("cannot build for the CPU: {0}")]
    Unsupported(String),
    /// A pass of the IR pipeline (verification, lowering) or code generation failed.
    #[error("{stage} failed: {message}")]
    Pipeline {
        stage: &'static str,
        message: String,
    },
    /// Arguments given to a kernel do not match its signature.
    #[error(transparent)]
    Arg(#[from] ArgError),
    /// A schedule template rejected its parameters.
    #[error(transparent)]
    Template(#[from] TemplateError),
}

/// A mismatch between the arguments of a kernel call and the kernel's IR
/// signature, found before the kernel runs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgError {
    #[error("kernel `{kernel}` takes {expected} arguments, {given} given")]
    Count {
        kernel: String,
        expected: usize,
        given: usize,
    },
    #[error("parameter `{param}` expects {expected}, given {given}")]
    Kind {
        param: String,
        expected: String,
        given: String,
    },
    #[error("parameter `{param}` expects dtype {expected}, given {given}")]
    DType {
        param: String,
        expected: DataType,
        given: DataType,
    },
    #[error("parameter `{param}` expects shape {expected:?}, given {given:?}")]
    Shape {
        param: String,
        expected: Vec<i64>,
        given: Vec<usize>,
    },
    #[error("parameter `{param}` needs a buffer of {needed} elements, given {given}")]
    BufferTooSmall {
        param: String,
        needed: usize,
        given: usize,
    },
    #[error("parameter `{param}` is written by the kernel; pass it as a mutable tensor")]
    ReadOnly { param: String },
    #[error("cannot evaluate the shape of parameter `{param}`: {reason}")]
    ShapeExpr { param: String, reason: String },
}

/// A schedule template was instantiated with invalid parameters.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum TemplateError {
    #[error("invalid schedule {0}")]
    InvalidSchedule(String),
    #[error("invalid shape: {0}")]
    InvalidShape(String),
    #[error(transparent)]
    Mapping(#[from] hidet_ir::mapping::MappingError),
}
