//! ggml's original block formats: 32 elements per block, one f16 scale (and for the `_1` variants
//! an f16 offset), 4, 5 or 8 bits per quant.

pub(super) mod q4;
pub(super) mod q5;
pub(super) mod q8_0;

/// Elements per block of every legacy format.
const QK: usize = 32;

/// The element with the largest magnitude, sign kept (the first one on ties; 0 for all-zero or
/// all-NaN blocks). Symmetric formats map it to their most negative quant, which has no positive
/// counterpart, so it gets one more level of resolution.
fn signed_abs_max(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |best, &v| if v.abs() > best.abs() { v } else { best })
}

/// The smallest and largest element (NaNs ignored; `(0, 0)` for an all-NaN block).
fn min_max(x: &[f32]) -> (f32, f32) {
    let (lo, hi) = x.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if lo > hi { (0.0, 0.0) } else { (lo, hi) }
}

/// `1 / d`, or 0 when `d` is 0 so that an all-zero block quantizes to the zero point.
fn inverse_or_zero(d: f32) -> f32 {
    if d == 0.0 { 0.0 } else { 1.0 / d }
}
