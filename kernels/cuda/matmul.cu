// Matrix-vector products for decode and small batches: out[b, r] = sum_c x[b, c] * W[r, c].
//
// A block of MATVEC_WARPS warps computes ROWS weight rows for TILE input rows. The warps split the
// row's groups of quant blocks between them (split-K) and add their partial sums in shared memory
// at the end, so even the 1024-row K/V projections keep every SM busy. Within a warp the lanes
// share each group, so every load instruction covers consecutive bytes (16-byte loads where the
// format's alignment allows).
//
// Decode steps (one input row) use ROWS = 4, TILE = 1: each run of activations a lane loads is
// applied to four weight rows, which keeps the L1 traffic of the f32 activations below the DRAM
// traffic of the weights. Batches use ROWS = 1, TILE = 8 and decode each weight once per tile.
//
// Quants become floats without the integer-to-float unit, which runs at a quarter of the FP32 rate
// on Hopper: a byte b placed in the low mantissa bits of 2^23 reads as 2^23 + b, and one
// subtraction (that also removes the format's zero point) leaves the exact value.

#define MATVEC_WARPS 4
#define MAGIC 8388608.0f

// Byte `index` of `word` as a float, minus `bias` (2^23 plus the zero point).
__device__ __forceinline__ float byte_value(u32 word, int index, float bias) {
    return __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7440u | index)) - bias;
}

__device__ __forceinline__ u32 byte_of(u32 word, int index) { return (word >> (8 * index)) & 0xffu; }

// How a warp's lanes share a format. A lane covers RUNS runs of RUN consecutive columns of one
// group; within a run the weights are scale * q - min (min only where HAS_MIN).
//   groups(cols)                      groups per row
//   load(row, cols, group, lane, raw) fetch the lane's bytes; false when it has none in the group
//   decode(raw, lane, q, scale, min)  registers only
//   column(group, lane, run)          first column of a run
template <int FMT> struct Lanes;

// Q4_K (144-byte blocks, 16-byte aligned): a group is four blocks, eight lanes per block. Lane j of
// a block loads the 16-byte header and quant bytes 16j..16j+16, whose low nibbles are 16 elements
// of sub-block 2(j/2) and high nibbles the same 16 of sub-block 2(j/2) + 1.
template <> struct Lanes<FMT_Q4_K> {
    static const int RUN = 16;
    static const int RUNS = 2;
    static const bool HAS_MIN = true;
    struct Raw {
        uint4 head;
        uint4 qs;
    };
    __device__ static u32 groups(u32 cols) { return (cols / QK_K + 3) / 4; }
    __device__ static bool load(const u8 *row, u32 cols, u32 group, int lane, Raw &raw) {
        const u32 block_index = group * 4 + lane / 8;
        if (block_index >= cols / QK_K) {
            return false;
        }
        const u8 *block = row + (size_t)block_index * Q4_K_BYTES;
        raw.head = *(const uint4 *)block;
        raw.qs = *(const uint4 *)(block + 16 + 16 * (lane % 8));
        return true;
    }
    // The scales and mins of the lane's two sub-blocks, from the block header (shared with Q5_K).
    __device__ static void scales(const uint4 &head, int lane, float *scale, float *min) {
        const float d = f16_bits_to_f32(head.x & 0xffff);
        const float dmin = f16_bits_to_f32(head.x >> 16);
        const int pair = (lane % 8) / 2;
#pragma unroll
        for (int half_index = 0; half_index < 2; ++half_index) {
            // The 6-bit scale and min of sub-block s from the 12 packed bytes (head.y, z, w).
            const int s = 2 * pair + half_index;
            u32 sc, mn;
            if (s < 4) {
                sc = byte_of(head.y, s) & 63;
                mn = byte_of(head.z, s) & 63;
            } else {
                const int t = s - 4;
                sc = (byte_of(head.w, t) & 0x0f) | ((byte_of(head.y, t) >> 6) << 4);
                mn = (byte_of(head.w, t) >> 4) | ((byte_of(head.z, t) >> 6) << 4);
            }
            scale[half_index] = d * (float)sc;
            min[half_index] = dmin * (float)mn;
        }
    }
    __device__ static void decode(const Raw &raw, int lane, float *q, float *scale, float *min) {
        scales(raw.head, lane, scale, min);
        const u32 words[4] = {raw.qs.x, raw.qs.y, raw.qs.z, raw.qs.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const u32 low = words[w] & 0x0f0f0f0fu;
            const u32 high = (words[w] >> 4) & 0x0f0f0f0fu;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                q[4 * w + i] = byte_value(low, i, MAGIC);
                q[RUN + 4 * w + i] = byte_value(high, i, MAGIC);
            }
        }
    }
    __device__ static u32 column(u32 group, int lane, int run) {
        return (group * 4 + lane / 8) * QK_K + 64 * ((lane % 8) / 2) + 16 * (lane % 2) + 32 * run;
    }
};

