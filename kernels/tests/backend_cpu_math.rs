//! The CPU backend's arithmetic ops against naive f64 references written here: matmul over every
//! weight format, RMS norms, RoPE, SwiGLU and add. Also the shape errors of these ops.

// The helpers unwrap like the tests calling them: an error there is a test failure.
#![allow(clippy::unwrap_used)]

mod common;

use canopy_kernels::backend::cpu::{CpuBackend, CpuTensor};
use canopy_kernels::backend::{Backend, BackendError, DeviceArray, RopeParams, RopeStyle};
use canopy_kernels::quant::{
    GgmlType, dequantize_row, is_dequantize_supported, is_quantize_supported, quantize_row,
};
use common::{Floats, Rng, gaussian_row, random_blocks};

/// Value the tests put in buffer tails that an op must leave alone.
const SENTINEL: f32 = 7.25;

fn download(backend: &CpuBackend, t: &CpuTensor) -> Vec<f32> {
    let mut out = vec![0.0; t.len()];
    backend.download(t, &mut out).unwrap();
    out
}

/// A tensor holding `data` followed by `spare` sentinels.
fn upload_padded(backend: &CpuBackend, data: &[f32], spare: usize) -> CpuTensor {
    let mut padded = data.to_vec();
    padded.resize(data.len() + spare, SENTINEL);
    backend.upload(&padded).unwrap()
}

fn assert_tail_untouched(values: &[f32], from: usize, what: &str) {
    assert!(values[from..].iter().all(|&v| v == SENTINEL), "{what}: an op wrote past its shape");
}

fn assert_shape_error<T: std::fmt::Debug>(result: Result<T, BackendError>, op: &str) {
    match result {
        Err(BackendError::Shape { op: reported, .. }) => assert_eq!(reported, op),
        other => panic!("expected a shape error from {op}, got {other:?}"),
    }
}

/// The encoded bytes of a `rows x cols` weight of type `ty` and its dequantized values.
fn random_weight(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> (Vec<u8>, Vec<f32>) {
    let row_bytes = cols / ty.block_size() * ty.type_size();
    let mut bytes = vec![0u8; rows * row_bytes];
    if is_quantize_supported(ty) {
        for row in bytes.chunks_exact_mut(row_bytes) {
            quantize_row(ty, &gaussian_row(cols, 1.0, rng), row).unwrap();
        }
    } else {
        bytes = random_blocks(ty, rows * cols / ty.block_size(), rng, Floats::Moderate);
    }
    let mut values = vec![0f32; rows * cols];
    for (row, out) in bytes.chunks_exact(row_bytes).zip(values.chunks_exact_mut(cols)) {
        dequantize_row(ty, row, out).unwrap();
    }
    (bytes, values)
}

#[test]
fn matmul_matches_a_naive_product_for_every_weight_format() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0x3a7);
    // 37 rows leave a partial panel; 33 tokens span two passes of the multi-token path; float
    // formats also take rows whose length is not a multiple of any SIMD width.
    let rows = 37;
    let formats = GgmlType::ALL.into_iter().filter(|&ty| is_dequantize_supported(ty));
    let shapes =
        formats.map(|ty| (ty, 512)).chain([GgmlType::F32, GgmlType::F16, GgmlType::Bf16].map(|ty| (ty, 45)));
    for (ty, cols) in shapes {
        let (bytes, w) = random_weight(ty, rows, cols, &mut rng);
        let weight = backend.upload_weight(ty, rows, cols, &bytes).unwrap();
        for n_rows in [1, 2, 5, 33] {
            let x = gaussian_row(n_rows * cols, 1.0, &mut rng);
            let x_tensor = upload_padded(&backend, &x, 3);
            let mut out = upload_padded(&backend, &[], n_rows * rows + 5);
            backend.matmul(&x_tensor, &weight, n_rows, &mut out).unwrap();
            let got = download(&backend, &out);
            for t in 0..n_rows {
                for r in 0..rows {
                    let (w_row, x_row) = (&w[r * cols..][..cols], &x[t * cols..][..cols]);
                    let exact: f64 =
                        w_row.iter().zip(x_row).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
                    let condition: f64 =
                        w_row.iter().zip(x_row).map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs()).sum();
                    let value = f64::from(got[t * rows + r]);
                    assert!(
                        (value - exact).abs() <= 1e-5 * condition + 1e-30,
                        "{ty} {cols} columns, n_rows={n_rows}, token {t} row {r}: {value} vs {exact}"
                    );
                }
            }
            assert_tail_untouched(&got, n_rows * rows, "matmul out");
        }
    }
}

