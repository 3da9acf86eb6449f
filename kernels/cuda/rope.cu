// Rotary position embeddings, one thread per rotated pair of one head of one row.
// Pair i of a token at position p turns by p * theta^(-2i / rotary_dim); NeoX pairs dimension i
// with i + rotary_dim / 2, the interleaved ("normal") style pairs 2i with 2i + 1.

extern "C" __global__ void rope(float *x, const u32 *positions, u32 n_rows, u32 n_heads, u32 head_dim,
                                u32 rotary_dim, float theta, u32 neox) {
    wait_for_previous_kernel();
    const u32 pairs = rotary_dim / 2;
    const size_t task = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (task >= (size_t)n_rows * n_heads * pairs) {
        return;
    }
    const u32 pair = task % pairs;
    const size_t head = task / pairs;
    const u32 row = head / n_heads;
    float sin_angle, cos_angle;
    rope_angle((float)positions[row], pair, rotary_dim, theta, &sin_angle, &cos_angle);
    float *h = x + head * head_dim;
    const u32 ia = neox ? pair : 2 * pair;
    const u32 ib = neox ? pair + pairs : 2 * pair + 1;
    const float a = h[ia];
    const float b = h[ib];
    h[ia] = a * cos_angle - b * sin_angle;
    h[ib] = a * sin_angle + b * cos_angle;
}
