"""`cuwire`: serve GPUs, run programs on them, and check a setup.

  cuwire server [--listen HOST:PORT] [--emulated] ...   serve this machine's GPUs
  cuwire run [--server HOST:PORT] [--stats] -- PROGRAM ARGS...
                                                        run PROGRAM with its CUDA calls sent to a server
  cuwire info [--server HOST:PORT]                      list the server's GPUs, like `nvidia-smi -L`
  cuwire doctor [--server HOST:PORT]                    check this client setup and say what to fix
  cuwire health [--server HOST:PORT]                    ask the server's /healthz (a container's health check)

Every flag also has a CUWIRE_* variable (docs/settings.md); a flag wins over the variable.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cuwire
from cuwire import SAFE_PATH
from cuwire.settings import Settings, host_port, one_server, server_list, servers

# Exit codes of `cuwire run` itself (the program's own code passes through otherwise), as `docker run`
# and `env` use them: cuwire failed before the program ran; the program cannot be executed; not found.
EXIT_CUWIRE, EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND = 125, 126, 127
NO_GPU_HINT = ("no GPU here: pass --emulated to run on the emulated device (tests only), "
               "or --server HOST:PORT for a remote GPU")
EMULATED_BANNER = ("cuwire: *** EMULATED device: results are computed by cuwire's host emulator for tests, "
                   "NOT on a GPU ***")
SERVER_START_TIMEOUT = 60.0
SERVER_STOP_TIMEOUT = 10.0


def err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the client library


def client_dir() -> Path:
    """Where `cuwire run` finds the client library under the names programs load: build/client in a
    checkout (what `make client` builds); for an installed package, whose folder may be read-only, a
    per-user cache, one folder per environment and content: links to the library the package ships
    (SHIPPED, built with the package), or one built here where the package has none."""
    from cuwire.client import build

    if build.CHECKOUT is not None:
        return build.CHECKOUT / "build" / "client"
    return Path.home() / ".cache" / "cuwire" / f"client-{cuwire.__version__}-{client_key()}"


def shipped_library() -> Path | None:
    """The library an installed package ships, when it has one (a checkout builds its own)."""
    from cuwire.client import build

    return build.SHIPPED if build.CHECKOUT is None and build.SHIPPED.exists() else None


def client_key() -> str:
    """This environment (its interpreter and site-packages) and the library's sources, as 16 hex digits."""
    import hashlib
    import sysconfig

    from cuwire.client import build

    h = hashlib.sha256(f"{sys.executable}\0{sys.prefix}\0{sysconfig.get_paths()['purelib']}\0".encode())
    shipped = shipped_library()
    for src in [shipped] if shipped else sorted(library_sources() + [Path(build.__file__)]):
        h.update(src.name.encode() + b"\0" + src.read_bytes())
    return h.hexdigest()[:16]


def library_sources() -> list[Path]:
    """The C files the library is compiled from: a library older than any of them is stale."""
    from cuwire.client import build

    generated = [build.GENERATED / n for n in ("client_stubs.c", "client_procs.c", "client_cdefs.h", "exports.map")]
    own = [build.CLIENT / n for n in build.C_SOURCES] + sorted(build.CLIENT.glob("*.h"))
    own += [build.CLIENT.parent / "wire" / n for n in ("socket_wait.h", "shm_ring.h", "frames.h")]
    return [p for p in (*generated, *own) if p.exists()]


def ensure_client_library(folder: Path | None = None) -> Path:
    """The client library, built first when missing or older than its sources (a `git pull` since
    `make client`), so that `cuwire run` works from a fresh clone."""
    folder = folder or client_dir()
    lib = folder / "libcuwire.so"
    shipped = shipped_library()
    if shipped is not None and folder == client_dir():
        return link_shipped(shipped, folder)
    if lib.exists():
        built = lib.stat().st_mtime
        if all(src.stat().st_mtime <= built for src in library_sources()):
            return lib
        err(f"cuwire: the client library {lib} is older than its sources; rebuilding it")
    else:
        err(f"cuwire: building the client library into {folder} (once)")
    from cuwire.client import build

    with stdout_to_stderr():  # the compiler's chatter must not mix with the program's output
        return build.build(folder)


