"""Model -> generated/: render each template, compile the protobuf schema, write the manifest."""

from __future__ import annotations

import hashlib
import json
import keyword
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import jinja2

from .libraries import LIBRARIES
from .model import Api, Function, Param

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
PROTOCOL = Path(__file__).resolve().parent.parent / "wire" / "protocol.proto"  # the hand-written messages
# template -> output file in generated/
OUTPUTS = {
    "cuwire.proto.j2": "cuwire.proto",
    "cuda_api.h.j2": "cuda_api.h",
    "client_stubs.c.j2": "client_stubs.c",
    "client_procs.c.j2": "client_procs.c",
    "client_cdefs.h.j2": "client_cdefs.h",
    "client_calls.py.j2": "client_calls.py",
    "server_handlers.py.j2": "server_handlers.py",
    "wire_ids.py.j2": "wire_ids.py",
    "cuda_constants.py.j2": "cuda_constants.py",
    "server_records.h.j2": "server_records.h",
    "server_records.c.j2": "server_records.c",
    "exports.map.j2": "exports.map",
}
# struct format letter -> C type of the same size, for writing outputs and packing records
FORMAT_CTYPES = {"b": "int8_t", "B": "uint8_t", "h": "int16_t", "H": "uint16_t", "i": "int32_t", "I": "uint32_t",
                 "q": "int64_t", "Q": "uint64_t", "f": "float", "d": "double"}
# Ids of cuwire's own operations (not CUDA functions) in the same id space as functions.
INTERNAL_OPS = ("LoadModule", "GetKernel", "GetGlobal", "LaunchKernel", "ErrorString", "ModuleFunctions",
                "MaxActiveClusters", "ExportTableSize", "LaunchKernelEx", "Link",
                "SetContext", "Copy3D", "KernelNode", "HostNode", "GraphNodes", "CopyToDevice", "CopyFromDevice",
                "CopyShared", "RegisterHost",
                "UnregisterHost", "HostFunc", "ManagedAlloc", "GraphNode", "CaptureInfo", "AllocNodeParams",
                "KernelNodeParams", "BatchMemOpNode", "GraphDot",
                "Enumerate", "MakeHandles", "FunctionAttributes", "RunningProcesses", "Preload", "KernelNodeSet",
                "HostCopy", "KeepList", "PeerOffer", "PeerFetch")


def py_name(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) or name in ("self", "a", "r", "s", "res", "args") else name


def expr(e: str, bind) -> str:
    """Rewrite a length expression's parameter names with `bind(name)`."""
    return re.sub(r"[A-Za-z_]\w*", lambda m: bind(m.group(0)), e)


def py_expr(e: str, prefix: str = "", outs: frozenset[str] = frozenset(), out_prefix: str = "res.") -> str:
    """As Python: names bound, and `/` the integer division it is in C (lengths are non-negative)."""
    e = e.replace("/", "//")
    return expr(e, lambda n: (f"{out_prefix}{py_name(n)}" if n in outs else f"{prefix}{py_name(n)}"))


def c_expr(e: str, prefix: str = "") -> str:
    """As C, names bound with `prefix` (a record's fields: "r.")."""
    return expr(e, lambda n: n if n == "sizeof" else f"{prefix}{n}")


def boundary_args(p: Param) -> list[tuple[str, str]]:
    """(C type at the Python boundary, C expression) for each value a stub passes to Python for p."""
    if p.role == "value":
        if p.at_most:  # a larger buffer than the call ever fills: it gets this much (annotations.py)
            clamped = f"{p.name} < {p.at_most} ? {p.name} : {p.at_most}"
            return [(p.type.boundary_type, f"({p.type.boundary_type})({clamped})")]
        if p.type.is_scalar and p.type.resolved != "pointer":
            return [(p.type.boundary_type, f"({p.type.boundary_type}){p.name}")]
        return [("uint64_t", f"(uint64_t)(uintptr_t){p.name}")]
    if p.role == "struct":
        return [("void *", f"(void *)&{p.name}"), ("uint64_t", f"sizeof {p.name}")]
    if p.role in ("struct_in", "struct_in_or_null", "struct_out", "struct_inout"):
        return [("void *", f"(void *){p.name}"), ("uint64_t", f"sizeof *{p.name}")]
    if p.info.sized:
        return [("void *", f"(void *){p.name}"), ("uint64_t", f"(uint64_t)({p.length})")]
    return [("void *", f"(void *){p.name}")]  # out, inout, string, null


def python_params(p: Param) -> list[str]:
    names = [py_name(p.name)]
    if len(boundary_args(p)) == 2:
        names.append(py_name(p.name) + "_len")
    return names


