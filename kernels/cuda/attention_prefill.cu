#line 1 "attention_prefill.cu"
// Compiled after attention.cu, in one translation unit: it shares its key ranges and pool slots.
//
// Prefill on the tensor cores, for heads of PREFILL_HEAD_DIM dimensions. A block takes
// PREFILL_ROWS consecutive query rows of one sequence and up to PREFILL_WARPS query heads of one
// KV head, a warp each, so that every key and value row it reads serves PREFILL_ROWS x heads
// queries. It walks the keys in tiles of PREFILL_KEYS: all threads copy the tile's key rows, and
// its value rows transposed, into shared memory as f16; each warp scores its 16 rows against the
// tile with mma.m16n8k16 (f16 in, f32 accumulate), folds the scores into its rows' online softmax
// in registers, and adds the tile's weighted values with mma again, the probabilities going from
// the score accumulators straight into the A operand. Keys a row does not see score -inf; tiles
// past the last row's keys are not read at all, which halves a causal prefill's work.
//
// The fragments of mma_f16 are laid out as common.cuh describes.
#define PREFILL_HEAD_DIM 128
#define PREFILL_ROWS 16
#define PREFILL_KEYS 64
#define PREFILL_WARPS 4
// Shared-memory row strides in halves, padded so that the fragment loads hit distinct banks.
#define PREFILL_K_STRIDE (PREFILL_HEAD_DIM + 8)
#define PREFILL_VT_STRIDE (PREFILL_KEYS + 8)

__device__ __forceinline__ u32 pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const u32 *)&h;
}