// Q5_K (176-byte blocks, 16-byte aligned): laid out as Q4_K plus 32 bytes of fifth bits before
// the quants. Lane j of a block also loads the 16 fifth-bit bytes of its 16 positions; bits 2k and
// 2k + 1 (k = j/2) complete the low and high nibbles.
template <> struct Lanes<FMT_Q5_K> {
    static const int RUN = 16;
    static const int RUNS = 2;
    static const bool HAS_MIN = true;
    struct Raw {
        uint4 head;
        uint4 qh;
        uint4 qs;
    };
    __device__ static u32 groups(u32 cols) { return (cols / QK_K + 3) / 4; }
    __device__ static bool load(const u8 *row, u32 cols, u32 group, int lane, Raw &raw) {
        const u32 block_index = group * 4 + lane / 8;
        if (block_index >= cols / QK_K) {
            return false;
        }
        const u8 *block = row + (size_t)block_index * Q5_K_BYTES;
        raw.head = *(const uint4 *)block;
        raw.qh = *(const uint4 *)(block + 16 + 16 * (lane % 2));
        raw.qs = *(const uint4 *)(block + 48 + 16 * (lane % 8));
        return true;
    }
    __device__ static void decode(const Raw &raw, int lane, float *q, float *scale, float *min) {
        Lanes<FMT_Q4_K>::scales(raw.head, lane, scale, min);
        const int pair = (lane % 8) / 2;
        const u32 words[4] = {raw.qs.x, raw.qs.y, raw.qs.z, raw.qs.w};
        const u32 bits[4] = {raw.qh.x, raw.qh.y, raw.qh.z, raw.qh.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const u32 low = (words[w] & 0x0f0f0f0fu) | (((bits[w] >> (2 * pair)) & 0x01010101u) << 4);
            const u32 high = ((words[w] >> 4) & 0x0f0f0f0fu) | (((bits[w] >> (2 * pair + 1)) & 0x01010101u) << 4);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                q[4 * w + i] = byte_value(low, i, MAGIC);
                q[RUN + 4 * w + i] = byte_value(high, i, MAGIC);
            }
        }
    }
    __device__ static u32 column(u32 group, int lane, int run) { return Lanes<FMT_Q4_K>::column(group, lane, run); }
};

// Q6_K (210-byte blocks, 2-byte aligned): a group is one block; lanes of half h = l/16 take
// positions p = 2(l%16), p+1 of each quarter of that half, reading ql and qh as 16-bit loads.
template <> struct Lanes<FMT_Q6_K> {
    static const int RUN = 2;
    static const int RUNS = 4;
    static const bool HAS_MIN = false;
    struct Raw {
        u32 low_even, low_odd, high;
        float d;
        int scales[4];
    };
    __device__ static u32 groups(u32 cols) { return cols / QK_K; }
    __device__ static bool load(const u8 *row, u32, u32 group, int lane, Raw &raw) {
        const u8 *block = row + (size_t)group * Q6_K_BYTES;
        const int half_index = lane / 16;
        const int p = 2 * (lane % 16);
        raw.low_even = *(const u16 *)(block + 64 * half_index + p);
        raw.low_odd = *(const u16 *)(block + 64 * half_index + 32 + p);
        raw.high = *(const u16 *)(block + 128 + 32 * half_index + p);
        raw.d = f16_bits_to_f32(*(const u16 *)(block + 208));
        const signed char *scales = (const signed char *)(block + 192) + 8 * half_index + p / 16;
#pragma unroll
        for (int quarter = 0; quarter < 4; ++quarter) {
            raw.scales[quarter] = scales[2 * quarter];
        }
        return true;
    }
    __device__ static void decode(const Raw &raw, int, float *q, float *scale, float *) {
#pragma unroll
        for (int quarter = 0; quarter < 4; ++quarter) {
            scale[quarter] = raw.d * (float)raw.scales[quarter];
            const u32 low = quarter % 2 ? raw.low_odd : raw.low_even;
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const u32 nibble = (low >> (8 * t + 4 * (quarter / 2))) & 0x0f;
                const u32 top = (raw.high >> (8 * t + 2 * quarter)) & 3;
                q[2 * quarter + t] = __uint_as_float(0x4B000000u | nibble | (top << 4)) - (MAGIC + 32.0f);
            }
        }
    }
    __device__ static u32 column(u32 group, int lane, int run) {
        return group * QK_K + 128 * (lane / 16) + 32 * run + 2 * (lane % 16);
    }
};

