#!/usr/bin/env bash
# A real Prometheus server scrapes a running `kiln train --metrics-port`: promtool accepts the
# exposition, and the server's HTTP API returns the loss series. Exit 77 (skipped) only when
# Prometheus is not installed (scripts/setup.sh installs it).
set -euo pipefail
KILN=$1
SRC=$2
command -v prometheus > /dev/null && command -v promtool > /dev/null || {
  echo "SKIPPED: prometheus/promtool not installed (apt-get install prometheus)"
  exit 77
}
WORK=$(mktemp -d /tmp/kiln-prom-XXXXXX)
KILN_PID=""
PROM_PID=""
cleanup() {
  [ -n "$KILN_PID" ] && kill "$KILN_PID" 2> /dev/null || true
  [ -n "$PROM_PID" ] && kill "$PROM_PID" 2> /dev/null || true
  wait 2> /dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_for() {  # wait_for SECONDS CMD...: retries CMD every 0.2 s
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.2
  done
}

# A run long enough to be scraped; it is stopped at the end.
OMP_NUM_THREADS=1 "$KILN" train "$SRC/configs/tiny.toml" --set train.steps=1000000 \
  --set train.val_every=0 --set train.sample_tokens=0 --set train.log_every=100000 \
  --set train.out_dir="$WORK/run" --set data.train="$SRC/data/licenses/train_*.bin" \
  --set data.val="$SRC/data/licenses/val_*.bin" \
  --metrics-port 0 > "$WORK/kiln.log" 2>&1 &
KILN_PID=$!
wait_for 60 grep -qs "metrics at http" "$WORK/kiln.log" || {
  cat "$WORK/kiln.log"
  exit 1
}
URL=$(grep -o "http://[0-9.]*:[0-9]*/metrics" "$WORK/kiln.log" | head -1)
PORT=$(echo "$URL" | sed 's|.*:\([0-9]*\)/metrics|\1|')
has_step() { curl -sf "$URL" > "$WORK/metrics.txt" && grep -q "^kiln_step [1-9]" "$WORK/metrics.txt"; }
wait_for 60 has_step || {
  echo "no kiln_step at $URL"
  cat "$WORK/kiln.log"
  exit 1
}
echo "--- /metrics (first lines)"
head -20 "$WORK/metrics.txt"
for m in kiln_loss kiln_learning_rate kiln_grad_norm kiln_tokens_per_second kiln_mfu_ratio \
  kiln_step_seconds 'kiln_step_phase_seconds{phase="forward"}' 'kiln_memory_bytes{kind="params"}' \
  kiln_restarts_total; do
  grep -qF "$m" "$WORK/metrics.txt" || {
    echo "missing $m"
    exit 1
  }
done
# Every metric the shipped Grafana dashboard plots is one kiln serves (those set only after a
# validation or a checkpoint excepted: this run has had neither yet).
for m in $(grep -o 'kiln_[a-z_]*' "$SRC/docs/grafana-dashboard.json" | sort -u); do
  case $m in kiln_val_loss | kiln_checkpoint_*) continue ;; esac
  grep -q "^$m[ {]" "$WORK/metrics.txt" || {
    echo "docs/grafana-dashboard.json plots $m, which kiln does not serve"
    exit 1
  }
done
echo "--- promtool check metrics"
promtool check metrics < "$WORK/metrics.txt"

# Prometheus on a free loopback port, scraping kiln every second.
cat > "$WORK/prometheus.yml" << YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kiln
    static_configs:
      - targets: ["127.0.0.1:$PORT"]
YML
for attempt in 1 2 3 4 5; do
  PPORT=$((20000 + RANDOM % 20000))
  prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PPORT" > "$WORK/prometheus.log" 2>&1 &
  PROM_PID=$!
  if wait_for 30 curl -sf "http://127.0.0.1:$PPORT/-/ready" > /dev/null; then break; fi
  kill "$PROM_PID" 2> /dev/null || true
  PROM_PID=""
done
[ -n "$PROM_PID" ] || {
  cat "$WORK/prometheus.log"
  exit 1
}
has_loss() {
  curl -sf "http://127.0.0.1:$PPORT/api/v1/query?query=kiln_loss" > "$WORK/query.json" &&
    grep -q '"result":\[{' "$WORK/query.json"
}
wait_for 60 has_loss || {
  echo "Prometheus never returned kiln_loss:"
  cat "$WORK/query.json" || true
  curl -s "http://127.0.0.1:$PPORT/api/v1/targets" || true
  exit 1
}
echo "--- Prometheus query kiln_loss"
cat "$WORK/query.json"
echo
grep -q '"job":"kiln"' "$WORK/query.json"
echo "PASS"