#[test]
fn matmul_gives_a_token_the_same_bits_in_any_batch() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0xb17);
    let (rows, cols) = (21, 256);
    for ty in [GgmlType::Q4K, GgmlType::Q8_0, GgmlType::F16] {
        let (bytes, _) = random_weight(ty, rows, cols, &mut rng);
        let weight = backend.upload_weight(ty, rows, cols, &bytes).unwrap();
        let x = gaussian_row(40 * cols, 1.0, &mut rng);
        let product = |tokens: std::ops::Range<usize>| {
            let n_rows = tokens.len();
            let input = backend.upload(&x[tokens.start * cols..tokens.end * cols]).unwrap();
            let mut out = backend.zeros(n_rows * rows).unwrap();
            backend.matmul(&input, &weight, n_rows, &mut out).unwrap();
            download(&backend, &out)
        };
        let batched = product(0..40);
        for token in [0, 7, 31, 32, 39] {
            assert_eq!(
                product(token..token + 1),
                batched[token * rows..][..rows],
                "{ty} token {token} alone"
            );
        }
        assert_eq!(product(30..35), batched[30 * rows..35 * rows], "{ty} tokens 30..35");
    }
}

#[test]
fn matmul_and_weight_upload_refuse_bad_shapes() {
    let backend = CpuBackend::new();
    let ty = GgmlType::Q4K;
    let (bytes, _) = random_weight(ty, 4, 256, &mut Rng::new(1));
    let weight = backend.upload_weight(ty, 4, 256, &bytes).unwrap();
    let x = backend.zeros(2 * 256 - 1).unwrap();
    let mut out = backend.zeros(8).unwrap();
    assert_shape_error(backend.matmul(&x, &weight, 2, &mut out), "matmul");
    let x = backend.zeros(2 * 256).unwrap();
    let mut short = backend.zeros(7).unwrap();
    assert_shape_error(backend.matmul(&x, &weight, 2, &mut short), "matmul");
    assert!(backend.matmul(&x, &weight, 2, &mut out).is_ok());

    assert_shape_error(backend.upload_weight(ty, 4, 256, &bytes[1..]), "upload_weight");
    assert_shape_error(backend.upload_weight(ty, 3, 256, &bytes), "upload_weight");
    assert_shape_error(backend.upload_weight(ty, 8, 128, &bytes), "upload_weight");
    assert_eq!(
        backend.upload_weight(GgmlType::Iq2Xxs, 1, 256, &[0; 66]).unwrap_err(),
        BackendError::Unsupported { op: "upload_weight", ty: GgmlType::Iq2Xxs }
    );
}

/// `x / sqrt(mean(x²) + eps) * w` per row, in f64.
fn naive_rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    x.chunks_exact(w.len())
        .flat_map(|row| {
            let mean_square = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / row.len() as f64;
            let inv_rms = 1.0 / (mean_square + f64::from(eps)).sqrt();
            row.iter().zip(w).map(move |(&v, &w)| f64::from(v) * inv_rms * f64::from(w))
        })
        .collect()
}

fn assert_close(got: &[f32], expected: &[f64], tolerance: f64, what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: lengths");
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        assert!((f64::from(g) - e).abs() <= tolerance * (1.0 + e.abs()), "{what}[{i}]: {g} vs {e}");
    }
}

#[test]
fn rms_norm_normalises_each_row_including_per_head_rows() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0x707);
    // Whole hidden rows, then per-head rows (3 tokens x 4 heads of 24).
    for (n_rows, row_len) in [(3, 1000), (12, 24), (1, 5)] {
        let x = gaussian_row(n_rows * row_len, 3.0, &mut rng);
        let w = gaussian_row(row_len, 1.0, &mut rng);
        let eps = 1e-6;
        let mut out = upload_padded(&backend, &[], n_rows * row_len + 4);
        let weight = backend.upload(&w).unwrap();
        backend.rms_norm(&upload_padded(&backend, &x, 9), &weight, n_rows, eps, &mut out).unwrap();
        let got = download(&backend, &out);
        assert_close(&got[..n_rows * row_len], &naive_rms_norm(&x, &w, eps), 2e-6, "rms_norm");
        assert_tail_untouched(&got, n_rows * row_len, "rms_norm out");
    }
}

