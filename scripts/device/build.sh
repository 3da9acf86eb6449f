#!/usr/bin/env bash
# Builds the release binaries that scripts/device/check.sh runs on the GPU machine and strips them
# into target/device/, small enough to carry (the device tool moves at most 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p canopy-cli
cargo build --release -p canopy-kernels --example cuda_matmul_timing
tests=$(cargo test --release -p canopy-kernels --test backend_cuda --no-run --message-format json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*backend_cuda[^"]*\)".*/\1/p' | tail -1)
mkdir -p target/device
strip -o target/device/canopy target/release/canopy
strip -o target/device/cuda_matmul_timing target/release/examples/cuda_matmul_timing
strip -o target/device/backend_cuda "$tests"
ls -la target/device
