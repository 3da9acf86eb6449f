// Matrix products of block-quantized weights with int8 activations on the tensor cores, for
// verify-sized batches (5 to 64 input rows): out[b, r] = sum_c x[b, c] * W[r, c], reading each
// weight byte once and decoding it in registers (no f16 copy of the weights).
//
// The activations are quantize_q8's copy (matvec_quant.cu): per input row `cols` int8 values, and
// per 32 columns a float2 (d, sum of the block's floats). The math is the dp4a kernels', per 32
// columns: Q4_K and Q5_K d*sc * dx * sum(q*xq) - dmin*m * sum_x; Q8_0 d * dx * sum(q*xq); Q6_K
// the same per 16 columns with d*scale and q - 32. The integer sums come from mma.sync.
//
// A block of MMQ_WARPS warps computes MMQ_ROWS = 64 weight rows (one m16 fragment per warp) by NT
// input rows (NF n8 fragments), walking K in groups of 256 columns (a K-quant super-block, eight
// Q8_0 blocks). Each 32-column sub-block is one m16n8k32 step per n-fragment (two m16n8k16 steps
// for Q6_K, whose scales cover 16 columns, so that each integer sum has one scale); after each
// step every lane scales its int32 results into float accumulators. Weights go from global memory
// straight to registers, each lane loading the bytes of its own fragment rows (the next group's
// loads are issued before the current group's math); the activations of a group are shared by the
// warps through shared memory, copied by cp.async one group ahead.
//
// 64-row tiles make few blocks for small projections (a 1024-row k or v projection has 16), so
// the launcher may also split K over blockIdx.y: every split then writes its partial tile to
// `partials`, and the last split of a tile to arrive (counted in `arrivals`) sums them in split
// order, so the result does not depend on timing, writes the output and resets the counter.
//
// Fragments (PTX ISA 9.7.14.5.10 "Matrix Fragments for mma.m16n8k32" and 9.7.14.5.9 "... for
// mma.m16n8k16 with integer type", .s8), with groupID g = lane / 4 and threadID_in_group t =
// lane % 4; each .b32 register holds four int8 of consecutive k, the lowest k in the low byte:
//   m16n8k32 A (16 x 32, row): a0 row g, k 4t..4t+3; a1 row g+8, k 4t..; a2 row g, k 16+4t..;
//                               a3 row g+8, k 16+4t..
//            B (32 x 8, col):  b0 column g, k 4t..4t+3; b1 column g, k 16+4t..
//   m16n8k16 A (16 x 16, row): a0 row g, k 4t..4t+3; a1 row g+8, k 4t..
//            B (16 x 8, col):  b0 column g, k 4t..4t+3
//   C, D (16 x 8, s32), both:  c0, c1 row g, columns 2t, 2t+1; c2, c3 row g+8, columns 2t, 2t+1
// A row of A is a weight row, a column of B an input row. A dot product does not depend on the
// order of its terms, so k may stand for any column as long as A and B agree: in the m16n8k32
// formats lane t takes columns 8t..8t+7 of a sub-block (a0, a1 and b0 the first four, a2, a3 and
// b1 the last four), one 8-byte load per weight row and per input row. Q6_K keeps the order above:
// each k16 step must cover exactly the 16 columns of one scale.

#define MMQ_WARPS 4
#define MMQ_THREADS (MMQ_WARPS * WARP_SIZE)
#define MMQ_ROWS (16 * MMQ_WARPS)
#define MMQ_GROUP_COLS 256
#define MMQ_SUBS (MMQ_GROUP_COLS / Q8_BLOCK)

// Integer sums become floats by the 2^23 mantissa trick instead of the quarter-rate I2F unit:
// every mma starts from this accumulator, the bits of the float 1.5 * 2^23, and since the sums stay
// within +-2^22 (32 products of at most 128 * 127), the result read as a float is exactly
// 1.5 * 2^23 + sum.
#define MMQ_MAGIC 0x4B400000
#define MMQ_MAGIC_FLOAT 12582912.0f

__device__ __forceinline__ float magic_sum(int bits) { return __int_as_float(bits) - MMQ_MAGIC_FLOAT; }

