#!/usr/bin/env bash
# kiln's tokenizer against tiktoken (npm, its Rust encoder as WASM) in the same run: ROUNDS
# rounds of `kiln bench tokenizer` then tiktoken_bench.mjs, back to back, on one core each.
#
#   bench/peers/tokenizer_vs_tiktoken.sh [TOKENIZER=llama3] [FILE=data/corpora/moby-dick.txt] [ROUNDS=2]
#
# TOKENIZER is gpt2, llama3 or cl100k. Needs ./build/kiln and scripts/setup.sh's data/npm/tiktoken@1.0.22.
set -euo pipefail
cd "$(dirname "$0")/../.."
tok=${1:-llama3} file=${2:-data/corpora/moby-dick.txt} rounds=${3:-2}
pkg=data/npm/tiktoken@1.0.22
[ -f "$pkg/package.json" ] || { echo "no $pkg: run ./scripts/setup.sh" >&2; exit 1; }
echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tokenizer $tok on $file, $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%F)"
printf '%-6s %-34s %10s %10s\n' round who "MB/s" tokens
for r in $(seq 1 "$rounds"); do
  k=$(./build/kiln bench tokenizer --tokenizer "$tok" --input "$file" --repeats 5 --json)
  t=$(node bench/peers/tiktoken_bench.mjs "$pkg" "$file" 5 "$tok" | tail -1)
  field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
  printf '%-6s %-34s %10.2f %10s\n' "$r" "kiln $tok" "$(field "$k" mb_per_s)" "$(field "$k" tokens)"
  printf '%-6s %-34s %10.2f %10s\n' "$r" "kiln $tok, piece cache" "$(field "$k" mb_per_s_cached)" "$(field "$k" tokens)"
  printf '%-6s %-34s %10.2f %10s\n' "$r" "tiktoken $(field "$t" version) ($tok)" "$(field "$t" mb_per_s)" "$(field "$t" tokens)"
done
