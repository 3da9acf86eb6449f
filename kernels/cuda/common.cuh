// Shared by every kernel file: integer types, half conversions, warp and block reductions.
// Prepended to each source before compilation, so it carries no include guard of its own.
#include <cuda_fp16.h>

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

// Kernels are launched with programmatic dependent launch (context.rs): one may start while the
// kernel before it drains, so every kernel first waits until that one's writes are visible. The
// wait returns at once when there is no such dependency (PDL off, or a GPU before sm_90).
__device__ __forceinline__ void wait_for_previous_kernel() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel start before this one ends, so that its blocks can read what does not
// depend on this kernel while this one runs: the matmuls their first weights, attention the
// committed keys and values. Called after the wait above, so that every kernel before this one is
// complete by then. The norms and the merge of the tensor-core attention call it for batches of
// up to EARLY_START_ROWS rows (let_next_matmul_start), which the decode matvecs and the f16
// verify kernels (mmq_f16.cu) multiply: on an H100 verify forwards of 8 to 32 rows got 2-3 %
// faster, decode 3 %. Larger batches take the int8 tensor-core kernels, which on an H200 got 1 to
// 3 % slower when started early (their blocks then hold SM slots and bandwidth that the kernel
// before them still uses). The split attention kernels call it for decode batches (up to
// DECODE_ROWS rows); attention_inputs calls it for every batch, since attention only fetches keys
// before it waits. The quantized matrix-vector kernels call it once their last weight loads are
// issued, so that the small kernel after them (a norm, SwiGLU, the attention's inputs) is resident
// and waiting when they end rather than launched then (by then every one of their blocks has been
// scheduled, so the early blocks take no slot they need), and SwiGLU lets the down projection
// start: together decode got 0.7 % faster on an H100 for 8B Q4_K_M and 4.5 % for 0.6B Q8_0, whose
// step is mostly launches. The mmq kernels do not: there the same made verify forwards of 8 and
// 23 rows 2.5-5 % slower.
#define DECODE_ROWS 4
#define EARLY_START_ROWS 32
__device__ __forceinline__ void let_next_kernel_start() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// For a kernel whose output a matmul of `n_rows` input rows reads next.
__device__ __forceinline__ void let_next_matmul_start(u32 n_rows) {
    if (n_rows <= EARLY_START_ROWS) {
        let_next_kernel_start();
    }
}

// NVRTC has no <math.h>.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

__device__ __forceinline__ float f16_bits_to_f32(u16 bits) {
    return __half2float(__ushort_as_half(bits));
}

// RoPE: the sine and cosine of rotation pair `pair` of a head whose first rotary_dim dimensions
// rotate, at `position`. Computed in f32 like the reference implementations (and the CPU
// backend's rope.rs), so that results match theirs.
__device__ __forceinline__ void rope_angle(float position, u32 pair, u32 rotary_dim, float theta, float *sin_angle,
                                           float *cos_angle) {
    const float inv_freq = 1.0f / powf(theta, (float)(2 * pair) / (float)rotary_dim);
    sincosf(position * inv_freq, sin_angle, cos_angle);
}

// A KV pool element: the f16 nearest `x`, saturating at f16's largest finite magnitude so that
// an outlier stays finite (an infinite key would turn the softmax into NaNs); NaN stays NaN.
__device__ __forceinline__ u16 f32_to_kv(float x) {
    const float saturated = fabsf(x) > 65504.0f ? copysignf(65504.0f, x) : x;
    return __half_as_ushort(__float2half_rn(saturated));
}

// bf16 is the top half of an f32.
__device__ __forceinline__ float bf16_bits_to_f32(u16 bits) {
    return __uint_as_float(((u32)bits) << 16);
}

__device__ __forceinline__ u16 load_u16(const u8 *p) {
    return (u16)p[0] | ((u16)p[1] << 8);
}

// The value a logit is ordered and summed by: NaN counts as -inf.
__device__ __forceinline__ float ordering_key(float v) {
    return isnan(v) ? -INFINITY : v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    }
    return v;
}

// Block-wide sum, returned to every thread. blockDim.x must be a multiple of 32.
__device__ float block_sum(float v) {
    __shared__ float partial[WARP_SIZE];
    v = warp_sum(v);
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    // A previous call may still be reading `partial`.
    __syncthreads();
    if (lane == 0) {
        partial[warp] = v;
    }
    __syncthreads();
    const int n_warps = blockDim.x / WARP_SIZE;
    return warp_sum(lane < n_warps ? partial[lane] : 0.0f);
}

