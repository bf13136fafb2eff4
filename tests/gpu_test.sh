#!/usr/bin/env bash
# make gpu-test: on a machine with an NVIDIA GPU, run every test app natively and through cuwire (NVIDIA's
# libcudart on cuwire's libcuda.so.1, as `cuwire run` runs it), with a real server on the same machine,
# diff the outputs, one line per program; then CUDA library programs, NVML and PyTorch.
# Logs go to build/gpu-test, and as one tarball to $OUT when set (the device tool brings it back).
# GPU_TEST_ONLY=apps runs only the test apps and the wire tests; GPU_TEST_ONLY=torch only the PyTorch, JAX and
# CuPy programs (about 9 minutes on two H200s), in two halves with torch-frameworks (NVML, the programs, their
# next runs and over TCP) and torch-more (multi-GPU, a cut link, expandable segments, a step's cost);
# GPU_TEST_ONLY=cupy-suite only CuPy's own tests: each fits a 10-minute device call.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=$PWD/build/gpu-test
rm -rf "$LOG"; mkdir -p "$LOG"
PY=${PYTHON:-python3}

source tests/gpu_env.sh
make -s -C tests/test_apps >"$LOG/apps-build.log" 2>&1 || { tail -30 "$LOG/apps-build.log"; exit 1; }
gcc -shared -fPIC -o build/maps_probe.so tests/tools/maps_probe.c || exit 1
nvidia-smi -L | tee "$LOG/gpu.txt"

CACHE=$(mktemp -d)  # (the module cache of the servers start_server starts, gpu_env.sh)
start_server "$LOG/server.log"
export CUWIRE_SERVER=127.0.0.1:$PORT
$PY -m cuwire.cli info --server "$CUWIRE_SERVER" | sed 's/^/cuwire info: /'

RUNTIME_DIR=$($PY -c 'from cuwire import cli; print(cli.nvidia_runtime_dir() or "")')
remote() {  # remote PROGRAM ARGS...: as `cuwire run` runs it (NVIDIA's runtime finds cuwire's libcuda), plus
  # the maps probe, which notes every CUDA library the process mapped
  CUWIRE_MAPS_OUT="$LOG/maps.txt" LD_PRELOAD=$PWD/build/maps_probe.so \
    LD_LIBRARY_PATH="$PWD/build/client${RUNTIME_DIR:+:$RUNTIME_DIR}" "$@"
}
export CUDA_LIB=$(dirname "$(readlink -f "$(command -v nvcc)")")/../lib64

pass=0; fail=0; : >"$LOG/maps.txt"
compare() {  # compare NAME -- COMMAND...: natively, then through cuwire; one line
  local name=$1; shift 2
  LD_LIBRARY_PATH="$CUDA_LIB:${LD_LIBRARY_PATH:-}" "$@" >"$LOG/$name.native.out" 2>"$LOG/$name.native.err"; nrc=$?
  timeout 300 bash -c "$(declare -f remote); LOG=$LOG RUNTIME_DIR=$RUNTIME_DIR remote \"\$@\"" _ "$@" \
    >"$LOG/$name.out" 2>"$LOG/$name.err"; rrc=$?
  if [ "$name" = unimplemented ]; then
    if diff -q tests/test_apps/expected/unimplemented.out "$LOG/$name.out" >/dev/null \
       && grep -q "cuwire: unimplemented CUDA function" "$LOG/$name.err"; then
      echo "$name: OK (native rc=$nrc, through cuwire: the loud not-supported message)"; pass=$((pass+1))
    else echo "$name: FAIL"; tail -3 "$LOG/$name.err"; fail=$((fail+1)); fi
  elif [ $nrc -eq $rrc ] && diff -q "$LOG/$name.native.out" "$LOG/$name.out" >/dev/null; then
    echo "$name: OK (remote output == native output, $(wc -l <"$LOG/$name.native.out") lines, rc=$rrc)"
    pass=$((pass+1))
  else
    echo "$name: DIFF (native rc=$nrc, remote rc=$rrc)"; diff "$LOG/$name.native.out" "$LOG/$name.out" | head -10
    tail -n 5 "$LOG/$name.native.err" "$LOG/$name.err"; fail=$((fail+1))
  fi
}
if [ "${GPU_TEST_ONLY:-}" = cupy-suite ]; then  # (tests/cupy_suite/run.sh, with this run's server)
  if PY=$PY LOG=$LOG bash tests/cupy_suite/run.sh; then pass=1; else fail=1; fi
  kill $SERVER; echo "gpu-test summary: $pass passed, $fail failed"; exit $fail