def link_shipped(shipped: Path, folder: Path) -> Path:
    """The folder of links to the package's own library, under every name programs load it by (a wheel
    holds no links): nothing to compile. Its libpython must be there to load: say so by name if not."""
    from cuwire.client import build

    python = libpython()
    if python is not None and not python.exists():
        raise ClientLibraryError(
            f"this Python has no shared library ({python.name} is not in {python.parent}), which the client "
            "library runs the embedded Python with; use a Python built with --enable-shared (python.org's, "
            "conda's, uv's, or Debian's with its libpython3.X package)")
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("libcuwire.so", *build.NAMES):
        link = folder / name
        if link.is_symlink() and link.resolve() == shipped.resolve():
            continue
        tmp = folder / f".{name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        os.symlink(shipped, tmp)
        tmp.replace(link)
    return folder / "libcuwire.so"


def libpython() -> Path | None:
    """This Python's shared library, which the client library needs (None: linked statically, unknown)."""
    import sysconfig

    name = sysconfig.get_config_var("INSTSONAME") or ""
    libdir = sysconfig.get_config_var("LIBDIR")
    if ".so" not in name or not libdir:
        return None
    if (Path(libdir) / name).exists():
        return Path(libdir) / name
    multiarch = sysconfig.get_config_var("MULTIARCH")  # Debian's: /usr/lib/x86_64-linux-gnu
    if multiarch and (Path(libdir) / multiarch / name).exists():
        return Path(libdir) / multiarch / name
    return Path(libdir) / name


class ClientLibraryError(RuntimeError):
    """The client library cannot be had here; the message says why and what to do."""


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr for a while: child compilers write there directly."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


# ---------------------------------------------------------------- a local server for one run


class LocalServer:
    """`cuwire server` in a child process on 127.0.0.1 and a free port, for the length of one run.

    It gets its own session (process group) so that a Ctrl-C meant for the program does not stop the
    server under it; `stop` ends it."""

    def __init__(self, emulated: bool, token: str | None, cache_dir: Path):
        self.logdir = tempfile.TemporaryDirectory(prefix="cuwire-server-")
        self.log_path = Path(self.logdir.name) / "server.log"
        cmd = [sys.executable, *SAFE_PATH, "-m", "cuwire.server", "--listen", "127.0.0.1:0",
               "--cache-dir", str(cache_dir)]
        if emulated:
            cmd.append("--emulated")
        env = dict(os.environ)
        # the server serves every GPU here; the program's CUDA_VISIBLE_DEVICES picks among them (its hello)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if token is not None:
            env["CUWIRE_TOKEN"] = token  # not a flag: flags show in the process list
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        self.address = ""

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = SERVER_START_TIMEOUT) -> str:
        """The address once the server logs it; RuntimeError with the server's log if it exits or hangs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(r"listening on [^\s:]+:(\d+)", self.log())
            if m:
                self.address = f"127.0.0.1:{m.group(1)}"
                return self.address
            if self.proc.poll() is not None:
                raise RuntimeError(self.log().strip() or f"the server exited with code {self.proc.returncode}")
            time.sleep(0.02)
        raise RuntimeError(f"the local cuwire server did not start within {timeout:.0f} s; its log:\n"
                           + self.log().strip())

    def stop(self, timeout: float = SERVER_STOP_TIMEOUT) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logdir.cleanup()


# ---------------------------------------------------------------- cuwire run


def nvidia_runtime_dir() -> Path | None:
    """The folder of NVIDIA's libcudart.so.13 from the nvidia-cuda-runtime wheel cuwire depends on."""
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13/lib", "cuda_runtime/lib"):
            if (Path(root) / sub / "libcudart.so.13").exists():
                return Path(root) / sub
    return None


