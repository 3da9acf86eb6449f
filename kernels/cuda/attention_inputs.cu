// A layer's attention inputs in one launch: the per-head RMS norms of the new tokens' queries and
// keys, RoPE on both, and the keys and values stored at the tokens' KV pool slots. A decode step
// would otherwise spend six launches, each worth a few kilobytes, on this.
//
// One warp per (token, head) task, token after token: its query heads, then its key heads, then
// its value heads. A query or key warp finishes its head (common.cuh's finish_head); a value warp
// copies its head into the pool. Slots past the pools are skipped, as in write_kv.

#define INPUT_WARPS 4

extern "C" __global__ void __launch_bounds__(INPUT_WARPS * WARP_SIZE)
    attention_inputs(const float *q_raw, const float *k_raw, const float *v, const float *q_norm,
                     const float *k_norm, float eps, const u32 *positions, const u32 *slots, u32 pool_rows,
                     u32 n_rows, u32 n_heads, u32 n_kv_heads, u32 head_dim, u32 rotary_dim, float theta, u32 neox,
                     float *q, float *k, float *k_pool, float *v_pool) {
    wait_for_previous_kernel();
    // The attention that follows fetches its committed keys and values meanwhile.
    let_next_kernel_start();
    __shared__ float heads[INPUT_WARPS][MAX_FINISHED_HEAD_DIM];
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 per_row = n_heads + 2 * n_kv_heads;
    const size_t task = (size_t)blockIdx.x * INPUT_WARPS + warp;
    if (task >= (size_t)n_rows * per_row) {
        return;
    }
    const u32 row = task / per_row;
    const u32 head = task % per_row;
    const u32 slot = slots[row];
    const size_t kv_row_len = (size_t)n_kv_heads * head_dim;
    if (head >= n_heads + n_kv_heads) {
        const u32 h = head - n_heads - n_kv_heads;
        if (slot < pool_rows) {
            const float *src = v + row * kv_row_len + h * head_dim;
            float *dst = v_pool + slot * kv_row_len + h * head_dim;
            for (u32 d = lane; d < head_dim; d += WARP_SIZE) {
                dst[d] = src[d];
            }
        }
        return;
    }
    const bool is_query = head < n_heads;
    const u32 h = is_query ? head : head - n_heads;
    const size_t offset = is_query ? ((size_t)row * n_heads + h) * head_dim : row * kv_row_len + h * head_dim;
    float *pooled = !is_query && slot < pool_rows ? k_pool + slot * kv_row_len + h * head_dim : nullptr;
    const HeadRotation rotation = {rotary_dim, neox != 0, (float)positions[row], theta};
    finish_head((is_query ? q_raw : k_raw) + offset, is_query ? q_norm : k_norm, eps, head_dim, rotation,
                heads[warp], (is_query ? q : k) + offset, pooled);
}
