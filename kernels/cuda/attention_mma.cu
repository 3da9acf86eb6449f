#line 1 "attention_mma.cu"
// Compiled after attention.cu, in one translation unit: it shares its key ranges and pool slots.
//
// Attention for heads of MMA_HEAD_DIM dimensions on the tensor cores: decode, verify and
// prefill batches alike. A block serves one KV head (or a chunk of its query heads) and up to
// 16 (row, query head) slots per warp of one sequence, the chunk's heads of consecutive
// query rows: every key and value row it reads serves all of them, where the
// split kernels of attention.cu read it once per row. For Qwen3-8B a block holds a whole 23-row
// verify batch of one KV head (92 slots), or a decode row's 4 query heads.
//
// The block walks its keys in tiles of KEYS keys, copied by cp.async from the f16 pools into a ring
// of tiles in shared memory, keys and values alike row-major, all but one of them ahead of the one
// the warps work on. Each warp scores its 16 slots against the tile with
// mma.m16n8k16 (f16 in, f32 accumulate), the keys' fragments coming from ldmatrix, folds the
// scores into its slots' online softmax in registers, and adds the tile's weighted values with
// mma again: the probabilities go from the score accumulators straight into the A operand, and
// ldmatrix's transpose turns the row-major values into B fragments. Keys a row does not see score
// -inf, and tiles past the block's last row are not read.
//
// The kernel comes in two widths: attention_mma's blocks have 8 warps sharing a ring of 6 tiles
// (attention_mma_long's 3 tiles of twice the keys), for verify and prefill batches, whose rows
// fill several warps; attention_mma_narrow's have one warp and a ring of 3, for decode rows and
// other batches of up to 16 slots a sequence. Such a batch leaves seven of a wide block's warps
// copying only, and an SM holds a single wide block (its registers), so it would have one warp
// computing, where it holds four narrow blocks.
//
// A decode or verify batch is a handful of blocks, far too few to stream a long context at the
// device's bandwidth, so the host also splits each block's tiles across n_splits blocks
// (blockIdx.z), each taking an even share of at least SPLIT_TILES tiles. Split blocks
// write each query's softmax state (max and sum to `stats`, the unnormalised output to `parts`,
// the splits of one query adjacent), and attention_mma_merge combines them; they let the merge
// launch early (it waits for them to finish), and a split left without tiles writes max -inf,
// which the merge skips. Unsplit launches write the output directly.
//
// The fragments of mma_f16 and load_matrices are laid out as common.cuh describes.
#define MMA_HEAD_DIM 128
#define MMA_ROWS 16
// Warps of the wide and the narrow blocks, the keys of their tiles, their rings' tiles, and the
// tiles a split block of each reads at least: fewer would cost the merge more than they save. Wide
// splits of at least 8 tiles gave a 23-row verify after 512 tokens (16 tiles) two busy splits a
// block; splits of 2 made it 5 % faster (H100: fwd23@d512 4.96 -> 4.72 ms, fwd8@d512 4.03 ->
// 3.85), with no change on an empty context or after 16384 tokens.
//
// attention_mma_long, the wide blocks the host takes after a long context (attention_mma.rs),
// walks tiles of 64 keys in a ring of 3 (the same shared memory): each warp's chain through a tile
// (its scores, the softmax's reductions, the rescale of its output, the weighted values) and the
// block's barrier a tile set the pace of a long context (session 22's profile: 6.27 cycles between
// a warp's instructions), and tiles of 64 halve them a key. H100: fwd23 after 16384 tokens 6.25
// -> 6.07 ms, fwd8 5.22 -> 4.98; on an empty context, where a verify batch has a tile of keys, the
// wider tile's dead keys cost more (fwd23 4.31 -> 4.38 ms). One kernel holding both tile sizes
// behind a branch made both slower (fwd23 4.57 ms on an empty context). Twice the computing warps
// (two groups of 6 sharing the slots, each taking half of every tile's keys) gained 1.7 % after
// 16384 tokens and lost 2 % after 1024 to 4096: the chains are not all that sets the pace.
#define MMA_WIDE_WARPS 8
#define MMA_WIDE_KEYS 32
#define MMA_WIDE_STAGES 6
#define MMA_WIDE_MIN_SPLIT_TILES 2
#define MMA_LONG_KEYS 64
#define MMA_LONG_STAGES 3
#define MMA_LONG_MIN_SPLIT_TILES 1
#define MMA_NARROW_KEYS 32
#define MMA_NARROW_STAGES 3
#define MMA_NARROW_MIN_SPLIT_TILES 2
// Warps of attention_mma_merge's blocks, a query each.
#define MMA_MERGE_WARPS 8
// Split states whose loads a merge warp has in flight at once; divides the 64 splits it takes.
#define MMA_MERGE_BATCH 16
// Halves between consecutive key (and value) rows in shared memory: 272 bytes, so that the eight
// 16-byte rows an ldmatrix matrix reads start in distinct bank quads.
#define MMA_STRIDE (MMA_HEAD_DIM + 8)
#define LOG2_E 1.4426950408889634f
#define LN_2 0.6931471805599453f

