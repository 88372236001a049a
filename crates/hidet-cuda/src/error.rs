//! The error type of the CUDA backend.

use std::path::PathBuf;

/// Where to get NVRTC and `ptxas` when they are missing.
pub const SETUP_HINT: &str =
    "run scripts/setup_python.sh (it installs the nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvcc-cu12 wheels into .venv)";

/// Errors of the CUDA backend.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// No loadable NVRTC library was found at any of the searched places.
    #[error("NVRTC not found; searched: {}; {SETUP_HINT}, or set HIDET_NVRTC_PATH", searched.join(", "))]
    NvrtcNotFound { searched: Vec<String> },
    /// A library was loaded but lacks an NVRTC entry point.
    #[error("{path} is not a usable NVRTC library: {message}")]
    NvrtcUnusable { path: String, message: String },
    /// An NVRTC call failed outside of compilation proper.
    #[error("NVRTC call {call} failed with code {code}: {message}")]
    NvrtcCall {
        call: &'static str,
        code: i32,
        message: String,
    },
    /// NVRTC rejected the source. The source was kept at `source_path`.
    #[error("NVRTC failed to compile {source_path} for {arch}:\n{log}")]
    Compile {
        arch: String,
        log: String,
        source_path: PathBuf,
    },
    /// The source or an option contains a NUL byte.
    #[error("{what} contains a NUL byte")]
    NulByte { what: &'static str },
    /// The requested GPU architecture is not supported.
    #[error(
        "unsupported GPU architecture {0:?}; expected sm_XY with XY >= 70 (e.g. sm_80, sm_90)"
    )]
    UnsupportedArch(String),
    /// No `ptxas` executable was found.
    #[error("ptxas not found; searched: {}; {SETUP_HINT}, or set HIDET_PTXAS", searched.join(", "))]
    PtxasNotFound { searched: Vec<String> },
    /// `ptxas` rejected the PTX. The PTX was kept at `ptx_path`.
    #[error("ptxas failed on {ptx_path} for {arch} ({status}):\n{stderr}")]
    Ptxas {
        arch: String,
        status: String,
        stderr: String,
        ptx_path: PathBuf,
    },
    /// `ptxas -v` printed something this crate cannot read.
    #[error("cannot parse ptxas output line {line:?}")]
    PtxasOutput { line: String },
    /// The module is not a valid CUDA program (the verifier names the
    /// function and statement).
    #[error("invalid CUDA module: {0}")]
    Verify(#[from] hidet_ir::verify::VerifyError),
    /// Lowering the module (task mappings, simplification) failed.
    #[error("lowering failed: {0}")]
    Lower(#[from] hidet_ir::passes::PassError),
    /// Emitting CUDA C failed.
    #[error("CUDA C generation failed: {0}")]
    Codegen(#[from] hidet_codegen::CodegenError),
    /// A file system operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
