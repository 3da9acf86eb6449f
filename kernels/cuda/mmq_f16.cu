#line 1 "mmq_f16.cu"
// Q4_K and Q6_K weights by f16 activations on the tensor cores, for verify batches of 5 to 32
// input rows: the same tiles, K splits and staging as mmq.cu (compiled after it, in one
// translation unit), with other lanes.
//
// The int8 kernels of mmq.cu spend most of their instructions on the float step that follows
// every 32-column integer sum (convert it, apply the weight and activation scales, subtract the
// min term), for every output. Here each lane decodes its weights to f16 once per group, with
// their scale and min applied, and mma.m16n8k16 accumulates in f32 over all of K, so there is no
// step per sub-block and output. The decode is exact up to the rounding of each weight to f16: a
// byte in the low mantissa bits of 1024 makes the half 1024 + b, and a high nibble left in bits
// 4..7 under the exponent of 64 the half 64 + q', whose mantissa step is 1/16; exact subtractions
// leave q' and the low nibble b - 16 q', and one fused multiply-add gives q s - m.
//
// K order: lane t takes columns 8t..8t+7 of every 32-column sub-block; step e (0, 1) of the
// sub-block multiplies its columns 8t + 4e..+3, the first two as A's and B's k pair 2t, 2t + 1,
// the last two as their pair 2t + 8, 2t + 9. A and B agree, so the product is the same, and each
// lane's weight bytes of a sub-block are consecutive (one 8-byte load per row for Q4_K's pair of
// sub-blocks).

// Rows of halves, padded so that the 16-byte fragment loads of a quarter warp (rows g and g + 1,
// lanes t = 0..3) fall in distinct banks: rows 64 bytes apart modulo 128.
#define MMH_STRIDE (MMQ_GROUP_COLS + 32)

// The f16 copy of the activations: n_rows x cols halves, each row divided by its scale
// (half_row_scale in quant.cuh).
struct HalfInput {
    const u16 *x;
    const float *scales;
};

template <int NT> struct MmhTile {
    u16 x[NT][MMH_STRIDE];
};

struct HalfActivations {
    typedef HalfInput Input;
    static const int GROUP_UNROLL = 2;
    // Two sets of warps, each taking half of every group's sub-blocks (k_part in mmq.cu): on its
    // own a set of four warps per 64-row tile left most of the SM's issue slots idle.
    static const int K_PARTS = 2;
    static const int PART_SUBS = MMQ_SUBS / K_PARTS;
    template <int NT> using Tile = MmhTile<NT>;

    __device__ static float row_scale(const Input &in, u32 n) { return in.scales[n]; }

    // Starts copying the activations of `group` that this thread's K part reads into `tile`;
    // rows past n_rows become zeros. A thread copies the same 16-byte chunk of every row it
    // takes, in a fixed number of passes.
    template <int NT>
    __device__ static void stage(Tile<NT> &tile, const Input &in, u32 cols, u32 n_rows, u32 group) {
        const int part_cols = MMQ_GROUP_COLS / K_PARTS;
        const int chunks_per_row = part_cols / 8;
        const int rows_per_pass = MMQ_THREADS / chunks_per_row;
        static_assert(NT % rows_per_pass == 0, "whole passes");
        const int part_thread = threadIdx.x % MMQ_THREADS;
        const int col = part_cols * k_part() + 8 * (part_thread % chunks_per_row);
        const u16 *src = in.x + group * MMQ_GROUP_COLS + col;
#pragma unroll
        for (int pass = 0; pass < NT / rows_per_pass; ++pass) {
            const u32 n = pass * rows_per_pass + part_thread / chunks_per_row;
            const bool live = n < n_rows;
            copy_async_16(&tile.x[n][col], src + (size_t)(live ? n : 0) * cols, live);
        }
    }

    // Each K part stages and reads its own columns, so its four warps wait only for each other.
    __device__ static void sync() {
#if __CUDA_ARCH__ >= 700
        asm volatile("bar.sync %0, %1;" ::"r"(1 + k_part()), "n"(MMQ_THREADS) : "memory");
#else
        __syncthreads();
#endif
    }
};

__device__ __forceinline__ __half2 half2_of(u32 bits) { return *(const __half2 *)&bits; }
__device__ __forceinline__ u32 bits_of(__half2 h) { return *(const u32 *)&h; }

