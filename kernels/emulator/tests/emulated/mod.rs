//! What the emulated kernel tests share: device-layout buffers, the launch parameter structs of
//! the kernels, the CPU reference and the error check.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::ffi::c_void;

use canopy_kernel_emulator::{LaunchShape, launch};
use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::cuda::layout::{device_bytes, device_row_bytes};
use canopy_kernels::backend::{Backend, DeviceArray};
use canopy_kernels::quant::GgmlType;

use super::common::{Floats, Rng, random_blocks};

/// Host memory with the 16-byte alignment of device allocations, which the kernels' vector
/// loads need.
pub struct DeviceBuffer {
    words: Vec<u128>,
}

impl DeviceBuffer {
    pub fn zeroed(bytes: usize) -> Self {
        Self { words: vec![0; bytes.div_ceil(16)] }
    }

    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut buffer = Self::zeroed(bytes.len());
        buffer.bytes_mut()[..bytes.len()].copy_from_slice(bytes);
        buffer
    }

    pub fn from_floats(values: &[f32]) -> Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::from_bytes(&bytes)
    }

    /// `values` as the f16 elements of a KV pool.
    pub fn from_halves(values: &[f32]) -> Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
        Self::from_bytes(&bytes)
    }

    pub fn from_words(values: &[u32]) -> Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::from_bytes(&bytes)
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: u128 storage viewed as its bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.words.len() * 16) }
    }

    pub fn words(&self, len: usize) -> Vec<u32> {
        self.bytes()[..4 * len].chunks_exact(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())).collect()
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.words.len() * 16;
        // SAFETY: u128 storage viewed as its bytes.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), len) }
    }

    pub fn floats(&self, len: usize) -> Vec<f32> {
        let len_bytes = self.words.len() * 16;
        assert!(4 * len <= len_bytes, "{len} floats in a buffer of {len_bytes} bytes");
        // SAFETY: in bounds (checked above), and any bits are a valid f32.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<f32>(), len) }.to_vec()
    }

    /// The first `len` f16 elements, as f32.
    pub fn halves(&self, len: usize) -> Vec<f32> {
        self.bytes()[..2 * len]
            .chunks_exact(2)
            .map(|h| half::f16::from_le_bytes([h[0], h[1]]).to_f32())
            .collect()
    }

    /// The buffer's address as a kernel pointer argument.
    pub fn address(&mut self) -> u64 {
        self.words.as_mut_ptr() as u64
    }
}

/// How kernel names spell a block-quantized type.
pub fn type_suffix(ty: GgmlType) -> &'static str {
    match ty {
        GgmlType::Q8_0 => "q8_0",
        GgmlType::Q4K => "q4_k",
        GgmlType::Q5K => "q5_k",
        GgmlType::Q6K => "q6_k",
        _ => unreachable!("block-quantized types only"),
    }
}

/// A random block-quantized weight, in GGUF bytes (for the CPU) and in the device layout.
pub struct DeviceWeight {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub gguf: Vec<u8>,
    pub device: DeviceBuffer,
    pub row_bytes: usize,
}

