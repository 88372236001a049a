//! Loaded kernel libraries and safe kernel calls.
//!
//! The calling convention (shared with `hidet-codegen`'s C dialect): for
//! each CPU kernel `NAME` the library exports `void NAME__packed(void *const
//! *args)`, where `args[i]` is the data pointer of a tensor parameter or a
//! pointer to the value of a scalar parameter; the library may also export
//! `int hidet_set_launcher(hidet_launch_fn, int)`, through which it receives
//! [`crate::parallel::launch`] to run its parallel loops.

use crate::arg::{KernelArg, ScalarSlot};
use crate::cache::{CacheOutcome, CachedLibrary};
use crate::error::CpuError;
use crate::parallel::{launch, LaunchFn};
use crate::signature::KernelSignature;
use crate::target::CpuTarget;
use hidet_ir::function::{FunctionKind, IRModule};
use libloading::Library;
use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

type PackedEntry = unsafe extern "C" fn(*const *mut c_void);
type SetLauncher = unsafe extern "C" fn(LaunchFn, c_int) -> c_int;

/// The symbol of the packed entry point of kernel `name`.
pub fn packed_symbol(name: &str) -> String {
    format!("{name}__packed")
}

/// The exported function that installs the task launcher and the thread count.
pub const SET_LAUNCHER_SYMBOL: &str = "hidet_set_launcher";

/// The CPU features a library was compiled for and this machine lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unavailable {
    target: String,
    missing: Vec<&'static str>,
}

impl Unavailable {
    fn error(&self) -> CpuError {
        CpuError::TargetUnavailable {
            target: self.target.clone(),
            missing: self.missing.clone(),
        }
    }
}

/// One callable CPU kernel of a loaded library.
pub struct KernelHandle {
    signature: KernelSignature,
    entry: PackedEntry,
    unavailable: Option<Arc<Unavailable>>,
    _library: Arc<Library>,
}

impl KernelHandle {
    pub fn name(&self) -> &str {
        &self.signature.kernel
    }

    pub fn signature(&self) -> &KernelSignature {
        &self.signature
    }

    /// Whether this kernel can run on this machine: an error naming the missing features
    /// when it was compiled for a CPU with features this one lacks.
    pub fn check_runs_here(&self) -> Result<(), CpuError> {
        self.unavailable.as_ref().map_or(Ok(()), |u| Err(u.error()))
    }

    /// Runs the kernel on `args`, after checking that it can run on this CPU
    /// ([`KernelHandle::check_runs_here`]) and checking the arguments' count, kinds, dtypes,
    /// shapes, buffer sizes and mutability against the IR signature; on a
    /// mismatch nothing runs and the error names the parameter.
    pub fn call(&self, args: &mut [KernelArg<'_>]) -> Result<(), CpuError> {
        self.check_runs_here()?;
        self.signature.check(args)?;
        let slots: Vec<ScalarSlot> = args
            .iter()
            .map(|a| match a {
                KernelArg::Scalar(s) => s.to_slot(),
                KernelArg::Tensor(_) => ScalarSlot([0; 8]),
            })
            .collect();
        let pointers: Vec<*mut c_void> = args
            .iter()
            .zip(&slots)
            .map(|(a, slot)| match a {
                KernelArg::Tensor(t) => t.data_ptr(),
                KernelArg::Scalar(_) => slot.0.as_ptr() as *mut c_void,
            })
            .collect();
        // SAFETY: `entry` is the packed entry point generated for this
        // kernel's IR function, and the library stays loaded through
        // `_library`. `check` established that every tensor argument has
        // the parameter's dtype and a buffer of at least the layout's
        // storage size under the given scalar values, that parameters the
        // kernel writes are exclusively borrowed (`tensor_mut` or a `raw`
        // buffer whose caller vouched for it), and that scalars have the
        // parameter's exact type. Scalar pointers point into `slots`, which
        // outlives the call.
        unsafe { (self.entry)(pointers.as_ptr()) };
        Ok(())
    }
}

impl KernelHandle {
    /// Runs the kernel on a prepared packed argument array (one pointer per parameter),
    /// skipping the checks of [`KernelHandle::call`]; for executors that check their
    /// arguments once (with [`KernelSignature::check`] or equivalent) and launch many times
    /// without allocating.
    ///
    /// # Safety
    /// The kernel must run on this CPU ([`KernelHandle::check_runs_here`]), and
    /// `args` must satisfy everything `call` checks, for this kernel: exactly one pointer
    /// per parameter, in order; a tensor pointer must point to a buffer of the parameter's
    /// dtype spanning at least the layout's storage size, valid for writes and not accessed
    /// by anything else during the call when the kernel writes it; a scalar pointer must
    /// point to a value of the parameter's exact type.
    pub unsafe fn call_packed(&self, args: &[*mut c_void]) {
        debug_assert_eq!(args.len(), self.signature.params.len());
        // SAFETY: the caller guarantees the arguments (see above); `entry` is this kernel's
        // packed entry point and the library stays loaded through `_library`.
        unsafe { (self.entry)(args.as_ptr()) }
    }
}

impl std::fmt::Debug for KernelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelHandle")
            .field("signature", &self.signature)
            .finish_non_exhaustive()
    }
}

