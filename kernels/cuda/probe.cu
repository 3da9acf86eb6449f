// Measures how fast the device streams memory into the SMs: every thread sums 16-byte loads over
// a grid-stride loop and writes one value, so the kernel's time is its read time.

extern "C" __global__ void read_probe(const float4 *data, size_t n, float *sums) {
    wait_for_previous_kernel();
    float sum = 0.0f;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float4 v = data[i];
        sum += (v.x + v.y) + (v.z + v.w);
    }
    // Written unconditionally so that the loads cannot be optimised away.
    sums[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
