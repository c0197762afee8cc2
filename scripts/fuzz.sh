#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz: libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer,
# clang) and runs them over their seed corpus (tests/fuzz/corpus/TARGET).
#
#   scripts/fuzz.sh                    every target, 20 s each (what the test suite runs)
#   scripts/fuzz.sh TARGET [SECONDS]   one target, longer (default 600 s)
#   scripts/fuzz.sh all SECONDS        every target, SECONDS each
#
# New inputs found go to $KILN_FUZZ_WORK/TARGET (not the committed seeds); a crash, leak or
# sanitizer report stops the run with the input saved as $KILN_FUZZ_WORK/crash-* and a non-zero
# exit. Reproduce one with: build-fuzz/TARGET path/to/crash-file. The build goes to
# $KILN_FUZZ_BUILD (default build-fuzz/).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${KILN_FUZZ_BUILD:-$root/build-fuzz}"
work="${KILN_FUZZ_WORK:-$build/work}"
target="${1:-all}"
seconds="${2:-}"
if [ -z "$seconds" ]; then
  if [ "$target" = all ]; then seconds=20; else seconds=600; fi
fi

if ! command -v clang++ > /dev/null; then
  echo "fuzz: clang++ is missing (scripts/setup.sh installs clang and libclang-rt-dev)" >&2
  exit 1
fi
if [ ! -f "$build/build.ninja" ]; then
  CXX=clang++ cmake -S "$root/tests/fuzz" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None \
    $(command -v ccache > /dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) > /dev/null
fi
cmake --build "$build"

targets=()
if [ "$target" = all ]; then
  for f in "$root"/tests/fuzz/*_fuzz.cpp; do
    n="$(basename "$f" _fuzz.cpp)"
    targets+=("$n")
  done
else
  [ -f "$root/tests/fuzz/${target}_fuzz.cpp" ] || {
    echo "fuzz: no target '$target' (tests/fuzz/${target}_fuzz.cpp)" >&2
    exit 1
  }
  targets=("$target")
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "$root/tests/fuzz/corpus/$t"
  echo "fuzz: $t for ${seconds}s"
  # -rss_limit_mb / -malloc_limit_mb: an input that makes a reader ask for gigabytes is a
  # finding; -timeout: one input taking more than 10 s is a hang.
  if ! "$build/$t" "$work/$t" "$root/tests/fuzz/corpus/$t" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=65536 \
      -artifact_prefix="$work/" -print_final_stats=1 > "$work/$t.log" 2>&1; then
    echo "fuzz: $t FAILED; the report:" >&2
    tail -n 60 "$work/$t.log" >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$work/$t.log" | tail -n 2 || true
  fi
done
exit $status
