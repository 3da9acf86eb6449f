// Matrix-vector products of element-wise (f32, f16, bf16) weights with f32 activations, for decode
// and small batches: out[b, r] = sum_c x[b, c] * W[r, c]. Block-quantized weights take the int8
// kernels of matvec_quant.cu.
//
// A block of MATVEC_WARPS warps computes ROWS weight rows for TILE input rows. The warps split the
// row's groups of columns between them (split-K) and add their partial sums in shared memory at
// the end, so even the 1024-row K/V projections keep every SM busy. Within a warp the lanes share
// each group, so every load instruction covers consecutive bytes.
//
// Decode steps (one input row) use ROWS = 4, TILE = 1: each run of activations a lane loads is
// applied to four weight rows, which keeps the L1 traffic of the f32 activations below the DRAM
// traffic of the weights. Batches use ROWS = 1, TILE = 8 and decode each weight once per tile.

#define MATVEC_WARPS 4

// How a warp's lanes share a format. A lane covers RUN consecutive columns of one group.
//   groups(cols)                      groups per row
//   load(row, cols, group, lane, raw) fetch the lane's bytes; false when it has none in the group
//   decode(raw, q)                    registers only
//   column(group, lane)               first column of the lane's run
template <int FMT> struct Lanes;

// Each lane loads 16 bytes of consecutive elements (VALUES of them); the launcher only picks these
// kernels when a row is a whole number of such loads.
template <int FMT, int VALUES> struct PlainLanes {
    static const int RUN = VALUES;
    struct Raw {
        uint4 bytes;
    };
    __device__ static u32 groups(u32 cols) { return (cols / VALUES + WARP_SIZE - 1) / WARP_SIZE; }
    __device__ static bool load(const u8 *row, u32 cols, u32 group, int lane, Raw &raw) {
        const u32 col = column(group, lane);
        if (col >= cols) {
            return false;
        }
        raw.bytes = *(const uint4 *)(row + (size_t)col * (16 / VALUES));
        return true;
    }
    __device__ static u32 column(u32 group, int lane) { return (group * WARP_SIZE + lane) * VALUES; }
};

template <> struct Lanes<FMT_F32> : PlainLanes<FMT_F32, 4> {
    __device__ static void decode(const Raw &raw, float *q) {
        q[0] = __uint_as_float(raw.bytes.x);
        q[1] = __uint_as_float(raw.bytes.y);
        q[2] = __uint_as_float(raw.bytes.z);
        q[3] = __uint_as_float(raw.bytes.w);
    }
};

template <> struct Lanes<FMT_F16> : PlainLanes<FMT_F16, 8> {
    __device__ static void decode(const Raw &raw, float *q) {
        const u32 words[4] = {raw.bytes.x, raw.bytes.y, raw.bytes.z, raw.bytes.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            q[2 * w] = f16_bits_to_f32(words[w] & 0xffff);
            q[2 * w + 1] = f16_bits_to_f32(words[w] >> 16);
        }
    }
};

template <> struct Lanes<FMT_BF16> : PlainLanes<FMT_BF16, 8> {
    __device__ static void decode(const Raw &raw, float *q) {
        const u32 words[4] = {raw.bytes.x, raw.bytes.y, raw.bytes.z, raw.bytes.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            q[2 * w] = __uint_as_float(words[w] << 16);
            q[2 * w + 1] = __uint_as_float(words[w] & 0xffff0000u);
        }
    }
};

// RUN (4 or 8) consecutive activations starting at a multiple of RUN floats, as vector loads.
template <int RUN> __device__ __forceinline__ void load_run(const float *src, float *dst) {
#pragma unroll
    for (int i = 0; i < RUN; i += 4) {
        const float4 quad = *(const float4 *)(src + i);
        dst[i] = quad.x;
        dst[i + 1] = quad.y;
        dst[i + 2] = quad.z;
        dst[i + 3] = quad.w;
    }
}

template <int RUN> __device__ __forceinline__ float dot_run(const float *q, const float *xv) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < RUN; ++i) {
        sum = fmaf(q[i], xv[i], sum);
    }
    return sum;
}

