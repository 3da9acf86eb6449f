//! Per-sub-block scale searches for the K-format quantizers.
//!
//! Each search tries a handful of quantization grids slightly finer and coarser than the one
//! spanned by the block's extremes, refits the scale (and offset) to the resulting quants by least
//! squares, and keeps the fit with the smallest squared error. Sums run in f64 so the closed-form
//! error does not cancel away.

use crate::quant::ScaleFit;

/// Grids tried on each side of the nominal one, `GRID_STEP` levels apart, by [`ScaleFit::Search`].
const GRID_CANDIDATES: i32 = 10;
const GRID_STEP: f32 = 0.1;

/// The grids tried on each side of the nominal one.
fn candidates(fit: ScaleFit) -> i32 {
    match fit {
        ScaleFit::Search => GRID_CANDIDATES,
        ScaleFit::Nominal => 0,
    }
}

/// The fit `x ≈ scale * q - min` with `q` in `0..=max_q`, `scale >= 0` and `min >= 0` (the
/// formats store `min` unsigned and subtract it), minimising the squared error over the grids
/// `fit` tries. Returns `(scale, min)`.
pub(super) fn fit_scale_min(x: &[f32], max_q: u8, fit: ScaleFit) -> (f32, f32) {
    let lo = x.iter().fold(0.0f32, |m, &v| m.min(v));
    let hi = x.iter().fold(lo, |m, &v| m.max(v));
    if hi <= lo {
        return (0.0, -lo);
    }
    let n = x.len() as f64;
    let sum_x: f64 = x.iter().map(|&v| f64::from(v)).sum();
    let sum_xx: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();

    let mut best = (f64::INFINITY, (hi - lo) / f32::from(max_q), -lo);
    let candidates = candidates(fit);
    for step in -candidates..=candidates {
        let levels = f32::from(max_q) + step as f32 * GRID_STEP;
        let inv = levels / (hi - lo);
        // `v - lo` is never negative, so adding a half and truncating rounds half away from zero.
        let (sum_q, sum_qq, sum_qx) = grid_sums(x, |v| ((v - lo) * inv + 0.5) as i32, 0, i32::from(max_q));
        let (sum_q, sum_qq) = (f64::from(sum_q), f64::from(sum_qq));
        // Least squares for x ≈ a·q + b; b is -min, so a positive b is clamped to 0.
        let det = n * sum_qq - sum_q * sum_q;
        if det <= 0.0 {
            continue;
        }
        let mut a = (n * sum_qx - sum_q * sum_x) / det;
        let mut b = (sum_qq * sum_x - sum_q * sum_qx) / det;
        if b > 0.0 {
            b = 0.0;
            a = sum_qx / sum_qq;
        }
        if a <= 0.0 {
            continue;
        }
        let err =
            a * a * sum_qq + 2.0 * a * b * sum_q - 2.0 * a * sum_qx + n * b * b - 2.0 * b * sum_x + sum_xx;
        if err < best.0 {
            best = (err, a as f32, (-b) as f32);
        }
    }
    (best.1, best.2)
}

/// The scale `s` minimising the squared error of `x ≈ s * q` with `q` in `q_lo..=q_hi`
/// (`q_lo < 0 < q_hi`). Either sign of `s` may win: a range like `-32..=31` has one more level on
/// the negative side, so mapping the largest magnitude there can be more precise. `fit` says
/// which grids are tried.
pub(super) fn fit_symmetric(x: &[f32], q_lo: i32, q_hi: i32, fit: ScaleFit) -> f32 {
    let extreme = x.iter().fold(0.0f32, |best, &v| if v.abs() > best.abs() { v } else { best });
    if extreme == 0.0 {
        return 0.0;
    }
    let mut best = (0.0f64, 0.0f32);
    let candidates = candidates(fit);
    for (levels, sign) in [(-q_lo, -1.0f32), (q_hi, 1.0)] {
        for step in -candidates..=candidates {
            let inv = sign * (levels as f32 + step as f32 * GRID_STEP) / extreme;
            let (_, sum_qq, sum_qx) =
                grid_sums(x, |v| (v * inv + 0.5f32.copysign(v * inv)) as i32, q_lo, q_hi);
            let sum_qq = f64::from(sum_qq);
            // The error is Σx² - (Σqx)²/Σq², so the best grid maximises (Σqx)²/Σq².
            if sum_qq > 0.0 {
                let gain = sum_qx * sum_qx / sum_qq;
                if gain > best.0 {
                    best = (gain, (sum_qx / sum_qq) as f32);
                }
            }
        }
    }
    best.1
}

