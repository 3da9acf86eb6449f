//! Compute for canopy.
//!
//! - [`quant`]: the GGML tensor element types and their block layouts, with CPU reference
//!   dequantize, dot-product and quantize routines.

pub mod quant;
