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

#define ARGMAX_THREADS 1024

// Folds (v, i) into a thread's best, visited in increasing id order: only a strictly larger value
// replaces, so the first of equal values stays and -inf (NaN included) never enters.
__device__ __forceinline__ void keep_larger(float v, u32 i, float *best, u32 *best_id) {
    v = ordering_key(v);
    if (v > *best) {
        *best = v;
        *best_id = i;
    }
}

// Leaves lane 0 of the warp with the warp's best (value, id) under ranks_before.
__device__ __forceinline__ void warp_keep_best(float *best, u32 *best_id) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        const float v = __shfl_down_sync(0xffffffffu, *best, offset);
        const u32 vi = __shfl_down_sync(0xffffffffu, *best_id, offset);
        if (ranks_before(v, vi, *best, *best_id)) {
            *best = v;
            *best_id = vi;
        }
    }
}

// The id of the largest value of each row, the lowest id on ties, NO_ID where no value is above
// -inf. One block of ARGMAX_THREADS per row: a decode step's single 151,936-entry row is read at
// the bandwidth of one SM only with many loads in flight, so each thread reads float4s (when rows
// are 16-byte aligned) and the block is as large as the hardware allows.
extern "C" __global__ void argmax_rows(const float *x, u32 row_len, u32 *out) {
    wait_for_previous_kernel();
    const float *row = x + (size_t)blockIdx.x * row_len;
    float best = -INFINITY;
    u32 best_id = NO_ID;
    if (row_len % 4 == 0) {
        const float4 *quads = reinterpret_cast<const float4 *>(row);
#pragma unroll 4
        for (u32 q = threadIdx.x; q < row_len / 4; q += blockDim.x) {
            const float4 v = quads[q];
            keep_larger(v.x, 4 * q, &best, &best_id);
            keep_larger(v.y, 4 * q + 1, &best, &best_id);
            keep_larger(v.z, 4 * q + 2, &best, &best_id);
            keep_larger(v.w, 4 * q + 3, &best, &best_id);
        }
    } else {
        for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
            keep_larger(row[i], i, &best, &best_id);
        }
    }
    // Threads saw interleaved ids, so merging needs the id tie-break; NO_ID loses every tie.
    warp_keep_best(&best, &best_id);
    __shared__ float warp_best[ARGMAX_THREADS / WARP_SIZE];
    __shared__ u32 warp_best_id[ARGMAX_THREADS / WARP_SIZE];
    const u32 lane = threadIdx.x % WARP_SIZE;
    const u32 warp = threadIdx.x / WARP_SIZE;
    if (lane == 0) {
        warp_best[warp] = best;
        warp_best_id[warp] = best_id;
    }
    __syncthreads();
    if (warp == 0) {
        const u32 n_warps = blockDim.x / WARP_SIZE;
        best = lane < n_warps ? warp_best[lane] : -INFINITY;
        best_id = lane < n_warps ? warp_best_id[lane] : NO_ID;
        warp_keep_best(&best, &best_id);
        if (lane == 0) {
            out[blockIdx.x] = best_id;
        }
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
