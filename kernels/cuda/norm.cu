// RMS norms: out = x / sqrt(mean(x^2) + eps) * weight, optionally after residual += delta.
//
// A decode step norms one 4096-wide row, so a kernel that loops over the row twice with one block
// is latency-bound on a single SM. When the row is a whole number of float4 and fits in
// registers (up to NORM_MAX_VECS float4 per thread), each thread loads its share once and keeps
// it: rows up to 512 wide take one warp each (the per-head q/k norms), longer ones a block of up
// to 1024 threads. Other rows take the looping kernels.

#define NORM_MAX_VECS 4

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// The row a thread group norms, the thread's index in it and the group's size.
template <bool PER_WARP> struct NormGroup {
    u32 row;
    u32 thread;
    u32 threads;
    __device__ NormGroup() {
        if (PER_WARP) {
            row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
            thread = threadIdx.x % WARP_SIZE;
            threads = WARP_SIZE;
        } else {
            row = blockIdx.x;
            thread = threadIdx.x;
            threads = blockDim.x;
        }
    }
};

// With QUANTIZE, the output also goes to the int8 copy the matmuls read (store_q8_quad), which
// saves their quantize_q8 launch, and, unless `halves` is null, to the f16 copy and its row scales
// (half_row_scale); the rows are then a whole number of Q8_BLOCK.
template <bool PER_WARP, bool ADD, bool QUANTIZE>
__device__ void norm_in_registers(float *x, const float *delta, const float *weight, u32 row_len, u32 n_rows,
                                  float eps, float *out, u32 *q, float2 *q_scales, u16 *halves,
                                  float *half_scales) {
    const NormGroup<PER_WARP> group;
    const u32 n_vecs = row_len / 4;
    // Every load comes before the first store, the weights' before the wait (no kernel writes
    // them): a load after a store through another pointer, which may alias it, cannot be moved
    // above it, so loads and stores interleaved cost a dependent L2 round trip per float4 a
    // thread holds, and the weights' one more after the residual's stores.
    const float4 *weight4 = (const float4 *)weight;
    float4 w[NORM_MAX_VECS];
#pragma unroll
    for (int k = 0; k < NORM_MAX_VECS; ++k) {
        const u32 i = group.thread + k * group.threads;
        if (group.row < n_rows && i < n_vecs) {
            w[k] = weight4[i];
        }
    }
    wait_for_previous_kernel();
    let_next_matmul_start(n_rows);
    // Warp-uniform: a whole warp leaves together, before any shuffle.
    if (group.row >= n_rows) {
        return;
    }
    const size_t offset = (size_t)group.row * row_len;
    float4 *x4 = (float4 *)(x + offset);
    const float4 *delta4 = (const float4 *)(delta + offset);
    float4 v[NORM_MAX_VECS], d[NORM_MAX_VECS];
#pragma unroll
    for (int k = 0; k < NORM_MAX_VECS; ++k) {
        const u32 i = group.thread + k * group.threads;
        if (i < n_vecs) {
            v[k] = x4[i];
            if (ADD) {
                d[k] = delta4[i];
            }
        }
    }
    float sum_squares = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_MAX_VECS; ++k) {
        const u32 i = group.thread + k * group.threads;
        if (i < n_vecs) {
            if (ADD) {
                v[k] = add4(v[k], d[k]);
                x4[i] = v[k];
            }
            sum_squares += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        }
    }
    sum_squares = PER_WARP ? warp_sum(sum_squares) : block_sum(sum_squares);
    const float inv_rms = 1.0f / sqrtf(sum_squares / (float)row_len + eps);
    float4 *out4 = (float4 *)(out + offset);
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_MAX_VECS; ++k) {
        const u32 i = group.thread + k * group.threads;
        const bool live = i < n_vecs;
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (live) {
            o = make_float4(v[k].x * inv_rms * w[k].x, v[k].y * inv_rms * w[k].y, v[k].z * inv_rms * w[k].z,
                            v[k].w * inv_rms * w[k].w);
            out4[i] = o;
        }
        // A group's threads come in whole warps, and a block of 32 columns in 8 consecutive
        // lanes, since groups are multiples of 32 threads and rows of 32 columns.
        if (QUANTIZE) {
            store_q8_quad(o, offset / 4 + i, live, q, q_scales);
            v[k] = o;
            amax = fmaxf(amax, fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w))));
        }
    }
    // Uniform across the group: the same pointer for every thread.
    if (QUANTIZE && halves != NULL) {
        const float scale = half_row_scale(PER_WARP ? warp_max(amax) : block_max(amax));
#pragma unroll
        for (int k = 0; k < NORM_MAX_VECS; ++k) {
            const u32 i = group.thread + k * group.threads;
            store_f16_quad(v[k], offset / 4 + i, i < n_vecs, 1.0f / scale, halves);
        }
        if (group.thread == 0) {
            half_scales[group.row] = scale;
        }
    }
}

