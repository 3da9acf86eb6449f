//! Model files for canopy.

pub mod synth;