fi
TORCH_ONLY=; case "${GPU_TEST_ONLY:-}" in torch|torch-frameworks|torch-more) TORCH_ONLY=1;; esac
if [ -z "$TORCH_ONLY" ]; then
  # (a local server: the Unix socket, payloads in shared memory)
  for app in tests/test_apps/build/*; do
    [ -f "$app" ] && [ -x "$app" ] && compare "$(basename "$app")" -- "$app"
  done
  # some through a session numbered 2, whose memory lies in its windows of address space as a device
  # list's second server's would (address_space.windows, docs/several-servers.md)
  for app in vector_add vmm mempool managed_memory mapped_memory graphs ipc; do
    CUWIRE_SERVER_NUMBER=2 compare "$app-in-windows" -- tests/test_apps/build/$app
  done
  export CUWIRE_TRANSPORT=tcp  # and some over loopback TCP, as a remote client travels
  for app in large_copies vector_add streams memcpy_kinds managed_memory mapped_memory callbacks graph_nodes step_loop input_copies many_kernels; do compare "$app-over-tcp" -- tests/test_apps/build/$app; done
  # and over TLS, to a second server with a self-signed certificate, as a client on another host travels
  MAIN_SERVER=$SERVER MAIN_ADDRESS=$CUWIRE_SERVER
  start_server "$LOG/server-tls.log" --tls auto
  TLS_SERVER=$SERVER SERVER=$MAIN_SERVER
  export CUWIRE_SERVER=127.0.0.1:$PORT
  export CUWIRE_TLS_FINGERPRINT=$(grep -oP 'CUWIRE_TLS_FINGERPRINT=\K\S+' "$LOG/server-tls.log")
  for app in large_copies vector_add textures; do compare "$app-over-tls" -- tests/test_apps/build/$app; done
  unset CUWIRE_TRANSPORT CUWIRE_TLS_FINGERPRINT
  export CUWIRE_SERVER=$MAIN_ADDRESS
  kill $TLS_SERVER; wait $TLS_SERVER 2>/dev/null
  # programs of NVIDIA's libraries, built with nvcc's default static runtime
  [ "${GPU_TEST_ONLY:-}" = apps ] || {
  LIB_HOME=$(dirname "$(readlink -f "$(command -v nvcc)")")/..
  [ -f "$LIB_HOME/include/cublas_v2.h" ] || LIB_HOME=$($PY -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
  if make -s -C tests/lib_apps LIB_HOME="$LIB_HOME" >"$LOG/lib-apps-build.log" 2>&1; then
    for app in tests/lib_apps/build/*; do compare "$(basename "$app")" -- "$app"; done
  else echo "lib apps: FAIL to build (LIB_HOME=$LIB_HOME)"; tail -5 "$LOG/lib-apps-build.log"; fail=$((fail+1)); fi
  }
fi

if [ "${GPU_TEST_ONLY:-}" != apps ]; then  # (GPU_TEST_ONLY=apps: the test apps and the wire tests only)
# PyTorch (stock, as installed on this host) natively and through cuwire
torch_compare() {  # torch_compare NAME SCRIPT ARGS...: natively, then through cuwire; one line, and the --stats
  local name=$1; shift
  t0=$(date +%s.%N); $PY "$@" >"$LOG/$name.native.out" 2>"$LOG/$name.native.err"; nrc=$?; t1=$(date +%s.%N)
  CUWIRE_STATS=1 timeout 240 bash -c "$(declare -f remote); LOG=$LOG RUNTIME_DIR=$RUNTIME_DIR remote $PY $*" \
    >"$LOG/$name.out" 2>"$LOG/$name.err"; rrc=$?; t2=$(date +%s.%N)
  took=$(awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "wall %.1f s native, %.1f s through cuwire", b - a, c - b }')
  if [ $nrc -eq 0 ] && [ $rrc -eq 0 ] && diff -q "$LOG/$name.native.out" "$LOG/$name.out" >/dev/null; then
    echo "$name: OK (remote output == native output, $(wc -l <"$LOG/$name.native.out") lines; $took)"
    grep "API calls\|round trips" "$LOG/$name.err" | sed "s/^ */  $name: /"
    pass=$((pass+1))
  else
    echo "$name: DIFF (native rc=$nrc, remote rc=$rrc)"; diff "$LOG/$name.native.out" "$LOG/$name.out" | head -20
    grep -v "^cuwire trace" "$LOG/$name.err" | sort | uniq -c | sort -rn | head -15; fail=$((fail+1))
  fi
}
if [ "${GPU_TEST_ONLY:-}" != torch-more ]; then
# NVML: cuwire's libnvidia-ml.so.1 answers from the server's NVML (through ctypes, and through pynvml)
compare nvml-ctypes -- $PY tests/tools/nvml_probe.py
compare nvml-pynvml -- $PY tests/tools/nvml_probe.py --pynvml
# nvidia-smi -L through cuwire (told, not counted: nvidia-smi is the driver's tool, not a user program)
CUWIRE_TRACE=1 timeout 60 bash -c "$(declare -f remote); LOG=$LOG RUNTIME_DIR=$RUNTIME_DIR remote nvidia-smi -L" \
  >"$LOG/nvidia-smi.out" 2>"$LOG/nvidia-smi.err"; echo "nvidia-smi -L through cuwire (rc=$?, $(grep -c '^cuwire trace' \
  "$LOG/nvidia-smi.err") calls reached cuwire): $(head -3 "$LOG/nvidia-smi.out" | tr '\n' ' ')$(grep -m3 unimplemented "$LOG/nvidia-smi.err" | tr '\n' ' ')"