/// `(Σq, Σq², Σq·x)` over `x`, one sub-block, with `q = quantize(x)` clamped to `q_lo..=q_hi`.
/// The integer sums are exact (and far from overflowing: 32 values of 6 bits); `Σq·x` runs in
/// four f64 lanes (each product is exact in f64) so that the searches
/// above, which call this for every candidate grid, are not bound by one long chain of adds.
#[inline(always)]
fn grid_sums(x: &[f32], quantize: impl Fn(f32) -> i32, q_lo: i32, q_hi: i32) -> (i32, i32, f64) {
    let (mut sum_q, mut sum_qq) = (0i32, 0i32);
    let mut sum_qx = [0.0f64; 4];
    let (quads, rest) = x.as_chunks::<4>();
    for quad in quads {
        for (lane, &v) in quad.iter().enumerate() {
            let q = quantize(v).clamp(q_lo, q_hi);
            sum_q += q;
            sum_qq += q * q;
            sum_qx[lane] += f64::from(q) * f64::from(v);
        }
    }
    for &v in rest {
        let q = quantize(v).clamp(q_lo, q_hi);
        sum_q += q;
        sum_qq += q * q;
        sum_qx[0] += f64::from(q) * f64::from(v);
    }
    (sum_q, sum_qq, (sum_qx[0] + sum_qx[1]) + (sum_qx[2] + sum_qx[3]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::le::round_clamped;

    const FITS: [ScaleFit; 2] = [ScaleFit::Search, ScaleFit::Nominal];

    #[test]
    fn affine_fit_is_exact_on_a_grid() {
        // x = 0.5 * q - 1.5 for q = 0..=15 hits every level.
        let x: Vec<f32> = (0..32).map(|i| 0.5 * (i % 16) as f32 - 1.5).collect();
        for fit in FITS {
            let (scale, min) = fit_scale_min(&x, 15, fit);
            assert!((scale - 0.5).abs() < 1e-6 && (min - 1.5).abs() < 1e-6, "{fit:?}: {scale} {min}");
        }
    }

    /// Squared error of `x ≈ scale * q - min` with each `q` the best in `0..=max_q`.
    fn affine_error(x: &[f32], max_q: u8, scale: f32, min: f32) -> f64 {
        x.iter()
            .map(|&v| {
                let q = if scale > 0.0 { round_clamped((v + min) / scale, 0, i32::from(max_q)) } else { 0 };
                f64::from(scale * q as f32 - min - v).powi(2)
            })
            .sum()
    }

    #[test]
    fn affine_fit_beats_the_extremes_grid_and_keeps_min_non_negative() {
        let mut totals = [0.0f64; 2];
        for shift in [-20.0f32, -3.0, -0.5, 0.0, 0.5, 3.0, 20.0] {
            // A lopsided ramp, so the best grid is not the one spanned by the extremes.
            let x: Vec<f32> = (0..32).map(|i| shift + ((i * i) % 37) as f32 / 7.0).collect();
            let lo = x.iter().fold(0.0f32, |m, &v| m.min(v));
            let hi = x.iter().fold(lo, |m, &v| m.max(v));
            let naive = affine_error(&x, 15, (hi - lo) / 15.0, -lo);
            for (fit, total) in FITS.into_iter().zip(&mut totals) {
                let (scale, min) = fit_scale_min(&x, 15, fit);
                assert!(scale > 0.0 && min >= 0.0, "{fit:?}, shift {shift}: {scale} {min}");
                let fitted = affine_error(&x, 15, scale, min);
                assert!(fitted <= naive * 1.0001, "{fit:?}, shift {shift}: {fitted} > {naive}");
                *total += fitted;
            }
        }
        // The search tries the nominal grid among others.
        assert!(totals[0] < totals[1], "search {} against nominal {}", totals[0], totals[1]);
        let constant_negative = [-2.0f32; 32];
        for fit in FITS {
            assert_eq!(fit_scale_min(&constant_negative, 15, fit), (0.0, 2.0));
        }
    }

    #[test]
    fn symmetric_fit_uses_the_longer_side() {
        for fit in FITS {
            // -32 * 0.25 = -8 is representable only with a positive scale; 8 only with a negative one.
            let mut x = vec![0.25f32; 16];
            x[0] = -8.0;
            assert!((fit_symmetric(&x, -32, 31, fit) - 0.25).abs() < 1e-6, "{fit:?}");
            x[0] = 8.0;
            x[1] = -0.25;
            assert!((fit_symmetric(&x, -32, 31, fit) + 0.25).abs() < 1e-6, "{fit:?}");
            assert_eq!(fit_symmetric(&[0.0; 16], -32, 31, fit), 0.0);
        }
    }
}
