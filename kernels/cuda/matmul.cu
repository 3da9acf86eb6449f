// Matrix-vector products for decode and small batches: out[b, r] = sum_c x[b, c] * W[r, c].
// One warp per weight row, applying each decoded weight to up to MATVEC_TILE input rows.
// Larger batches take further tiles along grid.y, each reading the weights again.
//
// Block formats are read cooperatively: the warp's lanes split one group of blocks between them
// so that each load instruction covers consecutive bytes of the row, instead of each lane walking
// its own block with loads a block apart. Every lane decodes eight weights per group, laid out as
// RUNS runs of RUN consecutive columns, and reads the matching activations as vectors.

#define MATVEC_TILE 8
#define MATVEC_WARPS 4
#define LANE_VALUES 8

// Element-wise formats: lanes take consecutive elements.
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

template <int FMT> struct Lanes;

// Q8_0 (34-byte blocks, 2-byte aligned): a group is eight blocks; four lanes share a block, each
// taking eight consecutive quants as four 16-bit loads.
template <> struct Lanes<FMT_Q8_0> {
    static const int RUN = 8;
    static const int RUNS = 1;
    __device__ static u32 groups(u32 cols) { return (cols / QK8_0 + 7) / 8; }
    __device__ static bool decode(const u8 *row, u32 cols, u32 group, int lane, float *v,
                                  u32 *col) {
        const u32 block_index = group * 8 + lane / 4;
        if (block_index >= cols / QK8_0) {
            return false;
        }
        const u8 *block = row + (size_t)block_index * Q8_0_BYTES;
        const float d = f16_bits_to_f32(*(const u16 *)block);
        const int offset = 8 * (lane % 4);
        const u16 *qs = (const u16 *)(block + 2 + offset);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const u16 pair = qs[i];
            v[2 * i] = d * (float)(signed char)(pair & 0xff);
            v[2 * i + 1] = d * (float)(signed char)(pair >> 8);
        }
        col[0] = block_index * QK8_0 + offset;
        return true;
    }
};

// Q4_K (144-byte blocks, 4-byte aligned): a group is one block; lane l loads quant bytes 4l..4l+4,
// whose low nibbles are four elements of sub-block 2(l/8) and high nibbles four of the next.
template <> struct Lanes<FMT_Q4_K> {
    static const int RUN = 4;
    static const int RUNS = 2;
    __device__ static u32 groups(u32 cols) { return cols / QK_K; }
    __device__ static bool decode(const u8 *row, u32 cols, u32 group, int lane, float *v,
                                  u32 *col) {
        const u8 *block = row + (size_t)group * Q4_K_BYTES;
        const int pair = lane / 8;
        const int offset = 4 * (lane % 8);
        const u32 q = *(const u32 *)(block + 16 + 32 * pair + offset);
        const float d = f16_bits_to_f32(*(const u16 *)block);
        const float dmin = f16_bits_to_f32(*(const u16 *)(block + 2));
#pragma unroll
        for (int half_index = 0; half_index < 2; ++half_index) {
            int scale, min;
            q4_k_scale_min(block + 4, 2 * pair + half_index, &scale, &min);
            const float ds = d * (float)scale;
            const float m = dmin * (float)min;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                v[4 * half_index + i] = ds * (float)((q >> (8 * i + 4 * half_index)) & 0x0f) - m;
            }
            col[half_index] = group * QK_K + 64 * pair + 32 * half_index + offset;
        }
        return true;
    }
};

