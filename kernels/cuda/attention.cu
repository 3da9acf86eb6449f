// Paged multi-sequence attention. Each (query row, head) gets n_splits blocks, each taking an even
// share of the row's 32-key chunks; a block's warps take turns on its chunks and merge their
// online-softmax states in shared memory. With one split the block writes the output. With more
// (decode, where rows x heads alone would leave most SMs idle) each block writes its state
// (max, sum, unnormalised output) to `partials` and counts itself done on the task's counter, and
// the block that finishes last merges the states. Merging there rather than in a second kernel
// saves a launch per layer on every decode step; since no block waits for another, it holds
// however the blocks are scheduled. The last block puts the counter back to zero, so every launch,
// and every replay of a recorded graph, starts from zeroed counters.
//
// Within a chunk, lane l scores key l (a whole q . k dot product from the query in shared memory),
// the chunk's softmax takes one warp reduction, and the value rows are then read coalesced, lanes
// over dimensions: lane l holds dimensions l, l + 32, ... of the running output.
//
// The keys a row sees are the committed context, then the new tokens its mask allows. The batch
// description is the flattened AttentionLayout: per sequence the five fields
// (q_start, n_new, n_past, table_start, mask), the concatenated block tables, and per query row
// its tree parent (index among its sequence's new tokens, or TREE_ROOT).

#define ATTENTION_WARPS 8
#define MAX_HEAD_DIM 512
#define MAX_DIMS_PER_LANE (MAX_HEAD_DIM / WARP_SIZE)
#define SEQ_FIELDS 5
#define MASK_CAUSAL 0
#define MASK_BIDIRECTIONAL 1
#define MASK_TREE 2
#define TREE_ROOT 0xffffffffu

// Whether new token j is node i itself or one of its ancestors. The walk is bounded, so a
// malformed parent array cannot loop.
__device__ bool tree_sees(const u32 *parents, u32 n_new, u32 i, u32 j) {
    u32 node = i;
    for (u32 steps = 0; node != TREE_ROOT && node < n_new && steps <= n_new; ++steps) {
        if (node == j) {
            return true;
        }
        node = parents[node];
    }
    return false;
}

__device__ float dot_row(const float *q, const float *k, u32 head_dim) {
    float sum = 0.0f;
    if (head_dim % 4 == 0) {
        // Unrolled so that several 16-byte loads of the key row are in flight at once.
#pragma unroll 8
        for (u32 d = 0; d < head_dim; d += 4) {
            const float4 kv = *(const float4 *)(k + d);
            sum += q[d] * kv.x + q[d + 1] * kv.y + q[d + 2] * kv.z + q[d + 3] * kv.w;
        }
    } else {
        for (u32 d = 0; d < head_dim; ++d) {
            sum += q[d] * k[d];
        }
    }
    return sum;
}

