// Matrix-vector products of block-quantized weights with int8 activations: out[b, r] =
// sum_c x[b, c] * W[r, c] for decode and verify-sized batches.
//
// quantize_q8 rounds each input row to int8 in blocks of 32 columns, keeping per block the scale d
// (max |x| / 127) and the exact sum of the block's x (for the formats with a min). The kernels then
// multiply four quants at a time with dp4a: a 4-bit weight costs about one instruction instead of
// the three or four of a float multiply-add, which is what keeps these kernels near the memory
// bandwidth rather than the issue rate. The error is the activations' rounding, at most d / 2 per
// element.
//
// A block of QMATVEC_WARPS warps computes ROWS weight rows. The warps split each row's groups of
// quant blocks between them (split-K) and add their partial sums in shared memory at the end.
// Input rows are taken TILE at a time; the weights of later tiles come from L1 or L2, so DRAM
// reads each weight byte once per call. One launch serves up to MAX_PROJECTIONS weights of the
// same format applied to the same input (a layer's q, k and v, or gate and up): a launch costs
// microseconds, as much as streaming a 1024-row projection.

#define QMATVEC_WARPS 4

// Rows of x as int8 blocks of 32: one group of 8 lanes per block, four columns per lane.
// `n_blocks` = n_rows * cols / 32.
extern "C" __global__ void quantize_q8(const float *x, u32 n_blocks, u32 *q, float2 *scales) {
    wait_for_previous_kernel();
    const u32 thread = blockIdx.x * blockDim.x + threadIdx.x;
    const bool live = thread / 8 < n_blocks;
    const float4 v = live ? ((const float4 *)x)[thread] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    store_q8_quad(v, thread, live, q, scales);
}

// How a warp's lanes share a format. A group is GROUP_COLS columns of a weight row.
//   load(row, cols, group, lane, raw)    the lane's weight bytes; false when it has none
//   load_block(row, block, lane, raw)    (Q4_K, Q6_K) the same of block `block`, as lane % 8 of it
//   load_x_block(q, scales, block, lane, x)   (Q4_K, Q6_K) the activations load_block's bytes meet
//   decode(raw, lane, dec)               weights as int8 words and float scales, registers only
//   load_x(q, scales, group, lane, x)    the lane's activations of one input row
//   dot(dec, x, lane)                    the lane's share of the row's dot product
template <int FMT> struct QLanes;

// Q4_K and Q5_K: a group is four blocks, eight lanes per block. Lane j of a block takes quant
// bytes 16j..16j+16 (half of a 32-byte run in Q4_K's tiles), whose low nibbles are 16
// columns of sub-block 2(j/2) and high nibbles the same 16 of sub-block 2(j/2) + 1.
struct KQuantDecoded {
    u32 low[4], high[4];
    float scale_low, scale_high, min_low, min_high;
};

struct KQuantActivations {
    uint4 low, high;
    float4 scales;  // (d, sum) of the low sub-block, then of the high one
};

// dp4a of unsigned bytes `a` (weights up to 255) by signed bytes `b`: Q4_K's high nibbles stay in
// place, as 16 q, which the signed form would read as negative.
__device__ __forceinline__ int dot4_unsigned_signed(u32 a, u32 b, int c) {
#if __CUDA_ARCH__ >= 610
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    for (int i = 0; i < 4; ++i) {
        c += (int)((a >> (8 * i)) & 0xffu) * (int)(signed char)(b >> (8 * i));
    }
    return c;
#endif
}

// A lane's scales and mins as floats, the high sub-block's scale times `high_unit` (the value of
// one step of its quants as the lane holds them). Only even lanes carry the min, so each
// sub-block's min term counts once.
__device__ __forceinline__ void k_quant_scales(uint4 head, int lane, float high_unit, KQuantDecoded &dec) {
    const float d = f16_bits_to_f32(head.x & 0xffff);
    const float dmin = lane % 2 == 0 ? f16_bits_to_f32(head.x >> 16) : 0.0f;
    u32 scales, mins;
    k_quant_pair(head, (lane % 8) / 2, scales, mins);
    dec.scale_low = d * (float)(scales & 0xff);
    dec.scale_high = d * high_unit * (float)(scales >> 8);
    dec.min_low = dmin * (float)(mins & 0xff);
    dec.min_high = dmin * (float)(mins >> 8);
}

