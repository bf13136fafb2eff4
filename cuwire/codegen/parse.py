"""Headers -> model: preprocess with gcc, parse with pycparser, resolve types.

Line markers are kept so every declaration knows the header it came from
(libc declares functions starting with "cu" too).
"""

from __future__ import annotations

import copy
import re
import subprocess
import tempfile
from pathlib import Path

from pycparser import c_ast, c_generator, c_parser

from . import libraries
from .headers import PARSED_HEADERS
from .model import SCALARS, Api, CType, Enum, Function, Param, Struct

HERE = Path(__file__).parent
INTERNAL_HEADER = HERE / "internal_api.h"
# Headers whose functions become client symbols, and the library each belongs to (libraries.py).
FUNCTION_HEADERS = libraries.FUNCTION_HEADERS
GCC_FLAGS = ["-E", "-std=c99", "-D__attribute__(x)=", "-D__extension__=", "-D__restrict=", "-D__inline=",
             "-D__asm__(x)=", "-D__builtin_va_list=int"]
PER_THREAD = "-DCUDA_API_PER_THREAD_DEFAULT_STREAM"


def preprocess(include: Path, extra: list[str] | None = None, tail: str = "") -> str:
    src = "".join(f"#include <{h}>\n" for h in PARSED_HEADERS) + tail
    with tempfile.NamedTemporaryFile("w", suffix=".c") as f:
        f.write(src)
        f.flush()
        out = subprocess.run(["gcc", *GCC_FLAGS, *(extra or []), f"-I{include}", f.name],
                             check=True, capture_output=True, text=True)
    return out.stdout


def header_of(file: str, include: Path) -> str | None:
    """The header name (relative to the include folder) of a line marker's file, or None for libc."""
    if file in ("cuda.h", "nvml.h"):  # internal_api.h's sections
        return file
    try:
        return str(Path(file).resolve().relative_to(include.resolve()))
    except ValueError:
        return None


_CANON = {
    frozenset(["unsigned"]): "unsigned int",
    frozenset(["signed"]): "int",
    frozenset(["signed", "int"]): "int",
    frozenset(["long", "int"]): "long",
    frozenset(["unsigned", "long", "int"]): "unsigned long",
    frozenset(["long", "unsigned", "int"]): "unsigned long",
    frozenset(["short", "int"]): "short",
    frozenset(["unsigned", "short", "int"]): "unsigned short",
    frozenset(["unsigned", "short"]): "unsigned short",
    frozenset(["unsigned", "long"]): "unsigned long",
}
# typedefs from libc that the CUDA headers use, and what they are
LIBC_TYPES = {"size_t": "size_t", "uint32_t": "unsigned int", "uint64_t": "unsigned long long",
              "int32_t": "int", "int64_t": "long long", "uint8_t": "unsigned char", "uint16_t": "unsigned short",
              "int8_t": "signed char", "int16_t": "short", "uintptr_t": "unsigned long", "ssize_t": "long"}


def canonical(names: list[str]) -> str:
    if names.count("long") == 2:
        return "unsigned long long" if "unsigned" in names else "long long"
    return _CANON.get(frozenset(names), " ".join(names))


class TypeResolver:
    """Follows typedefs to say what a declared type is on the wire."""

    def __init__(self, typedefs: dict[str, c_ast.Node]):
        self.typedefs = typedefs
        self.gen = c_generator.CGenerator()

    def spelling(self, node: c_ast.Node) -> str:
        t = copy.deepcopy(node)
        inner = t
        while not isinstance(inner, c_ast.TypeDecl):
            if isinstance(inner, c_ast.FuncDecl):
                return "void *"  # function pointer: spelled only for show
            inner = inner.type
        inner.declname = None
        return self.gen.visit(c_ast.Typename(None, [], None, t))

    def resolve(self, node: c_ast.Node, name: str = "") -> CType:
        spelling = self.spelling(node)
        if isinstance(node, (c_ast.PtrDecl, c_ast.ArrayDecl)):
            inner = node.type
            if isinstance(inner, c_ast.FuncDecl):
                return CType(spelling, "funcptr")
            pointee = self.resolve(inner)
            return CType(spelling, "pointer", pointee=pointee, const=pointee.const, name=name)
        if isinstance(node, c_ast.TypeDecl):
            const = "const" in node.quals
            t = node.type
            if isinstance(t, c_ast.Enum):
                return CType(spelling, "enum", const=const, name=name or (t.name or ""))
            if isinstance(t, (c_ast.Struct, c_ast.Union)):
                return CType(spelling, "struct", const=const, name=name or (t.name or ""))
            names = t.names
            if len(names) == 1 and names[0] in self.typedefs:
                inner = self.resolve(self.typedefs[names[0]], name=name or names[0])
                return CType(spelling, inner.resolved, inner.pointee, const or inner.const, inner.name)
            key = canonical(names)
            key = LIBC_TYPES.get(key, key)
            if key == "void":
                return CType(spelling, "void", const=const, name=name)
            if key not in SCALARS:
                raise ValueError(f"unknown C type {key!r}")
            return CType(spelling, key, const=const, name=name or key)
        if isinstance(node, c_ast.FuncDecl):
            return CType(spelling, "funcptr")
        raise ValueError(f"unexpected type node {node!r}")


