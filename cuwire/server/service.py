"""The session server: accepts sessions over gRPC, checks the handshake, runs each session's batches.

It runs the sessions as threads of its own process. With isolation=process (the default), the
listener (server/listener.py) starts one of these per session, for that session alone.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from concurrent import futures

import grpc
import zstandard

import cuwire
from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import cuwire_pb2_grpc as pb_grpc
from cuwire.generated import server_handlers as generated
from cuwire.server.backend import open_backend
from cuwire.server.module_cache import ModuleCache
from cuwire.server.session import Session
from cuwire.settings import Settings
from cuwire.transport import CHANNEL_OPTIONS

log = logging.getLogger("cuwire.server")


ATTRIBUTE_UNSUPPORTED = -(2**31)  # in Device.attributes: the driver refused this attribute number
COMPUTE_CAPABILITY = (75, 76)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR


class CuWireServer:
    """What all sessions share: the backend, the module cache, the devices."""

    def __init__(self, settings: Settings):
        self.settings = settings
        if settings.devices:
            os.environ["CUDA_VISIBLE_DEVICES"] = settings.devices
        self.ffi, self.lib, self.backend = open_backend(settings.backend)
        self.modules = ModuleCache(settings.cache_dir)
        self.devices = self.query_devices()
        self.session_ids = itertools.count(1)
        self.zstd = zstandard.ZstdDecompressor()
        self.on_session_end = lambda: None  # a one-session process stops here
        self.session_started = threading.Event()

    def query_devices(self) -> list[pb.Device]:
        ffi, lib = self.ffi, self.lib
        count = ffi.new("int *")
        err = lib.cuInit(0) or lib.cuDeviceGetCount(count)
        if err != 0:
            text = ffi.new("const char **")
            why = ffi.string(text[0]).decode() if lib.cuGetErrorString(err, text) == 0 and text[0] else "unknown"
            raise RuntimeError(f"no usable GPU: the driver returned error {err} ({why}). "
                               "For tests without a GPU, run the server with --emulated.")
        out = []
        for i in range(count[0]):
            dev, name, memory = ffi.new("CUdevice *"), ffi.new("char[256]"), ffi.new("size_t *")
            lib.cuDeviceGet(dev, i)
            lib.cuDeviceGetName(name, 256, dev[0])
            lib.cuDeviceTotalMem_v2(memory, dev[0])
            attributes = self.device_attributes(dev[0])
            out.append(pb.Device(name=ffi.string(name).decode(errors="replace"),
                                 major=attributes[COMPUTE_CAPABILITY[0]], minor=attributes[COMPUTE_CAPABILITY[1]],
                                 total_memory=memory[0], attributes=attributes, uuid=self.device_uuid(dev[0]),
                                 **self.primary_context(dev[0])))
        return out

    def primary_context(self, device: int) -> dict[str, int]:
        """Retain the device's primary context for the life of this process (sessions use it)."""
        ffi, lib = self.ffi, self.lib
        ctx, flags, active = ffi.new("CUcontext *"), ffi.new("unsigned int *"), ffi.new("int *")
        if lib.cuDevicePrimaryCtxRetain(ctx, device) != 0:
            return {}
        lib.cuDevicePrimaryCtxGetState(device, flags, active)
        return {"primary_context": int(ffi.cast("uintptr_t", ctx[0])), "primary_flags": flags[0]}

    def device_attributes(self, device: int) -> list[int]:
        """Every cuDeviceGetAttribute value of the device, once: clients answer from this snapshot."""
        ffi, lib = self.ffi, self.lib
        value = ffi.new("int *")
        count = ffi.typeof("CUdevice_attribute").relements["CU_DEVICE_ATTRIBUTE_MAX"]
        return [value[0] if lib.cuDeviceGetAttribute(value, attr, device) == 0 else ATTRIBUTE_UNSUPPORTED
                for attr in range(count)]

    def device_uuid(self, device: int) -> bytes:
        uuid = self.ffi.new("CUuuid *")
        return bytes(self.ffi.buffer(uuid)) if self.lib.cuDeviceGetUuid_v2(uuid, device) == 0 else b""

    def driver_version(self) -> int:
        version = self.ffi.new("int *")
        self.lib.cuDriverGetVersion(version)
        return version[0]

    def decode(self, data: bytes, codec: int) -> bytes:
        return self.zstd.decompress(data) if codec == pb.ZSTD else data

    def welcome(self, hello: pb.Hello, peer: str) -> tuple[pb.Reply, Session | None]:
        """Check the handshake; a mismatch gets one clear message and no session."""
        refusal = check_hello(self.settings, hello)
        if refusal is not None:
            return refusal, None
        self.session_started.set()
        name = self.settings.session_name or f"{next(self.session_ids)}"
        session = Session(self, peer, hello, name)
        log.info("session %s opened for pid %d on %s (%s), backend %s", name, hello.pid, hello.host, peer,
                 self.backend)
        if self.backend == "emulated":
            log.warning("session %s runs on the EMULATED device (tests only)", name)
        return pb.Reply(welcome=pb.Welcome(
            server_version=cuwire.__version__, cuda_version=generated.CUDA_VERSION,
            api_digest=generated.API_DIGEST, backend=self.backend, devices=self.devices, session=name,
            driver_version=self.driver_version())), session


def check_hello(settings: Settings, hello: pb.Hello) -> pb.Reply | None:
    """The refusal for a Hello with the wrong token or from another API version, else None."""
    if settings.token and hello.token != settings.token:
        return pb.Reply(error="the server refused the token (set CUWIRE_TOKEN to the server's token)",
                        refusal=pb.TOKEN)
    if hello.api_digest != generated.API_DIGEST or hello.cuda_version != generated.CUDA_VERSION:
        return pb.Reply(error=(
            f"version mismatch: the client (cuwire {hello.client_version}) was generated for CUDA "
            f"{hello.cuda_version} with API digest {hello.api_digest}, the server (cuwire {cuwire.__version__}) "
            f"for CUDA {generated.CUDA_VERSION} with API digest {generated.API_DIGEST}; build both from the "
            "same cuwire version"), refusal=pb.VERSION)
    return None


class Servicer(pb_grpc.CuWireServicer):
    def __init__(self, server: CuWireServer):
        self.server = server

    def Session(self, request_iterator, context):
        session = None
        try:
            for batch in request_iterator:
                if session is None:
                    if not batch.HasField("hello"):
                        yield pb.Reply(error="a session starts with a hello", refusal=pb.PROTOCOL)
                        return
                    reply, session = self.server.welcome(batch.hello, context.peer())
                    yield reply
                    if session is None:
                        return
                    continue
                yield session.run(batch)
        finally:
            if session is not None:
                session.close()
                self.server.on_session_end()


def serve(settings: Settings, max_sessions: int = 64) -> tuple[grpc.Server, CuWireServer, int]:
    """Start listening; returns the gRPC server, the shared state and the bound port."""
    state = CuWireServer(settings)
    # one thread per session; a client beyond max_sessions is refused at once (RESOURCE_EXHAUSTED)
    # instead of waiting for a thread that may never come
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_sessions), options=CHANNEL_OPTIONS,
                         maximum_concurrent_rpcs=max_sessions)
    pb_grpc.add_CuWireServicer_to_server(Servicer(state), server)
    port = server.add_insecure_port(settings.listen)
    if port == 0:
        raise RuntimeError(f"cannot listen on {settings.listen}")
    server.start()
    return server, state, port
