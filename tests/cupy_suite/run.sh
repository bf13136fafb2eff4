#!/usr/bin/env bash
# A uniform sample of CuPy's own test suite (sample.py, over tests/cupy_suite/upstream from fetch.sh), run with
# pytest natively and then through cuwire (`cuwire run`), and compared test by test (compare.py): every test
# that passes natively must pass through cuwire. Prints each side's counts and one line, `cupy-suite: OK (...)`
# or `cupy-suite: FAIL (...)`; exits non-zero on FAIL. Logs: $LOG/cupy-suite*.
# tests/gpu_test.sh runs it with its server (CUWIRE_SERVER), PY and LOG set. Alone, from the repository root of
# a GPU host, it installs cuwire and starts a server as gpu_test.sh does: bash tests/cupy_suite/run.sh
# Settings: CUPY_SUITE_COUNT (tests sampled, sample.py's default), CUPY_SUITE_PARAMS (parametrizations run of
# each, evenly spaced, 4; 0: all), CUPY_SUITE_DEADLINE (seconds after which a side starts no more tests, 300),
# CUPY_SUITE_TIMEOUT (seconds after which a side is killed, 330), MAPS_OUT (gpu_test.sh's maps probe: the file
# where each process through cuwire notes the CUDA libraries it mapped).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-${PYTHON:-python3}}
SUITE=tests/cupy_suite
UP=$SUITE/upstream
if [ -z "${LOG:-}" ]; then LOG=$PWD/build/cupy-suite; rm -rf "$LOG"; mkdir -p "$LOG"; fi
if [ ! -f "$UP/tests/conftest.py" ]; then
  echo "cupy-suite: FAIL ($UP is missing: run $SUITE/fetch.sh where PyPI is reachable, and carry $UP)"; exit 1
fi
own_server=
if [ -z "${CUWIRE_SERVER:-}" ]; then
  source tests/gpu_env.sh
  start_server "$LOG/cupy-suite-server.log"; own_server=$SERVER
  export CUWIRE_SERVER=127.0.0.1:$PORT
fi

versions=$($PY -c 'import cupy, numpy, pytest
try:
    import scipy
    s = scipy.__version__
except ImportError:
    s = "absent (the sparse and ndimage tests compare with SciPy: they skip)"
print(f"cupy {cupy.__version__}, numpy {numpy.__version__}, scipy {s}, pytest {pytest.__version__}")' 2>&1) \
  || { echo "cupy-suite: FAIL ($versions)"; exit 1; }
echo "cupy-suite: CuPy $(cat "$UP/VERSION")'s tests; installed: $versions"

$PY $SUITE/sample.py ${CUPY_SUITE_COUNT:+--count "$CUPY_SUITE_COUNT"} >"$LOG/cupy-suite-sample.txt" \
  || { echo "cupy-suite: FAIL (sample.py)"; exit 1; }
mapfile -t files < <(grep -o '^[^:]\+\.py' "$LOG/cupy-suite-sample.txt" | sort -u | sed "s|^|$UP/|")
[ ${#files[@]} -gt 0 ] || { echo "cupy-suite: FAIL (an empty sample)"; exit 1; }
# pytest with the suite's own settings (its pyproject's table: strict markers, warnings as errors...), the
# sample's files, and of their tests those of the sample (plugin/cupy_sample.py), a few parametrizations of
# each (some have thousands); as CuPy's CI, not the slow ones, and not those for several GPUs
args=(-m pytest -c "$UP/pyproject.toml" --rootdir "$UP" --confcutdir "$UP" -p no:cacheprovider -p cupy_sample
      --sample "$LOG/cupy-suite-sample.txt" --max-params "${CUPY_SUITE_PARAMS:-4}"
      --continue-on-collection-errors -m "not slow and not multi_gpu" -q -rA)
# a test that hangs fails alone, where pytest-timeout is installed (the GPU host's image has it)
$PY -c 'import pytest_timeout' 2>/dev/null && args+=(--timeout 120)
export PYTHONPATH=$PWD/$SUITE/plugin${PYTHONPATH:+:$PYTHONPATH} PYTHONHASHSEED=0

side() {  # side NAME COMMAND... OPTIONS: ITS PYTEST OPTIONS...: one side's run of the sample; sets rc and secs
  local name=$1; shift
  local command=() t0; t0=$(date +%s.%N)
  while [ "$1" != OPTIONS: ]; do command+=("$1"); shift; done; shift
  timeout -k 20 "${CUPY_SUITE_TIMEOUT:-330}" "${command[@]}" "${args[@]}" "$@" --junitxml "$LOG/$name.xml" \
    --sample-report "$LOG/$name.json" "${files[@]}" >"$LOG/$name.out" 2>"$LOG/$name.err"
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "cupy-suite: $name killed at ${CUPY_SUITE_TIMEOUT:-330} s"
}
# natively first, until the time limit (it compiles CuPy's kernels into CuPy's cache); then through cuwire
# exactly the tests that ran natively, so that both sides run the same tests
side cupy-suite.native "$PY" OPTIONS: --deadline "${CUPY_SUITE_DEADLINE:-300}" --ran "$LOG/cupy-suite.ran"
native_secs=$secs
probe=()  # through cuwire, with gpu_test.sh's maps probe when it gives one
[ -n "${MAPS_OUT:-}" ] && [ -f build/maps_probe.so ] && probe=(CUWIRE_MAPS_OUT="$MAPS_OUT" LD_PRELOAD="$PWD/build/maps_probe.so")
side cupy-suite env "${probe[@]}" "$PY" -m cuwire.cli run -- "$PY" OPTIONS: --only "$LOG/cupy-suite.ran"
remote_secs=$secs

$PY $SUITE/compare.py "$LOG/cupy-suite.native.xml" "$LOG/cupy-suite.xml" --label cupy-suite \
  --native-report "$LOG/cupy-suite.native.json" --remote-report "$LOG/cupy-suite.json" \
  --native-seconds "$native_secs" --remote-seconds "$remote_secs" >"$LOG/cupy-suite-compare.txt"
crc=$?
# every line but the tests beyond the first 40 that passed natively only (all are in cupy-suite-compare.txt)
awk -v f="$LOG/cupy-suite-compare.txt" '/^  passed natively/ { if (++n > 40) next }
  /^cupy-suite: / && n > 40 { print "  ... and " n - 40 " more: " f } { print }' "$LOG/cupy-suite-compare.txt"
if [ $crc -ne 0 ]; then
  echo "  cupy-suite through cuwire, the end of its output:"; tail -n 3 "$LOG/cupy-suite.out" | sed 's/^/    /'
  grep -v "^cuwire trace" "$LOG/cupy-suite.err" | tail -n 5 | sed 's/^/    /'
fi
[ -n "$own_server" ] && { kill "$own_server"; wait "$own_server" 2>/dev/null; }
exit $crc