def eval_const(node: c_ast.Node, known: dict[str, int], resolver: TypeResolver | None = None) -> int:
    """Evaluate an enumerator's value or an array size (sizeof of scalar types only)."""
    if isinstance(node, c_ast.UnaryOp) and node.op == "sizeof" and resolver is not None:
        return SIZES[resolver.resolve(node.expr.type).resolved]
    if isinstance(node, c_ast.Constant):
        v = node.value.rstrip("uUlL")
        return int(v, 0) if not v.startswith("'") else ord(v[1])
    if isinstance(node, c_ast.ID):
        return known[node.name]
    if isinstance(node, c_ast.UnaryOp):
        v = eval_const(node.expr, known, resolver)
        return {"-": -v, "~": ~v, "+": v}[node.op]
    if isinstance(node, c_ast.Cast):
        return eval_const(node.expr, known, resolver)
    if isinstance(node, c_ast.BinaryOp):
        a, b = eval_const(node.left, known, resolver), eval_const(node.right, known, resolver)
        ops = {"|": a | b, "<<": a << b if b < 64 else 0, ">>": a >> b, "+": a + b, "-": a - b, "*": a * b,
               "&": a & b}
        return ops[node.op]
    raise ValueError(f"cannot evaluate enum value {node!r}")


class _ArraySizes(c_ast.NodeVisitor):
    def __init__(self, resolver: TypeResolver, constants: dict[str, int]):
        self.resolver = resolver
        self.constants = constants

    def visit_ArrayDecl(self, node: c_ast.ArrayDecl) -> None:
        if node.dim is not None and not isinstance(node.dim, c_ast.Constant):
            node.dim = c_ast.Constant("int", str(eval_const(node.dim, self.constants, self.resolver)))
        self.generic_visit(node)


def fold_array_sizes(node: c_ast.Node, resolver: TypeResolver, constants: dict[str, int]) -> None:
    """Replace array sizes such as `8 - sizeof(cudaLaunchAttributeID)` or an enumerator (nvml.h's
    `NVML_GPM_METRIC_MAX`) by their value (cffi needs numbers)."""
    _ArraySizes(resolver, constants).visit(node)


SIZES = {"char": 1, "signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2, "int": 4,
         "unsigned int": 4, "enum": 4, "float": 4, "pointer": 8, "long": 8, "unsigned long": 8, "long long": 8,
         "unsigned long long": 8, "size_t": 8, "double": 8}


def collect_enum(e: c_ast.Enum, name: str, header: str) -> Enum:
    members: dict[str, int] = {}
    nxt = 0
    for en in e.values.enumerators if e.values else []:
        v = eval_const(en.value, members) if en.value is not None else nxt
        members[en.name] = v
        nxt = v + 1
    return Enum(name, header, members)


def parse_api(include: Path, cuda_version: str) -> Api:
    text = preprocess(include, tail=f'#include "{INTERNAL_HEADER}"\n')
    ast = c_parser.CParser().parse(text, "cuda.i")
    gen = c_generator.CGenerator()

    typedefs: dict[str, c_ast.Node] = {}
    decl_nodes: list[c_ast.Node] = []
    enums: dict[str, Enum] = {}
    structs: list[Struct] = []
    func_decls: list[tuple[c_ast.Decl, str]] = []
    for ext in ast.ext:
        header = header_of(ext.coord.file, include) if ext.coord else None
        if isinstance(ext, c_ast.Typedef):
            typedefs[ext.name] = ext.type
        if header is None:
            continue
        if isinstance(ext, c_ast.Decl) and isinstance(ext.type, c_ast.FuncDecl):
            if header in FUNCTION_HEADERS:
                func_decls.append((ext, header))
        if isinstance(ext, c_ast.Pragma):
            continue
        decl_nodes.append(ext)
        inner = ext.type.type if isinstance(ext, c_ast.Typedef) and isinstance(ext.type, c_ast.TypeDecl) else (
            ext.type if isinstance(ext, c_ast.Decl) else None)
        if isinstance(inner, c_ast.Enum) and inner.values:
            en = collect_enum(inner, ext.name or inner.name or "", header)
            enums[en.name] = en
        if isinstance(inner, c_ast.Struct) and inner.decls:
            structs.append(Struct(inner.name or ext.name or "", header,
                                  [(d.name or "", gen.visit(d)) for d in inner.decls]))

    resolver = TypeResolver(typedefs)
    constants = {name: value for en in enums.values() for name, value in en.members.items()}
    for n in decl_nodes:
        fold_array_sizes(n, resolver, constants)
    functions = [make_function(d, h, resolver, gen) for d, h in func_decls]
    attach_aliases(functions, include)
    declarations = "\n".join(gen.visit(n) + ";" for n in define_structs_once(decl_nodes))
    return Api(cuda_version, functions, sorted(enums.values(), key=lambda e: e.name), structs, declarations)