impl DeviceWeight {
    pub fn random(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Self {
        let gguf = random_blocks(ty, rows * cols / ty.block_size(), rng, Floats::Moderate);
        let gguf_row_bytes = cols / ty.block_size() * ty.type_size();
        let laid_out = device_bytes(ty, &gguf, gguf_row_bytes).unwrap_or_else(|| gguf.clone());
        let row_bytes = device_row_bytes(ty, gguf_row_bytes);
        Self { ty, rows, cols, gguf, device: DeviceBuffer::from_bytes(&laid_out), row_bytes }
    }
}

/// `n` activations that `quantize_q8` represents exactly: each block of 32 is a power of two
/// times integers in -127..=127, one of them ±127. The int8 kernels then compute what the CPU
/// computes in f32, up to the order of summation.
pub fn int8_exact_row(n: usize, rng: &mut Rng) -> Vec<f32> {
    let mut row = Vec::with_capacity(n);
    for block in 0..n.div_ceil(32) {
        let d = (-((rng.next_u64() % 5) as i32) - 3) as f32;
        let d = d.exp2();
        let peak = (rng.next_u64() % 32) as usize;
        for i in 0..32.min(n - 32 * block) {
            let q = if i == peak {
                if rng.next_u64().is_multiple_of(2) { 127 } else { -127 }
            } else {
                (rng.next_u64() % 255) as i32 - 127
            };
            row.push(d * q as f32);
        }
    }
    row
}

/// `x · weightᵀ` for `n_rows` rows of `x`, on the CPU backend.
pub fn cpu_matmul(weight: &DeviceWeight, x: &[f32], n_rows: usize) -> Vec<f32> {
    let cpu = CpuBackend::new();
    let w = cpu.upload_weight(weight.ty, weight.rows, weight.cols, &weight.gguf).unwrap();
    let x = cpu.upload(x).unwrap();
    let mut out = cpu.zeros(n_rows * weight.rows).unwrap();
    cpu.matmul(&x, &w, n_rows, &mut out).unwrap();
    let mut host = vec![0.0; n_rows * weight.rows];
    cpu.download(&out, &mut host).unwrap();
    assert_eq!(host.len(), out.len());
    host
}

/// Up to three weights the int8 kernels multiply by one input (quant.cuh's `Projections`).
#[repr(C)]
#[derive(Default)]
pub struct Projections {
    pub weight: [u64; 3],
    pub out: [u64; 3],
    pub row_bytes: [u64; 3],
    pub rows: [u32; 3],
    pub first_block: [u32; 4],
    pub count: u32,
}

impl Projections {
    /// Adds `weight`, its rows computed into `out`, `rows_per_block` rows a block.
    pub fn push(&mut self, weight: &DeviceWeight, out: &mut [f32], rows_per_block: usize) {
        let p = self.count as usize;
        let first = self.first_block[p];
        self.weight[p] = weight.device.words.as_ptr() as u64;
        self.out[p] = out.as_mut_ptr() as u64;
        self.row_bytes[p] = weight.row_bytes as u64;
        self.rows[p] = weight.rows as u32;
        let blocks = first + weight.rows.div_ceil(rows_per_block) as u32;
        self.first_block[p + 1..].fill(blocks);
        self.count += 1;
    }

