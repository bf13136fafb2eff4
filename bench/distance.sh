#!/usr/bin/env bash
# make bench-distance: on a GPU machine, PyTorch workloads natively and through cuwire with the server behind
# bench/delay_link (a forwarder that delays every byte by DELAY each way: the GPU hosts have no tc), at
# 0.1 ms and 1 ms each way. Each row: native, through cuwire, and the floor, native + the program's
# synchronizations x RTT (no remoting can do better: each synchronization needs an answer from the GPU),
# with the round trips cuwire made per step beside the program's synchronizations.
#   bash bench/distance.sh [DELAYS_US (default "direct 0 100 1000"; direct: no forwarder)] [STEPS (default 20)]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DELAYS=${1:-direct 0 100 1000}; STEPS=${2:-20}
OUTDIR=$PWD/build/distance; mkdir -p "$OUTDIR"; LOG=$OUTDIR
source tests/gpu_env.sh
gcc -O2 -pthread -o "$OUTDIR/delay_link" bench/delay_link.c || exit 1
(cd bench && $PY distance_steps.py "$STEPS") >"$OUTDIR/native.txt" 2>"$OUTDIR/native.err" || { cat "$OUTDIR/native.err"; exit 1; }
start_server "$OUTDIR/server.log"
for delay in $DELAYS; do
  if [ "$delay" = direct ]; then AT=$PORT; LINK=; else  # direct: loopback TCP, no forwarder (its own cost)
    "$OUTDIR/delay_link" 0 "$PORT" "$delay" >"$OUTDIR/link-$delay.log" 2>&1 & LINK=$!
    for _ in $(seq 50); do grep -q "listening on" "$OUTDIR/link-$delay.log" && break; sleep 0.1; done
    AT=$(grep -oP 'listening on \K[0-9]+' "$OUTDIR/link-$delay.log")
  fi
  (cd bench && CUWIRE_TRANSPORT=tcp CUWIRE_STATS=1 $PY -m cuwire.cli run --server "127.0.0.1:$AT" -- $PY distance_steps.py "$STEPS") \
    >"$OUTDIR/cuwire-$delay.txt" 2>"$OUTDIR/cuwire-$delay.err" || { tail "$OUTDIR/cuwire-$delay.err"; kill $LINK $SERVER; exit 1; }
  [ -n "$LINK" ] && kill $LINK
done
kill $SERVER
nvidia-smi -L 2>/dev/null | head -1
$PY - "$OUTDIR" $DELAYS <<'PYEOF'
import re, sys
out, delays = sys.argv[1], sys.argv[2:]
LINE = re.compile(r"^(.*): ([\d.]+) ms/step, ([\d.]+) syncs/step(?:, ([\d.]+) round trips/step)?$", re.M)
def read(path):
    return {m[1]: (float(m[2]), float(m[3]), float(m[4] or 0)) for m in LINE.finditer(open(path).read())}
native = read(f"{out}/native.txt")
print(f"{'workload':34} {'link':>7} {'native':>9} {'cuwire':>17} {'floor':>9} {'x floor':>8} {'trips/step':>11} {'syncs/step':>11}")
for delay in delays:
    rtt = 0 if delay == "direct" else 2 * int(delay) / 1000  # ms, added both ways (loopback adds ~0.02)
    remote = read(f"{out}/cuwire-{delay}.txt")
    link = "direct" if delay == "direct" else f"{rtt:.1f}ms"
    for name, (ms, syncs, _) in native.items():
        if name not in remote:
            print(f"{name:34} {link:>7}  missing through cuwire")
            continue
        r_ms, _, trips = remote[name]
        floor = ms + syncs * rtt
        print(f"{name:34} {link:>7} {ms:>7.2f}ms {r_ms:>8.2f}ms (x{r_ms / ms:.2f}) {floor:>7.2f}ms "
              f"{r_ms / floor:>7.2f}x {trips:>11.2f} {syncs:>11.1f}")
PYEOF
