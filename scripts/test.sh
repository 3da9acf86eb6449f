#!/usr/bin/env bash
# The project's test command: prepares the Python oracles the tests compare against, then runs the
# lints and every test of the workspace. Safe to run again; reuses the virtualenv.
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

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
