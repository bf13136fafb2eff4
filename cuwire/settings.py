"""Settings shared by the client, the server and the `cuwire` command: one place, flags and CUWIRE_* variables.

Every setting has a default, a CUWIRE_* environment variable and (for some, on the commands) a flag; a flag
wins over the variable, the variable over the default. Values parse as a tool's do: sizes with units
(`8G`, `512MiB`), booleans as 1/true/yes/on or 0/false/no/off, names from a list; a value that does not
parse is one line naming the variable and what it takes (Settings.errors), never a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from cuwire.address_space import MOST_SERVERS

DEFAULT_PORT = 50551


def _env(name: str, default: str) -> str:
    return os.environ.get(f"CUWIRE_{name.upper()}", default)


UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def parse_size(text: str) -> int:
    """Bytes: a number, or one with a unit of powers of 1024 (K, M, G, T, alone or as KiB or KB...)."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise ValueError("expected a size in bytes, such as 8589934592, 8G or 512MiB")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in TRUE or t in FALSE:
        return t in TRUE
    raise ValueError("expected 1, true, yes or on (or 0, false, no, off)")


def _on_off_auto(text: str) -> str:
    """"on", "off" (from any of parse_bool's words) or "auto"."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return "on" if parse_bool(text) else "off"
    except ValueError:
        raise ValueError("expected 1, true, yes or on, 0, false, no or off, or auto") from None


SEND_THREAD_CORES = 4  # CUWIRE_SEND_THREAD=auto: the cores this process may use, at least, for the thread


def sends_from_a_thread(setting: str) -> bool:
    """Whether a thread of the client's sends the queued calls (CUWIRE_SEND_THREAD, client/sender.c): on, or
    auto where the process may use SEND_THREAD_CORES cores (the thread polls on one while calls come)."""
    return setting == "on" or (setting == "auto" and len(os.sched_getaffinity(0)) >= SEND_THREAD_CORES)


def _number(kind: type, what: str, most: float | None = None) -> Callable[[str], float]:
    def parse(text: str):
        try:
            value = kind(text.strip())
        except ValueError:
            raise ValueError(f"expected {what}") from None
        if value < 0 or (most is not None and value > most):
            raise ValueError(f"expected {what}")
        return value
    return parse


def _one_of(*names: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in names:
            shown = [repr(n) if not n else n for n in names]
            raise ValueError(f"expected {', '.join(shown[:-1])} or {shown[-1]}")
        return text
    return parse


_COUNT, _SECONDS = _number(int, "a whole number, 0 or more"), _number(float, "a number of seconds, 0 or more")


def _setting(name: str, default: str | Callable[[], str], parse: Callable[[str], object] | None = None):
    """A setting's field: CUWIRE_<NAME>'s text, or `default` (a function: asked each time, for a default that
    follows another value); `parse` (None: free text) turns it into its value in Settings.__post_init__, and
    a text that does not parse falls back to the default's value."""
    return field(default_factory=lambda: _env(name, default() if callable(default) else default),
                 metadata={"parse": parse, "default": default} if parse else {})