// The kernels are launched on sm_80 and later (mma.sync on int8, cp.async). Without them the
// fallbacks compute the same with warp shuffles and plain copies, slowly: the CPU emulator
// (kernels/emulator) runs these, so that the kernels' indexing is tested without a GPU.
__device__ __forceinline__ void mma_k32(int (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    // Lane 4g + s holds columns 4s.. of rows g and g + 8 (a0, a1) and 16 + 4s.. (a2, a3); lane
    // 4n + s holds rows 4s.. and 16 + 4s.. of column n (b0, b1).
    const int lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, t = lane % 4;
    for (int s = 0; s < 4; ++s) {
        const int a_lane = 4 * g + s;
        const int a0 = __shfl_sync(FULL_MASK, (int)a[0], a_lane), a1 = __shfl_sync(FULL_MASK, (int)a[1], a_lane);
        const int a2 = __shfl_sync(FULL_MASK, (int)a[2], a_lane), a3 = __shfl_sync(FULL_MASK, (int)a[3], a_lane);
        const int even0 = __shfl_sync(FULL_MASK, (int)b0, 8 * t + s), even1 = __shfl_sync(FULL_MASK, (int)b1, 8 * t + s);
        const int odd0 = __shfl_sync(FULL_MASK, (int)b0, 8 * t + 4 + s), odd1 = __shfl_sync(FULL_MASK, (int)b1, 8 * t + 4 + s);
        d[0] = __dp4a(a2, even1, __dp4a(a0, even0, d[0]));
        d[1] = __dp4a(a2, odd1, __dp4a(a0, odd0, d[1]));
        d[2] = __dp4a(a3, even1, __dp4a(a1, even0, d[2]));
        d[3] = __dp4a(a3, odd1, __dp4a(a1, odd0, d[3]));
    }
#endif
}

__device__ __forceinline__ void mma_k16(int (&d)[4], u32 a0, u32 a1, u32 b0) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
#else
    const int lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, t = lane % 4;
    for (int s = 0; s < 4; ++s) {
        const int row0 = __shfl_sync(FULL_MASK, (int)a0, 4 * g + s), row8 = __shfl_sync(FULL_MASK, (int)a1, 4 * g + s);
        const int even = __shfl_sync(FULL_MASK, (int)b0, 8 * t + s), odd = __shfl_sync(FULL_MASK, (int)b0, 8 * t + 4 + s);
        d[0] = __dp4a(row0, even, d[0]);
        d[1] = __dp4a(row0, odd, d[1]);
        d[2] = __dp4a(row8, even, d[2]);
        d[3] = __dp4a(row8, odd, d[3]);
    }
#endif
}

// One group's activations in shared memory. Rows are STRIDE bytes, padded so that the lanes' loads
// of one n-fragment (lane g, t reads row g at 8t, or at 4t for Q6_K) fall in distinct banks: rows
// 8 banks apart for 8-byte loads (served a half-warp at a time: rows g..g+3, four lanes of two
// banks each), 4 banks apart for 4-byte ones (all eight rows at once). The scales are stored by sub-block, then input row, so
// that one 16-byte load gives a lane the (d, sum) of both its accumulator columns.
template <int NT, int STRIDE> struct MmqTile {
    u8 q[NT][STRIDE];
    float2 scales[MMQ_SUBS][NT];
};

// The int8 copy of the activations (matvec_quant.cu's quantize_q8) and how a block stages one
// group of it: the base of the int8 lanes below, whose STRIDE it takes.
struct Int8Input {
    const u8 *q;
    const float2 *scales;
};

template <int STRIDE> struct Int8Activations {
    typedef Int8Input Input;
    // Unrolled, the int8 steps spill.
    static const int GROUP_UNROLL = 1;
    template <int NT> using Tile = MmqTile<NT, STRIDE>;
    // Sets of MMQ_WARPS warps that share each group's sub-blocks (see mmq below).
    static const int K_PARTS = 1;
    // The one set of warps stages every column.
    __device__ static void sync() { __syncthreads(); }
    // What input row n's sums are multiplied by: the int8 copy is not scaled by rows.
    __device__ static float row_scale(const Input &, u32) { return 1.0f; }

    // Starts copying the activations of `group` into `tile`; rows past n_rows become zeros.
    template <int NT>
    __device__ static void stage(Tile<NT> &tile, const Input &x, u32 cols, u32 n_rows, u32 group) {
        const int chunks_per_row = MMQ_GROUP_COLS / 16;
        for (int i = threadIdx.x; i < NT * chunks_per_row; i += MMQ_THREADS) {
            const u32 n = i / chunks_per_row;
            const int chunk = i % chunks_per_row;
            const bool live = n < n_rows;
            const u8 *src = live ? x.q + (size_t)n * cols + group * MMQ_GROUP_COLS + 16 * chunk : x.q;
            copy_async_16(&tile.q[n][16 * chunk], src, live);
        }
        const u32 blocks_per_row = cols / Q8_BLOCK;
        for (int i = threadIdx.x; i < NT * MMQ_SUBS; i += MMQ_THREADS) {
            const u32 n = i / MMQ_SUBS;
            const int s = i % MMQ_SUBS;
            const bool live = n < n_rows;
            const float2 *src = live ? x.scales + (size_t)n * blocks_per_row + group * MMQ_SUBS + s : x.scales;
            copy_async_8(&tile.scales[s][n], src, live);
        }
    }
};

