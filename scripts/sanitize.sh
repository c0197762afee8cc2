#!/usr/bin/env bash
# Builds kiln and its unit tests with AddressSanitizer + UndefinedBehaviorSanitizer (gcc, -O1)
# into build-asan/ and runs the tests there: the single-process gtest suite (kiln_tests, which
# also runs the sanitized kiln binary end to end) and the multi-process collectives.
#
#   scripts/sanitize.sh                    everything
#   scripts/sanitize.sh -R 'SafeTensors'   only the ctest tests matching a regex (any ctest args)
#
# Not part of .ci/run: the build and run take longer than CI can spare (docs/fuzzing.md has
# the measured time). Leaks inside Open MPI's own libraries are suppressed
# (scripts/lsan-suppressions.txt); kiln's are reported. `-R REGEX` runs only matching tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${KILN_ASAN_BUILD:-$root/build-asan}"
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -march=native -ffp-contract=off -fno-math-errno -fno-trapping-math" \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
    $(command -v ccache > /dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake --build "$build" --target kiln kiln_tests kiln_mpi_tests
# alloc_dealloc_mismatch=0: the allocation-counting tests replace the global operator new, which
# ASan then reports against libstdc++'s temporary buffers (a false positive).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_odr_violation=0:alloc_dealloc_mismatch=0}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/scripts/lsan-suppressions.txt:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
run() { ctest --test-dir "$build" --output-on-failure -j "${KILN_TEST_JOBS:-2}" --timeout 1200 "$@"; }
if [ $# -gt 0 ]; then
  run "$@"
  exit
fi
# The integration tests (Prometheus, Slurm, Chromium) and the fuzzers (clang, scripts/fuzz.sh)
# are not run here. Tests that start several ranks under mpirun run without leak checking: Open
# MPI unloads its components before exit, so their allocations show as leaks from "<unknown
# module>" that no suppression can name.
multi='^(mpi\.|DataParallelRun\.|MultiNode\.|Observability\.TwoRank|Watchdog\.)'
status=0
run -E "^(integration|fuzz)\.|$multi" || status=1
ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" run -R "$multi" || status=1
exit $status
