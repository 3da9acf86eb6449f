//! The fused attention inputs (attention_inputs.cu: per-head RMS norms of queries and keys, RoPE,
//! the KV pool writes), emulated, against the CPU backend's six ops, on the device test's heads.
//!
//! Tolerance 1e-5: the norms sum their squares in another order than the CPU, the rotation is the
//! CPU's f32 math with the host's `powf` and `sincosf` (the device tests allow 1e-4 for the
//! device's `powf`; see rope.rs). The pools hold f16: 0 for the value pool, a copy of values an
//! f16 holds exactly; 1e-3 for the key pool, the rotated keys rounded to 11 significant bits.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::{
    AttentionInputs, AttentionTargets, Backend, HeadParams, RopeParams, RopeStyle,
};
use common::{Rng, gaussian_row, kv_row};
use emulated::{DeviceBuffer, check, fetch, ptr, run};

const TOLERANCE: f32 = 1e-5;
const KEY_POOL_TOLERANCE: f32 = 1e-3;
const EPS: f32 = 1e-6;

/// q_raw, k_raw, v, q_norm, k_norm, and the pools' starting contents.
struct Host {
    q_raw: Vec<f32>,
    k_raw: Vec<f32>,
    v: Vec<f32>,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    pool: Vec<f32>,
}

/// q, k, k_pool and v_pool after the CPU's attention inputs.
fn reference(
    host: &Host,
    positions: &[u32],
    slots: &[u32],
    q_rope: RopeParams,
    k_rope: RopeParams,
) -> [Vec<f32>; 4] {
    let cpu = CpuBackend::new();
    let [q_raw, k_raw, v, q_norm, k_norm] =
        [&host.q_raw, &host.k_raw, &host.v, &host.q_norm, &host.k_norm].map(|x| cpu.upload(x).unwrap());
    let (positions, slots) = (cpu.upload_index(positions).unwrap(), cpu.upload_index(slots).unwrap());
    let heads = HeadParams {
        q_norm: &q_norm,
        k_norm: &k_norm,
        eps: EPS,
        positions: &positions,
        slots: &slots,
        n_rows: host.q_raw.len() / q_rope.row_len(),
        q_rope,
        k_rope,
    };
    let inputs = AttentionInputs { q_raw: &q_raw, k_raw: &k_raw, v: &v, heads };
    let (mut q, mut k) = (cpu.zeros(host.q_raw.len()).unwrap(), cpu.zeros(host.k_raw.len()).unwrap());
    let [mut k_pool, mut v_pool] = [(); 2].map(|_| cpu.upload_kv_pool(&host.pool).unwrap());
    let targets = AttentionTargets { q: &mut q, k: &mut k, k_pool: &mut k_pool, v_pool: &mut v_pool };
    cpu.attention_inputs(&inputs, targets).unwrap();
    [(&q, host.q_raw.len()), (&k, host.k_raw.len()), (&k_pool, host.pool.len()), (&v_pool, host.pool.len())]
        .map(|(tensor, len)| fetch(&cpu, tensor, len))
}

