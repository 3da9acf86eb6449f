//! A reusable host buffer, so that ops needing temporary space do not allocate on every call.

use std::sync::{Mutex, PoisonError};

/// Grows to the largest size requested and keeps it. Callers bound their requests (a pass over
/// a fixed number of tokens), so it stays small.
#[derive(Debug, Default)]
pub(super) struct Scratch(Mutex<Vec<f32>>);

impl Scratch {
    /// Runs `f` on `len` elements of the buffer (with unspecified contents). Concurrent callers
    /// take turns.
    pub fn with<R>(&self, len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
        // A panic in another caller cannot leave the buffer in a state that matters: its contents
        // are unspecified anyway.
        let mut buffer = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if buffer.len() < len {
            buffer.resize(len, 0.0);
        }
        f(&mut buffer[..len])
    }
}