def program_env(lib: Path, server: str, token: str | None, stats: bool,
                base: dict[str, str] | None = None) -> dict[str, str]:
    """The program's environment: cuwire's libcuda.so.1 and libnvidia-ml.so.1 first on the library path,
    NVIDIA's libcudart from the nvidia-cuda-runtime wheel last (a program or library that brings its own
    runtime keeps it); nothing preloaded. Plus the settings the client reads."""
    env = dict(os.environ if base is None else base)
    path = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    runtime = nvidia_runtime_dir()
    extra = [str(runtime)] if runtime else []
    env["LD_LIBRARY_PATH"] = ":".join([str(lib.parent), *path, *extra])
    python = libpython()
    if python is not None and python.exists():  # the Python the library runs, in a program of none of its own
        env.setdefault("CUWIRE_LIBPYTHON", str(python))
    env["CUWIRE_SERVER"] = server
    if token is not None:
        env["CUWIRE_TOKEN"] = token
    if stats:
        env["CUWIRE_STATS"] = "1"
    return env


MIN_CORES_TO_SHARE = 4  # below this a program keeps every core: one fewer would cost it more than it gains


def on_this_host(server: str) -> bool:
    """Whether HOST:PORT names this machine by a loopback address (a server started here listens there)."""
    try:
        host = host_port(server)[0]
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def leave_a_core(env: dict[str, str], server: str, started_here: bool) -> None:
    """A server on this host launches the GPU's work while the program computes, and needs a core to do it:
    a program whose OpenMP threads take every core (PyTorch's CPU operations do, each thread spinning at its
    barriers) holds the server up, and the GPU waits. So, unless the program's environment says how many
    threads OpenMP takes, it takes one fewer than the cores this process may use."""
    if "OMP_NUM_THREADS" in env or not (started_here or any(on_this_host(each) for each in server_list(server))):
        return
    cores = len(os.sched_getaffinity(0))
    if cores >= MIN_CORES_TO_SHARE:
        env["OMP_NUM_THREADS"] = str(cores - 1)


# what a terminal (Ctrl-C, Ctrl-backslash, a hang-up) or a supervisor (kill, docker stop) sends to stop a program
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP)
SI_KERNEL = 0x80  # siginfo si_code of a signal the kernel sent, e.g. a terminal's Ctrl-C to its process group


def run_forwarding_signals(command: list[str], env: dict[str, str]) -> int:
    """Run the program and wait for it, passing on SIGINT, SIGTERM, SIGQUIT and SIGHUP sent to cuwire.

    The signals are blocked before the program starts (it may be ready, and be signalled, at once) and
    unblocked in the program itself. A Ctrl-C typed at the terminal already reaches the program (same
    process group); forwarding it too would deliver it twice, so signals the kernel sent are not
    forwarded, those sent with kill() are. Returns the exit code, 128+N for a program killed by signal
    N, as a shell reports it. Raises OSError when the program cannot be started."""
    watched = {*FORWARDED, signal.SIGCHLD}  # SIGCHLD wakes the wait when the program ends
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    try:
        proc = subprocess.Popen(command, env=env,
                                preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, watched))
        while proc.poll() is None:
            info = signal.sigtimedwait(watched, 0.5)
            if info is not None and info.si_signo in FORWARDED and info.si_code != SI_KERNEL:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(info.si_signo)
    finally:
        while signal.sigtimedwait(watched, 0) is not None:  # consumed here, not raised at the unblock
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)
    rc = proc.returncode
    if rc < 0:  # as a shell reports it, and said, since 128+N alone reads like the program's own code
        err(f"cuwire run: {command[0]} was killed by {signal.Signals(-rc).name} (exit code {128 - rc})")
        return 128 - rc
    return rc