// Q6_K (210-byte blocks, 2-byte aligned): a group is one block; lanes of half h = l/16 take
// positions p = 2(l%16), p+1 of each quarter of that half, reading ql and qh as 16-bit loads.
template <> struct Lanes<FMT_Q6_K> {
    static const int RUN = 2;
    static const int RUNS = 4;
    __device__ static u32 groups(u32 cols) { return cols / QK_K; }
    __device__ static bool decode(const u8 *row, u32 cols, u32 group, int lane, float *v,
                                  u32 *col) {
        const u8 *block = row + (size_t)group * Q6_K_BYTES;
        const int half_index = lane / 16;
        const int p = 2 * (lane % 16);
        const u32 low_even = *(const u16 *)(block + 64 * half_index + p);
        const u32 low_odd = *(const u16 *)(block + 64 * half_index + 32 + p);
        const u32 high = *(const u16 *)(block + 128 + 32 * half_index + p);
        const float d = f16_bits_to_f32(*(const u16 *)(block + 208));
        const signed char *scales = (const signed char *)(block + 192) + 8 * half_index + p / 16;
#pragma unroll
        for (int quarter = 0; quarter < 4; ++quarter) {
            const float ds = d * (float)scales[2 * quarter];
            const u32 low = quarter % 2 ? low_odd : low_even;
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const int nibble = (low >> (8 * t + 4 * (quarter / 2))) & 0x0f;
                const int top = (high >> (8 * t + 2 * quarter)) & 3;
                v[2 * quarter + t] = ds * (float)((nibble | (top << 4)) - 32);
            }
            col[quarter] = group * QK_K + 128 * half_index + 32 * quarter + p;
        }
        return true;
    }
};

// RUN consecutive activations starting at a multiple of RUN floats, as vector loads.
template <int RUN> __device__ __forceinline__ void load_run(const float *src, float *dst) {
#pragma unroll
    for (int i = 0; i < RUN; i += 2) {
        const float2 pair = *(const float2 *)(src + i);
        dst[i] = pair.x;
        dst[i + 1] = pair.y;
    }
}

template <> __device__ __forceinline__ void load_run<4>(const float *src, float *dst) {
    const float4 quad = *(const float4 *)src;
    dst[0] = quad.x;
    dst[1] = quad.y;
    dst[2] = quad.z;
    dst[3] = quad.w;
}

template <> __device__ __forceinline__ void load_run<8>(const float *src, float *dst) {
    load_run<4>(src, dst);
    load_run<4>(src + 4, dst + 4);
}

template <int FMT>
__device__ void matvec_blocks(const float *x, const u8 *weight, size_t row_bytes, u32 rows,
                              u32 cols, u32 n_rows, float *out) {
    typedef Lanes<FMT> L;
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
    const u32 n_groups = L::groups(cols);
#pragma unroll 2
    for (u32 group = 0; group < n_groups; ++group) {
        float v[LANE_VALUES];
        u32 col[L::RUNS];
        if (!L::decode(w, cols, group, lane, v, col)) {
            continue;
        }
#pragma unroll
        for (int b = 0; b < MATVEC_TILE; ++b) {
            if (b < tile) {
                const float *xb = xs + (size_t)b * cols;
                float sum = 0.0f;
#pragma unroll
                for (int k = 0; k < L::RUNS; ++k) {
                    float xv[L::RUN];
                    load_run<L::RUN>(xb + col[k], xv);
#pragma unroll
                    for (int i = 0; i < L::RUN; ++i) {
                        sum += v[k * L::RUN + i] * xv[i];
                    }
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

#define MATVEC_KERNEL(NAME, FMT, BODY)                                                             \
    extern "C" __global__ void NAME(const float *x, const u8 *weight, size_t row_bytes, u32 rows,   \
                                    u32 cols, u32 n_rows, float *out) {                            \
        BODY<FMT>(x, weight, row_bytes, rows, cols, n_rows, out);                                  \
    }

MATVEC_KERNEL(matvec_f32, FMT_F32, matvec)
MATVEC_KERNEL(matvec_f16, FMT_F16, matvec)
MATVEC_KERNEL(matvec_bf16, FMT_BF16, matvec)
MATVEC_KERNEL(matvec_q8_0, FMT_Q8_0, matvec_blocks)
MATVEC_KERNEL(matvec_q4_k, FMT_Q4_K, matvec_blocks)
MATVEC_KERNEL(matvec_q6_k, FMT_Q6_K, matvec_blocks)