// Block-wide maximum, returned to every thread. blockDim.x must be a multiple of 32.
__device__ float block_max(float v) {
    __shared__ float partial[WARP_SIZE];
    v = warp_max(v);
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    __syncthreads();
    if (lane == 0) {
        partial[warp] = v;
    }
    __syncthreads();
    const int n_warps = blockDim.x / WARP_SIZE;
    return warp_max(lane < n_warps ? partial[lane] : -INFINITY);
}

// Division by a divisor fixed for a launch, without the dozen-instruction sequence of an integer
// division: for n < 2^31, n / divisor = (umulhi(n, multiplier) + n) >> shift, with multiplier
// and shift chosen on the host (divisor.rs, after Granlund and Montgomery).
struct FastDivisor {
    u32 divisor;
    u32 multiplier;
    u32 shift;
};

__device__ __forceinline__ u32 fast_divide(u32 n, FastDivisor d) { return (__umulhi(n, d.multiplier) + n) >> d.shift; }

// D += A B on the tensor cores, f16 inputs and f32 accumulators (mma.m16n8k16; used by the
// prefill attention and mmq_f16.cu). Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"
// with .f16), g = lane / 4, t = lane % 4: A (16 x 16, row-major) a0 = (g, 2t..2t+1), a1 = (g + 8,
// 2t..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..); B (16 x 8, k by n) b0 = (2t..2t+1, g), b1 =
// (2t + 8.., g); C (16 x 8) c0, c1 = (g, 2t..2t+1), c2, c3 = (g + 8, 2t..). Each .b32 register
// holds two halves, the lower k in the low half.
__device__ __forceinline__ void mma_f16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    // The same product by warp shuffles, for devices before sm_80 and the CPU emulator
    // (kernels/emulator), whose host compiler takes no PTX: lane 4g + s holds columns 2s, 2s + 1 and 2s + 8, 2s + 9 of A's rows g
    // and g + 8, lane 4n + s rows 2s.. and 2s + 8.. of B's column n.
    const int lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, t = lane % 4;
    for (int s = 0; s < 4; ++s) {
        u32 rows[4], even[2], odd[2];
        for (int i = 0; i < 4; ++i) {
            rows[i] = __shfl_sync(FULL_MASK, a[i], 4 * g + s);
        }
        even[0] = __shfl_sync(FULL_MASK, b0, 8 * t + s);
        even[1] = __shfl_sync(FULL_MASK, b1, 8 * t + s);
        odd[0] = __shfl_sync(FULL_MASK, b0, 8 * t + 4 + s);
        odd[1] = __shfl_sync(FULL_MASK, b1, 8 * t + 4 + s);
        for (int c = 0; c < 4; ++c) {
            const u32 *column = c % 2 ? odd : even;
            const u32 low = rows[c / 2], high = rows[c / 2 + 2];
            d[c] += f16_bits_to_f32(low & 0xffff) * f16_bits_to_f32(column[0] & 0xffff) +
                    f16_bits_to_f32(low >> 16) * f16_bits_to_f32(column[0] >> 16) +
                    f16_bits_to_f32(high & 0xffff) * f16_bits_to_f32(column[1] & 0xffff) +
                    f16_bits_to_f32(high >> 16) * f16_bits_to_f32(column[1] >> 16);
        }
    }
#endif
}

// Four 8 x 8 matrices of 16-bit elements from shared memory, as mma fragments (ldmatrix.x4):
// lane 8m + r gives, as `offset` (in elements from `base`, 16-byte aligned), where row r of
// matrix m starts, and lane 4g + t receives in fragment[m] row g's elements 2t, 2t + 1 of matrix
// m, or with `transpose` column g's elements in rows 2t, 2t + 1; the lower element in the low half.
template <bool transpose>
__device__ __forceinline__ void load_matrices(u32 (&fragment)[4], const __half *base, u32 offset) {
#if __CUDA_ARCH__ >= 800
    const u32 address = (u32)__cvta_generic_to_shared(base + offset);
    if (transpose) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
                     : "r"(address));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
                     : "r"(address));
    }
#else
    // The same by shuffling the row offsets, for the CPU emulator.
    const int lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, t = lane % 4;
    const u16 *elements = (const u16 *)base;
    for (int m = 0; m < 4; ++m) {
        if (transpose) {
            const u32 first = __shfl_sync(FULL_MASK, offset, 8 * m + 2 * t);
            const u32 second = __shfl_sync(FULL_MASK, offset, 8 * m + 2 * t + 1);
            fragment[m] = (u32)elements[first + g] | (u32)elements[second + g] << 16;
        } else {
            const u32 row = __shfl_sync(FULL_MASK, offset, 8 * m + g);
            fragment[m] = (u32)elements[row + 2 * t] | (u32)elements[row + 2 * t + 1] << 16;
        }
    }