/// The emulated kernel, launched as attention_inputs.rs does: a warp per head of each token
/// (queries, keys, then values), four warps a block.
fn emulate(
    host: &Host,
    positions: &[u32],
    slots: &[u32],
    q_rope: RopeParams,
    k_rope: RopeParams,
) -> [Vec<f32>; 4] {
    let n_rows = positions.len();
    let [mut q_raw, mut k_raw, mut v, mut q_norm, mut k_norm] =
        [&host.q_raw, &host.k_raw, &host.v, &host.q_norm, &host.k_norm].map(|x| DeviceBuffer::from_floats(x));
    let [mut k_pool, mut v_pool] = [(); 2].map(|_| DeviceBuffer::from_halves(&host.pool));
    let mut q = DeviceBuffer::from_floats(&vec![f32::NAN; host.q_raw.len()]);
    let mut k = DeviceBuffer::from_floats(&vec![f32::NAN; host.k_raw.len()]);
    let (mut positions_buf, mut slots_buf) =
        (DeviceBuffer::from_words(positions), DeviceBuffer::from_words(slots));
    let mut pointers = [
        &mut q_raw,
        &mut k_raw,
        &mut v,
        &mut q_norm,
        &mut k_norm,
        &mut positions_buf,
        &mut slots_buf,
        &mut q,
        &mut k,
        &mut k_pool,
        &mut v_pool,
    ]
    .map(|buffer| buffer.address());
    let [
        q_raw_ptr,
        k_raw_ptr,
        v_ptr,
        q_norm_ptr,
        k_norm_ptr,
        positions_ptr,
        slots_ptr,
        q_ptr,
        k_ptr,
        k_pool_ptr,
        v_pool_ptr,
    ] = &mut pointers;
    let mut eps = EPS;
    let mut theta = q_rope.theta;
    let [mut pool_rows, mut n_rows_arg, mut n_heads, mut n_kv_heads, mut head_dim, mut rotary_dim, mut neox] =
        [
            host.pool.len() / k_rope.row_len(),
            n_rows,
            q_rope.n_heads,
            k_rope.n_heads,
            q_rope.head_dim,
            q_rope.rotary_dim,
            usize::from(q_rope.style == RopeStyle::Neox),
        ]
        .map(|v| v as u32);
    let tasks = n_rows * (q_rope.n_heads + 2 * k_rope.n_heads);
    run(
        "attention_inputs",
        LaunchShape::linear(tasks.div_ceil(4) as u32, 128),
        &mut [
            ptr(q_raw_ptr),
            ptr(k_raw_ptr),
            ptr(v_ptr),
            ptr(q_norm_ptr),
            ptr(k_norm_ptr),
            ptr(&mut eps),
            ptr(positions_ptr),
            ptr(slots_ptr),
            ptr(&mut pool_rows),
            ptr(&mut n_rows_arg),
            ptr(&mut n_heads),
            ptr(&mut n_kv_heads),
            ptr(&mut head_dim),
            ptr(&mut rotary_dim),
            ptr(&mut theta),
            ptr(&mut neox),
            ptr(q_ptr),
            ptr(k_ptr),
            ptr(k_pool_ptr),
            ptr(v_pool_ptr),
        ],
    );
    [
        q.floats(host.q_raw.len()),
        k.floats(host.k_raw.len()),
        k_pool.halves(host.pool.len()),
        v_pool.halves(host.pool.len()),
    ]
}

/// The device test's shapes: groups of 4, 2 and 2 query heads per KV head; heads of 128, 64 and
/// 96 (NeoX partners 48 apart, in another pass of the warp); whole and partial rotation; 6
/// tokens at positions up to 4096 into 6 of 16 pool rows.
#[test]
fn attention_inputs_match_cpu() {
    let mut rng = Rng::new(71);
    let positions = [0u32, 1, 7, 100, 1000, 4096];
    let slots = [9u32, 2, 15, 0, 11, 4];
    let (n_rows, pool_rows) = (positions.len(), 16);
    for style in [RopeStyle::Neox, RopeStyle::Normal] {
        for (n_heads, n_kv_heads, head_dim, rotary_dim) in [(32, 8, 128, 128), (4, 2, 64, 32), (6, 3, 96, 96)]
        {
            let rope = |n_heads| RopeParams { n_heads, head_dim, rotary_dim, theta: 1_000_000.0, style };
            let (q_rope, k_rope) = (rope(n_heads), rope(n_kv_heads));
            let host = Host {
                q_raw: gaussian_row(n_rows * q_rope.row_len(), 1.0, &mut rng),
                k_raw: gaussian_row(n_rows * k_rope.row_len(), 1.0, &mut rng),
                v: kv_row(n_rows * k_rope.row_len(), 1.0, &mut rng),
                q_norm: gaussian_row(head_dim, 0.5, &mut rng).iter().map(|w| w + 1.0).collect(),
                k_norm: gaussian_row(head_dim, 0.5, &mut rng).iter().map(|w| w + 1.0).collect(),
                pool: kv_row(pool_rows * k_rope.row_len(), 1.0, &mut rng),
            };
            let label = format!(
                "attention_inputs {style:?} {n_heads}/{n_kv_heads} heads of {head_dim}, rotary {rotary_dim}"
            );
            let want = reference(&host, &positions, &slots, q_rope, k_rope);
            let got = emulate(&host, &positions, &slots, q_rope, k_rope);
            for (name, (got, want)) in ["q", "k", "k_pool", "v_pool"].iter().zip(got.iter().zip(&want)) {
                let tolerance = match *name {
                    "v_pool" => 0.0,
                    "k_pool" => KEY_POOL_TOLERANCE,
                    _ => TOLERANCE,
                };
                check(&format!("{label}: {name}"), got, want, tolerance);
            }
        }
    }
}
