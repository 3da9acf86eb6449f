//! The decode q/k/v projections that finish their heads (matvec_quant.cu's `matvec_q8_heads_*`),
//! emulated, against the CPU backend's projections then attention inputs: every block-quantized
//! type and Q4_K_M's Q4_K/Q6_K mix, both RoPE pairings, whole and partial rotation, slots inside
//! the pools and one past them (skipped). Activations that round to int8 exactly leave the
//! summation order and the host's sin/cos as the only differences, as in rope.rs and
//! attention_inputs.rs.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::{
    AttentionProjections, AttentionTargets, Backend, DeviceArray, HeadParams, RopeParams, RopeStyle,
};
use canopy_kernels::quant::GgmlType;
use common::{Rng, gaussian_row};
use emulated::{
    DeviceBuffer, DeviceWeight, Projections, check, fetch, int8_exact_row, ptr, quantize_q8, run,
};

const TOLERANCE: f32 = 1e-5;

/// The kernels' `HeadTargets` (matvec_quant.cu), field for field.
#[repr(C)]
struct HeadTargets {
    q_norm: u64,
    k_norm: u64,
    positions: u64,
    slots: u64,
    q: u64,
    k: u64,
    k_pool: u64,
    v_pool: u64,
    arrivals: u64,
    eps: f32,
    theta: f32,
    pool_rows: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rotary_dim: u32,
    neox: u32,
}

/// One call's host data.
#[derive(Clone)]
struct Call {
    x: Vec<f32>,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    position: u32,
    slot: u32,
    k_pool: Vec<f32>,
    v_pool: Vec<f32>,
}

/// q_raw, k_raw, v, q, k, k_pool and v_pool after the CPU's projections and attention inputs.
fn on_cpu(weights: &[DeviceWeight; 3], call: &Call, ropes: (RopeParams, RopeParams)) -> [Vec<f32>; 7] {
    let cpu = CpuBackend::new();
    let [q_weight, k_weight, v_weight] =
        weights.each_ref().map(|w| cpu.upload_weight(w.ty, w.rows, w.cols, &w.gguf).unwrap());
    let x = cpu.upload(&call.x).unwrap();
    let [mut q_raw, mut k_raw, mut v] = weights.each_ref().map(|w| cpu.zeros(w.rows).unwrap());
    let [mut q, mut k] = [weights[0].rows, weights[1].rows].map(|n| cpu.zeros(n).unwrap());
    let (mut k_pool, mut v_pool) = (cpu.upload(&call.k_pool).unwrap(), cpu.upload(&call.v_pool).unwrap());
    let (q_norm, k_norm) = (cpu.upload(&call.q_norm).unwrap(), cpu.upload(&call.k_norm).unwrap());
    let (positions, slots) =
        (cpu.upload_index(&[call.position]).unwrap(), cpu.upload_index(&[call.slot]).unwrap());
    let heads = HeadParams {
        q_norm: &q_norm,
        k_norm: &k_norm,
        eps: 1e-6,
        positions: &positions,
        slots: &slots,
        n_rows: 1,
        q_rope: ropes.0,
        k_rope: ropes.1,
    };
    let projections = AttentionProjections {
        x: &x,
        q: (&q_weight, &mut q_raw),
        k: (&k_weight, &mut k_raw),
        v: (&v_weight, &mut v),
    };
    let targets = AttentionTargets { q: &mut q, k: &mut k, k_pool: &mut k_pool, v_pool: &mut v_pool };
    cpu.project_attention_inputs(projections, &heads, targets).unwrap();
    [&q_raw, &k_raw, &v, &q, &k, &k_pool, &v_pool].map(|t| fetch(&cpu, t, t.len()))
}

