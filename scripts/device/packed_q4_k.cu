// An experiment, compiled after mmq.cu and mmq_f16.cu by packed_q4_k.py: the 24-row f16 Q4_K
// product on a copy of the weights repacked so that a lane's loads are its own mma fragments,
// against mmq_f16_q4_k_24 on the GGUF layout, both behind the same plain signature.
//
// Packed layout: tiles of 16 rows (one warp's m16 fragment) by one 256-column group, 2304 bytes
// (16 blocks of 144), tile (w, group) at (w * groups + group) * 2304. A tile holds the 16 rows'
// 16-byte heads (d, dmin, the 12 bytes of 6-bit scales and mins) in row order, then for each K
// part h (0, 1) and lane (g, t) 32 bytes: the lane's 8 bytes (columns 8t..8t+7 of sub-blocks 2p
// and 2p + 1, as mmq_f16.cu reads them) of row g at pair p = 2h, of row g + 8 at 2h, of row g at
// 2h + 1, of row g + 8 at 2h + 1. A lane loads its head and two 16-byte words a group, all at
// constant offsets from one address.
//
// The `mask` variant also stores each 4 bytes of quants as bytes 0, 2, 1, 3, so that one LOP3
// (not a PRMT, whose selector ptxas keeps copying into a register) spreads two columns' bytes
// under the exponent of 1024. The `wide` variant stores a K part's first words of every lane, then
// their second words (lane (g, t)'s word i at 256 + 1024 h + 512 i + 16 lane), so that each of a
// warp's two quant loads reads 512 consecutive bytes instead of every other 16 of 1 KB.
#define PACKED_TILE_BYTES 2304

