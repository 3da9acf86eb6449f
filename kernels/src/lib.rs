//! Compute for canopy.
//!
//! - [`quant`]: the GGML tensor element types and their block layouts, with CPU reference
//!   dequantize, dot-product and quantize routines.
//! - [`backend`]: the [`backend::Backend`] trait that model code is written against, and the CPU
//!   reference backend.

pub mod backend;
pub mod quant;
