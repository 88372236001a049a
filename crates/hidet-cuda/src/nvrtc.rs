//! Compiling CUDA C to PTX or cubins with NVRTC, loaded at run time.
//!
//! NVRTC is found in this order (the first that loads wins):
//! 1. `$HIDET_NVRTC_PATH`, a path to `libnvrtc.so*`; when set, nothing else is tried;
//! 2. in the site-packages of the virtual environments listed in [`crate::locate`], one
//!    environment after the other: `nvidia/cuda_nvrtc/lib/libnvrtc.so.12` (the CUDA 12
//!    wheel `nvidia-cuda-nvrtc-cu12` that `scripts/setup_python.sh` installs), then
//!    `nvidia/cu13/lib/libnvrtc.so.13` (the CUDA 13 wheels' layout);
//! 3. `libnvrtc.so.12`, `libnvrtc.so.13` and `libnvrtc.so` through the system's dynamic
//!    loader (`LD_LIBRARY_PATH`, `ldconfig`).
//!
//! CUDA 12 comes before 13 within each step: PTX from NVRTC 13 is rejected by CUDA 12 drivers and
//! by the CUDA 12 `ptxas` of [`crate::ptxas`], while CUDA 13 drivers load everything NVRTC 12
//! produces. `$HIDET_NVRTC_PATH` picks another.
//!
//! Building this crate needs no CUDA toolkit: nothing links against NVRTC.
//!
//! [`Nvrtc::compile_to_ptx`] emits PTX for a virtual architecture;
//! [`Nvrtc::compile_to_cubin`] emits machine code for a real one (`nvrtcGetCUBIN`, NVRTC
//! 11.1 and newer); [`Nvrtc::compile_image`] takes a cubin where this NVRTC can make one,
//! else PTX.
//!
//! NVRTC 12 has no built-in `cuda_fp16.h`/`cuda_bf16.h`; every compilation
//! therefore gets [`cuda_include_dirs`] as `-I` directories: `$HIDET_CUDA_INCLUDE`
//! when set, else `nvidia/cuda_runtime/include` of the PyPI wheel
//! `nvidia-cuda-runtime-cu12` (or `nvidia/cu13/include` of the CUDA 13 wheels) in the
//! searched virtual environments.

use crate::arch::Arch;
use crate::artifacts;
use crate::error::CudaError;
use crate::image::{ImageKind, KernelImage};
use crate::locate;
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

type NvrtcResult = c_int;
type NvrtcProgram = *mut std::ffi::c_void;

const NVRTC_SUCCESS: NvrtcResult = 0;
const NVRTC_ERROR_COMPILATION: NvrtcResult = 6;

type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult;
type ErrorStringFn = unsafe extern "C" fn(NvrtcResult) -> *const c_char;
type CreateProgramFn = unsafe extern "C" fn(
    *mut NvrtcProgram,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> NvrtcResult;
type CompileProgramFn =
    unsafe extern "C" fn(NvrtcProgram, c_int, *const *const c_char) -> NvrtcResult;
type DestroyProgramFn = unsafe extern "C" fn(*mut NvrtcProgram) -> NvrtcResult;
type GetSizeFn = unsafe extern "C" fn(NvrtcProgram, *mut usize) -> NvrtcResult;
type GetTextFn = unsafe extern "C" fn(NvrtcProgram, *mut c_char) -> NvrtcResult;

/// Options of one NVRTC compilation beyond the architecture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// Extra `-I` include directories.
    pub include_dirs: Vec<PathBuf>,
    /// Extra raw NVRTC options (e.g. `-lineinfo`, `-DFOO=1`).
    pub extra: Vec<String>,
    /// Emit device debug information (`-G`). Off by default.
    pub debug: bool,
}

/// PTX produced by NVRTC for one architecture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ptx {
    /// The PTX assembly text.
    pub text: String,
    /// The architecture it was generated for.
    pub arch: Arch,
    /// NVRTC's log (warnings); empty when there were none.
    pub log: String,
}

/// A loaded NVRTC library. Every call is thread-safe: NVRTC allows
/// concurrent compilation of distinct programs.
pub struct Nvrtc {
    path: String,
    version: (i32, i32),
    error_string: ErrorStringFn,
    create_program: CreateProgramFn,
    compile_program: CompileProgramFn,
    destroy_program: DestroyProgramFn,
    get_log_size: GetSizeFn,
    get_log: GetTextFn,
    get_ptx_size: GetSizeFn,
    get_ptx: GetTextFn,
    /// `nvrtcGetCUBINSize` and `nvrtcGetCUBIN`, absent before NVRTC 11.1.
    cubin: Option<(GetSizeFn, GetTextFn)>,
    _library: libloading::Library,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish()
    }
}

