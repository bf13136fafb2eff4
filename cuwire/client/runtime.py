"""The client's Python side, inside the program's process: the session with the server, the call path,
the map of device memory, modules (uploaded once per content) and kernel lookups.

Generated stubs (generated/client_calls.py) and hand-written ones (client/modules.py, launches.py, graphs.py,
driver.py, nvml.py) call into this module; it imports `_cuwire`, the client library's own cffi module, so it
only runs embedded.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import itertools
import os
import socket
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from _cuwire import ffi, lib
from google.protobuf.message import DecodeError

from cuwire import address_space, fatbin, kernel_facts, occupancy
from cuwire.client import clusters_ahead, device_choice, load_lists, named_loads
from cuwire.client.shared_host import SharedHost
from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb
from cuwire.generated import wire_ids
from cuwire.settings import Settings, sends_from_a_thread, server_list
from cuwire.wire import compression, layouts, ring
from cuwire.wire.hello import MOST_LIST_KEPT, gpu_arch, make_hello
from cuwire.wire.tls import TlsSocket, fingerprint
from cuwire.wire.transport import (
    BULK,
    MAX_MESSAGE,
    PEER_PIECE,
    Dropped,
    SocketTransport,
    TransportError,
    client_tls,
    open_session,
)

# The CUresult codes used here.
INVALID_VALUE, OUT_OF_MEMORY, DEVICE_UNAVAILABLE = (
    cu.CUDA_ERROR_INVALID_VALUE, cu.CUDA_ERROR_OUT_OF_MEMORY, cu.CUDA_ERROR_DEVICE_UNAVAILABLE)
NOT_SUPPORTED, NO_BINARY_FOR_GPU, UNKNOWN, NO_DEVICE, NOT_FOUND = (
    cu.CUDA_ERROR_NOT_SUPPORTED, cu.CUDA_ERROR_NO_BINARY_FOR_GPU, cu.CUDA_ERROR_UNKNOWN, cu.CUDA_ERROR_NO_DEVICE,
    cu.CUDA_ERROR_NOT_FOUND)
NAME_TAG = layouts.constant("CW_NAME_TAG")  # a handle the client names (name_load, name_kernel)
COPY_FROM_DEVICE = wire_ids.OP_IDS["CopyFromDevice"]  # a program's copy, made in C (client/calls.c)
# Sync functions whose C `fast` path queues the call (client/calls.c, launches.c) rather than answers it: --stats counts
# those calls as queued.
QUEUED_BY_C = ("cuMemcpyHtoD_v2", "cuMemcpyHtoDAsync_v2")
# ... and those whose `fast` path makes the call in C, waiting for the server (client/calls.c)
WAITED_BY_C = ("cuMemcpyDtoH_v2", "cuMemcpyDtoHAsync_v2")
# Where the device snapshot's attribute list (Device.attributes) holds the launch limits: the
MAX_THREADS_PER_BLOCK = cu.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
# ...and what a kernel's modelled attributes depend on (kernel_facts.Device)
MAX_REGISTERS_PER_MULTIPROCESSOR = cu.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR
MAX_SHARED_PER_BLOCK = cu.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK
# ...and which machine code it runs (a named load's cubin is for it exactly: name_load)
CAPABILITY = (cu.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cu.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
MAX_BLOCK_DIM = (cu.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, cu.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                 cu.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)
MAX_GRID_DIM = (cu.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, cu.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                cu.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)


(LOAD_MODULE, GET_KERNEL, GET_GLOBAL, LAUNCH_KERNEL, ERROR_STRING, MODULE_FUNCTIONS, MAX_ACTIVE_CLUSTERS,
 EXPORT_TABLE_SIZE, LINK, COPY_3D, KERNEL_NODE, HOST_NODE, GRAPH_NODES, REGISTER_HOST, UNREGISTER_HOST,
 MANAGED_ALLOC, GRAPH_NODE, CAPTURE_INFO, ALLOC_NODE_PARAMS, KERNEL_NODE_PARAMS, BATCH_NODE,
 GRAPH_DOT, ENUMERATE, MAKE_HANDLES, FUNCTION_ATTRIBUTES, PRELOAD) = (
    wire_ids.OP_IDS[n] for n in ("LoadModule", "GetKernel", "GetGlobal", "LaunchKernel", "ErrorString",
                             "ModuleFunctions", "MaxActiveClusters", "ExportTableSize", "Link", "Copy3D",
                             "KernelNode", "HostNode", "GraphNodes", "RegisterHost", "UnregisterHost",
                             "ManagedAlloc", "GraphNode", "CaptureInfo", "AllocNodeParams",
                             "KernelNodeParams", "BatchMemOpNode", "GraphDot",
                             "Enumerate", "MakeHandles", "FunctionAttributes", "Preload"))
KEEP_LIST = wire_ids.OP_IDS["KeepList"]
PEER_OFFER, PEER_FETCH = wire_ids.OP_IDS["PeerOffer"], wire_ids.OP_IDS["PeerFetch"]
# The session this Python side serves: a program's one server's, numbered 0 in client/routes.c (where a
# device list will number each server's; issue 39)
ONE_SESSION = 0


class Fail(Exception):
    """Ends a call with this CUDA error code (no traceback: the program gets the code)."""

    def __init__(self, code: int, message: str = ""):
        super().__init__(message or f"CUDA error {code}")
        self.code = code


@dataclass
class Kernel:
    handle: int
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def buffer_size(self) -> int:
        return max((o + s for o, s in zip(self.offsets, self.sizes, strict=True)), default=0)


@dataclass
class Stats:
    """What `CUWIRE_STATS=1` prints at exit (see print_stats)."""

    calls: Counter = field(default_factory=Counter)  # sync calls by name
    seconds: Counter = field(default_factory=Counter)  # time waiting for the server, by name
    queued: int = 0
    batches: int = 0
    flushes: int = 0  # round trips that carried only queued calls (a full queue, the end of the process)
    sends: int = 0  # batches of queued calls sent early, without waiting (no round trip)
    bytes_sent: int = 0
    bytes_received: int = 0
    bytes_sent_raw: int = 0
    bytes_received_raw: int = 0
    modules_uploaded: int = 0
    modules_cached: int = 0
    modules_preloaded: int = 0  # of modules_cached: loaded ahead from the program's last run's list
    modules_sent_ahead: int = 0  # of modules_uploaded: sent with the load's first request (load_on)
    modules_sent_for_nothing: int = 0  # of modules_cached: sent so, but the server had it
    modules_named: int = 0  # loaded without waiting, under a name the client gave (name_load)
    kernels_named: int = 0  # looked up so (name_kernel)
    modules_by_digest: int = 0  # of modules_named: large ones the server's cache had (Welcome.large_images)
    occupancy_modelled: int = 0  # occupancy questions of named kernels the client answered (occupancy.py)
    list_from_server: bool = False  # ...the list the server kept (this machine had none: load_lists.Run)
    peer_bytes: int = 0  # copied between two servers of a device list, server to server (copy_between)
    wait_seconds: float = 0.0
    host_fn_waits: int = 0  # copies from page-locked memory that waited for the program's host functions (TCP)
    host_fn_wait_seconds: float = 0.0  # (not in wait_seconds: no round trip of the client's own)
    payload_sent: int = 0  # of bytes_sent: large buffers beside the messages (transport.py)
    payload_received: int = 0
    stripes: int = 0  # more connections the session opened for large payloads (cuwire/wire/stripes.py)
    striped: int = 0  # payload bytes that went over them
    transport: str = ""  # how the session travels, e.g. "TCP to 127.0.0.1:50551"
    resumes: int = 0  # times the connection dropped and the session went on (cuwire/wire/stream.py)
    connected: float = 0.0  # time.monotonic() when the session opened


OPEN_ATTEMPTS = 4  # tries of a session's hello whose connection dropped before the welcome
# A module image sent with its load's first request once the run found the server's cache without one (load_on):
# at most this large (most of a framework's images are smaller), so that one sent for nothing, which happens once
# each time the run turns from images the server lacks to one it has, costs a few round trips' time at 1 Gbit/s
UPLOAD_AHEAD_MOST = named_loads.WITH_LOAD_MOST  # an image this large at most goes with its load's first request
# what occupancy.py reckons with, of a kernel's attributes (model_occupancy), and the sets it knows of
MAX_DYNAMIC_SHARED = cu.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
CARVEOUT = cu.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
MODELLED_FOR_OCCUPANCY = {cu.CU_FUNC_ATTRIBUTE_NUM_REGS, cu.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                          cu.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, MAX_DYNAMIC_SHARED, CARVEOUT}
SETS_MODELLED = {MAX_DYNAMIC_SHARED, CARVEOUT}
MOST_LOADS_KEPT = 4096  # module loads whose answers the client keeps, for a load of the same image again


class Session:
    """The client's half of one server session: connection, handshake, caches that live as long as it."""

    def __init__(self, settings: Settings, address: str = "", number: int | None = None, mode: str = "",
                 pin: tuple[int, int] = (1, 1), visible: str | None = None):
        """A session on `address` (the program's server: settings.server), its place in a device list
        `number` (settings.server_number), over `mode` (settings.transport); `pin`: the server's place among
        the servers the program names, and how many (its TLS pin); `visible`: the GPUs of the server the
        program sees (of a device list: device_choice.py), else the program's CUDA_VISIBLE_DEVICES."""
        self.settings = settings
        tls = client_tls(settings, *pin)  # (a device list's servers may each have their own pin)
        self.address = address or settings.server
        number = settings.server_number if number is None else number
        keep_free = [pb.Span(start=lo, end=hi) for lo, hi in address_space.own_spans_to_keep()]
        hello = make_hello(settings.token, keep_free=keep_free, server_number=number)
        if visible is not None:
            hello.visible_devices = visible
        if settings.load_lists:  # (the list the server keeps for this program comes with the welcome)
            hello.program = load_lists.program_name(load_lists.own_command_line())
        hello.names_large_loads = bool(settings.named_loads)  # (the welcome lists the cache's large images)
        hello.resumes = True  # (SocketTransport.resumable)
        self.transport: SocketTransport
        self.host: SharedHost | None = None  # host memory shared with the server (page-locked allocations)
        self.reserved = 0  # address space reserved for shared page-locked memory (offer)
        for attempt in range(OPEN_ATTEMPTS):  # a connection dropped in the hello is tried again, as later ones
            try:  # resume (a refusal, a server that is not there or does not answer: at once)
                self.transport, reply = open_session(self.address, hello, mode=mode or settings.transport, shared=self,
                                                     tls=tls)
                break
            except Dropped:
                if self.reserved:
                    lib.cw_unmap(self.reserved, ring.HOST_SPAN)
                    self.reserved = 0
                if attempt == OPEN_ATTEMPTS - 1:
                    raise
                time.sleep(0.1 * 2 ** attempt)
        if self.reserved:  # the server took no shared memory: the reservation is not needed
            lib.cw_unmap(self.reserved, ring.HOST_SPAN)
            self.reserved = 0
        if reply.error:
            self.transport.close()
            raise TransportError(reply.error, reply.refusal)
        self.welcome = reply.welcome
        self.large_images = frozenset(self.welcome.large_images)  # (pinned there for the session: name_load)
        self.transport.may_join(hello, self.welcome, settings.stripes)
        self.transport.resumable(hello, self.welcome, ffi, lib, settings.resume_window)
        if self.welcome.backend == "emulated":
            print("cuwire: the server runs the EMULATED device (tests only): results are not from a GPU",
                  file=sys.stderr)


    def offer(self, hello: pb.Hello) -> None:
        """A server on this host: take shared memory for payloads, and for page-locked allocations at an
        address reserved here (the server maps it at the same address if it can, ring.py)."""
        hello.ring_size = ring.SIZE
        self.reserved = ring.reserve_host(lib)
        if self.reserved:
            hello.host_address, hello.host_span = self.reserved, ring.HOST_SPAN

    def attach(self, fds: list[int], welcome: pb.Welcome, sock_fd: int) -> ring.Ring:
        """The server's shared memory: the ring for payloads, and host memory for page-locked allocations
        (when it offers some). Takes the descriptors."""
        ring_fd, *rest = fds
        host_fd = rest.pop(0) if welcome.host_memory and rest else None
        for fd in rest:
            os.close(fd)
        reserved, self.reserved = self.reserved, 0
        try:
            shared = ring.attach(ffi, lib, ring_fd, sock_fd, self.settings.spin_us)
        except BaseException:
            if host_fd is not None:
                os.close(host_fd)
            if reserved:
                lib.cw_unmap(reserved, ring.HOST_SPAN)
            raise
        if host_fd is None:
            if reserved:
                lib.cw_unmap(reserved, ring.HOST_SPAN)
        else:
            kept = os.dup(host_fd)  # (memory the program registers itself moves into it: client/host_memory.c)
            base = ring.map_host_memory(lib, host_fd, welcome.host_memory, welcome.host_address, reserved)
            self.host = SharedHost(base, welcome.host_memory, welcome.host_address, kept)
        return shared