// One block per (tile of PREFILL_ROWS rows of one sequence, KV head and chunk of its query heads).
// Tiles are numbered sequence after sequence; grid.x may exceed their count (the host bounds it
// by rows / PREFILL_ROWS + sequences), and blocks past it leave.
extern "C" __global__ void __launch_bounds__(PREFILL_WARPS *WARP_SIZE)
    attention_prefill(const float *q, const float *k_pool, const float *v_pool, const u32 *sequences,
                      u32 n_sequences, const u32 *block_tables, const u32 *tree_parents, FastDivisor block_size,
                      u32 n_heads, u32 n_kv_heads, float scale, u32 heads_per_block, float *out) {
    wait_for_previous_kernel();
    __shared__ __align__(16) __half k_tile[PREFILL_KEYS * PREFILL_K_STRIDE];
    __shared__ __align__(16) __half vt_tile[PREFILL_HEAD_DIM * PREFILL_VT_STRIDE];

    u32 tile = blockIdx.x;
    const u32 *seq = nullptr;
    for (u32 s = 0; s < n_sequences; ++s) {
        const u32 tiles = (sequences[s * SEQ_FIELDS + 1] + PREFILL_ROWS - 1) / PREFILL_ROWS;
        if (tile < tiles) {
            seq = sequences + s * SEQ_FIELDS;
            break;
        }
        tile -= tiles;
    }
    if (seq == nullptr) {
        return;
    }
    const u32 group = n_heads / n_kv_heads;
    const u32 chunks = (group + heads_per_block - 1) / heads_per_block;
    const u32 kv_head = blockIdx.y / chunks;
    const u32 first_head = kv_head * group + (blockIdx.y % chunks) * heads_per_block;
    const u32 block_heads = min(heads_per_block, group - (blockIdx.y % chunks) * heads_per_block);
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 g = lane / 4;
    const u32 t = lane % 4;
    const u32 n_new = seq[1];
    const u32 first_row = tile * PREFILL_ROWS;
    const size_t kv_row_len = (size_t)n_kv_heads * PREFILL_HEAD_DIM;
    const size_t kv_offset = (size_t)kv_head * PREFILL_HEAD_DIM;
    // This thread's two rows (g and g + 8 of the tile), clamped into the sequence: a row past its
    // end computes like the last one and is not written.
    const u32 rows[2] = {min(first_row + g, n_new - 1), min(first_row + g + 8, n_new - 1)};
    const KeyRange row_keys[2] = {
        keys_of_row(seq, block_tables, tree_parents, block_size, rows[0], kv_row_len, kv_offset),
        keys_of_row(seq, block_tables, tree_parents, block_size, rows[1], kv_row_len, kv_offset)};
    // The block reads keys up to the last row's end, which is the latest of its rows'.
    const KeyRange block_keys = keys_of_row(seq, block_tables, tree_parents, block_size,
                                            min(first_row + PREFILL_ROWS, n_new) - 1, kv_row_len, kv_offset);
    const u32 n_key_tiles = (block_keys.end + PREFILL_KEYS - 1) / PREFILL_KEYS;
    const bool head_live = warp < block_heads;
    const u32 head = first_head + min(warp, block_heads - 1);

    // The warp's queries as A fragments, dimensions in chunks of 16.
    u32 q_frag[PREFILL_HEAD_DIM / 16][4];
    {
        const float *q_rows[2] = {q + (((size_t)seq[0] + rows[0]) * n_heads + head) * PREFILL_HEAD_DIM,
                                  q + (((size_t)seq[0] + rows[1]) * n_heads + head) * PREFILL_HEAD_DIM};
#pragma unroll
        for (int c = 0; c < PREFILL_HEAD_DIM / 16; ++c) {
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
    float o_acc[PREFILL_HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < PREFILL_HEAD_DIM / 8; ++n) {
        o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.0f;
    }
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.0f, 0.0f};

    for (u32 key_tile = 0; key_tile < n_key_tiles; ++key_tile) {
        const u32 first_key = key_tile * PREFILL_KEYS;
        __syncthreads();
        // Copy: element e of the tile is dimensions 4(e % 32).. of key e / 32.
        for (u32 e = threadIdx.x; e < PREFILL_KEYS * PREFILL_HEAD_DIM / 4; e += blockDim.x) {
            const u32 key = e / (PREFILL_HEAD_DIM / 4);
            const u32 d = 4 * (e % (PREFILL_HEAD_DIM / 4));
            const u32 p = first_key + key;
            float4 k = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float4 v = k;
            if (p < block_keys.end) {
                const size_t at = pool_slot(block_keys.table, p, block_size) * kv_row_len + kv_offset + d;
                k = *(const float4 *)(k_pool + at);
                v = *(const float4 *)(v_pool + at);
            }
            *(uint2 *)(k_tile + key * PREFILL_K_STRIDE + d) = make_uint2(pack_half2(k.x, k.y), pack_half2(k.z, k.w));
            vt_tile[(d + 0) * PREFILL_VT_STRIDE + key] = __float2half_rn(v.x);
            vt_tile[(d + 1) * PREFILL_VT_STRIDE + key] = __float2half_rn(v.y);
            vt_tile[(d + 2) * PREFILL_VT_STRIDE + key] = __float2half_rn(v.z);
            vt_tile[(d + 3) * PREFILL_VT_STRIDE + key] = __float2half_rn(v.w);
        }
        __syncthreads();
        if (!head_live) {
            continue;
        }
        // Scores of the warp's 16 rows against the tile's keys, 8 keys per accumulator.
        float s[PREFILL_KEYS / 8][4];
#pragma unroll
        for (int n = 0; n < PREFILL_KEYS / 8; ++n) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            const __half *k_row = k_tile + (n * 8 + g) * PREFILL_K_STRIDE + 2 * t;
#pragma unroll
            for (int c = 0; c < PREFILL_HEAD_DIM / 16; ++c) {
                const u32 b0 = *(const u32 *)(k_row + c * 16);
                const u32 b1 = *(const u32 *)(k_row + c * 16 + 8);
                mma_f16(s[n], q_frag[c], b0, b1);
            }
        }
        // Mask and scale, then each row's tile maximum over its four lanes.
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < PREFILL_KEYS / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const u32 p = first_key + n * 8 + 2 * t + (e % 2);
                const int r = e / 2;
                s[n][e] = row_sees(row_keys[r], p) ? s[n][e] * scale : -INFINITY;
                tile_max[r] = fmaxf(tile_max[r], s[n][e]);
            }
        }
        float rescale[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(FULL_MASK, tile_max[r], 1));
            tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(FULL_MASK, tile_max[r], 2));
            const float new_max = fmaxf(row_max[r], tile_max[r]);
            // A row that has seen nothing yet keeps max -inf, and its weights below are all 0.
            rescale[r] = new_max == -INFINITY ? 1.0f : __expf(row_max[r] - new_max);
            row_max[r] = new_max;
        }
        float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < PREFILL_KEYS / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e / 2;
                s[n][e] = s[n][e] == -INFINITY ? 0.0f : __expf(s[n][e] - row_max[r]);
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
        for (int n = 0; n < PREFILL_HEAD_DIM / 8; ++n) {
            o_acc[n][0] *= rescale[0];
            o_acc[n][1] *= rescale[0];
            o_acc[n][2] *= rescale[1];
            o_acc[n][3] *= rescale[1];
        }
        // The weights as A fragments, 16 keys at a time, times the values.
#pragma unroll
        for (int c = 0; c < PREFILL_KEYS / 16; ++c) {
            const u32 p_frag[4] = {pack_half2(s[2 * c][0], s[2 * c][1]), pack_half2(s[2 * c][2], s[2 * c][3]),
                                   pack_half2(s[2 * c + 1][0], s[2 * c + 1][1]),
                                   pack_half2(s[2 * c + 1][2], s[2 * c + 1][3])};
#pragma unroll
            for (int n = 0; n < PREFILL_HEAD_DIM / 8; ++n) {
                const __half *v_row = vt_tile + (n * 8 + g) * PREFILL_VT_STRIDE + c * 16 + 2 * t;
                mma_f16(o_acc[n], p_frag, *(const u32 *)v_row, *(const u32 *)(v_row + 8));
            }
        }
    }
    if (!head_live) {
        return;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u32 row = first_row + g + 8 * r;
        if (row >= n_new) {
            continue;
        }
        const float inverse = row_sum[r] > 0.0f ? 1.0f / row_sum[r] : 0.0f;
        float *out_row = out + (((size_t)seq[0] + row) * n_heads + head) * PREFILL_HEAD_DIM;
#pragma unroll
        for (int n = 0; n < PREFILL_HEAD_DIM / 8; ++n) {
            *(float2 *)(out_row + n * 8 + 2 * t) =
                make_float2(o_acc[n][2 * r] * inverse, o_acc[n][2 * r + 1] * inverse);
        }
    }
}