#[test]
fn add_rms_norm_updates_the_residual_and_normalises_it() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0xadd);
    let (n_rows, row_len, eps) = (4, 384, 1e-5);
    let residual = gaussian_row(n_rows * row_len, 1.0, &mut rng);
    let delta = gaussian_row(n_rows * row_len, 0.5, &mut rng);
    let w = gaussian_row(row_len, 1.0, &mut rng);
    let mut residual_tensor = upload_padded(&backend, &residual, 2);
    let mut out = backend.zeros(n_rows * row_len).unwrap();
    let (delta_tensor, weight) = (backend.upload(&delta).unwrap(), backend.upload(&w).unwrap());
    backend.add_rms_norm(&mut residual_tensor, &delta_tensor, &weight, n_rows, eps, &mut out).unwrap();

    let sum: Vec<f64> = residual.iter().zip(&delta).map(|(&r, &d)| f64::from(r) + f64::from(d)).collect();
    let updated = download(&backend, &residual_tensor);
    assert_close(&updated[..n_rows * row_len], &sum, 1e-7, "residual");
    assert_tail_untouched(&updated, n_rows * row_len, "residual");
    let sum_f32: Vec<f32> = sum.iter().map(|&v| v as f32).collect();
    assert_close(&download(&backend, &out), &naive_rms_norm(&sum_f32, &w, eps), 2e-6, "add_rms_norm");
}

#[test]
fn norms_refuse_bad_shapes_and_eps() {
    let backend = CpuBackend::new();
    let x = backend.zeros(10).unwrap();
    let weight = backend.upload(&[1.0; 4]).unwrap();
    let mut out = backend.zeros(12).unwrap();
    assert_shape_error(backend.rms_norm(&x, &weight, 3, 1e-6, &mut out), "rms_norm");
    assert_shape_error(backend.rms_norm(&x, &weight, 2, -1.0, &mut out), "rms_norm");
    assert_shape_error(backend.rms_norm(&x, &backend.zeros(0).unwrap(), 2, 1e-6, &mut out), "rms_norm");
    let mut residual = backend.zeros(12).unwrap();
    let mut small_out = backend.zeros(8).unwrap();
    assert_shape_error(backend.add_rms_norm(&mut residual, &x, &weight, 3, 1e-6, &mut out), "add_rms_norm");
    let delta = backend.zeros(12).unwrap();
    let result = backend.add_rms_norm(&mut residual, &delta, &weight, 3, 1e-6, &mut small_out);
    assert_shape_error(result, "add_rms_norm");
}

/// RoPE of `x` (`[positions.len(), n_heads, head_dim]`) in f64, straight from the definition.
fn naive_rope(x: &[f32], positions: &[u32], params: &RopeParams) -> Vec<f64> {
    let mut out: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let half = params.rotary_dim / 2;
    for (token, row) in out.chunks_exact_mut(params.n_heads * params.head_dim).enumerate() {
        for head in row.chunks_exact_mut(params.head_dim) {
            for i in 0..half {
                let exponent = -2.0 * i as f64 / params.rotary_dim as f64;
                let angle = f64::from(positions[token]) * f64::from(params.theta).powf(exponent);
                let (a, b) = match params.style {
                    RopeStyle::Neox => (i, i + half),
                    RopeStyle::Normal => (2 * i, 2 * i + 1),
                };
                let (xa, xb) = (head[a], head[b]);
                head[a] = xa * angle.cos() - xb * angle.sin();
                head[b] = xa * angle.sin() + xb * angle.cos();
            }
        }
    }
    out
}