// Q8_0 (34-byte blocks, 2-byte aligned): a group is eight blocks; four lanes share a block, each
// taking eight consecutive quants as four 16-bit loads.
template <> struct Lanes<FMT_Q8_0> {
    static const int RUN = 8;
    static const int RUNS = 1;
    static const bool HAS_MIN = false;
    struct Raw {
        u32 words[2];
        float d;
    };
    __device__ static u32 groups(u32 cols) { return (cols / QK8_0 + 7) / 8; }
    __device__ static bool load(const u8 *row, u32 cols, u32 group, int lane, Raw &raw) {
        const u32 block_index = group * 8 + lane / 4;
        if (block_index >= cols / QK8_0) {
            return false;
        }
        const u8 *block = row + (size_t)block_index * Q8_0_BYTES;
        raw.d = f16_bits_to_f32(*(const u16 *)block);
        const u16 *qs = (const u16 *)(block + 2 + 8 * (lane % 4));
        raw.words[0] = (u32)qs[0] | ((u32)qs[1] << 16);
        raw.words[1] = (u32)qs[2] | ((u32)qs[3] << 16);
        return true;
    }
    // Flipping the sign bit turns a signed byte q into the unsigned q + 128.
    __device__ static void decode(const Raw &raw, int, float *q, float *scale, float *) {
        scale[0] = raw.d;
#pragma unroll
        for (int w = 0; w < 2; ++w) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                q[4 * w + i] = byte_value(raw.words[w] ^ 0x80808080u, i, MAGIC + 128.0f);
            }
        }
    }
    __device__ static u32 column(u32 group, int lane, int) {
        return (group * 8 + lane / 4) * QK8_0 + 8 * (lane % 4);
    }
};

// Element-wise formats: each lane loads 16 bytes of consecutive elements (VALUES of them); the
// launcher only picks these kernels when a row is a whole number of such loads.
template <int FMT, int VALUES> struct PlainLanes {
    static const int RUN = VALUES;
    static const int RUNS = 1;
    static const bool HAS_MIN = false;
    struct Raw {
        uint4 bytes;
    };
    __device__ static u32 groups(u32 cols) { return (cols / VALUES + WARP_SIZE - 1) / WARP_SIZE; }
    __device__ static bool load(const u8 *row, u32 cols, u32 group, int lane, Raw &raw) {
        const u32 col = column(group, lane, 0);
        if (col >= cols) {
            return false;
        }
        raw.bytes = *(const uint4 *)(row + (size_t)col * (16 / VALUES));
        return true;
    }
    __device__ static u32 column(u32 group, int lane, int) { return (group * WARP_SIZE + lane) * VALUES; }
};

template <> struct Lanes<FMT_F32> : PlainLanes<FMT_F32, 4> {
    __device__ static void decode(const Raw &raw, int, float *q, float *scale, float *) {
        scale[0] = 1.0f;
        q[0] = __uint_as_float(raw.bytes.x);
        q[1] = __uint_as_float(raw.bytes.y);
        q[2] = __uint_as_float(raw.bytes.z);
        q[3] = __uint_as_float(raw.bytes.w);
    }
};

template <> struct Lanes<FMT_F16> : PlainLanes<FMT_F16, 8> {
    __device__ static void decode(const Raw &raw, int, float *q, float *scale, float *) {
        scale[0] = 1.0f;
        const u32 words[4] = {raw.bytes.x, raw.bytes.y, raw.bytes.z, raw.bytes.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            q[2 * w] = f16_bits_to_f32(words[w] & 0xffff);
            q[2 * w + 1] = f16_bits_to_f32(words[w] >> 16);
        }
    }
};

