//! Model architectures written once against [`canopy_kernels::backend::Backend`].
//!
//! - [`qwen3`]: Qwen3 dense (q/k RMSNorm, NEOX RoPE, GQA, SwiGLU).
//!
//! A forward pass takes a batch of sequences, each with its new tokens and the mask they attend
//! with ([`SequenceInput`]), appends their keys and values to a [`KvCache`](crate::kv::KvCache),
//! and leaves the logits of the rows asked for ([`LogitRows`]) in a device tensor of the model.

mod load;
pub mod qwen3;
mod step_graphs;

use canopy_kernels::backend::{BackendError, Mask};

use crate::gguf::{GgmlType, GgufError};
use crate::kv::{KvError, SeqId};

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ArchError {
    /// A metadata key is missing or has the wrong type (the error names the key).
    #[error(transparent)]
    Metadata(#[from] GgufError),
    /// The file is of another architecture.
    #[error("expected architecture {expected:?}, the file says {found:?}")]
    WrongArchitecture {
        /// The architecture the loader reads.
        expected: &'static str,
        /// `general.architecture` of the file.
        found: String,
    },
    /// A metadata value is out of range or contradicts another.
    #[error("metadata {key}: {detail}")]
    InvalidConfig {
        /// The offending key.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A tensor the architecture needs is absent.
    #[error("tensor {name} is missing")]
    MissingTensor {
        /// The tensor's GGUF name.
        name: String,
    },
    /// A tensor's dimensions differ from the ones the configuration implies.
    #[error("tensor {name} has dimensions {found:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor's GGUF name.
        name: String,
        /// Dimensions the configuration implies, in GGML order.
        expected: Vec<u64>,
        /// Dimensions in the file.
        found: Vec<u64>,
    },
    /// A tensor's element type cannot be used where it is.
    #[error("tensor {name} has unsupported type {ty}")]
    TensorType {
        /// The tensor's GGUF name.
        name: String,
        /// Its element type.
        ty: GgmlType,
    },
    /// The forward pass was given an unusable batch.
    #[error("invalid batch: {0}")]
    Batch(String),
    /// The KV cache refused the batch (out of blocks, unknown sequence, wrong shape).
    #[error(transparent)]
    Kv(#[from] KvError),
    /// A device operation failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// One sequence's part of a forward batch.
#[derive(Clone, Copy, Debug)]
pub struct SequenceInput<'a> {
    /// The sequence in the KV cache; its new tokens go after its current length.
    pub seq: SeqId,
    /// The new tokens.
    pub tokens: &'a [u32],
    /// What the new tokens see among themselves: [`Mask::Causal`] for prefill chunks and decode,
    /// [`Mask::Tree`] for draft-tree verification.
    pub mask: Mask<'a>,
}

/// Which rows of a batch (new tokens, in batch order) get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitRows<'a> {
    /// Every new token.
    All,
    /// The last new token of each sequence, in batch order.
    LastPerSequence,
    /// The listed rows, in the listed order.
    Rows(&'a [u32]),
    /// None: a prefill chunk whose logits nobody reads.
    None,
}

/// What a forward pass left in the model's output tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardOutput {
    /// New tokens in the batch: the rows of each captured hidden-state tensor.
    pub n_rows: usize,
    /// Rows of the logits tensor, each `vocab_size` long.
    pub n_logit_rows: usize,
}
