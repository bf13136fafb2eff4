#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: WAVES waves (default 6) of 32 clients at once on one server, each running
# memcpy_kinds (every kind of copy, pinned and pageable, checked by itself). Counts the clients that failed,
# those that got device memory where they had host memory of their own (client/device_memory.c says so),
# and the sessions whose shared host memory could not lie at the client's address (the server's log says
# so): rare events (about one session in sixty before ring.HOST_REGION), which 32 clients once do not show.
# Logs go to build/gpu-stress, and to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=$PWD/build/gpu-stress
rm -rf "$LOG"; mkdir -p "$LOG"
PY=${PYTHON:-python3}
source tests/gpu_env.sh
make -s -C tests/test_apps >"$LOG/apps-build.log" 2>&1 || { tail -30 "$LOG/apps-build.log"; exit 1; }
RUNTIME_DIR=$($PY -c 'from cuwire import cli; print(cli.nvidia_runtime_dir() or "")')
start_server "$LOG/server.log"
for wave in $(seq 1 "${WAVES:-6}"); do
  pids=()
  for i in $(seq 1 32); do
    timeout 120 env CUWIRE_SERVER=127.0.0.1:$PORT LD_LIBRARY_PATH="$PWD/build/client${RUNTIME_DIR:+:$RUNTIME_DIR}" \
      tests/test_apps/build/memcpy_kinds >"$LOG/w$wave-$i.out" 2>&1 & pids+=($!)
  done
  wait "${pids[@]}"
done
kill $SERVER; wait $SERVER 2>/dev/null
runs=$(ls "$LOG"/w*.out | wc -l)
passed=$(grep -l "memcpy_kinds: PASS" "$LOG"/w*.out | wc -l)
clashes=$(grep -l "lies where this program has memory of its own" "$LOG"/w*.out | wc -l)
elsewhere=$(grep -c "not at the client's" "$LOG/server.log")
echo "gpu-stress: $runs clients, $passed passed; device memory on a client's own: $clashes;" \
  "shared host memory at another address than the client's: $elsewhere"
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu-stress-logs.tgz" -C build gpu-stress
[ "$passed" -eq "$runs" ] && [ "$clashes" -eq 0 ] && [ "$elsewhere" -eq 0 ]