def define_structs_once(nodes: list[c_ast.Node]) -> list[c_ast.Node]:
    """`typedef struct s {...} a_t, b_t;` (nvml.h) parses as two typedefs that each define struct s: the
    second one becomes a typedef of the struct already defined."""
    seen: set[str] = set()
    out = []
    for n in nodes:
        inner = n.type.type if isinstance(n, c_ast.Typedef) and isinstance(n.type, c_ast.TypeDecl) else None
        if isinstance(inner, (c_ast.Struct, c_ast.Union)) and inner.name and inner.decls:
            if inner.name in seen:
                n = copy.deepcopy(n)
                n.type.type.decls = None
            seen.add(inner.name)
        out.append(n)
    return out


def make_function(decl: c_ast.Decl, header: str, resolver: TypeResolver, gen: c_generator.CGenerator) -> Function:
    fdecl: c_ast.FuncDecl = decl.type
    params: list[Param] = []
    for i, p in enumerate(fdecl.args.params if fdecl.args else []):
        if isinstance(p, c_ast.EllipsisParam):
            raise ValueError(f"{decl.name}: variadic functions are not supported")
        if isinstance(p, c_ast.Typename) and resolver.spelling(p.type) == "void":
            continue
        p = copy.deepcopy(p)
        name = p.name or f"arg{i}"
        if not p.name:
            inner = p.type
            while not isinstance(inner, c_ast.TypeDecl):
                inner = inner.type
            inner.declname = name
            p = c_ast.Decl(name, [], [], [], [], p.type, None, None)
        params.append(Param(name, resolver.resolve(p.type), gen.visit(p)))
    returns = resolver.resolve(fdecl.type)
    return Function(decl.name, header, FUNCTION_HEADERS[header], returns, params)


EXPORTS = HERE / "exports"
EXPORT_LISTS = {lib.exports: lib.api for lib in libraries.LIBRARIES}


def undeclared_exports(functions: list[Function]) -> list[Function]:
    """Functions the real libraries export that no parsed header declares (see exports/README.md).

    They get a client symbol that fails loudly; with no prototype to go by, the stub takes no
    parameters (callers may pass any: the x86-64 calling convention makes that harmless) and
    returns the API's error type.
    """
    known = {f.name for f in functions} | {a for f in functions for a in f.aliases}
    out = []
    for listing, api in EXPORT_LISTS.items():
        error = libraries.BY_API[api].error_type
        for name in (EXPORTS / listing).read_text().split():
            if name in known or name.startswith("cudbg"):
                continue
            known.add(name)
            out.append(Function(name, f"{listing[:-len('.exports')]} export", api, CType(error, "enum", name=error),
                                []))
    return out


_IDENT = re.compile(r"^[A-Za-z_]\w*$")


def same_abi(alias: str, target: Function) -> bool:
    """Whether `alias` may share `target`'s code. The driver keeps each older ABI under the plain name
    (`cuMemAlloc` takes 32-bit sizes and pointers; `cuMemAlloc_v2` is what cuda.h maps it to), so a
    driver alias may differ from its target only by the per-thread stream suffix."""
    return target.api != "driver" or re.sub(r"_pt(ds|sz)$", "", alias) == target.name


def attach_aliases(functions: list[Function], include: Path) -> None:
    """Give each function every other name the headers map onto it.

    cuda.h maps `cuMemAlloc` to `cuMemAlloc_v2`, and with per-thread default
    streams `cudaMemcpy` to `cudaMemcpy_ptds`; a binary may ask for any of
    these names, so each is probed through the preprocessor in both modes.
    """
    by_name = {f.name: f for f in functions}
    macros = subprocess.run(["gcc", "-dM", *GCC_FLAGS, PER_THREAD, f"-I{include}", "-"],
                            input="".join(f"#include <{h}>\n" for h in PARSED_HEADERS),
                            capture_output=True, text=True, check=True).stdout
    names = sorted({m.group(1) for m in re.finditer(r"^#define (cu\w+)[ (]", macros, re.M)})
    probe = "".join(f"\ncuwire_probe_{i} {n} ;" for i, n in enumerate(names)) + "\n"
    expansions = []
    for extra in ([], [PER_THREAD]):
        out = preprocess(include, extra, tail=probe)
        found = {int(i): v.strip() for i, v in re.findall(r"cuwire_probe_(\d+) (.*?) ;", out)}
        expansions.append({n: found.get(i, n) for i, n in enumerate(names)})
    default, per_thread = expansions
    for n in names:
        d, p = default.get(n, n), per_thread.get(n, n)
        target = by_name.get(d) or by_name.get(n)
        if target is None:
            continue
        for alias in (n, d, p):
            if _IDENT.match(alias) and alias != target.name and alias not in by_name and alias not in target.aliases \
                    and same_abi(alias, target):
                target.aliases.append(alias)
    for f in functions:
        f.aliases.sort()