// 2^x on the SFU, one instruction (__expf is this after a multiply by log2 e); subnormal results
// flush to 0.
__device__ __forceinline__ float fast_exp2(float x) {
#if __CUDA_ARCH__ >= 500
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

__device__ __forceinline__ u32 pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const u32 *)&h;
}

// Where stage `stage` of a ring of KEYS-key tiles keeps its tile: the keys' rows, then the values'
// rows.
template <int KEYS> __device__ __forceinline__ __half *mma_stage(uint4 *ring, u32 stage) {
    return (__half *)ring + stage * 2 * KEYS * MMA_STRIDE;
}

// Starts copying the tile of keys from first_key into `stage`, a commit group of its own (empty
// past the block's last tile, so that every thread's groups count alike), THREADS threads sharing
// the copies. KEY_THREADS threads copy a key row (and its value row), thread k of them its 16-byte
// chunks k, k + KEY_THREADS, ..., from one lookup of the row's pool offset, at constant offsets
// from it. Keys past the block's last row become zeros.
template <int THREADS, int KEYS>
__device__ __forceinline__ void fetch_mma_tile(uint4 *ring, u32 stage, const u16 *k_pool, const u16 *v_pool,
                                               const KeyRange &keys, u32 first_key, bool live_tile) {
    constexpr int CHUNKS = MMA_HEAD_DIM / 8;
    // Threads copying a key row: 8 where one pass then covers the tile's rows (wide blocks),
    // else half a warp, so that every copy instruction still reads whole rows of 256 bytes. Pairs
    // of lanes per row in the narrow blocks (16 rows' 32-byte pieces an instruction, eight times
    // fewer offset lookups) decoded Qwen3-8B after 16384 tokens at 249 tok/s where half-warps
    // give 268 (H100, same call).
    constexpr int KEY_THREADS = THREADS >= 8 * KEYS ? 8 : CHUNKS;
    constexpr int PASS_KEYS = THREADS / KEY_THREADS;
    static_assert(KEYS % PASS_KEYS == 0, "whole passes over the tile's keys");
    constexpr int PASSES = KEYS / PASS_KEYS;
    __half *k_tile = mma_stage<KEYS>(ring, stage);
    __half *v_tile = k_tile + KEYS * MMA_STRIDE;
    if (live_tile) {
        const u32 chunk = threadIdx.x % KEY_THREADS;
#pragma unroll
        for (int pass = 0; pass < PASSES; ++pass) {
            const u32 key = pass * PASS_KEYS + threadIdx.x / KEY_THREADS;
            size_t at = 0;
            const bool live = key_offset(keys, first_key + key, &at);
            // The chunks' addresses are constant offsets from these.
            const u16 *k_src = k_pool + at + 8 * chunk;
            const u16 *v_src = v_pool + at + 8 * chunk;
            __half *k_dst = k_tile + key * MMA_STRIDE + 8 * chunk;
            __half *v_dst = v_tile + key * MMA_STRIDE + 8 * chunk;
#pragma unroll
            for (int i = 0; i < CHUNKS / KEY_THREADS; ++i) {
                copy_async_16(k_dst + 8 * KEY_THREADS * i, k_src + 8 * KEY_THREADS * i, live);
                copy_async_16(v_dst + 8 * KEY_THREADS * i, v_src + 8 * KEY_THREADS * i, live);
            }
        }
    }
    copy_async_commit();
}