def machine_code(image: bytes) -> bytes | None:
    """The cubin an image (what image_for sends: one fatbin entry, or an ELF) holds, else None (PTX, a fatbin
    of several entries)."""
    kind = fatbin.image_kind(image)
    if kind == "elf":
        return image
    if kind != "fatbin":
        return None
    try:
        entries = fatbin.parse(image)
        return fatbin.decompress(entries[0]) if len(entries) == 1 and entries[0].kind == "elf" else None
    except ValueError:
        return None


def lookup_key(args: pb.GetKernel_Args) -> tuple:
    """Where Client.lookups keeps a lookup's answer. The same lookup gives the same handle (modules stay
    loaded on the server for the session); a kernel's function is the current context's, so that one is
    kept per context."""
    return (args.module, args.name, args.from_module, args.kernel,
            lib.cuwire_current_context() if args.kernel else 0)


def keep_attributes(k: pb.LoadedKernel | pb.GetKernel_Result | pb.KernelFunction | pb.KernelAttributes, handle: int,
                    kernel: bool) -> None:
    """A kernel's or function's attributes, when its load or lookup brought them: kept by
    client/answers_cache.c, which would otherwise ask them (cuwire.FunctionAttributes) before its first
    launch. `handle`: the kernel's or function's."""
    if k.attribute_statuses and len(k.attribute_statuses) == len(k.attribute_values):
        device = k.attribute_device if kernel else 0
        lib.cuwire_keep_every_attribute(int(kernel), handle, device, list(k.attribute_statuses),
                                        list(k.attribute_values), len(k.attribute_statuses))


def note_kernel(handle: int, kernel: int) -> None:
    """`handle` is kernel number `kernel` (load_lists.Run.identify; 0: not known): an attribute set of another
    kernel leaves its kept answers as they are (client/answers_cache.c)."""
    if kernel:
        lib.cuwire_note_kernel(handle, kernel)


def give_layout_to_c(key, k: Kernel) -> None:
    """Launches through `key` (the CUfunction or CUkernel the program holds) are checked and queued in C
    from now on, as launches of the server's `k.handle` with k's parameter layout (client/launches.c)."""
    lib.cuwire_cache_kernel(ffi.cast("void *", key), k.handle, len(k.offsets),
                            ffi.new("uint32_t[]", list(k.offsets) or [0]), ffi.new("uint32_t[]", list(k.sizes) or [0]))


def answers_per_model(sessions: list[Session]) -> None:
    """GPUs of more than one model among the sessions' (a device list's servers, or one server's): the C
    answers cache keeps a kernel's answers per device (answers_cache.c), since they differ between models."""
    models = {(d.name, d.major, d.minor) for session in sessions for d in session.welcome.devices}
    lib.cuwire_answers_per_device(int(len(models) > 1))


def give_devices_to_c(welcomes: list[pb.Welcome]) -> None:
    """The driver's answers about devices (client/driver_local.c) come from this snapshot: each session's
    devices, in the order of the sessions (a device list's, docs/several-servers.md)."""
    welcome = welcomes[0]
    devices = [d for w in welcomes for d in w.devices]
    n_attrs = max((len(d.attributes) for d in devices), default=0)
    attrs = [v for d in devices for v in (list(d.attributes) + [-(2**31)] * (n_attrs - len(d.attributes)))]
    names = [ffi.new("char[]", d.name.encode()) for d in devices]
    uuids = b"".join(d.uuid.ljust(16, b"\0")[:16] for d in devices)
    lib.cuwire_set_devices(len(devices), n_attrs, ffi.new("int32_t[]", attrs or [0]),
                           ffi.new("char *[]", names or [ffi.NULL]), ffi.new("uint8_t[]", uuids or b"\0"),
                           ffi.new("uint64_t[]", [d.total_memory for d in devices] or [0]),
                           ffi.new("uint64_t[]", [d.primary_context for d in devices] or [0]),
                           ffi.new("uint32_t[]", [d.primary_flags for d in devices] or [0]), welcome.driver_version)
    attrs = list(devices[0].attributes) if devices else []
    if len(attrs) > max(MAX_GRID_DIM):  # from now on launches of known functions are checked and queued in C
        block, grid = ([attrs[i] for i in MAX_BLOCK_DIM], [attrs[i] for i in MAX_GRID_DIM])
        lib.cuwire_set_launch_limits(attrs[MAX_THREADS_PER_BLOCK], ffi.new("uint32_t[3]", block),
                                     ffi.new("uint32_t[3]", grid))


