//! Recording a sequence of kernel launches as a CUDA graph and replaying it, which removes the
//! per-launch host cost of a decode step (hundreds of small launches per token).

use cudarc::driver::CudaGraph;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};

use super::context::{Device, device_error, driver};
use crate::backend::BackendError;

/// An instantiated CUDA graph, launched on the stream it was recorded from.
pub struct CudaGraphExec(CudaGraph);

// SAFETY: the graph is only ever launched on the backend's one stream, and the CUDA driver API
// is thread-safe; cudarc leaves the marker traits off only because the graph holds raw handles.
unsafe impl Send for CudaGraphExec {}
// SAFETY: as for Send; launching takes `&self` and does not mutate the handles.
unsafe impl Sync for CudaGraphExec {}

impl std::fmt::Debug for CudaGraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CudaGraphExec")
    }
}

pub(super) fn record<E: From<BackendError>>(
    device: &Device,
    ops: impl FnOnce() -> Result<(), E>,
) -> Result<CudaGraphExec, E> {
    const OP: &str = "record";
    // Thread-local mode: other threads' unsafe driver calls (allocations) do not invalidate
    // the capture, while this thread's are refused instead of silently running.
    device
        .stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(driver(OP))?;
    let submitted = ops();
    // The capture must end whatever happened, or the stream stays unusable.
    let captured = device.stream.end_capture(CUgraphInstantiate_flags(0));
    submitted?;
    let graph =
        captured.map_err(driver(OP))?.ok_or_else(|| device_error(OP, "the capture recorded no graph"))?;
    graph.upload().map_err(driver(OP))?;
    Ok(CudaGraphExec(graph))
}

pub(super) fn replay(graph: &CudaGraphExec) -> Result<(), BackendError> {
    graph.0.launch().map_err(driver("replay"))
}
