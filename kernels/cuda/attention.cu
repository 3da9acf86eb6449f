// Paged multi-sequence attention, one warp per (query row, head), with an online softmax over the
// keys the row may see: the committed context, then the new tokens its mask allows.
// Lane l holds dimensions l, l + 32, ... of the query and of the running output.
//
// The batch description is the flattened AttentionLayout: per sequence the five fields
// (q_start, n_new, n_past, table_start, mask), the concatenated block tables, and per query row
// its tree parent (index among its sequence's new tokens, or TREE_ROOT).

#define ATTENTION_WARPS 4
#define MAX_DIMS_PER_LANE 16
#define SEQ_FIELDS 5
#define MASK_CAUSAL 0
#define MASK_BIDIRECTIONAL 1
#define MASK_TREE 2
#define TREE_ROOT 0xffffffffu

struct OnlineSoftmax {
    float max;
    float sum;
    float acc[MAX_DIMS_PER_LANE];
};

__device__ __forceinline__ void attend(OnlineSoftmax &state, const float *q, const float *k, const float *v,
                                       u32 head_dim, float scale) {
    const int lane = threadIdx.x % WARP_SIZE;
    float partial = 0.0f;
#pragma unroll
    for (int j = 0; j < MAX_DIMS_PER_LANE; ++j) {
        const u32 d = lane + j * WARP_SIZE;
        if (d < head_dim) {
            partial += q[j] * k[d];
        }
    }
    const float score = warp_sum(partial) * scale;
    const float new_max = fmaxf(state.max, score);
    // expf(-inf) = 0 on the first key, while the accumulators are still zero.
    const float rescale = expf(state.max - new_max);
    const float weight = expf(score - new_max);
    state.sum = state.sum * rescale + weight;
#pragma unroll
    for (int j = 0; j < MAX_DIMS_PER_LANE; ++j) {
        const u32 d = lane + j * WARP_SIZE;
        if (d < head_dim) {
            state.acc[j] = state.acc[j] * rescale + weight * v[d];
        }
    }
    state.max = new_max;
}

extern "C" __global__ void attention(const float *q, const float *k_pool, const float *v_pool,
                                     const u32 *sequences, u32 n_sequences, const u32 *block_tables,
                                     const u32 *tree_parents, u32 block_size, u32 n_rows, u32 n_heads,
                                     u32 n_kv_heads, u32 head_dim, float scale, float *out) {
    const u32 task = blockIdx.x * ATTENTION_WARPS + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (task >= n_rows * n_heads) {
        return;
    }
    const u32 row = task / n_heads;
    const u32 head = task % n_heads;

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
    const u32 kv_row_len = n_kv_heads * head_dim;
    const size_t kv_offset = (size_t)(head / (n_heads / n_kv_heads)) * head_dim;

    float q_lane[MAX_DIMS_PER_LANE];
    const float *q_head = q + ((size_t)row * n_heads + head) * head_dim;
    OnlineSoftmax state;
    state.max = -INFINITY;
    state.sum = 0.0f;
#pragma unroll
    for (int j = 0; j < MAX_DIMS_PER_LANE; ++j) {
        const u32 d = lane + j * WARP_SIZE;
        q_lane[j] = d < head_dim ? q_head[d] : 0.0f;
        state.acc[j] = 0.0f;
    }

#define ATTEND_POSITION(position)                                                                   \
    do {                                                                                           \
        const u32 p_ = (position);                                                                 \
        const size_t slot_ = (size_t)table[p_ / block_size] * block_size + p_ % block_size;        \
        const size_t at_ = slot_ * kv_row_len + kv_offset;                                         \
        attend(state, q_lane, k_pool + at_, v_pool + at_, head_dim, scale);                        \
    } while (0)

    for (u32 p = 0; p < n_past; ++p) {
        ATTEND_POSITION(p);
    }
    if (mask == MASK_TREE) {
        // Ancestors from the node up; the softmax does not depend on the order of its keys.
        const u32 *parents = tree_parents + q_start;
        u32 node = i;
        u32 steps = 0;
        while (node != TREE_ROOT && node < n_new && steps <= n_new) {
            ATTEND_POSITION(n_past + node);
            node = parents[node];
            ++steps;
        }
    } else {
        const u32 visible = mask == MASK_BIDIRECTIONAL ? n_new : i + 1;
        for (u32 j = 0; j < visible; ++j) {
            ATTEND_POSITION(n_past + j);
        }
    }
#undef ATTEND_POSITION

    const float inv_sum = 1.0f / state.sum;
    float *out_head = out + ((size_t)row * n_heads + head) * head_dim;
#pragma unroll
    for (int j = 0; j < MAX_DIMS_PER_LANE; ++j) {
        const u32 d = lane + j * WARP_SIZE;
        if (d < head_dim) {
            out_head[d] = state.acc[j] * inv_sum;
        }
    }
}
