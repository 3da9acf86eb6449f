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
// The `wide` variant stores a K part's first words of every lane, then their second words (lane
// (g, t)'s word i at 256 + 1024 h + 512 i + 16 lane), so that each of a warp's two quant loads
// reads 512 consecutive bytes instead of every other 16 of 1 KB. (A third variant measured in
// session 36, the quant bytes stored as 0, 2, 1, 3 for a LOP3 spread, gained nothing.)
#define PACKED_TILE_BYTES 2304

template <bool WIDE> struct PackedQ4K : HalfActivations {
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
        q4_k_group<NF>(
            raw.head,
            [&](int r, int i, int e) { return r ? (e ? raw.qs[i].w : raw.qs[i].z) : (e ? raw.qs[i].y : raw.qs[i].x); },
            tile, g, t, acc);
    }
};

// mmq<>'s loop on the packed tiles (rows a multiple of 64), with its end (mmq_store): K split over
// blockIdx.y as there.
template <bool WIDE, int NF>
__device__ void mmq_packed(const HalfInput &x, const u8 *weight, u32 rows, float *out, u32 cols, u32 n_rows,
                           float *partials, u32 *arrivals, HalfActivations::Tile<8 * NF> (&tiles)[2]) {
    typedef PackedQ4K<WIDE> L;
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

#define PACKED_KERNEL(NAME, WIDE)                                                                            \
    extern "C" __global__ void __launch_bounds__(MMQ_F16_THREADS, MMQ_F16_MIN_BLOCKS(3))                   \
        NAME(const u16 *x, const float *x_scales, const u8 *weight, u32 rows, float *out, u32 cols, u32 n_rows, \
             float *partials, u32 *arrivals) {                                                                 \
        __shared__ __align__(16) HalfActivations::Tile<24> tiles[2];                                           \
        mmq_packed<WIDE, 3>(HalfInput{x, x_scales}, weight, rows, out, cols, n_rows, partials, arrivals, tiles); \
    }

PACKED_KERNEL(packed_q4_k_24, false)
PACKED_KERNEL(packed_wide_q4_k_24, true)

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