class Client:
    """Process-wide client state. One lock serialises calls: the stream carries one call at a time."""

    def __init__(self) -> None:
        self.settings = Settings()
        self.lock = threading.RLock()
        self.session: Session | None = None
        self.listed: list[Session] = []  # a device list's other servers' sessions, numbered 1.. (routes.c)
        self.lost: dict[int, str] = {}  # a device list's servers gone, by route: why (lose_server)
        self.broken: str = ""  # why the server cannot be reached any more
        self.broken_code = DEVICE_UNAVAILABLE  # ...and what the calls then fail with
        if self.settings.errors:  # said once, at the first call that needs the server, which fails
            self.broken = "settings that do not parse, so no session: " + "; ".join(self.settings.errors)
        self.told = False  # whether the program was told why
        self.told_refusals: set[str] = set()  # the server's reasons for NOT_SUPPORTED, said once each
        self.stats = Stats()
        self.names: dict[int, str] = {}
        self.error_strings: dict[tuple[int, bool, bool], object] = {}  # kept alive: C holds the pointers
        self.lookups: dict[tuple, Kernel] = {}  # kernel and function lookups already answered (lookup_kernel)
        self.next_name = itertools.count(1)  # the handles the client names (name_load, name_kernel)
        self.named_libraries: dict[int, kernel_facts.CubinFacts] = {}  # a named library -> its kernels
        # a named kernel -> its library's facts and its own (its function is named too: name_kernel)
        self.named_kernels: dict[int, tuple[kernel_facts.CubinFacts, kernel_facts.KernelFacts]] = {}
        self.cache_missed: set[int] = set()  # routes whose server lacked an image of this run's (load_on)
        self.loaded: dict[tuple, pb.LoadModule_Result] = {}  # (digest, as_module, its context) -> load_image's
        self.run: load_lists.Run | None = None  # the program's list and this run's (program_run)
        self.kernel_names: dict[int, object] = {}  # kernel or function handle -> its name (char[], kept alive)
        # client copy of a driver function object -> (server function, the copy kept alive)
        self.function_objects: dict[int, tuple[int, object]] = {}
        self.alloc_size = ffi.new("uint64_t *")  # cuwire_allocation_of's out-parameter (allocation)
        self.taken = (ffi.new("char **"), ffi.new("uint64_t *"))  # cuwire_queue_take's out-parameters (take_queued)
        self.zstd_d = compression.decompressor()
        self.policy = compression.Policy("off")  # the session's (connect): whether it compresses now
        self.callbacks_refused = False  # the server refused a host-function connection (said once)
        self.ending = False  # the program is ending (at_exit): the server is told, and resumes no more
        self.wire_in_c = False  # client/wire.c makes calls on the session's socket (connect)

    # ---------------------------------------------------------------- the call path

    def connect(self) -> Session:
        if self.session is None:
            if self.broken:
                if not self.told:
                    self.told = True
                    print(f"cuwire: {self.broken}", file=sys.stderr)
                raise Fail(self.broken_code)
            try:
                self.open_sessions()
                connection = self.session.transport.connection
                host = self.session.host
                lib.cuwire_shared_host_set(host.base if host else 0, host.size if host else 0,
                                           host.server_base if host else 0, host.fd if host else -1)
                lib.cuwire_callbacks_ring(connection.ring.c if connection.ring else ffi.NULL)
                self.stats.transport = f"{connection.kind} to {self.settings.server}" + (
                    f" ({len(self.sessions)} servers, one device list)" if self.listed else "")
                self.stats.connected = time.monotonic()
                lib.cuwire_queue_send_every(self.settings.send_every_us)
                self.policy = compression.Policy(self.settings.compress, local=connection.sock.family == socket.AF_UNIX,
                                                 minimum=self.settings.compress_min)
                # client/wire.c sends its frames uncompressed and in the clear, on the socket itself
                if not self.policy.always and not isinstance(connection.sock, TlsSocket):
                    lib.cuwire_wire_spin(self.settings.spin_us)
                    with wire_lock():
                        lib.cuwire_wire_stream(ONE_SESSION, connection.stream.c if connection.stream else ffi.NULL)
                    lib.cuwire_wire_set(ONE_SESSION, self.session.transport.connection.sock.fileno())
                    for number, listed in enumerate(self.listed, 1):  # (a device list's other servers)
                        stream = listed.transport.connection.stream
                        with wire_lock(number):
                            lib.cuwire_wire_stream(number, stream.c if stream else ffi.NULL)
                        lib.cuwire_wire_set(number, listed.transport.connection.sock.fileno())
                    self.wire_in_c = True
                    if sends_from_a_thread(self.settings.send_thread):
                        lib.cuwire_sender_start()
            except TransportError as e:
                # (no device for the program's CUDA_VISIBLE_DEVICES: its calls fail as natively)
                self.give_up(str(e), NO_DEVICE if e.refusal == pb.NO_DEVICE else DEVICE_UNAVAILABLE)
                raise Fail(self.broken_code) from None
        return self.session

    def open_sessions(self) -> None:
        """The program's session, or a device list's: a session on each of its servers, each told its place
        (its windows of address space, address_space.windows), over TCP (the host memory a session shares
        with a server on this host is one per process today), their devices joined in the list's order and
        each one's windows handed to client/routes.c. One that fails closes those opened before it."""
        addresses = server_list(self.settings.server)
        if len(addresses) < 2:
            self.session = Session(self.settings)
            give_devices_to_c([self.session.welcome])
            answers_per_model([self.session])
            return
        chosen = [(place, None) for place in range(len(addresses))]
        if "CUDA_VISIBLE_DEVICES" in os.environ:  # (it picks among the list's GPUs, as among one machine's)
            chosen = self.choose_devices(addresses, os.environ["CUDA_VISIBLE_DEVICES"])
        opened: list[Session] = []
        try:
            for number, (place, visible) in enumerate(chosen, 1):
                opened.append(Session(self.settings, addresses[place], number, "tcp", (place + 1, len(addresses)),
                                      visible))
        except BaseException:
            for session in opened:
                session.transport.close()
            raise
        give_devices_to_c([session.welcome for session in opened])
        for route, session in enumerate(opened):
            windows = address_space.windows(route + 1)
            lib.cuwire_route_add_session(route, ffi.new("uint64_t[]", [lo for lo, _ in windows]),
                                         ffi.new("uint64_t[]", [hi for _, hi in windows]), len(windows),
                                         len(session.welcome.devices))
        self.session, self.listed = opened[0], opened[1:]
        answers_per_model(opened)

    def choose_devices(self, addresses: list[str], value: str) -> list[tuple[int, str | None]]:
        """The servers of the device list whose GPUs the program's CUDA_VISIBLE_DEVICES picks, each with the
        UUIDs of those GPUs, in the order the program numbers them (device_choice.py): each server asked
        which GPUs it exposes, by a check of the hello (no session)."""
        exposed = []
        for place, address in enumerate(addresses, 1):
            transport, reply = open_session(address, make_hello(self.settings.token, check=True), mode="tcp",
                                            tls=client_tls(self.settings, place, len(addresses)))
            transport.close()
            if reply.error:
                raise TransportError(f"{address}: {reply.error}", reply.refusal)
            exposed.append(list(reply.devices))
        try:
            chosen = device_choice.choose(value, exposed)
        except device_choice.ChoiceError as e:
            raise TransportError(str(e), pb.NO_DEVICE) from None
        if not chosen:
            raise TransportError(f"the program's CUDA_VISIBLE_DEVICES={value!r} names no GPU of the device list "
                                 f"{','.join(addresses)}", pb.NO_DEVICE)
        return [(place, ",".join(uuids)) for place, uuids in chosen]

    @property
    def sessions(self) -> list[Session]:
        """The open sessions, by route (client/routes.c): the program's own, then a device list's others."""
        return [self.session, *self.listed] if self.session is not None else []

    def session_of(self, route: int) -> Session:
        """The session a route names (client/routes.c): the program's own, or a device list's."""
        return self.session if route <= 0 or route > len(self.listed) else self.listed[route - 1]

    def exchange(self, fn: int, args: bytes, route: int = ONE_SESSION) -> pb.Reply:
        """Send the route's session's queued calls and (if fn) one call to it; return the server's reply."""
        with self.lock:
            self.connect()
            if route in self.lost:  # (said once, when it went: lose_server)
                raise Fail(DEVICE_UNAVAILABLE)
            session = self.session_of(route)
            with wire_lock(route):  # client/wire.c sends on the same socket: one frame at a time, in order
                return self._exchange(session, fn, args, route)

    def _exchange(self, session: Session, fn: int, args: bytes, route: int = ONE_SESSION) -> pb.Reply:
        """exchange, the lock and the route's wire lock held."""
        batch = pb.Batch(fn=fn)
        self.take_queued(batch, route)
        lib.cuwire_note_sent(1)  # what the client knew finished holds no more (client/completion.c)
        if fn:
            batch.args, batch.args_codec = self.encode(args)
        state = bulk()
        outgoing, state.outgoing = state.outgoing, []
        expected, state.expected = state.expected, []
        into = [ffi.buffer(ffi.cast("char *", ptr), size) for ptr, size in expected]
        raw_payload = sum(len(part) for part in outgoing)
        policy = self.policy
        if outgoing and policy.wants(raw_payload):
            whole = outgoing[0] if len(outgoing) == 1 else b"".join(outgoing)
            if policy.pays(whole):  # else it goes as it is, streamed and striped
                outgoing = [policy.compress(whole)]
                batch.payload_codec = pb.ZSTD
        batch.ending = self.ending
        if policy.active():
            batch.reply_codec = pb.ZSTD  # large results may come compressed, where that pays on this link
            batch.link_rate = 0.0 if policy.always else policy.link_rate or compression.AUTO_SLOW
        asked = sum(size for _, size in expected)  # the most result bytes the reply's payload may bring
        t0 = time.perf_counter()
        try:
            reply, payload, direct = session.transport.exchange_with_payload(batch, outgoing, into,
                                                                             max_payload=compression.bound(asked))
        except TransportError as e:
            self.lose(e, route)
        dt = time.perf_counter() - t0
        wire_in = len(payload) + direct
        wire_payload = sum(len(part) for part in outgoing) + wire_in
        if reply.payload_codec == pb.ZSTD:
            try:
                rest, direct = compression.decompress_into(self.zstd_d, payload, into, asked)
            except ValueError as e:
                raise bad_reply(f"its compressed payload does not decompress: {e}") from None
            payload = bytearray(rest)
        elif reply.payload_codec != pb.RAW:
            raise bad_reply(f"a payload in an unknown encoding ({reply.payload_codec})")
        policy.observe(raw_payload + len(payload) + direct, wire_payload,
                       bool(batch.payload_codec or reply.payload_codec), session.transport.rate)
        self.stats.batches += 1
        self.stats.wait_seconds += dt
        state.incoming, state.taken = memoryview(payload), 0
        state.filled, got_direct = set(), direct
        for ptr, size in expected:
            if direct <= 0:
                break
            if direct < size:
                raise bad_reply(f"its payload ended inside a {size}-byte result buffer")
            state.filled.add(int(ffi.cast("uintptr_t", ptr)))
            direct -= size
        connection = session.transport.connection
        received = len(payload) + got_direct
        self.stats.bytes_sent += connection.sent  # headers, messages and payloads, as they went
        self.stats.bytes_received += connection.received
        self.stats.payload_sent += sum(len(part) for part in outgoing)
        self.stats.payload_received += wire_in
        self.stats.stripes, self.stats.striped = len(connection.stripes), connection.striped_bytes
        self.stats.bytes_sent_raw += raw_payload
        self.stats.bytes_received_raw += received
        if fn:
            self.stats.calls[fn] += 1
            self.stats.seconds[fn] += dt
        if reply.output:  # device printf output: after what the program printed itself (its C stdio too)
            sys.stdout.flush()
            lib.cuwire_write_output(reply.output, len(reply.output))
        if reply.refused and reply.refused not in self.told_refusals:  # said once each
            self.told_refusals.add(reply.refused)
            print(f"cuwire: not supported: {reply.refused}", file=sys.stderr)
        if reply.error:
            print(f"cuwire: the server refused a call: {reply.error}", file=sys.stderr)
            raise Fail(UNKNOWN)
        return reply

    def open_callbacks(self, route: int = ONE_SESSION) -> int:
        """The route's session's host-function connection, for client/callbacks.c (over TCP; a client on the
        server's host has the shared memory): 0, or NOT_SUPPORTED after saying why, once."""
        with self.lock:
            self.connect()
            if route in self.lost:
                return DEVICE_UNAVAILABLE
            session = self.session_of(route)
            if session.transport.connection.ring is not None:
                return 0
            try:
                fd = session.transport.open_callbacks()
            except TransportError as e:
                # (a connection dropped as it opened: tried again, within the grace, where the session resumes)
                fd = session.transport.reopen_callbacks() if not e.refusal else -1
                if fd >= 0:
                    lib.cuwire_callbacks_socket(route, fd)
                    return 0
                if not self.callbacks_refused:
                    self.callbacks_refused = True
                    print(f"cuwire: no connection for host functions: {e}", file=sys.stderr)
                return NOT_SUPPORTED
            lib.cuwire_callbacks_socket(route, fd)
            return 0

    def take_queued(self, batch: pb.Batch, route: int = ONE_SESSION) -> int:
        """Move the calls queued in C for the route's session into `batch` (encoded); how many there were.
        The lock is held."""
        data, count = self.taken
        size = lib.cuwire_queue_take(route, data, count)
        if not size:
            return 0
        records = bytes(ffi.buffer(data[0], size))
        lib.cuwire_free(data[0])
        batch.records, batch.records_codec = self.encode(records)
        self.stats.queued += count[0]
        self.stats.bytes_sent_raw += size
        return count[0]

    def lose(self, e: TransportError, route: int = ONE_SESSION) -> None:
        """The session is gone: say so once; every call from now on fails with DEVICE_UNAVAILABLE (of a
        device list: the calls of that server's devices). The wire lock of `route` is held."""
        if self.listed:
            self.lose_server(route, str(e))
            raise Fail(DEVICE_UNAVAILABLE) from None
        self.drop_session()
        self.give_up(str(e))
        raise Fail(DEVICE_UNAVAILABLE) from None

    def lose_server(self, route: int, why: str) -> None:
        """A server of the device list is gone: the calls of its devices fail from now on
        (DEVICE_UNAVAILABLE), what was queued for it is dropped, and the program is told once, naming it and
        its devices; the other servers' sessions go on (issue 39). The lock is held."""
        if route in self.lost:
            return
        self.lost[route] = why
        session = self.session_of(route)
        lib.cuwire_wire_set(route, -1)  # (its wire lock is held by whoever found the break, or was let go)
        lib.cuwire_queue_refuse(route)
        session.transport.close()
        first = sum(len(s.welcome.devices) for s in self.sessions[:route])
        devices = f"{first}" if len(session.welcome.devices) == 1 else \
            f"{first} to {first + len(session.welcome.devices) - 1}"
        print(f"cuwire: lost the cuwire server {session.address} (the program's device {devices} of its list): "
              f"{why}; its calls fail from now on, the other servers' go on", file=sys.stderr)

    def drop_session(self) -> None:
        """Close the session's connection; the lock and the wire lock are held (client/wire.c must not
        use a socket number that another file may take next)."""
        if self.session is not None:
            lib.cuwire_wire_set(ONE_SESSION, -1)
            self.wire_in_c = False
            lib.cuwire_wire_stream(ONE_SESSION, ffi.NULL)
            lib.cuwire_callbacks_stop()  # its thread waits in the shared memory or on the connection closed next
            self.stats.resumes += self.session.transport.resumes()
            self.session.transport.close()
            self.session = None
            for number, listed in enumerate(self.listed, 1):  # (a device list's, closed with it)
                lib.cuwire_wire_set(number, -1)
                self.stats.resumes += listed.transport.resumes()
                listed.transport.close()
            self.listed, self.lost = [], {}
            lib.cuwire_forget_kernels()
            lib.cuwire_forget_pools(0)

    def wire_broken(self, why: str, route: int = ONE_SESSION) -> None:
        """client/wire.c lost the connection of `route`'s session in a call of its own."""
        with self.lock:
            if self.listed:
                self.lose_server(route, why)
            elif self.session is not None:
                with wire_lock():
                    self.drop_session()
                self.give_up(why)

    def give_up(self, why: str, code: int = DEVICE_UNAVAILABLE) -> None:
        """No server from now on: say why, once; what was queued is dropped, and the C queue refuses
        more (the calls fail at once, with `code`), so a program that goes on calling does not fill memory."""
        self.broken, self.told, self.broken_code = why, True, code
        print(f"cuwire: {why}", file=sys.stderr)
        for route in range(lib.cuwire_route_sessions()):
            lib.cuwire_queue_refuse(route)

    def call(self, fn: int, args, result_cls, route: int | None = None):
        """One call that waits, to the session `route` names (route(); None: the calling thread's current
        context's, as client/routes.c says)."""
        changed = lib.cuwire_managed_before_call()  # the program's changes to managed memory go first
        if changed:
            raise Fail(changed)
        raw = args.SerializeToString()
        self.stats.bytes_sent_raw += len(raw)
        reply = self.exchange(fn, raw, lib.cuwire_route_current() if route is None else route)
        data = self.decode(reply.result, reply.result_codec)
        self.stats.bytes_received_raw += len(data)
        try:
            res = result_cls.FromString(data)
        except DecodeError as e:
            raise bad_reply(f"its result does not parse as {result_cls.__name__} ({e})") from None
        if reply.queued_error and "status" not in result_cls.DESCRIPTOR.fields_by_name:
            raise Fail(reply.queued_error)  # (a result of many statuses: the call fails with it)
        if reply.queued_error and res.status == 0:
            res.status = reply.queued_error  # an earlier queued call failed: surface it here, as CUDA does
        return res

    def flush(self, route: int = ONE_SESSION) -> int:
        self.stats.flushes += 1
        reply = self.exchange(0, b"", route)
        return reply.queued_error

    def send_queued(self, route: int = ONE_SESSION) -> int:
        """Send the route's session's queued calls without waiting for an answer (their first error, if any,
        comes with the next reply, as CUDA's asynchronous errors do); 0, or the error that the session is
        lost."""
        with self.lock:
            if self.session is None:
                return 0  # they go with the session's first call
            session = self.session_of(route)
            with wire_lock(route):
                batch = pb.Batch(no_reply=True)
                if not self.take_queued(batch, route):
                    return 0  # (its records were counted as queued: client/completion.c)
                self._send_only(session, batch, route)
                return 0

    def _send_only(self, session: Session, batch: pb.Batch, route: int) -> None:
        """Send a batch nobody waits for on the route's session (send_queued, send_unanswered); the lock and
        the route's wire lock held."""
        try:
            session.transport.send_only(batch)
        except TransportError as e:
            self.lose(e, route)
        self.stats.sends += 1
        self.stats.bytes_sent += session.transport.connection.sent

    def encode(self, data: bytes) -> tuple[bytes, int]:
        if self.policy.wants(len(data)):
            return self.policy.compress(data), pb.ZSTD
        return data, pb.RAW

    def decode(self, data: bytes, codec: int) -> bytes:
        """A reply's result message, as the server encoded it."""
        if codec == pb.ZSTD:
            return self.decompress(data, MAX_MESSAGE, "result")
        if codec != pb.RAW:
            raise bad_reply(f"a result in an unknown encoding ({codec})")
        return data

    def decompress(self, data: bytes, limit: int, what: str) -> bytes:
        try:
            return compression.decompress(self.zstd_d, data, limit)
        except ValueError as e:
            raise bad_reply(f"its compressed {what} does not decompress: {e}") from None

    # ---------------------------------------------------------------- device memory map

    # the map lives in C (client/device_memory.c): the queued copies of client/queue.c consult it too

    def track_alloc(self, address: int, size: int) -> None:
        lib.cuwire_track_alloc(address, size)
        lib.cuwire_guard_device_range(address, size)  # no host memory of the program may come to lie there

    def untrack_alloc(self, address: int) -> None:
        lib.cuwire_untrack_alloc(address)

    def allocation(self, address: int) -> tuple[int, int] | None:
        """(base, size) of the session's device allocation holding `address`, or None."""
        size = self.alloc_size
        base = lib.cuwire_allocation_of(address, size)
        return (base, size[0]) if base else None

    def allocation_of(self, address: int) -> int | None:
        """The base of the session's device allocation holding `address`, or None."""
        hit = self.allocation(address)
        return hit[0] if hit else None

    def is_device(self, address: int) -> bool:
        return self.allocation_of(address) is not None

    # ---------------------------------------------------------------- kernels and modules

    def load_image(self, blob: bytes, logs: list[str] | None = None, as_module: bool = False) -> int:
        """Load a fatbin, cubin or PTX image on the server (once per content: the hash goes first, the
        bytes only if the server lacks them); return its CUlibrary, or with as_module the library's
        CUmodule. Of a fatbin, only the entry the server's GPU would choose travels. `logs` receives the
        JIT's error and info logs. A module of the program's last run was loaded ahead (preloaded_load)."""
        session = self.connect()
        route = lib.cuwire_route_current()
        image, digest = self.image_for(blob, route)
        again = (digest, as_module, lib.cuwire_current_context() if as_module else 0)
        res, ahead = self.loaded.get(again), None
        if res is None:
            ahead = self.preloaded_load(session, digest, as_module)
            if ahead is not None:
                self.stats.modules_preloaded += 1
                res = ahead.load
        named = self.name_load(route, digest, image, as_module) if res is None else None
        if named is not None:
            res = pb.LoadModule_Result(module=named)
        elif res is None:
            res = self.load_on(route, digest, image, as_module)
            if self.listed and not as_module:  # a library belongs to no context: it is each server's
                self.load_elsewhere(res, blob)
        else:  # (loaded before, or ahead: the server had it)
            self.stats.modules_cached += 1
        if logs is not None:
            logs[:] = [res.error_log, res.info_log]
        if res.status != 0:
            raise Fail(res.status)
        if again not in self.loaded and len(self.loaded) < MOST_LOADS_KEPT:
            # the server keeps one library per image, and unloads are the client's (cuLibraryUnload): a
            # load of the same image gets the same answer (but for a first load's JIT logs), here
            self.loaded[again] = pb.LoadModule_Result(module=res.module, library_module=res.library_module,
                                                      kernels=res.kernels, functions=res.functions, cached=True)
        self.keep_lookups(res.kernels, res.module, False, digest)  # what cuLibraryGetKernel would ask: answered
        self.keep_lookups(res.functions, res.library_module, True, digest)  # and cuModuleGetFunction, of a module
        self.program_run(session).loaded(digest, as_module, res.module, res.library_module)
        if ahead is not None:  # (after the module's line: a list's question follows its module)
            self.keep_answers_ahead(ahead)
        return res.library_module if as_module else res.module

    def image_for(self, blob: bytes, route: int) -> tuple[bytes, bytes]:
        """What of a module image goes to the session `route` names, and its digest: of a fatbin, only the
        entry its server's GPUs choose, each model's where they are of several (a device list's servers may be
        of different models too)."""
        if fatbin.image_kind(blob) != "fatbin":
            return blob, hashlib.sha256(blob).digest()
        # (a server with GPUs of several models: each model's choice)
        image = fatbin.for_models(blob, [(d.major, d.minor) for d in self.session_of(route).welcome.devices])
        if image is None:
            raise Fail(NO_BINARY_FOR_GPU, "no code in the program for the server's GPU")
        return image, hashlib.sha256(image).digest()

    def load_on(self, route: int, digest: bytes, image: bytes, as_module: bool) -> pb.LoadModule_Result:
        """One server's load of the image: by its digest, the bytes uploaded only when its cache lacks them.
        Once a load of this run found the server's cache without its image, the next small one goes with its
        bytes (a program's first run on a server: one round trip a module, not two); one that was there
        after all, bytes sent for nothing, ends that until the next miss."""
        args = pb.LoadModule_Args(digest=digest, as_module=as_module)
        ahead = route in self.cache_missed and len(image) <= UPLOAD_AHEAD_MOST
        if ahead:
            args.image, args.image_codec = self.encode(image)
        res = self.call(LOAD_MODULE, args, pb.LoadModule_Result, route)
        if res.need_image:
            if res.status:  # an earlier queued call's error came with the answer: the load's, uploaded or not
                raise Fail(res.status)
            self.cache_missed.add(route)
            body, codec = self.encode(image)
            res = self.call(LOAD_MODULE, pb.LoadModule_Args(digest=digest, image=body, image_codec=codec,
                                                            as_module=as_module), pb.LoadModule_Result, route)
            self.stats.modules_uploaded += 1
        elif ahead and not res.cached:
            self.stats.modules_uploaded += 1
            self.stats.modules_sent_ahead += 1
        else:
            if ahead:
                self.cache_missed.discard(route)
                self.stats.modules_sent_for_nothing += 1
            self.stats.modules_cached += 1
        return res

    def name_load(self, route: int, digest: bytes, image: bytes, as_module: bool) -> int | None:
        """With CUWIRE_NAMED_LOADS: a library of machine code the client can describe (kernel_facts.py) loaded
        under a handle the client names, sent without waiting (the server takes the name for its library:
        Session.give_name), with its bytes or by its digest alone (client/named_loads.py); the name, or None
        where the load goes as asked (a module, PTX, a device list, code for another GPU, a large image the
        server's list could not say it lacks: CUWIRE_TRACE says which)."""
        if not self.settings.named_loads:
            return None
        facts = None
        how, why = named_loads.how_sent(len(image), digest, self.session_of(route).large_images)
        if how is not None:
            facts, why = self.describe_load(route, image, as_module)
        if facts is None:
            if self.settings.trace:
                print(f"cuwire trace: load of {len(image)} bytes asked (not named): {why}", file=sys.stderr)
            return None
        name = NAME_TAG | next(self.next_name)
        args = pb.LoadModule_Args(digest=digest, name=name)
        if how == named_loads.BYTES:
            args.image, args.image_codec = self.encode(image)
            self.stats.modules_uploaded += 1  # (its bytes go with it, whether the server's cache has it or not)
        else:
            self.stats.modules_cached += 1
            self.stats.modules_by_digest += 1
        self.send_unanswered(LOAD_MODULE, args, route)
        self.named_libraries[name] = facts
        self.stats.modules_named += 1
        return name

    def describe_load(self, route: int, image: bytes, as_module: bool) -> tuple[kernel_facts.CubinFacts | None, str]:
        """The kernels of an image a load may name (name_load), or None and why it may not."""
        if as_module:
            return None, "a module (cuModuleLoad*), not a library"
        if self.listed:
            return None, "a device list (each server loads it)"
        cubin = machine_code(image)
        if cubin is None:
            return None, f"no single cubin ({fatbin.image_kind(image)}: PTX, or several entries)"
        try:
            facts = kernel_facts.read(cubin)
        except ValueError as e:
            return None, f"a cubin kernel_facts cannot read ({e})"
        if not self.runs_on_every_device(route, facts.sm):
            return None, f"machine code for sm_{facts.sm}, not the session's GPUs' (the driver says so at the load)"
        return facts, ""

    def runs_on_every_device(self, route: int, sm: int) -> bool:
        """Whether machine code for SM `sm` is for each device of the session exactly (its compute capability,
        from the device snapshot)."""
        devices = self.session_of(route).welcome.devices
        return bool(devices) and all(len(d.attributes) > max(CAPABILITY)
                                     and d.attributes[CAPABILITY[0]] * 10 + d.attributes[CAPABILITY[1]] == sm
                                     for d in devices)

    def name_kernel(self, route: int, args: pb.GetKernel_Args, facts: kernel_facts.CubinFacts,
                    found: kernel_facts.KernelFacts | None = None) -> Kernel:
        """A kernel of a library loaded under a name (name_load), looked up under a name too, without
        waiting: its layout from the image; a name the image has no kernel of is CUDA_ERROR_NOT_FOUND, as
        the driver says. With `found`, the function of such a kernel (args.kernel, cuKernelGetFunction),
        named the same way."""
        if found is None:
            found = facts.kernels.get(args.name)
            if found is None:
                raise Fail(NOT_FOUND)
        name = NAME_TAG | next(self.next_name)
        offsets, sizes = [o for o, _ in found.params], [n for _, n in found.params]
        self.send_unanswered(GET_KERNEL, pb.GetKernel_Args(module=args.module, name=args.name, kernel=args.kernel,
                                                           name_as=name, expect_offsets=offsets,
                                                           expect_sizes=sizes), route)
        self.stats.kernels_named += 1
        self.named_kernels[name] = (facts, found)
        self.keep_modelled_attributes(route, name, facts, found, kernel=not args.kernel)
        return Kernel(name, tuple(offsets), tuple(sizes))

    def keep_modelled_attributes(self, route: int, name: int, facts: kernel_facts.CubinFacts,
                                 found: kernel_facts.KernelFacts, kernel: bool = True) -> None:
        """A named kernel's attributes that kernel_facts models as the driver answers them (CHECKED), kept on
        each device of the session as a lookup's answer's would be; the runtime's questions of the others go
        to the server, as without a name. A named function's are its context's device's: kept where every
        device of the session gives the same."""
        if not kernel_facts.CHECKED:
            return
        per_device = []
        for d in self.session_of(route).welcome.devices:
            a = d.attributes
            if len(a) <= max(MAX_THREADS_PER_BLOCK, MAX_REGISTERS_PER_MULTIPROCESSOR, MAX_SHARED_PER_BLOCK):
                return
            device = kernel_facts.Device(a[MAX_THREADS_PER_BLOCK], a[MAX_REGISTERS_PER_MULTIPROCESSOR],
                                         a[MAX_SHARED_PER_BLOCK])
            per_device.append(kernel_facts.attributes(facts, found, device))
        if not kernel and any(values != per_device[0] for values in per_device):
            return
        count = cu.CU_FUNC_ATTRIBUTE_MAX
        for ordinal, values in enumerate(per_device if kernel else per_device[:1]):
            statuses = [0 if i in values else -1 for i in range(count)]
            lib.cuwire_keep_every_attribute(int(kernel), name, ordinal, statuses,
                                            [values.get(i, 0) for i in range(count)], count)

    def model_occupancy(self, ask: int, handle: int, a: int, b: int, c: int, sets: dict[int, int]) -> int | None:
        """An occupancy question (frames.h CW_ASK_*) of a kernel or function the client named, answered by
        cuwire/occupancy.py from the kernel's modelled attributes and the sets the program made of it
        (attribute -> value), where every device of the session gives the same answer; None: ask the server
        (a kernel not named, a set the model does not know of, a case it leaves to the driver)."""
        named = self.named_kernels.get(handle)
        if named is None or not occupancy.CHECKED or self.listed or set(sets) - SETS_MODELLED:
            return None
        facts, found = named
        answers = set()
        for d in self.session.welcome.devices:
            device = occupancy.Device.from_attributes(d.attributes)
            if device is None:
                return None
            values = kernel_facts.attributes(facts, found, kernel_facts.Device(
                device.max_threads_per_block, device.registers_per_sm, device.shared_per_block))
            if not MODELLED_FOR_OCCUPANCY <= set(values):
                return None
            fn = occupancy.Function(values[cu.CU_FUNC_ATTRIBUTE_NUM_REGS],
                                    values[cu.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES],
                                    values[cu.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK],
                                    sets.get(MAX_DYNAMIC_SHARED, values[MAX_DYNAMIC_SHARED]),
                                    sets.get(CARVEOUT, values[CARVEOUT]), found.barriers)
            answers.add(occupancy.answer(ask, device, fn, a, b, c))
        return answers.pop() if len(answers) == 1 else None

    def send_unanswered(self, fn: int, args, route: int) -> None:
        """A call nobody waits for (a load or lookup that names its handle), sent after the calls queued
        before it; its error, if any, comes with the next answer, as a queued call's does."""
        raw = args.SerializeToString()
        with self.lock:
            session = self.session_of(route)
            with wire_lock(route):
                batch = pb.Batch(fn=fn, no_reply=True)
                self.take_queued(batch, route)
                batch.args, batch.args_codec = self.encode(raw)
                self.stats.bytes_sent_raw += len(raw)
                self._send_only(session, batch, route)

    def copy_between(self, dst: int, src: int, size: int) -> int:
        """A copy between the memory of two servers of the device list (server/peer_copy.py): each piece
        offered by the source's server and fetched by the destination's, the bytes going server to server;
        the copy is done when this returns (an asynchronous one too: it is ordered after each side's earlier
        work, and finished before anything after it)."""
        src_route, dst_route = lib.cuwire_route_value(src), lib.cuwire_route_value(dst)
        source = self.session_of(src_route)
        sock = source.transport.connection.sock  # over TLS: the server to server copy too, pinned to its certificate
        pin = fingerprint(sock.peer_certificate()) if isinstance(sock, TlsSocket) else ""
        for at in range(0, size, PEER_PIECE):
            n = min(PEER_PIECE, size - at)
            offer = self.call(PEER_OFFER, pb.PeerOffer_Args(src=src + at, size=n), pb.PeerOffer_Result, src_route)
            if offer.status:
                return offer.status
            fetched = self.call(PEER_FETCH, pb.PeerFetch_Args(dst=dst + at, size=n, address=source.address,
                                                              key=offer.key, fingerprint=pin),
                                pb.PeerFetch_Result, dst_route)
            if fetched.status:
                return fetched.status
            self.stats.peer_bytes += n
        return 0

    def load_elsewhere(self, res: pb.LoadModule_Result, blob: bytes) -> None:
        """A device list: the library `res` loaded on one server is loaded on each other one (of a fatbin,
        the entry that server's GPU chooses), its handle and its kernels' there kept as the aliases of the
        ones the program holds (client/routes.c), so that a kernel runs on every device, as NVIDIA's runtime
        launches one CUkernel on each."""
        if res.status != 0:
            return
        owner = lib.cuwire_route_value(res.module)
        for route in range(len(self.sessions)):
            if route == owner:
                continue
            image, digest = self.image_for(blob, route)
            there = self.load_on(route, digest, image, False)
            if there.status != 0:
                raise Fail(there.status)
            lib.cuwire_route_alias_add(res.module, route, there.module)
            theirs = {k.name: k.kernel for k in there.kernels}
            for k in res.kernels:
                if k.name in theirs:
                    lib.cuwire_route_alias_add(k.kernel, route, theirs[k.name])

    def preload(self, session: Session) -> load_lists.Run:
        """This run's lists, with the last run's sent in one cuwire.Preload the first time (the program's
        first module load, or its first batch of streams or events, whichever comes first): an earlier
        queued call's error, which the Preload's answer brings, is the program's call's (as CUDA's would)."""
        with self.lock:
            run = self.program_run(session)
            if run.preloaded is None and not self.listed:  # (a device list's servers load as asked, for now)
                args = run.preload_args()
                if args is not None:
                    run.preload_context = lib.cuwire_current_context()
                    run.preload_cleared = lib.cuwire_answers_cleared()
                    try:
                        res = self.call(PRELOAD, args, pb.Preload_Result)
                    except Fail:  # refused (the exchange said why): a list is a hint, the calls go as asked
                        return run
                    run.preload_answered(args, res)
                    if res.status:
                        raise Fail(res.status)
            return run

    def preloaded_load(self, session: Session, digest: bytes, as_module: bool) -> pb.PreloadedModule | None:
        """The module as the server loaded it ahead (preload), else None; the lookups the list names are
        answered with the module they were made in."""
        with self.lock:
            run = self.preload(session)
            ahead = run.take(digest, as_module)
        if ahead is None:
            return None
        run.named.update(self.keep_lookups(ahead.kernels, ahead.load.module, False, digest))
        run.named.update(self.keep_lookups(ahead.functions, ahead.load.library_module, True, digest))
        names = {k.kernel: k.name for k in (*ahead.load.kernels, *ahead.kernels)}
        for f in ahead.kernel_functions:  # (lookup_key of GetKernel_Args(kernel=...) in the Preload's context)
            key = (0, "", False, f.kernel, run.preload_context)
            self.lookups[key] = Kernel(f.function, tuple(f.param_offsets), tuple(f.param_sizes))
            keep_attributes(f, f.function, kernel=False)
            if f.kernel in names:
                note_kernel(f.function, run.identify(f.function, digest, load_lists.KERNEL_FUNCTION, names[f.kernel]))
            run.named.add(key)
        return ahead

    def keep_answers_ahead(self, ahead: pb.PreloadedModule) -> None:
        """The answers the Preload gave to the questions of a module the program now loaded (its kernels and
        functions known by name by now), kept as the server's would be, unless every kept answer was
        forgotten since (they may no longer hold). Attributes stay on this run's list: the program asked
        them in a run before, and now has them without asking."""
        run = self.run
        if run is None or lib.cuwire_answers_cleared() != run.preload_cleared:
            return
        for a in ahead.answers:
            if a.ask == load_lists.ASK_CLUSTERS:
                clusters_ahead.ahead.keep(a)
                continue
            sets = list(zip(a.set_attributes, a.set_values, strict=False))
            lib.cuwire_keep_answer_ahead(a.ask, a.handle, a.a, a.b, a.c, a.value,
                                         [p[0] for p in sets], [p[1] for p in sets], len(sets))
        for k in ahead.attributes:
            if len(k.attribute_statuses) == len(k.attribute_values):
                keep_attributes(k, k.handle, kernel=not k.function)
                run.asked(load_lists.ASK_ATTRIBUTES, k.handle, 0, 0, 0)

    def keep_lookups(self, found, module: int, from_module: bool, digest: bytes) -> list[tuple]:
        """Lookups by name that a load or a Preload answered (LoadedKernel entries: cuLibraryGetKernel in
        the library `module`, or cuModuleGetFunction in a module with from_module; of the image `digest`),
        kept as lookup_kernel keeps its answers; their keys."""
        keys = []
        which = load_lists.MODULE_FUNCTION if from_module else load_lists.LIBRARY_KERNEL
        for k in found:
            keys.append(lookup_key(pb.GetKernel_Args(module=module, name=k.name, from_module=from_module)))
            self.lookups[keys[-1]] = Kernel(k.kernel, tuple(k.param_offsets), tuple(k.param_sizes))
            keep_attributes(k, k.kernel, kernel=not from_module)
            if self.run is not None:
                note_kernel(k.kernel, self.run.identify(k.kernel, digest, which, k.name))
        return keys

    def program_run(self, session: Session) -> load_lists.Run:
        """This run's lists (load_lists.py), begun at the first call that needs them: the program's command
        line and the server's GPU architecture name its list."""
        with self.lock:
            if self.run is None:
                self.run = load_lists.Run(self.settings.load_lists, load_lists.own_command_line(),
                                          gpu_arch(session.welcome.devices),
                                          self.kept_list(session.welcome.program_list))
                self.stats.list_from_server = self.run.from_server
                lib.cuwire_record_questions(int(self.run.recorder is not None))
            return self.run

    def kept_list(self, data: bytes) -> bytes:
        """The program's list as the server kept it (Welcome.program_list), b"" when none or it does not
        decompress: a list is only a hint."""
        try:
            return compression.decompress(self.zstd_d, data, load_lists.MAX_LIST) if data else b""
        except ValueError:
            return b""

    def keep_list(self) -> bool:
        """The program ends: its list goes to the server to keep (server/program_lists.py) when it differs
        from the one the server had, in the call that flushes what is queued; False when there is none to
        send (the caller flushes)."""
        run = self.run
        text = run.recorder.text() if run is not None and run.recorder is not None else b""
        if not text or sorted(text.splitlines()) == sorted((run.given or b"").splitlines()):
            return False  # (the same loads, perhaps in another order: threads and named loads reorder them)
        data = self.policy.compressor.compress(text)
        if len(data) > MOST_LIST_KEPT:
            return False
        res = self.call(KEEP_LIST, pb.KeepList_Args(list=data), pb.KeepList_Result)
        if res.status:
            raise Fail(res.status)
        return True

    def lookup_kernel(self, key: int, args: pb.GetKernel_Args) -> Kernel:
        """Look a kernel or function up on the server and give the C launch path its layout, so that
        launches through `key` (the handle the program holds) are checked and queued without Python. A
        lookup by name that its module's load did not answer goes on this run's list (load_lists.py)."""
        # asked once (lookup_key)
        route = self.lookup_route(args)
        cache_key = lookup_key(args)
        k = self.lookups.get(cache_key)
        named = self.named_libraries.get(args.module) if not args.from_module and not args.kernel else None
        of_kernel = self.named_kernels.get(args.kernel) if args.kernel else None  # (a named kernel's function)
        if k is None and (named is not None or of_kernel is not None):
            k = self.lookups[cache_key] = (self.name_kernel(route, args, *of_kernel) if of_kernel is not None
                                           else self.name_kernel(route, args, named))
            if self.run is not None:
                self.run.named.add(cache_key)
        if k is None:
            asked = pb.GetKernel_Args(module=args.module, name=args.name, from_module=args.from_module,
                                      kernel=lib.cuwire_route_alias(args.kernel, route) if args.kernel else 0)
            if args.kernel and not asked.kernel:
                raise Fail(lib.cuwire_route_split(b"cuKernelGetFunction"))
            res = self.call(GET_KERNEL, asked, pb.GetKernel_Result, route)
            if res.status != 0:
                raise Fail(res.status)
            if self.listed and not args.from_module and not args.kernel:
                self.look_up_elsewhere(args, res.kernel, route)
            k = self.lookups[cache_key] = Kernel(res.kernel, tuple(res.param_offsets), tuple(res.param_sizes))
            keep_attributes(res, res.kernel, kernel=not args.from_module and not args.kernel)
            if self.run is not None:
                self.run.named.add(cache_key)
        if self.run is not None:
            name = self.kernel_names.get(args.kernel) if args.kernel else None
            self.run.looked_up(args, k.handle, cache_key,
                               ffi.string(name).decode(errors="replace") if name is not None else None)
            if args.kernel:
                note_kernel(k.handle, self.run.identify_function(k.handle, args.kernel))
            elif args.module in self.run.digests:
                note_kernel(k.handle, self.run.identify(k.handle, self.run.digests[args.module],
                                                        load_lists.MODULE_FUNCTION if args.from_module
                                                        else load_lists.LIBRARY_KERNEL, args.name))
        give_layout_to_c(key or k.handle, k)
        return k

    def lookup_route(self, args: pb.GetKernel_Args) -> int:
        """Where a lookup goes: a library's or module's server (the one its handle is), a kernel's function
        the current context's."""
        if not self.listed or args.kernel:
            return lib.cuwire_route_current()
        owner = lib.cuwire_route_value(args.module)
        return owner if owner >= 0 else lib.cuwire_route_current()

    def look_up_elsewhere(self, args: pb.GetKernel_Args, kernel: int, owner: int) -> None:
        """A device list: a library's kernel looked up by name on one server, looked up on each other one in
        its alias of the library, that server's kept as the kernel's alias (load_elsewhere)."""
        for route in range(len(self.sessions)):
            library = lib.cuwire_route_alias(args.module, route) if route != owner else 0
            if not library or lib.cuwire_route_alias(kernel, route) not in (0, kernel):
                continue  # (no alias of the library there, or the kernel's is known: its load said it)
            there = self.call(GET_KERNEL, pb.GetKernel_Args(module=library, name=args.name), pb.GetKernel_Result,
                              route)
            if there.status == 0:
                lib.cuwire_route_alias_add(kernel, route, there.kernel)

    def host_alloc(self, size: int) -> int:
        """A page-locked allocation in the host memory shared with the server: its address, or 0 when the
        session has none or it is full (the program then gets memory of the client's own). One of its size
        that the program freed is given again without asking (SharedHost.keep)."""
        with self.lock:
            host = self.connect().host
            kept = host.take_kept(size) if host else None
            if kept is not None:
                return host.base + kept
            offset = self.alloc_shared(host, size)
            if offset is None:
                return 0
            res = self.call(REGISTER_HOST, pb.RegisterHost_Args(offset=offset, size=host.used[offset]),
                            pb.RegisterHost_Result)
            if res.status != 0:
                host.release(offset)
                return 0
            return host.base + offset

    def host_register_at(self, address: int, size: int) -> tuple[int, int]:
        """Memory the program registers itself, made the GPU's at its own address (client/host_memory.c): room
        in the shared host memory that the server maps at `address` and registers; (0, its offset), or (a
        CUDA error, 0) when it cannot (the memory then stays the program's own)."""
        with self.lock:
            host = self.connect().host
            offset = self.alloc_shared(host, size)
            if offset is None:
                return OUT_OF_MEMORY, 0
            res = self.call(REGISTER_HOST, pb.RegisterHost_Args(offset=offset, size=host.used[offset], at=address),
                            pb.RegisterHost_Result)
            if res.status != 0:
                host.release(offset)
                return res.status, 0
            return 0, offset

    def host_register_again(self, address: int, size: int, offset: int) -> int:
        """Pages that moved into the shared memory before and stayed there (client/host_memory.c, parked):
        registered by the server at `address` again; 0 or the CUDA error."""
        with self.lock:
            return self.call(REGISTER_HOST, pb.RegisterHost_Args(offset=offset, size=size, at=address),
                             pb.RegisterHost_Result).status

    def host_register_file(self, address: int, size: int, file: pb.FileRange) -> int:
        """Memory the program registers that is a shared mapping of a memory file: the server maps the same
        file at `address` and registers it there (0), or says why not (the CUDA error; the memory then stays
        the program's own)."""
        with self.lock:
            res = self.call(REGISTER_HOST, pb.RegisterHost_Args(size=size, at=address, file=file),
                            pb.RegisterHost_Result)
            return res.status

    def host_map(self, address: int, size: int) -> int:
        """Page-locked memory of the program's over TCP that kernels are to reach: the server maps memory of
        its own at `address` and registers it for the GPU (client/managed.c keeps the two in step); 0 or
        the CUDA error."""
        with self.lock:
            return self.call(REGISTER_HOST, pb.RegisterHost_Args(at=address, size=size, anonymous=True),
                             pb.RegisterHost_Result).status

    def host_unregister_address(self, address: int) -> int:
        """Memory the server mapped at the program's `address` (a memory file's, or its own for page-locked
        memory over TCP) and registered: no more; the server knows which."""
        with self.lock:
            return self.call(UNREGISTER_HOST, pb.UnregisterHost_Args(at=address), pb.UnregisterHost_Result).status

    def host_unregister_at(self, offset: int) -> None:
        """The server no longer has that room registered at the program's address (client/host_memory.c keeps its
        pages there, in the shared memory, until the session ends)."""
        with self.lock:
            res = self.call(UNREGISTER_HOST, pb.UnregisterHost_Args(offset=offset), pb.UnregisterHost_Result)
            if res.status != 0:
                raise Fail(res.status)

    def host_free(self, address: int) -> None:
        """The program freed a page-locked allocation in the shared memory: kept registered for the next of
        its size (SharedHost.keep); those kept longest let go past its bounds."""
        with self.lock:
            host = self.session.host if self.session else None
            if host is None:
                return  # the session is gone; so is the memory's use
            for offset in host.keep(address - host.base):
                self.let_go(host, offset)

    def let_go(self, host: SharedHost, offset: int) -> None:
        """A kept allocation goes: the server unregisters it, its pages go back, its room is free."""
        res = self.call(UNREGISTER_HOST, pb.UnregisterHost_Args(offset=offset), pb.UnregisterHost_Result)
        lib.cw_release_pages(host.base + offset, host.used[offset])  # its pages go back
        host.release(offset)
        if res.status != 0:
            raise Fail(res.status)

    def alloc_shared(self, host: SharedHost | None, size: int) -> int | None:
        """Room in the shared memory (None: no session memory, or full even with the kept allocations let go)."""
        if host is None:
            return None
        offset = host.alloc(size)
        while offset is None and (oldest := host.oldest_kept()) is not None:
            self.let_go(host, oldest)
            offset = host.alloc(size)
        return offset

    def error_string(self, code: int, name: bool = False, nvml: bool = False):
        """The server's text (or name) for a CUresult (or an nvmlReturn_t), as a C string kept for the
        process's life; NULL for a code the server's library does not know."""
        key = (code, name, nvml)
        if key not in self.error_strings:
            res = self.call(ERROR_STRING, pb.ErrorString_Args(error=code, name=name, nvml=nvml),
                            pb.ErrorString_Result)
            if res.status != 0 or not res.text:
                return ffi.NULL
            self.error_strings[key] = ffi.new("char[]", res.text.encode())
        return self.error_strings[key]

    # ---------------------------------------------------------------- end of the process

    def at_exit(self) -> None:
        """The program is ending: what is queued goes to the server, and the statistics are printed. The
        session stays open for the rest of a Python program's atexit handlers and its finalization, where
        libraries' clean-up (XLA's, PyTorch's) calls CUDA as natively; C's exit handler then deinitializes
        CUDA, as the driver's does (client/start.c, exit_hook); the server ends the session when the
        process's connection closes."""
        with self.lock:
            if self.session is not None:
                self.ending = True  # (said with the flush: a connection that drops from now on is not resumed)
                try:
                    if not self.keep_list():
                        self.flush()
                except Fail:
                    pass
                for route in range(1, len(self.sessions)):  # (a device list's other servers)
                    try:
                        self.exchange(0, b"", route)
                    except Fail:
                        pass
            if self.session is not None and self.wire_in_c:
                # Python finalizes next, closing its socket with its objects: client/wire.c keeps a copy of
                # its own, so that the teardown's calls (XLA waits for its streams) reach the server
                for route, session in enumerate(self.sessions):
                    if route in self.lost:
                        continue
                    with wire_lock(route):
                        lib.cuwire_wire_keep(route, os.dup(session.transport.connection.sock.fileno()))
            open_resumes = sum(s.transport.resumes() for s in self.sessions)
        if self.settings.stats:
            stats = with_wire_stats(self.stats)
            stats.resumes += open_resumes  # (the open session's; drop_session adds them when it ends)
            print_stats(stats, self.names_by_id(), api_calls())

    def after_fork(self) -> None:
        """The parent's stream, memory and queued calls are not a forked child's to use (their handles mean
        nothing in another session), and gRPC cannot open a new channel in a child forked while the
        parent's stream is open: the child's calls fail at once, by name, instead of hanging."""
        self.lock = threading.RLock()
        self.session, self.listed, self.lost = None, [], {}
        data, count = ffi.new("char **"), ffi.new("uint64_t *")
        for route in range(lib.cuwire_route_sessions()):  # (the parent's queued calls: freed, never sent)
            if lib.cuwire_queue_take(route, data, count):
                lib.cuwire_free(data[0])
        lib.cuwire_wire_forget()
        lib.cuwire_route_forget()
        lib.cuwire_shared_host_set(0, 0, 0, -1)  # the parent's page-locked memory stays mapped, but not for copies
        lib.cuwire_callbacks_forget()
        self.broken = ("this process was forked from a cuwire client; a forked child cannot open its own "
                       "session yet, so its CUDA calls fail (CUDA_ERROR_DEVICE_UNAVAILABLE)")
        lib.cuwire_forget_allocations()
        lib.cuwire_forget_pools(0)

    def names_by_id(self) -> dict[int, str]:
        names = {i: n for n, i in wire_ids.FUNCTION_IDS.items()}
        names.update({i: f"cuwire.{n}" for n, i in wire_ids.OP_IDS.items()})
        return names


