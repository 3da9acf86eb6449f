#line 1 "matvec_swiglu.cu"
// A decode step's gate and up projections and the SwiGLU after them in one launch, for one input
// row: act[r] = silu(gate[r] . x) * (up[r] . x), written with act's int8 copy, which the down
// projection reads. Compiled after matvec_quant.cu, in one translation unit (its lanes and loads).
//
// Apart, the gate/up matvec's blocks of four rows write their sums and a SwiGLU launch reads them
// back: a dependent hop a layer (0.07-0.09 ms of an 8B decode step on an H100). A block of the int8
// copy needs 32 whole outputs, so a block here computes SWIGLU_OUTPUTS = 32 of them: 64 weight
// rows, taken four at a time (two rows of gate and the same two of up) in SWIGLU_STEPS steps. The
// warps share each step's groups as matvec_q8's do (for 4096 columns each warp takes one group of
// every row), and each warp issues its next step's loads before it multiplies the current one, so
// that a block keeps its loads in flight through its 64 rows instead of a block a row quad.

#define SWIGLU_OUTPUTS Q8_BLOCK
#define SWIGLU_STEPS (SWIGLU_OUTPUTS / 2)
// Gate rows step, step + 1, then up's.
#define SWIGLU_STEP_ROWS 4
// Units whose loads are in flight while a warp multiplies one.
#define SWIGLU_AHEAD 2

// A warp's place in the block's work: group `group` of step `step`.
struct SwigluUnit {
    u32 step, group;
};

// The unit `stride` units after `unit`, `stride.group` below n_groups.
__device__ __forceinline__ SwigluUnit advance(SwigluUnit unit, SwigluUnit stride, u32 n_groups) {
    SwigluUnit next = {unit.step + stride.step, unit.group + stride.group};
    if (next.group >= n_groups) {
        next.group -= n_groups;
        next.step += 1;
    }
    return next;
}

template <int FMT>
__device__ __forceinline__ bool load_swiglu_step(const u8 *gate, const u8 *up, size_t row_bytes, u32 cols,
                                                 u32 first_output, SwigluUnit unit, int lane,
                                                 typename QLanes<FMT>::Raw (&raw)[SWIGLU_STEP_ROWS]) {
    const u32 step = unit.step;
    const u32 group = unit.group;
    bool has_block = true;
#pragma unroll
    for (int r = 0; r < SWIGLU_STEP_ROWS; ++r) {
        const u32 row = first_output + 2 * step + r % 2;
        const u8 *weight = r < 2 ? gate : up;
        has_block = QLanes<FMT>::load(weight + (size_t)row * row_bytes, cols, group, lane, raw[r]);
    }
    return has_block;
}

