// Runs a kernel launch on the calling host thread: the blocks one after another, in a scrambled
// order, each block's threads as fibers (ucontext) that switch only at barriers and warp
// collectives. A barrier waits for the threads that have not returned, as the device's does, so
// kernels whose threads leave early keep working; a launch whose live threads all wait at
// barriers that can never complete ends with an error instead of hanging.
#include "runtime.h"

#include <ucontext.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace canopy_emulation {

uint3 thread_index;
uint3 block_index;
dim3 block_shape;
dim3 grid_shape;

namespace {

// Kernels keep their locals in registers on the device; a fiber holds them on its stack.
constexpr size_t STACK_BYTES = 256 * 1024;
constexpr unsigned WARP = 32;
constexpr size_t SHARED_GUARD_BYTES = 256;
constexpr unsigned char SHARED_GUARD = 0xa5;

enum class State { Runnable, AtBlockBarrier, AtWarpBarrier, Done };

struct Fiber {
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    State state = State::Done;
    uint3 index = {0, 0, 0};
    unsigned lane = 0;
    unsigned warp = 0;
};

struct Warp {
    unsigned live = 0;
    unsigned arrived = 0;
    uint64_t slots[WARP] = {};
};

struct Launch {
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    ucontext_t scheduler;
    size_t current = 0;
    unsigned live = 0;
    unsigned at_block_barrier = 0;
    std::string error;
    std::vector<unsigned char> shared;
    void (*body)(void *) = nullptr;
    void *closure = nullptr;
};

Launch launch_state;
std::string last_error;

Fiber &running() { return launch_state.fibers[launch_state.current]; }

void release_block_barrier_if_complete() {
    Launch &l = launch_state;
    if (l.at_block_barrier == 0 || l.at_block_barrier < l.live) {
        return;
    }
    l.at_block_barrier = 0;
    for (Fiber &f : l.fibers) {
        if (f.state == State::AtBlockBarrier) {
            f.state = State::Runnable;
        }
    }
}

void release_warp_barrier_if_complete(unsigned warp_index, unsigned mask) {
    Warp &w = launch_state.warps[warp_index];
    if ((mask & w.live & ~w.arrived) != 0) {
        return;
    }
    w.arrived = 0;
    for (Fiber &f : launch_state.fibers) {
        if (f.warp == warp_index && f.state == State::AtWarpBarrier) {
            f.state = State::Runnable;
        }
    }
}

void yield_to_scheduler() { swapcontext(&running().context, &launch_state.scheduler); }

void run_fiber() {
    launch_state.body(launch_state.closure);
    Fiber &f = running();
    f.state = State::Done;
    launch_state.live -= 1;
    launch_state.warps[f.warp].live &= ~(1u << f.lane);
    release_block_barrier_if_complete();
    release_warp_barrier_if_complete(f.warp, ~0u);
    setcontext(&launch_state.scheduler);
}

// Runs one block to completion; false (with `error` set) on a deadlock.
bool run_block() {
    Launch &l = launch_state;
    const unsigned threads = block_shape.x * block_shape.y * block_shape.z;
    l.live = threads;
    l.at_block_barrier = 0;
    l.warps.assign((threads + WARP - 1) / WARP, Warp{});
    for (unsigned t = 0; t < threads; ++t) {
        Fiber &f = l.fibers[t];
        f.state = State::Runnable;
        f.index = {t % block_shape.x, (t / block_shape.x) % block_shape.y, t / (block_shape.x * block_shape.y)};
        f.lane = t % WARP;
        f.warp = t / WARP;
        l.warps[f.warp].live |= 1u << f.lane;
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack.get();
        f.context.uc_stack.ss_size = STACK_BYTES;
        f.context.uc_link = nullptr;
        makecontext(&f.context, run_fiber, 0);
    }
    while (l.live > 0) {
        bool ran = false;
        for (unsigned t = 0; t < threads; ++t) {
            if (l.fibers[t].state != State::Runnable) {
                continue;
            }
            ran = true;
            l.current = t;
            thread_index = l.fibers[t].index;
            swapcontext(&l.scheduler, &l.fibers[t].context);
        }
        if (!ran) {
            l.error = "deadlock: every live thread of block (" + std::to_string(block_index.x) + ", " +
                      std::to_string(block_index.y) + ", " + std::to_string(block_index.z) +
                      ") waits at a barrier that the others never reach";
            return false;
        }
    }
    return true;
}

// The i-th block to run, of n: a fixed permutation rather than index order, since the device
// runs blocks in no order a kernel may rely on (the last split or chunk to arrive is then seldom
// the one with the highest index). i * step mod n, with step coprime to n, visits every block.
uint64_t scrambled(uint64_t i, uint64_t n) {
    uint64_t step = n / 2 + 1;
    while (std::gcd(step, n) != 1) {
        ++step;
    }
    return (i * step + n / 3) % n;
}

}  // namespace