// The (d, sum) of input rows 8f + 2t and 8f + 2t + 1 at sub-block s: the columns of the lane's
// accumulators c0, c2 and c1, c3.
template <int NT, int STRIDE>
__device__ __forceinline__ float4 column_scales(const MmqTile<NT, STRIDE> &tile, int s, int f, int t) {
    return *(const float4 *)&tile.scales[s][8 * f + 2 * t];
}

// One m16n8k32 step of sub-block s for every n-fragment: a holds the warp's weights (lane t's
// columns 8t..8t+7), scale and min the lane's two rows' d*sc and dmin*m.
template <bool MIN, int NF, int NT, int STRIDE>
__device__ __forceinline__ void step_k32(const u32 (&a)[4], const float (&scale)[2], const float (&min)[2],
                                         const MmqTile<NT, STRIDE> &tile, int s, int g, int t, float (&acc)[NF][4]) {
#pragma unroll
    for (int f = 0; f < NF; ++f) {
        const uint2 b = *(const uint2 *)&tile.q[8 * f + g][Q8_BLOCK * s + 8 * t];
        int sum[4] = {MMQ_MAGIC, MMQ_MAGIC, MMQ_MAGIC, MMQ_MAGIC};
        mma_k32(sum, a, b.x, b.y);
        const float4 x = column_scales(tile, s, f, t);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = i / 2;
            const float dx = i % 2 ? x.z : x.x;
            float value = fmaf(scale[r] * dx, magic_sum(sum[i]), acc[f][i]);
            if (MIN) {
                value = fmaf(-min[r], i % 2 ? x.w : x.y, value);
            }
            acc[f][i] = value;
        }
    }
}

// How the lanes of a warp read a format. A lane's Raw holds its bytes of one weight row for one
// group; `group` runs the group's sub-blocks for the lane's two rows (g and g + 8).
template <int FMT> struct MmqLanes;

// The 6-bit scale and min of K-quant sub-block s from a Q4_K or Q5_K block's first 16 bytes.
__device__ __forceinline__ void k_quant_scale_min(uint4 head, int s, float &scale, float &min) {
    u32 sc, mn;
    if (s < 4) {
        sc = byte_of(head.y, s) & 63;
        mn = byte_of(head.z, s) & 63;
    } else {
        sc = (byte_of(head.w, s - 4) & 0x0f) | ((byte_of(head.y, s - 4) >> 6) << 4);
        mn = (byte_of(head.w, s - 4) >> 4) | ((byte_of(head.z, s - 4) >> 6) << 4);
    }
    scale = f16_bits_to_f32(head.x & 0xffff) * (float)sc;
    min = f16_bits_to_f32(head.x >> 16) * (float)mn;
}

// Q4_K (tiled, see quant.cuh): sub-blocks 2p and 2p + 1 share quant run p (low nibbles, then
// high), so lane t's 8-byte load at byte 8t of the run gives its columns of both.
template <> struct MmqLanes<FMT_Q4_K> : Int8Activations<MMQ_GROUP_COLS + 32> {
    static const int FORMAT = FMT_Q4_K;
    struct Raw {
        uint4 head;
        uint2 qs[4];
    };
    __device__ static void load(WeightRow row, u32, u32 group, int t, Raw &raw) {
        raw.head = *(const uint4 *)tile_head<FMT_Q4_K>(row, group);
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            raw.qs[p] = *(const uint2 *)tile_quants<FMT_Q4_K>(row, group, p, 8 * t);
        }
    }
    template <int NF, int NT>
    __device__ static void group(const Raw (&raw)[2], const Tile<NT> &tile, int g, int t,
                                 float (&acc)[NF][4]) {
#pragma unroll
        for (int s = 0; s < MMQ_SUBS; ++s) {
            float scale[2], min[2];
            u32 a[4];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                k_quant_scale_min(raw[r].head, s, scale[r], min[r]);
                const uint2 qs = raw[r].qs[s / 2];
                a[r] = (qs.x >> (4 * (s % 2))) & 0x0f0f0f0fu;
                a[2 + r] = (qs.y >> (4 * (s % 2))) & 0x0f0f0f0fu;
            }
            step_k32<true>(a, scale, min, tile, s, g, t, acc);
        }
    }
};

