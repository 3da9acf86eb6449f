//! The CPU backend's memory, row-movement and sampling ops against naive references written here:
//! transfers, embed, gather_rows, write_kv, copy_kv, softmax, argmax and top-k.

// The helpers unwrap like the tests calling them: an error there is a test failure.
#![allow(clippy::unwrap_used)]

mod common;

use canopy_kernels::backend::cpu::{CpuBackend, CpuTensor};
use canopy_kernels::backend::{ARGMAX_NONE, Backend, BackendError, DeviceArray};
use canopy_kernels::quant::{GgmlType, dequantize_row, quantize_row};
use common::{Rng, gaussian_row};

fn download(backend: &CpuBackend, t: &CpuTensor) -> Vec<f32> {
    let mut out = vec![0.0; t.len()];
    backend.download(t, &mut out).unwrap();
    out
}

fn download_pool(backend: &CpuBackend, pool: &<CpuBackend as Backend>::KvPool) -> Vec<f32> {
    let mut out = vec![0.0; pool.len()];
    backend.download_kv_pool(pool, &mut out).unwrap();
    out
}

fn assert_error<T: std::fmt::Debug>(result: Result<T, BackendError>, op: &str, index_error: bool) {
    match result {
        Err(BackendError::Shape { op: reported, .. }) if !index_error => assert_eq!(reported, op),
        Err(BackendError::Index { op: reported, .. }) if index_error => assert_eq!(reported, op),
        other => panic!(
            "expected a {} error from {op}, got {other:?}",
            if index_error { "index" } else { "shape" }
        ),
    }
}

#[test]
fn transfers_copy_prefixes_and_refuse_overruns() {
    let backend = CpuBackend::new();
    let tensor = backend.upload(&[1.0, 2.0, 3.0]).unwrap();
    let mut two = [0.0; 2];
    backend.download(&tensor, &mut two).unwrap();
    assert_eq!(two, [1.0, 2.0]);
    assert_error(backend.download(&tensor, &mut [0.0; 4]), "download", false);
    assert_eq!(download(&backend, &backend.zeros(3).unwrap()), [0.0; 3]);

    let mut index = backend.upload_index(&[5, 6, 7]).unwrap();
    backend.write_index(&mut index, &[1, 2]).unwrap();
    let mut gathered = backend.zeros(3).unwrap();
    let source = backend.upload(&[10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0]).unwrap();
    backend.gather_rows(&source, &index, 3, 1, &mut gathered).unwrap();
    assert_eq!(download(&backend, &gathered), [11.0, 12.0, 17.0], "write_index keeps the tail");
    assert_error(backend.write_index(&mut index, &[0; 4]), "write_index", false);
    assert_eq!(index.len(), 3);
}

#[test]
fn embed_looks_up_dequantized_rows() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0xe3b);
    let (vocab, dim) = (11, 256);
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Q6K] {
        let row_bytes = dim / ty.block_size() * ty.type_size();
        let mut bytes = vec![0u8; vocab * row_bytes];
        for row in bytes.chunks_exact_mut(row_bytes) {
            quantize_row(ty, &gaussian_row(dim, 1.0, &mut rng), row).unwrap();
        }
        let table = backend.upload_weight(ty, vocab, dim, &bytes).unwrap();
        let ids = [3u32, 0, 10, 3];
        let mut out = backend.zeros(ids.len() * dim).unwrap();
        backend.embed(&table, &backend.upload_index(&ids).unwrap(), ids.len(), &mut out).unwrap();
        let got = download(&backend, &out);
        for (&id, got_row) in ids.iter().zip(got.chunks_exact(dim)) {
            let mut expected = vec![0f32; dim];
            dequantize_row(ty, &bytes[id as usize * row_bytes..][..row_bytes], &mut expected).unwrap();
            assert_eq!(got_row, expected, "{ty} id {id}");
        }
        let before = got;
        assert_error(
            backend.embed(&table, &backend.upload_index(&[1, 11]).unwrap(), 2, &mut out),
            "embed",
            true,
        );
        assert_eq!(download(&backend, &out), before, "a refused embed writes nothing");
        assert_error(
            backend.embed(&table, &backend.upload_index(&[1]).unwrap(), 2, &mut out),
            "embed",
            false,
        );
    }
}

