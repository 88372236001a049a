//! Loading the CUDA driver library at run time and turning its status codes into errors.
//!
//! `cudarc`'s dynamically loaded bindings panic when `libcuda` or one of its symbols is
//! missing. [`driver`] therefore checks, once per process, that the library loads and that
//! every entry point this runtime calls ([`REQUIRED_SYMBOLS`]) is present, then runs
//! `cuInit`; only after that succeeds does any other code of [`crate::runtime`] call into
//! `cudarc::driver::sys`. A machine without a driver gets [`CudaError::DriverNotFound`], one
//! without a GPU [`CudaError::NoDevice`] — never a panic.

use crate::error::CudaError;
use cudarc::driver::sys;
use std::ffi::CStr;
use std::sync::OnceLock;

/// The driver entry points the runtime calls, under the names the `cuda-12040` bindings of
/// `cudarc` load them by.
pub const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemGetInfo_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8Async",
    "cuModuleLoadDataEx",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
    "cuFuncGetParamInfo",
    "cuLaunchKernel",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuEventDestroy_v2",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
];

/// The loaded and initialised driver.
#[derive(Debug)]
pub struct Driver {
    /// `cuDriverGetVersion`: 1000 × major + 10 × minor (12040 for CUDA 12.4).
    pub version: i32,
}

/// The process-wide driver: loaded, checked and initialised (`cuInit`) on first use. The
/// outcome, failure included, is remembered.
pub fn driver() -> Result<&'static Driver, CudaError> {
    static DRIVER: OnceLock<Result<Driver, CudaError>> = OnceLock::new();
    match DRIVER.get_or_init(load) {
        Ok(d) => Ok(d),
        Err(e) => Err(copy_error(e)),
    }
}

fn load() -> Result<Driver, CudaError> {
    // SAFETY: `is_culib_present` only tries to dlopen the candidate names (running the
    // library's ELF initialisers, which have no preconditions) and drops what it opened.
    if !unsafe { sys::is_culib_present() } {
        let mut searched: Vec<String> = Vec::new();
        for name in cudarc::get_lib_name_candidates("cuda") {
            if !searched.contains(&name) {
                searched.push(name);
            }
        }
        return Err(CudaError::DriverNotFound { searched });
    }
    // SAFETY: `is_culib_present` just succeeded, so `culib` finds a library and does not
    // panic; looking a symbol up has no side effect, and the pointer is not called here.
    let library = unsafe { sys::culib() };
    for symbol in REQUIRED_SYMBOLS {
        // SAFETY: as above; the symbol is only looked up.
        if let Err(e) = unsafe { library.get::<*const std::ffi::c_void>(symbol.as_bytes()) } {
            return Err(CudaError::DriverTooOld {
                symbol: (*symbol).to_string(),
                message: e.to_string(),
            });
        }
    }
    // SAFETY: every symbol is present (checked above); cuInit takes flags 0.
    let rc = unsafe { sys::cuInit(0) };
    if rc == sys::CUresult::CUDA_ERROR_NO_DEVICE {
        return Err(CudaError::NoDevice {
            detail: "cuInit returned CUDA_ERROR_NO_DEVICE".to_string(),
        });
    }
    check("cuInit", rc)?;
    let mut version = 0;
    // SAFETY: the out-pointer is valid for writes.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut version)
    })?;
    Ok(Driver { version })
}

/// `Ok(())` for `CUDA_SUCCESS`, else [`CudaError::Driver`] naming `call` and the code.
///
/// Only call this after [`driver`] succeeded (it asks the driver for the code's name).
pub fn check(call: &'static str, rc: sys::CUresult) -> Result<(), CudaError> {
    if rc == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (name, message) = describe(rc);
    Err(CudaError::Driver {
        call,
        code: rc as i32,
        name,
        message,
    })
}

/// The driver's name and description of a status code.
pub fn describe(rc: sys::CUresult) -> (String, String) {
    let text = |f: unsafe fn(sys::CUresult, *mut *const std::ffi::c_char) -> sys::CUresult| {
        let mut p: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: the driver is loaded (callers hold a `Driver`); the out-pointer is valid
        // and, on success, receives a static NUL-terminated string.
        let ok = unsafe { f(rc, &mut p) } == sys::CUresult::CUDA_SUCCESS && !p.is_null();
        if ok {
            // SAFETY: see above: a static NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        } else {
            format!("CUresult {}", rc as i32)
        }
    };
    (text(sys::cuGetErrorName), text(sys::cuGetErrorString))
}

/// The sources of the runtime, for the check that every driver entry point they call is in
/// [`REQUIRED_SYMBOLS`].
#[cfg(test)]
const RUNTIME_SOURCES: &[&str] = &[
    include_str!("context.rs"),
    include_str!("driver.rs"),
    include_str!("event.rs"),
    include_str!("gpu.rs"),
    include_str!("graph.rs"),
    include_str!("launch.rs"),
    include_str!("memory.rs"),
    include_str!("module.rs"),
];

/// A copy of a remembered load error (the original stays in the `OnceLock`).
fn copy_error(e: &CudaError) -> CudaError {
    match e {
        CudaError::DriverNotFound { searched } => CudaError::DriverNotFound {
            searched: searched.clone(),
        },
        CudaError::DriverTooOld { symbol, message } => CudaError::DriverTooOld {
            symbol: symbol.clone(),
            message: message.clone(),
        },
        CudaError::NoDevice { detail } => CudaError::NoDevice {
            detail: detail.clone(),
        },
        CudaError::Driver {
            call,
            code,
            name,
            message,
        } => CudaError::Driver {
            call,
            code: *code,
            name: name.clone(),
            message: message.clone(),
        },
        other => CudaError::DriverNotFound {
            searched: vec![other.to_string()],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cudarc` panics on a missing symbol; [`load`] checks [`REQUIRED_SYMBOLS`] first, so
    /// every `sys::cu*` call of the runtime must be listed (the `cuda-12040` bindings load
    /// each function under its own name).
    #[test]
    fn every_driver_call_of_the_runtime_is_checked_at_load() {
        let mut called = Vec::new();
        for source in RUNTIME_SOURCES {
            let mut rest = *source;
            while let Some(at) = rest.find("sys::cu") {
                rest = &rest[at + "sys::".len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                let name = &rest[..end];
                let is_entry_point = name[2..].starts_with(|c: char| c.is_ascii_uppercase());
                if is_entry_point && !called.contains(&name) {
                    called.push(name);
                }
            }
        }
        assert!(called.len() > 30, "found the calls: {called:?}");
        let missing: Vec<_> = called
            .iter()
            .filter(|name| !REQUIRED_SYMBOLS.contains(name))
            .collect();
        assert!(missing.is_empty(), "not in REQUIRED_SYMBOLS: {missing:?}");
    }
}