// (a & mask) | bits as one LOP3: with immediates the compiler splits it into an AND and an OR, as
// an instruction takes one immediate; the registers here are loop-invariant.
__device__ __forceinline__ u32 masked_or(u32 a, u32 mask, u32 bits) {
#if __CUDA_ARCH__ >= 500
    u32 out;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(out) : "r"(a), "r"(mask), "r"(bits));
    return out;
#else
    return (a & mask) | bits;
#endif
}

// Both halves the low (high) half of `bits`.
__device__ __forceinline__ __half2 low_pair(u32 bits) { return half2_of(__byte_perm(bits, 0, 0x1010)); }
__device__ __forceinline__ __half2 high_pair(u32 bits) { return half2_of(__byte_perm(bits, 0, 0x3232)); }

// One sub-block for every n-fragment: w[e][r][k] holds the lane's f16 weights of step e, row r
// (g, g + 8), k pair k (columns 8t + 4e + 2k, +1).
template <int NF, int NT>
__device__ __forceinline__ void mma_sub_block(const u32 (&w)[2][2][2], const MmhTile<NT> &tile, int s, int g, int t,
                                              float (&acc)[NF][4]) {
#pragma unroll
    for (int f = 0; f < NF; ++f) {
        const uint4 b = *(const uint4 *)&tile.x[8 * f + g][32 * s + 8 * t];
        const u32 first[4] = {w[0][0][0], w[0][1][0], w[0][0][1], w[0][1][1]};
        mma_f16(acc[f], first, b.x, b.y);
        const u32 second[4] = {w[1][0][0], w[1][1][0], w[1][0][1], w[1][1][1]};
        mma_f16(acc[f], second, b.z, b.w);
    }
}

template <int FMT> struct MmhLanes;

// Q4_K (tiled, see quant.cuh): lane t's 8-byte load at byte 8t of run p holds its columns of
// sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles), as in mmq.cu; K part h takes the runs
// p = 2h, 2h + 1.
template <> struct MmhLanes<FMT_Q4_K> : HalfActivations {
    static const int FORMAT = FMT_Q4_K;
    static const int PART_PAIRS = PART_SUBS / 2;
    struct Raw {
        uint4 head;
        uint2 qs[PART_PAIRS];
    };
    __device__ static void load(WeightRow row, u32, u32 group, int t, Raw &raw) {
        raw.head = load_weights_16(tile_head<FMT_Q4_K>(row, group));
#pragma unroll
        for (int i = 0; i < PART_PAIRS; ++i) {
            raw.qs[i] = load_weights_8(tile_quants<FMT_Q4_K>(row, group, PART_PAIRS * k_part() + i, 8 * t));
        }
    }
    template <int NF, int NT>
    __device__ static void group(const Raw (&raw)[2], const Tile<NT> &tile, int g, int t, float (&acc)[NF][4]) {
        const __half2 low_base = half2_of(0x64006400u), high_base = half2_of(0x54005400u);
        const __half2 minus_sixteen = half2_of(0xcc00cc00u);
        // The four lanes of a quarter warp hold the same two rows: lane t decodes the scales and
        // mins of row t / 2 (g, g + 8) and pair t % 2 of the part, (sc, sc') and (m, m') of
        // sub-blocks 2p and 2p + 1 as halves 1024 + v, then times d and -dmin (one rounding
        // each), and the lanes exchange them.
        const uint4 head = t >= 2 ? raw[1].head : raw[0].head;
        u32 own_scales, own_mins;
        k_quant_pair(head, PART_PAIRS * k_part() + t % 2, own_scales, own_mins);
        const __half2 own_sc = __hsub2(half2_of(__byte_perm(own_scales, 0x64, 0x4140)), low_base);
        const __half2 own_mn = __hsub2(half2_of(__byte_perm(own_mins, 0x64, 0x4140)), low_base);
        const u32 own_scale = bits_of(__hmul2(own_sc, low_pair(head.x)));
        const u32 own_neg_min = bits_of(__hmul2(own_mn, high_pair(head.x ^ 0x80000000u)));
#pragma unroll
        for (int i = 0; i < PART_PAIRS; ++i) {
            const int p = PART_PAIRS * k_part() + i;
            u32 low[2][2][2], high[2][2][2];  // [e][r][k]
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const __half2 scale = half2_of(__shfl_sync(FULL_MASK, own_scale, 2 * r + i, 4));
                const __half2 neg_min = half2_of(__shfl_sync(FULL_MASK, own_neg_min, 2 * r + i, 4));
                const __half2 scale_low = __low2half2(scale), scale_high = __high2half2(scale);
                const __half2 min_low = __low2half2(neg_min), min_high = __high2half2(neg_min);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const u32 word = e ? raw[r].qs[i].y : raw[r].qs[i].x;
#pragma unroll
                    for (int k = 0; k < 2; ++k) {
                        // Bytes 2k and 2k + 1 of the word as halves 1024 + byte, and their high
                        // nibbles as 64 + q'; the low nibble q is then (1024 + byte) - 16 (64 + q'),
                        // exact in one fused multiply-add.
                        const u32 bytes = __byte_perm(word, 0x64, k ? 0x4342 : 0x4140);
                        const __half2 high_biased = half2_of(masked_or(bytes, 0x00f000f0u, 0x54005400u));
                        const __half2 q_low = __hfma2(high_biased, minus_sixteen, half2_of(bytes));
                        const __half2 q_high = __hsub2(high_biased, high_base);
                        low[e][r][k] = bits_of(__hfma2(q_low, scale_low, min_low));
                        high[e][r][k] = bits_of(__hfma2(q_high, scale_high, min_high));
                    }
                }
            }
            mma_sub_block<NF>(low, tile, 2 * p, g, t, acc);
            mma_sub_block<NF>(high, tile, 2 * p + 1, g, t, acc);
        }
    }
};