    pub fn blocks(&self) -> u32 {
        self.first_block[self.count as usize]
    }
}

/// The int8 copy of some rows of activations (`quantize_q8`'s output).
pub struct Q8Copy {
    pub values: DeviceBuffer,
    pub scales: DeviceBuffer,
    /// The f16 copy that norms, SwiGLU and the decode attention write beside the int8 one, each
    /// row divided by its scale in `half_scales`.
    pub halves: DeviceBuffer,
    pub half_scales: DeviceBuffer,
}

impl Q8Copy {
    /// Room for the copies of `n` values: a byte each, two floats per block of 32, a half each,
    /// and a float per row (rows are whole blocks).
    pub fn zeroed(n: usize) -> Self {
        Self {
            values: DeviceBuffer::zeroed(n),
            scales: DeviceBuffer::zeroed(8 * n / 32),
            halves: DeviceBuffer::zeroed(2 * n),
            half_scales: DeviceBuffer::zeroed(4 * n.div_ceil(32)),
        }
    }
}

/// Rounds `x` (rows of a multiple of 32 values) to int8 blocks with the emulated `quantize_q8`.
pub fn quantize_q8(x: &[f32]) -> Q8Copy {
    let n_blocks = (x.len() / 32) as u32;
    let mut input = DeviceBuffer::from_floats(x);
    let mut copy = Q8Copy::zeroed(x.len());
    let (mut x_ptr, mut q, mut scales, mut n) =
        (input.address(), copy.values.address(), copy.scales.address(), n_blocks);
    let threads = 8 * n_blocks;
    run(
        "quantize_q8",
        LaunchShape::linear(threads.div_ceil(256), 256),
        &mut [ptr(&mut x_ptr), ptr(&mut n), ptr(&mut q), ptr(&mut scales)],
    );
    copy
}

/// The int8 copy of `x`'s rows of `cols` values, then its f16 copy and row scales by the emulated
/// `round_f16_rows` (what mmq_f16.cu reads when no kernel wrote the copy).
pub fn round_f16_rows(x: &[f32], cols: usize) -> Q8Copy {
    let mut copy = quantize_q8(x);
    let mut input = DeviceBuffer::from_floats(x);
    let (mut x_ptr, mut int8_scales, mut cols_arg) = (input.address(), copy.scales.address(), cols as u32);
    let (mut halves, mut scales) = (copy.halves.address(), copy.half_scales.address());
    let shape = LaunchShape {
        grid: [cols.div_ceil(1024) as u32, (x.len() / cols) as u32, 1],
        block: [256, 1, 1],
        dynamic_shared_bytes: 0,
    };
    run(
        "round_f16_rows",
        shape,
        &mut [ptr(&mut x_ptr), ptr(&mut int8_scales), ptr(&mut cols_arg), ptr(&mut halves), ptr(&mut scales)],
    );
    copy
}

/// The leading `len` values of a CPU tensor.
pub fn fetch(cpu: &CpuBackend, tensor: &<CpuBackend as Backend>::Tensor, len: usize) -> Vec<f32> {
    let mut out = vec![0.0; len];
    cpu.download(tensor, &mut out).unwrap();
    out
}

/// Checks an int8 copy that a kernel wrote of its output (store_q8_quad's layout: a byte per
/// value, `(d, sum)` per block of 32) against the CPU's output `want`. Each block's `d` must be
/// its max |want| / 127 and `sum` the sum of its values, both up to the f32 error of the output
/// itself (`tolerance`); each byte must be its value over `d` rounded, within half a step plus
/// what that error moves the value by (0.01 of a step).
pub fn check_q8_copy(label: &str, copy: &Q8Copy, want: &[f32], tolerance: f32) {
    let n_blocks = want.len() / 32;
    let scales = copy.scales.floats(2 * n_blocks);
    let (d, sums): (Vec<f32>, Vec<f32>) = scales.chunks_exact(2).map(|s| (s[0], s[1])).unzip();
    let (want_d, want_sums): (Vec<f32>, Vec<f32>) = want
        .chunks_exact(32)
        .map(|block| (block.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0, block.iter().sum::<f32>()))
        .unzip();
    check(&format!("{label} int8 scales"), &d, &want_d, tolerance);
    check(&format!("{label} int8 sums"), &sums, &want_sums, tolerance);
    let mut worst = 0.0f32;
    for (i, (&byte, &w)) in copy.values.bytes().iter().zip(want).enumerate() {
        let block_d = want_d[i / 32];
        let steps = if block_d > 0.0 { w / block_d } else { 0.0 };
        let error = (f32::from(byte as i8) - steps).abs();
        assert!(error <= 0.51, "{label} int8[{i}]: {} for {w} in steps of {block_d}", byte as i8);
        worst = worst.max(error);
    }
    println!("parity {label} int8 values: max error {worst:.3} steps (tolerance 0.51)");
}

/// Checks the f16 copy a kernel wrote of its output, rows of `row_len`, against the CPU's output
/// `want`. Each row's scale must be the power of two that brings its largest |want| into
/// [2^14, 2^15), or 1 when it is below 2^15 (up to the output's own error), and each half the
/// value over that scale rounded to f16: within half an f16 ulp (2^-11 relative) plus the
/// output's error (`tolerance` of the largest |want|).
pub fn check_f16_copy(label: &str, copy: &Q8Copy, want: &[f32], row_len: usize, tolerance: f32) {
    let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    let bytes = copy.halves.bytes();
    let row_scales = copy.half_scales.floats(want.len() / row_len);
    let mut worst = 0.0f32;
    for (row, (want_row, &row_scale)) in want.chunks_exact(row_len).zip(&row_scales).enumerate() {
        let amax = want_row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let slack = 1.0 + 4.0 * tolerance;
        let scaled = amax / row_scale;
        assert!(
            row_scale.log2().fract() == 0.0 && row_scale >= 1.0 && scaled < 32768.0 * slack,
            "{label} row {row}: scale {row_scale} for a largest value of {amax}"
        );
        assert!(
            row_scale == 1.0 || scaled * slack >= 16384.0,
            "{label} row {row}: scale {row_scale} for {amax}"
        );
        for (column, &w) in want_row.iter().enumerate() {
            let i = row * row_len + column;
            let got = half::f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32() * row_scale;
            let error = (got - w).abs();
            let bound = w.abs() * 2f32.powi(-11) + tolerance * scale;
            assert!(error <= bound, "{label} f16[{i}]: {got} for {w}");
            worst = worst.max(error / bound);
        }
    }
    println!("parity {label} f16 copy: max error {worst:.2} of the bound");
}

/// Runs a matvec_quant.cu kernel over `projections` (128 threads a block), with the mixed
/// kernel's `second_block` when given.
pub fn run_matvec(
    kernel: &str,
    copy: &Q8Copy,
    projections: &Projections,
    cols: usize,
    n_rows: usize,
    second_block: Option<u32>,
) {
    let mut q = copy.values.words.as_ptr() as u64;
    let mut scales = copy.scales.words.as_ptr() as u64;
    let mut projections_arg = Projections { ..*projections };
    let (mut cols, mut n_rows) = (cols as u32, n_rows as u32);
    let mut second = second_block.unwrap_or(0);
    let mut args =
        vec![ptr(&mut q), ptr(&mut scales), ptr(&mut projections_arg), ptr(&mut cols), ptr(&mut n_rows)];
    if second_block.is_some() {
        args.push(ptr(&mut second));
    }
    run(kernel, LaunchShape::linear(projections.blocks(), 128), &mut args);
}

pub fn ptr<T>(value: &mut T) -> *mut c_void {
    (value as *mut T).cast()
}

/// Launches `kernel`, panicking with the emulator's message on failure.
pub fn run(kernel: &str, shape: LaunchShape, args: &mut [*mut c_void]) {
    // SAFETY: the callers pass arguments in the kernels' parameter order and types, pointing at
    // buffers sized for the launch.
    unsafe { launch(kernel, shape, args) }.unwrap_or_else(|e| panic!("{e}"));
}

/// Asserts `got` matches `want` within `tolerance` of `max(1, max |want|)` (over the finite
/// values; a NaN or infinite `want` must be matched exactly, any NaN by any NaN) and prints the
/// error.
pub fn check(label: &str, got: &[f32], want: &[f32], tolerance: f32) {
    assert_eq!(got.len(), want.len(), "{label}: lengths");
    let scale = want.iter().filter(|v| v.is_finite()).fold(1.0f32, |m, v| m.max(v.abs()));
    let mut worst = 0.0f32;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if !w.is_finite() {
            assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{label}[{i}]: {g} vs {w}");
            continue;
        }
        let error = (g - w).abs() / scale;
        assert!(error <= tolerance, "{label}[{i}]: emulated {g}, cpu {w}, error {error:e} > {tolerance:e}");
        worst = worst.max(error);
    }
    println!("parity {label}: max error {worst:.2e} (tolerance {tolerance:.0e})");
}