// Q5_K: as Q4_K, plus the fifth bits: bit s of qh[l] for column l of sub-block s, so lane t's
// 8-byte load of qh at 8t serves every sub-block.
template <> struct MmqLanes<FMT_Q5_K> : Int8Activations<MMQ_GROUP_COLS + 32> {
    static const int FORMAT = FMT_Q5_K;
    struct Raw {
        uint4 head;
        uint2 qh;
        uint2 qs[4];
    };
    __device__ static void load(WeightRow row, u32, u32 group, int t, Raw &raw) {
        const u8 *block = row.base + (size_t)group * Q5_K_BYTES;
        raw.head = *(const uint4 *)block;
        raw.qh = *(const uint2 *)(block + 16 + 8 * t);
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            raw.qs[p] = *(const uint2 *)(block + 48 + 32 * p + 8 * t);
        }
    }
    template <int NF, int NT>
    __device__ static void group(const Raw (&raw)[2], const Tile<NT> &tile, int g, int t,
                                 float (&acc)[NF][4]) {
#pragma unroll
        for (int s = 0; s < MMQ_SUBS; ++s) {
            float scale[2], min[2];
            u32 a[4];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                k_quant_scale_min(raw[r].head, s, scale[r], min[r]);
                const uint2 qs = raw[r].qs[s / 2];
                const uint2 qh = raw[r].qh;
                a[r] = ((qs.x >> (4 * (s % 2))) & 0x0f0f0f0fu) | (((qh.x >> s) & 0x01010101u) << 4);
                a[2 + r] = ((qs.y >> (4 * (s % 2))) & 0x0f0f0f0fu) | (((qh.y >> s) & 0x01010101u) << 4);
            }
            step_k32<true>(a, scale, min, tile, s, g, t, acc);
        }
    }
};

// Q8_0 (split rows, see quant.cuh): a group is eight blocks; lane t loads quants 8t..8t+8 of each
// and the eight blocks' scales d (16 bytes of the row's tail).
template <> struct MmqLanes<FMT_Q8_0> : Int8Activations<MMQ_GROUP_COLS + 32> {
    static const int FORMAT = FMT_Q8_0;
    struct Raw {
        uint2 q[MMQ_SUBS];
        uint4 d;
    };
    __device__ static void load(WeightRow row, u32 cols, u32 group, int t, Raw &raw) {
        const u32 first = group * MMQ_SUBS;
#pragma unroll
        for (int s = 0; s < MMQ_SUBS; ++s) {
            raw.q[s] = *(const uint2 *)(row.base + (size_t)(first + s) * Q8_0_QUANT_BYTES + 8 * t);
        }
        raw.d = *(const uint4 *)(row.base + (size_t)(cols / QK8_0) * Q8_0_QUANT_BYTES + 2 * first);
    }
    template <int NF, int NT>
    __device__ static void group(const Raw (&raw)[2], const Tile<NT> &tile, int g, int t,
                                 float (&acc)[NF][4]) {
        const float no_min[2] = {0.0f, 0.0f};
#pragma unroll
        for (int s = 0; s < MMQ_SUBS; ++s) {
            float scale[2];
            u32 a[4];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const u32 d_pair[4] = {raw[r].d.x, raw[r].d.y, raw[r].d.z, raw[r].d.w};
                scale[r] = f16_bits_to_f32((d_pair[s / 2] >> (16 * (s % 2))) & 0xffff);
                a[r] = raw[r].q[s].x;
                a[2 + r] = raw[r].q[s].y;
            }
            step_k32<false>(a, scale, no_min, tile, s, g, t, acc);
        }
    }
};