/// A loaded kernel library with a handle for each CPU kernel of its module.
/// The library stays loaded for the rest of the process (a pool worker may still
/// hold the description of a launch that has ended, with a task function of it).
pub struct CompiledModule {
    name: String,
    library_path: PathBuf,
    source_path: Option<PathBuf>,
    outcome: Option<CacheOutcome>,
    kernels: Vec<KernelHandle>,
    set_launcher: Option<SetLauncher>,
    unavailable: Option<Arc<Unavailable>>,
    _library: Arc<Library>,
}

impl std::fmt::Debug for CompiledModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledModule")
            .field("name", &self.name)
            .field("library_path", &self.library_path)
            .field("kernels", &self.kernels)
            .finish_non_exhaustive()
    }
}

impl CompiledModule {
    /// Loads the library at `library_path`, compiled from `module`, and
    /// resolves the packed entry point of every CPU kernel of `module`.
    ///
    /// The library must have been generated from `module` (or from a
    /// lowering of it with the same kernel parameters): signatures are
    /// taken from the IR and cannot be checked against the machine code.
    pub fn load(module: &IRModule, library_path: &Path) -> Result<CompiledModule, CpuError> {
        let signatures = module
            .functions
            .iter()
            .filter(|f| f.kind == FunctionKind::CpuKernel)
            .map(KernelSignature::of)
            .collect::<Result<Vec<_>, _>>()?;
        CompiledModule::load_with_signatures(&module.name, library_path, signatures)
    }

