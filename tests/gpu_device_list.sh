#!/usr/bin/env bash
# On a GPU machine with two GPUs (the device tool's nvidia-h100-x2): one program, two servers as one device
# list (docs/several-servers.md). A server each (`--devices 0`, `--devices 1`); tests/test_device_list.py's
# two programs through `cuwire run --server a,b`:
#  - the CUDA runtime program launching its kernel on each device: its output equal to the native run's
#    on the machine's two GPUs;
#  - the driver-API program (memory, copies, memsets, streams, events on each device, the peer answers,
#    the refusals): each device's sum as the emulated device's test expects;
#  - tests/multi_gpu_apps/torch_each_gpu.py (a model trained on each GPU) and jax_each_gpu.py (XLA on each GPU,
#    an array moved from one to the other): their output equal to native's;
#  - the program's CUDA_VISIBLE_DEVICES (1, and 1,0) over the list: the GPUs it sees (count, PCI bus ids)
#    equal to native's.
# Logs go to build/gpu-device-list, and as one tarball to $OUT when set. Exit 0 when all match.
#   bash tests/gpu_device_list.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=$PWD/build/gpu-device-list; rm -rf "$LOG"; mkdir -p "$LOG"
source tests/gpu_env.sh
start_server "$LOG/a.log" --devices 0; A=127.0.0.1:$PORT; SERVER_A=$SERVER
start_server "$LOG/b.log" --devices 1; B=127.0.0.1:$PORT; SERVER_B=$SERVER
CUDA_LIB=$(dirname "$(readlink -f "$(command -v nvcc)")")/../lib64
LD_LIBRARY_PATH="$CUDA_LIB:${LD_LIBRARY_PATH:-}" $PY - "$A" "$B" "$LOG" <<'PYEOF'
import os, subprocess, sys
sys.path.insert(0, "tests")
from test_device_list import KERNELS, PROGRAM

a, b, log = sys.argv[1:4]
open(f"{log}/program.py", "w").write(PROGRAM)
open(f"{log}/kernels.cu", "w").write(KERNELS)
subprocess.run(["nvcc", "-cudart", "shared", "-arch=sm_90", "-O2", "-o", f"{log}/kernels", f"{log}/kernels.cu"],
               check=True)
env = {k: v for k, v in os.environ.items() if k != "CUWIRE_SERVER"}
native = subprocess.run([f"{log}/kernels"], capture_output=True, text=True, env=env)
apps = {name: [sys.executable, f"tests/multi_gpu_apps/{name}_each_gpu.py"] for name in ("torch", "jax")}
app_native = {name: subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
              for name, cmd in apps.items()}
runs = {name: subprocess.run([sys.executable, "-m", "cuwire.cli", "run", "--stats", "--server", f"{a},{b}", "--",
                              *cmd], capture_output=True, text=True, env=env, timeout=300)
        for name, cmd in (("kernels", [f"{log}/kernels"]), ("program", [sys.executable, f"{log}/program.py"]),
                          *apps.items())}
BUSES = """
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
n = ctypes.c_int()
cuda.cuInit(0)
cuda.cuDeviceGetCount(ctypes.byref(n))
buses = []
for i in range(n.value):
    d, bus = ctypes.c_int(), ctypes.create_string_buffer(32)
    cuda.cuDeviceGet(ctypes.byref(d), i)
    cuda.cuDeviceGetPCIBusId(bus, 32, d)
    buses.append(bus.value.decode())
print(n.value, buses)
"""
open(f"{log}/buses.py", "w").write(BUSES)
for value in ("1", "1,0"):
    seen = {"CUDA_VISIBLE_DEVICES": value}
    app_native[f"visible {value}"] = subprocess.run([sys.executable, f"{log}/buses.py"], capture_output=True,
                                                    text=True, env={**env, **seen}, timeout=60)
    runs[f"visible {value}"] = subprocess.run([sys.executable, "-m", "cuwire.cli", "run", "--server", f"{a},{b}",
                                               "--", sys.executable, f"{log}/buses.py"], capture_output=True,
                                              text=True, env={**env, **seen}, timeout=60)
for name, r in runs.items():
    open(f"{log}/{name.replace(' ', '-')}.out", "w").write(r.stdout)
    open(f"{log}/{name.replace(' ', '-')}.err", "w").write(r.stderr)
n = 4096
sums = [f"device {d} sum {(n // 2) * (d + 1) + (n // 2) * 100 * (d + 1)}" for d in range(2)]
got = [line.split(" memory at")[0] for line in runs["program"].stdout.splitlines()[1:3]]
checks = {"kernels (equal to native)": runs["kernels"].returncode == 0 and native.returncode == 0
          and runs["kernels"].stdout == native.stdout and native.stdout.startswith("devices 2"),
          "program (each device's sum)": runs["program"].returncode == 0 and got == sums,
          **{f"{name} on each device (equal to native)": runs[name].returncode == 0
             and app_native[name].returncode == 0 and runs[name].stdout == app_native[name].stdout
             and app_native[name].stdout.startswith("devices 2") for name in apps},
          **{f"CUDA_VISIBLE_DEVICES={name.split()[1]} over the list (equal to native)": runs[name].returncode == 0
             and runs[name].stdout == app_native[name].stdout and app_native[name].stdout.strip()
             for name in runs if name.startswith("visible")}}
for what, ok in checks.items():
    print(f"{what}: {'OK' if ok else 'DIFF'}")
print("native:", native.stdout.strip().replace("\n", "; "))
print("through cuwire:", runs["kernels"].stdout.strip().replace("\n", "; "), "|",
      runs["program"].stdout.strip().replace("\n", "; "))
for name in app_native:
    print(f"{name} native:", app_native[name].stdout.strip().replace("\n", "; "))
    print(f"{name} through cuwire:", runs[name].stdout.strip().replace("\n", "; "))
sys.exit(0 if all(checks.values()) else 1)
PYEOF
rc=$?
kill $SERVER_A $SERVER_B 2>/dev/null
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu-device-list.tgz" -C build gpu-device-list
exit $rc
