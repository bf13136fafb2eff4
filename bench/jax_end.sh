#!/usr/bin/env bash
# make bench-jax-end: on a GPU machine, what a JAX program's end waits for at a distance. bench/distance_jax.py
# through cuwire with the server behind bench/delay_link (DELAY_US each way), traced (CUWIRE_TRACE=1); then
# the calls after its last graph launch: the last step's read, and XLA's teardown, which runs after Python
# finalized (it synchronizes, queries and destroys its streams and events one by one), and which of them
# took over a millisecond (a round trip each at 1 ms each way).
#   bash bench/jax_end.sh [DELAY_US (default 1000)] [STEPS (default 20)]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DELAY=${1:-1000}; STEPS=${2:-20}
OUTDIR=$PWD/build/jax_end; mkdir -p "$OUTDIR"; LOG=$OUTDIR
source tests/gpu_env.sh
source bench/links.sh
gcc -O2 -pthread -o "$OUTDIR/delay_link" bench/delay_link.c || exit 1
start_server "$OUTDIR/server.log"
start_link "$OUTDIR/delay_link" "$PORT" "$DELAY" 0 "$OUTDIR/link.log"
(cd bench && CUWIRE_TRACE=1 CUWIRE_TRANSPORT=tcp $PY -m cuwire.cli run --server "127.0.0.1:$AT" -- \
  $PY distance_jax.py "$STEPS") >"$OUTDIR/trace.txt" 2>&1 || { tail "$OUTDIR/trace.txt"; kill $LINK $SERVER; exit 1; }
kill $LINK $SERVER
echo "link delay $DELAY us each way"
grep -E 'ms/step|last loss' "$OUTDIR/trace.txt"
$PY bench/trace_tail.py "$OUTDIR/trace.txt" cuGraphLaunch