for script in tests/torch_apps/*.py; do torch_compare "torch-$(basename "$script" .py)" "$script"; done
# JAX (XLA's default flags: CUDA graphs) and CuPy's linear algebra at real sizes, natively and through cuwire
for script in tests/jax_apps/*.py tests/cupy_apps/*.py; do
  torch_compare "$(basename "$(dirname "$script")" _apps)-$(basename "$script" .py)" "$script"
done
# a program's next run: the modules of its last run (above) loaded at its first load, in one round trip
# (client/load_lists.py), and the same output; pytorch_minimal's handful, and the JAX programs' hundreds
for script in tests/torch_apps/pytorch_minimal.py tests/jax_apps/jax_programs.py; do
  name="$(basename "$script" .py)-again"; failed=$fail
  torch_compare "$name" "$script"
  if [ $fail -eq $failed ] && ! grep -q "loaded ahead" "$LOG/$name.err"; then
    echo "$name: FAIL (no module was loaded ahead: the first run left no list?)"; pass=$((pass-1)); fail=$((fail+1))
  else grep -h "modules uploaded" "$LOG/$name.err" | sed "s/^ */  $name: /"; fi
done
# the frameworks as a client on another host travels, over loopback TCP: page-locked memory is then the client's
# own (XLA's autotuning and transfers use it for the GPU, and order copies after host functions)
for script in tests/torch_apps/train.py tests/jax_apps/jax_programs.py; do
  CUWIRE_TRANSPORT=tcp torch_compare "$(basename "$(dirname "$script")" _apps)-$(basename "$script" .py)-over-tcp" "$script"
done
# a uniform sample of CuPy's own test suite, natively and through cuwire, compared test by test (tests/cupy_suite;
# up to 11 minutes: CUPY_SUITE=0 leaves it out; GPU_TEST_ONLY=torch too, and GPU_TEST_ONLY=cupy-suite runs it alone)
if [ "${CUPY_SUITE:-1}" != 0 ] && [ -z "${GPU_TEST_ONLY:-}" ]; then
  if PY=$PY LOG=$LOG MAPS_OUT=$LOG/maps.txt bash tests/cupy_suite/run.sh; then pass=$((pass+1)); else fail=$((fail+1)); fi