def server_list(text: str) -> list[str]:
    """The servers a CUWIRE_SERVER names, in its order (HOST:PORT or a Unix socket's path, comma-separated):
    a program's devices will be theirs in one list, numbered in this order (issue 39, `cuwire info`)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def servers(text: str) -> str:
    """A program's server, or the servers of its device list (docs/several-servers.md): at most
    address_space.MOST_SERVERS of them, each named once."""
    found = server_list(text)
    if len(found) > MOST_SERVERS:
        raise ValueError(f"names {len(found)} servers: a device list takes at most {MOST_SERVERS}")
    if len(set(found)) < len(found):
        raise ValueError("names a server twice: a device list names each server once")
    return text


def one_server(text: str) -> str:
    """HOST:PORT, or a path (a Unix socket's): one server, for a command that talks to one. A list is refused
    by name, not looked up as a host."""
    found = server_list(text)
    if len(found) > 1:
        raise ValueError(f"names {len(found)} servers: this command talks to one (a program's device list "
                         "across servers is `cuwire run`'s; `cuwire info` shows it)")
    return text


def peer_fetch(text: str) -> str:
    """Where a server may fetch a copy between two servers of a client's device list from: "any", "none", or
    HOST:PORT entries, comma-separated, as clients name the servers (server/peer_copy.py)."""
    if text.strip().lower() in ("any", "none"):
        return text.strip().lower()
    entries = server_list(text)
    if not entries:
        raise ValueError('expected "any", "none" or HOST:PORT entries')
    for entry in entries:
        host_port(entry)  # (ValueError for one that is not HOST:PORT)
    return text


def peer_fetch_allows(setting: str, address: str) -> bool:
    """Whether a server set so (Settings.peer_fetch) may fetch from `address`: an entry equal to it, the host's
    case aside."""
    if setting in ("any", "none"):
        return setting == "any"
    try:
        wanted = host_port(address)
        return any(host_port(e)[1] == wanted[1] and host_port(e)[0].lower() == wanted[0].lower()
                   for e in server_list(setting))
    except ValueError:
        return False


def _trace(text: str) -> bool | str:
    return "remote" if text.strip().lower() == "remote" else parse_bool(text)


@dataclass
class Settings:
    # where the client finds the server, and where the server listens
    # (a program's: several, comma-separated, make one device list of their GPUs, docs/several-servers.md)
    server: str = _setting("server", lambda: f"127.0.0.1:{DEFAULT_PORT}", servers)
    listen: str = _setting("listen", lambda: f"127.0.0.1:{DEFAULT_PORT}")
    token: str = _setting("token", "")
    # TLS. Server: a certificate and key (PEM files), or tls="auto" for a self-signed pair kept in the
    # module cache folder (its fingerprint is logged). Client: the CA file to check the server's certificate
    # against, or the certificate's pinned SHA-256 fingerprint; either one turns TLS on (cuwire/wire/tls.py)
    tls: str = _setting("tls", "", _one_of("", "auto"))
    tls_cert: str = _setting("tls_cert", "")
    tls_key: str = _setting("tls_key", "")
    tls_ca: str = _setting("tls_ca", "")
    tls_fingerprint: str = _setting("tls_fingerprint", "")
    # server: where tls="auto" keeps the certificate and key it made (readable only by the server's user),
    # apart from the module cache: a secret is no cache
    tls_dir: str = field(
        default_factory=lambda: _env("tls_dir", str(Path.home() / ".local" / "share" / "cuwire" / "tls")))
    # server: the servers a copy between two servers of a client's device list may be fetched from
    # (server/peer_copy.py): "any", "none", or HOST:PORT entries, comma-separated, as the clients name them. The
    # client names the address: with "any", a client with the token can have this server connect to any
    # address it reaches (a pool's servers: name them)
    peer_fetch: str = _setting("peer_fetch", "any", peer_fetch)
    # server side
    backend: str = _setting("backend", "cuda", _one_of("cuda", "emulated"))  # cuda | emulated (tests only)
    devices: str = _setting("devices", "")  # e.g. "0,1"; empty: all
    cache_dir: Path = field(
        default_factory=lambda: Path(_env("cache_dir", str(Path.home() / ".cache" / "cuwire" / "modules"))))
    # server: the most bytes of modules the cache folder holds; past it the least recently used go; 0: no limit
    module_cache_size: int = _setting("module_cache_size", str(8 << 30), parse_size)
    log_level: str = _setting("log_level", "info", _one_of("debug", "info", "warning", "error"))
    # text: "cuwire server: message" lines; json: one JSON object a line (time, level, pid, session,
    # message) for a log collector
    log_format: str = _setting("log_format", "text", _one_of("text", "json"))
    max_buffer: int = _setting("max_buffer", str(8 << 30), parse_size)
    # the most device memory one session may hold through cuMemAlloc and friends, in bytes; 0: the GPU's
    session_memory: int = _setting("session_memory", "0", parse_size)
    # the most device memory one session may have backed by this host's memory once the GPU (or its budget)
    # has no more (server/overflow.py), in bytes; 0: none, allocations fail as natively
    host_overflow: int = _setting("host_overflow", "0", parse_size)
    # the most page-locked host memory (cuMemHostAlloc, cudaMallocHost) one session of a client on this host
    # may hold in the host memory it shares with the server, in bytes; past it, such allocations are the
    # client's ordinary memory (copies from them travel like pageable ones); 0: none shared
    host_memory: int = _setting("host_memory", str(16 << 30), parse_size)
    # a client on this host: the bytes of each slot of the shared memory that payloads go through (a large
    # copy moves a slot at a time, the GPU copying one while the client fills or empties the next)
    ring_slot: int = _setting("ring_slot", str(4 << 20), parse_size)
    # process: each session runs in a process of its own (its own CUDA context; a crash stays there);
    # thread: sessions are threads of the listening process
    isolation: str = _setting("isolation", "process", _one_of("process", "thread"))
    session_name: str = _setting("session_name", "")  # set by the listener
    # server: the most sessions open at once, and the most from one client address (a host, or this host's
    # Unix socket); past either a new session is refused by name ("busy"); 0: no limit
    max_sessions: int = _setting("max_sessions", "64", _COUNT)
    max_sessions_per_host: int = _setting("max_sessions_per_host", "16", _COUNT)
    # server: the most handles of one kind (streams, events, modules, graphs...) one session holds at once;
    # past it the call that would make one more fails with CUDA_ERROR_OUT_OF_MEMORY, named in the log
    max_handles: int = _setting("max_handles", "65536", _COUNT)
    # where sessions note the memory and events they export to other processes (server/ipc.py): a folder
    # only the server reads, made when it starts (and removed when it ends) unless given
    ipc_dir: str = _setting("ipc_dir", "")
    # a session process that has not reported to the listener for this many seconds is frozen (stopped,
    # or stuck holding Python's lock) and is killed, so that its client gets an error, not a hang; 0: never
    frozen_after: float = _setting("frozen_after", "30", _SECONDS)
    # server: a session whose client sends nothing for this many seconds ends, freeing what it held (a
    # program that computes on its CPU that long between two CUDA calls loses its session); 0: never
    idle_timeout: float = _setting("idle_timeout", "0", _SECONDS)
    # both, over TCP: a peer that vanished without closing its connection (its host down, the link cut) is
    # noticed within about this many seconds, whether a call waits for it or the connection idles (TCP
    # keepalive; data sent and not acknowledged: TCP_USER_TIMEOUT). A slow call is not cut short: the peer's
    # system answers the probes while its process computes.
    keepalive: float = _setting("keepalive", "30", _SECONDS)
    # server: a session whose connection drops waits this many seconds for its client to connect again and
    # go on where it was (cuwire/wire/stream.py), its GPU memory and queued work intact; 0: it ends at once.
    # A client that dies without ending its program (killed) holds its session this long
    resume: float = _setting("resume", "60", _SECONDS)
    # both sides: the last bytes sent on a session's connection kept for a resume. A dropped connection
    # resumes when the bytes in flight at the drop (both sides' socket buffers) fit in it
    resume_window: int = _setting("resume_window", str(64 << 20), parse_size)
    # on SIGTERM (or SIGINT) the server takes no new session and gives the open ones this many seconds to
    # end by themselves before it ends them (a second signal ends them at once); 0: end them at once
    drain_seconds: float = _setting("drain_seconds", "10", _SECONDS)
    # both sides: how long a wait for the peer polls the socket before it sleeps, in microseconds (a round
    # trip that sleeps costs twice the wake-up; the poll costs this much CPU time at most); 0: sleep at once
    spin_us: int = _setting("spin_us", "50", _COUNT)
    # client: queued calls go out without waiting once this long passed since they last went (client/queue.c)
    send_every_us: int = _setting("send_every_us", "20", _COUNT)
    # client: a thread of its own sends the queued calls, so the program's thread only queues them (client/sender.c);
    # auto: where this process may use at least SEND_THREAD_CORES cores (the thread polls on one while calls come)
    send_thread: str = _setting("send_thread", "auto", _on_off_auto)
    # both sides, over TCP: how many more connections a session may open for large payloads, which then
    # travel over all of them at once (one TCP stream carries a few GB/s; cuwire/wire/stripes.py). The server
    # offers this many, the client opens as many as both allow; 0: payloads go on the one connection
    stripes: int = _setting("stripes", "4", _COUNT)
    # client side
    # how the session travels: auto (a Unix socket and shared memory when the server is on this host and
    # reachable so, else TCP), tcp, or unix (refused when the server cannot be reached so)
    transport: str = _setting("transport", "auto", _one_of("auto", "tcp", "unix"))
    # this server's place in a device list across servers, from 1 (0: the program's only server). Its session
    # keeps its memory in windows of address space of its own (address_space.windows). Lists are not served
    # yet (issue 39); set by hand, a one-server program's session lays its memory out as that server's would
    server_number: int = _setting("server_number", "0",
                                  _number(int, f"a whole number from 0 to {MOST_SERVERS}", most=MOST_SERVERS))
    # off, on (or zstd), auto: compress large messages and payloads, both ways (auto: over TCP, once the link
    # measured slow, while the data compresses; cuwire/wire/compression.py)
    compress: str = _setting("compress", "auto", _one_of("auto", "on", "zstd", "off"))
    compress_min: int = _setting("compress_min", str(64 << 10), parse_size)
    # a folder where the client keeps, per program, the modules it loaded (client/load_lists.py): its next
    # run loads them all at its first load, in one round trip; empty: each module loads as it is asked
    load_lists: str = _setting("load_lists", lambda: os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cuwire", "loads"))
    # client: a library load of machine code, and its kernels' lookups, get handles the client names and go
    # without waiting for the server (issue 35; kernel_facts.py describes the kernels and answers their
    # attributes, as the driver did for every kernel make gpu-kernel-attributes read)
    named_loads: bool = _setting("named_loads", "1", parse_bool)
    stats: bool = _setting("stats", "0", parse_bool)
    strict: bool = _setting("strict", "0", parse_bool)
    # 1: every CUDA call named on stderr; remote: only the calls the server serves (read by the client's C)
    trace: bool | str = _setting("trace", "0", _trace)

    # what did not parse, one line each (the commands print them and stop; the client library says them and
    # fails its calls): never a traceback
    errors: list[str] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Each value given as text (a variable's, a flag's) parsed by its kind (KINDS); one that does not
        parse keeps its default and says why in `errors`."""
        for name, (parse, default) in KINDS.items():
            value = getattr(self, name)
            if not isinstance(value, str):
                continue
            try:
                setattr(self, name, parse(value))
            except ValueError as e:
                self.errors.append(f"CUWIRE_{name.upper()}={value!r}: {e}")
                setattr(self, name, parse(default() if callable(default) else default))

    def to_env(self) -> dict[str, str]:
        """The variables that pass these settings on to a child process."""
        out = {}
        for f in fields(self):
            if f.name == "errors":
                continue
            v = getattr(self, f.name)
            out[f"CUWIRE_{f.name.upper()}"] = ("1" if v else "0") if isinstance(v, bool) else str(v)
        return out


# How each setting that is not free text parses, and its default (what a value that does not parse falls back
# to): from the fields themselves, so each default is written once
KINDS: dict[str, tuple[Callable[[str], object], str]] = {
    f.name: (f.metadata["parse"], f.metadata["default"]) for f in fields(Settings) if "parse" in f.metadata}


def host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {addr!r}")
    return host.strip("[]"), int(port)


