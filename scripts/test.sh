#!/usr/bin/env bash
# The project's test command: prepares the Python oracles and the CUDA compiler the tests use,
# then runs the lints and every test of the workspace. Safe to run again; reuses the virtualenv.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

venv=${CANOPY_VENV:-$root/.venv}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r scripts/requirements-test.txt

# Oracle-backed tests skip when Python or its packages are missing; here they must run.
export CANOPY_PYTHON="$venv/bin/python"
export CANOPY_REQUIRE_ORACLE=1

# NVRTC and the CUDA headers from the wheels: every .cu file must compile for sm_90. Tests that
# need a GPU still skip on a machine without one.
cuda_root=$("$venv/bin/python" -c 'import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
export LD_LIBRARY_PATH="$cuda_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CUDA_HOME="$cuda_root"
export CANOPY_REQUIRE_NVRTC=1

# The kernel emulator (kernels/emulator) compiles the CUDA sources as C++20 (g++ 12 or later).
if ! command -v c++ >/dev/null 2>&1; then
    sudo_cmd=$(command -v sudo || true)
    $sudo_cmd apt-get update -qq
    $sudo_cmd apt-get install -y -qq g++
fi

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