template <bool MASK, bool WIDE> struct PackedQ4K : HalfActivations {
    struct Raw {
        uint4 head;
        uint4 qs[2];  // [i]: rows g (x, y) and g + 8 (z, w) at pair 2 k_part() + i
    };
    __device__ static void load(const u8 *warp_tiles, u32 group, int lane, int g, int t, Raw &raw) {
        const u8 *tile = warp_tiles + (size_t)group * PACKED_TILE_BYTES;
        raw.head = load_weights_16(tile + 16 * (g + 8 * (t / 2)));
        const u8 *quants = tile + 256 + 1024 * k_part() + (WIDE ? 16 : 32) * lane;
        raw.qs[0] = load_weights_16(quants);
        raw.qs[1] = load_weights_16(quants + (WIDE ? 512 : 16));
    }
    // mmq_f16.cu's Q4_K group, with the lane's own head and both rows' words from its loads.
    template <int NF, int NT>
    __device__ static void group(const Raw &raw, const Tile<NT> &tile, int g, int t, float (&acc)[NF][4]) {
        const __half2 low_base = half2_of(0x64006400u), high_base = half2_of(0x54005400u);
        const __half2 minus_sixteen = half2_of(0xcc00cc00u);
        u32 own_scales, own_mins;
        k_quant_pair(raw.head, PART_SUBS / 2 * k_part() + t % 2, own_scales, own_mins);
        const __half2 own_sc = __hsub2(half2_of(__byte_perm(own_scales, 0x64, 0x4140)), low_base);
        const __half2 own_mn = __hsub2(half2_of(__byte_perm(own_mins, 0x64, 0x4140)), low_base);
        const u32 own_scale = bits_of(__hmul2(own_sc, low_pair(raw.head.x)));
        const u32 own_neg_min = bits_of(__hmul2(own_mn, high_pair(raw.head.x ^ 0x80000000u)));
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int p = 2 * k_part() + i;
            u32 low[2][2][2], high[2][2][2];  // [e][r][k]
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const __half2 scale = half2_of(__shfl_sync(FULL_MASK, own_scale, 2 * r + i, 4));
                const __half2 neg_min = half2_of(__shfl_sync(FULL_MASK, own_neg_min, 2 * r + i, 4));
                const __half2 scale_low = __low2half2(scale), scale_high = __high2half2(scale);
                const __half2 min_low = __low2half2(neg_min), min_high = __high2half2(neg_min);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const u32 word = r ? (e ? raw.qs[i].w : raw.qs[i].z) : (e ? raw.qs[i].y : raw.qs[i].x);
#pragma unroll
                    for (int k = 0; k < 2; ++k) {
                        const u32 spread = k ? word >> 8 : word;
                        const u32 bytes = MASK ? masked_or(spread, 0x00ff00ffu, 0x64006400u)
                                               : __byte_perm(word, 0x64, k ? 0x4342 : 0x4140);
                        const __half2 high_biased =
                            half2_of(masked_or(MASK ? spread : bytes, 0x00f000f0u, 0x54005400u));
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

// mmq<>'s loop on the packed tiles (rows a multiple of 64), with its end (mmq_store): K split over
// blockIdx.y as there.
template <bool MASK, bool WIDE, int NF>
__device__ void mmq_packed(const HalfInput &x, const u8 *weight, u32 rows, float *out, u32 cols, u32 n_rows,
                           float *partials, u32 *arrivals, HalfActivations::Tile<8 * NF> (&tiles)[2]) {
    typedef PackedQ4K<MASK, WIDE> L;
    const int NT = 8 * NF;
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE % MMQ_WARPS;
    const int g = lane / 4, t = lane % 4;
    const u32 n_groups = cols / MMQ_GROUP_COLS;
    const u8 *warp_tiles = weight + (size_t)(blockIdx.x * MMQ_WARPS + warp) * n_groups * PACKED_TILE_BYTES;
    const u32 per_split = (n_groups + gridDim.y - 1) / gridDim.y;
    const u32 begin = min(n_groups, blockIdx.y * per_split);
    const u32 end = min(n_groups, begin + per_split);
    float acc[NF][4] = {};
    typename L::Raw raw;
    if (begin < end) {
        L::load(warp_tiles, begin, lane, g, t, raw);
    }
    wait_for_previous_kernel();
    if (begin < end) {
        L::template stage<NT>(tiles[0], x, cols, n_rows, begin);
    }
    const u32 steps = end - begin;
#pragma unroll 2
    for (u32 step = 0; step < steps; ++step) {
        const u32 group = begin + step;
        const int current = step % 2;
        copy_async_wait();
        L::sync();
        if (group + 1 < end) {
            L::template stage<NT>(tiles[current ^ 1], x, cols, n_rows, group + 1);
        }
        typename L::Raw next;
        L::load(warp_tiles, min(group + 1, end - 1), lane, g, t, next);
        L::template group<NF>(raw, tiles[current], g, t, acc);
        raw = next;
    }
    const Projection projection = {weight, out, (size_t)(cols / QK_K) * Q4_K_BYTES, rows, blockIdx.x};
    mmq_store<L, NF>(acc, x, projection, n_rows, partials, arrivals, (float *)tiles);
}

#define PACKED_KERNEL(NAME, MASK, WIDE)                                                                            \
    extern "C" __global__ void __launch_bounds__(MMQ_F16_THREADS, MMQ_F16_MIN_BLOCKS(3))                   \
        NAME(const u16 *x, const float *x_scales, const u8 *weight, u32 rows, float *out, u32 cols, u32 n_rows, \
             float *partials, u32 *arrivals) {                                                                 \
        __shared__ __align__(16) HalfActivations::Tile<24> tiles[2];                                           \
        mmq_packed<MASK, WIDE, 3>(HalfInput{x, x_scales}, weight, rows, out, cols, n_rows, partials, arrivals, tiles); \
    }

PACKED_KERNEL(packed_q4_k_24, false, false)
PACKED_KERNEL(packed_mask_q4_k_24, true, false)
PACKED_KERNEL(packed_wide_q4_k_24, false, true)

// mmq_f16_q4_k_24 with one projection, behind the same signature.
extern "C" __global__ void __launch_bounds__(MMQ_F16_THREADS, MMQ_F16_MIN_BLOCKS(3))
    gguf_q4_k_24(const u16 *x, const float *x_scales, const u8 *weight, u32 rows, float *out, u32 cols, u32 n_rows,
                 float *partials, u32 *arrivals) {
    __shared__ __align__(16) HalfActivations::Tile<24> tiles[2];
    Projections projections = {};
    projections.weight[0] = weight;
    projections.out[0] = out;
    projections.row_bytes[0] = (size_t)(cols / QK_K) * Q4_K_BYTES;
    projections.rows[0] = rows;
    projections.count = 1;
    mmq<MmhLanes<FMT_Q4_K>, 3>(HalfInput{x, x_scales}, projections, cols, n_rows, partials, arrivals, tiles);
}