// `rows` (of gate, of up, and of act) is a multiple of SWIGLU_OUTPUTS; one block per 32 of them.
template <int FMT>
__device__ void matvec_swiglu_q8(const u8 *x_q, const float2 *x_scales, const u8 *gate, const u8 *up,
                                 size_t row_bytes, u32 cols, float *act, u8 *act_q, float2 *act_scales) {
    typedef QLanes<FMT> L;
    // Each warp's sums of the block's gate rows, then of its up rows.
    __shared__ float sums[QMATVEC_WARPS][2 * SWIGLU_OUTPUTS];
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const u32 first_output = blockIdx.x * SWIGLU_OUTPUTS;
    const u32 n_groups = (cols + L::GROUP_COLS - 1) / L::GROUP_COLS;
    // A warp takes every QMATVEC_WARPS-th (step, group) in step-major order, starting from its
    // own index: its steps never decrease, and each is added up once, when the warp leaves it.
    // The stride as steps and groups, so that the loop divides nothing.
    const SwigluUnit stride = {QMATVEC_WARPS / n_groups, QMATVEC_WARPS % n_groups};
    SwigluUnit unit = {warp / n_groups, warp % n_groups};
    // A warp writes only the steps it has groups of.
    for (int i = lane; i < 2 * SWIGLU_OUTPUTS; i += WARP_SIZE) {
        sums[warp][i] = 0.0f;
    }
    // The loads of the next SWIGLU_AHEAD units are in flight while a unit is multiplied.
    typename L::Raw raw[SWIGLU_AHEAD][SWIGLU_STEP_ROWS];
    bool has_block[SWIGLU_AHEAD];
    SwigluUnit ahead = unit;
#pragma unroll
    for (int a = 0; a < SWIGLU_AHEAD; ++a) {
        has_block[a] = ahead.step < SWIGLU_STEPS &&
                       load_swiglu_step<FMT>(gate, up, row_bytes, cols, first_output, ahead, lane, raw[a]);
        ahead = advance(ahead, stride, n_groups);
    }
    // The weights are no kernel's output: the first units' loads are in flight before the wait.
    wait_for_previous_kernel();
    float acc[SWIGLU_STEP_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
    while (unit.step < SWIGLU_STEPS) {
        typename L::Raw incoming[SWIGLU_STEP_ROWS];
        const bool incoming_has_block =
            ahead.step < SWIGLU_STEPS &&
            load_swiglu_step<FMT>(gate, up, row_bytes, cols, first_output, ahead, lane, incoming);
        ahead = advance(ahead, stride, n_groups);
        if (has_block[0]) {
            typename L::Activations x;
            L::load_x(x_q, x_scales, unit.group, lane, x);
#pragma unroll
            for (int r = 0; r < SWIGLU_STEP_ROWS; ++r) {
                typename L::Decoded dec;
                L::decode(raw[0][r], lane, dec);
                acc[r] += L::dot(dec, x, lane);
            }
        }
        const SwigluUnit next = advance(unit, stride, n_groups);
        if (next.step != unit.step) {
            const float total = warp_sums<SWIGLU_STEP_ROWS>(acc);
            const int holder_bits = 5 - log2_exact(SWIGLU_STEP_ROWS);
            if (lane % (1 << holder_bits) == 0) {
                const int r = lane >> holder_bits;
                sums[warp][(r / 2) * SWIGLU_OUTPUTS + 2 * unit.step + r % 2] = total;
            }
#pragma unroll
            for (int r = 0; r < SWIGLU_STEP_ROWS; ++r) {
                acc[r] = 0.0f;
            }
        }
#pragma unroll
        for (int a = 0; a < SWIGLU_AHEAD; ++a) {
#pragma unroll
            for (int r = 0; r < SWIGLU_STEP_ROWS; ++r) {
                raw[a][r] = a + 1 < SWIGLU_AHEAD ? raw[a + 1][r] : incoming[r];
            }
            has_block[a] = a + 1 < SWIGLU_AHEAD ? has_block[a + 1] : incoming_has_block;
        }
        unit = next;
    }
    // Warps without a unit have not waited yet.
    wait_for_previous_kernel();
    let_next_kernel_start();
    __syncthreads();
    if (warp == 0) {
        float g = 0.0f, u = 0.0f;
#pragma unroll
        for (int w = 0; w < QMATVEC_WARPS; ++w) {
            g += sums[w][lane];
            u += sums[w][SWIGLU_OUTPUTS + lane];
        }
        // silu(g) * u as swiglu_q8 computes it (elementwise.cu).
        const float value = g / (1.0f + expf(-g)) * u;
        const u32 output = first_output + lane;
        act[output] = value;
        store_q8_lane(value, output, act_q, act_scales);
    }
}

#define MATVEC_SWIGLU_KERNEL(NAME, FMT)                                                              \
    extern "C" __global__ void __launch_bounds__(QMATVEC_WARPS *WARP_SIZE, 3)                         \
        NAME(const u8 *x_q, const float2 *x_scales, const u8 *gate, const u8 *up, size_t row_bytes, u32 cols, \
             float *act, u8 *act_q, float2 *act_scales) {                                            \
        matvec_swiglu_q8<FMT>(x_q, x_scales, gate, up, row_bytes, cols, act, act_q, act_scales);      \
    }

MATVEC_SWIGLU_KERNEL(matvec_swiglu_q8_0, FMT_Q8_0)
MATVEC_SWIGLU_KERNEL(matvec_swiglu_q4_k, FMT_Q4_K)
MATVEC_SWIGLU_KERNEL(matvec_swiglu_q5_k, FMT_Q5_K)
MATVEC_SWIGLU_KERNEL(matvec_swiglu_q6_k, FMT_Q6_K)
