// A layer's attention inputs in one launch: the per-head RMS norms of the new tokens' queries and
// keys, RoPE on both, and the keys and values stored at the tokens' KV pool slots. A decode step
// would otherwise spend six launches, each worth a few kilobytes, on this.
//
// One warp per (token, head) task, token after token: its query heads, then its key heads, then
// its value heads. A query or key warp keeps its normalised head in shared memory, so that every
// lane can read the partner of its dimensions in either pairing; the rotation is rope.cu's. A
// value warp copies its head into the pool. The pools hold f16 (f32_to_kv). Slots past the pools
// are skipped, as in write_kv.

#define INPUT_WARPS 4
#define INPUT_MAX_HEAD_DIM 512
#define INPUT_LANE_DIMS (INPUT_MAX_HEAD_DIM / WARP_SIZE)

// Dimension d (< rotary_dim) of a normalised head after its rotation by position `position`.
__device__ __forceinline__ float rotated(const float *h, u32 d, u32 rotary_dim, bool neox, float position,
                                         float theta) {
    const u32 pairs = rotary_dim / 2;
    const bool leading = neox ? d < pairs : d % 2 == 0;
    const u32 pair = neox ? (leading ? d : d - pairs) : d / 2;
    const u32 ia = neox ? pair : 2 * pair;
    const u32 ib = neox ? pair + pairs : 2 * pair + 1;
    float sin_angle, cos_angle;
    rope_angle(position, pair, rotary_dim, theta, &sin_angle, &cos_angle);
    const float a = h[ia];
    const float b = h[ib];
    return leading ? a * cos_angle - b * sin_angle : a * sin_angle + b * cos_angle;
}

extern "C" __global__ void __launch_bounds__(INPUT_WARPS * WARP_SIZE)
    attention_inputs(const float *q_raw, const float *k_raw, const float *v, const float *q_norm,
                     const float *k_norm, float eps, const u32 *positions, const u32 *slots, u32 pool_rows,
                     u32 n_rows, u32 n_heads, u32 n_kv_heads, u32 head_dim, u32 rotary_dim, float theta, u32 neox,
                     float *q, float *k, u16 *k_pool, u16 *v_pool) {
    __shared__ float heads[INPUT_WARPS][INPUT_MAX_HEAD_DIM];
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 per_row = n_heads + 2 * n_kv_heads;
    const size_t task = (size_t)blockIdx.x * INPUT_WARPS + warp;
    const bool live = task < (size_t)n_rows * per_row;
    const u32 row = task / per_row;
    const u32 head = task % per_row;
    const bool is_query = head < n_heads;
    const bool is_value = head >= n_heads + n_kv_heads;
    // Each lane's dimensions are lane + 32 i. Every load of a warp is issued before it stores
    // anything (a load after a store through another pointer, which may alias it, waits for it),
    // and the norm weights, which no kernel writes, before the wait: one dependent round trip
    // after the wait instead of one per step of the loops.
    float weights[INPUT_LANE_DIMS];
    const float *weight = is_query ? q_norm : k_norm;
#pragma unroll
    for (u32 i = 0; i < INPUT_LANE_DIMS; ++i) {
        const u32 d = lane + i * WARP_SIZE;
        weights[i] = live && !is_value && d < head_dim ? weight[d] : 0.0f;
    }
    wait_for_previous_kernel();
    // The attention that follows fetches its committed keys and values meanwhile.
    let_next_kernel_start();
    if (!live) {
        return;
    }
    const u32 slot = slots[row];
    const float position = (float)positions[row];
    const size_t kv_row_len = (size_t)n_kv_heads * head_dim;
    const u32 h = is_query ? head : is_value ? head - n_heads - n_kv_heads : head - n_heads;
    const size_t offset = is_query ? ((size_t)row * n_heads + h) * head_dim : row * kv_row_len + h * head_dim;
    const float *src = (is_query ? q_raw : is_value ? v : k_raw) + offset;
    float x[INPUT_LANE_DIMS];
#pragma unroll
    for (u32 i = 0; i < INPUT_LANE_DIMS; ++i) {
        const u32 d = lane + i * WARP_SIZE;
        x[i] = d < head_dim ? src[d] : 0.0f;
    }
    if (is_value) {
        if (slot < pool_rows) {
            u16 *dst = v_pool + slot * kv_row_len + h * head_dim;
#pragma unroll
            for (u32 i = 0; i < INPUT_LANE_DIMS; ++i) {
                const u32 d = lane + i * WARP_SIZE;
                if (d < head_dim) {
                    dst[d] = f32_to_kv(x[i]);
                }
            }
        }
        return;
    }
    float squares = 0.0f;
#pragma unroll
    for (u32 i = 0; i < INPUT_LANE_DIMS; ++i) {
        squares += x[i] * x[i];
    }
    const float scale = 1.0f / sqrtf(warp_sum(squares) / (float)head_dim + eps);
    float *normed = heads[warp];
#pragma unroll
    for (u32 i = 0; i < INPUT_LANE_DIMS; ++i) {
        const u32 d = lane + i * WARP_SIZE;
        if (d < head_dim) {
            normed[d] = x[i] * scale * weights[i];
        }
    }
    __syncwarp();
    float *dst = (is_query ? q : k) + offset;
    u16 *pooled = !is_query && slot < pool_rows ? k_pool + slot * kv_row_len + h * head_dim : nullptr;
    for (u32 d = lane; d < head_dim; d += WARP_SIZE) {
        const float value = d < rotary_dim ? rotated(normed, d, rotary_dim, neox != 0, position, theta) : normed[d];
        dst[d] = value;
        if (pooled != nullptr) {
            pooled[d] = f32_to_kv(value);
        }
    }
}
