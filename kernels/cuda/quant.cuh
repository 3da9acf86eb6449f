// Decoding of the device weight formats in chunks of consecutive elements, shared by embed, the
// float matrix-vector kernels and the GEMM's f16 decode. A chunk never straddles a scale, so each
// decodes with one scale (and min) lookup. Rows are GGUF blocks, except Q8_0, whose rows hold
// every block's quant bytes first and then every block's f16 scale d, and Q4_K and Q6_K, whose
// rows are interleaved in tiles of 16 (below; layout.rs). The end of the file holds what the two
// int8 matmul files share: their launch parameters.

#define FMT_F32 0
#define FMT_F16 1
#define FMT_BF16 2
#define FMT_Q8_0 3
#define FMT_Q4_K 4
#define FMT_Q6_K 5
#define FMT_Q5_K 6

#define QK8_0 32
#define QK_K 256
#define Q4_K_BYTES 144
#define Q5_K_BYTES 176
#define Q6_K_BYTES 210

// Q4_K and Q6_K rows lie in tiles of 16 rows by one block (256 columns), a tile row's tiles in
// column order. A tile holds each part of its blocks for the 16 rows in turn: Q6_K first the f16
// scales d; then the 16-byte heads (Q4_K: d, dmin and the packed scales and mins; Q6_K: the 16
// signed scales); then each 32-byte run of quant bytes (Q4_K: run p holds sub-blocks 2p and 2p +
// 1; Q6_K: ql in runs 0..3, qh in 4 and 5). The tensor-core kernels' lanes, which take 8 bytes of
// a run for each of two rows g and g + 8, then read 256 consecutive bytes a warp load instead of
// 8 rows' scattered sectors.
#define TILE_ROWS 16
#define TILE_HEAD_BYTES 16
#define TILE_RUN_BYTES 32

template <int FMT> struct Tiling {
    static const bool TILED = false;
    static const int D_BYTES = 0;
    static const int TILE_BYTES = 0;
};
template <> struct Tiling<FMT_Q4_K> {
    static const bool TILED = true;
    static const int D_BYTES = 0;
    static const int TILE_BYTES = TILE_ROWS * Q4_K_BYTES;
};
template <> struct Tiling<FMT_Q6_K> {
    static const bool TILED = true;
    static const int D_BYTES = 2;
    static const int TILE_BYTES = TILE_ROWS * Q6_K_BYTES;
};

// A weight row as the kernels address it: `base` is its first byte, except in the tiled formats,
// where it is the row's head in the first tile of its tile row, `runs` its first quant run there
// and `d` its f16 scale there (Q6_K).
struct WeightRow {
    const u8 *base;
    const u8 *runs;
    const u8 *d;
};

template <int FMT> __device__ __forceinline__ WeightRow weight_row(const u8 *weight, size_t row_bytes, u32 row) {
    typedef Tiling<FMT> T;
    if (T::TILED) {
        const u32 in_tile = row % TILE_ROWS;
        const u8 *tile = weight + (size_t)(row - in_tile) * row_bytes;
        const u8 *heads = tile + TILE_ROWS * T::D_BYTES;
        return {heads + TILE_HEAD_BYTES * in_tile, heads + TILE_ROWS * TILE_HEAD_BYTES + TILE_RUN_BYTES * in_tile,
                tile + T::D_BYTES * in_tile};
    }
    const u8 *start = weight + (size_t)row * row_bytes;
    return {start, start, start};
}

// Weight rows first + step * i (i < N) of a weight of `rows` rows: rows past the end repeat the
// last one, except in the tiled formats, where they are zero rows of the last tile; there the
// caller passes rows of one tile, which then lie at constant offsets from the first.
template <int FMT, int N>
__device__ __forceinline__ void consecutive_rows(const u8 *weight, size_t row_bytes, u32 first, u32 step, u32 rows,
                                                 WeightRow (&out)[N]) {
    typedef Tiling<FMT> T;
    const WeightRow first_row = weight_row<FMT>(weight, row_bytes, T::TILED ? first : min(first, rows - 1));
#pragma unroll
    for (int i = 0; i < N; ++i) {
        out[i] = T::TILED ? WeightRow{first_row.base + TILE_HEAD_BYTES * step * i,
                                      first_row.runs + TILE_RUN_BYTES * step * i, first_row.d + T::D_BYTES * step * i}
                          : weight_row<FMT>(weight, row_bytes, min(first + step * i, rows - 1));
    }
}