#endif
}

// Sums each of N values (N a power of two, at most 32) across the warp's lanes with N - 1 + 5 -
// log2 N shuffles instead of 5 N: each step halves the values a lane keeps, trading the half its
// partner keeps. Total i ends in the lanes whose high log2 N bits are i, among them lane
// i << (5 - log2 N); the other values are undefined.
__device__ constexpr int log2_exact(int n) { return n <= 1 ? 0 : 1 + log2_exact(n / 2); }

template <int N> __device__ __forceinline__ float warp_sums(float (&v)[N]) {
    static_assert(N >= 1 && N <= WARP_SIZE && (N & (N - 1)) == 0, "N is a power of two up to 32");
    const int lane = threadIdx.x % WARP_SIZE;
    int offset = WARP_SIZE / 2;
#pragma unroll
    for (int count = N; count > 1; count /= 2, offset /= 2) {
        const bool upper = (lane & offset) != 0;
#pragma unroll
        for (int i = 0; i < count / 2; ++i) {
            const float keep = upper ? v[i + count / 2] : v[i];
            const float send = upper ? v[i] : v[i + count / 2];
            v[i] = keep + __shfl_xor_sync(FULL_MASK, send, offset);
        }
    }
#pragma unroll
    for (; offset > 0; offset /= 2) {
        v[0] += __shfl_xor_sync(FULL_MASK, v[0], offset);
    }
    return v[0];
}

// The end of a matrix-vector block: adds each of WARPS warps' accumulators acc[r][b] (weight row
// row0 + r, input row first + b) across the block and writes those inside rows x tile to out
// (n_rows x rows). Every thread of the block calls it; it leaves shared memory free for reuse.
template <int WARPS, int ROWS, int TILE>
__device__ void store_block_sums(const float (&acc)[ROWS][TILE], u32 row0, u32 rows, u32 first, u32 tile,
                                 float *out) {
    const int N = ROWS * TILE;
    __shared__ float partial[WARPS][N];
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    float sums[N];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int b = 0; b < TILE; ++b) {
            sums[r * TILE + b] = acc[r][b];
        }
    }
    const float total = warp_sums<N>(sums);
    const int holder_bits = 5 - log2_exact(N);
    if (lane % (1 << holder_bits) == 0) {
        partial[warp][lane >> holder_bits] = total;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        const u32 row = row0 + i / TILE;
        const u32 b = i % TILE;
        if (row < rows && b < tile) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) {
                sum += partial[w][i];
            }
            out[(size_t)(first + b) * rows + row] = sum;
        }
    }
    __syncthreads();
}

// Loads of weight bytes (read-only, read once) that ask L2 to fetch the 256-byte block around
// them, for mmq_f16.cu, whose lanes read 8 or 16 bytes of a row at a time: part of the row's next
// group then arrives with this one, at no instruction or register (H100: fwd23 4.281 -> 4.239 ms);
// and for the decode matvecs on the tiled formats, whose loads are single sectors of a tile's
// runs (H100: fwd1 2.674 -> 2.640 ms). On GGUF rows, whose blocks a warp reads whole, the decode
// matvecs were 2 % slower with it.
__device__ __forceinline__ uint2 load_weights_8(const void *p) {
#if __CUDA_ARCH__ >= 800
    uint2 v;
    asm("ld.global.nc.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
#else
    return *(const uint2 *)p;
#endif
}

__device__ __forceinline__ uint4 load_weights_16(const void *p) {
#if __CUDA_ARCH__ >= 800
    uint4 v;
    asm("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#else
    return *(const uint4 *)p;
#endif
}

// Asynchronous copies to shared memory; a dead source is not read and its bytes become zeros.
__device__ __forceinline__ void copy_async_16(void *dst, const void *src, bool live) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((u32)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(live ? 16u : 0u)
                 : "memory");
#else
    *(uint4 *)dst = live ? *(const uint4 *)src : make_uint4(0, 0, 0, 0);
#endif
}

__device__ __forceinline__ void copy_async_8(void *dst, const void *src, bool live) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"((u32)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(live ? 8u : 0u)
                 : "memory");
#else
    *(uint2 *)dst = live ? *(const uint2 *)src : make_uint2(0, 0);
#endif
}

__device__ __forceinline__ void copy_async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// Closes this thread's copies issued since the last commit into a group.
__device__ __forceinline__ void copy_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Waits until at most `PENDING` of this thread's committed groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void copy_async_wait_pending() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
#endif
}
