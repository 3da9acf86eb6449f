// The CUDA dialect the kernel sources use, for a host C++ compiler: qualifiers, built-in
// variables, vector types, intrinsics and warp collectives. Every CUDA thread of a block runs as
// a fiber on one host thread (runtime.cpp); a fiber switches only inside the collectives, so the
// built-in variables below are plain globals that the scheduler sets before it resumes a fiber.
// Blocks run one after another, which makes `__shared__` a `static`.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
};

namespace canopy_emulation {
// The running fiber's thread and block, and the launch's shape.
extern uint3 thread_index;
extern uint3 block_index;
extern dim3 block_shape;
extern dim3 grid_shape;

// Waits until every live thread of the block has arrived.
void block_barrier();
// Lane `lane` of the running fiber's warp publishes `bytes` (up to 8), waits until the live lanes
// in `mask` have published, and returns what lane `source` published.
uint64_t warp_exchange(unsigned mask, uint64_t bytes, unsigned source);
// Waits until the live lanes in `mask` have arrived.
void warp_barrier(unsigned mask);
// The launch's dynamic shared memory.
void *dynamic_shared();
}  // namespace canopy_emulation

#define threadIdx (canopy_emulation::thread_index)
#define blockIdx (canopy_emulation::block_index)
#define blockDim (canopy_emulation::block_shape)
#define gridDim (canopy_emulation::grid_shape)

// Vector types with CUDA's alignment.
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// Half precision, rounded to nearest even as the device does.
struct __half {
    unsigned short bits;
};
struct __half2 {
    __half x, y;
};
inline float __half2float(__half h) {
    _Float16 value;
    std::memcpy(&value, &h.bits, 2);
    return (float)value;
}
inline __half __float2half_rn(float f) {
    const _Float16 value = (_Float16)f;
    __half h;
    std::memcpy(&h.bits, &value, 2);
    return h;
}
inline __half __ushort_as_half(unsigned short bits) { return {bits}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half2 __floats2half2_rn(float lo, float hi) { return {__float2half_rn(lo), __float2half_rn(hi)}; }
inline __half2 __float2half2_rn(float f) { return {__float2half_rn(f), __float2half_rn(f)}; }
inline __half2 __low2half2(__half2 h) { return {h.x, h.x}; }
inline __half2 __high2half2(__half2 h) { return {h.y, h.y}; }

// Half arithmetic rounds once, as the device's: the exact result (double holds the sums and
// products of halves) rounded to f16.
namespace canopy_emulation {
inline __half round_half(double v) {
    const _Float16 value = (_Float16)v;
    __half h;
    std::memcpy(&h.bits, &value, 2);
    return h;
}
inline double wide(__half h) { return (double)__half2float(h); }
}  // namespace canopy_emulation
inline __half2 __hsub2(__half2 a, __half2 b) {
    using namespace canopy_emulation;
    return {round_half(wide(a.x) - wide(b.x)), round_half(wide(a.y) - wide(b.y))};
}
inline __half2 __hmul2(__half2 a, __half2 b) {
    using namespace canopy_emulation;
    return {round_half(wide(a.x) * wide(b.x)), round_half(wide(a.y) * wide(b.y))};
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
    using namespace canopy_emulation;
    return {round_half(std::fma(wide(a.x), wide(b.x), wide(c.x))), round_half(std::fma(wide(a.y), wide(b.y), wide(c.y)))};
}

// Bit casts and conversions.
inline float __int_as_float(int v) {
    float f;
    std::memcpy(&f, &v, 4);
    return f;
}
inline float __uint_as_float(unsigned v) {
    float f;
    std::memcpy(&f, &v, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned v;
    std::memcpy(&v, &f, 4);
    return v;
}
inline int __float2int_rn(float f) { return (int)std::nearbyint(f); }

// The device's math functions under their CUDA names. The fast-math intrinsics are computed
// exactly; the device's are within a few ulp.
using std::isnan;
inline float fmaxf(float a, float b) { return std::fmax(a, b); }
inline float fminf(float a, float b) { return std::fmin(a, b); }
inline float fabsf(float a) { return std::fabs(a); }
inline float fmaf(float a, float b, float c) { return std::fma(a, b, c); }
inline float sqrtf(float a) { return std::sqrt(a); }
inline float expf(float a) { return std::exp(a); }
inline float __expf(float a) { return std::exp(a); }
inline float logf(float a) { return std::log(a); }
inline float powf(float a, float b) { return std::pow(a, b); }
inline void sincosf(float a, float *s, float *c) {
    *s = std::sin(a);
    *c = std::cos(a);
}

// CUDA's integer min and max overloads.
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }

inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }

// Byte-wise integer intrinsics.
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i) {
        c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    }
    return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; ++i) {
        c += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
    }
    return c;
}
inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned out = 0;
    for (int i = 0; i < 4; ++i) {
        out |= (((a >> (8 * i)) - (b >> (8 * i))) & 0xffu) << (8 * i);
    }
    return out;
}
// Byte i of the result is byte (s >> 4i) & 7 of the eight bytes y:x.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t bytes = ((uint64_t)y << 32) | x;
    unsigned out = 0;
    for (int i = 0; i < 4; ++i) {
        out |= (unsigned)((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    }
    return out;
}

// Memory: one host thread runs every fiber, so loads, fences and atomics are plain.
template <typename T> inline T __ldcg(const T *p) { return *p; }
inline void __threadfence() {}
template <typename T> inline T atomicAdd(T *address, T value) {
    const T old = *address;
    *address = old + value;
    return old;
}

// Barriers and warp collectives: the only places a fiber yields.
inline void __syncthreads() { canopy_emulation::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { canopy_emulation::warp_barrier(mask); }

namespace canopy_emulation {
template <typename T> inline T exchange(unsigned mask, T value, unsigned source) {
    static_assert(sizeof(T) <= 8, "warp collectives move up to 8 bytes");
    uint64_t bytes = 0;
    std::memcpy(&bytes, &value, sizeof(T));
    bytes = warp_exchange(mask, bytes, source);
    T out;
    std::memcpy(&out, &bytes, sizeof(T));
    return out;
}
inline unsigned lane_id() { return (thread_index.x + block_shape.x * (thread_index.y + block_shape.y * thread_index.z)) % 32; }
}  // namespace canopy_emulation

template <typename T> inline T __shfl_sync(unsigned mask, T value, int source, int width = 32) {
    const unsigned lane = canopy_emulation::lane_id();
    const unsigned base = lane & ~(unsigned)(width - 1);
    return canopy_emulation::exchange(mask, value, base + ((unsigned)source & (unsigned)(width - 1)));
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    const unsigned lane = canopy_emulation::lane_id();
    const unsigned source = lane ^ (unsigned)lane_mask;
    const bool inside = (source & ~(unsigned)(width - 1)) == (lane & ~(unsigned)(width - 1));
    return canopy_emulation::exchange(mask, value, inside ? source : lane);
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    const unsigned lane = canopy_emulation::lane_id();
    const unsigned offset = lane & (unsigned)(width - 1);
    return canopy_emulation::exchange(mask, value, offset + delta < (unsigned)width ? lane + delta : lane);
}