def record_fields(fn: Function) -> list[tuple[str, str, str]]:
    """(field name, C type, struct format) of a queued call's record, in order."""
    out = []
    for p in fn.params:
        fmt = p.type.struct_format if p.type.is_scalar else "Q"
        out.append((p.name, FORMAT_CTYPES[fmt], fmt))
    return out


def out_ctype(p: Param) -> str:
    return FORMAT_CTYPES[p.scalar.struct_format]


def server_arg(p: Param) -> str:
    """The Python expression a server handler passes to the real function for p."""
    n = py_name(p.name)
    if p.handle_kind and p.role == "value":
        return f's.handle("{p.handle_kind}", "{p.type.spelling}", a.{n})'
    if p.role == "value":
        if p.type.resolved == "pointer" or not p.type.is_scalar:
            return f's.ptr("{p.type.spelling}", a.{n})'
        return f"a.{n}"
    if p.info.memory and p.type.resolved != "pointer":
        return f"s.address_of({n})"  # a CUdeviceptr parameter takes the buffer's address as an integer
    pointee = p.type.pointee.spelling.replace("const ", "").strip() if p.type.pointee else ""
    if p.role in BUFFER_ROLES and pointee not in ("void", "char", "unsigned char"):
        return f's.ffi.cast("{p.type.spelling}", {n})'  # a byte buffer where the function takes typed elements
    return n  # prepared by the handler under the parameter's own name


# prepared as char buffers
BUFFER_ROLES = {"buf_in", "buf_in_or_null", "buf_out", "buf_inout", "mem_in", "mem_out", "mem_inout"}


def api_digest(api: Api) -> str:
    """One hash of everything the wire depends on; client and server compare it at the handshake."""
    h = hashlib.sha256()
    for f in api.functions:
        h.update(f"{f.name}:{f.mode}:{[(p.name, p.role, p.length) for p in f.params]}\n".encode())
    h.update(f"{INTERNAL_OPS}\n".encode())  # cuwire's own operations and records
    return h.hexdigest()[:16]


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(py_name=py_name, boundary_args=boundary_args, python_params=python_params,
                       record_fields=record_fields, out_ctype=out_ctype, server_arg=server_arg, py_expr=py_expr,
                       c_expr=c_expr)
    env.globals.update(internal_ops={op: f"cuwire.{op}" for op in INTERNAL_OPS}, crc32=_crc32,
                       frozenset=frozenset, gpu_reaches=gpu_reaches)
    return env


# Functions whose device addresses (CUdeviceptr parameters) the GPU reads or writes: page-locked memory of a
# client over TCP named there is mapped by the server first (client/host_memory.c, cuwire_host_reference).
# Queries, frees and address-space calls name addresses without the GPU touching them: they map nothing.
GPU_REACHES = ("cuMemset", "cuMemcpy", "cuStreamWaitValue", "cuStreamWriteValue")


def gpu_reaches(name: str) -> bool:
    return name.startswith(GPU_REACHES)


def _crc32(s: str) -> int:
    import zlib

    return zlib.crc32(s.encode())


def error_names(api: Api) -> list[tuple[str, int]]:
    """CUresult names by value (first name wins where values repeat), for the client's trace lines."""
    enum = next(e for e in api.enums if e.name == "CUresult")
    seen: dict[int, str] = {}
    for name, value in enum.members.items():
        seen.setdefault(value, name)
    return [(n, v) for v, n in sorted(seen.items())]


def manifest(api: Api) -> dict:
    return {
        "generated_by": "cuwire.codegen",
        "cuda_version": api.cuda_version,
        "api_digest": api_digest(api),
        "libraries": {lib.api: lib.soname for lib in LIBRARIES},
        "counts": {h: {s: sum(1 for f in api.functions if f.header == h and f.status == s)
                       for s in ("remoted", "local", "unimplemented")}
                   for h in sorted({f.header for f in api.functions})},
        "functions": [
            {"name": f.name, "header": f.header, "api": f.api, "status": f.status, "mode": f.mode or None,
             "aliases": f.aliases, "note": f.note or None, "id": f.fn_id,
             "routes": [list(r) for r in f.routes] if f.status != "unimplemented" else None}
            for f in sorted(api.functions, key=lambda f: f.name)
        ],
    }


COVERAGE = re.compile(r"(<!-- coverage -->\n).*?(\n<!-- /coverage -->)", re.S)


def coverage_line(m: dict) -> str:
    n = {s: sum(c[s] for c in m["counts"].values()) for s in ("remoted", "local", "unimplemented")}
    return (f"CUDA {m['cuda_version']}: {n['remoted']} of {sum(n.values())} functions remoted, {n['local']} answered "
            f"locally by the client, {n['unimplemented']} not implemented yet (each fails loudly by name).")


def update_readme(readme: Path, m: dict) -> bool:
    """Rewrite the coverage line between the README's markers; True if it changed."""
    text = readme.read_text()
    new = COVERAGE.sub(lambda x: x.group(1) + coverage_line(m) + x.group(2), text)
    if new != text:
        readme.write_text(new)
    return new != text


