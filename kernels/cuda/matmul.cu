// Matrix-vector products for decode and small batches: out[b, r] = sum_c x[b, c] * W[r, c].
// One warp per weight row; lanes decode consecutive chunks of the row, so a warp reads the row's
// bytes once and coalesced, and applies each decoded chunk to up to MATVEC_TILE input rows.
// Larger batches take further tiles along grid.y, each reading the weights again.

#define MATVEC_TILE 8
#define MATVEC_WARPS 4

template <int FMT>
__device__ void matvec(const float *x, const u8 *weight, size_t row_bytes, u32 rows, u32 cols,
                       u32 n_rows, float *out) {
    typedef Format<FMT> F;
    const u32 row = blockIdx.x * MATVEC_WARPS + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    const u32 first = blockIdx.y * MATVEC_TILE;
    if (row >= rows) {
        return;
    }
    const u32 tile = min((u32)MATVEC_TILE, n_rows - first);
    const u8 *w = weight + (size_t)row * row_bytes;
    const float *xs = x + (size_t)first * cols;
    float acc[MATVEC_TILE];
#pragma unroll
    for (int b = 0; b < MATVEC_TILE; ++b) {
        acc[b] = 0.0f;
    }
    const u32 n_chunks = cols / F::CHUNK;
    for (u32 chunk = lane; chunk < n_chunks; chunk += WARP_SIZE) {
        float values[F::CHUNK];
        F::decode(w, chunk, values);
        const size_t col = (size_t)chunk * F::CHUNK;
#pragma unroll
        for (int b = 0; b < MATVEC_TILE; ++b) {
            if (b < tile) {
                const float *xb = xs + (size_t)b * cols + col;
                float sum = 0.0f;
#pragma unroll
                for (int i = 0; i < F::CHUNK; ++i) {
                    sum += values[i] * xb[i];
                }
                acc[b] += sum;
            }
        }
    }
#pragma unroll
    for (int b = 0; b < MATVEC_TILE; ++b) {
        if (b < tile) {
            const float total = warp_sum(acc[b]);
            if (lane == 0) {
                out[(size_t)(first + b) * rows + row] = total;
            }
        }
    }
}

#define MATVEC_KERNEL(NAME, FMT)                                                                   \
    extern "C" __global__ void NAME(const float *x, const u8 *weight, size_t row_bytes, u32 rows,   \
                                    u32 cols, u32 n_rows, float *out) {                            \
        matvec<FMT>(x, weight, row_bytes, rows, cols, n_rows, out);                                \
    }

MATVEC_KERNEL(matvec_f32, FMT_F32)
MATVEC_KERNEL(matvec_f16, FMT_F16)
MATVEC_KERNEL(matvec_bf16, FMT_BF16)
MATVEC_KERNEL(matvec_q8_0, FMT_Q8_0)
MATVEC_KERNEL(matvec_q4_k, FMT_Q4_K)
MATVEC_KERNEL(matvec_q6_k, FMT_Q6_K)
