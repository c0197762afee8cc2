#!/usr/bin/env bash
# kiln's Llama training step against PyTorch running the same Llama math (pytorch_llama_step.py)
# in the same run: ROUNDS rounds of, for each config and dtype, `kiln bench train` then the peer,
# back to back, both on THREADS threads, each the median of steps 2..STEPS on random tokens.
#
#   bench/peers/llama_vs_pytorch.sh [STEPS=4] [ROUNDS=1] [THREADS=2] [CONFIG...]
#
# CONFIGs default to configs/llama-small.toml and configs/llama-1b.toml (the peer reads their
# [model] sizes and batch). DTYPES="fp32 bf16" by default. LOCK=FILE takes `flock FILE` around
# each command (a shared machine's lock). MFU is against kiln's peak for the dtype (run
# `./build/kiln bench peak` first to measure it once) with kiln's FLOPs per token for both.
# Needs ./build/kiln and Debian's python3-torch; torch's fp32 matmuls go to the system libblas,
# so install libopenblas0-pthread (or put its directory on LD_LIBRARY_PATH) or they run on
# netlib's single-threaded reference BLAS (the peer warns).
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-4} rounds=${2:-1} threads=${3:-2}
shift $(($# < 3 ? $# : 3))
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(configs/llama-small.toml configs/llama-1b.toml)
dtypes=${DTYPES:-fp32 bf16}
run() { if [ -n "${LOCK:-}" ]; then flock "$LOCK" "$@"; else "$@"; fi; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/^Mem/{print $2}') GiB;" \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u '+%F %H:%M') UTC, $threads threads," \
  "median of steps 2..$steps"
printf '%-5s %-26s %-5s %-24s %10s %9s %6s %9s\n' round config dtype system ms/step tokens/s MFU "RSS MiB"
for r in $(seq 1 "$rounds"); do
  for cfg in "${configs[@]}"; do
    for dt in $dtypes; do
      # A run that fails (out of memory) is reported and the others go on.
      k=$(run ./build/kiln bench train --config "$cfg" --set train.dtype="$dt" \
        --set train.threads="$threads" --steps "$steps" --json | tail -1) || k=""
      p=$(OPENBLAS_NUM_THREADS=$threads run /usr/bin/python3 bench/peers/pytorch_llama_step.py \
        --config "$cfg" --threads "$threads" --dtype "$dt" --steps "$steps" 2> /dev/null | tail -1) || p=""
      if [ -z "$k" ] || [ -z "$p" ]; then
        echo "$r $cfg $dt: failed (kiln: ${k:+ok}${k:-failed}, PyTorch: ${p:+ok}${p:-failed})"
        continue
      fi
      python3 - "$r" "$cfg" "$dt" "$k" "$p" << 'EOF'
import json, sys
r, cfg, dt, k, p = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5])
flop_per_token = k["gflops"] * 1e9 / k["tokens_per_sec"]
peak = k["peak_gflops"] * 1e9
mib = 1024 * 1024
rows = [("kiln", k["step_ms"], k["tokens_per_sec"], k["mfu"], k["peak_rss_bytes"]),
        (f"PyTorch {p['torch']} ({p['blas']})", p["step_ms"], p["tokens_per_sec"],
         p["tokens_per_sec"] * flop_per_token / peak, p["peak_rss_bytes"])]
for who, ms, tps, mfu, rss in rows:
    print(f"{r:<5} {cfg.split('/')[-1]:<26} {dt:<5} {who:<24} {ms:10.1f} {tps:9.1f} "
          f"{100 * mfu:5.1f}% {rss / mib:9.0f}")
print(f"{r:<5} {'':<26} {dt:<5} {'kiln / PyTorch':<24} {p['step_ms'] / k['step_ms']:9.2f}x"
      f"   (peak {k['peak_gflops']:.0f} GFLOP/s, {k['peak_source']})")
EOF
    done
  done
done
