"""cuwire's Kubernetes device plugin: the GPUs of cuwire servers as devices of GPU-less nodes.

It runs on each node whose pods may use remote GPUs (a DaemonSet: deploy/kubernetes/), serves the kubelet's
device plugin API (v1beta1) on a Unix socket in the kubelet's device-plugins folder, and registers the
resource (cuwire.dev/gpu) with the kubelet. The devices are the pool's (pool.py); each is healthy while
its server answers GET /healthz and exposes that GPU (a check of the hello: as many GPUs as the pool says;
a container across servers counts its GPUs by the pool's numbers). A container that asks for N of them
gets, through the kubelet, the settings that make its CUDA programs use them: CUWIRE_SERVER,
CUDA_VISIBLE_DEVICES, and the token and TLS fingerprint. The container's image brings cuwire itself (the
client image, or `pip install cuwire`): the client library runs Python inside the program, so a library
alone mounted in would not do.

Why a device plugin and not a DRA driver: it works on every cluster the NVIDIA device plugin works on,
needs no API-server access (no ResourceSlices to publish) and no feature gate, and a remote GPU is a
countable, interchangeable resource as the scheduler sees it. DRA (with BindingConditions for devices
reached over a network) is the better fit where clusters have it: docs/kubernetes.md says what it would
change.
"""

from __future__ import annotations

import http.client
import logging
import ssl
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc

from cuwire.generated import deviceplugin_pb2 as pb
from cuwire.generated import deviceplugin_pb2_grpc as rpc
from cuwire.kubernetes.pool import RESOURCE, Pool, PoolError
from cuwire.settings import host_port

log = logging.getLogger("cuwire.kubernetes")
API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


def exposed_gpus(server: str, token: str, pin: str, timeout: float = 5.0) -> int | None:
    """How many GPUs the server at HOST:PORT exposes, by a check of a client's hello (no session: the
    server's answer names their UUIDs); None when it cannot be asked (refused, not answering), said in the log."""
    from cuwire.wire.hello import make_hello
    from cuwire.wire.tls import ClientTls, TlsError
    from cuwire.wire.transport import TransportError, open_session

    try:
        transport, reply = open_session(server, make_hello(token, check=True), connect_timeout=timeout, mode="tcp",
                                        tls=ClientTls(fingerprint=pin) if pin else None)
        transport.close()
    except (TransportError, TlsError, OSError) as e:
        log.warning("server %s: its GPUs could not be counted (%s)", server, e)
        return None
    if reply.error:
        log.warning("server %s: its GPUs could not be counted (%s)", server, reply.error)
        return None
    return len(reply.devices)


def answers_health(server: str, tls: bool, timeout: float = 5.0) -> bool:
    """Whether the server at HOST:PORT answers GET /healthz with 200 (over TLS where its sessions are;
    liveness only: no session, no CUDA context, its certificate not checked)."""
    host, port = host_port(server)
    if tls:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


