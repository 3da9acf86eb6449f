//! Dot products and sums written with independent accumulators in a fixed order, which the
//! compiler turns into SIMD (it may not reorder the additions of a single f32 accumulator).

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

/// Rows interleaved by a panel: `panel[k][r]` is element `k` of row `r`.
pub(super) const PANEL_ROWS: usize = 8;

/// The dot products of the `PANEL_ROWS` rows of `panel` with `x` (one element of `x` per panel
/// entry). Each step multiplies one broadcast element of `x` with a contiguous vector of rows,
/// the shape SIMD units want; four steps in flight hide the addition latency.
pub(super) fn dot_panel(panel: &[[f32; PANEL_ROWS]], x: &[f32]) -> [f32; PANEL_ROWS] {
    const UNROLL: usize = 4;
    let mut acc = [[0f32; PANEL_ROWS]; UNROLL];
    let (panel_chunks, panel_tail) = panel.as_chunks::<UNROLL>();
    let (x_chunks, x_tail) = x.as_chunks::<UNROLL>();
    for (columns, x) in panel_chunks.iter().zip(x_chunks) {
        for step in 0..UNROLL {
            for row in 0..PANEL_ROWS {
                acc[step][row] += columns[step][row] * x[step];
            }
        }
    }
    for (column, &x) in panel_tail.iter().zip(x_tail) {
        for row in 0..PANEL_ROWS {
            acc[0][row] += column[row] * x;
        }
    }
    std::array::from_fn(|row| acc.iter().map(|acc| acc[row]).sum())
}