def api_calls() -> dict[str, Counter]:
    """The program's calls by how each was served (sync, async, custom, local, unimplemented), by name.

    Launches of functions already looked up, and kernel node sets the client knows cannot fail, are queued
    by C (client/launches.c): they count as async."""
    out: dict[str, Counter] = {}
    for i in range(lib.cuwire_n_functions):
        if lib.cuwire_counts[i]:
            mode = ffi.string(lib.cuwire_modes[i]).decode()
            name = ffi.string(lib.cuwire_names[i]).decode()
            hits = lib.cuwire_fast_hits[i]  # sync calls the client's C answered (e.g. kept attributes)
            queued = lib.cuwire_queued_hits[i]  # ...and queued, since they could not fail (`queued_when`)
            out.setdefault(mode, Counter())[name] = lib.cuwire_counts[i] - hits - queued
            if hits:
                served = "async" if name in QUEUED_BY_C else mode if name in WAITED_BY_C else "local"
                out.setdefault(served, Counter())[name] += hits
            if queued:
                out.setdefault("async", Counter())[name] += queued
    for in_c, names in ((lib.cuwire_fast_launches, ("cuLaunchKernel", "cuLaunchKernelEx")),
                        (lib.cuwire_fast_node_sets, ("cuGraphExecKernelNodeSetParams_v2",))):
        if not in_c:
            continue
        custom = out.setdefault("custom", Counter())
        for name in names:  # (custom calls the C queued, counted apart: moved to async)
            moved = min(in_c, custom[name])
            custom[name] -= moved
            out.setdefault("async", Counter())[name] += moved
            in_c -= moved
    return out


