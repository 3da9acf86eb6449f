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

// SwiGLU four values a thread, also writing the int8 copy the down projection reads (see
// store_q8_quad): `n_quads` = len / 4, len a multiple of Q8_BLOCK. The f16 copy, when the down
// projection reads one, comes after (round_f16_rows): its row scales need whole rows. `n_rows`:
// the input rows of the down projection that follows (the largest u32 when none is known to).
extern "C" __global__ void swiglu_q8(const float4 *gate, const float4 *up, u32 n_quads, u32 n_rows, float4 *out,
                                     u32 *q, float2 *scales) {
    wait_for_previous_kernel();
    let_next_matmul_start(n_rows);
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    const bool live = i < n_quads;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (live) {
        const float4 g = gate[i];
        const float4 u = up[i];
        v = make_float4(g.x / (1.0f + expf(-g.x)) * u.x, g.y / (1.0f + expf(-g.y)) * u.y,
                        g.z / (1.0f + expf(-g.z)) * u.z, g.w / (1.0f + expf(-g.w)) * u.w);
        out[i] = v;
    }
    store_q8_quad(v, i, live, q, scales);
}