/// Closes an NVRTC program when dropped.
struct Program<'a> {
    nvrtc: &'a Nvrtc,
    handle: NvrtcProgram,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: `handle` was created by nvrtcCreateProgram of the same
        // library and is destroyed exactly once, here.
        unsafe {
            (self.nvrtc.destroy_program)(&mut self.handle);
        }
    }
}

impl Nvrtc {
    /// The process-wide NVRTC, loaded on first use (see the module docs for
    /// the search order). A failed search is remembered too.
    pub fn global() -> Result<&'static Nvrtc, CudaError> {
        static GLOBAL: OnceLock<Result<Nvrtc, CudaError>> = OnceLock::new();
        match GLOBAL.get_or_init(Nvrtc::locate) {
            Ok(n) => Ok(n),
            Err(e) => Err(clone_load_error(e)),
        }
    }

    /// Searches for NVRTC (see the module docs) and loads the first library
    /// that provides the NVRTC API.
    pub fn locate() -> Result<Nvrtc, CudaError> {
        let mut searched = Vec::new();
        if let Some(path) = std::env::var_os("HIDET_NVRTC_PATH").filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            return Nvrtc::load(&path.display().to_string()).map_err(|e| match e {
                CudaError::NvrtcNotFound { .. } => CudaError::NvrtcNotFound {
                    searched: vec![format!("$HIDET_NVRTC_PATH={}", path.display())],
                },
                other => other,
            });
        }
        let mut candidates: Vec<String> =
            locate::in_site_packages_each(&WHEEL_LIBRARIES, &mut searched)
                .into_iter()
                .map(|p| p.display().to_string())
                .collect();
        for name in LOADER_NAMES {
            searched.push(format!("{name} (dynamic loader)"));
            candidates.push(name.to_string());
        }
        let mut last_unusable = None;
        for candidate in candidates {
            match Nvrtc::load(&candidate) {
                Ok(n) => return Ok(n),
                Err(CudaError::NvrtcNotFound { .. }) => {}
                Err(e) => last_unusable = Some(e),
            }
        }
        Err(last_unusable.unwrap_or(CudaError::NvrtcNotFound { searched }))
    }

    /// Loads NVRTC from `path` (a file path, or a bare library name resolved
    /// by the dynamic loader).
    pub fn load(path: &str) -> Result<Nvrtc, CudaError> {
        // SAFETY: loading NVRTC runs only its ELF initializers, which have no
        // preconditions on the calling process.
        let library =
            unsafe { libloading::Library::new(path) }.map_err(|_| CudaError::NvrtcNotFound {
                searched: vec![path.to_string()],
            })?;
        let unusable = |e: libloading::Error| CudaError::NvrtcUnusable {
            path: path.to_string(),
            message: e.to_string(),
        };
        // SAFETY: the symbol types are the C prototypes of nvrtc.h (CUDA 12).
        let (version_fn, error_string, create_program, compile_program, destroy_program) = unsafe {
            (
                *library
                    .get::<VersionFn>(b"nvrtcVersion\0")
                    .map_err(unusable)?,
                *library
                    .get::<ErrorStringFn>(b"nvrtcGetErrorString\0")
                    .map_err(unusable)?,
                *library
                    .get::<CreateProgramFn>(b"nvrtcCreateProgram\0")
                    .map_err(unusable)?,
                *library
                    .get::<CompileProgramFn>(b"nvrtcCompileProgram\0")
                    .map_err(unusable)?,
                *library
                    .get::<DestroyProgramFn>(b"nvrtcDestroyProgram\0")
                    .map_err(unusable)?,
            )
        };
        // SAFETY: as above.
        let (get_log_size, get_log, get_ptx_size, get_ptx) = unsafe {
            (
                *library
                    .get::<GetSizeFn>(b"nvrtcGetProgramLogSize\0")
                    .map_err(unusable)?,
                *library
                    .get::<GetTextFn>(b"nvrtcGetProgramLog\0")
                    .map_err(unusable)?,
                *library
                    .get::<GetSizeFn>(b"nvrtcGetPTXSize\0")
                    .map_err(unusable)?,
                *library
                    .get::<GetTextFn>(b"nvrtcGetPTX\0")
                    .map_err(unusable)?,
            )
        };
        // SAFETY: as above; both symbols have the prototypes of `nvrtcGetPTXSize` and
        // `nvrtcGetPTX` (nvrtc.h, 11.1 and newer).
        let cubin = unsafe {
            match (
                library.get::<GetSizeFn>(b"nvrtcGetCUBINSize\0"),
                library.get::<GetTextFn>(b"nvrtcGetCUBIN\0"),
            ) {
                (Ok(size), Ok(text)) => Some((*size, *text)),
                _ => None,
            }
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both out-pointers are valid for writes.
        let rc = unsafe { version_fn(&mut major, &mut minor) };
        if rc != NVRTC_SUCCESS {
            return Err(CudaError::NvrtcUnusable {
                path: path.to_string(),
                message: format!("nvrtcVersion returned {rc}"),
            });
        }
        Ok(Nvrtc {
            path: path.to_string(),
            version: (major, minor),
            error_string,
            create_program,
            compile_program,
            destroy_program,
            get_log_size,
            get_log,
            get_ptx_size,
            get_ptx,
            cubin,
            _library: library,
        })
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// NVRTC's `(major, minor)` version.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// Whether this NVRTC can emit cubins ([`Nvrtc::compile_to_cubin`]).
    pub fn supports_cubin(&self) -> bool {
        self.cubin.is_some()
    }

    fn check(&self, call: &'static str, rc: NvrtcResult) -> Result<(), CudaError> {
        if rc == NVRTC_SUCCESS {
            return Ok(());
        }
        // SAFETY: nvrtcGetErrorString accepts any code and returns a static
        // NUL-terminated string (or null).
        let message = unsafe {
            let p = (self.error_string)(rc);
            if p.is_null() {
                String::from("unknown error")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Err(CudaError::NvrtcCall {
            call,
            code: rc,
            message,
        })
    }

    fn read_text(
        &self,
        program: &Program<'_>,
        size_call: (&'static str, GetSizeFn),
        text_call: (&'static str, GetTextFn),
    ) -> Result<String, CudaError> {
        let mut size = 0usize;
        // SAFETY: the program handle is live and `size` is valid for writes.
        self.check(size_call.0, unsafe {
            (size_call.1)(program.handle, &mut size)
        })?;
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: NVRTC writes exactly `size` bytes (including the NUL) into
        // a buffer that holds at least that many.
        self.check(text_call.0, unsafe {
            (text_call.1)(program.handle, buf.as_mut_ptr().cast())
        })?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Compiles one CUDA C translation unit to PTX for `arch`.
    ///
    /// `name` names the program in NVRTC's messages and the kept source
    /// file. On a compilation error the source is written to disk (see
    /// [`artifacts::kept_dir`]) and [`CudaError::Compile`] carries NVRTC's
    /// log and that path.
    pub fn compile_to_ptx(
        &self,
        name: &str,
        source: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> Result<Ptx, CudaError> {
        let (program, log) = self.compile(name, source, &arch.virtual_name(), arch, options)?;
        let text = self.read_text(
            &program,
            ("nvrtcGetPTXSize", self.get_ptx_size),
            ("nvrtcGetPTX", self.get_ptx),
        )?;
        Ok(Ptx { text, arch, log })
    }

    /// Compiles one CUDA C translation unit to a cubin for the real architecture `arch`
    /// (`--gpu-architecture=sm_XY`). Fails with [`CudaError::CubinUnsupported`] when this
    /// NVRTC predates `nvrtcGetCUBIN`; compile errors as in [`Nvrtc::compile_to_ptx`].
    pub fn compile_to_cubin(
        &self,
        name: &str,
        source: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> Result<KernelImage, CudaError> {
        let Some((get_size, get_cubin)) = self.cubin else {
            return Err(CudaError::CubinUnsupported {
                path: self.path.clone(),
                major: self.version.0,
                minor: self.version.1,
            });
        };
        let (program, log) = self.compile(name, source, &arch.real_name(), arch, options)?;
        let mut size = 0usize;
        // SAFETY: the program handle is live and `size` is valid for writes.
        self.check("nvrtcGetCUBINSize", unsafe {
            get_size(program.handle, &mut size)
        })?;
        let mut bytes = vec![0u8; size];
        if size > 0 {
            // SAFETY: NVRTC writes exactly `size` bytes into a buffer of that length.
            self.check("nvrtcGetCUBIN", unsafe {
                get_cubin(program.handle, bytes.as_mut_ptr().cast())
            })?;
        }
        Ok(KernelImage {
            kind: ImageKind::Cubin,
            arch,
            bytes,
            log,
        })
    }

    /// The image the driver should load for `arch`: a cubin when this NVRTC emits cubins,
    /// else PTX (see [`ImageKind`]).
    pub fn compile_image(
        &self,
        name: &str,
        source: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> Result<KernelImage, CudaError> {
        if self.supports_cubin() {
            return self.compile_to_cubin(name, source, arch, options);
        }
        let ptx = self.compile_to_ptx(name, source, arch, options)?;
        Ok(KernelImage {
            kind: ImageKind::Ptx,
            arch,
            bytes: ptx.text.into_bytes(),
            log: ptx.log,
        })
    }

    /// The kind of image [`Nvrtc::compile_image`] produces.
    pub fn image_kind(&self) -> ImageKind {
        if self.supports_cubin() {
            ImageKind::Cubin
        } else {
            ImageKind::Ptx
        }
    }

    /// Creates and compiles a program with `--gpu-architecture=<gpu_architecture>`; returns
    /// the compiled program and NVRTC's trimmed log. On a compilation error the source is
    /// kept on disk (see [`Nvrtc::compile_to_ptx`]).
    fn compile(
        &self,
        name: &str,
        source: &str,
        gpu_architecture: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> Result<(Program<'_>, String), CudaError> {
        let c_source = CString::new(source).map_err(|_| CudaError::NulByte {
            what: "CUDA source",
        })?;
        let c_name = CString::new(format!("{name}.cu")).map_err(|_| CudaError::NulByte {
            what: "program name",
        })?;
        let mut opts = vec![
            format!("--gpu-architecture={gpu_architecture}"),
            "--std=c++17".to_string(),
            "--fmad=true".to_string(),
        ];
        if options.debug {
            opts.push("-G".to_string());
        }
        opts.extend(
            options
                .include_dirs
                .iter()
                .chain(cuda_include_dirs())
                .map(|d| format!("-I{}", d.display())),
        );
        opts.extend(options.extra.iter().cloned());
        let c_opts = opts
            .into_iter()
            .map(CString::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| CudaError::NulByte {
                what: "an NVRTC option",
            })?;
        let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
        let num_opts = c_int::try_from(opt_ptrs.len()).map_err(|_| CudaError::NvrtcCall {
            call: "nvrtcCompileProgram",
            code: -1,
            message: "too many options".to_string(),
        })?;

        let mut handle: NvrtcProgram = std::ptr::null_mut();
        // SAFETY: the source and name are NUL-terminated and outlive the
        // call; zero headers are passed with null arrays, as nvrtc.h allows.
        let rc = unsafe {
            (self.create_program)(
                &mut handle,
                c_source.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        self.check("nvrtcCreateProgram", rc)?;
        let program = Program {
            nvrtc: self,
            handle,
        };
        // SAFETY: the handle is live; `opt_ptrs` holds `num_opts` pointers to
        // NUL-terminated strings that outlive the call.
        let rc = unsafe { (self.compile_program)(program.handle, num_opts, opt_ptrs.as_ptr()) };
        let log = self.read_text(
            &program,
            ("nvrtcGetProgramLogSize", self.get_log_size),
            ("nvrtcGetProgramLog", self.get_log),
        )?;
        if rc == NVRTC_ERROR_COMPILATION {
            let source_path = artifacts::keep(name, "cu", source)?;
            return Err(CudaError::Compile {
                arch: arch.to_string(),
                log,
                source_path,
            });
        }
        self.check("nvrtcCompileProgram", rc)?;
        Ok((program, log.trim().to_string()))
    }
}

/// NVRTC inside the PyPI wheels, relative to site-packages, in search order.
pub const WHEEL_LIBRARIES: [&str; 2] = [
    "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
    "nvidia/cu13/lib/libnvrtc.so.13",
];

/// NVRTC names given to the system's dynamic loader, in search order.
pub const LOADER_NAMES: [&str; 3] = ["libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so"];

/// The CUDA header directories passed to every compilation (see the module
/// docs); empty when none was found, in which case sources that include
/// `cuda_fp16.h` fail to compile with a message naming the header.
pub fn cuda_include_dirs() -> &'static [PathBuf] {
    static DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    DIRS.get_or_init(|| {
        if let Some(dir) = std::env::var_os("HIDET_CUDA_INCLUDE").filter(|d| !d.is_empty()) {
            return std::env::split_paths(&dir).collect();
        }
        let mut searched = Vec::new();
        [
            "nvidia/cuda_runtime/include/cuda_fp16.h",
            "nvidia/cu13/include/cuda_fp16.h",
        ]
        .iter()
        .flat_map(|relative| locate::in_site_packages(relative, &mut searched))
        .filter_map(|header| header.parent().map(PathBuf::from))
        .take(1)
        .collect()
    })
}

/// A copy of a cached load error (the cached one stays in the `OnceLock`).
fn clone_load_error(e: &CudaError) -> CudaError {
    match e {
        CudaError::NvrtcNotFound { searched } => CudaError::NvrtcNotFound {
            searched: searched.clone(),
        },
        CudaError::NvrtcUnusable { path, message } => CudaError::NvrtcUnusable {
            path: path.clone(),
            message: message.clone(),
        },
        other => CudaError::NvrtcUnusable {
            path: String::from("<unknown>"),
            message: other.to_string(),
        },
    }
}

/// Compiles `source` to PTX for `arch` with the process-wide NVRTC
/// ([`Nvrtc::global`]). See [`Nvrtc::compile_to_ptx`].
pub fn compile_to_ptx(
    name: &str,
    source: &str,
    arch: Arch,
    options: &CompileOptions,
) -> Result<Ptx, CudaError> {
    Nvrtc::global()?.compile_to_ptx(name, source, arch, options)
}
