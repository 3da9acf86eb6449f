//! Little-endian field reads and writes shared by the block formats.

/// The f16 stored in `bytes`, widened to f32 (exact).
#[inline]
pub(super) fn f16_to_f32(bytes: [u8; 2]) -> f32 {
    half::f16::from_le_bytes(bytes).to_f32()
}

/// `value` rounded to the nearest f16 (ties to even), as stored bytes and as the f32 it decodes
/// to. Quantizers divide by the decoded scale so that the stored quants fit the scale a reader
/// will actually use.
#[inline]
pub(super) fn f32_to_f16(value: f32) -> ([u8; 2], f32) {
    let half = half::f16::from_f32(value);
    (half.to_le_bytes(), half.to_f32())
}

/// The nearest integer to `value`, ties away from zero, clamped to `lo..=hi`; NaN counts as 0.
#[inline]
pub(super) fn round_clamped(value: f32, lo: i32, hi: i32) -> i32 {
    // `as` saturates and maps NaN to 0, so non-finite inputs cannot panic here.
    (value.round() as i32).clamp(lo, hi)
}

/// The smallest f16 at or above `value` (for `value >= 0`), as stored bytes and decoded f32.
/// Super-block scales use it so that the largest sub-block scale still fits its integer range:
/// rounding the unit down would clamp that scale, which costs far more than the coarser unit
/// (noticeably so where f16 turns subnormal).
#[inline]
pub(super) fn f32_to_f16_at_least(value: f32) -> ([u8; 2], f32) {
    let mut half = half::f16::from_f32(value);
    if half.to_f32() < value {
        // Finite and non-negative here, so the next bit pattern is the next larger value.
        half = half::f16::from_bits(half.to_bits() + 1);
    }
    (half.to_le_bytes(), half.to_f32())
}
