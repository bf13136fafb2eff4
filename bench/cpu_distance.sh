#!/usr/bin/env bash
# Round trips a step at a distance, on a machine without a GPU: an emulated server on loopback behind
# bench/delay_link (the forwarder bench/distance.sh uses on the GPU hosts: it delays every byte by DELAY_US
# each way; this machine's kernel has no tc netem), and tests/test_apps/step_loop through cuwire over TCP
# (the shape of a training step's end: queued work, one byte read back, then waits whose work is known
# done). Each step synchronizes once: its floor is one round trip a step. Each row prints the round trips a
# step and the time a step beside the RTT (the row with no delay: what a step costs on this machine, the
# emulated device's work in Python included; there is no native run here, no GPU). The program runs with
# STEPS and 4 x STEPS steps a loop; the difference, divided by the steps, leaves start-up out.
#   bash bench/cpu_distance.sh [DELAYS_US (default "0 100 1000")] [STEPS (default 200: fewer, and start-up
# varies more than the steps cost)]
set -euo pipefail
cd "$(dirname "$0")/.."
DELAYS=${1:-0 100 1000}; STEPS=${2:-200}
PY=${PYTHON:-$PWD/.venv/bin/python}
OUT=$PWD/build/cpu_distance; mkdir -p "$OUT"
make -s -C tests/test_apps >/dev/null
gcc -O2 -pthread -o "$OUT/delay_link" bench/delay_link.c
source bench/links.sh
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
"$PY" -m cuwire.server --listen 127.0.0.1:0 --emulated >"$OUT/server.log" 2>&1 & PIDS+=($!)
for _ in $(seq 100); do grep -q "listening on" "$OUT/server.log" && break; sleep 0.1; done
PORT=$(grep -oP 'listening on [^:]+:\K[0-9]+' "$OUT/server.log" | head -1)
run() {  # run AT STEPS: "seconds round-trips" of one step_loop run through cuwire at port AT
  local start end
  start=$(date +%s.%N)
  CUWIRE_STATS=1 CUWIRE_TRANSPORT=tcp "$PY" -m cuwire.cli run --server "127.0.0.1:$1" -- \
    tests/test_apps/build/step_loop "$2" >"$OUT/steps.txt" 2>"$OUT/steps.err" || { cat "$OUT/steps.err" >&2; exit 1; }
  end=$(date +%s.%N)
  grep -q "0 bytes read back wrong; waits after the copy that were not done: 0" "$OUT/steps.txt" \
    || { cat "$OUT/steps.txt" >&2; exit 1; }
  echo "$(echo "$end - $start" | bc) $(grep -oP 'round trips: \K[0-9,]+' "$OUT/steps.err" | tr -d ,)"
}
echo "emulated device on loopback behind bench/delay_link; tests/test_apps/step_loop, $STEPS and $((4 * STEPS)) steps a loop"
for delay in $DELAYS; do
  start_link "$OUT/delay_link" "$PORT" "$delay" 0 "$OUT/link-$delay.log"; PIDS+=($LINK)
  first=$(run "$AT" "$STEPS") && second=$(run "$AT" $((4 * STEPS))) || exit 1
  read -r t1 r1 <<<"$first"; read -r t2 r2 <<<"$second"
  "$PY" - "$delay" "$STEPS" "$t1" "$r1" "$t2" "$r2" <<'PYEOF'
import sys
delay_us, steps, t1, r1, t2, r2 = int(sys.argv[1]), int(sys.argv[2]), *map(float, sys.argv[3:])
n = 2 * 3 * steps  # step_loop's two loops, 4 x STEPS less STEPS steps each
rtt = 2 * delay_us / 1e3  # ms: the forwarder's delay both ways (loopback itself adds microseconds)
print(f"{delay_us:>5} us each way (RTT {rtt:.1f} ms): {(r2 - r1) / n:.2f} round trips a step (the program "
      f"synchronizes once a step); {(t2 - t1) / n * 1e3:.2f} ms a step")
PYEOF
  kill $LINK
done
