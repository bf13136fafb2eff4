#!/usr/bin/env bash
# make bench-distance: on a GPU machine, PyTorch workloads (and JAX's, bench/distance_jax.py) natively and through cuwire with the server behind
# bench/delay_link (a forwarder that delays every byte by DELAY each way: the GPU hosts have no tc), at
# 0.1 ms and 1 ms each way. Each row: native, through cuwire, and the floor, native + the program's
# synchronizations x RTT (no remoting can do better: each synchronization needs an answer from the GPU),
# with the round trips cuwire made per step beside the program's synchronizations, and the megabytes a step
# moved on the link both ways (the floor counts no bandwidth: a step that moves its batch pays for it too),
# and the time the client waited for answers (the rest of the step: the program issuing its calls).
# Then each workload's start, from process start to the end of its first step, behind the last delay: round
# trips beside the program's synchronizations, and seconds beside native; three times: as a program's first
# run, as its next (which loads the modules of its last run at its first load: client/load_lists.py), and
# as its first run on another client machine (no list of its own: it gets the one the server kept,
# server/program_lists.py), and as its first run on a new server (a module cache of its own, empty: every
# image goes up); and what each of those starts waited for, the calls most asked first.
#   bash bench/distance.sh [DELAYS_US (default "direct 0 100 1000"; direct: no forwarder)] [STEPS (default 200: with 20, one run in three showed
# steps slower by milliseconds at any delay that a long run of the same steps did not, docs/speed.md)]
# VARIANTS="SETTING=VALUE ...": at each delay the cuwire rows again with each setting in the environment,
# beside the plain ones (VARIANTS=CUWIRE_SEND_THREAD=1: the client's sending thread, client/sender.c); a
# variant of several settings joins them with + (CUWIRE_SEND_THREAD=1+CUWIRE_SEND_EVERY_US=0: the thread
# poked at every queued call)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DELAYS=${1:-direct 0 100 1000}; STEPS=${2:-200}; FIRST=${FIRST:-1}  # FIRST=0: no start-up rows
OUTDIR=$PWD/build/distance; mkdir -p "$OUTDIR"; LOG=$OUTDIR; rm -f "$OUTDIR"/*-first.txt
source tests/gpu_env.sh
source bench/links.sh
gcc -O2 -pthread -o "$OUTDIR/delay_link" bench/delay_link.c || exit 1
(cd bench && $PY distance_steps.py "$STEPS") >"$OUTDIR/native.txt" 2>"$OUTDIR/native.err" || { cat "$OUTDIR/native.err"; exit 1; }
JAX=1  # JAX's row (bench/distance_jax.py), where JAX is installed
(cd bench && $PY distance_jax.py "$STEPS") >>"$OUTDIR/native.txt" 2>>"$OUTDIR/native.err" || { JAX=0; echo "no JAX row: see $OUTDIR/native.err"; }
start_server "$OUTDIR/server.log"
for delay in $DELAYS; do
  if [ "$delay" = direct ]; then AT=$PORT; LINK=; else  # direct: loopback TCP, no forwarder (its own cost)
    start_link "$OUTDIR/delay_link" "$PORT" "$delay" 0 "$OUTDIR/link-$delay.log"
  fi
  for variant in plain ${VARIANTS:-}; do
    out=$OUTDIR/cuwire-$delay; setting=()
    [ "$variant" != plain ] && { out=$out-$variant; IFS=+ read -ra setting <<<"$variant"; }
    (cd bench && env "${setting[@]}" CUWIRE_TRANSPORT=tcp CUWIRE_STATS=1 $PY -m cuwire.cli run --server "127.0.0.1:$AT" -- \
      $PY distance_steps.py "$STEPS") >"$out.txt" 2>"$out.err" || { tail "$out.err"; kill $LINK $SERVER; exit 1; }
    [ "$JAX" = 1 ] && { (cd bench && env "${setting[@]}" CUWIRE_TRANSPORT=tcp CUWIRE_STATS=1 $PY -m cuwire.cli run \
      --server "127.0.0.1:$AT" -- $PY distance_jax.py "$STEPS") >>"$out.txt" 2>>"$out.err" || tail "$out.err"; }
  done
  [ -n "$LINK" ] && kill $LINK
done
# A process's start: each workload in a fresh process to the end of its first step, natively and through
# cuwire behind the last delay (the server's module cache is warm by now, as on a server in use)
if [ "$FIRST" = 1 ]; then
  delay=${DELAYS##* }; LINK=; AT=$PORT
  if [ "$delay" != direct ]; then
    start_link "$OUTDIR/delay_link" "$PORT" "$delay" 0 "$OUTDIR/link-first.log"
  fi
  : >"$OUTDIR/native-first.txt"; : >"$OUTDIR/cuwire-first.txt"; : >"$OUTDIR/cuwire-again.txt"
  : >"$OUTDIR/cuwire-fresh.txt"; : >"$OUTDIR/cuwire-new.txt"; rm -rf "$OUTDIR/loads" "${CACHE:-/nonexistent}/lists"  # (none from an earlier bench)
  for w in "pytorch_minimal iteration" "small CNN training step" "small transformer training step" \
           "GPT-2 decoding, one token"; do
    (cd bench && $PY distance_steps.py --first $w) >>"$OUTDIR/native-first.txt" 2>>"$OUTDIR/native-first.err"
    # a program's first run (no list of its modules yet), then its next (client/load_lists.py), then its
    # first on a machine with no list (a folder of its own, empty): the server's
    for run in first again fresh; do
      loads=$OUTDIR/loads; [ $run = fresh ] && { loads=$OUTDIR/loads-fresh; rm -rf "$loads"; }
      (cd bench && CUWIRE_TRANSPORT=tcp CUWIRE_LOAD_LISTS="$loads" \
        $PY -m cuwire.cli run --server "127.0.0.1:$AT" -- $PY distance_steps.py --first $w) \
        >>"$OUTDIR/cuwire-$run.txt" 2>>"$OUTDIR/cuwire-$run.err"
    done
    # and its first run on a new server: a module cache of its own, empty (each image goes up), no list
    main=("$SERVER" "$PORT" "$CACHE"); CACHE=$(mktemp -d); start_server "$OUTDIR/server-new.log"; NEW_AT=$PORT
    NEW_LINK=
    if [ "$delay" != direct ]; then
      keep=("$LINK" "$AT"); start_link "$OUTDIR/delay_link" "$PORT" "$delay" 0 "$OUTDIR/link-new.log"
      NEW_LINK=$LINK; NEW_AT=$AT; LINK=${keep[0]}; AT=${keep[1]}
    fi
    (cd bench && CUWIRE_TRANSPORT=tcp CUWIRE_LOAD_LISTS= \
      $PY -m cuwire.cli run --server "127.0.0.1:$NEW_AT" -- $PY distance_steps.py --first $w) \
      >>"$OUTDIR/cuwire-new.txt" 2>>"$OUTDIR/cuwire-new.err"
    [ -n "$NEW_LINK" ] && kill $NEW_LINK
    kill $SERVER; wait $SERVER 2>/dev/null; rm -rf "$CACHE"; SERVER=${main[0]}; PORT=${main[1]}; CACHE=${main[2]}
  done
  [ -n "$LINK" ] && kill $LINK
  # what each start still waited for, besides its synchronizations (the first and the next run)
  grep -h ": waited for " "$OUTDIR"/cuwire-{first,again,fresh,new}.err >"$OUTDIR/waited.txt"
fi
kill $SERVER
nvidia-smi -L 2>/dev/null | head -1
VARIANTS=${VARIANTS:-} $PY - "$OUTDIR" $DELAYS <<'PYEOF'
import os, re, sys
out, delays = sys.argv[1], sys.argv[2:]
variants = ["", *os.environ["VARIANTS"].split()]
LINE = re.compile(r"^(.*): ([\d.]+) ms/step, ([\d.]+) syncs/step"
                  r"(?:, ([\d.]+) round trips/step, ([\d.]+) MB/step, ([\d.]+) ms waited/step)?$", re.M)
def read(path):
    return {m[1]: (float(m[2]), float(m[3]), float(m[4] or 0), float(m[5] or 0), float(m[6] or 0))
            for m in LINE.finditer(open(path).read())}
native = read(f"{out}/native.txt")
print(f"{'workload':34} {'link':>7} {'native':>9} {'cuwire':>17} {'floor':>9} {'x floor':>8} {'trips/step':>11} "
      f"{'syncs/step':>11} {'MB/step':>8} {'waited':>9}")
for delay in delays:
    rtt = 0 if delay == "direct" else 2 * int(delay) / 1000  # ms, added both ways (loopback adds ~0.02)
    for variant in variants:
        remote = read(f"{out}/cuwire-{delay}{'-' + variant if variant else ''}.txt")
        link = "direct" if delay == "direct" else f"{rtt:.1f}ms"
        if variant:
            print(f"  with {variant}:")
        for name, (ms, syncs, _, _, _) in native.items():
            if name not in remote:
                print(f"{name:34} {link:>7}  missing through cuwire")
                continue
            r_ms, _, trips, mb, waited = remote[name]
            floor = ms + syncs * rtt
            print(f"{name:34} {link:>7} {ms:>7.2f}ms {r_ms:>8.2f}ms (x{r_ms / ms:.2f}) {floor:>7.2f}ms "
                  f"{r_ms / floor:>7.2f}x {trips:>11.2f} {syncs:>11.1f} {mb:>8.3f} {waited:>7.2f}ms")
FIRST_LINE = re.compile(r"^(.*): first step after (\S+) round trips, (\d+) synchronizations, ([\d.]+) s from", re.M)
def first(path):
    try:
        return {m[1]: (m[2], int(m[3]), float(m[4])) for m in FIRST_LINE.finditer(open(path).read())}
    except FileNotFoundError:
        return {}
n_first, r_first, r_again, r_fresh, r_new = (
    first(f"{out}/{n}.txt") for n in ("native-first", "cuwire-first", "cuwire-again", "cuwire-fresh", "cuwire-new"))
if r_first:
    last = delays[-1]
    link = "direct" if last == "direct" else f"{2 * int(last) / 1000:.1f}ms RTT"
    print(f"\nstart-up to the end of the first step ({link}; the server's module cache warm; a program's first "
          "run, then its next, which loads its last run's modules at once, then its first on a machine with no "
          "list, which gets the server's; last, its first on a new server, whose module cache is empty):")
    print(f"{'workload':34} {'native':>9} {'cuwire':>9} {'round trips':>12} {'next run':>9} {'round trips':>12} "
          f"{'fresh machine':>14} {'round trips':>12} {'new server':>11} {'round trips':>12} {'synchronizations':>17}")
    for name, (trips, syncs, secs) in r_first.items():
        native_s = f"{n_first[name][2]:.2f}s" if name in n_first else "-"
        again_s, again_trips = (f"{r_again[name][2]:.2f}s", r_again[name][0]) if name in r_again else ("-", "-")
        fresh_s, fresh_trips = (f"{r_fresh[name][2]:.2f}s", r_fresh[name][0]) if name in r_fresh else ("-", "-")
        new_s, new_trips = (f"{r_new[name][2]:.2f}s", r_new[name][0]) if name in r_new else ("-", "-")
        print(f"{name:34} {native_s:>9} {secs:>8.2f}s {trips:>12} {again_s:>9} {again_trips:>12} {fresh_s:>14} "
              f"{fresh_trips:>12} {new_s:>11} {new_trips:>12} {syncs:>17}")
    try:
        waited = open(f"{out}/waited.txt").read().splitlines()
    except FileNotFoundError:
        waited = []
    if waited:
        print("\nwhat each start waited for (the first run, the next, the fresh machine's, the new server's), the most asked first:")
        print("\n".join(waited))
PYEOF
