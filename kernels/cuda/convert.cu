// Operand preparation for the tensor-core GEMM that matmul uses for prefill: block-format weights
// decoded to f16 rows, and f32 activations rounded to f16 or bf16 (to match the weight operand).
// Outputs are raw 16-bit patterns.

#define CONVERT_THREADS 256

// One chunk of F::CHUNK (8 or 16) elements per thread and step, stored as 16-byte vectors: the
// output is the bulk of this kernel's traffic. In the tiled formats the 32 threads of a warp take
// one block of two neighbouring rows (16 chunks each), whose quant runs are adjacent 32-byte
// sectors, rather than two blocks of one row, whose runs are sectors 512 bytes apart. The launcher
// checks that rows * cols / 8 fits in 32 bits, which covers the chunks of whole row pairs.
template <int FMT>
__device__ void dequantize_f16(const u8 *weight, size_t row_bytes, u32 rows, u32 cols, u16 *out) {
    wait_for_previous_kernel();
    typedef Format<FMT> F;
    const u32 chunks_per_row = cols / F::CHUNK;
    const u32 chunks_per_block = QK_K / F::CHUNK;
    const u32 pair_rows = Tiling<FMT>::TILED ? 2 : 1;
    const u32 total = (rows + pair_rows - 1) / pair_rows * pair_rows * chunks_per_row;
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        u32 row = i / chunks_per_row;
        u32 chunk = i % chunks_per_row;
        if (Tiling<FMT>::TILED) {
            const u32 in_pair = i % (2 * chunks_per_row);
            row = i / (2 * chunks_per_row) * 2 + in_pair / chunks_per_block % 2;
            chunk = in_pair / (2 * chunks_per_block) * chunks_per_block + in_pair % chunks_per_block;
            if (row >= rows) {
                continue;
            }
        }
        float values[F::CHUNK];
        F::decode(weight_row<FMT>(weight, row_bytes, row), cols, chunk, values);
        u32 packed[F::CHUNK / 2];
#pragma unroll
        for (int k = 0; k < F::CHUNK / 2; ++k) {
            packed[k] = (u32)__half_as_ushort(__float2half_rn(values[2 * k])) |
                        ((u32)__half_as_ushort(__float2half_rn(values[2 * k + 1])) << 16);
        }
        uint4 *dst = (uint4 *)(out + (size_t)row * cols + (size_t)chunk * F::CHUNK);
#pragma unroll
        for (int v = 0; v < F::CHUNK / 8; ++v) {
            dst[v] = make_uint4(packed[4 * v], packed[4 * v + 1], packed[4 * v + 2], packed[4 * v + 3]);
        }
    }
}

#define DEQUANTIZE_KERNEL(NAME, FMT)                                                               \
    extern "C" __global__ void NAME(const u8 *weight, size_t row_bytes, u32 rows, u32 cols,         \
                                    u16 *out) {                                                    \
        dequantize_f16<FMT>(weight, row_bytes, rows, cols, out);                                   \
    }

DEQUANTIZE_KERNEL(dequantize_f16_q8_0, FMT_Q8_0)
DEQUANTIZE_KERNEL(dequantize_f16_q4_k, FMT_Q4_K)
DEQUANTIZE_KERNEL(dequantize_f16_q5_k, FMT_Q5_K)
DEQUANTIZE_KERNEL(dequantize_f16_q6_k, FMT_Q6_K)

extern "C" __global__ void round_f16(const float *x, size_t n, u16 *out) {
    wait_for_previous_kernel();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = __half_as_ushort(__float2half_rn(x[i]));
    }
}

// The f16 copy of rows of `row_len` floats that mmq_f16.cu reads, each divided by its
// half_row_scale (to `half_scales`), for inputs whose writer made none: grid (chunks of
// 4 blockDim.x columns, rows). The row's largest magnitude comes from its int8 copy's block scales
// (d = max / 127, store_q8_quad), so that every block of a row picks the same scale without
// reading the whole row.
extern "C" __global__ void round_f16_rows(const float4 *x, const float2 *q_scales, u32 row_len, u16 *out,
                                          float *half_scales) {
    wait_for_previous_kernel();
    // Its reader is an f16 verify kernel, which loads its first weights before it waits.
    let_next_kernel_start();
    const u32 row = blockIdx.y;
    const u32 n_blocks = row_len / Q8_BLOCK;
    float d_max = 0.0f;
    for (u32 b = threadIdx.x; b < n_blocks; b += blockDim.x) {
        d_max = fmaxf(d_max, q_scales[(size_t)row * n_blocks + b].x);
    }
    const float scale = half_row_scale(127.0f * block_max(d_max));
    const u32 quad = blockIdx.x * blockDim.x + threadIdx.x;
    if (quad < row_len / 4) {
        const size_t i = (size_t)row * (row_len / 4) + quad;
        store_f16_quad(x[i], i, true, 1.0f / scale, out);
    }
    if (quad == 0) {
        half_scales[row] = scale;
    }
}

// Round to nearest even on the bits; NaN stays a (quiet) NaN.
extern "C" __global__ void round_bf16(const float *x, size_t n, u16 *out) {
    wait_for_previous_kernel();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const u32 bits = __float_as_uint(x[i]);
        out[i] = isnan(x[i]) ? (u16)((bits >> 16) | 0x40) : (u16)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
    }
}
