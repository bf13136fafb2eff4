#!/usr/bin/env bash
# make bench-overflow: on a GPU machine, a PyTorch training that needs more device memory than a session's
# budget (bench/overflow_steps.py: about 4.5 GiB; the budget, CUWIRE_SESSION_MEMORY, 2 GiB, standing in for
# a GPU too small for it), run natively, through cuwire with no budget (everything fits: nothing changes),
# with the budget and CUWIRE_HOST_OVERFLOW (what does not fit is backed by the server host's memory), and
# with the budget alone (it fails, as natively on a GPU too small). Same GPU, same run; ratios printed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUTDIR=$PWD/build/bench-overflow; mkdir -p "$OUTDIR"; LOG=$OUTDIR
source tests/gpu_env.sh
BUDGET=${OVERFLOW_BUDGET:-2G}
run_through() {  # run_through NAME SERVER-VARIABLES...: the training through cuwire, against a server set so
  local name=$1; shift
  rm -f "$OUTDIR/server"
  ( [ $# -eq 0 ] || export "$@"; start_server "$OUTDIR/server-$name.log"; echo "$SERVER $PORT" >"$OUTDIR/server" )
  [ -s "$OUTDIR/server" ] || return 1
  read -r pid port <"$OUTDIR/server"
  $PY -m cuwire.cli run --server "127.0.0.1:$port" -- $PY bench/overflow_steps.py >"$OUTDIR/$name.txt" \
    2>"$OUTDIR/$name.err"
  local rc=$?
  kill "$pid" 2>/dev/null; sleep 1
  return $rc
}
$PY bench/overflow_steps.py >"$OUTDIR/native.txt" || { cat "$OUTDIR/native.txt"; exit 1; }
run_through plain || { tail -20 "$OUTDIR/plain.err"; exit 1; }
run_through overflow CUWIRE_SESSION_MEMORY="$BUDGET" CUWIRE_HOST_OVERFLOW=64G || { tail -20 "$OUTDIR/overflow.err"; exit 1; }
if run_through budget CUWIRE_SESSION_MEMORY="$BUDGET"; then
  echo "bench-overflow: the budget alone let the training run: it does not need more than $BUDGET"; exit 1
fi
nvidia-smi -L 2>/dev/null | head -1
grep -h "host memory" "$OUTDIR/server-overflow.log" | head -2
$PY - "$OUTDIR" "$BUDGET" <<'PYEOF'
import re, sys
out, budget = sys.argv[1], sys.argv[2]
def read(name):
    text = open(f"{out}/{name}.txt").read()
    return re.findall(r"^loss \d+: (\S+)$", text, re.M), float(re.search(r"^step: ([\d.]+) ms$", text, re.M)[1]), \
        re.search(r"^peak memory: (.*)$", text, re.M)[1]
native = read("native")
print(f"training's peak memory (PyTorch's count): {native[2]}; session budget: {budget}")
print(f"{'run':44} {'step':>10} {'x native':>9}  losses")
for name, what in [("native", "native"), ("plain", "cuwire, no budget (all on the GPU)"),
                   ("overflow", f"cuwire, budget {budget} + host overflow")]:
    losses, step, _ = read(name)
    same = "same as native" if losses == native[0] else f"DIFFER: {losses[:3]} vs {native[0][:3]}"
    print(f"{what:44} {step:>7.1f} ms {step / native[1]:>8.2f}x  {same}")
err = open(f"{out}/budget.err").read()
print("cuwire, budget alone:", "fails with out of memory, as natively" if re.search(r"out of memory", err, re.I)
      else "failed otherwise: " + err.strip().splitlines()[-1])
PYEOF
