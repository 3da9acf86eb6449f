// Launching an emulated kernel: the entry points build.rs generates for every kernel call
// `launch` with the kernel and its arguments packed as for cuLaunchKernel (one pointer to each).
#pragma once

#include <cstddef>
#include <utility>

#include "emulation.h"

namespace canopy_emulation {

// Same layout as `LaunchShape` in src/lib.rs.
struct LaunchShape {
    unsigned grid[3];
    unsigned block[3];
    size_t dynamic_shared_bytes;
};

// Runs `body(closure)` as every thread of every block; 0 on success, else the error is kept for
// `canopy_emulation_last_error`.
int run_grid(const LaunchShape &shape, void (*body)(void *), void *closure);

template <typename... Args> struct KernelCall {
    void (*kernel)(Args...);
    void **args;

    template <size_t... I> void call(std::index_sequence<I...>) const {
        kernel(*static_cast<Args *>(args[I])...);
    }
    static void run(void *closure) {
        const KernelCall *self = static_cast<const KernelCall *>(closure);
        self->call(std::index_sequence_for<Args...>{});
    }
};

// Records why a launch did not run.
int refuse(const char *kernel, size_t wanted, size_t got);

template <typename... Args>
int launch(const char *name, const LaunchShape *shape, void (*kernel)(Args...), void **args, size_t n_args) {
    if (n_args != sizeof...(Args)) {
        return refuse(name, sizeof...(Args), n_args);
    }
    KernelCall<Args...> call = {kernel, args};
    return run_grid(*shape, &KernelCall<Args...>::run, &call);
}

}  // namespace canopy_emulation