#[test]
fn rope_matches_the_definition_in_both_styles_with_partial_rotation() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0x20e);
    let positions = [0u32, 1, 7, 300, 2047, 5];
    for style in [RopeStyle::Neox, RopeStyle::Normal] {
        for (head_dim, rotary_dim) in [(32, 32), (32, 8), (20, 12)] {
            let params = RopeParams { n_heads: 3, head_dim, rotary_dim, theta: 10_000.0, style };
            let len = positions.len() * params.row_len();
            let x = gaussian_row(len, 1.0, &mut rng);
            let mut tensor = upload_padded(&backend, &x, 6);
            let index = backend.upload_index(&[positions.as_slice(), &[9, 9]].concat()).unwrap();
            backend.rope(&mut tensor, &index, positions.len(), &params).unwrap();
            let got = download(&backend, &tensor);
            // f32 angles lose about pos * 2^-24 radians; the bound scales with the position.
            let expected = naive_rope(&x, &positions, &params);
            for (i, (&g, &e)) in got.iter().zip(&expected).enumerate() {
                let position = f64::from(positions[i / params.row_len()]);
                let tolerance = 1e-6 + 4e-7 * position;
                assert!(
                    (f64::from(g) - e).abs() <= tolerance,
                    "{style:?} {head_dim}/{rotary_dim} [{i}]: {g} vs {e}"
                );
                if i % head_dim >= rotary_dim {
                    assert_eq!(g, x[i], "dimensions past rotary_dim pass through");
                }
            }
            assert_tail_untouched(&got, len, "rope x");
        }
    }
}

#[test]
fn rope_dot_products_depend_only_on_the_position_difference() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0x4e1);
    for style in [RopeStyle::Neox, RopeStyle::Normal] {
        let params = RopeParams { n_heads: 2, head_dim: 64, rotary_dim: 48, theta: 1_000_000.0, style };
        let q = gaussian_row(params.row_len(), 1.0, &mut rng);
        let k = gaussian_row(params.row_len(), 1.0, &mut rng);
        let rotated_dots = |q_position: u32, k_position: u32| -> Vec<f32> {
            let mut both = backend.upload(&[q.as_slice(), &k].concat()).unwrap();
            let positions = backend.upload_index(&[q_position, k_position]).unwrap();
            backend.rope(&mut both, &positions, 2, &params).unwrap();
            let values = download(&backend, &both);
            let (q, k) = values.split_at(params.row_len());
            q.chunks_exact(64)
                .zip(k.chunks_exact(64))
                .map(|(q, k)| q.iter().zip(k).map(|(a, b)| a * b).sum())
                .collect()
        };
        for (q_position, k_position, shift) in [(10, 3, 1), (10, 3, 500), (0, 40, 77), (123, 123, 1000)] {
            let base = rotated_dots(q_position, k_position);
            let shifted = rotated_dots(q_position + shift, k_position + shift);
            for (a, b) in base.iter().zip(&shifted) {
                assert!((a - b).abs() <= 1e-3 * (1.0 + a.abs()), "{style:?} shift {shift}: {a} vs {b}");
            }
        }
    }
}

#[test]
fn rope_refuses_bad_parameters() {
    let backend = CpuBackend::new();
    let good = RopeParams { n_heads: 2, head_dim: 8, rotary_dim: 8, theta: 10_000.0, style: RopeStyle::Neox };
    let mut x = backend.zeros(2 * 16).unwrap();
    let positions = backend.upload_index(&[0, 1]).unwrap();
    assert!(backend.rope(&mut x, &positions, 2, &good).is_ok());
    assert_shape_error(backend.rope(&mut x, &positions, 3, &good), "rope");
    let bad = [
        RopeParams { rotary_dim: 7, ..good },
        RopeParams { rotary_dim: 10, ..good },
        RopeParams { rotary_dim: 0, ..good },
        RopeParams { theta: 0.0, ..good },
        RopeParams { theta: f32::NAN, ..good },
        RopeParams { n_heads: 0, ..good },
    ];
    for params in bad {
        assert_shape_error(backend.rope(&mut x, &positions, 1, &params), "rope");
    }
    let mut short = backend.zeros(31).unwrap();
    assert_shape_error(backend.rope(&mut short, &positions, 2, &good), "rope");
}

