"""cuwire installed as a user installs it (a wheel, not editable): the package is whole (every sub-package,
the files the client library is built from, and the library itself, built with the package), and
`cuwire run` works from anywhere, the checkout's own root included (whose cuwire/ folder Python finds
first), with no compiler on PATH: nothing is compiled where it runs (issue 37)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import APPS, ROOT


def test_the_installed_package_is_whole(installed_package):
    package = installed_package / "cuwire"
    for sub in ("codegen", "templates", "generated", "client", "server"):
        assert (package / sub / "__init__.py").exists(), sub
    for f in ("generated/client_stubs.c", "generated/client_procs.c", "generated/cuda_api.h", "generated/exports.map",
              "generated/api_manifest.json", "client/queue.c", "client/export_tables.c", "client/runtime.h",
              "client/python.h", "wire/frames.h", "wire/protocol.proto", "wire/protocol_pb2.py",
              "codegen/annotations/libcuda.so.1.toml", "templates/client_stubs.c.j2", "client/lib/libcuwire.so",
              "client/lib/libcuwire_python.so"):
        assert (package / f).exists(), f
    assert not (package / "left_from_an_old_build.py").exists()


def test_the_shipped_library_names_no_python(installed_package):
    """Neither half of the shipped library needs libpython to load (the C half loads the Python half, and
    the Python it runs, when it starts: client/start.c); the C half exports what the Python half calls."""
    from cuwire.client import build

    lib = installed_package / "cuwire" / "client" / "lib"
    for name in ("libcuwire.so", build.PYTHON_HALF):
        dynamic = subprocess.run(["readelf", "-d", str(lib / name)], capture_output=True, text=True, check=True).stdout
        needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
        assert needed and not [n for n in needed if "python" in n], (name, needed)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib / "libcuwire.so")], capture_output=True, text=True,
                             check=True).stdout
    exported = {line.split()[-1].split("@")[0] for line in symbols.splitlines()}
    assert set(build.exported_names()) <= exported and "cuMemAlloc_v2" in exported
    assert not [n for n in exported if n.startswith("cuwire_py_")]  # (the trampolines stay inside)


def test_a_marked_declaration_of_two_names_is_refused(monkeypatch):
    """The export list takes one name a declaration: `extern int a, b;` would export b alone, and the Python
    half would fail to load (undefined symbol a) in the program, not here."""
    from cuwire.client import build

    monkeypatch.setattr(build, "python_cdef", lambda: "extern unsigned long long cuwire_a, cuwire_b;\n")
    with pytest.raises(ValueError, match="one name a declaration"):
        build.exported_names()


# What a checkout holds where a user stands: a cuwire/ folder without the compiled parts an install has. Any
# import of it (a child started with `python -m` from there picks it up first) fails by name.
SHADOW = 'raise ImportError("the cuwire/ folder of the current directory was imported, not the installed one")\n'
# What pip's console script `cuwire` runs: its own folder, not the current one, heads sys.path.
CONSOLE_SCRIPT = "import sys\nfrom cuwire.cli import main\nsys.exit(main())\n"


@pytest.mark.parametrize("where", ["checkout", "elsewhere"])
def test_run_from_an_install(installed_package, apps, where, tmp_path):
    """`cuwire run` with no server (it starts one, whose sessions are children of their own) from the root
    of a checkout and from anywhere else, with no compiler on PATH: the package's own library runs, found
    through links in HOME's cache; it finds the installed package from where it is."""
    import sysconfig

    nothing = tmp_path / "no-compiler"  # PATH: no gcc, no cc
    nothing.mkdir()
    deps = sysconfig.get_paths()["purelib"]  # cffi, protobuf, zstandard, the CUDA runtime: not in the wheel
    env = {**os.environ, "PYTHONPATH": f"{installed_package}:{deps}", "HOME": str(tmp_path), "PATH": str(nothing)}
    for name in ("CUWIRE_SERVER", "LD_PRELOAD", "LD_LIBRARY_PATH"):
        env.pop(name, None)
    cwd = tmp_path / "here"
    if where == "checkout":
        (cwd / "cuwire").mkdir(parents=True)
        (cwd / "cuwire" / "__init__.py").write_text(SHADOW)
    cwd.mkdir(exist_ok=True)
    script = tmp_path / "bin" / "cuwire"
    script.parent.mkdir()
    script.write_text(CONSOLE_SCRIPT)
    app = str(APPS / "build" / "vector_add")
    r = subprocess.run([sys.executable, str(script), "run", "--emulated", "--", app],
                       capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert "vector_add: PASS" in r.stdout
    assert "Traceback" not in r.stderr and "building the client library" not in r.stderr, r.stderr
    (links,) = (tmp_path / ".cache" / "cuwire").glob("client-*")
    shipped = installed_package / "cuwire" / "client" / "lib" / "libcuwire.so"
    assert (links / "libcuda.so.1").resolve() == shipped.resolve()


def test_a_fresh_venv_runs_the_wheel_from_the_checkout(manylinux_wheel, apps, tmp_path):
    """As a user would: a new venv, `pip install` of the manylinux wheel (no network: its dependencies, and
    the emulated device the test runs on, come from this environment through a .pth file), then the venv's
    own `cuwire` console script runs a CUDA program from the checkout's root (whose cuwire/ folder must not
    be imported), with nothing but the venv's bin/ on PATH (no compiler)."""
    import sysconfig

    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    r = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(manylinux_wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # (addsitedir: the .pth files there too, which make this checkout's emulated device importable)
    Path(site, "dependencies.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUWIRE_", "LD_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=str(venv / "bin"), HOME=str(tmp_path))
    r = subprocess.run([str(venv / "bin" / "cuwire"), "run", "--emulated", "--", str(APPS / "build" / "vector_add")],
                       capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert r.returncode == 0 and "vector_add: PASS" in r.stdout, r.stderr
    assert "building the client library" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_server_image_leaves_the_emulated_device_out(tmp_path):
    """What the image installs (docker/Dockerfile copies the tree minus .dockerignore's emulator/, and
    installs the package as a wheel would): no test-only code, and the emulated backend says why it cannot
    run, even where the checkout's emulator is declared but cannot be imported."""
    import shutil

    assert "emulator" in (ROOT / ".dockerignore").read_text().split()
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "cuwire", src / "cuwire", ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(site), str(src)], check=True, capture_output=True)
    assert (site / "cuwire" / "server").is_dir()
    assert not [p for p in site.rglob("*emulated*") if "dist-info" not in str(p)], "test-only code in the install"
    import sysconfig

    # -S: no .pth files, so the checkout's editable install cannot supply what the image lacks
    code = "from cuwire.server import backend; backend.open_backend('emulated')"
    r = subprocess.run([sys.executable, "-S", "-c", code],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": f"{site}:{sysconfig.get_paths()['purelib']}"})
    assert r.returncode != 0 and "emulated device (tests only) is not installed here" in r.stderr


def test_the_client_library_builds_where_only_the_build_requirements_are():
    """An isolated build (pip install . of the server image, pip wheel .) has setuptools and cffi, not the
    wire's protobuf or zstandard: what setup.py imports to compile the client library must not need them."""
    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in ('google', 'zstandard'):\n"
               "            raise ImportError(f'{name} is not a build requirement')\n"
               "sys.meta_path.insert(0, Block())\n"
               f"sys.path.insert(0, {str(ROOT)!r})\n"
               "from cuwire.client import build\n"
               "from cuwire.wire import ring\n"
               "assert ring.cdef()\n"
               "print('ok', len(build.C_SOURCES))\n")
    r = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stderr