fi
fi  # (torch-more)
if [ "${GPU_TEST_ONLY:-}" != torch-frameworks ]; then
# one process, two GPUs (DataParallel, NCCL inside one process, peer copies), where the server has two
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  for script in tests/multi_gpu_apps/*.py; do torch_compare "multi-gpu-$(basename "$script" .py)" "$script"; done
  # NCCL's shared-memory transport, as between GPUs without peer access: it registers /dev/shm mappings
  NCCL_P2P_DISABLE=1 torch_compare multi-gpu-torch_multi_gpu-shm tests/multi_gpu_apps/torch_multi_gpu.py
else
  echo "multi-gpu: not run, one GPU here (make gpu-test on a machine with two runs tests/multi_gpu_apps)"
fi
# a dropped connection resumes (cuwire/wire/stream.py): the training's session, over TCP, goes through a link
# that is reset twice mid-run (tests/cut_link.py); its losses must be those of the native run
torch_compare torch-train-cut-twice tests/cut_link.py --server "$CUWIRE_SERVER" --cut-after 12,18 -- \
  $PY tests/torch_apps/train.py cnn --dtype fp32 --steps 100
grep -h "^cut_link\|dropped and resumed" "$LOG/torch-train-cut-twice.err" | sed "s/^ */  torch-train-cut-twice: /"
# PyTorch's allocator on virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap...)
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torch_compare torch-train-expandable-segments \
  tests/torch_apps/train.py --steps 5
grep -h "^expandable segments" "$LOG/torch-train-expandable-segments.out" | sed "s/^/  torch-train-expandable-segments: /"

# the cost of one training step of the small transformer (docs/speed.md): 11 steps less 1 step, divided by 10
for steps in 1 11; do
  CUWIRE_STATS=1 timeout 240 bash -c "$(declare -f remote); LOG=$LOG RUNTIME_DIR=$RUNTIME_DIR remote $PY \
    tests/torch_apps/train.py transformer --dtype fp32 --steps $steps" >/dev/null 2>"$LOG/step-stats-$steps.err"
done
awk '/API calls:/ { w[FILENAME] = $5; q[FILENAME] = $14; l[FILENAME] = $20 } /round trips:/ { r[FILENAME] = $3 }
     END { a = ARGV[1]; b = ARGV[2]; printf "one transformer training step (fp32) through cuwire: %.1f round trips, " \
           "%.1f calls waited for, %.1f queued, %.1f answered locally\n", (r[b] - r[a]) / 10, (w[b] - w[a]) / 10, \
           (q[b] - q[a]) / 10, (l[b] - l[a]) / 10 }' "$LOG/step-stats-1.err" "$LOG/step-stats-11.err"
grep "top calls sent" "$LOG/step-stats-11.err" | sed "s/^ */  11 steps: /"
fi  # (torch-frameworks)

[ -n "$TORCH_ONLY" ] && { kill $SERVER; echo "gpu-test summary: $pass passed, $fail failed"; exit $fail; }
fi

# inside a running Python process (the interpreter that has torch): the driver API through ctypes
compare python_host -- $PY tests/tools/python_host.py
compare python_host_atexit -- $PY tests/tools/python_host.py --at-exit

# bad input from the wire against the real CUDA backend: clear errors, never a crash
if CUWIRE_TEST_BACKEND=cuda $PY -m pytest -q -p no:cacheprovider tests/test_wire_errors.py >"$LOG/wire_errors.txt" 2>&1; then
  echo "wire errors on the GPU: OK ($(tail -1 "$LOG/wire_errors.txt"))"; pass=$((pass+1))
else echo "wire errors on the GPU: FAIL"; tail -30 "$LOG/wire_errors.txt"; fail=$((fail+1)); fi
if CUWIRE_TEST_BACKEND=cuda $PY -m pytest -q -p no:cacheprovider tests/test_joined_connections.py >"$LOG/joined.txt" 2>&1; then
  echo "joined connections (stripes, host functions) on the GPU: OK ($(tail -1 "$LOG/joined.txt"))"; pass=$((pass+1))
else echo "joined connections on the GPU: FAIL"; tail -30 "$LOG/joined.txt"; fail=$((fail+1)); fi
if CUWIRE_TEST_BACKEND=cuda $PY -m pytest -q -p no:cacheprovider tests/test_resume.py -k "large_copies or hello" \
  >"$LOG/resume.txt" 2>&1; then
  echo "dropped connections resumed (TCP, TLS, Unix socket) on the GPU: OK ($(tail -1 "$LOG/resume.txt"))"
  pass=$((pass+1))