def with_wire_stats(python: Stats) -> Stats:
    """The Python side's counts with the round trips and sends that client/wire.c made in C added (a
    copy: C keeps its own running totals)."""
    s = dataclasses.replace(python, calls=Counter(python.calls), seconds=Counter(python.seconds))
    n_max = 64
    ids, counts, ns = ffi.new("uint32_t[]", n_max), ffi.new("uint64_t[]", n_max), ffi.new("uint64_t[]", n_max)
    totals = ffi.new("uint64_t[6]")
    for i in range(lib.cuwire_wire_stats(ids, counts, ns, n_max, totals)):
        s.calls[ids[i]] += counts[i]
        s.seconds[ids[i]] += ns[i] / 1e9
        s.batches += counts[i]
        s.wait_seconds += ns[i] / 1e9
    sent, received, queued, sends, raw_sent, raw_received = totals
    s.bytes_sent += sent
    s.bytes_received += received
    s.queued += queued
    s.sends += sends
    s.bytes_sent_raw += raw_sent
    s.bytes_received_raw += raw_received
    s.host_fn_waits += lib.cuwire_host_fn_waits
    s.host_fn_wait_seconds += lib.cuwire_host_fn_wait_ns / 1e9
    return s


def size(n: int) -> str:
    """Bytes for people, the exact count beside (tests and scripts read it): 512 B, 21.7 MiB (22747277 B)."""
    if n < 1024:
        return f"{n} B"
    value, units = n / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while value >= 1024 and len(units) > 1:
        value, units = value / 1024, units[1:]
    return f"{value:.1f} {units[0]} ({n} B)"