// In a tiled row: the head of block `block`, byte `byte` of its quant run `run` (the GGUF block's
// quant bytes 32 run..32 run + 31; a read stays within the run) and its d.
template <int FMT> __device__ __forceinline__ const u8 *tile_head(WeightRow row, u32 block) {
    return row.base + (size_t)block * Tiling<FMT>::TILE_BYTES;
}
template <int FMT> __device__ __forceinline__ const u8 *tile_quants(WeightRow row, u32 block, int run, int byte) {
    return row.runs + (size_t)block * Tiling<FMT>::TILE_BYTES + TILE_ROWS * TILE_RUN_BYTES * run + byte;
}
template <int FMT> __device__ __forceinline__ u16 tile_d(WeightRow row, u32 block) {
    return *(const u16 *)(row.d + (size_t)block * Tiling<FMT>::TILE_BYTES);
}

template <int FMT> struct Format;

template <> struct Format<FMT_F32> {
    static const int CHUNK = 1;
    __device__ static void decode(WeightRow row, u32 cols, u32 chunk, float *out) {
        out[0] = ((const float *)row.base)[chunk];
    }
};

template <> struct Format<FMT_F16> {
    static const int CHUNK = 1;
    __device__ static void decode(WeightRow row, u32 cols, u32 chunk, float *out) {
        out[0] = f16_bits_to_f32(((const u16 *)row.base)[chunk]);
    }
};

template <> struct Format<FMT_BF16> {
    static const int CHUNK = 1;
    __device__ static void decode(WeightRow row, u32 cols, u32 chunk, float *out) {
        out[0] = bf16_bits_to_f32(((const u16 *)row.base)[chunk]);
    }
};

// Q8_0: 32 signed bytes per block, the blocks' f16 scales after the row's quants; element = d * q.
#define Q8_0_QUANT_BYTES 32
template <> struct Format<FMT_Q8_0> {
    static const int CHUNK = 8;
    __device__ static void decode(WeightRow row, u32 cols, u32 chunk, float *out) {
        const u32 block = chunk / 4;
        const float d = f16_bits_to_f32(((const u16 *)(row.base + (size_t)(cols / QK8_0) * Q8_0_QUANT_BYTES))[block]);
        const signed char *q = (const signed char *)(row.base + (size_t)block * Q8_0_QUANT_BYTES) + (chunk % 4) * CHUNK;
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            out[i] = d * (float)q[i];
        }
    }
};

// The 6-bit scale and min of Q4_K sub-block `sub` (0..8) from the 12 packed bytes.
__device__ __forceinline__ void q4_k_scale_min(const u8 *packed, int sub, int *scale, int *min) {
    if (sub < 4) {
        *scale = packed[sub] & 63;
        *min = packed[sub + 4] & 63;
    } else {
        *scale = (packed[sub + 4] & 0x0f) | ((packed[sub - 4] >> 6) << 4);
        *min = (packed[sub + 4] >> 4) | ((packed[sub] >> 6) << 4);
    }
}

// Q4_K (tiled, see above): f16 d, f16 dmin, 12 bytes of packed 6-bit scales and mins, 128 bytes
// of nibbles. Sub-blocks 2p and 2p+1 (32 elements each) share quant run p: low nibbles, then high.
template <> struct Format<FMT_Q4_K> {
    static const int CHUNK = 16;
    __device__ static void decode(WeightRow row, u32 cols, u32 chunk, float *out) {
        const u8 *head = tile_head<FMT_Q4_K>(row, chunk / 16);
        const int element = (chunk % 16) * CHUNK;
        const int sub = element / 32;
        int scale, min;
        q4_k_scale_min(head + 4, sub, &scale, &min);
        const float d = f16_bits_to_f32(load_u16(head)) * (float)scale;
        const float m = f16_bits_to_f32(load_u16(head + 2)) * (float)min;
        const u8 *qs = tile_quants<FMT_Q4_K>(row, chunk / 16, element / 64, element % 32);
        const int shift = (sub % 2) * 4;
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            out[i] = d * (float)((qs[i] >> shift) & 0x0f) - m;
        }
    }
};

