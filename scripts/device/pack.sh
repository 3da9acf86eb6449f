#!/usr/bin/env bash
# Packs the device binaries into target/carry/, small enough to travel beside the working tree
# (the device tool moves at most 64 MiB in all): canopy xz-compressed, the test binaries as they
# are. Given git revisions, also packs each one's canopy as canopy-<short revision>.tar.xz for the
# same-call A/B of check.sh's `ab` step: H200 hosts differ by up to 5 %, more than many changes
# gain, so a before/after across two calls proves little.
# Usage: scripts/device/pack.sh [REVISION...], then run check.sh with BIN=target/carry and carry
# target/carry.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/device/build.sh >/dev/null
rm -rf target/carry
mkdir -p target/carry
tar cJf target/carry/canopy.tar.xz -C target/device canopy
cp target/device/backend_cuda target/device/qwen3_cuda target/device/cuda_matmul_timing target/carry/
# Each revision builds in a worktree with a target directory of its own, so that the builds do not
# invalidate each other, and is packed as canopy-<short revision>.tar.xz.
for revision in "$@"; do
    short=$(git rev-parse --short "$revision")
    worktree=target/base-src
    git worktree remove --force "$worktree" 2>/dev/null || rm -rf "$worktree"
    git worktree add --detach "$worktree" "$revision" >/dev/null
    (cd "$worktree" && RUSTFLAGS="-C target-cpu=x86-64-v3" CARGO_TARGET_DIR=../base-build \
        cargo build --release -p canopy-cli)
    strip -o "target/carry/canopy-$short" target/base-build/release/canopy
    tar cJf "target/carry/canopy-$short.tar.xz" -C target/carry "canopy-$short"
    rm "target/carry/canopy-$short"
    git worktree remove --force "$worktree"
done
du -sh target/carry