template <> struct Lanes<FMT_BF16> : PlainLanes<FMT_BF16, 8> {
    __device__ static void decode(const Raw &raw, int, float *q, float *scale, float *) {
        scale[0] = 1.0f;
        const u32 words[4] = {raw.bytes.x, raw.bytes.y, raw.bytes.z, raw.bytes.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            q[2 * w] = __uint_as_float(words[w] << 16);
            q[2 * w + 1] = __uint_as_float(words[w] & 0xffff0000u);
        }
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

template <> __device__ __forceinline__ void load_run<16>(const float *src, float *dst) {
    load_run<8>(src, dst);
    load_run<8>(src + 8, dst + 8);
}

// The lane's activations of one input row, and their sum per run where the format has a min.
template <typename L>
__device__ __forceinline__ void load_activations(const float *x, const u32 *col, float *xv, float *xsum) {
#pragma unroll
    for (int k = 0; k < L::RUNS; ++k) {
        load_run<L::RUN>(x + col[k], xv + k * L::RUN);
        if (L::HAS_MIN) {
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < L::RUN; ++i) {
                sum += xv[k * L::RUN + i];
            }
            xsum[k] = sum;
        }
    }
}

// sum over runs of scale * (q . x) - min * sum(x): one multiply-add per weight.
template <typename L>
__device__ __forceinline__ float dot_runs(const float *q, const float *scale, const float *min,
                                          const float *xv, const float *xsum) {
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < L::RUNS; ++k) {
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < L::RUN; ++i) {
            sum = fmaf(q[k * L::RUN + i], xv[k * L::RUN + i], sum);
        }
        total = fmaf(scale[k], sum, total);
        if (L::HAS_MIN) {
            total = fmaf(-min[k], xsum[k], total);
        }
    }
    return total;
}

template <int FMT, int ROWS, int TILE>
__device__ void matvec_lanes(const float *x, const u8 *weight, size_t row_bytes, u32 rows, u32 cols,
                             u32 n_rows, float *out) {
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
        u32 col[L::RUNS];
#pragma unroll
        for (int k = 0; k < L::RUNS; ++k) {
            col[k] = L::column(group, lane, k);
        }
        float q[L::RUNS * L::RUN], scale[L::RUNS], min[L::RUNS];
        float xv[L::RUNS * L::RUN], xsum[L::RUNS];
        if (ROWS == 1) {
            // One weight row, decoded once and applied to every input row of the tile.
            L::decode(raw[0], lane, q, scale, min);
#pragma unroll
            for (int b = 0; b < TILE; ++b) {
                if (b < tile) {
                    load_activations<L>(xs + (size_t)b * cols, col, xv, xsum);
                    acc[0][b] += dot_runs<L>(q, scale, min, xv, xsum);
                }
            }
        } else {
            // Activations loaded once per input row and applied to every weight row.
#pragma unroll
            for (int b = 0; b < TILE; ++b) {
                if (b < tile) {
                    load_activations<L>(xs + (size_t)b * cols, col, xv, xsum);
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) {
                        L::decode(raw[r], lane, q, scale, min);
                        acc[r][b] += dot_runs<L>(q, scale, min, xv, xsum);
                    }
                }
            }
        }
    }
    __shared__ float partial[MATVEC_WARPS][ROWS * TILE];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int b = 0; b < TILE; ++b) {
            const float sum = warp_sum(acc[r][b]);
            if (lane == 0) {
                partial[warp][r * TILE + b] = sum;
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < ROWS * TILE; i += blockDim.x) {
        const u32 row = row0 + i / TILE;
        const u32 b = i % TILE;
        if (row < rows && b < tile) {
            float total = 0.0f;
#pragma unroll
            for (int w = 0; w < MATVEC_WARPS; ++w) {
                total += partial[w][i];
            }
            out[(size_t)(first + b) * rows + row] = total;
        }
    }
}

// Element-wise formats whose rows are not a whole number of 16-byte loads: one element per lane
// at a time, one warp per weight row, up to 8 input rows per pass.
template <int FMT>
__device__ void matvec_any(const float *x, const u8 *weight, size_t row_bytes, u32 rows, u32 cols,
                           u32 n_rows, float *out) {
    typedef Format<FMT> F;
    const u32 row = blockIdx.x * MATVEC_WARPS + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    const u32 first = blockIdx.y * 8;
    if (row >= rows) {
        return;
    }
    const u32 tile = min(8u, n_rows - first);
    const u8 *w = weight + (size_t)row * row_bytes;
    const float *xs = x + (size_t)first * cols;
    float acc[8];
#pragma unroll
    for (int b = 0; b < 8; ++b) {
        acc[b] = 0.0f;
    }
    for (u32 col = lane; col < cols; col += WARP_SIZE) {
        float value;
        F::decode(w, col, &value);
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
MATVEC_KERNELS(q8_0, FMT_Q8_0)
MATVEC_KERNELS(q4_k, FMT_Q4_K)
MATVEC_KERNELS(q5_k, FMT_Q5_K)
MATVEC_KERNELS(q6_k, FMT_Q6_K)
MATVEC_KERNEL(matvec_any_f32, matvec_any<FMT_F32>)
MATVEC_KERNEL(matvec_any_f16, matvec_any<FMT_F16>)
MATVEC_KERNEL(matvec_any_bf16, matvec_any<FMT_BF16>)
