//! Reductions written with independent per-lane accumulators, which the compiler turns into SIMD
//! (it may not reorder a single f32 accumulator).

const LANES: usize = 8;

/// `Σ a[i] * b[i]` over the shorter of the two slices.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (a_chunks, a_tail) = a.as_chunks::<LANES>();
    let (b_chunks, b_tail) = b.as_chunks::<LANES>();
    for (a, b) in a_chunks.iter().zip(b_chunks) {
        for lane in 0..LANES {
            acc[lane] += a[lane] * b[lane];
        }
    }
    acc.iter().sum::<f32>() + a_tail.iter().zip(b_tail).map(|(a, b)| a * b).sum::<f32>()
}

/// `Σ f(v)` over the slice.
pub(super) fn sum_map(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let (chunks, tail) = values.as_chunks::<LANES>();
    for chunk in chunks {
        for lane in 0..LANES {
            acc[lane] += f(chunk[lane]);
        }
    }
    acc.iter().sum::<f32>() + tail.iter().map(|&v| f(v)).sum::<f32>()
}

/// The dot products of each of `rows` with `x` (all equally long), reading `x` once.
pub(super) fn dot_many<const N: usize>(rows: [&[f32]; N], x: &[f32]) -> [f32; N] {
    let mut acc = [[0f32; LANES]; N];
    let (x_chunks, x_tail) = x.as_chunks::<LANES>();
    let row_chunks = rows.map(|row| row.as_chunks::<LANES>().0);
    for (i, x_chunk) in x_chunks.iter().enumerate() {
        for (acc, chunks) in acc.iter_mut().zip(&row_chunks) {
            let w = &chunks[i];
            for lane in 0..LANES {
                acc[lane] += w[lane] * x_chunk[lane];
            }
        }
    }
    let tail_start = x_chunks.len() * LANES;
    std::array::from_fn(|r| {
        let tail: f32 = rows[r][tail_start..].iter().zip(x_tail).map(|(w, x)| w * x).sum();
        acc[r].iter().sum::<f32>() + tail
    })
}
