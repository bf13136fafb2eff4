# Sourced by tests/gpu_test.sh and bench/run.sh on a GPU machine: Python packages the GPU host lacks
# (carried as wheels in .whl, see README "GPU test"), cuwire itself, and the client library.
# Needs $PY and $LOG set.
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
$PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$LOG/install.log" 2>&1 || { cat "$LOG/install.log"; exit 1; }
$PY -m cuwire.client.build --out build/client >"$LOG/client-build.log" 2>&1 || { tail -30 "$LOG/client-build.log"; exit 1; }