void block_barrier() {
    Fiber &f = running();
    f.state = State::AtBlockBarrier;
    launch_state.at_block_barrier += 1;
    release_block_barrier_if_complete();
    if (f.state != State::Runnable) {
        yield_to_scheduler();
    }
}

void warp_barrier(unsigned mask) {
    Fiber &f = running();
    Warp &w = launch_state.warps[f.warp];
    f.state = State::AtWarpBarrier;
    w.arrived |= 1u << f.lane;
    release_warp_barrier_if_complete(f.warp, mask);
    if (f.state != State::Runnable) {
        yield_to_scheduler();
    }
}

uint64_t warp_exchange(unsigned mask, uint64_t bytes, unsigned source) {
    const Fiber &f = running();
    Warp &w = launch_state.warps[f.warp];
    w.slots[f.lane] = bytes;
    warp_barrier(mask);
    const uint64_t out = w.slots[source % WARP];
    // No lane may publish its next value before every lane has read this one.
    warp_barrier(mask);
    return out;
}

int refuse(const char *kernel, size_t wanted, size_t got) {
    last_error = std::string(kernel) + " takes " + std::to_string(wanted) + " arguments, got " + std::to_string(got);
    return 1;
}

void *dynamic_shared() { return launch_state.shared.data(); }

int run_grid(const LaunchShape &shape, void (*body)(void *), void *closure) {
    Launch &l = launch_state;
    grid_shape = {shape.grid[0], shape.grid[1], shape.grid[2]};
    block_shape = {shape.block[0], shape.block[1], shape.block[2]};
    const unsigned threads = block_shape.x * block_shape.y * block_shape.z;
    if (threads == 0 || threads > 1024 || grid_shape.x == 0 || grid_shape.y == 0 || grid_shape.z == 0) {
        last_error = "invalid launch shape: blocks of " + std::to_string(threads) + " threads";
        return 1;
    }
    while (l.fibers.size() < threads) {
        l.fibers.emplace_back();
        l.fibers.back().stack.reset(new char[STACK_BYTES]);
    }
    // Guard bytes past the dynamic shared memory catch a kernel that uses more than the launch
    // gave it, which on the device reads or corrupts another block's.
    l.shared.assign(shape.dynamic_shared_bytes + SHARED_GUARD_BYTES, 0);
    std::fill(l.shared.end() - SHARED_GUARD_BYTES, l.shared.end(), SHARED_GUARD);
    l.body = body;
    l.closure = closure;
    l.error.clear();
    const uint64_t blocks = (uint64_t)grid_shape.x * grid_shape.y * grid_shape.z;
    for (uint64_t i = 0; i < blocks; ++i) {
        const uint64_t b = scrambled(i, blocks);
        block_index = {(unsigned)(b % grid_shape.x), (unsigned)(b / grid_shape.x % grid_shape.y),
                       (unsigned)(b / grid_shape.x / grid_shape.y)};
        if (!run_block()) {
            last_error = l.error;
            return 1;
        }
        if (std::any_of(l.shared.end() - SHARED_GUARD_BYTES, l.shared.end(),
                        [](unsigned char byte) { return byte != SHARED_GUARD; })) {
            last_error = "wrote past its " + std::to_string(shape.dynamic_shared_bytes) +
                         " bytes of dynamic shared memory";
            return 1;
        }
    }
    return 0;
}

}  // namespace canopy_emulation

extern "C" const char *canopy_emulation_last_error() { return canopy_emulation::last_error.c_str(); }
