#!/usr/bin/env bash
# make gpu-programs PROGRAMS="...": on a GPU machine, a few programs natively and through cuwire (a local
# server, the Unix socket), each compared as make gpu-test compares them, with its round trips and the calls
# it waited for most: a quick check of a change on the programs it touches, where a device lease is short.
# A name is a test app (tests/test_apps/NAME) or a Python program (a path, run with $PYTHON). Logs go to
# build/gpu-programs, and as one tarball to $OUT when set.
#   bash tests/gpu_programs.sh graph_updates start_up tests/jax_apps/jax_programs.py
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=$PWD/build/gpu-programs; rm -rf "$LOG"; mkdir -p "$LOG"
[ $# -gt 0 ] || { echo "usage: $0 NAME... (a test app, or a Python program's path)"; exit 2; }
source tests/gpu_env.sh
apps=(); for name in "$@"; do [[ $name == *.py ]] || apps+=("build/$name"); done
if [ ${#apps[@]} -gt 0 ]; then
  make -s -C tests/test_apps "${apps[@]}" >"$LOG/apps-build.log" 2>&1 || { tail -20 "$LOG/apps-build.log"; exit 1; }
fi
CACHE=$(mktemp -d); start_server "$LOG/server.log"; export CUWIRE_SERVER=127.0.0.1:$PORT
RUNTIME_DIR=$($PY -c 'from cuwire import cli; print(cli.nvidia_runtime_dir() or "")')
CUDA_LIB=$(dirname "$(readlink -f "$(command -v nvcc)")")/../lib64
pass=0; fail=0
for name in "$@"; do
  if [[ $name == *.py ]]; then cmd=($PY "$name"); label=$(basename "$name" .py); else cmd=(tests/test_apps/build/$name); label=$name; fi
  LD_LIBRARY_PATH="$CUDA_LIB:${LD_LIBRARY_PATH:-}" timeout 300 "${cmd[@]}" >"$LOG/$label.native.out" 2>"$LOG/$label.native.err"; n=$?
  CUWIRE_STATS=1 LD_LIBRARY_PATH="$PWD/build/client${RUNTIME_DIR:+:$RUNTIME_DIR}" timeout 300 "${cmd[@]}" \
    >"$LOG/$label.out" 2>"$LOG/$label.err"; r=$?
  if [ $n -eq $r ] && diff -q "$LOG/$label.native.out" "$LOG/$label.out" >/dev/null; then
    echo "$label: OK (remote output == native output, $(wc -l <"$LOG/$label.out") lines, rc=$r)"; pass=$((pass+1))
  else
    echo "$label: DIFF (native rc=$n, remote rc=$r)"; diff "$LOG/$label.native.out" "$LOG/$label.out" | head -10
    tail -n 5 "$LOG/$label.err"; fail=$((fail+1))
  fi
  grep -h "round trips:\|top calls sent" "$LOG/$label.err" | sed "s/^ */  $label: /"
done
kill $SERVER
echo "gpu-programs summary: $pass passed, $fail failed"
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu-programs.tgz" -C build gpu-programs
exit $fail
