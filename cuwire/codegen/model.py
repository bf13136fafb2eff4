"""The typed model of the CUDA API that every generator consumes.

Built once from the headers (parse.py) and the annotations (annotations.py);
templates only read it. Nothing here knows about files or Jinja.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from .libraries import BY_API, Library

# How a scalar C type travels: (protobuf type, struct format, C type used at the C/Python boundary).
SCALARS: dict[str, tuple[str, str, str]] = {
    "char": ("int32", "b", "int64_t"),
    "signed char": ("int32", "b", "int64_t"),
    "unsigned char": ("uint32", "B", "uint64_t"),
    "short": ("int32", "h", "int64_t"),
    "unsigned short": ("uint32", "H", "uint64_t"),
    "int": ("int32", "i", "int64_t"),
    "unsigned int": ("uint32", "I", "uint64_t"),
    "long": ("int64", "q", "int64_t"),
    "unsigned long": ("uint64", "Q", "uint64_t"),
    "long long": ("int64", "q", "int64_t"),
    "unsigned long long": ("uint64", "Q", "uint64_t"),
    "size_t": ("uint64", "Q", "uint64_t"),
    "float": ("float", "f", "double"),
    "double": ("double", "d", "double"),
    "enum": ("int32", "i", "int64_t"),
    "pointer": ("uint64", "Q", "uint64_t"),
}


# Handle kinds no context owns (CUDA 12's libraries: a kernel of one runs on every device), so no server
ROUTELESS = frozenset({"CUlib_st", "CUkern_st"})
# ...and the order the context-bound ones name a call's server in (Function.routes): the other kinds at 2
ROUTE_FIRST = {"CUstream_st": 0, "CUctx_st": 1, "CUfunc_st": 3}
# NVML's device handles: a device list's program holds the client's stand-ins for them (client/routes.c)
NVML_DEVICE = "nvmlDevice_st"


@dataclass(frozen=True)
class CType:
    """A C type as written, plus what it resolves to once typedefs are followed.

    `resolved` is one of SCALARS' keys, "struct", "void", "funcptr" or "array";
    `pointee` is set for pointers and describes what they point to.
    """

    spelling: str
    resolved: str
    pointee: CType | None = None
    const: bool = False  # const on the pointee (for pointers) or on the value
    name: str = ""  # the typedef or struct name as written (e.g. "CUstream", "CUDA_MEMCPY2D")

    @property
    def is_pointer(self) -> bool:
        return self.pointee is not None

    @property
    def is_scalar(self) -> bool:
        return self.resolved in SCALARS

    @property
    def handle_kind(self) -> str:
        """For a handle type (a typedef'd pointer to an opaque struct, e.g. CUstream), the struct's
        tag (CUstream_st); else ""."""
        if self.resolved == "pointer" and "*" not in self.spelling and self.pointee is not None \
                and self.pointee.resolved == "struct":
            return self.pointee.name
        return ""

    @property
    def proto_type(self) -> str:
        return SCALARS[self.resolved][0] if self.is_scalar else "bytes"

    @property
    def struct_format(self) -> str:
        return SCALARS[self.resolved][1]

    @property
    def boundary_type(self) -> str:
        """The C type a value of this type has when it crosses into Python."""
        return SCALARS[self.resolved][2] if self.is_scalar else "void *"


@dataclass(frozen=True)
class Role:
    """What a parameter role means on the wire, said once: the templates, the boundary code and the
    annotation checks ask these properties rather than listing role names."""

    doc: str
    args: str = ""  # how it travels in <fn>_Args: "" (not at all), "scalar" (its proto type: its C type's,
    #                 uint64 for addresses and handles, string for text), "bytes", or "memory" (a device
    #                 address, or the host bytes beside it)
    result: str = ""  # how it comes back in <fn>_Result: "", "scalar" or "bytes"
    sized: bool = False  # its size in bytes is the annotation's `length` expression

    @property
    def memory(self) -> bool:
        return self.args == "memory"

    @property
    def written_back(self) -> bool:
        """The call's result is written into the program's memory through the pointer (memory roles are
        written back on their own path, host or device)."""
        return bool(self.result) and not self.memory


ROLES: dict[str, Role] = {
    "value": Role("scalar, enum, handle or device address passed by value", args="scalar"),
    "struct": Role("struct passed by value (travels as its bytes)", args="bytes"),
    "out": Role("pointer to one scalar the call writes", result="scalar"),
    "out_or_null": Role("like out, but the program may pass NULL for a value it does not want", result="scalar"),
    "inout": Role("pointer to one scalar the call reads and writes", args="scalar", result="scalar"),
    "struct_in": Role("pointer to one struct the call reads", args="bytes"),
    "struct_in_or_null": Role("pointer to one struct the call reads, or NULL (travels as no bytes)", args="bytes"),
    "struct_out": Role("pointer to one struct the call writes", result="bytes"),
    "struct_inout": Role("pointer to one struct the call reads and writes (a versioned struct: its version goes in)",
                         args="bytes", result="bytes"),
    "buf_in": Role("host buffer of `length` bytes the call reads", args="bytes", sized=True),
    "buf_in_or_null": Role("like buf_in, or NULL (travels as no bytes)", args="bytes", sized=True),
    "buf_out": Role("host buffer of `length` bytes the call writes", result="bytes", sized=True),
    "buf_inout": Role("host buffer of `length` bytes the call reads and writes", args="bytes", result="bytes",
                      sized=True),
    "mem_in": Role("memory of `length` bytes, device or host (decided per call by the client)", args="memory",
                   sized=True),
    "mem_out": Role("like mem_in, written by the call", args="memory", result="bytes", sized=True),
    "mem_inout": Role("like mem_out, but host memory is sent too (2D copies leave the gaps between rows alone)",
                      args="memory", result="bytes", sized=True),
    "string": Role("NUL-terminated input string", args="scalar"),
    "null": Role("pointer that must be NULL (reserved parameters)"),
}


@dataclass
class Param:
    """One parameter and, once annotated, the role it plays on the wire.

    role is one of ROLES (above), which says what each one means on the wire.
    """

    name: str
    type: CType
    decl: str  # the declaration as C, e.g. "const void *src"
    role: str = ""
    length: str = ""  # C expression over the other parameters, in bytes
    alloc: str = ""  # for `out` device pointers: the size expression of the new allocation
    overflow: bool = False  # ...which host memory may back when the GPU has no more (server/overflow.py)
    frees: bool = False  # the call releases the device allocation this parameter names
    range: str = ""  # for device addresses passed by value: the bytes from it that must be the session's
    at_most: int = 0  # for a value sizing an output buffer: the most the call writes (annotations.py)
    streams: str = ""  # for a host buffer: the device parameter a large one streams to or from (annotations.py)
    device_index: bool = False  # an NVML device index (in, or out): a device list's joined one (annotations.py)
    # for a struct (or array of them) the call reads: (the byte of the CUmemLocation that may name a device,
    # the bytes from one struct to the next or 0), a device list's joined ordinal there (annotations.py)
    device_location: tuple[int, int] | None = None

    @property
    def info(self) -> Role:
        """What this parameter's role means on the wire (ROLES)."""
        return ROLES[self.role]

    @property
    def proto_type(self) -> str:
        if self.role in ("value", "out", "out_or_null", "inout"):
            t = self.type if self.role == "value" else self.type.pointee
            assert t is not None
            return t.proto_type
        if self.role == "string":
            return "string"
        if self.role in ("mem_in", "mem_out", "mem_inout"):
            return "uint64"
        return "bytes"

    @property
    def routeless(self) -> bool:
        """A library or kernel handle passed by value (ROUTELESS): a device list's client loaded it on every
        server, and the call carries the one of the server it goes to (client/routes.c)."""
        return self.role == "value" and self.type.handle_kind in ROUTELESS

    @property
    def aliased(self) -> bool:
        """Carried as its server knows it (client/routes.c, alias): a routeless handle, or a CUfunction, which
        may be a library's CUkernel (NVIDIA's runtime passes one where the other goes); a context's own
        function is its server's already."""
        return self.routeless or (self.role == "value" and self.type.handle_kind == "CUfunc_st")

    @property
    def handle_kind(self) -> str:
        """The handle kind this parameter passes (role value) or receives (role out), else ""."""
        if self.role == "value":
            return self.type.handle_kind
        if self.role in ("out", "out_or_null") and self.type.pointee is not None:
            return self.type.pointee.handle_kind
        return ""

    @property
    def element_kind(self) -> str:
        """For a host buffer the call reads whose elements are handles (an array of CUgraphNode: a graph's
        dependencies): their handle kind, each checked as the session's by the server; else ""."""
        if self.role in ("buf_in", "buf_in_or_null") and self.type.pointee is not None:
            return self.type.pointee.handle_kind
        return ""

    @property
    def scalar(self) -> CType:
        """The scalar type this parameter carries (the pointee for out/inout)."""
        t = self.type.pointee if self.role in ("out", "out_or_null", "inout") else self.type
        assert t is not None
        return t


@dataclass
class Function:
    name: str
    header: str
    api: str  # the library it belongs to (libraries.py): "driver" or "nvml"
    returns: CType
    params: list[Param]
    aliases: list[str] = field(default_factory=list)
    status: str = "unimplemented"  # remoted | local | unimplemented
    mode: str = ""  # sync | async | custom | local, when not unimplemented
    note: str = ""
    fast: str = ""  # C function tried before the usual path (see annotations.py)
    after: str = ""  # C function called after a successful sync call (see annotations.py)
    server: str = ""  # file of a hand-written server half (see annotations.py)
    synchronizes: bool = False  # the host has caught up with the GPU once it succeeds (see annotations.py)
    releases: bool = False  # it releases what the session's end releases too (see annotations.py)
    shares_memory: bool = False  # it shares device memory with another process (see annotations.py)
    completes: tuple[str, str] | None = None  # ("stream" | "event" | "context", C handle): see annotations.py
    answered_when_done: bool = False  # answered by the client while what it waits for is known finished
    queued_when: str = ""  # C predicate: the call cannot fail, so it is queued, not waited for (annotations.py)
    servers: str = ""  # a device list: which servers it asks, each, sum or found (annotations.py); "": routed
    split: str = ""  # C function, same parameters, for arguments that name two servers (annotations.py)

    @property
    def released_at_end(self) -> bool:
        """What the call releases, the session's end releases too (a parameter it frees, or `releases`): once
        Python is gone at a Python program's end, it succeeds at once (client/start.c, cuwire_released_at_end)."""
        return self.releases or any(p.frees for p in self.params)

    @property
    def fn_id(self) -> int:
        """Wire id: derived from the name so builds from the same headers agree."""
        return zlib.crc32(self.name.encode())

    @property
    def c_params(self) -> str:
        """The parameter list as C, for stub definitions."""
        return ", ".join(p.decl for p in self.params) or "void"

    @property
    def c_call(self) -> bool:
        """A sync call made by the client's C itself (client/wire.c) and run by the server's C loop
        (server/records.c), like a queued call that waits: one that fits a record, with no hand-written C
        around it."""
        return (self.mode == "sync" and not self.fast and not self.after and not self.server and self.fits_a_record)

    @property
    def fits_a_record(self) -> bool:
        """A driver call the server's C loop can run from a fixed-layout record: every parameter a scalar or
        a handle passed by value, nothing made or kept, no device memory freed (a handle destroyed is taken
        out of the session's by the loop: generated/server_records.c)."""
        return (self.api == "driver" and self.returns.spelling == self.error_type
                and all(p.role == "value" and (p.type.is_scalar or p.handle_kind) and not p.alloc
                        and not (p.frees and not p.handle_kind) for p in self.params))

    @property
    def routes(self) -> list[tuple[str, str]]:
        """Where a program's devices lie on several servers (docs/several-servers.md, routing): the arguments
        that name the server this call goes to, each ("handle" | "pointer" | "device", its name), in the order
        the client asks them. Handles of a context-bound kind first (a stream or a context before the rest, a
        function last: a CUkernel may stand for it), then device addresses (a host address
        names none), then device ordinals; none: the calling thread's current context. Libraries and their
        kernels are not bound to a context (ROUTELESS): they route nothing, and a server that lacks one gets
        it from the client. A call with two of them may join two servers (a copy, a stream waiting on an
        event): the client's to split."""
        handles = [("handle", p.name) for p in sorted(
            (p for p in self.params if p.role == "value" and p.handle_kind
             and p.handle_kind not in ROUTELESS | {NVML_DEVICE}),
            key=lambda p: ROUTE_FIRST.get(p.handle_kind, 2))]
        nvml = [("nvml", p.name) for p in self.params if p.role == "value" and p.handle_kind == NVML_DEVICE]
        rest = [("pointer" if p.type.name == "CUdeviceptr" else "device", p.name) for p in self.params
                if p.role == "value" and (p.type.name in ("CUdeviceptr", "CUdevice") or p.device_index)]
        return handles + nvml + rest

    @property
    def has_routeless(self) -> bool:
        return any(p.routeless for p in self.params)

    @property
    def routes_by_kind(self) -> list[tuple[str, str]]:
        """routes, with a stream and a function told from the other handles ("stream", "function"): a special
        stream (the NULL stream) is the current context's, which then takes part in the route; a CUfunction
        may be a library's CUkernel, which names none (client/routes.c)."""
        kinds = {p.name: {"CUstream_st": "stream", "CUfunc_st": "function"}.get(p.handle_kind, "handle")
                 for p in self.params}
        return [(kinds[name] if how == "handle" else how, name) for how, name in self.routes]

    @property
    def in_records(self) -> bool:
        """Run by the server's C loop: queued (async, or sync but `queued_when`), or made by the client's C."""
        return self.mode == "async" or self.c_call or bool(self.queued_when)

    @property
    def library(self) -> Library:
        return BY_API[self.api]

    @property
    def error_type(self) -> str:
        return self.library.error_type


@dataclass
class Enum:
    name: str
    header: str
    members: dict[str, int]


@dataclass
class Struct:
    name: str
    header: str
    fields: list[tuple[str, str]]  # (field name, C spelling)


@dataclass
class Api:
    """Everything codegen knows: the input of every template."""

    cuda_version: str
    functions: list[Function]
    enums: list[Enum]
    structs: list[Struct]
    declarations_c: str  # the headers' types and prototypes as plain C, for cffi and the client stubs
    procs: list = field(default_factory=list)  # cuGetProcAddress's table (procs.ProcVariant)

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    def by_status(self) -> dict[str, list[Function]]:
        out: dict[str, list[Function]] = {"remoted": [], "local": [], "unimplemented": []}
        for f in self.functions:
            out[f.status].append(f)
        return out