// Q6_K (tiled): 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 signed scales and an
// f16 scale d per block. Element e = 128h + 32j + l (half h, quarter j)
// takes the low or high nibble of ql[64h + l + 32(j % 2)] (high for j >= 2) and bits 2j..2j+2 of
// qh[32h + l]; scale e / 16.
template <> struct Format<FMT_Q6_K> {
    static const int CHUNK = 16;
    __device__ static void decode(WeightRow row, u32 cols, u32 chunk, float *out) {
        const u32 block_index = chunk / 16;
        const int element = (chunk % 16) * CHUNK;
        const int half_index = element / 128;
        const int quarter = (element % 128) / 32;
        const int l0 = element % 32;
        const u8 *ql = tile_quants<FMT_Q6_K>(row, block_index, 2 * half_index + quarter % 2, l0);
        const u8 *qh = tile_quants<FMT_Q6_K>(row, block_index, 4 + half_index, l0);
        const signed char scale = ((const signed char *)tile_head<FMT_Q6_K>(row, block_index))[element / 16];
        const float d = f16_bits_to_f32(tile_d<FMT_Q6_K>(row, block_index)) * (float)scale;
        const int nibble_shift = (quarter / 2) * 4;
        const int high_shift = 2 * quarter;
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            const int q = ((ql[i] >> nibble_shift) & 0x0f) | (((qh[i] >> high_shift) & 3) << 4);
            out[i] = d * (float)(q - 32);
        }
    }
};

// Q5_K: f16 d, f16 dmin, 12 bytes of packed 6-bit scales and mins (as Q4_K), 32 bytes of fifth
// bits, 128 bytes of nibbles (as Q4_K). Element e = 64k + 32h + l takes the low (h = 0) or high
// nibble of qs[32k + l] and bit 2k + h of qh[l].
template <> struct Format<FMT_Q5_K> {
    static const int CHUNK = 16;
    __device__ static void decode(WeightRow row, u32 cols, u32 chunk, float *out) {
        const u8 *block = row.base + (size_t)(chunk / 16) * Q5_K_BYTES;
        const int element = (chunk % 16) * CHUNK;
        const int sub = element / 32;
        int scale, min;
        q4_k_scale_min(block + 4, sub, &scale, &min);
        const float d = f16_bits_to_f32(load_u16(block)) * (float)scale;
        const float m = f16_bits_to_f32(load_u16(block + 2)) * (float)min;
        const u8 *qh = block + 16 + element % 32;
        const u8 *qs = block + 48 + (element / 64) * 32 + element % 32;
        const int shift = (sub % 2) * 4;
#pragma unroll
        for (int i = 0; i < CHUNK; ++i) {
            const int q = ((qs[i] >> shift) & 0x0f) | (((qh[i] >> sub) & 1) << 4);
            out[i] = d * (float)q - m;
        }
    }
};

// The 6-bit scales and mins of sub-blocks 2 * pair and 2 * pair + 1 as the two low bytes of
// `scales` and `mins`, from a block's 12 packed bytes (head.y, head.z, head.w). Sub-blocks 0..3
// keep theirs in the low six bits of bytes 0..3 (scales) and 4..7 (mins); 4..7 in the nibbles of
// bytes 8..11 with the top two bits of bytes 0..7 above them. Both layouts are computed and one
// selected, so that the lanes of a warp, which hold different pairs, do not diverge. Used by the
// decode kernels (matvec_quant.cu) and mmq_f16.cu.
__device__ __forceinline__ void k_quant_pair(uint4 head, int pair, u32 &scales, u32 &mins) {
    const int shift = 16 * (pair % 2);
    const u32 sc = (head.y >> shift) & 0xffffu;
    const u32 mn = (head.z >> shift) & 0xffffu;
    const u32 packed = (head.w >> shift) & 0xffffu;
    const bool first_four = pair < 2;
    scales = first_four ? sc & 0x3f3fu : (packed & 0x0f0fu) | ((sc >> 2) & 0x3030u);
    mins = first_four ? mn & 0x3f3fu : ((packed >> 4) & 0x0f0fu) | ((mn >> 2) & 0x3030u);
}

__device__ __forceinline__ u32 byte_of(u32 word, int index) { return (word >> (8 * index)) & 0xffu; }

