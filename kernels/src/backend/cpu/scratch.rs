//! Reusable host buffers, so that ops needing temporary space do not allocate on every call.
//!
//! [`Scratch`] is one buffer per backend, for work done by the calling thread. [`ThreadBuffer`]
//! lends each rayon job a buffer kept by the thread it runs on: jobs run on many threads at once,
//! so one shared buffer would serialise them, and a buffer per job would allocate on every call.

use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, PoisonError};
use std::thread::LocalKey;

/// Grows to the largest size requested and keeps it. Callers bound their requests (a pass over
/// a fixed number of tokens, a batch's sequences), so it stays small.
#[derive(Debug)]
pub(super) struct Scratch<T = f32>(Mutex<Vec<T>>);

impl<T> Default for Scratch<T> {
    fn default() -> Self {
        Self(Mutex::new(Vec::new()))
    }
}

impl<T> Scratch<T> {
    /// Runs `f` on the buffer, whose contents are whatever the last caller left. Concurrent
    /// callers take turns.
    pub fn with_vec<R>(&self, f: impl FnOnce(&mut Vec<T>) -> R) -> R {
        // A panic in another caller cannot leave the buffer in a state that matters: its contents
        // are unspecified anyway.
        let mut buffer = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut buffer)
    }
}

impl<T: Copy + Default> Scratch<T> {
    /// Runs `f` on `len` elements of the buffer (with unspecified contents).
    pub fn with<R>(&self, len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
        self.with_vec(|buffer| {
            if buffer.len() < len {
                buffer.resize(len, T::default());
            }
            f(&mut buffer[..len])
        })
    }
}

/// Where a thread keeps the spare buffer of one kind between the jobs that borrow it.
pub(super) type ThreadSpare<T> = LocalKey<Cell<Vec<T>>>;

/// A buffer taken from the current thread's spare and put back when dropped, keeping its
/// capacity: once a thread has served the largest request, later ones allocate nothing.
///
/// Each spare holds one buffer. A second buffer of the same kind taken on a thread before the
/// first is given back (which rayon jobs, that do not nest, never do) allocates a fresh one, and
/// the smaller of the two is freed when both are back. The spares live as long as their threads
/// (rayon's workers: the process), each as large as the largest request it served.
pub(super) struct ThreadBuffer<T: 'static> {
    buffer: Vec<T>,
    spare: &'static ThreadSpare<T>,
}

impl<T: Copy + Default> ThreadBuffer<T> {
    /// `len` elements with unspecified contents.
    pub fn take(spare: &'static ThreadSpare<T>, len: usize) -> Self {
        // `try_with` fails only while the thread is being torn down; a fresh buffer then serves.
        let mut buffer = spare.try_with(Cell::take).unwrap_or_default();
        // Keeps the old contents (no fill) unless the buffer grows.
        buffer.resize(len, T::default());
        Self { buffer, spare }
    }
}

impl<T> Deref for ThreadBuffer<T> {
    type Target = Vec<T>;

    fn deref(&self) -> &Vec<T> {
        &self.buffer
    }
}

impl<T> DerefMut for ThreadBuffer<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.buffer
    }
}

impl<T> Drop for ThreadBuffer<T> {
    fn drop(&mut self) {
        let buffer = std::mem::take(&mut self.buffer);
        // During thread teardown there is nowhere to put it back, and it is simply freed.
        let _ = self.spare.try_with(|spare| {
            let held = spare.take();
            spare.set(if held.capacity() > buffer.capacity() { held } else { buffer });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static SPARE: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
    }

    #[test]
    fn a_returned_buffer_is_lent_again_without_allocating() {
        let first = ThreadBuffer::take(&SPARE, 100);
        let address = first.as_ptr();
        drop(first);
        let again = ThreadBuffer::take(&SPARE, 50);
        assert_eq!(again.as_ptr(), address);
        assert_eq!(again.len(), 50);
        drop(again);
        assert_eq!(ThreadBuffer::take(&SPARE, 100).as_ptr(), address);
    }

    #[test]
    fn buffers_taken_together_are_distinct_and_the_larger_is_kept() {
        let mut small = ThreadBuffer::take(&SPARE, 10);
        let mut large = ThreadBuffer::take(&SPARE, 1000);
        small.fill(1);
        large.fill(2);
        assert!(small.iter().all(|&v| v == 1));
        let large_address = large.as_ptr();
        drop(large);
        drop(small);
        assert_eq!(ThreadBuffer::take(&SPARE, 1000).as_ptr(), large_address);
    }
}
