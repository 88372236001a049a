//! [`CapturedGraph`]: work enqueued on a GPU's stream, captured once as a CUDA graph and
//! replayed with one launch.

use super::context::Context;
use super::driver::check;
use super::gpu::Gpu;
use super::module::ModuleHandle;
use crate::error::CudaError;
use cudarc::driver::sys;
use std::sync::Arc;

/// An instantiated CUDA graph. Replaying it runs the captured work again, on the same device
/// addresses and with the same argument values as when it was captured: the buffers it
/// touches must stay allocated while it is replayed (new inputs are copied into them
/// first). It keeps the modules of its kernels loaded.
pub struct CapturedGraph {
    context: Arc<Context>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    _modules: Vec<Arc<ModuleHandle>>,
}

// SAFETY: graphs and executable graphs may be used from any thread whose current context is
// theirs; every use binds the context first.
unsafe impl Send for CapturedGraph {}
// SAFETY: as above.
unsafe impl Sync for CapturedGraph {}

impl std::fmt::Debug for CapturedGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapturedGraph")
    }
}

impl Gpu {
    /// Captures what `record` enqueues on this GPU's stream (launches, [`Gpu::memset`],
    /// [`Gpu::copy_device`]) into a CUDA graph, without running it, and instantiates it.
    ///
    /// Inside `record`, calls that wait for the stream or touch host memory
    /// ([`Gpu::upload`], [`Gpu::download`], [`Gpu::synchronize`], allocations) fail and end
    /// the capture with [`CudaError::Capture`]; so does an error `record` returns. The
    /// capture is thread-local (`CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`): work another thread
    /// enqueues on this stream meanwhile would be captured too, so do not share the `Gpu`
    /// during a capture. Captures do not nest.
    pub fn capture<F>(&self, record: F) -> Result<CapturedGraph, CudaError>
    where
        F: FnOnce(&Gpu) -> Result<(), CudaError>,
    {
        let capture_error = |e: CudaError| CudaError::Capture(Box::new(e));
        if !self.context.start_collecting() {
            return Err(capture_error(CudaError::Launch {
                kernel: "<capture>".to_string(),
                reason: "a capture is already running on this Gpu".to_string(),
            }));
        }
        if let Err(e) = self.context.bind().and_then(|()| {
            // SAFETY: the stream is a live, non-default stream of the current context.
            check("cuStreamBeginCapture", unsafe {
                sys::cuStreamBeginCapture_v2(
                    self.context.stream,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                )
            })
        }) {
            self.context.stop_collecting();
            return Err(capture_error(e));
        }
        let recorded = record(self);
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // The capture is ended whatever happened, so the stream is usable again.
        let ended = self.context.bind().and_then(|()| {
            // SAFETY: the stream is capturing (begun above, on this thread); the
            // out-pointer is valid for writes.
            check("cuStreamEndCapture", unsafe {
                sys::cuStreamEndCapture(self.context.stream, &mut graph)
            })
        });
        let modules = self.context.stop_collecting();
        let destroy_graph = |graph: sys::CUgraph| {
            if !graph.is_null() {
                // SAFETY: the graph came from cuStreamEndCapture and is destroyed once.
                unsafe {
                    sys::cuGraphDestroy(graph);
                }
            }
        };
        if let Err(e) = recorded.and(ended) {
            destroy_graph(graph);
            return Err(capture_error(e));
        }
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is a complete graph of the current context; the out-pointer is
        // valid for writes; flags 0.
        if let Err(e) = check("cuGraphInstantiateWithFlags", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)
        }) {
            destroy_graph(graph);
            return Err(capture_error(e));
        }
        Ok(CapturedGraph {
            context: Arc::clone(&self.context),
            graph,
            exec,
            _modules: modules,
        })
    }
}

impl CapturedGraph {
    /// Enqueues one run of the graph on its GPU's stream.
    pub fn replay(&self) -> Result<(), CudaError> {
        self.context.bind()?;
        // SAFETY: the executable graph and the stream are live objects of the current
        // context; the graph's kernels stay loaded (their modules are held).
        check("cuGraphLaunch", unsafe {
            sys::cuGraphLaunch(self.exec, self.context.stream)
        })
    }
}

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        if self.context.bind().is_ok() {
            // SAFETY: both were created in this context and are destroyed exactly once; a
            // replay still running keeps its own reference in the driver.
            unsafe {
                sys::cuGraphExecDestroy(self.exec);
                sys::cuGraphDestroy(self.graph);
            }
        }
    }
}