// The int8 kernels (matvec_quant.cu, mmq.cu) take activations rounded in blocks of Q8_BLOCK
// columns, and up to MAX_PROJECTIONS weights of one format applied to the same input per launch.
#define Q8_BLOCK 32
#define MAX_PROJECTIONS 3

// Rounds `v`, four consecutive values of a flat array whose blocks of Q8_BLOCK are held by eight
// consecutive lanes of a warp (lanes 8j..8j+7, in order), to int8 with its block's scale d =
// max |x| / 127, and stores the four quants at q[quad] and, from the block's first lane, (d, sum
// of the block's floats) at scales[quad / 8]. The eight lanes reduce together, so every lane of
// the warp calls it; lanes with `live` false hold zeros and store nothing. The int8 matmuls
// read this copy (matvec_quant.cu, mmq.cu); norms and SwiGLU write it along with their output.
__device__ __forceinline__ void store_q8_quad(float4 v, size_t quad, bool live, u32 *q, float2 *scales) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    float sum = (v.x + v.y) + (v.z + v.w);
#pragma unroll
    for (int offset = 4; offset > 0; offset >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, offset));
        sum += __shfl_xor_sync(FULL_MASK, sum, offset);
    }
    const float d = amax / 127.0f;
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    const u32 packed = (u32)(__float2int_rn(v.x * inverse) & 0xff) |
                       ((u32)(__float2int_rn(v.y * inverse) & 0xff) << 8) |
                       ((u32)(__float2int_rn(v.z * inverse) & 0xff) << 16) |
                       ((u32)(__float2int_rn(v.w * inverse) & 0xff) << 24);
    if (live) {
        q[quad] = packed;
        if (quad % 8 == 0) {
            scales[quad / 8] = make_float2(d, sum);
        }
    }
}

// The power of two a row of the f16 copy is divided by, from the row's largest magnitude: 1 below
// 2^15, else the least that brings the row below 2^15, well inside f16's range (it overflows at
// 65520). SwiGLU outputs can pass 65504 in some layers of real models ("massive activations");
// divided by a power of two, such a row keeps f16's relative precision. mmq_f16.cu multiplies each
// output row back.
__device__ __forceinline__ float half_row_scale(float amax) {
    int exponent;
    frexpf(amax, &exponent);  // amax < 2^exponent
    return exponent > 15 ? ldexpf(1.0f, exponent - 15) : 1.0f;
}

// Stores `v`, four consecutive values of a flat array, times `inverse_scale` (1 / its row's
// half_row_scale) and rounded to f16, at halves[4 quad..]: the copy mmq_f16.cu reads. Nothing
// when `live` is false.
__device__ __forceinline__ void store_f16_quad(float4 v, size_t quad, bool live, float inverse_scale, u16 *halves) {
    if (live) {
        const __half2 low = __floats2half2_rn(v.x * inverse_scale, v.y * inverse_scale);
        const __half2 high = __floats2half2_rn(v.z * inverse_scale, v.w * inverse_scale);
        ((uint2 *)halves)[quad] = make_uint2(*(const u32 *)&low, *(const u32 *)&high);
    }
}

// Weights multiplied by one input in one launch: blocks first_block[p]..first_block[p + 1] compute
// rows of weight p (`Projections` in matmul.rs has the same layout).
struct Projections {
    const u8 *weight[MAX_PROJECTIONS];
    float *out[MAX_PROJECTIONS];
    size_t row_bytes[MAX_PROJECTIONS];
    u32 rows[MAX_PROJECTIONS];
    u32 first_block[MAX_PROJECTIONS + 1];
    u32 count;
};

// The weight a block computes rows of, and the block's index among that weight's blocks.
struct Projection {
    const u8 *weight;
    float *out;
    size_t row_bytes;
    u32 rows;
    u32 block;
};

__device__ __forceinline__ Projection projection_of(const Projections &projections, u32 block) {
    // Constant indices only: a runtime index into the parameters would copy them to the stack.
    Projection p = {projections.weight[0], projections.out[0], projections.row_bytes[0], projections.rows[0], block};
#pragma unroll
    for (int i = 1; i < MAX_PROJECTIONS; ++i) {
        if (i < projections.count && block >= projections.first_block[i]) {
            p = {projections.weight[i], projections.out[i], projections.row_bytes[i], projections.rows[i],
                 block - projections.first_block[i]};
        }
    }
    return p;
}