class DevicePlugin(rpc.DevicePluginServicer):
    """The kubelet's calls, answered from the pool and the servers' health."""

    def __init__(self, pool: Pool, token: str = "", tls_fingerprint: str = "",
                 probe: Callable[[str, bool], bool] = answers_health,
                 count: Callable[[str, str, str], int | None] = exposed_gpus):
        self.pool, self.token, self.tls_fingerprint, self.probe, self.count = pool, token, tls_fingerprint, probe, count
        self.healthy = dict.fromkeys(pool.servers(), True)
        self.exposed: dict[str, int | None] = dict.fromkeys(pool.servers())  # GPUs each exposes (None: not known)
        self.changed = threading.Condition()
        self.stopping = False

    def devices(self) -> list[pb.Device]:
        return [pb.Device(ID=g.id, health=HEALTHY if self.healthy[g.server] and (
            self.exposed[g.server] is None or g.index < self.exposed[g.server]) else UNHEALTHY)
            for g in self.pool.gpus]

    def check_health(self) -> None:
        """Ask each server, and how many GPUs it exposes; a change wakes ListAndWatch, which sends the kubelet
        the new list. A server that exposes fewer GPUs than the pool says has the others unhealthy (a
        container's CUDA_VISIBLE_DEVICES counts by the pool's numbers), said in the log."""
        for server in self.pool.servers():
            pin = next(g.tls_fingerprint for g in self.pool.gpus if g.server == server) or self.tls_fingerprint
            ok = self.probe(server, bool(pin))
            exposed = self.count(server, self.token, pin) if ok else self.exposed[server]
            with self.changed:
                if self.healthy[server] != ok:
                    log.info("server %s: %s", server, "healthy" if ok else "not answering: its devices unhealthy")
                    self.healthy[server] = ok
                    self.changed.notify_all()
                said = sum(1 for g in self.pool.gpus if g.server == server)
                if exposed != self.exposed[server]:
                    if exposed is not None and exposed < said:
                        log.warning("server %s exposes %d GPUs, the pool says %d: its GPUs from %d on are "
                                    "unhealthy (correct the pool)", server, exposed, said, exposed)
                    self.exposed[server] = exposed
                    self.changed.notify_all()

    def stop(self) -> None:
        with self.changed:
            self.stopping = True
            self.changed.notify_all()

    # ---------------------------------------------------------------- the kubelet's calls

    def GetDevicePluginOptions(self, request: pb.Empty, context) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(self, request: pb.Empty, context) -> Iterator[pb.ListAndWatchResponse]:
        sent = None
        while context.is_active():
            with self.changed:
                if self.stopping:
                    return
                devices = self.devices()
                if devices == sent:
                    self.changed.wait(timeout=1.0)
                    continue
            sent = devices
            yield pb.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest, context) -> pb.PreferredAllocationResponse:
        out = pb.PreferredAllocationResponse()
        for want in request.container_requests:
            try:
                chosen = self.pool.preferred(list(want.available_deviceIDs), list(want.must_include_deviceIDs),
                                             want.allocation_size)
            except PoolError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            out.container_responses.add(deviceIDs=chosen)
        return out

    def Allocate(self, request: pb.AllocateRequest, context) -> pb.AllocateResponse:
        out = pb.AllocateResponse()
        for want in request.container_requests:
            try:
                env = self.pool.container_env(list(want.devices_ids), self.token, self.tls_fingerprint)
            except PoolError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            out.container_responses.add(envs=env)
            log.info("allocated %s: %s on %s", ", ".join(want.devices_ids), env["CUDA_VISIBLE_DEVICES"],
                     env["CUWIRE_SERVER"])
        return out

    def PreStartContainer(self, request: pb.PreStartContainerRequest, context) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


class Served:
    """The plugin on its socket, registered with the kubelet; `serve` again after a kubelet restart."""

    def __init__(self, plugin: DevicePlugin, folder: Path, name: str = "cuwire.sock", resource: str = RESOURCE):
        self.plugin, self.folder, self.name, self.resource = plugin, folder, name, resource
        self.server: grpc.Server | None = None

    @property
    def socket(self) -> Path:
        return self.folder / self.name

    def serve(self) -> None:
        """(Re)start the plugin's socket, then register: the kubelet connects back to it at once."""
        if self.server is not None:
            self.server.stop(grace=None)
        self.socket.unlink(missing_ok=True)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        rpc.add_DevicePluginServicer_to_server(self.plugin, self.server)
        self.server.add_insecure_port(f"unix://{self.socket}")
        self.server.start()
        with grpc.insecure_channel(f"unix://{self.folder / KUBELET_SOCKET}") as channel:
            rpc.RegistrationStub(channel).Register(pb.RegisterRequest(
                version=API_VERSION, endpoint=self.name, resource_name=self.resource,
                options=pb.DevicePluginOptions(get_preferred_allocation_available=True)), timeout=10)
        log.info("registered %s with the kubelet: %d devices on %d servers", self.resource,
                 len(self.plugin.pool.gpus), len(self.plugin.pool.servers()))

    def run(self, stop: threading.Event, interval: float = 10.0) -> None:
        """Serve until `stop`: check the servers' health every `interval` seconds, and serve and register
        again when the kubelet restarted (it empties its folder: the socket is gone)."""
        self.serve()
        while not stop.wait(interval):
            self.plugin.check_health()
            if not self.socket.exists():
                log.info("the kubelet restarted: registering again")
                try:
                    self.serve()
                except grpc.RpcError as e:
                    log.warning("registering again failed (%s); trying at the next check", e.code())
        self.plugin.stop()
        if self.server is not None:
            self.server.stop(grace=2).wait()
        self.socket.unlink(missing_ok=True)
