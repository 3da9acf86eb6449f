// RMS norms, one block per row: out = x / sqrt(mean(x^2) + eps) * weight.

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

extern "C" __global__ void rms_norm(const float *x, const float *weight, u32 row_len, float eps, float *out) {
    const size_t offset = (size_t)blockIdx.x * row_len;
    normalize_row(x + offset, weight, row_len, eps, out + offset);
}

// residual += delta, then out = rms_norm(residual). Each thread reads back only the residual
// elements it wrote itself, so the block needs no barrier between the two steps.
extern "C" __global__ void add_rms_norm(float *residual, const float *delta, const float *weight, u32 row_len,
                                        float eps, float *out) {
    const size_t offset = (size_t)blockIdx.x * row_len;
    for (u32 i = threadIdx.x; i < row_len; i += blockDim.x) {
        residual[offset + i] += delta[offset + i];
    }
    normalize_row(residual + offset, weight, row_len, eps, out + offset);
}