struct KQuantLanes {
    static const u32 GROUP_COLS = 4 * QK_K;
    typedef KQuantDecoded Decoded;
    typedef KQuantActivations Activations;
    __device__ static u32 block_of(u32 group, int lane) { return group * 4 + lane / 8; }
    __device__ static void load_x(const u8 *q, const float2 *scales, u32 group, int lane, Activations &x) {
        load_x_block(q, scales, block_of(group, lane), lane, x);
    }
    __device__ static void load_x_block(const u8 *q, const float2 *scales, u32 block, int lane, Activations &x) {
        const u32 col = block * QK_K + 64 * ((lane % 8) / 2) + 16 * (lane % 2);
        x.low = *(const uint4 *)(q + col);
        x.high = *(const uint4 *)(q + col + 32);
        x.scales = *(const float4 *)(scales + (col / 64) * 2);
    }
    __device__ static float dot(const Decoded &w, const Activations &x, int) {
        const u32 low[4] = {x.low.x, x.low.y, x.low.z, x.low.w};
        const u32 high[4] = {x.high.x, x.high.y, x.high.z, x.high.w};
        int sum_low = 0, sum_high = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            sum_low = dot4_unsigned_signed(w.low[i], low[i], sum_low);
            sum_high = dot4_unsigned_signed(w.high[i], high[i], sum_high);
        }
        return w.scale_low * x.scales.x * (float)sum_low + w.scale_high * x.scales.z * (float)sum_high -
               (w.min_low * x.scales.y + w.min_high * x.scales.w);
    }
};

template <> struct QLanes<FMT_Q4_K> : KQuantLanes {
    struct Raw {
        uint4 head, qs;
    };
    __device__ static bool load(WeightRow row, u32 cols, u32 group, int lane, Raw &raw) {
        const u32 block = block_of(group, lane);
        if (block >= cols / QK_K) {
            return false;
        }
        load_block(row, block, lane, raw);
        return true;
    }
    __device__ static void load_block(WeightRow row, u32 block, int lane, Raw &raw) {
        raw.head = load_weights_16(tile_head<FMT_Q4_K>(row, block));
        raw.qs = load_weights_16(tile_quants<FMT_Q4_K>(row, block, (lane % 8) / 2, 16 * (lane % 2)));
    }
    // The high nibbles stay where they are, as 16 q: a shift less per word.
    __device__ static void decode(const Raw &raw, int lane, Decoded &dec) {
        k_quant_scales(raw.head, lane, 1.0f / 16.0f, dec);
        const u32 words[4] = {raw.qs.x, raw.qs.y, raw.qs.z, raw.qs.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            dec.low[i] = words[i] & 0x0f0f0f0fu;
            dec.high[i] = words[i] & 0xf0f0f0f0u;
        }
    }
};

// Q5_K adds the fifth bits: bit 2k + h of qh[l] for column 64k + 32h + l of the block. Lane j
// also loads qh[16(j % 2)..+16], the fifth bits of its 16 columns in every sub-block.
template <> struct QLanes<FMT_Q5_K> : KQuantLanes {
    struct Raw {
        uint4 head, qh, qs;
    };
    __device__ static bool load(WeightRow row, u32 cols, u32 group, int lane, Raw &raw) {
        const u32 block = block_of(group, lane);
        if (block >= cols / QK_K) {
            return false;
        }
        const u8 *bytes = row.base + (size_t)block * Q5_K_BYTES;
        raw.head = *(const uint4 *)bytes;
        raw.qh = *(const uint4 *)(bytes + 16 + 16 * (lane % 2));
        raw.qs = *(const uint4 *)(bytes + 48 + 16 * (lane % 8));
        return true;
    }
    __device__ static void decode(const Raw &raw, int lane, Decoded &dec) {
        k_quant_scales(raw.head, lane, 1.0f, dec);
        const int pair = (lane % 8) / 2;
        const u32 words[4] = {raw.qs.x, raw.qs.y, raw.qs.z, raw.qs.w};
        const u32 fifth[4] = {raw.qh.x, raw.qh.y, raw.qh.z, raw.qh.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            dec.low[i] = (words[i] & 0x0f0f0f0fu) | (((fifth[i] >> (2 * pair)) & 0x01010101u) << 4);
            dec.high[i] = ((words[i] >> 4) & 0x0f0f0f0fu) | (((fifth[i] >> (2 * pair + 1)) & 0x01010101u) << 4);
        }
    }
};