def cmd_run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        err("cuwire run: no program given (usage: cuwire run [options] -- PROGRAM ARGS...)")
        return 2
    server = args.server or os.environ.get("CUWIRE_SERVER")
    if server and args.emulated:
        err("cuwire run: --emulated starts a local emulated server; it cannot be combined with a server "
            f"({server}) given by --server or CUWIRE_SERVER")
        return 2
    if not server and not args.emulated and default_server_listens():
        server = Settings().server  # the rule `cuwire info` and `cuwire doctor` follow too
    if shutil.which(command[0]) is None:  # before a server is started for nothing
        found = shutil.which(command[0], mode=os.F_OK)
        err(f"cuwire run: {command[0]}: " + ("not executable" if found else "command not found"))
        return EXIT_CANNOT_EXECUTE if found else EXIT_NOT_FOUND
    try:
        lib = ensure_client_library()
    except ClientLibraryError as e:
        err(f"cuwire run: {e}")
        return EXIT_CUWIRE
    except Exception as e:  # a compiler error, a missing Python header: say it, do not trace back
        err(f"cuwire run: cannot build the client library: {e}\n  -> with a checkout, run `make client` and read "
            "its output; else install cuwire from a wheel, which ships the library built")
        return EXIT_CUWIRE

    if server:  # an address, token or TLS setting that cannot work fails here, before the program runs
        token = token_value(args.token)
        servers = server_list(server)
        for n, each in enumerate(servers, 1):  # (a device list: each of its servers)
            for check in (check_reachable(each), check_session(each, token, place=(n, len(servers)))):
                if not check.ok:
                    err(f"cuwire run: {check.what}\n  -> {check.fix}")
                    return EXIT_CUWIRE
    local: LocalServer | None = None
    if not server:
        local = LocalServer(args.emulated, args.token, Settings().cache_dir)
        try:
            server = local.wait_ready()
        except RuntimeError as e:
            local.stop()
            err(f"cuwire run: the local cuwire server did not start:\n{e}")
            if not args.emulated:
                err(f"cuwire run: {NO_GPU_HINT}")
            return EXIT_CUWIRE
    if args.emulated:
        err(EMULATED_BANNER)
    try:
        env = program_env(lib, server, args.token, args.stats)
        leave_a_core(env, server, local is not None)
        try:
            rc = run_forwarding_signals(command, env)
        except OSError as e:
            err(f"cuwire run: cannot run {command[0]}: {e}")
            return EXIT_CANNOT_EXECUTE
        if local is not None and local.proc.poll() is not None:
            err(f"cuwire run: the local server stopped during the run; its log:\n{local.log().strip()}")
        return rc
    finally:
        if local is not None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the program is done: a late Ctrl-C must not
            local.stop()                                   # leave the server behind


# ---------------------------------------------------------------- talking to a server: info and doctor


def server_address(flag: str | None) -> str:
    """The one rule every command follows: --server, else CUWIRE_SERVER, else the default address (where
    `cuwire run`, finding nothing listening, starts a server of its own for the run)."""
    return flag or Settings().server


def default_server_listens() -> bool:
    """Whether something listens at the default address (a server on this host, as `cuwire server` starts
    one with no --listen): `cuwire run` uses it, as `cuwire info` and `cuwire doctor` do."""
    return bool(check_reachable(Settings().server, timeout=1.0).ok)


def token_value(flag: str | None) -> str:
    return flag if flag is not None else Settings().token


def make_hello(token: str = "", **overrides: object):
    """The Hello the client library sends (cuwire/wire/hello.py), with fields replaceable for tests."""
    from cuwire.wire.hello import make_hello

    return make_hello(token, **overrides)


def handshake(address: str, hello, timeout: float = 5.0, place: tuple[int, int] = (1, 1)):
    """Open a session, send the Hello, close; the server's Reply (welcome or error). Raises TransportError.
    `place`: the server's in a device list, and how many it has (its TLS pin)."""
    from cuwire.settings import Settings
    from cuwire.wire.transport import client_tls, open_session

    # over TLS when CUWIRE_TLS_CA or CUWIRE_TLS_FINGERPRINT says so, as the client library does
    transport, reply = open_session(address, hello, connect_timeout=timeout, tls=client_tls(Settings(), *place))
    transport.close()
    return reply