// One block of WARPS warps per (row block of one sequence, KV head and chunk of its query heads,
// split). A block serves WARPS * MMA_ROWS (row, query head) slots, slot m being query head
// m % heads_per_block of the chunk in row m / heads_per_block of the block, warp w slots
// 16 w .. 16 w + 15: a verify batch's rows and a decode row's query heads alike fill the mma
// tiles' rows. Row blocks are numbered sequence after sequence; grid.x may exceed their count (the
// host bounds it by rows / rows per block, rounded up, + sequences - 1), and blocks past it leave.
// Dynamic shared memory holds the ring of STAGES tiles of KEYS keys.
template <int WARPS, int KEYS, int STAGES, int SPLIT_TILES>
__device__ __forceinline__ void attention_mma_block(const float *q, const u16 *k_pool, const u16 *v_pool,
                                                    const u32 *sequences, u32 n_sequences, const u32 *block_tables,
                                                    const u32 *tree_parents, FastDivisor block_size, u32 n_heads,
                                                    u32 n_kv_heads, float scale, u32 heads_per_block, u32 n_splits,
                                                    float2 *stats, float *parts, float *out) {
    constexpr int THREADS = WARPS * WARP_SIZE;
    wait_for_previous_kernel();
    if (n_splits > 1) {
        let_next_kernel_start();
    }
    extern __shared__ uint4 mma_ring[];

    const u32 rows_per_block = WARPS * MMA_ROWS / heads_per_block;
    u32 row_block = blockIdx.x;
    const u32 *seq = nullptr;
    for (u32 s = 0; s < n_sequences; ++s) {
        const u32 blocks = (sequences[s * SEQ_FIELDS + 1] + rows_per_block - 1) / rows_per_block;
        if (row_block < blocks) {
            seq = sequences + s * SEQ_FIELDS;
            break;
        }
        row_block -= blocks;
    }
    if (seq == nullptr) {
        return;
    }
    const u32 group = n_heads / n_kv_heads;
    const u32 chunks = (group + heads_per_block - 1) / heads_per_block;
    const u32 kv_head = blockIdx.y / chunks;
    const u32 chunk_start = (blockIdx.y % chunks) * heads_per_block;
    const u32 block_heads = min(heads_per_block, group - chunk_start);
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 g = lane / 4;
    const u32 t = lane % 4;
    const u32 n_new = seq[1];
    const u32 n_past = seq[2];
    const u32 block_first_row = row_block * rows_per_block;
    const u32 block_rows = min(rows_per_block, n_new - block_first_row);
    const size_t kv_row_len = (size_t)n_kv_heads * MMA_HEAD_DIM;
    const size_t kv_offset = (size_t)kv_head * MMA_HEAD_DIM;
    // This thread's two slots (g and g + 8 of the warp's tile): whether each is a query of the
    // batch, and its row and query head, clamped into the block, so that a dead slot computes like
    // a live one and is not written.
    bool live[2];
    u32 rows[2], heads[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u32 slot = warp * MMA_ROWS + g + 8 * r;
        live[r] = slot / heads_per_block < block_rows && slot % heads_per_block < block_heads;
        rows[r] = block_first_row + min(slot / heads_per_block, block_rows - 1);
        heads[r] = kv_head * group + chunk_start + min(slot % heads_per_block, block_heads - 1);
    }
    // The warp works when its first slot is a row of the block.
    const bool warp_live = warp * MMA_ROWS / heads_per_block < block_rows;
    const KeyRange row_keys[2] = {
        keys_of_row(seq, block_tables, tree_parents, block_size, rows[0], kv_row_len, kv_offset),
        keys_of_row(seq, block_tables, tree_parents, block_size, rows[1], kv_row_len, kv_offset)};
    // The block reads keys up to its last row's end, which is the latest of its rows'.
    const KeyRange block_keys = keys_of_row(seq, block_tables, tree_parents, block_size,
                                            block_first_row + block_rows - 1, kv_row_len, kv_offset);
    const u32 n_key_tiles = (block_keys.end + KEYS - 1) / KEYS;
    const u32 split_tiles = max((n_key_tiles + n_splits - 1) / n_splits, (u32)SPLIT_TILES);
    const u32 first_tile = min(blockIdx.z * split_tiles, n_key_tiles);
    const u32 end_tile = min(first_tile + split_tiles, n_key_tiles);
    if (first_tile == end_tile) {
        // A split without keys (those of a short context, most of them at depth 0) marks its
        // states empty and leaves before loading its queries.
        if (warp_live && t == 0) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (live[r]) {
                    stats[(((size_t)seq[0] + rows[r]) * n_heads + heads[r]) * n_splits + blockIdx.z] =
                        make_float2(-INFINITY, 0.0f);
                }
            }
        }
        return;
    }
    // The first tiles of the ring are on their way while the warps load their queries.
