#!/usr/bin/env bash
# make bench: on a GPU machine, run bench_app natively and through cuwire (a local server, loopback gRPC)
# on both layers (driver: NVIDIA's libcudart on cuwire's libcuda; runtime: cuwire's runtime stand-in),
# in the same run on the same GPU, and print each measurement side by side with the ratios.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUTDIR=$PWD/build/bench; mkdir -p "$OUTDIR"; LOG=$OUTDIR
source tests/gpu_env.sh
nvcc -cudart shared -arch=sm_90 -O2 -o "$OUTDIR/bench_app" bench/bench_app.cu || exit 1
"$OUTDIR/bench_app" >"$OUTDIR/native.txt" || { cat "$OUTDIR/native.txt"; exit 1; }
for layer in driver runtime; do
  $PY -m cuwire.cli run --layer $layer -- "$OUTDIR/bench_app" >"$OUTDIR/$layer.txt" 2>"$OUTDIR/$layer.err" \
    || { cat "$OUTDIR/$layer.txt" "$OUTDIR/$layer.err"; exit 1; }
done
nvidia-smi -L 2>/dev/null | head -1
$PY - "$OUTDIR/native.txt" "$OUTDIR/driver.txt" "$OUTDIR/runtime.txt" <<'PYEOF'
import re, sys
def read(p):
    return {m[1]: (float(m[2]), m[3]) for m in re.finditer(r"^(.*): ([\d.]+) (\S+)$", open(p).read(), re.M)}
native, layers = read(sys.argv[1]), {"driver": read(sys.argv[2]), "runtime": read(sys.argv[3])}
def slowdown(v, r, unit):
    """How many times worse cuwire is (time per call: cuwire/native; bandwidth: native/cuwire)."""
    if unit.startswith("us"):
        return r / v if v else float("inf")
    return v / r if r else float("inf")
print(f"{'measurement':50} {'native':>11} {'driver layer':>20} {'runtime layer':>20}")
for name, (v, unit) in native.items():
    cells = [f"{layers[l][name][0]:>9.2f} (x{slowdown(v, layers[l][name][0], unit):.1f})" for l in layers]
    print(f"{name:50} {v:>7.2f} {unit:<4}" + "".join(f" {c:>20}" for c in cells))
print("(x: times slower than native, per call or in bandwidth)")
PYEOF