extern "C" __global__ void attention(const float *q, const float *k_pool, const float *v_pool,
                                     const u32 *sequences, u32 n_sequences, const u32 *block_tables,
                                     const u32 *tree_parents, u32 block_size, u32 n_rows, u32 n_heads,
                                     u32 n_kv_heads, u32 head_dim, float scale, u32 n_splits,
                                     float *partials, u32 *counters, float *out) {
    wait_for_previous_kernel();
    __shared__ float q_shared[MAX_HEAD_DIM];
    __shared__ float max_shared[ATTENTION_WARPS];
    __shared__ float sum_shared[ATTENTION_WARPS];
    __shared__ float acc_shared[ATTENTION_WARPS][MAX_HEAD_DIM];
    __shared__ bool merges;

    const u32 task = blockIdx.x / n_splits;
    const u32 split = blockIdx.x % n_splits;
    const u32 row = task / n_heads;
    const u32 head = task % n_heads;
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    // These exits depend on the row alone, so all of a task's splits take them or none does, and
    // its counter stays balanced either way.
    if (row >= n_rows) {
        return;
    }

    // Rows are packed in sequence order: find the first sequence that ends after `row`.
    u32 lo = 0, hi = n_sequences;
    while (lo < hi) {
        const u32 mid = (lo + hi) / 2;
        const u32 *s = sequences + mid * SEQ_FIELDS;
        if (s[0] + s[1] <= row) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo >= n_sequences) {
        return;
    }
    const u32 *seq = sequences + lo * SEQ_FIELDS;
    const u32 q_start = seq[0], n_new = seq[1], n_past = seq[2], table_start = seq[3], mask = seq[4];
    const u32 i = row - q_start;
    const u32 *table = block_tables + table_start;
    const u32 *parents = tree_parents + q_start;
    const u32 kv_row_len = n_kv_heads * head_dim;
    const size_t kv_offset = (size_t)(head / (n_heads / n_kv_heads)) * head_dim;
    // Keys past `end` are never visible: a causal row stops at itself.
    const u32 end = n_past + (mask == MASK_CAUSAL ? i + 1 : n_new);

    const float *q_head = q + ((size_t)row * n_heads + head) * head_dim;
    for (u32 d = threadIdx.x; d < head_dim; d += blockDim.x) {
        q_shared[d] = q_head[d];
    }
    __syncthreads();

    float running_max = -INFINITY;
    float running_sum = 0.0f;
    float acc[MAX_DIMS_PER_LANE];
#pragma unroll
    for (int j = 0; j < MAX_DIMS_PER_LANE; ++j) {
        acc[j] = 0.0f;
    }

    const u32 n_chunks = (end + WARP_SIZE - 1) / WARP_SIZE;
    const u32 first_chunk = (u32)((u64)n_chunks * split / n_splits);
    const u32 last_chunk = (u32)((u64)n_chunks * (split + 1) / n_splits);
    for (u32 chunk = first_chunk + warp; chunk < last_chunk; chunk += ATTENTION_WARPS) {
        const u32 p = chunk * WARP_SIZE + lane;
        bool visible = p < end;
        if (visible && p >= n_past && mask == MASK_TREE) {
            visible = tree_sees(parents, n_new, i, p - n_past);
        }
        size_t at = 0;
        float score = -INFINITY;
        if (visible) {
            const size_t slot = (size_t)table[p / block_size] * block_size + p % block_size;
            at = slot * kv_row_len + kv_offset;
            score = dot_row(q_shared, k_pool + at, head_dim) * scale;
        }
        const float chunk_max = warp_max(score);
        if (chunk_max == -INFINITY) {
            continue;
        }
        const float new_max = fmaxf(running_max, chunk_max);
        // expf(-inf) = 0 on the first chunk, while the accumulators are still zero.
        const float rescale = expf(running_max - new_max);
        const float weight = visible ? expf(score - new_max) : 0.0f;
        running_sum = running_sum * rescale + warp_sum(weight);
        running_max = new_max;
#pragma unroll
        for (int j = 0; j < MAX_DIMS_PER_LANE; ++j) {
            acc[j] *= rescale;
        }
        // Unrolled so that the value rows of several keys are loaded at once; masked keys
        // (weight 0) load nothing.
#pragma unroll 8
        for (int t = 0; t < WARP_SIZE; ++t) {
            const float w = __shfl_sync(FULL_MASK, weight, t);
            const size_t key_at = __shfl_sync(FULL_MASK, at, t);
            const float *v = v_pool + key_at;
#pragma unroll
            for (int j = 0; j < MAX_DIMS_PER_LANE; ++j) {
                const u32 d = lane + j * WARP_SIZE;
                if (w != 0.0f && d < head_dim) {
                    acc[j] = fmaf(w, v[d], acc[j]);
                }
            }
        }
    }

    if (lane == 0) {
        max_shared[warp] = running_max;
        sum_shared[warp] = running_sum;
    }
#pragma unroll
    for (int j = 0; j < MAX_DIMS_PER_LANE; ++j) {
        const u32 d = lane + j * WARP_SIZE;
        if (d < head_dim) {
            acc_shared[warp][d] = acc[j];
        }
    }
    __syncthreads();

    float block_max_value = -INFINITY;
#pragma unroll
    for (int w = 0; w < ATTENTION_WARPS; ++w) {
        block_max_value = fmaxf(block_max_value, max_shared[w]);
    }
    float factor[ATTENTION_WARPS];
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < ATTENTION_WARPS; ++w) {
        factor[w] = max_shared[w] == -INFINITY ? 0.0f : expf(max_shared[w] - block_max_value);
        total += sum_shared[w] * factor[w];
    }
    if (n_splits == 1) {
        const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
        float *out_head = out + (size_t)task * head_dim;
        for (u32 d = threadIdx.x; d < head_dim; d += blockDim.x) {
            float value = 0.0f;
#pragma unroll
            for (int w = 0; w < ATTENTION_WARPS; ++w) {
                value += acc_shared[w][d] * factor[w];
            }
            out_head[d] = value * inv_total;
        }
        return;
    }
    // This split's state: max, sum, then the output scaled by exp(-max). A split with nothing to
    // attend writes max -inf and sum 0, which the merge skips.
    float *state = partials + (size_t)blockIdx.x * (head_dim + 2);
    if (threadIdx.x == 0) {
        state[0] = block_max_value;
        state[1] = total;
    }
    for (u32 d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float value = 0.0f;
#pragma unroll
        for (int w = 0; w < ATTENTION_WARPS; ++w) {
            value += acc_shared[w][d] * factor[w];
        }
        state[2 + d] = value;
    }
    // Every thread fences its own writes, and the barrier puts all those fences before the count:
    // a block that sees this block counted also sees its whole state.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        merges = atomicAdd(&counters[task], 1u) == n_splits - 1;
    }
    __syncthreads();
    if (!merges) {
        return;
    }
    // Orders the reads of the other splits' states after the count that showed them all done.
    // The reads also bypass L1 (__ldcg), which could hold a line read before it was written
    // (one shared with a neighbouring task's states, read by an earlier merge on this SM).
    __threadfence();
    const float *states = partials + (size_t)task * n_splits * (head_dim + 2);
    float max_value = -INFINITY;
    for (u32 s = 0; s < n_splits; ++s) {
        max_value = fmaxf(max_value, __ldcg(states + (size_t)s * (head_dim + 2)));
    }
    float merged_total = 0.0f;
    for (u32 s = 0; s < n_splits; ++s) {
        const float *split_state = states + (size_t)s * (head_dim + 2);
        const float split_max = __ldcg(split_state);
        if (split_max != -INFINITY) {
            merged_total += __ldcg(split_state + 1) * expf(split_max - max_value);
        }
    }
    const float inv_total = merged_total > 0.0f ? 1.0f / merged_total : 0.0f;
    float *out_head = out + (size_t)task * head_dim;
    for (u32 d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float value = 0.0f;
        for (u32 s = 0; s < n_splits; ++s) {
            const float *split_state = states + (size_t)s * (head_dim + 2);
            const float split_max = __ldcg(split_state);
            if (split_max != -INFINITY) {
                value += __ldcg(split_state + 2 + d) * expf(split_max - max_value);
            }
        }
        out_head[d] = value * inv_total;
    }
    // Every split has counted itself, so nothing else touches the counter in this launch.
    if (threadIdx.x == 0) {
        counters[task] = 0;
    }
}
