// Elementwise ops, one thread per element.

extern "C" __global__ void add(float *acc, const float *x, size_t len) {
    wait_for_previous_kernel();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len) {
        acc[i] += x[i];
    }
}

// silu(g) * u. For very negative g, expf overflows to inf and g / inf gives the right -0.
extern "C" __global__ void swiglu(const float *gate, const float *up, size_t len, float *out) {
    wait_for_previous_kernel();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