// Q6_K (tiled, see quant.cuh): sub-block s = 4h + j is quarter j of half h (columns
// 128h + 32j + l), its 16-column halves e take scale 8h + 2j + e. Lane t's columns of half e are
// l = 16e + 4t..+4: the low or high nibbles (j / 2) of ql bytes 64h + 32(j % 2) + l and bits 2j of
// qh bytes 32h + l, so four ql words and two qh words per half h serve all its quarters.
template <> struct MmqLanes<FMT_Q6_K> : Int8Activations<MMQ_GROUP_COLS + 16> {
    static const int FORMAT = FMT_Q6_K;
    struct Raw {
        u32 ql[2][2][2];  // [h][j % 2][e]
        u32 qh[2][2];     // [h][e]
        uint4 scales;
        u16 d;
    };
    __device__ static void load(WeightRow row, u32 cols, u32 group, int t, Raw &raw) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                raw.ql[h][0][e] = *(const u32 *)tile_quants<FMT_Q6_K>(row, group, 2 * h, 16 * e + 4 * t);
                raw.ql[h][1][e] = *(const u32 *)tile_quants<FMT_Q6_K>(row, group, 2 * h + 1, 16 * e + 4 * t);
                raw.qh[h][e] = *(const u32 *)tile_quants<FMT_Q6_K>(row, group, 4 + h, 16 * e + 4 * t);
            }
        }
        raw.scales = *(const uint4 *)tile_head<FMT_Q6_K>(row, group);
        raw.d = tile_d<FMT_Q6_K>(row, group);
    }
    template <int NF, int NT>
    __device__ static void group(const Raw (&raw)[2], const Tile<NT> &tile, int g, int t,
                                 float (&acc)[NF][4]) {
        float d[2];
        u32 scale_words[2][4];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            d[r] = f16_bits_to_f32(raw[r].d);
            scale_words[r][0] = raw[r].scales.x;
            scale_words[r][1] = raw[r].scales.y;
            scale_words[r][2] = raw[r].scales.z;
            scale_words[r][3] = raw[r].scales.w;
        }
#pragma unroll
        for (int s = 0; s < MMQ_SUBS; ++s) {
            const int h = s / 4, j = s % 4;
            u32 a[2][2];        // [e][r]
            float scale[2][2];  // [e][r]
#pragma unroll
            for (int e = 0; e < 2; ++e) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const u32 nibbles = (raw[r].ql[h][j % 2][e] >> (4 * (j / 2))) & 0x0f0f0f0fu;
                    const u32 top = ((raw[r].qh[h][e] >> (2 * j)) & 0x03030303u) << 4;
                    a[e][r] = __vsub4(nibbles | top, 0x20202020u);
                    const int index = 8 * h + 2 * j + e;
                    scale[e][r] = d[r] * (float)(signed char)byte_of(scale_words[r][index / 4], index % 4);
                }
            }
#pragma unroll
            for (int f = 0; f < NF; ++f) {
                const u8 *x = &tile.q[8 * f + g][Q8_BLOCK * s + 4 * t];
                int low[4] = {MMQ_MAGIC, MMQ_MAGIC, MMQ_MAGIC, MMQ_MAGIC};
                int high[4] = {MMQ_MAGIC, MMQ_MAGIC, MMQ_MAGIC, MMQ_MAGIC};
                mma_k16(low, a[0][0], a[0][1], *(const u32 *)x);
                mma_k16(high, a[1][0], a[1][1], *(const u32 *)(x + 16));
                const float4 xs = column_scales(tile, s, f, t);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int r = i / 2;
                    const float w = fmaf(scale[0][r], magic_sum(low[i]), scale[1][r] * magic_sum(high[i]));
                    acc[f][i] = fmaf(i % 2 ? xs.z : xs.x, w, acc[f][i]);
                }
            }
        }
    }
};

// Which set of MMQ_WARPS warps the thread is in: with L::K_PARTS sets, set p takes part p of every
// group's sub-blocks (the lanes' load and group pick them), and the sets' sums are added at the end.
// More warps then share the same weight tile: more loads in flight and shorter dependency chains
// per SM, where a launch has too few tiles to fill the device (a 4096-row projection has 64).
__device__ __forceinline__ int k_part() { return threadIdx.x / MMQ_THREADS; }

