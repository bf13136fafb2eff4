"""What a server is doing, for Prometheus and health checks, on its one port (issue 18, point 7).

The listener answers a connection that begins with an HTTP request instead of a cuwire frame: `GET /metrics`
gives the counters below in Prometheus' text format, `GET /healthz` says the listener is up. Each session
process reports its session's figures to the listener every REPORT_SECONDS over the channel its
connection came by (listener.py), and once more as it ends; the listener keeps the latest.

What is served: sessions open and started, refusals by reason, calls served (ended sessions included), a
histogram of the calls' service times on the server (from a frame's arrival to its answer's departure,
counted by each session's C loop and Python path alike; ended sessions included), and per open session
its calls, bytes received and sent, device memory and page-locked host memory. No token is asked: the
figures name no data, only counts and the clients' host names. The round trip a program sees adds the
network (`cuwire run --stats` counts that, in the client).
"""

from __future__ import annotations

import json
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field

REPORT_SECONDS = 2.0
# the service-time histogram's bucket bounds, in microseconds (server/records.c CW_LATENCY_BOUNDS, the same)
LATENCY_BOUNDS_US = (10, 30, 100, 300, 1000, 3000, 10000, 100000, 1000000, 10000000)
HTTP_METHODS = (b"GET ", b"HEAD")  # how an HTTP request begins; a cuwire frame begins with its magic
REQUEST_MAX = 8192


@dataclass
class Figures:
    """The listener's counts, and the latest report of each open session (by session name)."""

    started: int = 0
    refused: Counter = field(default_factory=Counter)  # reason -> connections refused
    ended_calls: int = 0  # calls of the sessions that ended
    ended_latency: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS_US) + 1))
    ended_latency_ns: int = 0
    sessions: dict[str, dict] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refuse(self, reason: str) -> None:
        with self.lock:
            self.refused[reason] += 1

    def report(self, name: str, figures: dict) -> None:
        with self.lock:
            self.sessions[name] = figures

    def ended(self, name: str) -> None:
        with self.lock:
            last = self.sessions.pop(name, {})
            self.ended_calls += int(last.get("calls", 0))
            self.ended_latency = _add(self.ended_latency, last.get("latency"))
            self.ended_latency_ns += int(last.get("latency_ns", 0))

    def text(self, open_sessions: int, busy: int = 0) -> str:
        """The Prometheus text exposition (format 0.0.4); `busy`: connections refused for want of room."""
        with self.lock:
            live = {name: dict(f) for name, f in self.sessions.items()}
            refused, started, ended_calls = Counter(self.refused), self.started, self.ended_calls
            latency, latency_ns = list(self.ended_latency), self.ended_latency_ns
        for f in live.values():
            latency, latency_ns = _add(latency, f.get("latency")), latency_ns + int(f.get("latency_ns", 0))
        refused["busy"] += busy
        lines = [
            "# HELP cuwire_sessions Sessions open now.", "# TYPE cuwire_sessions gauge",
            f"cuwire_sessions {open_sessions}",
            "# HELP cuwire_sessions_started_total Sessions started since the server started.",
            "# TYPE cuwire_sessions_started_total counter", f"cuwire_sessions_started_total {started}",
            "# HELP cuwire_connections_refused_total Connections refused, by reason.",
            "# TYPE cuwire_connections_refused_total counter",
            *(f'cuwire_connections_refused_total{{reason="{r}"}} {refused[r]}'
              for r in ("token", "version", "protocol", "busy")),
            "# HELP cuwire_calls_total CUDA calls served, ended sessions included.",
            "# TYPE cuwire_calls_total counter",
            f"cuwire_calls_total {ended_calls + sum(int(f.get('calls', 0)) for f in live.values())}",
        ]
        lines += ["# HELP cuwire_call_duration_seconds How long the server took to answer a call (or a frame of "
                  "queued calls), from its arrival to the answer's departure, ended sessions included.",
                  "# TYPE cuwire_call_duration_seconds histogram"]
        cumulative = 0
        for bound, count in zip((*(f"{b / 1e6:g}" for b in LATENCY_BOUNDS_US), "+Inf"), latency, strict=True):
            cumulative += count
            lines.append(f'cuwire_call_duration_seconds_bucket{{le="{bound}"}} {cumulative}')
        lines += [f"cuwire_call_duration_seconds_sum {latency_ns / 1e9:.9f}",
                  f"cuwire_call_duration_seconds_count {cumulative}"]
        for metric, key, kind, help_text in (
                ("cuwire_session_calls_total", "calls", "counter", "CUDA calls served to the session."),
                ("cuwire_session_received_bytes_total", "bytes_in", "counter",
                 "Bytes of frames the session received on its connection (beside shared memory)."),
                ("cuwire_session_sent_bytes_total", "bytes_out", "counter",
                 "Bytes of frames the session sent on its connection (beside shared memory)."),
                ("cuwire_session_device_memory_bytes", "device_memory", "gauge",
                 "Device memory the session holds (its allocations)."),
                ("cuwire_session_host_memory_bytes", "host_memory", "gauge",
                 "Page-locked host memory the session has the server hold for it (a client on this host).")):
            lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}"]
            lines += [f'{metric}{{session="{_label(name)}",client="{_label(str(f.get("client", "")))}"}} '
                      f'{int(f.get(key, 0))}' for name, f in sorted(live.items())]
        return "\n".join(lines) + "\n"


def _add(totals: list[int], more) -> list[int]:
    """Bucket counts added (a report's may be missing or malformed: then nothing is added)."""
    if not isinstance(more, list) or len(more) != len(totals):
        return totals
    return [a + int(b) for a, b in zip(totals, more, strict=True)]


def _label(value: str) -> str:
    """A Prometheus label value: backslashes, quotes and newlines escaped, and bounded."""
    return value[:200].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def is_http(sock: socket.socket) -> bool:
    """Whether the connection begins with an HTTP request (its first bytes stay to be read)."""
    try:
        return sock.recv(4, socket.MSG_PEEK) in HTTP_METHODS
    except OSError:
        return False


def answer_http(sock: socket.socket, figures: Figures, open_sessions: int, busy: int = 0,
                draining: bool = False) -> None:
    """One request, one answer, then the connection closes. /healthz answers 503 while the server drains
    (SIGTERM), so that a load balancer or the image's HEALTHCHECK stops sending clients to it."""
    request = b""
    while b"\r\n\r\n" not in request and b"\n\n" not in request and len(request) < REQUEST_MAX:
        chunk = sock.recv(REQUEST_MAX - len(request))
        if not chunk:
            break
        request += chunk
    method, _, rest = request.partition(b" ")
    path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
    if path == b"/metrics":
        status, body = "200 OK", figures.text(open_sessions, busy).encode()
        kind = "text/plain; version=0.0.4; charset=utf-8"
    elif path == b"/healthz":
        status, body = ("503 Service Unavailable", b"draining\n") if draining else ("200 OK", b"ok\n")
        kind = "text/plain; charset=utf-8"
    else:
        status, body, kind = "404 Not Found", b"cuwire serves /metrics and /healthz here\n", "text/plain"
    head = f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    sock.sendall(head.encode() + (b"" if method == b"HEAD" else body))


def encode_report(figures: dict) -> bytes:
    return json.dumps(figures).encode()


def decode_report(data: bytes) -> dict | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
