#!/usr/bin/env bash
# The kill-during-an-async-save chaos test, many rounds: each round starts a 2-rank `kiln launch
# --max-restarts 1` run with async checkpoints every 10 steps (each writer slowed by 300 ms a
# file), SIGKILLs a random rank at a random moment while a random save is in flight, and checks
# that the save is never published, the run resumes from the previous checkpoint, ends with the
# bits of an uninterrupted run, and leaves no temporary directory. The test suite runs 2 rounds.
#
#   scripts/chaos_async_saves.sh [rounds=20] [build dir=build]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-20}
build=${2:-$here/build}
cmake --build "$build" --target kiln_tests kiln  # scripts/setup.sh builds only kiln
KILN_CHAOS_ROUNDS=$rounds OMP_NUM_THREADS=2 KILN_CACHE_DIR=/dev/null/kiln-test-cache \
  "$build/tests/kiln_tests" \
  --gtest_filter='DataParallelRun.KillDuringAnAsyncSaveKeepsThePreviousCheckpointAndResumes'
