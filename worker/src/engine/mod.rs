//! The generation engine: from a prompt to streamed text with one model on one device.

mod output;
mod stop;

pub use output::{OutputStep, OutputTracker, StopConditions};
pub use stop::{FinishReason, StopScan, StopStrings};
