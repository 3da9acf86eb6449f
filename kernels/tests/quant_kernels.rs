//! Properties of the quant row kernels that need no oracle: `dot_row` agrees with the dot product
//! of `dequantize_row`'s output, quantization round-trips within documented error bounds, and
//! malformed arguments are errors rather than panics.

mod common;

use canopy_kernels::quant::{
    GgmlType, QuantError, dequantize_row, dot_row, is_dequantize_supported, is_quantize_supported,
    quantize_row,
};
use common::{Floats, Rng, gaussian_row, random_blocks};

/// `dot_row` factors each block's sum through its scales and accumulates in f32, so it may differ
/// from the exact dot product of the dequantized row by rounding. Measured against `Σ |w_i x_i|`
/// (the condition of the sum) that error stays below 1e-7 for these rows of up to 4096 elements;
/// the tolerance leaves a 10x margin (the worst case, `n · 2^-24`, is never approached by sums of
/// independent rounding errors).
const DOT_RELATIVE_TOLERANCE: f64 = 1e-6;

/// Upper bounds on the relative RMS error `‖x - dequantize(quantize(x))‖ / ‖x‖` on Gaussian rows,
/// with the error each format's quantizer documents.
const ROUND_TRIP_BOUNDS: [(GgmlType, f64); 12] = [
    (GgmlType::F32, 0.0),
    (GgmlType::F16, 4e-4),
    (GgmlType::Bf16, 3e-3),
    (GgmlType::Q8_0, 0.01),
    (GgmlType::Q8K, 0.01),
    (GgmlType::Q6K, 0.025),
    (GgmlType::Q5_1, 0.05),
    (GgmlType::Q5_0, 0.055),
    (GgmlType::Q5K, 0.045),
    (GgmlType::Q4_1, 0.10),
    (GgmlType::Q4_0, 0.11),
    (GgmlType::Q4K, 0.09),
];

fn supported(filter: fn(GgmlType) -> bool) -> impl Iterator<Item = GgmlType> {
    GgmlType::ALL.into_iter().filter(move |&ty| filter(ty))
}

#[test]
fn dot_row_matches_the_dot_product_of_the_dequantized_row() {
    let mut rng = Rng::new(0xd07);
    for ty in supported(is_dequantize_supported) {
        for n in [0, 256, 1024, 4096] {
            let bytes = random_blocks(ty, n / ty.block_size(), &mut rng, Floats::Moderate);
            let x = gaussian_row(n, 1.0, &mut rng);
            let mut w = vec![0f32; n];
            dequantize_row(ty, &bytes, &mut w).unwrap();
            let exact: f64 = w.iter().zip(&x).map(|(&w, &x)| f64::from(w) * f64::from(x)).sum();
            let condition: f64 = w.iter().zip(&x).map(|(&w, &x)| (f64::from(w) * f64::from(x)).abs()).sum();
            let dot = f64::from(dot_row(ty, &bytes, &x).unwrap());
            assert!(
                (dot - exact).abs() <= DOT_RELATIVE_TOLERANCE * condition,
                "{ty} n={n}: dot_row {dot}, exact {exact}, Σ|w·x| {condition}"
            );
        }
    }
}

fn relative_rms_error(x: &[f32], y: &[f32]) -> f64 {
    let err: f64 = x.iter().zip(y).map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2)).sum();
    let norm: f64 = x.iter().map(|&a| f64::from(a).powi(2)).sum();
    (err / norm).sqrt()
}

#[test]
fn quantize_round_trips_within_documented_bounds() {
    assert_eq!(
        supported(is_quantize_supported).count(),
        ROUND_TRIP_BOUNDS.len(),
        "every quantizer has a bound"
    );
    let mut rng = Rng::new(0x7719);
    for (ty, bound) in ROUND_TRIP_BOUNDS {
        // Scales far apart check that nothing depends on absolute magnitude.
        for scale in [1e-4, 1.0, 1e3] {
            let x = gaussian_row(64 * 256, scale, &mut rng);
            let mut bytes = vec![0u8; x.len() / ty.block_size() * ty.type_size()];
            quantize_row(ty, &x, &mut bytes).unwrap();
            let mut y = vec![0f32; x.len()];
            dequantize_row(ty, &bytes, &mut y).unwrap();
            let error = relative_rms_error(&x, &y);
            println!("{ty} scale {scale}: relative RMS error {error:.5}");
            assert!(error <= bound, "{ty} scale {scale}: relative RMS error {error} > {bound}");
        }
    }
}

#[test]
fn quantize_is_exact_on_zero_and_survives_non_finite_input() {
    for ty in supported(is_quantize_supported) {
        let n = 2 * 256;
        let mut bytes = vec![0xffu8; n / ty.block_size() * ty.type_size()];
        quantize_row(ty, &vec![0.0; n], &mut bytes).unwrap();
        let mut y = vec![1f32; n];
        dequantize_row(ty, &bytes, &mut y).unwrap();
        assert!(y.iter().all(|&v| v == 0.0), "{ty}: zeros do not round-trip");

        let mut hostile = vec![1.0f32; n];
        hostile[3] = f32::NAN;
        hostile[300] = f32::INFINITY;
        hostile[301] = f32::NEG_INFINITY;
        hostile[400] = f32::MAX;
        quantize_row(ty, &hostile, &mut bytes).unwrap();
        dequantize_row(ty, &bytes, &mut y).unwrap();
    }
}

#[test]
fn malformed_lengths_are_errors_for_every_type() {
    let mut rng = Rng::new(0xbad);
    for ty in GgmlType::ALL {
        for _ in 0..50 {
            let elements = (rng.next_u64() % 1100) as usize;
            let bytes = vec![0u8; (rng.next_u64() % 1300) as usize];
            let mut out = vec![0f32; elements];
            let whole = elements.is_multiple_of(ty.block_size());
            let fits = whole && bytes.len() == elements / ty.block_size() * ty.type_size();
            let decoded = dequantize_row(ty, &bytes, &mut out);
            assert_eq!(
                decoded.is_ok(),
                fits && is_dequantize_supported(ty),
                "{ty} {elements} {}",
                bytes.len()
            );
            assert_eq!(dot_row(ty, &bytes, &out).is_ok(), fits && is_dequantize_supported(ty));
            let mut dst = bytes.clone();
            assert_eq!(quantize_row(ty, &out, &mut dst).is_ok(), fits && is_quantize_supported(ty));
            if let Err(err) = decoded {
                let expected_kind = match (is_dequantize_supported(ty), whole) {
                    (false, _) => matches!(err, QuantError::Unsupported(..)),
                    (true, false) => matches!(err, QuantError::PartialBlock { .. }),
                    (true, true) => matches!(err, QuantError::Length { .. }),
                };
                assert!(expected_kind, "{ty} {elements} {}: {err}", bytes.len());
            }
        }
    }
}
