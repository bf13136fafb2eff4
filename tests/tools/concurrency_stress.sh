#!/usr/bin/env bash
# Many clients at once on one server, round after round, each checking its own results: for a fault that
# shows only under load (make gpu-test runs one round of 32). Each client traces its calls
# (CUWIRE_TRACE=1); the logs of any that failed go to $OUT (or build/stress).
#     bash tests/tools/concurrency_stress.sh [APP] [CLIENTS] [ROUNDS]     (on a GPU machine)
set -uo pipefail
cd "$(dirname "$0")/../.."
APP=${1:-memcpy_kinds} CLIENTS=${2:-32} ROUNDS=${3:-4}
PY=${PYTHON:-python3}
LOG=${OUT:-$PWD/build/stress}; mkdir -p "$LOG"
source tests/gpu_env.sh
make -s -C tests/test_apps >"$LOG/apps-build.log" 2>&1 || { tail -30 "$LOG/apps-build.log"; exit 1; }
$PY -m cuwire.server --listen 127.0.0.1:0 --cache-dir "$(mktemp -d)" >"$LOG/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 300); do
  PORT=$(grep -oP 'listening on [^:]+:\K[0-9]+' "$LOG/server.log" | head -1); [ -n "${PORT:-}" ] && break; sleep 0.1
done
RUNTIME_DIR=$($PY -c 'from cuwire import cli; print(cli.nvidia_runtime_dir() or "")')
bad=0
for round in $(seq 1 "$ROUNDS"); do
  pids=()
  for i in $(seq 1 "$CLIENTS"); do
    CUWIRE_SERVER=127.0.0.1:$PORT CUWIRE_TRACE=1 LD_LIBRARY_PATH="$PWD/build/client${RUNTIME_DIR:+:$RUNTIME_DIR}" \
      tests/test_apps/build/"$APP" >"$LOG/r$round-$i.out" 2>"$LOG/r$round-$i.err" & pids+=($!)
  done
  for i in $(seq 1 "$CLIENTS"); do
    if wait "${pids[$((i - 1))]}" && grep -q ": PASS" "$LOG/r$round-$i.out"; then rm -f "$LOG/r$round-$i".*
    else bad=$((bad + 1)); echo "round $round client $i: FAIL"; grep -v " OK$" "$LOG/r$round-$i.out" | head -5; fi
  done
done
kill $SERVER; wait $SERVER 2>/dev/null
echo "stress: $APP, $ROUNDS rounds of $CLIENTS clients: $bad failed"