// Q6_K (tiled, see quant.cuh): a group is four blocks, eight lanes per block. Lane k of a
// block takes half h = k / 4 and columns l = 8(k % 4)..+8 of each quarter j of that half: ql bytes
// 64h + l (quarters 0 and 2) and 64h + 32 + l (1 and 3), qh bytes 32h + l, scale 8h + 2j + l / 16.
// The weights stay unsigned, q in 0..63; the activations carry -32 times the sum of each of their
// quarter's quants, so that one dp4a chain gives sum (q - 32) x without a byte-wise subtraction
// per weight word.
template <> struct QLanes<FMT_Q6_K> {
    static const u32 GROUP_COLS = 4 * QK_K;
    struct Raw {
        uint2 ql_even, ql_odd, qh, scales;
        u16 d;
    };
    struct Decoded {
        u32 q[4][2];
        float scale[4];
    };
    struct Activations {
        uint2 q[4];
        int offset[4];     // -32 sum of q[j]'s eight quants
        float4 scales[2];  // (d, sum) of the four quarters' 32-column blocks
    };
    __device__ static u32 block_of(u32 group, int lane) { return group * 4 + lane / 8; }
    __device__ static bool load(WeightRow row, u32 cols, u32 group, int lane, Raw &raw) {
        const u32 block = block_of(group, lane);
        const u32 n_blocks = cols / QK_K;
        if (block >= n_blocks) {
            return false;
        }
        load_block(row, block, lane, raw);
        return true;
    }
    __device__ static void load_block(WeightRow row, u32 block, int lane, Raw &raw) {
        const int half_index = (lane % 8) / 4;
        const int l = 8 * (lane % 4);
        raw.ql_even = load_weights_8(tile_quants<FMT_Q6_K>(row, block, 2 * half_index, l));
        raw.ql_odd = load_weights_8(tile_quants<FMT_Q6_K>(row, block, 2 * half_index + 1, l));
        raw.qh = load_weights_8(tile_quants<FMT_Q6_K>(row, block, 4 + half_index, l));
        raw.scales = load_weights_8(tile_head<FMT_Q6_K>(row, block) + 8 * half_index);
        raw.d = tile_d<FMT_Q6_K>(row, block);
    }
    __device__ static void decode(const Raw &raw, int lane, Decoded &dec) {
        const float d = f16_bits_to_f32(raw.d);
        const u32 qh[2] = {raw.qh.x, raw.qh.y};
        // Quarter j's scale is byte 2j + (lane % 4) / 2 of the eight: bytes 0, 2, 4, 6 or 1, 3, 5, 7.
        const u32 scales = __byte_perm(raw.scales.x, raw.scales.y, (lane % 4) / 2 ? 0x7531 : 0x6420);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint2 ql = j % 2 ? raw.ql_odd : raw.ql_even;
            const u32 low[2] = {ql.x, ql.y};
#pragma unroll
            for (int w = 0; w < 2; ++w) {
                const u32 nibbles = (low[w] >> (4 * (j / 2))) & 0x0f0f0f0fu;
                const u32 top = ((qh[w] >> (2 * j)) & 0x03030303u) << 4;
                dec.q[j][w] = nibbles | top;
            }
            dec.scale[j] = d * (float)(int)(signed char)(scales >> (8 * j));
        }
    }
    __device__ static void load_x(const u8 *q, const float2 *scales, u32 group, int lane, Activations &x) {
        load_x_block(q, scales, block_of(group, lane), lane, x);
    }
    __device__ static void load_x_block(const u8 *q, const float2 *scales, u32 block, int lane, Activations &x) {
        const u32 col = block * QK_K + 128 * ((lane % 8) / 4) + 8 * (lane % 4);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            x.q[j] = *(const uint2 *)(q + col + 32 * j);
            x.offset[j] = -32 * __dp4a((int)x.q[j].y, 0x01010101, __dp4a((int)x.q[j].x, 0x01010101, 0));
        }
        const float4 *quarter_scales = (const float4 *)(scales + col / Q8_BLOCK);
        x.scales[0] = quarter_scales[0];
        x.scales[1] = quarter_scales[1];
    }
    __device__ static float dot(const Decoded &w, const Activations &x, int) {
        const float d[4] = {x.scales[0].x, x.scales[0].z, x.scales[1].x, x.scales[1].z};
        float total = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int sum =
                __dp4a((int)w.q[j][1], (int)x.q[j].y, __dp4a((int)w.q[j][0], (int)x.q[j].x, x.offset[j]));
            total = fmaf(w.scale[j] * d[j], (float)sum, total);
        }
        return total;
    }
};

