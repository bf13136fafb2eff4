#!/usr/bin/env bash
# Extract CuPy's own test suite into tests/cupy_suite/upstream (git-ignored), for tests/cupy_suite/run.sh:
# the tests/ tree of the cupy sdist on PyPI (the same files as the v14.2.0 tag of github.com/cupy/cupy),
# and the pytest settings of its pyproject.toml. Run it where PyPI is reachable; the GPU host has no
# network, so the tree travels there with the working tree (device tool: carry tests/cupy_suite/upstream).
# Usage: tests/cupy_suite/fetch.sh   (CUPY_VERSION and CUPY_SDIST_SHA256 to take another release)
set -euo pipefail
cd "$(dirname "$0")"
VERSION=${CUPY_VERSION:-14.2.0}
SHA256=${CUPY_SDIST_SHA256:-cfed725e612178cfbdbf62f4a3a598b60edecbbca718c0d4580c21a16ae4a62c}
PY=${PYTHON:-python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# pip download prepares the sdist's metadata, for which CuPy's setup.py looks for a CUDA toolkit;
# CUPY_INSTALL_USE_STUB=1 (what CuPy's documentation build uses) lets it go without one. Nothing is built.
CUPY_INSTALL_USE_STUB=1 $PY -m pip download -q --no-deps --no-binary cupy "cupy==$VERSION" -d "$tmp"
sdist=$tmp/cupy-$VERSION.tar.gz
echo "$SHA256  $sdist" | sha256sum -c --quiet

rm -rf upstream; mkdir -p upstream
tar xzf "$sdist" -C upstream --strip-components=1 "cupy-$VERSION/tests" "cupy-$VERSION/pyproject.toml"
# only the [tool.pytest.ini_options] table: pytest finds it there (run.sh passes -c), other tools find nothing
$PY - upstream/pyproject.toml "$VERSION" <<'EOF'
import sys, tomllib
path = sys.argv[1]
text = open(path).read()
lines, keep = [], False
for line in text.splitlines():
    if line.startswith("[") and line[1:2].isalpha():  # a table's header, not an array's closing bracket
        keep = line.strip() == "[tool.pytest.ini_options]"
    if keep:
        lines.append(line)
section = "\n".join(lines) + "\n"
want = tomllib.loads(text)["tool"]["pytest"]["ini_options"]
assert tomllib.loads(section) == {"tool": {"pytest": {"ini_options": want}}}
open(path, "w").write(f"# The pytest settings of the cupy {sys.argv[2]} sdist's pyproject.toml (tests/cupy_suite/fetch.sh)\n"
                       + section)
EOF
echo "$VERSION" >upstream/VERSION
echo "tests/cupy_suite/upstream: CuPy $VERSION's tests, $(find upstream/tests -name 'test_*.py' | wc -l) test files," \
  "$(du -sh upstream | cut -f1)"