// Q6_K (tiled, see quant.cuh): sub-block s = 4h + j is quarter j of half h, columns
// 128h + 32j + l. Lane t's columns l = 8t..8t+7 take the low or high nibbles (j / 2) of ql bytes
// 64h + 32(j % 2) + l, bits 2j of qh bytes 32h + l, and scale 8h + 2j + t / 2 (one per 16
// columns, so one per lane and sub-block). K part h takes half h.
template <> struct MmhLanes<FMT_Q6_K> : HalfActivations {
    static const int FORMAT = FMT_Q6_K;
    struct Raw {
        uint2 ql[2];  // [j % 2]
        uint2 qh;
        uint2 scales;
        u16 d;
    };
    __device__ static void load(WeightRow row, u32 cols, u32 group, int t, Raw &raw) {
        const int h = k_part();
        raw.ql[0] = load_weights_8(tile_quants<FMT_Q6_K>(row, group, 2 * h, 8 * t));
        raw.ql[1] = load_weights_8(tile_quants<FMT_Q6_K>(row, group, 2 * h + 1, 8 * t));
        raw.qh = load_weights_8(tile_quants<FMT_Q6_K>(row, group, 4 + h, 8 * t));
        raw.scales = load_weights_8(tile_head<FMT_Q6_K>(row, group) + 8 * h);
        raw.d = tile_d<FMT_Q6_K>(row, group);
    }
    template <int NF, int NT>
    __device__ static void group(const Raw (&raw)[2], const Tile<NT> &tile, int g, int t, float (&acc)[NF][4]) {
        // 1024 + 32: the 6-bit q sits in the mantissa of 1024, and q - 32 is the weight's multiple.
        const __half2 base = half2_of(0x64206420u);
        // The lane's scales of sub-blocks j and j + 1 (even j) are bytes t / 2 and 2 + t / 2 of a
        // word: as unsigned bytes (the sign bit flipped, s + 128) into halves 1024 + s + 128, less
        // 1152, times d: d * s rounded once, as with floats.
        const u32 scale_selector = 0x4240u + 0x0101u * (t / 2);
        __half2 scales[2];  // [r]: sub-block j in the low half, j + 1 in the high one (j even)
#pragma unroll
        for (int j = 0; j < PART_SUBS; ++j) {
            u32 w[2][2][2];  // [e][r][k]
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (j % 2 == 0) {
                    const __half2 d = half2_of(__byte_perm(raw[r].d, 0, 0x1010));
                    const u32 signed_bytes = j / 2 ? raw[r].scales.y : raw[r].scales.x;
                    const u32 biased = __byte_perm(signed_bytes ^ 0x80808080u, 0x64, scale_selector);
                    scales[r] = __hmul2(__hsub2(half2_of(biased), half2_of(0x64806480u)), d);
                }
                const __half2 d = j % 2 ? __high2half2(scales[r]) : __low2half2(scales[r]);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const u32 ql = e ? raw[r].ql[j % 2].y : raw[r].ql[j % 2].x;
                    const u32 qh = e ? raw[r].qh.y : raw[r].qh.x;
                    const u32 q = ((ql >> (4 * (j / 2))) & 0x0f0f0f0fu) | (((qh >> (2 * j)) & 0x03030303u) << 4);
#pragma unroll
                    for (int k = 0; k < 2; ++k) {
                        const __half2 biased = half2_of(__byte_perm(q, 0x64, k ? 0x4342 : 0x4140));
                        w[e][r][k] = bits_of(__hmul2(__hsub2(biased, base), d));
                    }
                }
            }
            mma_sub_block<NF>(w, tile, PART_SUBS * k_part() + j, g, t, acc);
        }
    }
};