def check_ids(api: Api) -> None:
    seen: dict[int, str] = {}
    names = [f.name for f in api.functions] + [f"cuwire.{op}" for op in INTERNAL_OPS]
    for n in names:
        i = _crc32(n)
        if i in seen:
            raise SystemExit(f"codegen: wire id collision between {seen[i]} and {n}; rename one id scheme")
        seen[i] = n


def render_all(api: Api, out: Path, wire_out: Path | None = None) -> list[Path]:
    """Every generated file into `out`; the hand-written protocol's compiled module into `wire_out`
    (default: `out`)."""
    check_ids(api)
    env = environment()
    wire = [f for f in api.functions if f.mode in ("sync", "async")]
    ctx = {"api": api, "functions": sorted(api.functions, key=lambda f: f.name),
           "wire": sorted(wire, key=lambda f: f.name), "digest": api_digest(api),
           "error_names": error_names(api), "procs": api.procs, "libraries": LIBRARIES}
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for tpl, name in OUTPUTS.items():
        path = out / name
        path.write_text(env.get_template(tpl).render(**ctx))
        written.append(path)
    path = out / "api_manifest.json"
    path.write_text(json.dumps(manifest(api), indent=1) + "\n")
    written.append(path)
    written += compile_proto(out / "cuwire.proto", out, wire_out or out)
    written += compile_device_plugin(out)
    written.append(emit_server_ffi(out / "cuda_api.h", out / "server_ffi.py"))
    return written


def emit_server_ffi(header: Path, target: Path) -> Path:
    """The server's cffi types and prototypes as a module (cffi's out-of-line ABI mode): every type the
    handlers name is looked up there at once, where an FFI built from the header at run time parses each
    new type string against the whole header with pycparser (tens of milliseconds, in every session)."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef("\n".join(line for line in header.read_text().splitlines() if not line.startswith("#")))
    ffi.set_source("cuwire.generated.server_ffi", None)
    with tempfile.TemporaryDirectory() as tmp:
        ffi.emit_python_code(str(Path(tmp) / target.name))
        text = (Path(tmp) / target.name).read_text()
    target.write_text(f"# Generated by cffi from cuda_api.h (cuwire.codegen). Do not edit.\n{text}")
    return target


DEVICE_PLUGIN = Path(__file__).resolve().parent.parent / "kubernetes" / "deviceplugin.proto"  # the kubelet's API


def compile_device_plugin(out: Path) -> list[Path]:
    """The kubelet's device plugin API (cuwire/kubernetes/deviceplugin.proto), messages and gRPC stubs, as
    cuwire.generated.deviceplugin_pb2 and deviceplugin_pb2_grpc (cuwire/kubernetes/plugin.py serves it)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "src", Path(tmp) / "out"
        (src / "cuwire/generated").mkdir(parents=True)
        (src / "cuwire/generated/deviceplugin.proto").write_text(DEVICE_PLUGIN.read_text())
        dst.mkdir()
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"--python_out={dst}",
                        f"--grpc_python_out={dst}", "cuwire/generated/deviceplugin.proto"], check=True)
        written = []
        for name in ("deviceplugin_pb2.py", "deviceplugin_pb2_grpc.py"):
            target = out / name
            target.write_text("# Generated by grpcio-tools from cuwire/kubernetes/deviceplugin.proto (cuwire.codegen). "
                              f"Do not edit.\n{(dst / 'cuwire/generated' / name).read_text()}")
            written.append(target)
    return written


def compile_proto(proto: Path, out: Path, wire_out: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) on the generated schema and the hand-written one it imports
    (cuwire/wire/protocol.proto), so that they import as cuwire.generated.cuwire_pb2 and
    cuwire.wire.protocol_pb2; the latter is written to `wire_out` (cuwire/wire/, beside its .proto)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "src", Path(tmp) / "out"
        for name, text in ((f"cuwire/generated/{proto.name}", proto.read_text()),
                           ("cuwire/wire/protocol.proto", PROTOCOL.read_text())):
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_text(text)
        dst.mkdir()
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"--python_out={dst}",
                        f"cuwire/generated/{proto.name}", "cuwire/wire/protocol.proto"], check=True)
        written = []
        for made, target, source in ((dst / "cuwire/generated/cuwire_pb2.py", out / "cuwire_pb2.py", "cuwire.proto"),
                                     (dst / "cuwire/wire/protocol_pb2.py", wire_out / "protocol_pb2.py",
                                      "cuwire/wire/protocol.proto")):
            target.write_text(f"# Generated by grpcio-tools from {source} (cuwire.codegen). Do not edit.\n"
                              f"{made.read_text()}")
            written.append(target)
    return written