def uuid_text(raw: bytes) -> str:
    """A GPU's 16-byte UUID as NVIDIA writes it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    import uuid

    return f"GPU-{uuid.UUID(bytes=raw)}"


def live_figures(transport, welcome, first: int = 0) -> list[str]:
    """What the server's NVML says now, asked in the session `cuwire info` opened: the NVIDIA driver's
    version, and per exposed GPU its memory used and its utilisation (the calls a program's NVML makes,
    through the generated handlers)."""
    import struct

    from cuwire.generated import cuwire_pb2 as pb
    from cuwire.generated.wire_ids import FUNCTION_IDS as ids

    def ask(name: str, **fields):
        args = getattr(pb, f"{name}_Args")(**fields).SerializeToString()
        reply = transport.exchange(pb.Batch(fn=ids[name], args=args))
        if reply.error:
            raise RuntimeError(reply.error)
        return getattr(pb, f"{name}_Result").FromString(reply.result)

    if ask("nvmlInit_v2").status != 0:
        return ["live figures: the server's NVML does not answer"]
    try:
        version = ask("nvmlSystemGetDriverVersion", length=80)
        text = version.version.split(b"\0")[0].decode(errors="replace")
        lines = [f"NVIDIA driver: {text}" if version.status == 0 else
                 f"NVIDIA driver: unknown (NVML error {version.status})"]
        for i, d in enumerate(welcome.devices):
            handle = ask("nvmlDeviceGetHandleByUUID", uuid=uuid_text(d.uuid))
            if handle.status != 0:
                lines.append(f"GPU {first + i}: NVML does not know it (error {handle.status})")
                continue
            memory = ask("nvmlDeviceGetMemoryInfo", device=handle.device)
            busy = ask("nvmlDeviceGetUtilizationRates", device=handle.device)
            if memory.status == 0:
                total, _free, taken = struct.unpack_from("<QQQ", memory.memory)  # nvmlMemory_t
                used = f"{taken >> 20} of {total >> 20} MiB used"
            else:
                used = f"memory unknown (NVML error {memory.status})"
            if busy.status == 0:
                gpu, on_memory = struct.unpack_from("<II", busy.utilization)  # nvmlUtilization_t
                rates = f"utilisation {gpu}% (memory {on_memory}%)"
            else:
                rates = f"utilisation unknown (NVML error {busy.status})"
            lines.append(f"GPU {first + i}: {uuid_text(d.uuid)}: {used}, {rates}")
        return lines
    finally:
        ask("nvmlShutdown")


def open_sessions(address: str, timeout: float) -> str:
    """The server's open sessions, from its /metrics (this one included), or why they are not known."""
    host, port = host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            text = b""
            while chunk := sock.recv(65536):
                text += chunk
    except OSError as e:
        return f"unknown ({e.strerror or e})"
    m = re.search(rb"^cuwire_sessions (\d+)$", text, re.M)
    return f"{int(m[1])} (this one included)" if m else "unknown (no /metrics there)"


def cuda_version_text(v: int) -> str:
    """CUDA's integer versions as people write them: 13000 -> 13.0, 12040 -> 12.4."""
    return f"{v // 1000}.{v % 1000 // 10}"


def describe_welcome(w, address: str, first: int = 0) -> list[str]:
    """The Welcome as `nvidia-smi -L` lines (its GPUs numbered from `first`: their place in a device list),
    then what a user checks next."""
    lines = []
    if w.backend == "emulated":
        lines.append("*** EMULATED device: this server does not use a GPU; for tests only ***")
    for i, d in enumerate(w.devices):
        own = f", its GPU {i}" if first else ""
        lines.append(f"GPU {first + i}: {d.name} (compute capability {d.major}.{d.minor}, {d.total_memory >> 20} "
                     f"MiB{own})")
    if not w.devices:
        lines.append("no GPUs exposed")
    lines.append(f"CUDA driver API: {cuda_version_text(w.driver_version)} (the program's CUDA runtime runs "
                 "on the client, on cuwire's libcuda)")
    backend = "EMULATED (tests only)" if w.backend == "emulated" else w.backend
    lines.append(f"server: {address}, cuwire {w.server_version}, backend {backend}, CUDA API {w.cuda_version} "
                 f"(digest {w.api_digest})")
    return lines


def info_servers(flag: str | None) -> list[str]:
    """The servers `cuwire info` describes: --server, else CUWIRE_SERVER, either of which may be a list (the
    device list a program will see, issue 39), else the default address."""
    return server_list(flag or os.environ.get("CUWIRE_SERVER", "")) or [Settings().server]


def cmd_info(args: argparse.Namespace) -> int:
    servers = info_servers(args.server)
    if len(servers) == 1:
        return info_of(servers[0], args)[0]
    first, rc = 0, 0
    for n, address in enumerate(servers, 1):
        print(f"server {n} of {len(servers)}: {address}", flush=True)
        failed, devices = info_of(address, args, first, (n, len(servers)))
        rc, first = max(rc, failed), first + devices
    print(f"one device list of {first} GPUs across {len(servers)} servers, numbered as a program given this "
          "list sees them (docs/several-servers.md)")
    return rc