#pragma unroll
    for (u32 stage = 0; stage + 1 < STAGES; ++stage) {
        fetch_mma_tile<THREADS, KEYS>(mma_ring, stage, k_pool, v_pool, block_keys, (first_tile + stage) * KEYS,
                                      first_tile + stage < end_tile);
    }

    // The warp's queries as A fragments, dimensions in chunks of 16.
    u32 q_frag[MMA_HEAD_DIM / 16][4];
    {
        const float *q_rows[2] = {q + (((size_t)seq[0] + rows[0]) * n_heads + heads[0]) * MMA_HEAD_DIM,
                                  q + (((size_t)seq[0] + rows[1]) * n_heads + heads[1]) * MMA_HEAD_DIM};
#pragma unroll
        for (int c = 0; c < MMA_HEAD_DIM / 16; ++c) {
#pragma unroll
            for (int half_index = 0; half_index < 2; ++half_index) {
                const u32 d = c * 16 + 2 * t + 8 * half_index;
                const float2 r0 = *(const float2 *)(q_rows[0] + d);
                const float2 r1 = *(const float2 *)(q_rows[1] + d);
                q_frag[c][2 * half_index] = pack_half2(r0.x, r0.y);
                q_frag[c][2 * half_index + 1] = pack_half2(r1.x, r1.y);
            }
        }
    }
    float o_acc[MMA_HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < MMA_HEAD_DIM / 8; ++n) {
        o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.0f;
    }
    // Each row's softmax state in base 2: the maximum of its scores times scale log2 e, and its sum.
    const float scale_log2 = scale * LOG2_E;
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.0f, 0.0f};
    // Where this lane's ldmatrix rows start: of the keys (matrix m = lane / 8 is dimensions 8m..
    // of key lane % 8 of an 8-key group), and of the values (matrix m is keys 8 (m % 2).. of a
    // 16-key group, dimensions 8 (m / 2).. of a 16-dimension pair of blocks).
    const u32 k_lane_offset = (lane % 8) * MMA_STRIDE + 8 * (lane / 8);
    const u32 v_lane_offset = (8 * ((lane / 8) % 2) + lane % 8) * MMA_STRIDE + 8 * (lane / 16);

    for (u32 key_tile = first_tile; key_tile < end_tile; ++key_tile) {
        const u32 first_key = key_tile * KEYS;
        // This thread's copies of the tile are in; the barrier makes everyone's visible, and puts
        // every warp's work on the previous tile before its stage is refilled below.
        copy_async_wait_pending<STAGES - 2>();
        __syncthreads();
        const u32 ahead = key_tile + STAGES - 1;
        fetch_mma_tile<THREADS, KEYS>(mma_ring, (ahead - first_tile) % STAGES, k_pool, v_pool, block_keys,
                                      ahead * KEYS, ahead < end_tile);
        if (!warp_live) {
            continue;
        }
        const __half *k_tile = mma_stage<KEYS>(mma_ring, (key_tile - first_tile) % STAGES);
        const __half *v_tile = k_tile + KEYS * MMA_STRIDE;
        // Scores of the warp's 16 rows against the tile's keys, 8 keys per accumulator.
        float s[KEYS / 8][4];
#pragma unroll
        for (int n = 0; n < KEYS / 8; ++n) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int c = 0; c < MMA_HEAD_DIM / 16; c += 2) {
                u32 b[4];
                load_matrices<false>(b, k_tile, n * 8 * MMA_STRIDE + c * 16 + k_lane_offset);
                mma_f16(s[n], q_frag[c], b[0], b[1]);
                mma_f16(s[n], q_frag[c + 1], b[2], b[3]);
            }
        }
        // Mask and scale, then each row's tile maximum over its four lanes. Keys of the committed
        // context are seen by every row. The softmax works in base 2 (scores times scale log2 e),
        // so that each weight is a subtraction and an ex2.
        if (first_key + KEYS > n_past) {
#pragma unroll
            for (int n = 0; n < KEYS / 8; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (!row_sees(row_keys[e / 2], first_key + n * 8 + 2 * t + (e % 2))) {
                        s[n][e] = -INFINITY;
                    }
                }
            }
        }
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < KEYS / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[n][e] *= scale_log2;
                tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
            }
        }
        float rescale[2], subtrahend[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(FULL_MASK, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(FULL_MASK, tile_max[r], 2));
            const float new_max = fmaxf(row_max[r], tile_max[r]);
            // A row that has seen nothing yet keeps max -inf, and its weights below, 2^-inf, are
            // all 0 (subtracting 0, not the max, which would make them NaN).
            rescale[r] = new_max == -INFINITY ? 1.0f : fast_exp2(row_max[r] - new_max);
            subtrahend[r] = new_max == -INFINITY ? 0.0f : new_max;
            row_max[r] = new_max;
        }
        float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < KEYS / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e / 2;
                s[n][e] = fast_exp2(s[n][e] - subtrahend[r]);
                tile_sum[r] += s[n][e];
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            tile_sum[r] += __shfl_xor_sync(FULL_MASK, tile_sum[r], 1);
            tile_sum[r] += __shfl_xor_sync(FULL_MASK, tile_sum[r], 2);
            row_sum[r] = row_sum[r] * rescale[r] + tile_sum[r];
        }