// Adds the accumulators of every K part to the first part's, in part order, through `exchange`
// (shared memory the K loop is done with, room for (PARTS - 1) * MMQ_THREADS * NF * 4 floats).
template <int PARTS, int NF>
__device__ __forceinline__ void add_k_parts(float (&acc)[NF][4], float *exchange) {
    const int part = k_part(), slot = threadIdx.x % MMQ_THREADS;
    __syncthreads();
    if (part > 0) {
#pragma unroll
        for (int f = 0; f < NF; ++f) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                exchange[(((part - 1) * NF + f) * 4 + i) * MMQ_THREADS + slot] = acc[f][i];
            }
        }
    }
    __syncthreads();
    if (part == 0) {
        for (int other = 0; other < PARTS - 1; ++other) {
#pragma unroll
            for (int f = 0; f < NF; ++f) {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    acc[f][i] += exchange[((other * NF + f) * 4 + i) * MMQ_THREADS + slot];
                }
            }
        }
    }
}

// The tiled product for lanes L (a format and a kind of activations, here or in mmq_f16.cu), in
// blocks of MMQ_THREADS * L::K_PARTS threads: n_rows <= NT = 8 NF input rows, cols a multiple of
// MMQ_GROUP_COLS. With gridDim.y > 1, `partials` holds gridDim.x * gridDim.y tiles of
// MMQ_ROWS * NT floats and `arrivals` gridDim.x zeros. `tiles`, the activations' double buffer in
// shared memory, comes from the kernel, so that a kernel of two formats has one.
template <typename L, int NF>
__device__ void mmq(const typename L::Input &x, const Projections &projections, u32 cols, u32 n_rows,
                    float *partials, u32 *arrivals, typename L::template Tile<8 * NF> (&tiles)[2]) {
    const int NT = 8 * NF;
    const int THREADS = MMQ_THREADS * L::K_PARTS;
    const Projection projection = projection_of(projections, blockIdx.x);
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE % MMQ_WARPS;
    const int g = lane / 4, t = lane % 4;
    const u32 tile_row0 = projection.block * MMQ_ROWS;
    // The lane's rows g and g + 8 of the warp's 16 (one tile of the tiled formats); their sums
    // are never written for rows past the end.
    WeightRow rows[2];
    consecutive_rows<L::FORMAT>(projection.weight, projection.row_bytes, tile_row0 + 16 * warp + g, 8, projection.rows,
                                rows);
    const u32 n_groups = cols / MMQ_GROUP_COLS;
    const u32 per_split = (n_groups + gridDim.y - 1) / gridDim.y;
    const u32 begin = min(n_groups, blockIdx.y * per_split);
    const u32 end = min(n_groups, begin + per_split);

    float acc[NF][4] = {};
    typename L::Raw raw[2];
    // The weights are no kernel's output: their first loads go out before the wait, while the
    // kernel before this one may still run.
    if (begin < end) {
        L::load(rows[0], cols, begin, t, raw[0]);
        L::load(rows[1], cols, begin, t, raw[1]);
    }
    wait_for_previous_kernel();
    if (begin < end) {
        L::template stage<NT>(tiles[0], x, cols, n_rows, begin);
    }
    // Lanes whose group step is short take two steps an iteration: the next group's weights then
    // land in the registers the step after uses, instead of being copied there.
#pragma unroll(L::GROUP_UNROLL)
    for (u32 group = begin; group < end; ++group) {
        const int current = (group - begin) % 2;
        // The current group's activations have arrived for every thread, and every warp that
        // reads the other buffer is done with it, as the next group's copies overwrite it
        // (L::sync: the block, or the K part that stages and reads the same columns).
        copy_async_wait();
        L::sync();
        if (group + 1 < end) {
            L::template stage<NT>(tiles[current ^ 1], x, cols, n_rows, group + 1);
        }
        // The last group loads itself again rather than branch: the copies below stay unconditional.
        const u32 upcoming = min(group + 1, end - 1);
        typename L::Raw next[2];
        L::load(rows[0], cols, upcoming, t, next[0]);
        L::load(rows[1], cols, upcoming, t, next[1]);
        L::template group<NF>(raw, tiles[current], g, t, acc);
        raw[0] = next[0];
        raw[1] = next[1];
    }
    if (L::K_PARTS > 1) {
        static_assert(sizeof(tiles) >= (L::K_PARTS - 1) * MMQ_THREADS * NF * 4 * sizeof(float), "exchange room");
        add_k_parts<L::K_PARTS>(acc, (float *)tiles);
    }

    // Accumulator i of fragment f: tile row 16 warp + g + 8 (i / 2), input row 8f + 2t + i % 2.
#pragma unroll
    for (int f = 0; f < NF; ++f) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const u32 n = 8 * f + 2 * t + i;
            const float row_scale = n < n_rows ? L::row_scale(x, n) : 1.0f;
            acc[f][i] *= row_scale;
            acc[f][2 + i] *= row_scale;
        }
    }
    const u32 local_row = 16 * warp + g;
    // The first set writes the sums; every thread takes part in the barriers below.
    const bool writer = k_part() == 0;
    if (gridDim.y == 1) {
        if (!writer) {
            return;
        }
#pragma unroll
        for (int f = 0; f < NF; ++f) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const u32 row = tile_row0 + local_row + 8 * (i / 2);
                const u32 n = 8 * f + 2 * t + i % 2;
                if (row < projection.rows && n < n_rows) {
                    projection.out[(size_t)n * projection.rows + row] = acc[f][i];
                }
            }
        }
        return;
    }
    // Partial tiles are stored input row by input row, so that the final sum reads and writes
    // consecutive weight rows.
    const size_t tile_floats = MMQ_ROWS * NT;
    float *tile_partials = partials + (size_t)blockIdx.x * gridDim.y * tile_floats;
    float *mine = tile_partials + blockIdx.y * tile_floats;
    if (writer) {
#pragma unroll
        for (int f = 0; f < NF; ++f) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                mine[(8 * f + 2 * t + i % 2) * MMQ_ROWS + local_row + 8 * (i / 2)] = acc[f][i];
            }
        }
    }
    // Each thread's partials reach the device before its block's arrival is counted.
    __threadfence();
    __syncthreads();
    __shared__ bool last;
    if (threadIdx.x == 0) {
        last = atomicAdd(&arrivals[blockIdx.x], 1u) == gridDim.y - 1;
    }
    __syncthreads();
    if (!last) {
        return;
    }
    __threadfence();
    for (int i = threadIdx.x; i < MMQ_ROWS * NT; i += THREADS) {
        const u32 n = i / MMQ_ROWS;
        const u32 row = tile_row0 + i % MMQ_ROWS;
        if (row < projection.rows && n < n_rows) {
            float total = 0.0f;
            for (u32 split = 0; split < gridDim.y; ++split) {
                // Past L1, which may hold none of the other blocks' writes.
                total += __ldcg(tile_partials + split * tile_floats + i);
            }
            projection.out[(size_t)n * projection.rows + row] = total;
        }
    }
    // Ready for the next launch (or graph replay) that uses the counters.
    if (threadIdx.x == 0) {
        arrivals[blockIdx.x] = 0;
    }
}