// Blocks of both K parts. Up to 24 input rows, three blocks an SM (85 registers; ptxas takes 80
// with a few spilled bytes): on an H100 fwd23 was 4 % faster than with the two blocks an SM of
// the mmq.cu kernels' register bound (128), and 3-5 % faster than before the K parts. At 32 rows
// two blocks an SM: unbounded, ptxas took 129 registers, one block an SM, and fwd32 8 % longer.
#define MMQ_F16_THREADS (MMQ_THREADS * HalfActivations::K_PARTS)
#define MMQ_F16_MIN_BLOCKS(NF) ((NF) <= 3 ? 3 : 2)

#define MMQ_F16_KERNEL(SUFFIX, FMT, NF, NT)                                                                     \
    extern "C" __global__ void __launch_bounds__(MMQ_F16_THREADS, MMQ_F16_MIN_BLOCKS(NF))                      \
        mmq_f16_##SUFFIX##_##NT(const u16 *x, const float *x_scales, const Projections projections, u32 cols,  \
                                u32 n_rows, float *partials, u32 *arrivals) {                                   \
        __shared__ __align__(16) HalfActivations::Tile<NT> tiles[2];                                            \
        mmq<MmhLanes<FMT>, NF>(HalfInput{x, x_scales}, projections, cols, n_rows, partials, arrivals, tiles);  \
    }

// Q4_K projections followed by Q6_K ones, from block `second_block` on: Q4_K_M files keep a layer's
// q and k in Q4_K but half of its v in Q6_K, and the 16 tiles of a 1024-row v launched alone made a
// sixth of a wave that cost as much as a 4096-row projection.
#define MMQ_F16_MIXED_KERNEL(NF, NT)                                                                           \
    extern "C" __global__ void __launch_bounds__(MMQ_F16_THREADS, MMQ_F16_MIN_BLOCKS(NF))                      \
        mmq_f16_q4_k_q6_k_##NT(const u16 *x, const float *x_scales, const Projections projections, u32 cols,  \
                               u32 n_rows, float *partials, u32 *arrivals, u32 second_block) {                  \
        __shared__ __align__(16) HalfActivations::Tile<NT> tiles[2];                                            \
        const HalfInput input{x, x_scales};                                                                     \
        if (blockIdx.x < second_block) {                                                                        \
            mmq<MmhLanes<FMT_Q4_K>, NF>(input, projections, cols, n_rows, partials, arrivals, tiles);          \
        } else {                                                                                                \
            mmq<MmhLanes<FMT_Q6_K>, NF>(input, projections, cols, n_rows, partials, arrivals, tiles);          \
        }                                                                                                       \
    }

// Input-row tiles of 8, 16, 24 and 32 (mmq.rs picks the smallest that holds the batch). The two
// f16 tiles of 48 or 64 rows would need 55 or 74 KB of shared memory, past the 48 KB a kernel
// gets without opting in; those batches stay on the int8 kernels.
#define MMQ_F16_KERNELS(SUFFIX, FMT)      \
    MMQ_F16_KERNEL(SUFFIX, FMT, 1, 8)     \
    MMQ_F16_KERNEL(SUFFIX, FMT, 2, 16)    \
    MMQ_F16_KERNEL(SUFFIX, FMT, 3, 24)    \
    MMQ_F16_KERNEL(SUFFIX, FMT, 4, 32)

MMQ_F16_KERNELS(q4_k, FMT_Q4_K)
MMQ_F16_KERNELS(q6_k, FMT_Q6_K)
MMQ_F16_MIXED_KERNEL(1, 8)
MMQ_F16_MIXED_KERNEL(2, 16)
MMQ_F16_MIXED_KERNEL(3, 24)
MMQ_F16_MIXED_KERNEL(4, 32)