#pragma unroll
        for (int n = 0; n < MMA_HEAD_DIM / 8; ++n) {
            o_acc[n][0] *= rescale[0];
            o_acc[n][1] *= rescale[0];
            o_acc[n][2] *= rescale[1];
            o_acc[n][3] *= rescale[1];
        }
        // The weights as A fragments, 16 keys at a time, times the values, two blocks of 8
        // dimensions a load.
#pragma unroll
        for (int c = 0; c < KEYS / 16; ++c) {
            const u32 p_frag[4] = {pack_half2(s[2 * c][0], s[2 * c][1]), pack_half2(s[2 * c][2], s[2 * c][3]),
                                   pack_half2(s[2 * c + 1][0], s[2 * c + 1][1]),
                                   pack_half2(s[2 * c + 1][2], s[2 * c + 1][3])};
#pragma unroll
            for (int n = 0; n < MMA_HEAD_DIM / 8; n += 2) {
                u32 b[4];
                load_matrices<true>(b, v_tile, c * 16 * MMA_STRIDE + n * 8 + v_lane_offset);
                mma_f16(o_acc[n], p_frag, b[0], b[1]);
                mma_f16(o_acc[n + 1], p_frag, b[2], b[3]);
            }
        }
    }
    if (!warp_live) {
        return;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (!live[r]) {
            continue;
        }
        const size_t query = ((size_t)seq[0] + rows[r]) * n_heads + heads[r];
        if (n_splits == 1) {
            const float inverse = row_sum[r] > 0.0f ? 1.0f / row_sum[r] : 0.0f;
            float *out_row = out + query * MMA_HEAD_DIM;
#pragma unroll
            for (int n = 0; n < MMA_HEAD_DIM / 8; ++n) {
                *(float2 *)(out_row + n * 8 + 2 * t) =
                    make_float2(o_acc[n][2 * r] * inverse, o_acc[n][2 * r + 1] * inverse);
            }
            continue;
        }
        const size_t state = query * n_splits + blockIdx.z;
        if (t == 0) {
            // The merge's maxima are of the scaled scores, in base e.
            stats[state] = make_float2(row_max[r] * LN_2, row_sum[r]);
        }
        float *part = parts + state * MMA_HEAD_DIM;
#pragma unroll
        for (int n = 0; n < MMA_HEAD_DIM / 8; ++n) {
            *(float2 *)(part + n * 8 + 2 * t) = make_float2(o_acc[n][2 * r], o_acc[n][2 * r + 1]);
        }
    }
}

// The kernel's entry points: one width each (the warps of a block, the keys of a tile, the tiles
// of its ring, the fewest tiles of a split).
#define ATTENTION_MMA_KERNEL(NAME, WARPS, KEYS, STAGES, SPLIT_TILES)                                                  \
    extern "C" __global__ void __launch_bounds__((WARPS) * WARP_SIZE)                                                \
        NAME(const float *q, const u16 *k_pool, const u16 *v_pool, const u32 *sequences, u32 n_sequences,          \
             const u32 *block_tables, const u32 *tree_parents, FastDivisor block_size, u32 n_heads, u32 n_kv_heads, \
             float scale, u32 heads_per_block, u32 n_splits, float2 *stats, float *parts, float *out) {             \
        attention_mma_block<WARPS, KEYS, STAGES, SPLIT_TILES>(q, k_pool, v_pool, sequences, n_sequences,            \
                                                              block_tables, tree_parents, block_size, n_heads,      \
                                                              n_kv_heads, scale, heads_per_block, n_splits, stats,  \
                                                              parts, out);                                          \
    }