/// The activations an mmq kernel reads: the int8 copy, or the f16 one and its row scales.
pub enum MmqInput<'a> {
    Int8(&'a Q8Copy),
    Half(&'a Q8Copy),
}

/// Runs an mmq.cu or mmq_f16.cu kernel over `projections` (64 weight rows a block), K split
/// `splits` ways; a kernel of two formats gets `second_block`, where the second starts.
pub fn run_mmq(
    kernel: &str,
    input: MmqInput,
    projections: &Projections,
    (cols, n_rows): (usize, usize),
    splits: u32,
    second_block: Option<u32>,
) {
    const TILE_ROWS: usize = 64;
    let tiles = projections.blocks();
    let tile = [8, 16, 24, 32, 48, 64].into_iter().find(|&t| t >= n_rows).expect("at most 64 rows");
    let mut partials = DeviceBuffer::zeroed(4 * tiles as usize * splits as usize * TILE_ROWS * tile);
    let mut arrivals = DeviceBuffer::zeroed(4 * tiles as usize);
    let (mut first, mut second) = match input {
        MmqInput::Int8(copy) => (copy.values.words.as_ptr() as u64, copy.scales.words.as_ptr() as u64),
        MmqInput::Half(copy) => (copy.halves.words.as_ptr() as u64, copy.half_scales.words.as_ptr() as u64),
    };
    let mut projections_arg = Projections { ..*projections };
    let (mut cols, mut n_rows) = (cols as u32, n_rows as u32);
    let (mut partials_ptr, mut arrivals_ptr) = (partials.address(), arrivals.address());
    // The f16 kernels run two K parts of four warps (mmq.rs).
    let threads = match input {
        MmqInput::Int8(_) => 128,
        MmqInput::Half(_) => 256,
    };
    let shape = LaunchShape { grid: [tiles, splits, 1], block: [threads, 1, 1], dynamic_shared_bytes: 0 };
    let mut args = vec![ptr(&mut first), ptr(&mut second)];
    args.extend([
        ptr(&mut projections_arg),
        ptr(&mut cols),
        ptr(&mut n_rows),
        ptr(&mut partials_ptr),
        ptr(&mut arrivals_ptr),
    ]);
    let mut second_block = second_block;
    if let Some(block) = &mut second_block {
        args.push(ptr(block));
    }
    run(kernel, shape, &mut args);
    assert!(
        arrivals.floats(tiles as usize).iter().all(|c| c.to_bits() == 0),
        "{kernel}: arrival counters reset"
    );
}
