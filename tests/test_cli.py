"""The `cuwire` command: run (local and remote server, exit codes, signals, stats), info and doctor."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, STAT_BYTES, ServerProcess

from cuwire import cli


def cuwire(*args: str, tmp: Path, env: dict[str, str] | None = None, timeout: float = 120,
           **kw) -> subprocess.CompletedProcess:
    """`cuwire ARGS` as a user runs it, with no server or token inherited and a module cache of its own."""
    e = {k: v for k, v in os.environ.items() if k not in ("CUWIRE_SERVER", "CUWIRE_TOKEN", "CUWIRE_STATS")}
    e.update({"CUWIRE_CACHE_DIR": str(tmp / "modules"), **(env or {})})
    return subprocess.run([sys.executable, "-m", "cuwire.cli", *args], capture_output=True, text=True, env=e,
                          cwd=ROOT, timeout=timeout, **kw)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("token-server"), "--token", "secret")
    yield s
    s.stop()


# ---------------------------------------------------------------- cuwire run


def test_run_emulated_starts_and_stops_a_local_server(apps, client_lib, tmp_path):
    r = cuwire("run", "--emulated", "--", str(apps / "vector_add"), tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "vector_add: PASS" in r.stdout
    assert "EMULATED" in r.stderr  # said loudly, by cuwire run and by the client
    assert "cuwire server" not in r.stdout  # the local server's log stays out of the program's output


def test_run_against_a_given_server(server, apps, client_lib, tmp_path):
    r = cuwire("run", "--server", server.address, "--", str(apps / "vector_add"), tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "vector_add: PASS" in r.stdout


def test_run_takes_the_server_from_the_environment(server, apps, client_lib, tmp_path):
    r = cuwire("run", "--", str(apps / "vector_add"), tmp=tmp_path, env={"CUWIRE_SERVER": server.address})
    assert r.returncode == 0, r.stderr
    assert "vector_add: PASS" in r.stdout


def test_run_passes_the_exit_code_through(server, client_lib, tmp_path):
    r = cuwire("run", "--server", server.address, "--", "sh", "-c", "exit 3", tmp=tmp_path)
    assert r.returncode == 3, r.stderr
    r = cuwire("run", "--server", server.address, "--", "no-such-program-here", tmp=tmp_path)
    assert r.returncode == cli.EXIT_NOT_FOUND and "command not found" in r.stderr


def test_run_sets_up_the_program_environment(server, client_lib, tmp_path):
    r = cuwire("run", "--server", server.address, "--token", "tok", "--stats", "--", "sh", "-c",
               'echo "$LD_PRELOAD|$LD_LIBRARY_PATH|$CUWIRE_SERVER|$CUWIRE_TOKEN|$CUWIRE_STATS"',
               tmp=tmp_path, env={"LD_PRELOAD": "", "LD_LIBRARY_PATH": "/opt/x"})
    assert r.returncode == 0, r.stderr
    preload, libpath, addr, token, stats = r.stdout.strip().split("|")
    assert preload == ""  # nothing preloaded: NVIDIA's runtime runs on cuwire's libcuda
    runtime = cli.nvidia_runtime_dir()
    assert runtime is not None and (runtime / "libcudart.so.13").exists()
    assert libpath.split(":") == [str(client_lib.parent), "/opt/x", str(runtime)]
    names = sorted(p.name for p in client_lib.parent.iterdir() if p.name.startswith("lib"))
    # the library, its Python half, the names programs load; no libcudart: NVIDIA's is used
    assert names == ["libcuda.so.1", "libcuwire.so", "libcuwire_python.so", "libnvidia-ml.so.1"]
    assert (addr, token, stats) == (server.address, "tok", "1")


def test_a_server_on_this_host_is_left_a_core(monkeypatch):
    """OpenMP takes one core fewer than the process may use when the server is on this host (started by
    `cuwire run`, or at a loopback address); a thread count the program's environment sets stays, and so does
    every core for a server on another host, or on a machine of few cores."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    for server, started, want in [("127.0.0.1:1", False, "15"), ("localhost:1", False, "15"), ("[::1]:1", False, "15"),
                                  ("gpu-box:1", True, "15"), ("gpu-box:1", False, None), ("10.0.0.7:1", False, None)]:
        env: dict[str, str] = {}
        cli.leave_a_core(env, server, started)
        assert env.get("OMP_NUM_THREADS") == want, server
    env = {"OMP_NUM_THREADS": "16"}
    cli.leave_a_core(env, "127.0.0.1:1", True)
    assert env["OMP_NUM_THREADS"] == "16"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    env = {}
    cli.leave_a_core(env, "127.0.0.1:1", True)
    assert "OMP_NUM_THREADS" not in env


