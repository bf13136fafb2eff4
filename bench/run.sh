#!/usr/bin/env bash
# make bench: on a GPU machine, run bench_app (and, where torch is, bench/torch_steps.py) natively and through
# cuwire with a local server, over each transport (TCP on loopback; the Unix socket with payloads in shared
# memory), in the same run on the same GPU, and print each measurement side by side with the ratios.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUTDIR=$PWD/build/bench; mkdir -p "$OUTDIR"; LOG=$OUTDIR
source tests/gpu_env.sh
nvcc -cudart shared -arch=sm_90 -O2 -o "$OUTDIR/bench_app" bench/bench_app.cu || exit 1
# tcp: loopback TCP, large copies over the session's stripes (cuwire/wire/stripes.py; a session that resumes
# has none, so the local server here resumes none: CUWIRE_RESUME=0); tcp1: the same on one connection
# (CUWIRE_STRIPES=0); unix: the Unix socket with payloads in shared memory
TRANSPORTS=${BENCH_TRANSPORTS:-tcp tcp1 unix}
rm -f "$OUTDIR"/native.txt "$OUTDIR"/cuwire-*.txt "$OUTDIR"/cuwire-*.err
"$OUTDIR/bench_app" >"$OUTDIR/native.txt" || { cat "$OUTDIR/native.txt"; exit 1; }
transport_env() {  # the variables that make transport $1
  case $1 in tcp) echo CUWIRE_TRANSPORT=tcp CUWIRE_RESUME=0 ;; tcp1) echo CUWIRE_TRANSPORT=tcp CUWIRE_STRIPES=0 ;;
    *) echo CUWIRE_TRANSPORT="$1" ;; esac
}
for t in $TRANSPORTS; do
  env $(transport_env "$t") CUWIRE_STATS=1 $PY -m cuwire.cli run -- "$OUTDIR/bench_app" >"$OUTDIR/cuwire-$t.txt" \
    2>"$OUTDIR/cuwire-$t.err" || { cat "$OUTDIR/cuwire-$t.txt" "$OUTDIR/cuwire-$t.err"; exit 1; }
  grep -h "transport:" "$OUTDIR/cuwire-$t.err" | head -1
done
# PyTorch's steady state (where torch is installed), appended to the same columns: three rounds, native and
# each transport in turn, the best of each kept (one process's figure varies by half on a shared host); and
# a call of scaled dot-product attention on each of PyTorch's backends (bench/attention.py)
if $PY -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  TORCH_TRANSPORTS=$(echo " $TRANSPORTS " | sed "s/ tcp1 / /")  # (no large copies there: tcp1 would repeat tcp)
  for _ in 1 2 3; do
    for program in bench/torch_steps.py bench/attention.py; do
      $PY $program >>"$OUTDIR/native.txt" || exit 1
      for t in $TORCH_TRANSPORTS; do
        env $(transport_env "$t") $PY -m cuwire.cli run -- $PY $program >>"$OUTDIR/cuwire-$t.txt" \
          2>>"$OUTDIR/cuwire-$t.err" || { tail "$OUTDIR/cuwire-$t.err"; exit 1; }
      done
    done
  done
fi
nvidia-smi -L 2>/dev/null | head -1
$PY - "$OUTDIR/native.txt" $(for t in $TRANSPORTS; do echo "$OUTDIR/cuwire-$t.txt"; done) <<'PYEOF'
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
native, remotes = read(sys.argv[1]), [read(p) for p in sys.argv[2:]]
names = [re.search(r"cuwire-(\w+)\.txt$", p)[1] for p in sys.argv[2:]]
def slowdown(v, r, unit):
    """How many times worse cuwire is (time per call: cuwire/native; bandwidth: native/cuwire)."""
    if unit.startswith(("us", "ms")):
        return r / v if v else float("inf")
    return v / r if r else float("inf")
print(f"{'measurement':52} {'native':>12}" + "".join(f" {'cuwire ' + n:>20}" for n in names))
for name, (v, unit) in native.items():
    cells = []
    for remote in remotes:
        r = remote.get(name, (float("nan"),))[0]
        cells.append(f"{r:>9.2f} (x{slowdown(v, r, unit):.2f})")
    print(f"{name:52} {v:>7.2f} {unit:<4}" + "".join(f" {c:>20}" for c in cells))
print("(x: times slower than native, per call or in bandwidth; tcp: loopback TCP, large copies striped over "
      "more connections; tcp1: loopback TCP on one connection; unix: the Unix socket, payloads in shared memory)")
PYEOF