// Q8_0 (split rows, see quant.cuh): a group is sixteen blocks, two lanes per block, sixteen quants
// per lane.
template <> struct QLanes<FMT_Q8_0> {
    static const u32 GROUP_COLS = 16 * QK8_0;
    struct Raw {
        uint4 q;
        u16 d;
    };
    struct Decoded {
        uint4 q;
        float d;
    };
    struct Activations {
        uint4 q;
        float d;
    };
    __device__ static u32 block_of(u32 group, int lane) { return group * 16 + lane / 2; }
    __device__ static bool load(WeightRow row, u32 cols, u32 group, int lane, Raw &raw) {
        const u32 block = block_of(group, lane);
        const u32 n_blocks = cols / QK8_0;
        if (block >= n_blocks) {
            return false;
        }
        raw.q = *(const uint4 *)(row.base + (size_t)block * Q8_0_QUANT_BYTES + 16 * (lane % 2));
        raw.d = ((const u16 *)(row.base + (size_t)n_blocks * Q8_0_QUANT_BYTES))[block];
        return true;
    }
    __device__ static void decode(const Raw &raw, int, Decoded &dec) {
        dec.q = raw.q;
        dec.d = f16_bits_to_f32(raw.d);
    }
    __device__ static void load_x(const u8 *q, const float2 *scales, u32 group, int lane, Activations &x) {
        const u32 block = block_of(group, lane);
        x.q = *(const uint4 *)(q + block * QK8_0 + 16 * (lane % 2));
        x.d = scales[block].x;
    }
    __device__ static float dot(const Decoded &w, const Activations &x, int) {
        int sum = __dp4a((int)w.q.x, (int)x.q.x, 0);
        sum = __dp4a((int)w.q.y, (int)x.q.y, sum);
        sum = __dp4a((int)w.q.z, (int)x.q.z, sum);
        sum = __dp4a((int)w.q.w, (int)x.q.w, sum);
        return w.d * x.d * (float)sum;
    }
};

// x_q: n_rows x cols int8 activations, x_scales: n_rows x cols / 32 (d, sum) pairs.
template <int FMT, int ROWS, int TILE>
__device__ void matvec_q8(const u8 *x_q, const float2 *x_scales, const Projections &projections, u32 cols,
                          u32 n_rows) {
    typedef QLanes<FMT> L;
    const Projection projection = projection_of(projections, blockIdx.x);
    const u8 *weight = projection.weight;
    float *out = projection.out;
    const size_t row_bytes = projection.row_bytes;
    const u32 rows = projection.rows;
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const u32 row0 = projection.block * ROWS;
    const u32 n_groups = (cols + L::GROUP_COLS - 1) / L::GROUP_COLS;
    for (u32 first = 0; first < n_rows; first += TILE) {
        const u32 tile = min((u32)TILE, n_rows - first);
        float acc[ROWS][TILE];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
#pragma unroll
            for (int b = 0; b < TILE; ++b) {
                acc[r][b] = 0.0f;
            }
        }
        for (u32 group = warp; group < n_groups; group += QMATVEC_WARPS) {
            typename L::Raw raw[ROWS];
            bool has_block = true;
            // Their sums are never written for rows past the end (ROWS divides a tile's 16 rows).
            WeightRow weight_rows[ROWS];
            consecutive_rows<FMT>(weight, row_bytes, row0, 1, rows, weight_rows);
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                has_block = L::load(weight_rows[r], cols, group, lane, raw[r]);
            }
            // The weights are no kernel's output, so the first group's loads are in flight before
            // the wait for the kernel that wrote the activations (returning at once after that).
            wait_for_previous_kernel();
            if (!has_block) {
                continue;
            }
            if (TILE == 1) {
                // One input row: each row's weights are decoded just before their dot product,
                // so that no more than one row is held decoded and the decode kernel fits the
                // register budget of its launch bounds.
                typename L::Activations x;
                L::load_x(x_q, x_scales, group, lane, x);
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    typename L::Decoded dec;
                    L::decode(raw[r], lane, dec);
                    acc[r][0] += L::dot(dec, x, lane);
                }
                continue;
            }
            typename L::Decoded dec[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                L::decode(raw[r], lane, dec[r]);
            }