def test_program_env_keeps_the_program_s_own_settings(tmp_path):
    lib = tmp_path / "libcuwire.so"
    env = cli.program_env(lib, "h:1", None, False, base={"LD_PRELOAD": "/a.so", "CUWIRE_TOKEN": "t"})
    assert env["LD_PRELOAD"] == "/a.so" and env["LD_LIBRARY_PATH"].split(":")[0] == str(tmp_path)
    assert env["CUWIRE_TOKEN"] == "t" and "CUWIRE_STATS" not in env


def test_run_forwards_sigterm_to_the_program(server, client_lib, tmp_path):
    e = {k: v for k, v in os.environ.items() if k not in ("CUWIRE_SERVER", "CUWIRE_TOKEN")}
    script = 'trap "exit 7" TERM; echo ready; while :; do sleep 0.05; done'
    proc = subprocess.Popen([sys.executable, "-m", "cuwire.cli", "run", "--server", server.address, "--",
                             "sh", "-c", script], stdout=subprocess.PIPE, text=True, env=e, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 7
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_run_without_a_gpu_says_what_to_do(client_lib, tmp_path):
    r = cuwire("run", "--", "true", tmp=tmp_path)
    assert r.returncode == cli.EXIT_CUWIRE
    assert "the local cuwire server did not start" in r.stderr
    assert cli.NO_GPU_HINT in r.stderr


def test_run_stats_prints_what_cuwire_did(server, apps, client_lib, tmp_path):
    r = cuwire("run", "--stats", "--server", server.address, "--", str(apps / "vector_add"), tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "vector_add: PASS" in r.stdout and "cuwire stats:" not in r.stdout
    assert "cuwire stats:" in r.stderr
    m = re.search(r"modules uploaded: (\d+); found in the server's cache: (\d+)", r.stderr)
    assert m, r.stderr
    assert int(m.group(1)) + int(m.group(2)) == 1  # vector_add has one module, sent once or already cached
    # what NVIDIA's runtime asked of cuwire's libcuda for vector_add's 3 cudaMalloc, 1 copy out and 3
    # cudaFree (tests/test_apps/vector_add.cu); its 2 copies in (256 KiB each) were queued with their bytes
    sent_line = next(line for line in r.stderr.splitlines() if "top calls sent to the server" in line)
    for call in ("cuMemAlloc_v2 3", "cuMemFree_v2 3", "cuMemcpyDtoH_v2 1"):
        assert call in sent_line, (call, r.stderr)
    assert "cuMemcpyHtoD_v2" not in sent_line
    calls = re.search(r"API calls: (\d+) = (\d+) sent to the server and waited for \+ (\d+) queued \(sent in batches\) "
                      r"\+ (\d+) answered locally \+ (\d+) unimplemented", r.stderr)
    total, sent, queued, local, unimplemented = map(int, calls.groups())
    assert total == sent + queued + local + unimplemented and unimplemented == 0
    assert queued >= 3  # the 2 copies in and the launch (queued in C once its kernel was looked up)
    assert local > sent  # entry points, export tables, the current context: answered in the client
    trips = re.search(r"round trips: (\d+) = (\d+) for calls \+ (\d+) cuwire requests .* \+ (\d+) flushes", r.stderr)
    n_trips, for_calls, own, flushes = map(int, trips.groups())
    assert n_trips == for_calls + own + flushes
    data = re.search(rf"bytes sent: {STAT_BYTES} in messages, carrying {STAT_BYTES} of call data before compression; "
                     rf"received: {STAT_BYTES} in messages, {STAT_BYTES} of results", r.stderr)
    wire_out, data_out, wire_in, data_in = map(int, data.groups())
    n_bytes = (1 << 16) * 4  # one float array
    assert 2 * n_bytes <= data_out < 2 * n_bytes + (64 << 10) and wire_out >= data_out  # + a module image
    assert n_bytes <= data_in < n_bytes + 4096 and wire_in >= data_in
    transport = re.search(r"transport: Unix socket and shared memory to [\d.]+:\d+; (\d+) round trips in [\d.]+ s "
                          r"\([\d.]+ per second, \d+ us "
                          rf"each on average\); of the bytes, {STAT_BYTES} sent and {STAT_BYTES} received beside",
                          r.stderr)
    assert int(transport.group(1)) == n_trips
    # the result array, beside the messages (not in protobuf); the arrays in went in the queued records
    assert (int(transport.group(2)), int(transport.group(3))) == (0, n_bytes)


def test_attribute_sets_to_the_same_value_stay_in_the_client(server, apps, client_lib, tmp_path):
    """attribute_sets.cu sets two attributes of one kernel and one of another in turn, ten times, to the same
    values, and asks one occupancy: each set reaches the server once, and the occupancy is the client's (its
    kernel was loaded under a name: cuwire/occupancy.py, under the sets made; one
    kernel's set must not make the client forget the other's, nor one attribute's set another attribute's:
    with that, cuDNN's attention sent two sets a call and ran x10 slower than natively). The two sets of the
    largest dynamic shared memory are queued, not waited for: the client knows each kernel's static shared
    memory (their module's load brought their attributes) and the device's limit, and checks them as the
    driver does (annotation queued_when, client/answers_cache.c); the carveout's set waits. Every attribute
    read after the sets is the client's: a shared memory set changes that attribute alone, which the
    client keeps as set."""
    r = cuwire("run", "--stats", "--server", server.address, "--", str(apps / "attribute_sets"), tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (ROOT / "tests" / "test_apps" / "expected" / "attribute_sets.out").read_text()
    sent_line = next(line for line in r.stderr.splitlines() if "top calls sent to the server" in line)
    sent = {name: int(n) for name, n in re.findall(r"(\w+) (\d+)", sent_line.split(":", 1)[1])}
    sets = sent.get("cuKernelSetAttribute", 0) + sent.get("cuFuncSetAttribute", 0)
    occupancy = sum(n for name, n in sent.items() if name.startswith("cuOccupancyMaxActiveBlocks"))
    assert (sets, occupancy) == (1, 0), sent_line
    assert "1 occupancy questions answered here" in r.stderr
    assert not any(name in sent for name in ("FunctionAttributes", "cuFuncGetAttribute", "cuKernelGetAttribute")), \
        sent_line


# ---------------------------------------------------------------- cuwire info


@pytest.mark.parametrize("address,says", [("127.0.0.1:1", "connection refused"),
                                           ("no-such-host.invalid:50551", "unknown"),
                                           ("not-an-address", "HOST:PORT")])
def test_run_against_a_server_that_cannot_be_reached_fails_at_once(address, says, client_lib, tmp_path):
    """Refused, unknown host or malformed address: one clear line and cuwire's exit code, 125, at once;
    the program never starts."""
    marker = tmp_path / "ran"
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "cuwire.cli", "run", "--server", address, "--", "touch", str(marker)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 125 and says in r.stderr and not marker.exists(), r.stderr
    assert time.monotonic() - start < 10


def test_run_checks_the_hello_before_the_program_starts(token_server, client_lib, tmp_path):
    """A wrong token is cuwire's failure, said before the program runs (exit 125); the right one runs it. The
    check starts no session on the server (Hello.check)."""
    marker = tmp_path / "ran"
    r = cuwire("run", "--server", token_server.address, "--token", "wrong", "--", "touch", str(marker), tmp=tmp_path)
    assert r.returncode == cli.EXIT_CUWIRE and "token not accepted" in r.stderr and not marker.exists(), r.stderr
    before = token_server.text().count("opened for pid")
    r = cuwire("run", "--server", token_server.address, "--token", "secret", "--", "touch", str(marker), tmp=tmp_path)
    assert r.returncode == 0 and marker.exists(), r.stderr
    assert token_server.text().count("opened for pid") == before  # (touch makes no CUDA call: no session)


def test_run_uses_a_server_at_the_default_address(client_lib, tmp_path):
    """One rule for every command: with no --server and no CUWIRE_SERVER, the server listening at the default
    address (CUWIRE_SERVER's default) serves `cuwire run` too; it starts one of its own only when none listens."""
    from conftest import ServerProcess

    port = free_port()
    s = ServerProcess(tmp_path, "--listen", f"127.0.0.1:{port}")
    try:
        e = {k: v for k, v in os.environ.items() if k not in ("CUWIRE_SERVER", "CUWIRE_TOKEN")}
        import cuwire.settings

        with pytest.MonkeyPatch.context() as m:  # (the default port moved to where this server listens)
            m.setattr(cuwire.settings, "DEFAULT_PORT", port)
            assert cli.default_server_listens()
        assert not cli.default_server_listens() or cli.Settings().server != f"127.0.0.1:{port}"
        script = (f"import sys, cuwire.settings; cuwire.settings.DEFAULT_PORT = {port}; from cuwire import cli; "
                  "sys.exit(cli.main(sys.argv[1:]))")
        r = subprocess.run([sys.executable, "-c", script, "run", "--", "sh", "-c", 'echo "$CUWIRE_SERVER"'],
                           capture_output=True, text=True, env=e, cwd=ROOT, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"127.0.0.1:{port}"  # that server, not one started for the run
    finally:
        s.stop()


@pytest.mark.parametrize("variable,value,says", [
    ("CUWIRE_MAX_BUFFER", "8X", "CUWIRE_MAX_BUFFER='8X': expected a size in bytes, such as 8589934592, 8G or 512MiB"),
    ("CUWIRE_STRIPES", "four", "CUWIRE_STRIPES='four': expected a whole number, 0 or more"),
    ("CUWIRE_STATS", "maybe", "CUWIRE_STATS='maybe': expected 1, true, yes or on (or 0, false, no, off)"),
    ("CUWIRE_TRANSPORT", "udp", "CUWIRE_TRANSPORT='udp': expected auto, tcp or unix"),
])
def test_settings_that_do_not_parse_are_one_line(variable, value, says, tmp_path):
    """Every command says which variable and what it takes, in one line, never a traceback."""
    for args, code in ((["run", "--", "true"], cli.EXIT_CUWIRE), (["info"], 2), (["server", "--emulated"], 2)):
        r = cuwire(*args, tmp=tmp_path, env={variable: value}, timeout=60)
        assert r.returncode == code, r.stderr
        assert says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_server_flags_are_checked_too(tmp_path):
    r = cuwire("server", "--emulated", "--log-level", "verbose", tmp=tmp_path, timeout=60)
    assert r.returncode == 2 and "invalid choice: 'verbose'" in r.stderr and "Traceback" not in r.stderr


def test_the_client_library_cache_is_keyed_by_environment_and_content(monkeypatch, tmp_path):
    """An installed package builds its client library into a per-user cache: one folder per environment and
    content, so two environments never run each other's library."""
    from cuwire.client import build

    monkeypatch.setattr(build, "CHECKOUT", None)
    monkeypatch.setattr(Path, "home", lambda: tmp_path)
    first = cli.client_dir()
    assert first.parent == tmp_path / ".cache" / "cuwire" and first.name.startswith(f"client-{cuwire_version()}-")
    monkeypatch.setattr(sys, "prefix", "/another/venv")
    assert cli.client_dir() != first


def cuwire_version() -> str:
    import cuwire as package

    return package.__version__


def test_info_lists_the_emulated_device(server, tmp_path):
    r = cuwire("info", "--server", server.address, tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^GPU 0: cuwire emulated device \(compute capability 9\.0, \d+ MiB\)$", r.stdout, re.M)
    assert "CUDA driver API: 13.0 (the program's CUDA runtime runs on the client" in r.stdout
    assert "EMULATED" in r.stdout
    # live, from the server's NVML and /metrics (issue 37): the driver, UUID, memory used, utilisation, sessions
    assert "NVIDIA driver: cuwire-emulated" in r.stdout
    assert re.search(r"^GPU 0: GPU-63757769-7265-2d65-6d75-6c6174656400: \d+ of 8192 MiB used, utilisation \d+% "
                     r"\(memory \d+%\)$", r.stdout, re.M), r.stdout
    assert re.search(r"^open sessions: [1-9]\d* \(this one included\)$", r.stdout, re.M), r.stdout


def test_info_shows_a_list_of_servers_as_one_device_list(server, tmp_path):
    """`cuwire info` with a list of servers (--server or CUWIRE_SERVER; issue 39): each server's GPUs,
    numbered as one device list in the order given, as a program given the list sees them."""
    other = ServerProcess(tmp_path)
    try:
        for how in ("flag", "env"):
            listed = f"{server.address},{other.address}"
            r = cuwire("info", *(["--server", listed] if how == "flag" else []), tmp=tmp_path,
                       env={"CUWIRE_SERVER": listed} if how == "env" else None)
            assert r.returncode == 0, r.stdout + r.stderr
            assert f"server 1 of 2: {server.address}" in r.stdout and f"server 2 of 2: {other.address}" in r.stdout
            assert re.search(r"^GPU 0: cuwire emulated device \(compute capability 9\.0, \d+ MiB\)$", r.stdout, re.M)
            assert re.search(r"^GPU 1: cuwire emulated device \(compute capability 9\.0, \d+ MiB, its GPU 0\)$",
                             r.stdout, re.M), r.stdout
            assert "one device list of 2 GPUs across 2 servers, numbered as a program given this list sees them" \
                in r.stdout, r.stdout
        r = cuwire("info", "--server", f"{server.address},127.0.0.1:{free_port()}", tmp=tmp_path)
        assert r.returncode == 1 and "nothing is listening" in r.stderr and "GPU 0:" in r.stdout
    finally:
        other.stop()


def test_info_reports_a_refused_token_and_an_unreachable_server(token_server, tmp_path):
    r = cuwire("info", "--server", token_server.address, "--token", "wrong", tmp=tmp_path)
    assert r.returncode == 1 and "refused the token" in r.stderr
    r = cuwire("info", "--server", token_server.address, tmp=tmp_path, env={"CUWIRE_TOKEN": "secret"})
    assert r.returncode == 0, r.stderr
    r = cuwire("info", "--server", f"127.0.0.1:{free_port()}", tmp=tmp_path)
    assert r.returncode == 1 and "nothing is listening" in r.stderr


def test_cuda_versions_print_as_people_write_them():
    assert [cli.cuda_version_text(v) for v in (13000, 12040, 12090)] == ["13.0", "12.4", "12.9"]


# ---------------------------------------------------------------- cuwire doctor

TOKEN_MSG, PORT_MSG, VERSION_MSG = "token not accepted", "nothing is listening", "version mismatch"


def fail_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("FAIL:")]


def assert_only(line: str, msg: str) -> None:
    """The line carries its own message and none of the others'."""
    assert msg in line, line
    assert not [m for m in (TOKEN_MSG, PORT_MSG, VERSION_MSG) if m != msg and m in line], line
    assert " -> " in line  # says how to fix it


def test_doctor_passes_against_a_good_server(server, client_lib, tmp_path):
    r = cuwire("doctor", "--server", server.address, tmp=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines and all(line.startswith("ok: ") for line in lines), r.stdout
    text = r.stdout
    assert "client library" in text and "reachable" in text and "token accepted" in text
    assert "versions compatible" in text


def test_doctor_finds_a_wrong_token(token_server, client_lib, tmp_path):
    r = cuwire("doctor", "--server", token_server.address, "--token", "wrong", tmp=tmp_path)
    assert r.returncode == 1
    [line] = fail_lines(r.stdout)
    assert_only(line, TOKEN_MSG)
    assert "CUWIRE_TOKEN" in line
    r = cuwire("doctor", "--server", token_server.address, "--token", "secret", tmp=tmp_path)
    assert r.returncode == 0, r.stdout


def test_doctor_finds_a_wrong_port(client_lib, tmp_path):
    r = cuwire("doctor", "--server", f"127.0.0.1:{free_port()}", tmp=tmp_path)
    assert r.returncode == 1
    [line] = fail_lines(r.stdout)
    assert_only(line, PORT_MSG)


def test_doctor_finds_a_version_mismatch(server):
    for change in ({"cuda_version": "12.0"}, {"api_digest": "0123456789abcdef"}):
        reply = cli.handshake(server.address, cli.make_hello("", **change))
        assert cli.check_token(reply).ok
        check = cli.check_versions(reply)
        assert check.ok is False
        assert_only(check.line(), VERSION_MSG)
    assert cli.check_versions(cli.handshake(server.address, cli.make_hello(""))).ok


def test_doctor_finds_a_missing_library(tmp_path):
    check = cli.check_library(tmp_path)
    assert check.ok is False and "make client" in check.line()