def print_stats(s: Stats, names: dict[int, str], calls: dict[str, Counter]) -> None:
    """What cuwire did for the program, at exit (CUWIRE_STATS=1 or cuwire run --stats)."""
    total = {mode: sum(c.values()) for mode, c in calls.items()}
    own = sum(n for i, n in s.calls.items()
              if names.get(i, "").startswith("cuwire.") and i not in (LAUNCH_KERNEL, COPY_FROM_DEVICE))
    sent = s.batches - own - s.flushes
    every = sum(calls.values(), Counter())
    elapsed = time.monotonic() - s.connected if s.connected else 0.0
    per_trip = s.wait_seconds / s.batches * 1e6 if s.batches else 0.0
    by_thread = lib.cuwire_sender_sent()  # (client/sender.c)
    lines = [
        "cuwire stats:",
        f"  API calls: {sum(total.values())} = {total.get('sync', 0) + total.get('custom', 0)} sent to the server "
        f"and waited for + {total.get('async', 0)} queued (sent in batches) + {total.get('local', 0)} answered "
        f"locally + {total.get('unimplemented', 0)} unimplemented",
        f"  round trips: {s.batches} = {sent} for calls + {own} cuwire requests (modules, functions, globals) + "
        f"{s.flushes} flushes of queued calls; queued calls carried: {s.queued} ({s.sends} batches of them sent "
        "early, without waiting" + (f"; {by_thread} of those by the client's sending thread" if by_thread else "")
        + ")",
        f"  waits answered by the client, their work known finished with nothing sent since: "
        f"{lib.cuwire_answered_done}",
        f"  bytes sent: {size(s.bytes_sent)} in messages, carrying {size(s.bytes_sent_raw)} of call data before "
        f"compression; received: {size(s.bytes_received)} in messages, {size(s.bytes_received_raw)} of results "
        f"after decompression",
        f"  transport: {s.transport or 'none (no session)'}; {s.batches} round trips in {elapsed:.1f} s "
        f"({s.batches / elapsed if elapsed else 0:.1f} per second, {per_trip:.0f} us each on average); of the "
        f"bytes, {size(s.payload_sent)} sent and {size(s.payload_received)} received beside the messages (large "
        f"buffers)" + (f", {size(s.striped)} of them over {s.stripes} more connections at once (stripes)"
                       if s.stripes else ""),
        *([f"  connection dropped and resumed: {s.resumes} times"] if s.resumes else []),
        f"  modules uploaded: {s.modules_uploaded}; found in the server's cache: {s.modules_cached}"
        + (f" ({s.modules_preloaded} of them loaded ahead at the first load, from the last run's list"
           f"{', which the server kept' if s.list_from_server else ''})" if s.modules_preloaded else "")
        + (f"; uploaded with the load's first request: {s.modules_sent_ahead} (and {s.modules_sent_for_nothing} "
           "sent so that the server had)" if s.modules_sent_ahead or s.modules_sent_for_nothing else ""),
        *([f"  loaded without waiting, under handles the client named: {s.modules_named} modules "
           f"({s.modules_named - s.modules_by_digest} uploaded, {s.modules_by_digest} by digest alone), "
           f"{s.kernels_named} kernels looked up; {s.occupancy_modelled} occupancy questions answered here"]
          if s.modules_named else []),
        *([f"  copied between servers of the device list, server to server: {size(s.peer_bytes)}"]
          if s.peer_bytes else []),
        f"  time waiting on the server: {s.wait_seconds * 1e3:.1f} ms",
        *([f"  copies from page-locked memory that waited for the program's host functions to run first: "
           f"{s.host_fn_waits}, {s.host_fn_wait_seconds * 1e3:.1f} ms"] if s.host_fn_waits else []),
        "  top calls by count: " + ", ".join(f"{n} {c}" for n, c in every.most_common(8)),
        "  top calls sent to the server, by count: " + ", ".join(
            f"{names.get(i, i)} {n}" for i, n in s.calls.most_common(8)),
        "  top calls by time waiting on the server: " + ", ".join(
            f"{names.get(i, i)} {t * 1e3:.2f} ms" for i, t in s.seconds.most_common(8)),
    ]
    print("\n".join(lines), file=sys.stderr)


