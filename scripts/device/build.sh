#!/usr/bin/env bash
# Builds the release binaries that scripts/device/check.sh runs on the GPU machine and strips them
# into target/device/, small enough to carry (the device tool moves at most 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
# The GPU hosts all have AVX2; the host side (synth's quantizers, the argmax) runs faster with it.
export RUSTFLAGS="${RUSTFLAGS:-} -C target-cpu=x86-64-v3"
cargo build --release -p canopy-cli
cargo build --release -p canopy-kernels --example cuda_matmul_timing
test_binary() {  # package test
    cargo test --release -p "$1" --test "$2" --no-run --message-format json 2>/dev/null |
        sed -n "s/.*\"executable\":\"\([^\"]*$2[^\"]*\)\".*/\1/p" | tail -1
}
mkdir -p target/device
strip -o target/device/canopy target/release/canopy
strip -o target/device/cuda_matmul_timing target/release/examples/cuda_matmul_timing
strip -o target/device/backend_cuda "$(test_binary canopy-kernels backend_cuda)"
strip -o target/device/qwen3_cuda "$(test_binary canopy-models qwen3_cuda)"
ls -la target/device
