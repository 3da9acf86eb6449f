#!/usr/bin/env bash
# Compiles every CUDA kernel for sm_90 with NVRTC, without a GPU or driver: installs the CUDA 13.0
# NVRTC, runtime-header and CCCL wheels into a virtualenv, points the loader and the include
# search at them, and runs the compile test with NVRTC required. Safe to run again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

venv=${CANOPY_VENV:-$root/.venv}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
# 13.0.x to match the GPU machines' driver (CUDA 13.0).
"$venv/bin/pip" install --quiet --disable-pip-version-check \
    nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85

cuda_root=$("$venv/bin/python" -c 'import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
export LD_LIBRARY_PATH="$cuda_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CUDA_HOME="$cuda_root"
export CANOPY_REQUIRE_NVRTC=1

cargo test -p canopy-kernels --locked --test nvrtc_compile
