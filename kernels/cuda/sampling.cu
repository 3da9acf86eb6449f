// Row-wise reductions over logits, one block per row. NaN logits count as -inf: they never win
// and carry no probability mass.

#define ROW_THREADS 256

extern "C" __global__ void softmax_rows(float *x, u32 row_len) {
    wait_for_previous_kernel();
    float *row = x + (size_t)blockIdx.x * row_len;
    float max = -INFINITY;
    for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
        max = fmaxf(max, ordering_key(row[i]));
    }
    max = block_max(max);
    float sum = 0.0f;
    for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
        const float e = expf(ordering_key(row[i]) - max);
        row[i] = e;
        sum += e;
    }
    const float inv_sum = 1.0f / block_sum(sum);
    for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
        row[i] *= inv_sum;
    }
}

// Whether (value a, id ia) ranks before (b, ib): larger value first, lower id among equals.
__device__ __forceinline__ bool ranks_before(float a, u32 ia, float b, u32 ib) {
    return a > b || (a == b && ia < ib);
}

#define NO_ID 0xffffffffu

// The best entry of the row that ranks after (after_value, after_id), or the overall best when
// after_id is NO_ID. Every thread gets the result; the id is NO_ID when nothing qualifies.
__device__ void best_after(const float *row, u32 row_len, float after_value, u32 after_id, float *value,
                           u32 *id) {
    __shared__ float values[ROW_THREADS];
    __shared__ u32 ids[ROW_THREADS];
    float best = -INFINITY;
    u32 best_id = NO_ID;
    for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
        const float v = ordering_key(row[i]);
        const bool eligible = after_id == NO_ID || ranks_before(after_value, after_id, v, i);
        if (eligible && (best_id == NO_ID || ranks_before(v, i, best, best_id))) {
            best = v;
            best_id = i;
        }
    }
    __syncthreads();
    values[threadIdx.x] = best;
    ids[threadIdx.x] = best_id;
    __syncthreads();
    for (u32 stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            const float v = values[threadIdx.x + stride];
            const u32 vi = ids[threadIdx.x + stride];
            const u32 mine = ids[threadIdx.x];
            if (vi != NO_ID && (mine == NO_ID || ranks_before(v, vi, values[threadIdx.x], mine))) {
                values[threadIdx.x] = v;
                ids[threadIdx.x] = vi;
            }
        }
        __syncthreads();
    }
    *value = values[0];
    *id = ids[0];
}

extern "C" __global__ void argmax_rows(const float *x, u32 row_len, u32 *out) {
    wait_for_previous_kernel();
    float value;
    u32 id;
    best_after(x + (size_t)blockIdx.x * row_len, row_len, 0.0f, NO_ID, &value, &id);
    if (threadIdx.x == 0) {
        out[blockIdx.x] = id;
    }
}

// The k best of each row, best first, as ids and log-softmax values: k passes of best_after,
// each ranking after the previous pick, so no per-thread candidate lists are needed.
extern "C" __global__ void top_k_rows(const float *logits, u32 row_len, u32 k, u32 *ids, float *log_probs) {
    wait_for_previous_kernel();
    const float *row = logits + (size_t)blockIdx.x * row_len;
    float max = -INFINITY;
    for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
        max = fmaxf(max, ordering_key(row[i]));
    }
    max = block_max(max);
    float sum = 0.0f;
    for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
        sum += expf(ordering_key(row[i]) - max);
    }
    const float log_sum = max + logf(block_sum(sum));
    float value = 0.0f;
    u32 id = NO_ID;
    for (u32 r = 0; r < k; ++r) {
        best_after(row, row_len, value, id, &value, &id);
        if (threadIdx.x == 0) {
            ids[(size_t)blockIdx.x * k + r] = id;
            log_probs[(size_t)blockIdx.x * k + r] = value - log_sum;
        }
    }
}
