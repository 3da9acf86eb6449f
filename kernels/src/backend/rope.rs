//! Rotary position embedding parameters.

use super::BackendError;

/// How a rotary embedding pairs the dimensions it rotates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// GPT-NeoX pairing: dimension `i` with `i + rotary_dim / 2` (Qwen, Llama in HF layout).
    Neox,
    /// Interleaved pairing: dimension `2i` with `2i + 1` (GPT-J, llama.cpp's "normal" mode).
    Normal,
}

/// Shapes and frequencies of a rotary embedding over `[n_rows, n_heads, head_dim]` tensors.
///
/// Pair `i < rotary_dim / 2` of a token at position `p` is rotated by the angle
/// `p * theta^(-2i / rotary_dim)`: `(a, b) -> (a cos - b sin, a sin + b cos)`. Dimensions from
/// `rotary_dim` to `head_dim` pass through unchanged (partial rotary embeddings).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Heads per token.
    pub n_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Leading elements of each head that rotate: even, at most `head_dim`.
    pub rotary_dim: usize,
    /// Frequency base (`rope.freq_base`).
    pub theta: f32,
    /// Pairing of the rotated dimensions.
    pub style: RopeStyle,
}

impl RopeParams {
    /// The largest `rotary_dim` a backend must support; backends may keep per-pair tables of this
    /// size on the stack.
    pub const MAX_ROTARY_DIM: usize = 1024;

    /// Elements in one token's row.
    pub fn row_len(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub(crate) fn validate(&self, op: &'static str) -> Result<(), BackendError> {
        let detail = if self.n_heads == 0 || self.head_dim == 0 {
            "n_heads and head_dim must be positive"
        } else if self.rotary_dim == 0 || !self.rotary_dim.is_multiple_of(2) {
            "rotary_dim must be even and positive"
        } else if self.rotary_dim > self.head_dim {
            "rotary_dim exceeds head_dim"
        } else if self.rotary_dim > Self::MAX_ROTARY_DIM {
            "rotary_dim exceeds MAX_ROTARY_DIM"
        } else if !(self.theta.is_finite() && self.theta > 0.0) {
            "theta must be finite and positive"
        } else if self.n_heads.checked_mul(self.head_dim).is_none() {
            "n_heads * head_dim overflows"
        } else {
            return Ok(());
        };
        Err(BackendError::shape(op, format!("{detail} ({self:?})")))
    }
}