ATTENTION_MMA_KERNEL(attention_mma, MMA_WIDE_WARPS, MMA_WIDE_KEYS, MMA_WIDE_STAGES, MMA_WIDE_MIN_SPLIT_TILES)
ATTENTION_MMA_KERNEL(attention_mma_long, MMA_WIDE_WARPS, MMA_LONG_KEYS, MMA_LONG_STAGES, MMA_LONG_MIN_SPLIT_TILES)
ATTENTION_MMA_KERNEL(attention_mma_narrow, 1, MMA_NARROW_KEYS, MMA_NARROW_STAGES, MMA_NARROW_MIN_SPLIT_TILES)

// Combines the split states of the three kernels above: a warp per query (row, query head), lane
// s reading the max and sum of splits s and s + 32 (so at most 64 splits), each lane then holding 4
// dimensions of the output. With `out_q` set it also writes the output's int8 copy, and with
// `out_halves` its f16 copy and row scales (1, as in attention.cu's HeadOutput), which the output
// projection reads instead of rounding the output in a launch of its own.
extern "C" __global__ void __launch_bounds__(MMA_MERGE_WARPS *WARP_SIZE, 1)
    attention_mma_merge(const float2 *stats, const float *parts, u32 n_queries, u32 n_splits, u32 n_heads,
                        float *out, u32 *out_q, float2 *out_scales, u16 *out_halves, float *out_half_scales) {
    wait_for_previous_kernel();
    // The output projection loads its first weights before it waits.
    let_next_matmul_start(n_queries / n_heads);
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 query = blockIdx.x * MMA_MERGE_WARPS + threadIdx.x / WARP_SIZE;
    if (query >= n_queries) {
        return;
    }
    const size_t first_state = (size_t)query * n_splits;
    const float2 empty = make_float2(-INFINITY, 0.0f);
    const float2 low = lane < n_splits ? stats[first_state + lane] : empty;
    const float2 high = lane + WARP_SIZE < n_splits ? stats[first_state + WARP_SIZE + lane] : empty;
    const float max = warp_max(fmaxf(low.x, high.x));
    const float low_weight = low.x == -INFINITY ? 0.0f : __expf(low.x - max);
    const float high_weight = high.x == -INFINITY ? 0.0f : __expf(high.x - max);
    const float sum = warp_sum(low_weight * low.y + high_weight * high.y);
    // The parts of MMA_MERGE_BATCH splits are loaded before any is added: one or two at a time, a
    // decode step's 64 splits after a few thousand keys were some 32 dependent L2 round trips,
    // for 32 warps on the whole device. The launch bound's one block an SM lets ptxas give the
    // batch its registers (96; aiming at full occupancy it held the kernel to 32 and two loads in
    // flight). Splits without keys (weight 0) load nothing and add 0, and the sum keeps split
    // order.
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (u32 first = 0; first < n_splits; first += MMA_MERGE_BATCH) {
        float w[MMA_MERGE_BATCH];
        float4 part[MMA_MERGE_BATCH];
#pragma unroll
        for (int i = 0; i < MMA_MERGE_BATCH; ++i) {
            // Splits past n_splits (below 64) hold the empty state's weight, 0.
            const u32 split = first + i;
            w[i] = __shfl_sync(FULL_MASK, split < WARP_SIZE ? low_weight : high_weight, split % WARP_SIZE);
            part[i] = w[i] != 0.0f ? *(const float4 *)(parts + (first_state + split) * MMA_HEAD_DIM + 4 * lane)
                                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int i = 0; i < MMA_MERGE_BATCH; ++i) {
            acc.x += w[i] * part[i].x;
            acc.y += w[i] * part[i].y;
            acc.z += w[i] * part[i].z;
            acc.w += w[i] * part[i].w;
        }
    }
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
    const float4 value = make_float4(acc.x * inverse, acc.y * inverse, acc.z * inverse, acc.w * inverse);
    const size_t quad = (size_t)query * (MMA_HEAD_DIM / 4) + lane;
    ((float4 *)out)[quad] = value;
    if (out_q == NULL) {
        return;
    }
    store_q8_quad(value, quad, true, out_q, out_scales);
    if (out_halves != NULL) {
        store_f16_quad(value, quad, true, 1.0f, out_halves);
        if (query % n_heads == 0 && lane == 0) {
            out_half_scales[query / n_heads] = 1.0f;
        }
    }
}
