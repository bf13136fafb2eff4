"""`python -m cuwire.codegen`: regenerate generated/ from the pinned headers (what `make codegen` runs)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import annotations, build_api, render

GENERATED = Path(__file__).resolve().parent.parent / "generated"
WIRE = GENERATED.parent / "wire"  # where protocol.proto's compiled module lives, beside it


def print_stats(manifest_path: Path) -> None:
    m = json.loads(manifest_path.read_text())
    total = {"remoted": 0, "local": 0, "unimplemented": 0}
    print(f"CUDA {m['cuda_version']} API coverage (api digest {m['api_digest']})")
    for header, counts in m["counts"].items():
        n = sum(counts.values())
        print(f"  {header:26} {n:4} functions: {counts['remoted']:4} remoted, {counts['local']:3} local, "
              f"{counts['unimplemented']:4} unimplemented")
        for k in total:
            total[k] += counts[k]
    n = sum(total.values())
    aliases = sum(len(f["aliases"]) for f in m["functions"])
    print(f"  {'all':26} {n:4} functions: {total['remoted']:4} remoted, {total['local']:3} local, "
          f"{total['unimplemented']:4} unimplemented; {aliases} more exported names (aliases)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuwire.codegen", description=__doc__)
    ap.add_argument("--out", type=Path, default=GENERATED, help="output folder (default: generated/)")
    ap.add_argument("--stats", action="store_true", help="print coverage counts from the manifest and exit")
    args = ap.parse_args(argv)
    if args.stats:
        print_stats(args.out / "api_manifest.json")
        return 0
    try:
        api = build_api()
    except annotations.AnnotationError as e:
        print(f"codegen: annotation error: {e}", file=sys.stderr)
        return 2
    for path in render.render_all(api, args.out, WIRE if args.out == GENERATED else args.out):
        print(f"wrote {path}")
    if args.out == GENERATED:
        readme = GENERATED.parent.parent / "README.md"
        if render.update_readme(readme, json.loads((args.out / "api_manifest.json").read_text())):
            print(f"updated the coverage line in {readme}")
    print_stats(args.out / "api_manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
