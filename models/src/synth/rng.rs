//! A small deterministic PRNG for synthetic weights: xoshiro256++ seeded through splitmix64, with
//! Box-Muller normals.
//!
//! Every chunk of every tensor gets its own stream, derived from (seed, tensor index, chunk index), so
//! chunks can be generated in parallel in any order and the file stays bit-identical for a seed.

/// The splitmix64 output function: a bijective 64-bit mixer.
const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// xoshiro256++ generator.
#[derive(Clone, Debug)]
pub(crate) struct Rng {
    state: [u64; 4],
}

impl Rng {
    /// The stream of one chunk of one tensor.
    pub(crate) fn for_chunk(seed: u64, tensor_index: u64, chunk_index: u64) -> Self {
        let key = mix64(mix64(mix64(seed) ^ tensor_index.wrapping_add(GOLDEN_GAMMA)) ^ chunk_index);
        Self::from_seed(key)
    }

    /// Expands a 64-bit seed with splitmix64, as the xoshiro authors recommend.
    fn from_seed(seed: u64) -> Self {
        let mut counter = seed;
        let mut next = || {
            counter = counter.wrapping_add(GOLDEN_GAMMA);
            mix64(counter)
        };
        Self { state: [next(), next(), next(), next()] }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let [s0, s1, s2, s3] = self.state;
        let result = s0.wrapping_add(s3).rotate_left(23).wrapping_add(s0);
        let t = s1 << 17;
        let mut s = [s0, s1, s2 ^ s0, s3 ^ s1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        self.state = s;
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Fills `out` with N(0, sigma) samples (Box-Muller, two samples per pair of uniforms).
    pub(crate) fn fill_normal(&mut self, out: &mut [f32], sigma: f32) {
        let sigma = f64::from(sigma);
        let mut pairs = out.chunks_exact_mut(2);
        for pair in &mut pairs {
            let (a, b) = self.normal_pair();
            pair[0] = (a * sigma) as f32;
            pair[1] = (b * sigma) as f32;
        }
        if let [last] = pairs.into_remainder() {
            *last = (self.normal_pair().0 * sigma) as f32;
        }
    }

    /// Fills `out` with uniform samples in [low, high).
    pub(crate) fn fill_uniform(&mut self, out: &mut [f32], low: f32, high: f32) {
        let largest = high.next_down();
        let (low, span) = (f64::from(low), f64::from(high) - f64::from(low));
        for value in out {
            // Rounding to f32 can round a sample just below `high` up to it.
            *value = ((low + span * self.next_f64()) as f32).min(largest);
        }
    }

    fn normal_pair(&mut self) -> (f64, f64) {
        // 1 - u lies in (0, 1], so the logarithm is finite.
        let radius = (-2.0 * (1.0 - self.next_f64()).ln()).sqrt();
        let (sin, cos) = (std::f64::consts::TAU * self.next_f64()).sin_cos();
        (radius * cos, radius * sin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_reference_sequence() {
        // Reference values of splitmix64 seeded with 1234567 (from the generator's published C code).
        let mut state = 1_234_567u64;
        let mut next = || {
            state = state.wrapping_add(GOLDEN_GAMMA);
            mix64(state)
        };
        assert_eq!(next(), 6_457_827_717_110_365_317);
        assert_eq!(next(), 3_203_168_211_198_807_973);
        assert_eq!(next(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn xoshiro_matches_the_reference_sequence() {
        // First outputs of the reference xoshiro256++ from state {1, 2, 3, 4}.
        let mut rng = Rng { state: [1, 2, 3, 4] };
        let expected =
            [41_943_041, 58_720_359, 3_588_806_011_781_223, 3_591_011_842_654_386, 9_228_616_714_210_784_205];
        for want in expected {
            assert_eq!(rng.next_u64(), want);
        }
    }

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let draw = |seed, tensor, chunk| {
            let mut rng = Rng::for_chunk(seed, tensor, chunk);
            [rng.next_u64(), rng.next_u64()]
        };
        assert_eq!(draw(7, 3, 5), draw(7, 3, 5));
        assert_ne!(draw(7, 3, 5), draw(8, 3, 5));
        assert_ne!(draw(7, 3, 5), draw(7, 4, 5));
        assert_ne!(draw(7, 3, 5), draw(7, 3, 6));
        assert_ne!(draw(7, 3, 5), draw(7, 5, 3));
    }

    #[test]
    fn normal_samples_have_the_requested_moments() {
        let mut rng = Rng::for_chunk(42, 0, 0);
        let mut samples = vec![0.0f32; 1 << 20];
        rng.fill_normal(&mut samples, 0.5);
        let n = samples.len() as f64;
        let mean = samples.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = samples.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / n;
        let within_one_sigma = samples.iter().filter(|x| x.abs() < 0.5).count() as f64 / n;
        // Standard errors: mean 0.5/1024 = 5e-4, std about 3.5e-4, fraction about 5e-4.
        assert!(mean.abs() < 3e-3, "mean {mean}");
        assert!((var.sqrt() - 0.5).abs() < 3e-3, "std {}", var.sqrt());
        assert!((within_one_sigma - 0.682_689).abs() < 3e-3, "P(|x| < sigma) = {within_one_sigma}");
    }

    #[test]
    fn odd_lengths_are_filled_completely() {
        let mut rng = Rng::for_chunk(1, 1, 1);
        let mut samples = vec![f32::NAN; 5];
        rng.fill_normal(&mut samples, 1.0);
        assert!(samples.iter().all(|x| x.is_finite() && *x != 0.0));
    }

    #[test]
    fn uniform_samples_stay_in_range_and_cover_it() {
        let mut rng = Rng::for_chunk(9, 0, 0);
        let mut samples = vec![0.0f32; 100_000];
        rng.fill_uniform(&mut samples, 0.5, 1.5);
        assert!(samples.iter().all(|&x| (0.5..1.5).contains(&x)));
        let mean = samples.iter().map(|&x| f64::from(x)).sum::<f64>() / samples.len() as f64;
        assert!((mean - 1.0).abs() < 0.01, "mean {mean}");
        assert!(samples.iter().any(|&x| x < 0.51) && samples.iter().any(|&x| x > 1.49));
    }
}