#pragma unroll
            for (int b = 0; b < TILE; ++b) {
                if (b < tile) {
                    const size_t input_row = first + b;
                    typename L::Activations x;
                    L::load_x(x_q + input_row * cols, x_scales + input_row * (cols / Q8_BLOCK), group, lane, x);
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) {
                        acc[r][b] += L::dot(dec[r], x, lane);
                    }
                }
            }
        }
        // Warps without a group have not waited yet.
        wait_for_previous_kernel();
        if (first + TILE >= n_rows) {
            let_next_kernel_start();
        }
        store_block_sums<QMATVEC_WARPS, ROWS, TILE>(acc, row0, rows, first, tile, out);
    }
}

#define MATVEC_Q8_KERNEL(NAME, FMT, ROWS, TILE, MIN_BLOCKS)                                       \
    extern "C" __global__ void __launch_bounds__(QMATVEC_WARPS *WARP_SIZE, MIN_BLOCKS)                \
        NAME(const u8 *x_q, const float2 *x_scales, const Projections projections, u32 cols, u32 n_rows) { \
        matvec_q8<FMT, ROWS, TILE>(x_q, x_scales, projections, cols, n_rows);                      \
    }

// Four weight rows per block up to four input rows, whose decoded weights and accumulators still
// leave registers for enough blocks per SM to keep the loads in flight; two rows against tiles of
// eight beyond. The Q8_0 and Q4_K decode kernels are held to 64 registers a thread, eight blocks
// per SM: a 4096-row projection's 1024 blocks then all start at once instead of in two waves (94
// registers, five blocks per SM, measured with Nsight Compute on an H200; 8B fwd1 2.89 -> 2.70
// ms). Q5_K and Q6_K, whose decoding needs more, spill at that bound (the LM head 146 -> 166 us)
// and take 158 registers unbounded (178 us), so they are held to five blocks per SM.
#define MATVEC_Q8_KERNELS(SUFFIX, FMT, DECODE_MIN_BLOCKS)                                          \
    MATVEC_Q8_KERNEL(matvec_q8_decode_##SUFFIX, FMT, 4, 1, DECODE_MIN_BLOCKS)                      \
    MATVEC_Q8_KERNEL(matvec_q8_pair_##SUFFIX, FMT, 4, 2, 1)                                        \
    MATVEC_Q8_KERNEL(matvec_q8_quad_##SUFFIX, FMT, 4, 4, 1)                                        \
    MATVEC_Q8_KERNEL(matvec_q8_batch_##SUFFIX, FMT, 2, 8, 1)

MATVEC_Q8_KERNELS(q8_0, FMT_Q8_0, 8)
MATVEC_Q8_KERNELS(q4_k, FMT_Q4_K, 8)
MATVEC_Q8_KERNELS(q5_k, FMT_Q5_K, 5)
MATVEC_Q8_KERNELS(q6_k, FMT_Q6_K, 5)

// A decode step's projections of two formats in one launch: blocks before `second_block` compute
// rows of FMT_A, four a block, the rest rows of FMT_B, two a block (Q4_K_M's q and k in Q4_K with
// a v in Q6_K). Each block takes one branch. Held to the Q4_K decode kernel's 64 registers, so
// that q and k keep its occupancy; two rows a block keep the Q6_K branch within them.
#define MATVEC_Q8_MIXED_KERNEL(NAME, FMT_A, FMT_B)                                                   \
    extern "C" __global__ void __launch_bounds__(QMATVEC_WARPS *WARP_SIZE, 8)                         \
        NAME(const u8 *x_q, const float2 *x_scales, const Projections projections, u32 cols, u32 n_rows, \
             u32 second_block) {                                                                     \
        if (blockIdx.x < second_block) {                                                             \
            matvec_q8<FMT_A, 4, 1>(x_q, x_scales, projections, cols, n_rows);                         \
        } else {                                                                                     \
            matvec_q8<FMT_B, 2, 1>(x_q, x_scales, projections, cols, n_rows);                         \
        }                                                                                            \
    }

MATVEC_Q8_MIXED_KERNEL(matvec_q8_decode_q4_k_q6_k, FMT_Q4_K, FMT_Q6_K)

// Decode (one input row) on the tiled formats, four weight rows a block as above, with each group
// of eight lanes on one row (lane / 8) of one block at a time, as lane % 8 of matvec_q8's lanes:
// the four rows' runs lie together in the tile, so that a load of the warp reads whole 128-byte
// lines of it, where matvec_q8's lanes, spread over four blocks of one row, read one sector in
// each of 16 lines (session 37: decode 4.5 % slower on tiles than on GGUF rows). A lane sums one
// row; the block's sums are gathered as matvec_q8's, the other rows' entries zero. Selected by
// CANOPY_CUDA_DECODE_LINES=1 (matmul.rs) until measured against matvec_q8.
template <int FMT>
__device__ void matvec_q8_lines(const u8 *x_q, const float2 *x_scales, const Projections &projections, u32 cols) {
    typedef QLanes<FMT> L;
    const int ROWS = 4;
    const Projection projection = projection_of(projections, blockIdx.x);
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const u32 row0 = projection.block * ROWS;
    const int own_row = lane / 8;
    // Past the end, the zero rows of the last tile; their sums are never written.
    const WeightRow row = weight_row<FMT>(projection.weight, projection.row_bytes, row0 + own_row);
    float acc = 0.0f;
#pragma unroll 4
    for (u32 block = warp; block < cols / QK_K; block += QMATVEC_WARPS) {
        typename L::Raw raw;
        L::load_block(row, block, lane, raw);
        wait_for_previous_kernel();
        typename L::Activations x;
        L::load_x_block(x_q, x_scales, block, lane, x);
        typename L::Decoded dec;
        L::decode(raw, lane, dec);
        acc += L::dot(dec, x, lane);
    }
    // Warps without a block have not waited yet.
    wait_for_previous_kernel();
    let_next_kernel_start();
    float sums[ROWS][1];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        sums[r][0] = r == own_row ? acc : 0.0f;
    }
    store_block_sums<QMATVEC_WARPS, ROWS, 1>(sums, row0, projection.rows, 0, 1, projection.out);
}

#define MATVEC_Q8_LINES_KERNEL(NAME, FMT_A, FMT_B)                                                    \
    extern "C" __global__ void __launch_bounds__(QMATVEC_WARPS *WARP_SIZE, 8)                         \
        NAME(const u8 *x_q, const float2 *x_scales, const Projections projections, u32 cols, u32 n_rows, \
             u32 second_block) {                                                                     \
        if (blockIdx.x < second_block) {                                                             \
            matvec_q8_lines<FMT_A>(x_q, x_scales, projections, cols);                                 \
        } else {                                                                                     \
            matvec_q8_lines<FMT_B>(x_q, x_scales, projections, cols);                                 \
        }                                                                                            \
    }

// Blocks before `second_block` take the first format, the rest the second (all four rows a block);
// one format alone passes the grid size.
MATVEC_Q8_LINES_KERNEL(matvec_q8_lines_q4_k, FMT_Q4_K, FMT_Q4_K)
MATVEC_Q8_LINES_KERNEL(matvec_q8_lines_q6_k, FMT_Q6_K, FMT_Q6_K)
MATVEC_Q8_LINES_KERNEL(matvec_q8_lines_q4_k_q6_k, FMT_Q4_K, FMT_Q6_K)
