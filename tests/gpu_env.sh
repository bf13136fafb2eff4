# Sourced by tests/gpu_test.sh, tests/gpu_stress.sh and bench/run.sh on a GPU machine: Python packages the
# GPU host lacks (carried as wheels in .whl, see docs/testing.md), cuwire itself, the client library, and
# start_server. Needs $PY and $LOG set.
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
$PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$LOG/install.log" 2>&1 || { cat "$LOG/install.log"; exit 1; }
$PY -m cuwire.client.build --out build/client >"$LOG/client-build.log" 2>&1 || { tail -30 "$LOG/client-build.log"; exit 1; }

start_server() {  # start_server LOG ARGS...: a server on a free port (module cache: $CACHE, else a new
  # folder, set here: in the background command below the assignment would not reach the caller); sets SERVER
  # (its pid) and PORT
  : "${CACHE:=$(mktemp -d)}"
  $PY -m cuwire.server --listen 127.0.0.1:0 --cache-dir "$CACHE" "${@:2}" >"$1" 2>&1 &
  SERVER=$!; PORT=
  for _ in $(seq 1 300); do
    PORT=$(grep -oP 'listening on [^:]+:\K[0-9]+' "$1" | head -1)
    [ -n "$PORT" ] && break
    kill -0 $SERVER 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "${PORT:-}" ]; then echo "$(basename "$0"): server did not start"; cat "$1"; exit 1; fi
}
