#!/usr/bin/env bash
# Packs the device binaries into target/carry/, small enough to travel beside the working tree
# (the device tool moves at most 64 MiB in all): canopy xz-compressed, the test binaries as they
# are. Given a git revision, also packs that revision's canopy as canopy-base.tar.xz for the
# same-call A/B of check.sh's `ab` step: H200 hosts differ by up to 5 %, more than many changes
# gain, so a before/after across two calls proves little.
# Usage: scripts/device/pack.sh [BASE_REVISION], then run check.sh with BIN=target/carry and carry
# target/carry.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/device/build.sh >/dev/null
rm -rf target/carry
mkdir -p target/carry
tar cJf target/carry/canopy.tar.xz -C target/device canopy
cp target/device/backend_cuda target/device/qwen3_cuda target/device/cuda_matmul_timing target/carry/
if [ $# -gt 0 ]; then
    worktree=target/base-src
    git worktree remove --force "$worktree" 2>/dev/null || rm -rf "$worktree"
    git worktree add --detach "$worktree" "$1" >/dev/null
    # A target directory of its own, so that the two builds do not invalidate each other.
    (cd "$worktree" && RUSTFLAGS="-C target-cpu=x86-64-v3" CARGO_TARGET_DIR=../base-build \
        cargo build --release -p canopy-cli)
    strip -o target/carry/canopy-base target/base-build/release/canopy
    tar cJf target/carry/canopy-base.tar.xz -C target/carry canopy-base
    rm target/carry/canopy-base
    git worktree remove --force "$worktree"
fi
du -sh target/carry