    /// Loads the library at `library_path` and resolves the packed entry point of each
    /// kernel of `signatures` (for a library saved with a compiled model, whose IR is gone).
    ///
    /// The signatures must be those of the IR functions the library was generated from:
    /// they cannot be checked against the machine code.
    pub fn load_with_signatures(
        name: &str,
        library_path: &Path,
        signatures: Vec<KernelSignature>,
    ) -> Result<CompiledModule, CpuError> {
        let library = Arc::new(open_library(library_path)?);
        let load_error = |what: String, source| CpuError::Load {
            what,
            path: library_path.to_path_buf(),
            source,
        };
        let mut kernels = Vec::new();
        for signature in signatures {
            let symbol = packed_symbol(&signature.kernel);
            // SAFETY: the symbol is the packed entry point emitted for this
            // kernel, whose C type is `void (void *const *)`, matching
            // `PackedEntry`.
            let entry: PackedEntry = unsafe { library.get::<PackedEntry>(symbol.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| load_error(symbol, e))?;
            kernels.push(KernelHandle {
                signature,
                entry,
                unavailable: None,
                _library: Arc::clone(&library),
            });
        }
        // SAFETY: when present, `hidet_set_launcher` has the C type
        // `int (hidet_launch_fn, int)`, matching `SetLauncher`.
        let set_launcher = unsafe { library.get::<SetLauncher>(SET_LAUNCHER_SYMBOL.as_bytes()) }
            .ok()
            .map(|s| *s);
        Ok(CompiledModule {
            name: name.to_string(),
            library_path: library_path.to_path_buf(),
            source_path: None,
            outcome: None,
            kernels,
            set_launcher,
            unavailable: None,
            _library: library,
        })
    }

    /// Records that the library was compiled for `target`: when it needs features this
    /// machine lacks ([`CpuTarget::missing_here`]), its kernels refuse to run and
    /// [`CompiledModule::set_num_threads`] refuses too (nothing of the library is executed).
    pub fn compiled_for(mut self, target: &CpuTarget) -> CompiledModule {
        let missing = target.missing_here();
        let unavailable = (!missing.is_empty()).then(|| {
            Arc::new(Unavailable {
                target: target.features.names().join(","),
                missing,
            })
        });
        for kernel in &mut self.kernels {
            kernel.unavailable = unavailable.clone();
        }
        self.unavailable = unavailable;
        self
    }

    /// Whether the library's kernels can run on this machine (see
    /// [`CompiledModule::compiled_for`]).
    pub fn check_runs_here(&self) -> Result<(), CpuError> {
        self.unavailable.as_ref().map_or(Ok(()), |u| Err(u.error()))
    }

    /// Loads a library from the kernel cache (see [`CompiledModule::load`]),
    /// remembering its source path and cache outcome.
    pub fn load_cached(
        module: &IRModule,
        cached: &CachedLibrary,
    ) -> Result<CompiledModule, CpuError> {
        let mut loaded = CompiledModule::load(module, &cached.library_path)?;
        loaded.source_path = Some(cached.source_path.clone());
        loaded.outcome = Some(cached.outcome);
        Ok(loaded)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn library_path(&self) -> &Path {
        &self.library_path
    }

    /// The C source the library was compiled from, when loaded from the cache.
    pub fn source_path(&self) -> Option<&Path> {
        self.source_path.as_deref()
    }

    /// Whether the library came from the cache or was compiled, when loaded
    /// from the cache.
    pub fn cache_outcome(&self) -> Option<CacheOutcome> {
        self.outcome
    }

    pub fn kernels(&self) -> &[KernelHandle] {
        &self.kernels
    }

    /// The CPU kernel named `name`.
    pub fn kernel(&self, name: &str) -> Result<&KernelHandle, CpuError> {
        self.kernels
            .iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| CpuError::NoSuchKernel(name.to_string()))
    }

    /// Installs the pool's launcher ([`crate::parallel::launch`]) into this library
    /// and lets its parallel loops use up to `threads` threads (the calling thread
    /// included; 1 runs them on the calling thread). The setting belongs to the
    /// library, so it holds for every caller of its kernels, and a library
    /// loaded twice in one process (same path) shares it. Until this is called,
    /// parallel loops run on the calling thread. Returns the previous count.
    /// Fails when the library exports no `hidet_set_launcher`, or cannot run here
    /// ([`CompiledModule::check_runs_here`]).
    pub fn set_num_threads(&self, threads: usize) -> Result<usize, CpuError> {
        self.check_runs_here()?;
        let f = self.set_launcher.ok_or_else(|| {
            CpuError::Unsupported(format!(
                "module `{}` does not export `{SET_LAUNCHER_SYMBOL}`",
                self.name
            ))
        })?;
        let n = c_int::try_from(threads.max(1)).unwrap_or(c_int::MAX);
        // SAFETY: `f` was resolved from the loaded library (kept alive by
        // `_library`) with the matching C type; it takes any launcher and int.
        let previous = unsafe { f(launch, n) };
        Ok(usize::try_from(previous).unwrap_or(0))
    }
}

/// Opens a library without ever unloading it: a pool worker may hold the
/// description of a launch that has ended, which names a task function of it.
fn open_library(path: &Path) -> Result<Library, CpuError> {
    let load_error = |source| CpuError::Load {
        what: "library".to_string(),
        path: path.to_path_buf(),
        source,
    };
    #[cfg(unix)]
    {
        use libloading::os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW};
        #[cfg(target_os = "linux")]
        const RTLD_NODELETE: c_int = 0x1000;
        #[cfg(target_os = "macos")]
        const RTLD_NODELETE: c_int = 0x80;
        #[cfg(not(any(target_os = "linux", target_os = "macos")))]
        const RTLD_NODELETE: c_int = 0;
        // SAFETY: loading runs the library's initializers; kernel libraries
        // generated by hidet have none beyond those of the C runtime, which
        // are safe to run at any time.
        unsafe { UnixLibrary::open(Some(path), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) }
            .map(Library::from)
            .map_err(load_error)
    }
    #[cfg(not(unix))]
    {
        // SAFETY: as above, kernel libraries have no initializers of their own.
        unsafe { Library::new(path) }.map_err(load_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_and_modules_are_send_and_sync() {
        assert_send_sync::<KernelHandle>();
        assert_send_sync::<CompiledModule>();
        assert_eq!(packed_symbol("matmul"), "matmul__packed");
    }
}
