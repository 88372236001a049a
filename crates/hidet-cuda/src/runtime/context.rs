//! The state behind a [`crate::runtime::Gpu`]: the device's primary context, the stream every
//! operation is enqueued on, the registry of live allocations and the capture in progress.

use super::driver::check;
use super::module::ModuleHandle;
use super::registry::AllocationRegistry;
use crate::error::CudaError;
use cudarc::driver::sys;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One opened device. Everything that owns driver objects of this device (buffers, modules,
/// events, graphs) holds an `Arc<Context>`, so the context and stream outlive them.
pub(crate) struct Context {
    pub(crate) device: sys::CUdevice,
    pub(crate) context: sys::CUcontext,
    pub(crate) stream: sys::CUstream,
    /// Shared memory one block may use with the opt-in attribute, in bytes.
    pub(crate) max_shared_optin: usize,
    /// Usable ranges of live allocations.
    allocations: AllocationRegistry,
    /// While a capture runs: the modules launched into it (the graph keeps them loaded).
    capture: Mutex<Option<Vec<Arc<ModuleHandle>>>>,
}

// SAFETY: the handles are opaque driver objects that the CUDA driver API allows to be used
// from any thread once the context is current on it; every use goes through `bind` first.
// The mutable state is behind mutexes.
unsafe impl Send for Context {}
// SAFETY: as above; the driver API is thread-safe for these objects.
unsafe impl Sync for Context {}

impl Context {
    /// Retains `device`'s primary context and creates a non-blocking stream on it.
    pub(crate) fn open(
        device: sys::CUdevice,
        max_shared_optin: usize,
    ) -> Result<Context, CudaError> {
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the driver is initialised (callers hold a `Driver`); `device` came from
        // cuDeviceGet; the out-pointer is valid for writes.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut context, device)
        })?;
        let release = |e| {
            // SAFETY: balances the successful retain above.
            unsafe { sys::cuDevicePrimaryCtxRelease_v2(device) };
            e
        };
        // SAFETY: `context` is the live primary context just retained.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(context) }).map_err(release)?;
        let mut stream: sys::CUstream = std::ptr::null_mut();
        // SAFETY: a context is current; the out-pointer is valid for writes.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(
                &mut stream,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as std::ffi::c_uint,
            )
        })
        .map_err(release)?;
        Ok(Context {
            device,
            context,
            stream,
            max_shared_optin,
            allocations: AllocationRegistry::default(),
            capture: Mutex::new(None),
        })
    }

    /// Makes this context current on the calling thread (every driver call needs it).
    pub(crate) fn bind(&self) -> Result<(), CudaError> {
        // SAFETY: `self.context` is retained until `self` is dropped.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(self.context)
        })
    }

    pub(crate) fn register(&self, start: u64, bytes: usize) {
        self.allocations.insert(start, bytes);
    }

    pub(crate) fn unregister(&self, start: u64) {
        self.allocations.remove(start);
    }

    /// `Ok` when `[address, address + bytes)` lies inside one live allocation of this
    /// context (a zero-length range may sit at the allocation's end).
    pub(crate) fn check_range(&self, address: u64, bytes: usize) -> Result<(), CudaError> {
        if self.allocations.contains(address, bytes) {
            Ok(())
        } else {
            Err(CudaError::InvalidDeviceRange { address, bytes })
        }
    }

    fn capture_slot(&self) -> MutexGuard<'_, Option<Vec<Arc<ModuleHandle>>>> {
        self.capture.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts collecting launched modules; false when a capture is already running.
    pub(crate) fn start_collecting(&self) -> bool {
        let mut slot = self.capture_slot();
        if slot.is_some() {
            return false;
        }
        *slot = Some(Vec::new());
        true
    }

    /// Records that `module` was launched (kept only while a capture runs).
    pub(crate) fn note_launch(&self, module: &Arc<ModuleHandle>) {
        if let Some(modules) = self.capture_slot().as_mut() {
            if !modules.iter().any(|m| Arc::ptr_eq(m, module)) {
                modules.push(Arc::clone(module));
            }
        }
    }

    /// Stops collecting and returns the modules launched since `start_collecting`.
    pub(crate) fn stop_collecting(&self) -> Vec<Arc<ModuleHandle>> {
        self.capture_slot().take().unwrap_or_default()
    }

    /// Waits for everything enqueued on the stream.
    pub(crate) fn synchronize(&self) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: the stream is live until `self` is dropped.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.stream)
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // Errors cannot be reported from here; a failing call leaves the driver to reclaim
        // the objects when the process ends.
        // SAFETY: the context is still retained; the stream was created on it and nothing
        // else refers to it (every owner of driver objects holds an `Arc<Context>`, so this
        // runs after all of them were dropped). Destroying the stream after synchronizing
        // it, then releasing the retain, each happens exactly once.
        unsafe {
            if sys::cuCtxSetCurrent(self.context) == sys::CUresult::CUDA_SUCCESS {
                sys::cuStreamSynchronize(self.stream);
                sys::cuStreamDestroy_v2(self.stream);
            }
            sys::cuDevicePrimaryCtxRelease_v2(self.device);
        }
    }
}
