// Row movement: embedding lookup (decoding the table's block format), row gathers, and KV pool
// writes and compaction. Out-of-range indices are skipped: nothing is read or written for them.

#define EMBED_THREADS 256

// One block per output row.
template <int FMT>
__device__ void embed(const u8 *table, size_t row_bytes, u32 table_rows, u32 cols, const u32 *ids,
                      float *out) {
    wait_for_previous_kernel();
    typedef Format<FMT> F;
    const u32 id = ids[blockIdx.x];
    if (id >= table_rows) {
        return;
    }
    const WeightRow row = weight_row<FMT>(table, row_bytes, id);
    float *dst = out + (size_t)blockIdx.x * cols;
    for (u32 chunk = threadIdx.x; chunk < cols / F::CHUNK; chunk += blockDim.x) {
        float values[F::CHUNK];
        F::decode(row, cols, chunk, values);
#pragma unroll
        for (int i = 0; i < F::CHUNK; ++i) {
            dst[(size_t)chunk * F::CHUNK + i] = values[i];
        }
    }
}

#define EMBED_KERNEL(NAME, FMT)                                                                    \
    extern "C" __global__ void NAME(const u8 *table, size_t row_bytes, u32 table_rows, u32 cols,    \
                                    const u32 *ids, float *out) {                                  \
        embed<FMT>(table, row_bytes, table_rows, cols, ids, out);                                  \
    }

EMBED_KERNEL(embed_f32, FMT_F32)
EMBED_KERNEL(embed_f16, FMT_F16)
EMBED_KERNEL(embed_bf16, FMT_BF16)
EMBED_KERNEL(embed_q8_0, FMT_Q8_0)
EMBED_KERNEL(embed_q4_k, FMT_Q4_K)
EMBED_KERNEL(embed_q5_k, FMT_Q5_K)
EMBED_KERNEL(embed_q6_k, FMT_Q6_K)

// dst row i = src row index[i], one thread per element; `total` = n_rows * row_len.
template <typename T>
__device__ void gather(const T *src, u32 src_rows, const u32 *index, u32 row_len, size_t total, T *dst) {
    wait_for_previous_kernel();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) {
        return;
    }
    const u32 src_row = index[i / row_len];
    if (src_row < src_rows) {
        dst[i] = src[(size_t)src_row * row_len + i % row_len];
    }
}

// dst row index[i] = src row i, one thread per element, each converted by `convert`.
template <typename S, typename D, D (*convert)(S)>
__device__ void scatter(const S *src, const u32 *index, u32 row_len, size_t total, u32 dst_rows, D *dst) {
    wait_for_previous_kernel();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) {
        return;
    }
    const u32 dst_row = index[i / row_len];
    if (dst_row < dst_rows) {
        dst[(size_t)dst_row * row_len + i % row_len] = convert(src[i]);
    }
}

__device__ u16 same_bits(u16 x) {
    return x;
}

extern "C" __global__ void gather_rows(const float *src, u32 src_rows, const u32 *index, u32 row_len, size_t total,
                                       float *dst) {
    gather(src, src_rows, index, row_len, total, dst);
}

// write_kv: f32 rows into an f16 pool.
extern "C" __global__ void write_kv_rows(const float *src, const u32 *index, u32 row_len, size_t total,
                                         u32 dst_rows, u16 *dst) {
    scatter<float, u16, f32_to_kv>(src, index, row_len, total, dst_rows, dst);
}

// copy_kv: pool rows into a staging buffer, then from it to their new slots.
extern "C" __global__ void gather_kv_rows(const u16 *src, u32 src_rows, const u32 *index, u32 row_len,
                                          size_t total, u16 *dst) {
    gather(src, src_rows, index, row_len, total, dst);
}

extern "C" __global__ void scatter_kv_rows(const u16 *src, const u32 *index, u32 row_len, size_t total,
                                           u32 dst_rows, u16 *dst) {
    scatter<u16, u16, same_bits>(src, index, row_len, total, dst_rows, dst);
}