client = Client()


@contextlib.contextmanager
def wire_lock(route: int = ONE_SESSION):
    """The lock that client/wire.c holds while it sends a frame on the route's session and waits for its
    answer."""
    lib.cuwire_wire_acquire(route)
    try:
        yield
    finally:
        lib.cuwire_wire_release(route)


def route(function: str, streams: tuple = (), handles: tuple = (), pointers: tuple = (), devices: tuple = (),
          nvml: tuple = (), located: tuple = (), functions: tuple = ()) -> int:
    """The session a call goes to (client/routes.c; the generated calls give their arguments in the
    model's order, codegen/model.py Function.routes_by_kind): the server its streams (a special one: the
    current context's), handles, device addresses, device ordinals (or NVML indices), NVML devices, the
    devices its structs name (`located`: the routes `located` found) and its CUfunctions (a library's
    CUkernel: none) name, else the calling thread's current context's. Arguments of two servers: refused by
    name (Fail), as the C stubs refuse them."""
    if lib.cuwire_route_sessions() == 1:
        return ONE_SESSION
    found = -1
    for ask, values in ((lib.cuwire_route_stream, streams), (lib.cuwire_route_handle, handles),
                        (lib.cuwire_route_value, pointers), (lib.cuwire_route_device, devices),
                        (lib.cuwire_route_nvml, nvml), (int, located), (lib.cuwire_route_function, functions)):
        for value in values:
            more = ask(int(ffi.cast("uintptr_t", value)) if isinstance(value, ffi.CData) else value)
            if more >= 0 and found >= 0 and more != found:
                raise Fail(lib.cuwire_route_split(function.encode()))
            found = more if more >= 0 else found
    return found if found >= 0 else lib.cuwire_route_current()


MEM_LOCATION = struct.Struct("<ii")  # CUmemLocation: its type, its id


def located(data: bytes, at: int, every: int = 0) -> tuple[bytes, int]:
    """A struct the call reads (or an array of them, `every` bytes apart) whose CUmemLocation at byte `at`
    may name a device (CU_MEM_LOCATION_TYPE_DEVICE) of the program's list: the bytes with each such device as
    its server numbers it, and the route those devices name (-1: none; two servers: refused by name, Fail,
    as route does). With one server the bytes are the program's, unchanged."""
    if lib.cuwire_route_sessions() == 1 or len(data) < at + MEM_LOCATION.size:
        return data, -1
    out, found = bytearray(data), -1
    for offset in range(at, len(out) - MEM_LOCATION.size + 1, every or len(out)):
        kind, device = MEM_LOCATION.unpack_from(out, offset)
        if kind != cu.CU_MEM_LOCATION_TYPE_DEVICE:
            continue
        there = lib.cuwire_route_device(device)
        if there < 0:
            continue  # (no such device: the server says so)
        if found >= 0 and there != found:
            raise Fail(lib.cuwire_route_split(b"a CUmemLocation"))
        found = there
        MEM_LOCATION.pack_into(out, offset, kind, lib.cuwire_route_own_device(device))
    return bytes(out), found


def alias(handle: int, route: int) -> int:
    """A library or kernel handle as the route's server knows it (client/routes.c; the handle itself but in
    a device list)."""
    return lib.cuwire_route_alias(handle, route) if handle else 0


def kernel_route(handle: int, device: int | None = None) -> tuple[int, int]:
    """Where a question about a kernel (or a function) goes, and its handle there: the device's server (None:
    the current context's), with the handle that server loaded for a library's kernel (alias); a
    context's function of another server goes to that server. (0, handle) with one server."""
    route = lib.cuwire_route_current() if device is None else lib.cuwire_route_device(device)
    if route < 0:
        route = lib.cuwire_route_current()
    theirs = alias(handle, route)
    if theirs == 0:  # (no alias: a context's CUfunction, on the server whose window it lies in)
        route, theirs = max(lib.cuwire_route_value(handle), 0), handle
    return route, theirs


def own_device(ordinal: int) -> int:
    """A device of the program's (joined) list as its own server numbers it."""
    return lib.cuwire_route_own_device(ordinal)


def nvml_theirs(handle: int) -> int:
    """The NVML device handle its server gave, for one the program holds (the same but in a device list)."""
    return lib.cuwire_route_nvml_theirs(handle)


def nvml_mine(route: int, handle: int) -> int:
    """The handle the program holds for an NVML device handle the route's server gave (the same but in a
    device list, where the servers' handles may be equal: client/routes.c)."""
    return lib.cuwire_route_nvml_mine(route, handle)