#[test]
fn gather_rows_picks_rows_and_checks_them() {
    let backend = CpuBackend::new();
    let src: Vec<f32> = (0..20).map(|v| v as f32).collect();
    let src = backend.upload(&src).unwrap();
    let rows = backend.upload_index(&[4, 0, 4]).unwrap();
    let mut out = backend.zeros(12).unwrap();
    backend.gather_rows(&src, &rows, 3, 4, &mut out).unwrap();
    assert_eq!(
        download(&backend, &out),
        [16.0, 17.0, 18.0, 19.0, 0.0, 1.0, 2.0, 3.0, 16.0, 17.0, 18.0, 19.0]
    );
    assert_error(
        backend.gather_rows(&src, &backend.upload_index(&[5]).unwrap(), 1, 4, &mut out),
        "gather_rows",
        true,
    );
    assert_error(backend.gather_rows(&src, &rows, 3, 5, &mut out), "gather_rows", false);
    assert_error(backend.gather_rows(&src, &rows, 3, 0, &mut out), "gather_rows", false);
}

#[test]
fn write_kv_scatters_rows_to_their_slots() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0x3c);
    let (slots_in_pool, row_len) = (10, 6);
    let initial = gaussian_row(slots_in_pool * row_len, 1.0, &mut rng);
    let new = gaussian_row(3 * row_len, 1.0, &mut rng);
    let slots = [7u32, 2, 9];
    let mut pool = backend.upload_kv_pool(&initial).unwrap();
    let (new_tensor, slot_index) = (backend.upload(&new).unwrap(), backend.upload_index(&slots).unwrap());
    backend.write_kv(&mut pool, &new_tensor, &slot_index, 3, row_len).unwrap();

    let mut expected = initial.clone();
    for (i, &slot) in slots.iter().enumerate() {
        expected[slot as usize * row_len..][..row_len].copy_from_slice(&new[i * row_len..][..row_len]);
    }
    assert_eq!(download_pool(&backend, &pool), expected);

    let bad_slots = backend.upload_index(&[1, 10]).unwrap();
    assert_error(backend.write_kv(&mut pool, &new_tensor, &bad_slots, 2, row_len), "write_kv", true);
    assert_eq!(download_pool(&backend, &pool), expected, "a refused write_kv writes nothing");
    assert_error(backend.write_kv(&mut pool, &new_tensor, &slot_index, 3, 7), "write_kv", false);
    assert_error(backend.write_kv(&mut pool, &new_tensor, &slot_index, 4, row_len), "write_kv", false);
}

#[test]
fn copy_kv_reads_every_source_before_writing() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0xc0b);
    let row_len = 4;
    // A shift by one slot (each destination is the next copy's source) and the compaction of
    // accepted tree nodes 0, 2, 5 at slots 20.. to contiguous slots.
    let cases: [(&[u32], &[u32]); 3] =
        [(&[2, 3, 4], &[3, 4, 5]), (&[5, 4, 3], &[4, 3, 2]), (&[20, 22, 25], &[20, 21, 22])];
    for (src, dst) in cases {
        let initial = gaussian_row(32 * row_len, 1.0, &mut rng);
        let mut pool = backend.upload_kv_pool(&initial).unwrap();
        let (src_index, dst_index) = (backend.upload_index(src).unwrap(), backend.upload_index(dst).unwrap());
        backend.copy_kv(&mut pool, &src_index, &dst_index, src.len(), row_len).unwrap();
        let mut expected = initial.clone();
        for (&s, &d) in src.iter().zip(dst) {
            expected[d as usize * row_len..][..row_len]
                .copy_from_slice(&initial[s as usize * row_len..][..row_len]);
        }
        assert_eq!(download_pool(&backend, &pool), expected, "{src:?} -> {dst:?}");
    }
    let mut pool = backend.kv_pool(8 * row_len).unwrap();
    let (good, bad) = (backend.upload_index(&[0, 1]).unwrap(), backend.upload_index(&[0, 8]).unwrap());
    assert_error(backend.copy_kv(&mut pool, &good, &bad, 2, row_len), "copy_kv", true);
    assert_error(backend.copy_kv(&mut pool, &bad, &good, 2, row_len), "copy_kv", true);
    assert_error(backend.copy_kv(&mut pool, &good, &good, 3, row_len), "copy_kv", false);
    assert_error(backend.copy_kv(&mut pool, &good, &good, 2, 5), "copy_kv", false);
}

/// Log-softmax of a row in f64, NaN counted as -inf.
fn naive_log_softmax(row: &[f32]) -> Vec<f64> {
    let values: Vec<f64> =
        row.iter().map(|&v| if v.is_nan() { f64::NEG_INFINITY } else { f64::from(v) }).collect();
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let log_sum = max + values.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
    values.iter().map(|v| v - log_sum).collect()
}

/// Logit rows with a tie for the maximum (at `row_len / 3` and `row_len / 2`), another tie, a
/// NaN and a -inf.
fn logit_rows(n_rows: usize, row_len: usize, rng: &mut Rng) -> Vec<f32> {
    let mut logits = gaussian_row(n_rows * row_len, 3.0, rng);
    for row in logits.chunks_exact_mut(row_len) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) + 1.0;
        row[row_len / 3] = max;
        row[row_len / 2] = max;
        row[1] = f32::NAN;
        row[2] = f32::NEG_INFINITY;
        row[row_len - 1] = row[row_len - 2];
    }
    logits
}