#[test]
fn swiglu_and_add_match_their_definitions() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0x5916);
    let len = 20_000;
    let mut gate = gaussian_row(len, 4.0, &mut rng);
    gate[..4].copy_from_slice(&[-200.0, 200.0, 0.0, -0.0]);
    let up = gaussian_row(len, 1.0, &mut rng);
    let mut out = upload_padded(&backend, &[], len + 3);
    let (gate_tensor, up_tensor) = (backend.upload(&gate).unwrap(), backend.upload(&up).unwrap());
    backend.swiglu(&gate_tensor, &up_tensor, len, &mut out).unwrap();
    let expected: Vec<f64> = gate
        .iter()
        .zip(&up)
        .map(|(&g, &u)| f64::from(g) / (1.0 + (-f64::from(g)).exp()) * f64::from(u))
        .collect();
    let got = download(&backend, &out);
    assert_close(&got[..len], &expected, 1e-6, "swiglu");
    assert_tail_untouched(&got, len, "swiglu out");

    let mut acc = upload_padded(&backend, &gate, 2);
    backend.add(&mut acc, &up_tensor, len).unwrap();
    let sum: Vec<f64> = gate.iter().zip(&up).map(|(&a, &b)| f64::from(a) + f64::from(b)).collect();
    let got = download(&backend, &acc);
    assert_close(&got[..len], &sum, 1e-7, "add");
    assert_tail_untouched(&got, len, "add acc");

    assert_shape_error(backend.swiglu(&gate_tensor, &backend.zeros(9).unwrap(), 10, &mut out), "swiglu");
    assert_shape_error(backend.add(&mut backend.zeros(9).unwrap(), &up_tensor, 10), "add");
}

/// `swiglu_matmuls` is `matmuls` then `swiglu`: the gated input of a feed-forward network.
#[test]
fn swiglu_matmuls_gate_the_up_projection_by_the_silu_of_the_gate_projection() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0x9a7e);
    let (rows, cols, n_rows) = (40, 256, 3);
    let (gate_bytes, gate_w) = random_weight(GgmlType::Q4K, rows, cols, &mut rng);
    let (up_bytes, up_w) = random_weight(GgmlType::Q4K, rows, cols, &mut rng);
    let gate_weight = backend.upload_weight(GgmlType::Q4K, rows, cols, &gate_bytes).unwrap();
    let up_weight = backend.upload_weight(GgmlType::Q4K, rows, cols, &up_bytes).unwrap();
    let x = gaussian_row(n_rows * cols, 1.0, &mut rng);
    let x_tensor = backend.upload(&x).unwrap();
    let len = n_rows * rows;
    let [mut gate, mut up, mut act] = [(); 3].map(|_| upload_padded(&backend, &[], len + 2));
    backend
        .swiglu_matmuls(&x_tensor, n_rows, (&gate_weight, &mut gate), (&up_weight, &mut up), &mut act)
        .unwrap();
    let product = |w: &[f32], t: usize, r: usize| -> f64 {
        w[r * cols..][..cols]
            .iter()
            .zip(&x[t * cols..][..cols])
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum()
    };
    let (mut want_gate, mut want_act) = (Vec::new(), Vec::new());
    for t in 0..n_rows {
        for r in 0..rows {
            let (g, u) = (product(&gate_w, t, r), product(&up_w, t, r));
            want_gate.push(g);
            want_act.push(g / (1.0 + (-g).exp()) * u);
        }
    }
    let (got_gate, got_act) = (download(&backend, &gate), download(&backend, &act));
    assert_close(&got_gate[..len], &want_gate, 1e-4, "gate");
    assert_close(&got_act[..len], &want_act, 1e-4, "act");
    for got in [&got_gate, &download(&backend, &up), &got_act] {
        assert_tail_untouched(got, len, "swiglu_matmuls outputs");
    }

    // The two weights must have one shape, and every output room for the rows.
    let (short_bytes, _) = random_weight(GgmlType::Q4K, rows - 1, cols, &mut rng);
    let short_weight = backend.upload_weight(GgmlType::Q4K, rows - 1, cols, &short_bytes).unwrap();
    let mismatched = backend.swiglu_matmuls(
        &x_tensor,
        n_rows,
        (&gate_weight, &mut gate),
        (&short_weight, &mut up),
        &mut act,
    );
    assert_shape_error(mismatched, "swiglu_matmuls");
    let mut small = backend.zeros(len - 1).unwrap();
    let short_act = backend.swiglu_matmuls(
        &x_tensor,
        n_rows,
        (&gate_weight, &mut gate),
        (&up_weight, &mut up),
        &mut small,
    );
    assert_shape_error(short_act, "swiglu_matmuls");
}