def joined_device(route: int, index: int) -> int:
    """A device index the route's server gave, as the program's joined list numbers that device."""
    return index + lib.cuwire_route_first_device(route)


def call_servers(how: str, fn: int, args, result_cls, total: str = "") -> tuple:
    """A call that names no device, in a device list (annotation `servers`), and the route of the answer
    that counts: "each" asks every server (the first failure is the answer), "sum" every server too, its
    output `total` summed, "found" each in turn until one does not say NVML_ERROR_NOT_FOUND. With one
    server, the call as any other."""
    client.connect()  # (a list's sessions open with the first call: NVML's may come before CUDA's)
    n = lib.cuwire_route_sessions()
    if n <= 1:
        return call(fn, args, result_cls, ONE_SESSION), ONE_SESSION
    summed = 0
    for route in range(n):
        res = call(fn, args, result_cls, route)
        if how == "found" and res.status != cu.NVML_ERROR_NOT_FOUND:
            return res, route
        if how != "found" and res.status:
            return res, route
        summed += getattr(res, total) if total else 0
    if total:
        setattr(res, total, summed)
    return res, ONE_SESSION


@ffi.def_extern(name="cuwire_py_wire_broken")
def wire_broken(route, why) -> None:
    session = client.session_of(route) if client.session is not None else None
    note = session.transport.resume_note() if session is not None else ""
    client.wire_broken(ffi.string(why).decode(errors="replace") + note, route)


@ffi.def_extern(name="cuwire_py_resume")
def resume(route: int) -> int:
    """client/wire.c's connection of `route`'s session broke, its wire lock held (the session cannot be
    dropped meanwhile): 1 when the session's stream resumed it (SocketTransport.resume)."""
    session = client.session_of(route) if client.session is not None else None
    return 1 if session is not None and session.transport.connection.resumed() else 0

# ---------------------------------------------------------------- helpers the generated stubs use

call = client.call
track_alloc = client.track_alloc


def server_function(handle: int) -> int:
    """The server's CUfunction for a handle the program holds: the same value, except for functions the
    driver's private module iterator gave out (client/modules.py), whose objects live in the client."""
    return client.function_objects.get(handle, (handle,))[0]


def untrack_alloc(ptr: int) -> None:
    client.untrack_alloc(ptr)


def address(ptr) -> int:
    return int(ffi.cast("uintptr_t", ptr))


def is_device(ptr) -> bool:
    return client.is_device(address(ptr))


# Buffers of at least transport.BULK bytes travel beside the protobuf messages, in the frame's payload
# (transport.py), in the order the call's code reads them (the server takes them in the same order):
# protobuf would copy and parse them at a fraction of the network's speed. A field that stands for one
# is left empty. The server sends large results the same way (session.py, take).
_bulk = threading.local()  # per thread: the payload parts of the call being made, and the reply's payload


class Bulk:
    """The payload of one exchange: parts going out, and the reply's payload with how much was read."""

    def __init__(self) -> None:
        self.outgoing: list = []
        self.expected: list = []  # the program's buffers that large results go straight into (expect)
        self.filled: set[int] = set()  # addresses of those the last reply filled
        self.incoming = memoryview(b"")
        self.taken = 0


def bulk() -> Bulk:
    state = getattr(_bulk, "state", None)
    if state is None:
        state = _bulk.state = Bulk()
    return state


def read(ptr, size: int) -> bytes:
    """The program's `size` bytes at ptr, for an Args field; a large buffer goes in the payload instead
    (sent from the program's memory as it is) and the field stays empty."""
    if size == 0:
        return b""
    if ptr == ffi.NULL:
        raise Fail(INVALID_VALUE)
    view = ffi.buffer(ffi.cast("char *", ptr), size)
    if size >= BULK:
        bulk().outgoing.append(view)
        return b""
    return bytes(view)


def expect(ptr, size: int) -> None:
    """Before a call: a large result for the program's buffer at ptr is received straight into it (the
    server sends large results in the order the call's code writes them back, which is this order)."""
    if size >= BULK and ptr != ffi.NULL:
        bulk().expected.append((ptr, size))


def write(ptr, data: bytes, size: int) -> None:
    """Write a result into the program's memory: the field's bytes, or for a large buffer the next
    `size` bytes of the reply's payload (an empty field with no payload left: nothing came back)."""
    if len(data) > size:
        raise bad_reply(f"{len(data)} bytes for a {size}-byte buffer")
    if not data and size:
        b = bulk()
        if int(ffi.cast("uintptr_t", ptr)) in b.filled:
            return  # received into place already (expect)
        left = len(b.incoming) - b.taken
        if left == 0:
            return
        if left < size:
            raise bad_reply(f"its payload has {left} bytes left for a {size}-byte buffer")
        data, b.taken = b.incoming[b.taken:b.taken + size], b.taken + size
    if len(data):
        if ptr == ffi.NULL:
            raise Fail(INVALID_VALUE)
        ffi.memmove(ptr, data, len(data))


def read_scalar(ptr, ctype: str):
    if ptr == ffi.NULL:
        raise Fail(INVALID_VALUE)
    return ffi.cast(ctype + " *", ptr)[0]


def write_scalar(ptr, ctype: str, value) -> None:
    if ptr == ffi.NULL:
        raise Fail(INVALID_VALUE)
    try:
        ffi.cast(ctype + " *", ptr)[0] = value
    except OverflowError:  # the wire carries integers as 64 bits
        raise bad_reply(f"{value} for a {ctype}") from None


def read_string(ptr) -> str:
    if ptr == ffi.NULL:
        raise Fail(INVALID_VALUE)
    try:
        return ffi.string(ffi.cast("char *", ptr)).decode()
    except UnicodeDecodeError:  # the wire carries such strings (names, bus ids) as UTF-8
        raise Fail(INVALID_VALUE) from None


def bad_reply(why: str) -> Fail:
    """A reply the client cannot use (a server of another make, or a broken one): said, and the call
    fails with CUDA_ERROR_UNKNOWN; the session goes on (the frame was read whole, the stream is in step)."""
    print(f"cuwire: the server's reply cannot be used: {why}", file=sys.stderr)
    return Fail(UNKNOWN, why)


def on_error(exc_type, exc, tb) -> int:
    """cffi calls this when a Python half raises: the program gets an error code, never a crash."""
    _bulk.state = Bulk()  # what a failed call had gathered for its payload must not go with the next
    if isinstance(exc, Fail):
        return exc.code
    import traceback

    print("cuwire: internal error in the client (the call returns CUDA_ERROR_UNKNOWN):", file=sys.stderr)
    traceback.print_exception(exc_type, exc, tb, file=sys.stderr)
    return UNKNOWN


# NVML's codes for the client's failures: a bad pointer is NVML_ERROR_INVALID_ARGUMENT, anything else
# (no server, a lost session) NVML_ERROR_UNKNOWN
NVML_CODES = {INVALID_VALUE: 2}


def on_nvml_error(exc_type, exc, tb) -> int:
    """on_error for NVML's functions, which speak nvmlReturn_t."""
    return NVML_CODES.get(on_error(exc_type, exc, tb), 999)


@ffi.def_extern(name="cuwire_py_copy_between", onerror=on_error)
def copy_between(dst, src, size) -> int:
    """client/peers.c: a copy whose two sides are memory of two servers of the device list."""
    return client.copy_between(dst, src, size)


@ffi.def_extern(onerror=on_error)
def cuwire_py_flush(session: int) -> int:
    return client.flush(session)


@ffi.def_extern(onerror=on_error)
def cuwire_py_send_queued(session: int) -> int:
    return client.send_queued(session)


@ffi.def_extern(onerror=on_error)
def cuwire_py_host_alloc(size: int, address) -> int:
    """cuMemHostAlloc's memory, in the host memory shared with the server when there is some (client/host_memory.c)."""
    address[0] = client.host_alloc(size)
    return 0


@ffi.def_extern(onerror=on_error)
def cuwire_py_managed_alloc(size: int, flags: int, address) -> int:
    """Managed memory made on the server, for a client over TCP (client/managed.c maps its address)."""
    res = client.call(MANAGED_ALLOC, pb.ManagedAlloc_Args(size=size, flags=flags), pb.ManagedAlloc_Result)
    if res.status == 0:
        address[0] = res.address
    return res.status


@ffi.def_extern(onerror=on_error)
def cuwire_py_host_register_at(address: int, size: int, offset) -> int:
    """cuMemHostRegister: room for the program's pages in the shared host memory, mapped and registered by
    the server at their address (client/host_memory.c moves them there)."""
    status, offset[0] = client.host_register_at(address, size)
    return status


@ffi.def_extern(onerror=on_error)
def cuwire_py_host_register_again(address: int, size: int, offset: int) -> int:
    return client.host_register_again(address, size, offset)


@ffi.def_extern(onerror=on_error)
def cuwire_py_host_unregister_at(offset: int) -> int:
    client.host_unregister_at(offset)
    return 0


@ffi.def_extern(onerror=on_error)
def cuwire_py_host_register_file(address: int, size: int, path, offset: int, device: int, inode: int) -> int:
    """cuMemHostRegister of a shared mapping of a memory file (client/host_memory.c): the server maps the same
    file at `address` and registers it; 0 or the CUDA error."""
    file = pb.FileRange(path=ffi.string(path).decode(errors="surrogateescape"), offset=offset, device=device,
                        inode=inode)
    return client.host_register_file(address, size, file)


@ffi.def_extern(onerror=on_error)
def cuwire_py_host_unregister_file(address: int) -> int:
    return client.host_unregister_address(address)


@ffi.def_extern(onerror=on_error)
def cuwire_py_host_map(address: int, size: int) -> int:
    return client.host_map(address, size)


@ffi.def_extern(onerror=on_error)
def cuwire_py_host_unmap(address: int) -> int:
    return client.host_unregister_address(address)


@ffi.def_extern(onerror=on_error)
def cuwire_py_host_free(address: int) -> int:
    client.host_free(address)
    return 0


@ffi.def_extern(onerror=on_error)
def cuwire_py_callbacks(route: int) -> int:
    """Over TCP: open the route's session's host-function connection for client/callbacks.c; 0 or the CUDA
    error."""
    return client.open_callbacks(route)


@ffi.def_extern(name="cuwire_py_callbacks_again")
def callbacks_again(route: int) -> int:
    """client/callbacks.c's host-function connection of the route's session dropped: a new one, as the
    session resumes (its descriptor), or -1 (the thread stops: the session is gone). Without the client's
    lock: a call holding it may be waiting for the very host function the server posts again on the new
    connection."""
    if client.session is None or route in client.lost:
        return -1
    return client.session_of(route).transport.reopen_callbacks()


@ffi.def_extern(onerror=on_error)
def cuwire_py_connect() -> int:
    """Open the session now (a local answer needs its device snapshot); 0 or the CUDA error."""
    client.connect()
    return 0


_exited = False


@ffi.def_extern()
def cuwire_py_at_exit() -> None:
    """Flush what is queued and print the statistics (the session stays open for the program's teardown); runs
    once, from Python's atexit or C's, whichever is first."""
    global _exited
    if not _exited:
        _exited = True
        client.at_exit()


def start() -> None:
    """Called once by the embedded init code (client/embedded.py, once every half is imported): hook process
    exit and fork; the connection waits."""
    atexit.register(cuwire_py_at_exit)  # a Python program (PyTorch) ends through Python's atexit
    lib.cuwire_hook_exit()  # a C program never finalises the embedded interpreter: C's atexit does it
    os.register_at_fork(after_in_child=client.after_fork)
