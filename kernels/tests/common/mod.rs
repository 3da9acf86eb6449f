//! Deterministic random data shared by the quant integration tests.

// Each test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use canopy_kernels::quant::GgmlType;

/// SplitMix64: tiny, deterministic, good enough to scatter test bits.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Standard normal (Box-Muller).
    pub fn gaussian(&mut self) -> f32 {
        let u = 1.0 - f64::from(self.unit());
        let v = f64::from(self.unit());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }

    fn fill_bytes(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }

    /// Random bits of a finite f16: any sign, exponent and mantissa but the all-ones exponent.
    fn finite_f16_bits(&mut self) -> u16 {
        loop {
            let bits = self.next_u64() as u16;
            if bits & 0x7c00 != 0x7c00 {
                return bits;
            }
        }
    }

    /// Random bits of a finite f32.
    fn finite_f32_bits(&mut self) -> u32 {
        loop {
            let bits = self.next_u64() as u32;
            if bits & 0x7f80_0000 != 0x7f80_0000 {
                return bits;
            }
        }
    }

    /// Random bits of a finite bf16.
    fn finite_bf16_bits(&mut self) -> u16 {
        loop {
            let bits = self.next_u64() as u16;
            if bits & 0x7f80 != 0x7f80 {
                return bits;
            }
        }
    }
}

/// How to fill the float fields (block scales, or the elements of the float types) of random
/// blocks.
#[derive(Clone, Copy, Debug)]
pub enum Floats {
    /// Any finite bit pattern: subnormals, huge values, both zeros.
    AnyFinite,
    /// Values of moderate size (|v| < 4), so that sums stay far from overflow.
    Moderate,
}

/// Byte offsets of the f16 scale fields of a block, per ggml's block layouts (ggml-common.h).
fn f16_scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        GgmlType::Q6K => &[208],
        _ => &[],
    }
}

/// `n_blocks` random blocks of `ty`: random bytes, with every float field finite.
pub fn random_blocks(ty: GgmlType, n_blocks: usize, rng: &mut Rng, floats: Floats) -> Vec<u8> {
    let size = ty.type_size();
    let mut bytes = vec![0u8; n_blocks * size];
    rng.fill_bytes(&mut bytes);
    for block in bytes.chunks_exact_mut(size) {
        match ty {
            GgmlType::F32 => {
                let bits = match floats {
                    Floats::AnyFinite => rng.finite_f32_bits(),
                    Floats::Moderate => (4.0 * rng.gaussian().tanh()).to_bits(),
                };
                block.copy_from_slice(&bits.to_le_bytes());
            }
            GgmlType::F16 => {
                let bits = match floats {
                    Floats::AnyFinite => rng.finite_f16_bits(),
                    Floats::Moderate => half::f16::from_f32(4.0 * rng.gaussian().tanh()).to_bits(),
                };
                block.copy_from_slice(&bits.to_le_bytes());
            }
            GgmlType::Bf16 => {
                let bits = match floats {
                    Floats::AnyFinite => rng.finite_bf16_bits(),
                    Floats::Moderate => ((4.0 * rng.gaussian().tanh()).to_bits() >> 16) as u16,
                };
                block.copy_from_slice(&bits.to_le_bytes());
            }
            GgmlType::Q8K => {
                let bits = match floats {
                    Floats::AnyFinite => rng.finite_f32_bits(),
                    Floats::Moderate => (rng.unit() * 0.1).to_bits(),
                };
                block[..4].copy_from_slice(&bits.to_le_bytes());
            }
            _ => {
                for &offset in f16_scale_offsets(ty) {
                    let bits = match floats {
                        Floats::AnyFinite => rng.finite_f16_bits(),
                        Floats::Moderate => half::f16::from_f32(rng.unit() * 0.1).to_bits(),
                    };
                    block[offset..offset + 2].copy_from_slice(&bits.to_le_bytes());
                }
            }
        }
    }
    bytes
}

/// `n` standard-normal values times `scale`.
pub fn gaussian_row(n: usize, scale: f32, rng: &mut Rng) -> Vec<f32> {
    (0..n).map(|_| rng.gaussian() * scale).collect()
}

/// [`gaussian_row`]'s values rounded to the nearest f16: KV pool contents that every backend holds
/// exactly (the CUDA backend's pools are f16), so that they all attend over the same values.
pub fn kv_row(n: usize, scale: f32, rng: &mut Rng) -> Vec<f32> {
    gaussian_row(n, scale, rng).into_iter().map(|x| half::f16::from_f32(x).to_f32()).collect()
}
