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
    /// NVRTC cannot emit cubins (it predates `nvrtcGetCUBIN`).
    #[error("{path} (NVRTC {major}.{minor}) cannot emit cubins; compile to PTX instead")]
    CubinUnsupported {
        path: String,
        major: i32,
        minor: i32,
    },
    /// No loadable CUDA driver library (`libcuda.so`) was found: this machine has no NVIDIA
    /// driver (or the library is not on the loader's path).
    #[error("CUDA driver library not found (libcuda.so; searched the dynamic loader for {}): this machine has no NVIDIA driver, or it is not on LD_LIBRARY_PATH", searched.join(", "))]
    DriverNotFound { searched: Vec<String> },
    /// The driver library lacks an entry point this runtime calls: the driver is older than
    /// CUDA 12.4.
    #[error(
        "the CUDA driver lacks {symbol} ({message}); a driver for CUDA 12.4 or newer is needed"
    )]
    DriverTooOld { symbol: String, message: String },
    /// The driver is present but reports no CUDA device.
    #[error("no CUDA device: the driver is loaded but found no GPU ({detail})")]
    NoDevice { detail: String },
    /// The requested device ordinal does not exist.
    #[error("no CUDA device {ordinal}: the driver reports {count} device(s)")]
    DeviceOrdinal { ordinal: usize, count: usize },
    /// A CUDA driver call failed.
    #[error("CUDA driver call {call} failed: {name} ({code}): {message}")]
    Driver {
        call: &'static str,
        code: i32,
        name: String,
        message: String,
    },
    /// The driver rejected a cubin or PTX image; `log` is the JIT's error log (empty for
    /// cubins).
    #[error("loading a {kind} module failed: {name} ({code}){}", if log.is_empty() { String::new() } else { format!(":\n{log}") })]
    ModuleLoad {
        kind: &'static str,
        code: i32,
        name: String,
        log: String,
    },
    /// The module has no kernel of that name.
    #[error("the module has no kernel {name:?}")]
    KernelNotFound { name: String },
    /// A device address range is not inside a live allocation of this GPU.
    #[error("device range [{address:#x}, +{bytes}) is not inside a live allocation of this GPU")]
    InvalidDeviceRange { address: u64, bytes: usize },
    /// An alignment that is not a power of two.
    #[error("alignment {0} is not a power of two")]
    BadAlignment(usize),
    /// A launch whose configuration or arguments do not fit the kernel or the device.
    #[error("cannot launch {kernel}: {reason}")]
    Launch { kernel: String, reason: String },
    /// A CUDA-graph capture failed (the closure's or the driver's error).
    #[error("CUDA graph capture failed: {0}")]
    Capture(Box<CudaError>),
    /// A kernel is in no usable cache entry and NVRTC is not available to compile it.
    #[error("kernel {name} ({arch}) is not in the cache at {root} and NVRTC is unavailable to compile it: {nvrtc}")]
    NotCached {
        name: String,
        arch: String,
        root: PathBuf,
        nvrtc: Box<CudaError>,
    },
    /// A file system operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