/// The same by the emulated kernel.
fn emulated(
    kernel: &str,
    weights: &[DeviceWeight; 3],
    call: &Call,
    ropes: (RopeParams, RopeParams),
) -> [Vec<f32>; 7] {
    let (q_rope, k_rope) = ropes;
    let mixed = weights[2].ty != weights[0].ty;
    let mut raw = weights.each_ref().map(|w| vec![f32::NAN; w.rows]);
    let mut projections = Projections::default();
    for (p, (weight, out)) in weights.iter().zip(raw.iter_mut()).enumerate() {
        projections.push(weight, out, if mixed && p == 2 { 2 } else { 4 });
    }
    let mut copy = quantize_q8(&call.x);
    let [mut q, mut k] =
        [weights[0].rows, weights[1].rows].map(|n| DeviceBuffer::from_floats(&vec![f32::NAN; n]));
    let (mut k_pool, mut v_pool) =
        (DeviceBuffer::from_floats(&call.k_pool), DeviceBuffer::from_floats(&call.v_pool));
    let (mut q_norm, mut k_norm) =
        (DeviceBuffer::from_floats(&call.q_norm), DeviceBuffer::from_floats(&call.k_norm));
    let mut positions = DeviceBuffer::from_bytes(&call.position.to_le_bytes());
    let mut slots = DeviceBuffer::from_bytes(&call.slot.to_le_bytes());
    let n_tasks = q_rope.n_heads + 2 * k_rope.n_heads;
    let mut arrivals = DeviceBuffer::zeroed(4 * n_tasks);
    let mut targets = HeadTargets {
        q_norm: q_norm.address(),
        k_norm: k_norm.address(),
        positions: positions.address(),
        slots: slots.address(),
        q: q.address(),
        k: k.address(),
        k_pool: k_pool.address(),
        v_pool: v_pool.address(),
        arrivals: arrivals.address(),
        eps: 1e-6,
        theta: q_rope.theta,
        pool_rows: (call.k_pool.len() / k_rope.row_len()) as u32,
        n_heads: q_rope.n_heads as u32,
        n_kv_heads: k_rope.n_heads as u32,
        head_dim: q_rope.head_dim as u32,
        rotary_dim: q_rope.rotary_dim as u32,
        neox: u32::from(q_rope.style == RopeStyle::Neox),
    };
    let (mut q_ptr, mut scales_ptr) = (copy.values.address(), copy.scales.address());
    let mut projections_arg = Projections { ..projections };
    let (mut cols, mut n_rows) = (weights[0].cols as u32, 1u32);
    let shape = LaunchShape::linear(projections_arg.blocks(), 128);
    run(
        kernel,
        shape,
        &mut [
            ptr(&mut q_ptr),
            ptr(&mut scales_ptr),
            ptr(&mut projections_arg),
            ptr(&mut cols),
            ptr(&mut n_rows),
            ptr(&mut targets),
        ],
    );
    assert!(arrivals.words(n_tasks).iter().all(|&c| c == 0), "{kernel}: arrival counters reset");
    let [q_raw, k_raw, v] = raw;
    [
        q_raw,
        k_raw,
        v,
        q.floats(weights[0].rows),
        k.floats(weights[1].rows),
        k_pool.floats(call.k_pool.len()),
        v_pool.floats(call.v_pool.len()),
    ]
}

/// Four query heads and two key heads of 64 dimensions over 512 columns; a pool of 8 rows.
#[test]
fn fused_heads_match_cpu() {
    let mut rng = Rng::new(25);
    let (n_heads, n_kv_heads, head_dim, cols, pool_rows) = (4, 2, 64, 512, 8);
    let kinds = [
        (GgmlType::Q8_0, GgmlType::Q8_0, "matvec_q8_heads_q8_0"),
        (GgmlType::Q4K, GgmlType::Q4K, "matvec_q8_heads_q4_k"),
        (GgmlType::Q5K, GgmlType::Q5K, "matvec_q8_heads_q5_k"),
        (GgmlType::Q6K, GgmlType::Q6K, "matvec_q8_heads_q6_k"),
        (GgmlType::Q4K, GgmlType::Q6K, "matvec_q8_heads_q4_k_q6_k"),
    ];
    for (ty, v_ty, kernel) in kinds {
        for (style, rotary_dim, slot) in
            [(RopeStyle::Neox, 64, 5), (RopeStyle::Normal, 32, 2), (RopeStyle::Neox, 64, 9)]
        {
            let rope = |n_heads| RopeParams { n_heads, head_dim, rotary_dim, theta: 1_000_000.0, style };
            let ropes = (rope(n_heads), rope(n_kv_heads));
            let weights = [
                DeviceWeight::random(ty, n_heads * head_dim, cols, &mut rng),
                DeviceWeight::random(ty, n_kv_heads * head_dim, cols, &mut rng),
                DeviceWeight::random(v_ty, n_kv_heads * head_dim, cols, &mut rng),
            ];
            let kv_len = pool_rows * n_kv_heads * head_dim;
            let call = Call {
                x: int8_exact_row(cols, &mut rng),
                q_norm: gaussian_row(head_dim, 0.5, &mut rng).iter().map(|w| w + 1.0).collect(),
                k_norm: gaussian_row(head_dim, 0.5, &mut rng).iter().map(|w| w + 1.0).collect(),
                position: 1000,
                slot,
                k_pool: gaussian_row(kv_len, 1.0, &mut rng),
                v_pool: gaussian_row(kv_len, 1.0, &mut rng),
            };
            let got = emulated(kernel, &weights, &call, ropes);
            // The CPU refuses a slot past the pools, which the kernels skip: the reference then
            // takes slot 0, and the pools must come back untouched.
            let inside = (slot as usize) < pool_rows;
            let mut want =
                on_cpu(&weights, &Call { slot: if inside { slot } else { 0 }, ..call.clone() }, ropes);
            if !inside {
                want[5] = call.k_pool.clone();
                want[6] = call.v_pool.clone();
            }
            let label = format!("{kernel} {style:?} rotary {rotary_dim} slot {slot}");
            for (name, (got, want)) in
                ["q_raw", "k_raw", "v", "q", "k", "k_pool", "v_pool"].iter().zip(got.iter().zip(&want))
            {
                check(&format!("{label}: {name}"), got, want, TOLERANCE);
            }
        }
    }
}
