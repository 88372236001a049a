//! [`GpuEvent`]: a marker in a GPU's stream, for timing and waiting.

use super::context::Context;
use super::driver::check;
use super::gpu::Gpu;
use crate::error::CudaError;
use cudarc::driver::sys;
use std::sync::Arc;

/// A CUDA event with timing enabled. Recorded on its [`Gpu`]'s stream, it completes when
/// everything enqueued before it has; two completed events give the GPU time between them.
pub struct GpuEvent {
    context: Arc<Context>,
    event: sys::CUevent,
}

// SAFETY: a CUevent may be used from any thread whose current context is its context; every
// use binds the context first.
unsafe impl Send for GpuEvent {}
// SAFETY: as above; the driver API is thread-safe for events.
unsafe impl Sync for GpuEvent {}

impl std::fmt::Debug for GpuEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GpuEvent")
    }
}

impl Gpu {
    /// A new event, not yet recorded.
    pub fn event(&self) -> Result<GpuEvent, CudaError> {
        self.context.bind()?;
        let mut event: sys::CUevent = std::ptr::null_mut();
        // SAFETY: a context is current; the out-pointer is valid for writes; flags 0
        // (CU_EVENT_DEFAULT) keep timing enabled.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut event, 0)
        })?;
        Ok(GpuEvent {
            context: Arc::clone(&self.context),
            event,
        })
    }

    /// A new event recorded now on this GPU's stream.
    pub fn record_event(&self) -> Result<GpuEvent, CudaError> {
        let event = self.event()?;
        event.record()?;
        Ok(event)
    }
}

impl GpuEvent {
    /// Records the event (again) on its GPU's stream, after everything enqueued so far.
    pub fn record(&self) -> Result<(), CudaError> {
        self.context.bind()?;
        // SAFETY: the event and stream are live objects of the current context.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(self.event, self.context.stream)
        })
    }

    /// Waits until the event has completed.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.context.bind()?;
        // SAFETY: the event is a live object of the current context.
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(self.event)
        })
    }

    /// Milliseconds of GPU time from `self` to `end` (both recorded on the same GPU); waits
    /// for `end` first. Resolution is about half a microsecond.
    pub fn elapsed_ms(&self, end: &GpuEvent) -> Result<f32, CudaError> {
        if !Arc::ptr_eq(&self.context, &end.context) {
            return Err(CudaError::Launch {
                kernel: "<event timing>".to_string(),
                reason: "the two events belong to different Gpus".to_string(),
            });
        }
        end.synchronize()?;
        let mut ms = 0f32;
        // SAFETY: both events are live objects of the current context (bound by
        // `synchronize`); the out-pointer is valid for writes.
        check("cuEventElapsedTime", unsafe {
            sys::cuEventElapsedTime(&mut ms, self.event, end.event)
        })?;
        Ok(ms)
    }
}

impl Drop for GpuEvent {
    fn drop(&mut self) {
        if self.context.bind().is_ok() {
            // SAFETY: the event was created in this context and is destroyed exactly once.
            unsafe {
                sys::cuEventDestroy_v2(self.event);
            }
        }
    }
}
