#!/usr/bin/env bash
# Runs the whole test suite (unit, model-against-PyTorch fixtures, end-to-end CLI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build
ctest --test-dir build --output-on-failure -j "${KILN_TEST_JOBS:-2}" "$@"
