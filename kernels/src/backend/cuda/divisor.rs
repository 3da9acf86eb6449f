//! Division by a number fixed for a launch, as a multiply-high, an add and a shift on the device
//! (common.cuh's `FastDivisor`): an integer division is a sequence of a dozen instructions there,
//! and the attention kernels divide positions by the KV block size for every key they load.
//!
//! For a divisor d, with l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1, every n < 2^31
//! has n / d = (floor(n m / 2^32) + n) >> l (Granlund and Montgomery, "Division by invariant
//! integers using multiplication", 1994). Below 2^31 the sum cannot overflow 32 bits.

use cudarc::driver::DeviceRepr;

use crate::backend::BackendError;

/// The kernels' `FastDivisor`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastDivisor {
    divisor: u32,
    multiplier: u32,
    shift: u32,
}

// SAFETY: plain old data with the C layout the kernels declare.
unsafe impl DeviceRepr for FastDivisor {}

/// The largest numerator (exclusive) and divisor the method covers.
const LIMIT: u64 = 1 << 31;

impl FastDivisor {
    /// The divisor `divisor` (1 to 2^31 - 1) for numerators below 2^31.
    pub fn new(op: &'static str, divisor: usize) -> Result<Self, BackendError> {
        let d = u64::try_from(divisor)
            .ok()
            .filter(|&d| (1..LIMIT).contains(&d))
            .ok_or_else(|| BackendError::shape(op, format!("divisor {divisor} outside 1..2^31")))?;
        let shift = u64::BITS - (d - 1).leading_zeros();
        let multiplier = ((1u64 << 32) * ((1u64 << shift) - d)) / d + 1;
        // Each fits: d < 2^31, shift <= 31, and multiplier <= 2^32 (2^l - d) / d + 1 < 2^32.
        Ok(Self { divisor: d as u32, multiplier: multiplier as u32, shift })
    }

    /// `n / divisor` as the kernels compute it, for n < 2^31.
    #[cfg(test)]
    fn divide(&self, n: u32) -> u32 {
        let high = ((u64::from(n) * u64::from(self.multiplier)) >> 32) as u32;
        (high + n) >> self.shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotients_match_integer_division() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let divisors = (1..=4097).chain([1 << 20, 12_345_678, (1 << 30) + 1, (1 << 31) - 1]);
        for d in divisors {
            let fast = FastDivisor::new("test", d).unwrap();
            let d = d as u32;
            // Around multiples of d, where a quotient changes, and random numerators.
            let edges = (1..64u32).flat_map(|k| k.checked_mul(d).map(|m| [m - 1, m, m + 1])).flatten();
            let random = (0..256).map(|_| (next() % LIMIT) as u32);
            for n in [0, 1, (1 << 31) - 1].into_iter().chain(edges).chain(random) {
                if u64::from(n) < LIMIT {
                    assert_eq!(fast.divide(n), n / d, "{n} / {d}");
                }
            }
        }
    }

    #[test]
    fn divisors_outside_the_range_are_errors() {
        for bad in [0, 1 << 31, usize::MAX] {
            assert!(FastDivisor::new("test", bad).is_err(), "{bad}");
        }
        assert_eq!(FastDivisor::new("test", 1).unwrap(), FastDivisor { divisor: 1, multiplier: 1, shift: 0 });
    }
}
