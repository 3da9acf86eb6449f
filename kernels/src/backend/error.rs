use crate::quant::{GgmlType, QuantError};

/// Why a backend refused an operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The buffers or sizes passed to `op` do not fit together.
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },
    /// An index array holds a value outside the buffer it indexes (a token id beyond the
    /// vocabulary, a KV slot beyond the pool, a tree parent that does not precede its child).
    /// Backends that cannot inspect device-side indices without a round trip do not report this.
    #[error("{op}: {detail}")]
    Index { op: &'static str, detail: String },
    /// The backend has no kernel for weights of this type.
    #[error("{op}: weights of type {ty} are not supported")]
    Unsupported { op: &'static str, ty: GgmlType },
    /// The device failed while running `op` (a driver or launch error, out of device memory).
    #[error("{op}: device error: {detail}")]
    Device { op: &'static str, detail: String },
    /// A quant row kernel refused its arguments.
    #[error(transparent)]
    Quant(#[from] QuantError),
}

impl BackendError {
    pub(crate) fn shape(op: &'static str, detail: impl Into<String>) -> Self {
        Self::Shape { op, detail: detail.into() }
    }

    pub(crate) fn index(op: &'static str, detail: impl Into<String>) -> Self {
        Self::Index { op, detail: detail.into() }
    }
}
