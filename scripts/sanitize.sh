#!/usr/bin/env bash
# Builds kiln and its unit tests with AddressSanitizer + UndefinedBehaviorSanitizer (gcc, -O1)
# into build-asan/ and runs the tests there: the single-process gtest suite (kiln_tests, which
# also runs the sanitized kiln binary end to end) and the multi-process collectives.
#
#   scripts/sanitize.sh                    everything
#   scripts/sanitize.sh -R 'SafeTensors'   only the ctest tests matching a regex
#
# Not part of .ci/run: the build and run take longer than CI can spare (docs/fuzzing.md has
# the measured time). Leaks inside Open MPI's own libraries are suppressed
# (scripts/lsan-suppressions.txt); kiln's are reported.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${KILN_ASAN_BUILD:-$root/build-asan}"
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -ffp-contract=off" \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
    $(command -v ccache > /dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake --build "$build" --target kiln kiln_tests kiln_mpi_tests
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_odr_violation=0}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/scripts/lsan-suppressions.txt:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# The integration tests (Prometheus, Slurm, Chromium) and the fuzzers (built with clang,
# scripts/fuzz.sh) are not rebuilt here.
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-E '^(integration|fuzz)\.')
ctest --test-dir "$build" --output-on-failure -j "${KILN_TEST_JOBS:-2}" --timeout 1200 "${args[@]}"