else echo "dropped connections resumed on the GPU: FAIL"; tail -30 "$LOG/resume.txt"; fail=$((fail+1)); fi

# 32 clients at once on one server, each checking its own results
pids=()
for i in $(seq 1 32); do
  app=$([ $((i % 2)) -eq 0 ] && echo vector_add || echo memcpy_kinds)
  remote tests/test_apps/build/$app >"$LOG/concurrent-$i.out" 2>&1 & pids+=($!)
done
good=0; for i in $(seq 1 32); do wait "${pids[$((i - 1))]}" && grep -q ": PASS" "$LOG/concurrent-$i.out" && good=$((good+1)); done
if [ $good -eq 32 ]; then echo "32 concurrent clients: OK, 32 of 32 correct"; pass=$((pass+1))
else echo "32 concurrent clients: FAIL, $good of 32 correct"; fail=$((fail+1)); fi

# a client killed with SIGKILL while it holds 8 GiB: the GPU's own memory figure comes back within seconds
gcc -O2 -o build/hold_memory tests/tools/hold_memory.c -Icuwire/generated -Lbuild/client -lcuwire \
  -Wl,-rpath,"$PWD/build/client" || exit 1
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0; }
build/hold_memory 8192 >"$LOG/hold.out" 2>"$LOG/hold.err" & holder=$!
for _ in $(seq 1 300); do grep -q allocated "$LOG/hold.out" && break; sleep 0.1; done
held=$(used); kill -9 $holder; wait $holder 2>/dev/null; t0=$(date +%s.%N); back=
for _ in $(seq 1 200); do now=$(used); [ $((held - now)) -ge 8000 ] && { back=$(date +%s.%N); break; }; sleep 0.1; done
if [ -n "$back" ]; then
  echo "killed client: OK, the GPU's used memory went from $held to $now MiB $(awk -v a="$t0" -v b="$back" \
    'BEGIN { printf "%.1f", b - a }') s after SIGKILL of a client holding 8 GiB"; pass=$((pass+1))
else echo "killed client: FAIL (used $held MiB while held, $(used) MiB 20 s after SIGKILL)"; cat "$LOG/hold.err"; fail=$((fail+1)); fi

# a second run of the same app against the same server sends no module bytes
CUWIRE_STATS=1 remote tests/test_apps/build/vector_add >/dev/null 2>"$LOG/stats-second-run.txt"
grep "modules uploaded" "$LOG/stats-second-run.txt" | sed 's/^ */second run of vector_add: /'
# no real libcuda in any client process; NVIDIA's libcudart is expected (and torch's own)
probes=$(grep -c "^probe ran in " "$LOG/maps.txt")
real=$(grep "libcuda\.so" "$LOG/maps.txt" | grep -v "$PWD/build/client" | sort -u)
if [ -n "$real" ] || { [ "$probes" -lt 25 ] && [ -z "${GPU_TEST_ONLY:-}" ]; }; then
  echo "client maps: FAIL ($probes processes probed), real libcuda mapped: $real"; fail=$((fail+1))
else
  echo "client maps: OK, $probes client processes probed, no real libcuda mapped; CUDA libraries seen: $(grep -v '^probe' "$LOG/maps.txt" | sort -u | tr '\n' ' ')"
fi
# no client got device memory where it had host memory of its own (address_space.py, device_memory.c)
runs=$(ls "$LOG"/*.err "$LOG"/concurrent-*.out 2>/dev/null | grep -vc '\.native\.err$')
clashes=$(grep -l "lies where this program has memory of its own" "$LOG"/*.err "$LOG"/concurrent-*.out 2>/dev/null)
if [ -z "$clashes" ]; then echo "address space: OK, no device range fell on a client's memory in $runs runs"
  pass=$((pass+1))
else echo "address space: FAIL, device memory fell on a client's own in: $clashes"; fail=$((fail+1)); fi
kill $SERVER; wait $SERVER 2>/dev/null
grep -c "uploaded (" "$LOG/server.log" | sed 's/^/server: modules uploaded over the whole run: /'
echo "gpu-test summary: $pass passed, $fail failed"
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu-test-logs.tgz" -C build gpu-test
[ $fail -eq 0 ]
