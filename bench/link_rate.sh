#!/usr/bin/env bash
# make bench-link-rate: on a GPU machine (it has no tc), large copies through cuwire over a link of a given
# rate: bench/delay_link with RATE_MBIT, a forwarder whose connections share one link of that rate each way
# (bytes cross it at the rate, after the link's delay; a sender faster than the link waits, as at a real
# one). For each rate: what one plain TCP stream carries through the same forwarder (bench/raw_link.py),
# then bench/link_app's copies through cuwire (the server on the GPU), with CUWIRE_COMPRESS=off and auto,
# each as a share of the link's rate. bench/slow_link.sh is the same measurement on the CPU machine with tc.
#   bash bench/link_rate.sh [RATES_MBIT (default "1000 10000")] [MiB (default 256)] [DELAY_US (default 50 each way)]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RATES=${1:-1000 10000}; MIB=${2:-256}; DELAY=${3:-50}
OUTDIR=$PWD/build/link_rate; mkdir -p "$OUTDIR"; LOG=$OUTDIR
source tests/gpu_env.sh
source bench/links.sh
gcc -O2 -pthread -o "$OUTDIR/delay_link" bench/delay_link.c || exit 1
nvcc -cudart shared -O2 -o "$OUTDIR/link_app" bench/link_app.cu || exit 1
start_server "$OUTDIR/server.log" ${SERVER_ARGS:-}  # (SERVER_ARGS=--emulated: tried without a GPU)
free_port() { $PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
nvidia-smi -L 2>/dev/null | head -1
echo "$MIB MiB copies, link delay $DELAY us each way; MB/s, and as a share of the link's rate"
for rate in $RATES; do
  link_mb=$((rate / 8))  # MB/s
  raw_port=$(free_port)
  $PY bench/raw_link.py serve "127.0.0.1:$raw_port" "$MIB" & RAW=$!
  sleep 1  # (the serving end listening before the forwarder connects to it)
  start_link "$OUTDIR/delay_link" "$raw_port" "$DELAY" "$rate" "$OUTDIR/link-raw-$rate.log"
  raw=$($PY bench/raw_link.py send "127.0.0.1:$AT" "$MIB")
  wait $RAW; kill $LINK
  echo "link $rate Mbit/s ($link_mb MB/s): $raw"
  start_link "$OUTDIR/delay_link" "$PORT" "$DELAY" "$rate" "$OUTDIR/link-$rate.log"
  for mode in off auto; do
    CUWIRE_TRANSPORT=tcp CUWIRE_COMPRESS=$mode CUWIRE_STATS=1 $PY -m cuwire.cli run --server "127.0.0.1:$AT" -- \
      "$OUTDIR/link_app" "$MIB" >"$OUTDIR/$mode-$rate.txt" 2>"$OUTDIR/$mode-$rate.err" \
      || { cat "$OUTDIR/$mode-$rate.txt"; tail "$OUTDIR/$mode-$rate.err"; kill $LINK $SERVER; exit 1; }
    grep -q "link_app: PASS" "$OUTDIR/$mode-$rate.txt" || { echo "link_app failed: $OUTDIR/$mode-$rate.txt"; exit 1; }
    echo "  CUWIRE_COMPRESS=$mode: $(grep -oP '^\S+ \S+ MiB \S+: [\d.]+' "$OUTDIR/$mode-$rate.txt" | \
      awk -v l="$link_mb" '{printf "%s %s %.1f MB/s (%.0f%%); ", $1, $4, $5, 100 * $5 / l}')"
  done
  kill $LINK
done
kill $SERVER
