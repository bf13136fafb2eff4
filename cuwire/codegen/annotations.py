"""The annotations: what the headers do not say, kept as data, one file per library in annotations/
(named in libraries.py).

Each table names a function cuwire implements; a function without one is
unimplemented (its stub says so loudly). Inside a table:

  mode     sync    the client waits for the server's answer
           async   queued by the client and sent with the next batch; only an error code comes back,
                   at the next synchronising call
           custom  hand-written client code (client/modules.py, launches.py, graphs.py, driver.py, nvml.py)
                   and server handler
                   (server/custom.py)
           local   answered by the client's own C (client/*.c, cuwire_local_<name>); the server never sees it
  note     free text shown in the manifest
  aliases  extra exported names served by the same implementation
  fast     a C function of the client's C, with the same parameters, that the stub tries first; it
           answers (e.g. queues a launch whose kernel it knows) or returns -1 to take the usual path
           (for async calls: notes what the client keeps, e.g. the thread's current context)
  after    a C function of the client's C, with the same parameters, that the stub calls once a sync
           call succeeded, to note what the client keeps (e.g. a new context and its device)
  synchronizes  true for a call that, once it succeeds, has the host caught up with the GPU
           (cuCtxSynchronize, synchronous copies...): the client then fetches managed memory made over
           TCP (client/managed.c)
  completes  what a sync call has finished once it succeeded, after waiting for the server:
           "stream PARAM", "event PARAM", "context" (every stream of the current context),
           "context PARAM" (of that one; NULL: the current one) or "null stream" (a synchronous
           copy's); the client keeps it while nothing more is sent (client/completion.c)
  answered_when_done  true for a call that only waits for (or asks about) what `completes` names: while
           that is known finished, the client answers CUDA_SUCCESS without a round trip
  releases true for a call that releases something the session's end releases too (a parameter that
           `frees` says so already): called in a Python program's teardown after its interpreter is
           gone (C++ static destructors: XLA's), it succeeds at once (client/start.c)
  shares_memory  true for a call that shares device memory with another process (IPC and shareable
           handles, pool pointers, either side): the stub first notes it, and from then on no
           synchronization is answered early as a barrier (client/completion.c): the other process's calls
           come on another connection and would not wait for it
  queued_when  a C function of the client's C, with the same parameters, asked first, that says whether
           a sync call cannot fail (a destroy of a handle the client gave out and knows alive, an
           attribute set it can check as the driver does): then the call is queued as an async one is,
           and answered CUDA_SUCCESS at once (`after` runs as for a success); else it goes on as usual
           (`fast`, then the server). Its parameters must fit a record (model.Function.fits_a_record)
  server   the file of a hand-written server half for a sync call (its client half and messages are
           generated): for calls whose bookkeeping the roles cannot say (virtual memory: server/vmm.py)
  servers  for an NVML call that names no device, how a device list's servers answer it (NVML joined:
           docs/several-servers.md): "each" (every server does it: nvmlInit, nvmlShutdown), "sum" (its
           one output, summed: nvmlDeviceGetCount) or "found" (the servers asked in turn until one does
           not say NVML_ERROR_NOT_FOUND: a handle by UUID, PCI bus id or serial); else the call is routed
           as any other
  split    a C function of the client's C, with the same parameters, called when the call's arguments
           name two servers of a device list (a copy between them: client/peers.c), instead of refusing it
  <param>  an inline table for one parameter: role, length, alloc, frees, range, at_most, streams, device_index (see
           model.Param); range, for a device address passed by value: an expression of the bytes from it
           the call touches, which the server checks lie in the session's memory before the call (queued
           or not); at_most, for a value that sizes an output buffer: the most the call ever writes (a
           string's buffer), passed instead of a larger value, so a reply is never larger than that;
           streams, for a host buffer (buf_in, buf_out, mem_in, mem_out): the device parameter it is
           copied to or from, so that a large one streams between the connection and the GPU in pieces
           (server/bulk.py) instead of being held whole, after the same checks as any call. A host
           buffer the call reads whose elements are handles (buf_in of CUgraphNode: a graph's
           dependencies) has each checked as the session's, as a handle passed by value is
           (model.Param.element_kind): a server half only for that is not needed. device_index = true, for
           an NVML device index passed by value or written out: in a device list it is the joined list's
           (the call goes to the server of that device, with its own index; an index written out is made
           the list's). device_location = { at = N, every = M }, for a struct (or, with `every`, an array
           of structs M bytes apart) the call reads: the CUmemLocation at byte N of each names a device
           when its type is CU_MEM_LOCATION_TYPE_DEVICE, in a device list the joined list's (the call goes
           to that device's server, with its own ordinal: cuMemCreate's properties, cuMemSetAccess's
           descriptors); the stubs check N and M against the header's struct at compile time

Parameters not named are inferred where that is safe (see `infer_role`);
anything else is an error, never a guess.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from .libraries import BY_API, LIBRARIES
from .model import ROLES, Api, Function, Param

ANNOTATIONS = Path(__file__).with_name("annotations")
PACKAGE = Path(__file__).parents[1]  # cuwire/: `server` names a file in it
MODES = {"sync", "async", "custom", "local"}
FUNCTION_KEYS = {"mode", "note", "aliases", "fast", "after", "server", "synchronizes", "releases", "completes",
                 "answered_when_done", "queued_when", "shares_memory", "servers", "split"}
PARAM_KEYS = {"role", "length", "alloc", "overflow", "frees", "range", "at_most", "streams", "device_index",
              "device_location"}
SERVERS = {"each", "sum", "found"}
STREAMING_ROLES = {"buf_in", "buf_out", "mem_in", "mem_out"}
NEEDS_LENGTH = {name for name, role in ROLES.items() if role.sized}
ASYNC_ROLES = {"value"}
# ...and the roles of what may hold a CUmemLocation naming a device (device_location)
LOCATED_ROLES = {"struct_in", "struct_in_or_null", "buf_in"}


class AnnotationError(Exception):
    """An annotation that does not match the headers, or a parameter nobody explained."""


def infer_role(p: Param) -> str | None:
    """The role of an unannotated parameter, when the type alone makes it certain."""
    t = p.type
    if t.resolved == "struct":
        return "struct"
    if t.is_scalar and t.resolved != "pointer":
        return "value"
    if t.resolved != "pointer" or t.pointee is None:
        return None
    if "*" not in t.spelling:  # a typedef'd pointer to an opaque struct: a handle such as CUstream
        return "value" if t.pointee.resolved == "struct" else None
    pt = t.pointee
    if pt.resolved == "struct":
        if "*" in pt.spelling:
            return None
        return "struct_in" if t.const else "struct_out"
    if pt.resolved == "char" and t.const:
        return "string"
    if pt.is_scalar and not t.const and pt.resolved != "char":
        return "out"  # T *x with T a scalar, enum, handle or pointer: one value the call writes
    return None


_NAME = re.compile(r"[A-Za-z_]\w*")


def check_expression(fn: Function, pname: str, expr: str) -> None:
    names = {p.name for p in fn.params}
    for ident in _NAME.findall(expr):
        if ident not in names and ident != "sizeof":
            raise AnnotationError(f"{fn.name}.{pname}: length {expr!r} names {ident!r}, which is not a parameter")
    if not re.fullmatch(r"[\w\s+*/()-]+", expr):
        raise AnnotationError(f"{fn.name}.{pname}: length {expr!r} may use only parameters, numbers and + - * / ( )")


def load(folder: Path = ANNOTATIONS) -> dict:
    """Every library's annotations as one table, each function tagged with the library whose file named it
    (apply checks that it is that library's function)."""
    table: dict = {}
    for lib in LIBRARIES:
        with (folder / lib.annotations).open("rb") as f:
            for name, spec in tomllib.load(f).items():
                if name in table:
                    raise AnnotationError(f"{name} is annotated twice ({lib.annotations} and another file)")
                table[name] = (lib.api, spec)
    return table


def apply(api: Api, table: dict) -> None:
    """Give every annotated function its mode and every parameter its role; fail on anything unexplained."""
    by_name = {f.name: f for f in api.functions}
    for name, entry in table.items():
        api_of_file, spec = entry if isinstance(entry, tuple) else (None, entry)
        fn = by_name.get(name)
        if fn is None:
            raise AnnotationError(f"annotations name {name!r}, which no parsed header declares")
        if api_of_file is not None and fn.api != api_of_file:
            raise AnnotationError(f"{name} belongs to the {fn.api} library; annotate it in "
                                  f"{BY_API[fn.api].annotations}")
        if not isinstance(spec, dict):
            raise AnnotationError(f"{name}: expected a table")
        apply_function(fn, spec)


def apply_completes(fn: Function, spec: dict) -> None:
    """`completes` and `answered_when_done` (see the module's docstring)."""
    completes = spec.get("completes", "")
    if completes and fn.mode != "sync":
        raise AnnotationError(f"{fn.name}: `completes` goes with mode sync, not {fn.mode}")
    words = completes.split()
    if completes in ("context", "null stream"):
        fn.completes = completes.split()[-1], "0"
    elif completes:
        params = {p.name for p in fn.params}
        if len(words) != 2 or words[0] not in ("stream", "event", "context") or words[1] not in params:
            raise AnnotationError(f"{fn.name}: `completes` is 'context', 'context PARAM', 'null stream', "
                                  f"'stream PARAM' or 'event PARAM' with PARAM one of {sorted(params)}, "
                                  f"not {completes!r}")
        fn.completes = words[0], words[1]
    fn.answered_when_done = spec.get("answered_when_done", False)
    if not isinstance(fn.answered_when_done, bool):
        raise AnnotationError(f"{fn.name}: `answered_when_done` is true or false, not {fn.answered_when_done!r}")
    if fn.answered_when_done and not completes:
        raise AnnotationError(f"{fn.name}: `answered_when_done` needs `completes`, which says what it waits for")


def apply_function(fn: Function, spec: dict) -> None:
    params = {p.name: p for p in fn.params}
    for key in spec:
        if key not in FUNCTION_KEYS and key not in params:
            raise AnnotationError(
                f"{fn.name}: unknown key {key!r} (not a parameter, nor one of {sorted(FUNCTION_KEYS)})")
    mode = spec.get("mode")
    if isinstance(mode, dict):
        raise AnnotationError(f"{fn.name}: a parameter named `mode` needs the function's mode first")
    if mode not in MODES:
        raise AnnotationError(f"{fn.name}: mode must be one of {sorted(MODES)}, not {mode!r}")
    fn.mode = mode
    fn.status = "local" if mode == "local" else "remoted"
    fn.note = spec.get("note", "")
    fn.fast = spec.get("fast", "")
    if fn.fast and mode not in ("sync", "custom", "async"):
        raise AnnotationError(f"{fn.name}: `fast` goes with mode sync, async or custom, not {mode}")
    fn.after = spec.get("after", "")
    if fn.after and mode != "sync":
        raise AnnotationError(f"{fn.name}: `after` goes with mode sync, not {mode}")
    fn.synchronizes = spec.get("synchronizes", False)
    if not isinstance(fn.synchronizes, bool):
        raise AnnotationError(f"{fn.name}: `synchronizes` is true or false, not {fn.synchronizes!r}")
    fn.releases = spec.get("releases", False)
    if not isinstance(fn.releases, bool):
        raise AnnotationError(f"{fn.name}: `releases` is true or false, not {fn.releases!r}")
    fn.shares_memory = spec.get("shares_memory", False)
    if not isinstance(fn.shares_memory, bool):
        raise AnnotationError(f"{fn.name}: `shares_memory` is true or false, not {fn.shares_memory!r}")
    apply_completes(fn, spec)
    fn.server = spec.get("server", "")
    if fn.server and mode != "sync":
        raise AnnotationError(f"{fn.name}: `server` goes with mode sync, not {mode}")
    if fn.server and not (fn.server.startswith("server/") and (PACKAGE / fn.server).is_file()):
        raise AnnotationError(f"{fn.name}: `server` names {fn.server!r}, which is no file under cuwire/server")
    fn.aliases = sorted(set(fn.aliases) | set(spec.get("aliases", [])))
    for p in fn.params:
        ann = spec.get(p.name, {})
        if p.name in FUNCTION_KEYS and not isinstance(ann, dict):
            ann = {}  # a parameter named like a function key (cuModuleGetLoadingMode's `mode`)
        if not isinstance(ann, dict):
            raise AnnotationError(f"{fn.name}.{p.name}: expected an inline table")
        for key in ann:
            if key not in PARAM_KEYS:
                raise AnnotationError(f"{fn.name}.{p.name}: unknown key {key!r} (known: {sorted(PARAM_KEYS)})")
        role = ann.get("role") or infer_role(p)
        if mode in ("local", "custom") and role is None:
            role = "value"  # hand-written code reads the raw argument
        if role is None:
            raise AnnotationError(f"{fn.name}.{p.name}: pointer parameter of type {p.type.spelling!r} needs an "
                                  "annotation (its direction and length are not in the header)")
        if role not in ROLES:
            raise AnnotationError(f"{fn.name}.{p.name}: unknown role {role!r} (known: {sorted(ROLES)})")
        p.role = role
        p.length = str(ann.get("length", ""))
        if role in NEEDS_LENGTH and not p.length:
            raise AnnotationError(f"{fn.name}.{p.name}: role {role} needs a length expression")
        if p.length:
            check_expression(fn, p.name, p.length)
        p.alloc = str(ann.get("alloc", ""))
        if p.alloc:
            check_expression(fn, p.name, p.alloc)
        p.overflow = bool(ann.get("overflow", False))
        if p.overflow and (not p.alloc or mode != "sync"):
            raise AnnotationError(f"{fn.name}.{p.name}: `overflow` goes with `alloc`, on a sync call")
        p.frees = bool(ann.get("frees", False))
        p.range = str(ann.get("range", ""))
        if p.range:
            if role != "value" or p.type.spelling != "CUdeviceptr":
                raise AnnotationError(f"{fn.name}.{p.name}: `range` goes with a CUdeviceptr passed by value")
            check_expression(fn, p.name, p.range)
        p.at_most = ann.get("at_most", 0)
        if p.at_most and (role != "value" or not isinstance(p.at_most, int) or p.at_most < 1):
            raise AnnotationError(f"{fn.name}.{p.name}: `at_most` is a positive number, for a value parameter")
        p.streams = str(ann.get("streams", ""))
        if p.streams:
            peer = next((q for q in fn.params if q.name == p.streams), None)
            if role not in STREAMING_ROLES or peer is None or mode != "sync":
                raise AnnotationError(f"{fn.name}.{p.name}: `streams` names the device parameter a host buffer "
                                      f"({', '.join(sorted(STREAMING_ROLES))}) of a sync call is copied to or from")
        p.device_index = ann.get("device_index", False)
        if p.device_index is not False and (p.device_index is not True or fn.api != "nvml"
                                            or role not in ("value", "out")
                                            or p.scalar.resolved not in ("unsigned int", "int")):
            raise AnnotationError(f"{fn.name}.{p.name}: `device_index = true` goes with an NVML call's device index "
                                  "passed by value or written out")
        location = ann.get("device_location")
        if location is not None:
            if (not isinstance(location, dict) or set(location) - {"at", "every"}
                    or not isinstance(location.get("at"), int) or not isinstance(location.get("every", 0), int)
                    or role not in LOCATED_ROLES or mode != "sync"):
                raise AnnotationError(f"{fn.name}.{p.name}: `device_location = {{ at = N, every = M }}` goes with a "
                                      f"struct or buffer a sync call reads ({', '.join(sorted(LOCATED_ROLES))})")
            p.device_location = (location["at"], location.get("every", 0))
        if mode == "async" and role not in ASYNC_ROLES:
            raise AnnotationError(f"{fn.name}.{p.name}: an async call can carry only values, not role {role}")
    fn.servers = spec.get("servers", "")
    outs = [p for p in fn.params if p.role != "value"]
    if fn.servers and (fn.servers not in SERVERS or fn.api != "nvml" or mode != "sync" or fn.routes
                       or (fn.servers == "sum" and (len(outs) != 1 or outs[0].role != "out"))):
        raise AnnotationError(f"{fn.name}: `servers` is one of {sorted(SERVERS)}, for an NVML sync call that names "
                              "no device (and `sum`, for one with a single output)")
    fn.split = spec.get("split", "")
    if fn.split and (fn.api != "driver" or len(fn.routes) < 2):
        raise AnnotationError(f"{fn.name}: `split` goes with a driver call whose arguments may name two servers")
    fn.queued_when = spec.get("queued_when", "")
    if fn.queued_when and (mode != "sync" or fn.server or not fn.fits_a_record):
        raise AnnotationError(f"{fn.name}: `queued_when` goes with mode sync, no `server`, and parameters that "
                              "are scalars or handles passed by value (model.Function.fits_a_record)")
    if mode == "async" and fn.returns.spelling != fn.error_type:
        raise AnnotationError(f"{fn.name}: only functions returning {fn.error_type} can be queued")