#define NORM_KERNELS(SUFFIX, PER_WARP)                                                             \
    extern "C" __global__ void rms_norm_##SUFFIX(const float *x, const float *weight, u32 row_len,  \
                                                 u32 n_rows, float eps, float *out) {              \
        norm_in_registers<PER_WARP, false, false>((float *)x, NULL, weight, row_len, n_rows, eps, out, NULL, \
                                                  NULL, NULL, NULL);                                     \
    }                                                                                              \
    extern "C" __global__ void add_rms_norm_##SUFFIX(float *residual, const float *delta,          \
                                                     const float *weight, u32 row_len, u32 n_rows, \
                                                     float eps, float *out) {                      \
        norm_in_registers<PER_WARP, true, false>(residual, delta, weight, row_len, n_rows, eps, out, NULL, NULL, \
                                                 NULL, NULL);                                            \
    }                                                                                              \
    extern "C" __global__ void rms_norm_q8_##SUFFIX(const float *x, const float *weight, u32 row_len, \
                                                    u32 n_rows, float eps, float *out, u32 *q,     \
                                                    float2 *q_scales, u16 *halves, float *half_scales) { \
        norm_in_registers<PER_WARP, false, true>((float *)x, NULL, weight, row_len, n_rows, eps, out, q, \
                                                 q_scales, halves, half_scales);                   \
    }                                                                                              \
    extern "C" __global__ void add_rms_norm_q8_##SUFFIX(float *residual, const float *delta,       \
                                                        const float *weight, u32 row_len, u32 n_rows, \
                                                        float eps, float *out, u32 *q, float2 *q_scales, \
                                                        u16 *halves, float *half_scales) {         \
        norm_in_registers<PER_WARP, true, true>(residual, delta, weight, row_len, n_rows, eps, out, q, q_scales, \
                                                halves, half_scales);                              \
    }

NORM_KERNELS(warp, true)
NORM_KERNELS(block, false)

__device__ void normalize_row(const float *x, const float *weight, u32 row_len, float eps, float *out) {
    float sum_squares = 0.0f;
    for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
        sum_squares += x[i] * x[i];
    }
    sum_squares = block_sum(sum_squares);
    const float inv_rms = 1.0f / sqrtf(sum_squares / (float)row_len + eps);
    for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
        out[i] = x[i] * inv_rms * weight[i];
    }
}

// One block per row.
extern "C" __global__ void rms_norm(const float *x, const float *weight, u32 row_len, float eps, float *out) {
    wait_for_previous_kernel();
    let_next_matmul_start(gridDim.x);
    const size_t offset = (size_t)blockIdx.x * row_len;
    normalize_row(x + offset, weight, row_len, eps, out + offset);
}

// residual += delta, then out = rms_norm(residual). Each thread reads back only the residual
// elements it wrote itself, so the block needs no barrier between the two steps.
extern "C" __global__ void add_rms_norm(float *residual, const float *delta, const float *weight, u32 row_len,
                                        float eps, float *out) {
    wait_for_previous_kernel();
    let_next_matmul_start(gridDim.x);
    const size_t offset = (size_t)blockIdx.x * row_len;
    for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
        residual[offset + i] += delta[offset + i];
    }
    normalize_row(residual + offset, weight, row_len, eps, out + offset);
}
