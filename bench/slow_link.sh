#!/usr/bin/env bash
# A slow link, made here: two network namespaces joined by a veth pair whose both ends are shaped to RATE
# (tc tbf), an emulated server in one and bench/link_app (copies of data that compresses and data that does
# not) in the other, once per CUWIRE_COMPRESS setting, after plain TCP's rate on the same link (bench/raw_link.py). Needs root (ip netns, tc); no GPU: it measures the wire.
#   bash bench/slow_link.sh [RATE (default 1gbit)] [MiB (default 64)]
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-1gbit}; MIB=${2:-64}
PY=${PYTHON:-$PWD/.venv/bin/python}
OUT=$PWD/build/slow_link; mkdir -p "$OUT"
nvcc -cudart shared -O2 -o "$OUT/link_app" bench/link_app.cu
A=cwsrv$$; B=cwcli$$
cleanup() {
  ip netns pids $A 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del $A 2>/dev/null || true
  ip netns del $B 2>/dev/null || true
}
trap cleanup EXIT
ip netns add $A; ip netns add $B
ip link add veth$$a type veth peer name veth$$b
ip link set veth$$a netns $A; ip link set veth$$b netns $B
ip -n $A addr add 10.77.0.1/24 dev veth$$a; ip -n $B addr add 10.77.0.2/24 dev veth$$b
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set veth$$a up; ip -n $B link set veth$$b up
ip netns exec $A tc qdisc add dev veth$$a root tbf rate "$RATE" burst 256kb latency 100ms
ip netns exec $B tc qdisc add dev veth$$b root tbf rate "$RATE" burst 256kb latency 100ms
ip netns exec $A "$PY" -m cuwire.server --listen 10.77.0.1:50551 --emulated >"$OUT/server.log" 2>&1 &
for _ in $(seq 50); do grep -q "listening on" "$OUT/server.log" && break; sleep 0.2; done
echo "link: $RATE each way (tc tbf in two network namespaces); $MIB MiB copies; emulated device"
# what the link carries for plain bytes on this machine: the ceiling the copies are measured against
# (RAW=0 leaves it out: tests/test_compression.py counts bytes, not rates)
if [ "${RAW:-1}" != 0 ]; then
  ip netns exec $A "$PY" bench/raw_link.py serve 10.77.0.1:50552 "$MIB" &
  ip netns exec $B "$PY" bench/raw_link.py send 10.77.0.1:50552 "$MIB"
  wait $!
fi
for mode in off on auto; do
  ip netns exec $B env CUWIRE_COMPRESS=$mode CUWIRE_STATS=1 "$PY" -m cuwire.cli run --server 10.77.0.1:50551 -- \
    "$OUT/link_app" "$MIB" >"$OUT/$mode.txt" 2>"$OUT/$mode.err" || { cat "$OUT/$mode.txt" "$OUT/$mode.err"; exit 1; }
  echo "CUWIRE_COMPRESS=$mode: $(grep -v PASS "$OUT/$mode.txt" | sed 's/ MB\/s/ MB\/s;/' | tr '\n' ' ')"
  grep -q "link_app: PASS" "$OUT/$mode.txt"
done