// Up to 24 input rows the kernels fit in 128 registers without spilling, four blocks an SM: twice
// the warps to hide latency with, for kernels that are far from both the issue and the memory limit.
#define MMQ_MIN_BLOCKS(NF) ((NF) <= 3 ? 4 : 1)

#define MMQ_KERNEL(SUFFIX, FMT, NF, NT)                                                                         \
    extern "C" __global__ void __launch_bounds__(MMQ_THREADS, MMQ_MIN_BLOCKS(NF))                              \
        mmq_##SUFFIX##_##NT(const u8 *x_q, const float2 *x_scales, const Projections projections, u32 cols,    \
                            u32 n_rows, float *partials, u32 *arrivals) {                                       \
        __shared__ __align__(16) MmqLanes<FMT>::Tile<NT> tiles[2];                                              \
        mmq<MmqLanes<FMT>, NF>(Int8Input{x_q, x_scales}, projections, cols, n_rows, partials, arrivals, tiles); \
    }

// Input-row tiles of 8, 16, 24, 32, 48 and 64 (mmq.rs picks the smallest that holds the batch).
#define MMQ_KERNELS(SUFFIX, FMT)      \
    MMQ_KERNEL(SUFFIX, FMT, 1, 8)     \
    MMQ_KERNEL(SUFFIX, FMT, 2, 16)    \
    MMQ_KERNEL(SUFFIX, FMT, 3, 24)    \
    MMQ_KERNEL(SUFFIX, FMT, 4, 32)    \
    MMQ_KERNEL(SUFFIX, FMT, 6, 48)    \
    MMQ_KERNEL(SUFFIX, FMT, 8, 64)

MMQ_KERNELS(q8_0, FMT_Q8_0)
MMQ_KERNELS(q4_k, FMT_Q4_K)
MMQ_KERNELS(q5_k, FMT_Q5_K)
MMQ_KERNELS(q6_k, FMT_Q6_K)