def info_of(address: str, args: argparse.Namespace, first: int = 0, place: tuple[int, int] = (1, 1)) -> tuple[int, int]:
    """`cuwire info` of one server, its GPUs numbered from `first` (their place in a device list): the exit
    status, and how many GPUs it has."""
    from cuwire.wire.transport import TransportError

    reachable = check_reachable(address, args.timeout)  # fails fast where gRPC would retry until the timeout
    if not reachable.ok:
        err(f"cuwire info: {reachable.what}\n  -> {reachable.fix}")
        return 1, 0
    from cuwire.wire.transport import client_tls, open_session

    try:
        transport, reply = open_session(address, make_hello(token_value(args.token)), connect_timeout=args.timeout,
                                        tls=client_tls(Settings(), *place))
    except TransportError as e:
        err(f"cuwire info: {e}\n  -> is `cuwire server` running there? `cuwire doctor --server {address}` says more")
        return 1, 0
    try:
        if reply.error:
            err(f"cuwire info: {address}: {reply.error}")
            return 1, 0
        lines = describe_welcome(reply.welcome, address, first)
        try:
            lines += live_figures(transport, reply.welcome, first)
        except (TransportError, RuntimeError) as e:
            lines.append(f"live figures: not available ({e})")
        lines.append(f"open sessions: {open_sessions(address, args.timeout)}")
    finally:
        transport.close()
    print("\n".join(lines))
    return 0, len(reply.welcome.devices)


@dataclass
class Check:
    """One line of `cuwire doctor`: what was checked, and how to fix it when it failed."""

    ok: bool | None  # None: not checked, an earlier check failed
    what: str
    fix: str = ""

    def line(self) -> str:
        if self.ok is None:
            return f"skip: {self.what}"
        return f"ok: {self.what}" if self.ok else f"FAIL: {self.what} -> {self.fix}"