#[test]
fn softmax_rows_matches_the_definition() {
    let backend = CpuBackend::new();
    let (n_rows, row_len) = (3, 1001);
    let logits = gaussian_row(n_rows * row_len, 5.0, &mut Rng::new(0x50f));
    let mut tensor = backend.upload(&[logits.as_slice(), &[1.0, 2.0]].concat()).unwrap();
    backend.softmax_rows(&mut tensor, n_rows, row_len).unwrap();
    let got = download(&backend, &tensor);
    for (r, row) in logits.chunks_exact(row_len).enumerate() {
        for (i, log_p) in naive_log_softmax(row).into_iter().enumerate() {
            let (g, e) = (f64::from(got[r * row_len + i]), log_p.exp());
            assert!((g - e).abs() <= 1e-6 * e + 1e-9, "row {r} [{i}]: {g} vs {e}");
        }
    }
    assert_eq!(&got[n_rows * row_len..], [1.0, 2.0]);
    assert_error(backend.softmax_rows(&mut tensor, 4, row_len), "softmax_rows", false);
}

#[test]
fn argmax_takes_the_first_maximum_and_ignores_nan() {
    let backend = CpuBackend::new();
    let (n_rows, row_len) = (4, 300);
    let mut logits = logit_rows(n_rows, row_len, &mut Rng::new(0xa9));
    logits[3 * row_len..].fill(f32::NAN);
    logits[3 * row_len..3 * row_len + row_len / 2].fill(f32::NEG_INFINITY);
    let mut out = [0; 5];
    backend.argmax_rows(&backend.upload(&logits).unwrap(), n_rows, row_len, &mut out).unwrap();
    for (r, row) in logits.chunks_exact(row_len).enumerate().take(3) {
        let keys: Vec<f32> = row.iter().map(|&v| if v.is_nan() { f32::NEG_INFINITY } else { v }).collect();
        let best = keys.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let expected = keys.iter().position(|&v| v == best).unwrap();
        assert_eq!(out[r] as usize, expected, "row {r}");
    }
    assert_eq!(out[0] as usize, row_len / 3, "ties go to the first");
    assert_eq!(out[3], ARGMAX_NONE, "a row of NaN and -inf names no token");
    assert_eq!(out[4], 0, "only n_rows results are written");
    assert_error(
        backend.argmax_rows(&backend.upload(&logits).unwrap(), 4, row_len, &mut [0; 3]),
        "argmax_rows",
        false,
    );
}

#[test]
fn top_k_gives_the_best_ids_with_their_log_softmax() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0x70b);
    let (n_rows, row_len) = (5, 2000);
    let logits = logit_rows(n_rows, row_len, &mut rng);
    let tensor = backend.upload(&logits).unwrap();
    for k in [1, 8, 40] {
        let mut ids = vec![0u32; n_rows * k];
        let mut log_probs = vec![0f32; n_rows * k];
        backend.top_k_rows(&tensor, n_rows, row_len, k, &mut ids, &mut log_probs).unwrap();
        for (r, row) in logits.chunks_exact(row_len).enumerate() {
            let reference = naive_log_softmax(row);
            let mut order: Vec<usize> = (0..row_len).collect();
            order.sort_by(|&a, &b| reference[b].total_cmp(&reference[a]).then(a.cmp(&b)));
            for j in 0..k {
                let (id, log_p) = (ids[r * k + j] as usize, f64::from(log_probs[r * k + j]));
                assert_eq!(id, order[j], "row {r} rank {j}");
                assert!(
                    (log_p - reference[id]).abs() <= 1e-5,
                    "row {r} rank {j}: {log_p} vs {}",
                    reference[id]
                );
            }
        }
    }
    // The whole row, including its NaN and -inf, ranked.
    let (mut ids, mut log_probs) = (vec![0u32; row_len], vec![0f32; row_len]);
    backend.top_k_rows(&tensor, 1, row_len, row_len, &mut ids, &mut log_probs).unwrap();
    assert_eq!(&ids[row_len - 2..], [1, 2], "NaN ranks as -inf; among equals the lower id comes first");
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..row_len as u32).collect::<Vec<_>>());

    let mut short = vec![0u32; 7];
    let result = backend.top_k_rows(&tensor, 1, row_len, row_len + 1, &mut ids, &mut log_probs);
    assert_error(result, "top_k_rows", false);
    assert_error(backend.top_k_rows(&tensor, 1, row_len, 8, &mut short, &mut log_probs), "top_k_rows", false);
    assert_error(backend.top_k_rows(&tensor, 6, row_len, 1, &mut ids, &mut log_probs), "top_k_rows", false);
}
