#!/usr/bin/env bash
# make bench: on a GPU machine, run bench_app (and, where torch is, bench/torch_steps.py) natively and through
# cuwire (a local server, loopback TCP)
# in the same run on the same GPU, and print each measurement side by side with the ratio.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUTDIR=$PWD/build/bench; mkdir -p "$OUTDIR"; LOG=$OUTDIR
source tests/gpu_env.sh
nvcc -cudart shared -arch=sm_90 -O2 -o "$OUTDIR/bench_app" bench/bench_app.cu || exit 1
"$OUTDIR/bench_app" >"$OUTDIR/native.txt" || { cat "$OUTDIR/native.txt"; exit 1; }
$PY -m cuwire.cli run -- "$OUTDIR/bench_app" >"$OUTDIR/cuwire.txt" 2>"$OUTDIR/cuwire.err" \
  || { cat "$OUTDIR/cuwire.txt" "$OUTDIR/cuwire.err"; exit 1; }
# PyTorch's steady state (where torch is installed), appended to the same two columns: three rounds,
# native and cuwire in turn, the best of each kept (one process's figure varies by half on a shared host)
if $PY -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  for _ in 1 2 3; do
    $PY bench/torch_steps.py >>"$OUTDIR/native.txt" || exit 1
    $PY -m cuwire.cli run -- $PY bench/torch_steps.py >>"$OUTDIR/cuwire.txt" 2>>"$OUTDIR/cuwire.err" \
      || { tail "$OUTDIR/cuwire.err"; exit 1; }
  done
fi
nvidia-smi -L 2>/dev/null | head -1
$PY - "$OUTDIR/native.txt" "$OUTDIR/cuwire.txt" <<'PYEOF'
import re, sys
def read(p):
    """Each measurement's best figure (a time: the least; a bandwidth: the most) and its unit."""
    best = {}
    for m in re.finditer(r"^(.*): ([\d.]+) (\S+)$", open(p).read(), re.M):
        v, unit = float(m[2]), m[3]
        if m[1] in best:
            v = (min if unit.startswith(("us", "ms")) else max)(v, best[m[1]][0])
        best[m[1]] = (v, unit)
    return best
native, remote = read(sys.argv[1]), read(sys.argv[2])
def slowdown(v, r, unit):
    """How many times worse cuwire is (time per call: cuwire/native; bandwidth: native/cuwire)."""
    if unit.startswith(("us", "ms")):
        return r / v if v else float("inf")
    return v / r if r else float("inf")
print(f"{'measurement':50} {'native':>11} {'cuwire':>20}")
for name, (v, unit) in native.items():
    r = remote[name][0]
    print(f"{name:50} {v:>7.2f} {unit:<4} {r:>9.2f} (x{slowdown(v, r, unit):.1f})")
print("(x: times slower than native, per call or in bandwidth)")
PYEOF