def check_library(folder: Path | None = None) -> Check:
    """The client library is built, loads, and exports the driver API (checked in a child process:
    loading it runs its constructors, which belong in a program, not here)."""
    folder = folder or client_dir()
    lib = folder / "libcuwire.so"
    shipped = shipped_library()
    if shipped is not None and folder == client_dir():
        try:
            link_shipped(shipped, folder)  # what `cuwire run` would do first
        except ClientLibraryError as e:
            return Check(False, f"the client library shipped in the package cannot run here: {e}",
                         "use a Python with its shared library")
    if not lib.exists():
        return Check(False, f"client library not found at {lib}", "run `make client` (or any `cuwire run` builds it)")
    from cuwire.client import build

    # the C half, then its Python half as it starts in a program (the C half's names global, this Python's)
    probe = ("import ctypes, os, sys; c = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL); c.cuMemAlloc_v2; "
             "ctypes.CDLL(os.path.join(os.path.dirname(os.path.realpath(sys.argv[1])), sys.argv[2])).cuwire_embedded")
    r = subprocess.run([sys.executable, *SAFE_PATH, "-c", probe, str(lib), build.PYTHON_HALF],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return Check(False, f"client library {lib} does not load or lacks cuMemAlloc_v2 or its Python half ({last})",
                     "rebuild it: `make client`")

    missing = [n for n in build.NAMES if not (folder / n).exists()]
    if missing:
        return Check(False, f"client library {lib} found, but not under the names {', '.join(missing)}",
                     "rebuild it: `make client`")
    stale = [] if shipped else [p.name for p in library_sources() if p.stat().st_mtime > lib.stat().st_mtime]
    if stale:
        return Check(False, f"client library {lib} is older than {', '.join(stale)}", "rebuild it: `make client`")
    return Check(True, f"client library {lib} loads, exports cuMemAlloc_v2, and its Python half loads")


def check_reachable(address: str, timeout: float = 5.0) -> Check:
    """Something answers at HOST:PORT; a refused connection (wrong port, server down) and an unknown or
    silent host get messages of their own."""
    try:
        host, port = host_port(address)
    except ValueError as e:
        return Check(False, f"server address: {e}", "give --server HOST:PORT or set CUWIRE_SERVER=HOST:PORT")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except socket.gaierror as e:
        return Check(False, f"server host {host!r} unknown ({e.strerror})",
                     "check the host name in --server or CUWIRE_SERVER")
    except ConnectionRefusedError:
        return Check(False, f"nothing is listening at {address} (connection refused: wrong port, or no server)",
                     f"start `cuwire server --listen {host}:{port}` there, or fix the port in --server/CUWIRE_SERVER")
    except OSError as e:
        return Check(False, f"server {address} does not answer ({e.strerror or e})",
                     "check that the host is up and that a firewall lets the port through")
    return Check(True, f"server {address} is reachable")


def check_session(address: str, token: str, timeout: float = 5.0, place: tuple[int, int] = (1, 1)) -> Check:
    """The server would welcome this client's session: the hello the client library sends (its token,
    versions, and TLS as CUWIRE_TLS_CA or CUWIRE_TLS_FINGERPRINT say), checked by the server with no session
    started (Hello.check). `place`: the server's in a device list, and how many it has."""
    from cuwire.wire.transport import TransportError

    try:
        reply = handshake(address, make_hello(token, check=True), timeout=timeout, place=place)
    except TransportError as e:
        return Check(False, f"{address} did not take a session ({e})",
                     "check the address, and TLS: CUWIRE_TLS_FINGERPRINT or CUWIRE_TLS_CA as the server's log says")
    if not reply.error:
        return Check(True, f"{address} takes a session")
    token_ok = check_token(reply)
    return token_ok if not token_ok.ok else check_versions(reply)


def check_token(reply) -> Check:
    """The server accepted our token (it checks the token before anything else)."""
    from cuwire.generated import cuwire_pb2 as pb

    if reply.refusal == pb.TOKEN:
        return Check(False, f"token not accepted: {reply.error}",
                     "set CUWIRE_TOKEN (or --token) to the token the server was started with")
    return Check(True, "token accepted")


def check_versions(reply) -> Check:
    """Client and server were generated from the same CUDA headers (API digest, CUDA version)."""
    from cuwire.generated import cuwire_pb2 as pb
    from cuwire.wire.hello import same_api, this_api

    if reply.refusal == pb.VERSION:
        return Check(False, f"client and server versions are incompatible: {reply.error}",
                     "install the same cuwire version on both sides and rebuild the client (`make client`)")
    if reply.error:
        return Check(False, f"the server refused the session: {reply.error}", "read the server's log")
    w = reply.welcome
    if not same_api(w):
        return Check(False, f"version mismatch: the server speaks CUDA {w.cuda_version} with API digest "
                     f"{w.api_digest}, this client {this_api()}",
                     "install the same cuwire version on both sides")
    return Check(True, f"versions compatible: client cuwire {cuwire.__version__}, server cuwire {w.server_version}, "
                 f"CUDA {w.cuda_version}, API digest {w.api_digest}")


def doctor_checks(address: str, token: str, folder: Path | None = None, timeout: float = 5.0) -> list[Check]:
    """Every check in order; the ones after a failed connection are reported as skipped."""
    from cuwire.wire.transport import TransportError

    checks = [check_library(folder), check_reachable(address, timeout)]
    if not checks[-1].ok:
        return checks + [Check(None, "token and versions not checked (no server)")]
    try:
        reply = handshake(address, make_hello(token), timeout=timeout)
    except TransportError as e:
        return checks + [Check(False, f"{address} answers, but not as a cuwire server ({e})",
                               "point --server/CUWIRE_SERVER at the port `cuwire server` listens on")]
    checks.append(check_token(reply))
    if not checks[-1].ok:
        return checks + [Check(None, "versions not checked (the server checks the token first)")]
    checks.append(check_versions(reply))
    if checks[-1].ok and reply.welcome.backend == "emulated":
        checks.append(Check(True, "server backend is EMULATED: fine for tests, results do not come from a GPU"))
    return checks


def cmd_health(args: argparse.Namespace) -> int:
    """GET /healthz of the server, over TLS when this host's server settings turn it on (a container's
    health check: no session, no CUDA context). 0 when it answers 200."""
    import http.client
    import ssl

    address = server_address(args.server)
    try:
        host, port = host_port(address)
    except ValueError as e:
        err(f"cuwire health: {e}")
        return 2
    s = Settings()
    if s.tls or s.tls_cert:  # (its own certificate, on this host: asked for liveness, not trusted with data)
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn = http.client.HTTPSConnection(host, port, timeout=args.timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=args.timeout)
    try:
        conn.request("GET", "/healthz")
        reply = conn.getresponse()
        body = reply.read().decode(errors="replace").strip()
    except (OSError, http.client.HTTPException) as e:
        err(f"cuwire health: {address}: {e}")
        return 1
    finally:
        conn.close()
    print(f"{address}: {reply.status} {body}")
    return 0 if reply.status == 200 else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    checks = doctor_checks(server_address(args.server), token_value(args.token), timeout=args.timeout)
    for c in checks:
        print(c.line())
    return 0 if all(c.ok for c in checks) else 1


# ---------------------------------------------------------------- the command line


def cmd_server(args: argparse.Namespace) -> int:
    from cuwire.server import __main__ as server_main

    return server_main.run(server_main.settings_from(args))


def parser() -> argparse.ArgumentParser:
    from cuwire.server import __main__ as server_main

    ap = argparse.ArgumentParser(prog="cuwire", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"cuwire {cuwire.__version__}")
    sub = ap.add_subparsers(dest="subcommand", required=True, metavar="{server,run,info,doctor,health}")

    p = sub.add_parser("server", help="serve this machine's GPUs", description=server_main.__doc__)
    server_main.add_arguments(p)
    p.set_defaults(func=cmd_server)

    p = sub.add_parser("run", help="run a program with its CUDA calls sent to a cuwire server",
                       description="Run PROGRAM with its CUDA driver calls answered by cuwire's libcuda. With no "
                       "--server and no CUWIRE_SERVER, a local server is started for the run and stopped after it. "
                       f"The program's exit code is passed through; cuwire's own failures exit {EXIT_CUWIRE}.")
    p.add_argument("--server", help="HOST:PORT of the cuwire server, or several, comma-separated: one device list "
                                    "of their GPUs (CUWIRE_SERVER; default: a local server)")
    p.add_argument("--emulated", action="store_true",
                   help="start the local server on the EMULATED device (tests only: no GPU computes anything)")
    p.add_argument("--stats", action="store_true", help="print cuwire's statistics at exit (CUWIRE_STATS=1)")
    p.add_argument("--token", help="token the server expects (CUWIRE_TOKEN)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- PROGRAM ARGS...")
    p.set_defaults(func=cmd_run)

    for name, func, text in (("info", cmd_info, "list the server's GPUs and versions"),
                             ("doctor", cmd_doctor, "check this client setup and say what to fix"),
                             ("health", cmd_health, "ask the server's /healthz, as a container's health check")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--server", help="HOST:PORT of the cuwire server (CUWIRE_SERVER, default 127.0.0.1:50551)")
        p.add_argument("--token", help="token the server expects (CUWIRE_TOKEN)")
        p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the server (default 5)")
        p.set_defaults(func=func)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    problems = Settings().errors if args.func is not cmd_server else []  # (the server says its own)
    if args.func not in (cmd_info, cmd_run, cmd_server):  # (a device list: a program's, and what info shows)
        for given, text in (("--server", getattr(args, "server", None)), ("CUWIRE_SERVER", os.environ.get(
                "CUWIRE_SERVER"))):
            try:
                one_server(text or "")
            except ValueError as e:
                problems.append(f"{given} {text!r}: {e}")
                break
    elif getattr(args, "server", None) and args.func is not cmd_server:  # (--server parses as CUWIRE_SERVER)
        try:
            servers(args.server)
        except ValueError as e:
            problems.append(f"--server {args.server!r}: {e}")
    if problems:  # one line each, naming the variable and what it takes
        err("\n".join(f"cuwire {args.subcommand}: {p}" for p in problems))
        return EXIT_CUWIRE if args.func is cmd_run else 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