template <int FMT, int ROWS, int TILE>
__device__ void matvec_lanes(const float *x, const u8 *weight, size_t row_bytes, u32 rows, u32 cols,
                             u32 n_rows, float *out) {
    wait_for_previous_kernel();
    typedef Lanes<FMT> L;
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const u32 row0 = blockIdx.x * ROWS;
    const u32 first = blockIdx.y * TILE;
    const u32 tile = min((u32)TILE, n_rows - first);
    const float *xs = x + (size_t)first * cols;
    float acc[ROWS][TILE];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int b = 0; b < TILE; ++b) {
            acc[r][b] = 0.0f;
        }
    }
    const u32 n_groups = L::groups(cols);
    for (u32 group = warp; group < n_groups; group += MATVEC_WARPS) {
        typename L::Raw raw[ROWS];
        bool has_block = true;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            // Rows past the end repeat the last one; their sums are never written.
            const u32 row = min(row0 + r, rows - 1);
            has_block = L::load(weight + (size_t)row * row_bytes, cols, group, lane, raw[r]);
        }
        if (!has_block) {
            continue;
        }
        const u32 col = L::column(group, lane);
        float q[L::RUN], xv[L::RUN];
        if (ROWS == 1) {
            // One weight row, decoded once and applied to every input row of the tile.
            L::decode(raw[0], q);
#pragma unroll
            for (int b = 0; b < TILE; ++b) {
                if (b < tile) {
                    load_run<L::RUN>(xs + (size_t)b * cols + col, xv);
                    acc[0][b] += dot_run<L::RUN>(q, xv);
                }
            }
        } else {
            // Activations loaded once per input row and applied to every weight row.
#pragma unroll
            for (int b = 0; b < TILE; ++b) {
                if (b < tile) {
                    load_run<L::RUN>(xs + (size_t)b * cols + col, xv);
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) {
                        L::decode(raw[r], q);
                        acc[r][b] += dot_run<L::RUN>(q, xv);
                    }
                }
            }
        }
    }
    store_block_sums<MATVEC_WARPS, ROWS, TILE>(acc, row0, rows, first, tile, out);
}

// Element-wise formats whose rows are not a whole number of 16-byte loads: one element per lane
// at a time, one warp per weight row, up to 8 input rows per pass.
template <int FMT>
__device__ void matvec_any(const float *x, const u8 *weight, size_t row_bytes, u32 rows, u32 cols,
                           u32 n_rows, float *out) {
    wait_for_previous_kernel();
    typedef Format<FMT> F;
    const u32 row = blockIdx.x * MATVEC_WARPS + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    const u32 first = blockIdx.y * 8;
    if (row >= rows) {
        return;
    }
    const u32 tile = min(8u, n_rows - first);
    const WeightRow w = weight_row<FMT>(weight, row_bytes, row);
    const float *xs = x + (size_t)first * cols;
    float acc[8];
#pragma unroll
    for (int b = 0; b < 8; ++b) {
        acc[b] = 0.0f;
    }
    for (u32 col = lane; col < cols; col += WARP_SIZE) {
        float value;
        F::decode(w, cols, col, &value);
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            if (b < tile) {
                acc[b] += value * xs[(size_t)b * cols + col];
            }
        }
    }
#pragma unroll
    for (int b = 0; b < 8; ++b) {
        if (b < tile) {
            const float total = warp_sum(acc[b]);
            if (lane == 0) {
                out[(size_t)(first + b) * rows + row] = total;
            }
        }
    }
}

#define MATVEC_KERNEL(NAME, BODY)                                                                  \
    extern "C" __global__ void NAME(const float *x, const u8 *weight, size_t row_bytes, u32 rows,   \
                                    u32 cols, u32 n_rows, float *out) {                            \
        BODY(x, weight, row_bytes, rows, cols, n_rows, out);                                       \
    }

#define MATVEC_KERNELS(SUFFIX, FMT)                                                                \
    MATVEC_KERNEL(matvec_decode_##SUFFIX, (matvec_lanes<FMT, 4, 1>))                               \
    MATVEC_KERNEL(matvec_batch_##SUFFIX, (matvec_lanes<FMT, 1, 8>))

MATVEC_KERNELS(f32, FMT_F32)
MATVEC_KERNELS(f16, FMT_F16)
MATVEC_KERNELS(bf16, FMT_BF16)
MATVEC_KERNEL(matvec_any_f32, matvec_any<FMT_F32>)
MATVEC_KERNEL(matvec_any_f16, matvec_any<FMT_F16>)
MATVEC_KERNEL(matvec_any_bf16, matvec_any<FMT_BF16>)
