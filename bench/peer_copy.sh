#!/usr/bin/env bash
# On a GPU machine with two GPUs (the device tool's nvidia-h100-x2): copies between the two GPUs, natively,
# through cuwire with one server for both GPUs, and through two servers of a device list (one GPU each,
# `cuwire run --server a,b`: server to server over TCP on this host, docs/several-servers.md). Prints each
# run's GB/s and its ratio to native; logs under build/peer-copy (a tarball in $OUT when set).
#   bash bench/peer_copy.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=$PWD/build/peer-copy; rm -rf "$LOG"; mkdir -p "$LOG"
source tests/gpu_env.sh
nvcc -cudart shared -arch=sm_90 -O2 -o "$LOG/peer_copy" bench/peer_copy.cu || exit 1
start_server "$LOG/both.log"; BOTH=127.0.0.1:$PORT; SERVER_BOTH=$SERVER
start_server "$LOG/a.log" --devices 0; A=127.0.0.1:$PORT; SERVER_A=$SERVER
start_server "$LOG/b.log" --devices 1; B=127.0.0.1:$PORT; SERVER_B=$SERVER
env -u CUWIRE_SERVER "$LOG/peer_copy" >"$LOG/native.txt" 2>&1; rc=$?
for run in "one:$BOTH" "two:$A,$B"; do
  env -u CUWIRE_SERVER $PY -m cuwire.cli run --stats --server "${run#*:}" -- "$LOG/peer_copy" \
    >"$LOG/${run%%:*}.txt" 2>"$LOG/${run%%:*}.err" || { rc=1; tail -5 "$LOG/${run%%:*}.err"; }
done
kill $SERVER_BOTH $SERVER_A $SERVER_B 2>/dev/null
$PY - "$LOG" <<'PYEOF'
import re, sys
log = sys.argv[1]
def rates(name):
    return {m[1]: float(m[2]) for m in re.finditer(r"^(.+ MiB): ([\d.]+) GB/s", open(f"{log}/{name}.txt").read(), re.M)}
native, one, two = rates("native"), rates("one"), rates("two")
print(f"{'copy from GPU 0 to GPU 1':28} {'native':>10} {'one server':>18} {'two servers (TCP)':>22}")
for what, gbs in native.items():
    cell = lambda r: f"{r[what]:7.2f} GB/s x{r[what] / gbs:.2f}" if what in r else "failed"
    print(f"{what:28} {gbs:6.2f} GB/s {cell(one):>18} {cell(two):>22}")
PYEOF
grep -h "copied between servers" "$LOG/two.err"
[ -n "${OUT:-}" ] && tar czf "$OUT/peer-copy.tgz" -C build peer-copy
exit $rc
