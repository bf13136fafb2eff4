"""The modules a program loaded in its last run, kept on the client, so that its next run loads them all in
one round trip (issue 35: a PyTorch start waited for one round trip per module, 38 before a CNN's first
step, and for one per kernel looked up by name in its large libraries).

A list is a file in CUWIRE_LOAD_LISTS per program (its command line) and GPU architecture. Each line is a
module the program loaded, `L <sha256 hex> <as_module 0|1>`; a name it looked up in one and that the
load did not answer, `K <sha256 hex> <from_module 0|1> <name>`; or a kernel of one whose function it
asked, `F <sha256 hex> 0 <kernel name>`; or an occupancy question the program asked of one of those,
`Q <sha256 hex> <which> <ask> <a> <b> <c> <sets> <config> <name>` (Question: the next run's Preload asks it
ahead; sets: the attributes the program had set of that kernel by then, `-` or `attribute=value,...`;
config: a cluster question's launch configuration in hex, else `-`); or
how many streams or events of a kind (MakeHandles_Args: kind, flags, priority) the program had the server
make, `H <kind> <flags> <priority> <count>` (the last line of a kind counts: the next run's Preload makes
as many, or its first batch asks as many at once, Run.handle_batch). The run rewrites its list as it goes
(lines appended whole, O_APPEND), so a run cut short leaves the part it made. A list is only a hint: one
that cannot be read, or names what the server lacks, costs nothing but the loads as the program makes them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

from cuwire.generated import cuwire_pb2 as pb
from cuwire.wire import layouts

MAX_MODULES = 1024  # modules a list keeps (the server's Preload takes as many: server/custom.py)
MAX_NAMES = 256  # lookups kept per module, of the three kinds together (the server's bound: custom.py)
MAX_LINE = 8192  # a longer line is not kept (a kernel's mangled name is far shorter)
MAX_HANDLE_KINDS = 64  # kinds of streams and events (kind, flags, priority) a list keeps
MAX_QUESTIONS = 256  # occupancy questions kept per module (the server's bound: custom.py)
MAX_LINES = 1 << 16  # a run writes no more questions past this many lines (ever new launch shapes)

# A question's kernel or function, by how the program came by it: a library's kernel (cuLibraryGetKernel,
# or a load's answer), a module's function (cuModuleGetFunction), or a kernel's function (cuKernelGetFunction)
LIBRARY_KERNEL, MODULE_FUNCTION, KERNEL_FUNCTION = (
    layouts.constant(n) for n in ("CW_FOUND_KERNEL", "CW_FOUND_FUNCTION", "CW_FOUND_KERNEL_FUNCTION"))
# the questions (client/answers_cache.c): frames.h's CW_ASK_*
ASKS = {layouts.constant(n) for n in ("CW_ASK_OCCUPANCY", "CW_ASK_OCCUPANCY_FLAGS", "CW_ASK_AVAILABLE_SHARED",
                                       "CW_ASK_SET", "CW_ASK_ATTRIBUTES", "CW_ASK_CLUSTERS")}
ASK_ATTRIBUTES, ASK_CLUSTERS = (layouts.constant(n) for n in ("CW_ASK_ATTRIBUTES", "CW_ASK_CLUSTERS"))
# a cluster question's configuration: its grid, block and shared memory, then its launch attributes (72 bytes each)
CONFIG_HEAD = layouts.constant("CW_CLUSTER_CONFIG_HEAD")
MAX_CONFIG = CONFIG_HEAD + layouts.constant("CW_CLUSTER_ATTRIBUTES_MOST") * 72


Sets = tuple[tuple[int, int], ...]  # (attribute, value) a program set of a kernel (client/answers_cache.c)
SET_FIRST, MAX_SETS = layouts.constant("CW_SET_FIRST"), layouts.constant("CW_SET_COUNT")  # the settable ones


@dataclass(frozen=True)
class Question:
    """An occupancy question the program asked of a kernel or function it found by `name` (`which`: one of
    the three above), with its arguments (client/answers_cache.c says what a, b and c are), under the
    attributes it had set of that kernel by then (`sets`); or a set of one; or with ASK_ATTRIBUTES, its
    attributes, which its load did not bring; or with ASK_CLUSTERS, its clusters for a launch `config`."""

    which: int
    name: str
    ask: int
    a: int
    b: int
    c: int
    sets: Sets = ()
    config: bytes = b""


def _format_sets(sets: Sets) -> str:
    return ",".join(f"{attribute}={value}" for attribute, value in sets) or "-"


def _parse_sets(text: str) -> Sets:
    """A Q line's sets (ValueError when they are not)."""
    if text == "-":
        return ()
    sets = tuple(tuple(int(x) for x in item.split("=")) for item in text.split(","))
    if len(sets) > MAX_SETS or any(len(p) != 2 or not SET_FIRST <= p[0] < SET_FIRST + MAX_SETS or
                                   not -(1 << 31) <= p[1] < 1 << 31 for p in sets):
        raise ValueError(text)
    return sets  # type: ignore[return-value]


@dataclass
class Module:
    """A module the program loaded, and the names it looked up in it (library kernels, module functions)."""

    digest: bytes
    as_module: bool
    kernels: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    kernel_functions: list[str] = field(default_factory=list)  # kernels whose CUfunction it asked
    questions: list[Question] = field(default_factory=list)

    def names(self) -> int:
        return len(self.kernels) + len(self.functions) + len(self.kernel_functions)


def list_path(folder: str, program: bytes, arch: str) -> str:
    """The list of `program` (its command line, NUL-separated as /proc/self/cmdline has it) for a GPU of
    `arch` (a module image is chosen per architecture, so its digest is too)."""
    return os.path.join(folder, hashlib.sha256(program + b"\0" + arch.encode()).hexdigest()[:32])


def own_command_line() -> bytes:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read(1 << 16)
    except OSError:
        return b""


@dataclass
class LastRun:
    """What a list says of the program's last run."""

    modules: list[Module] = field(default_factory=list)  # in the order first loaded
    handles: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (kind, flags, priority) -> made


MAX_LIST = MAX_MODULES * (MAX_NAMES + 1) * 128  # bytes of a list read (a longer one is cut)


def read(path: str) -> LastRun:
    """The list at `path` (an empty one when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return parse(f.read(MAX_LIST))
    except OSError:
        return LastRun()


def program_name(program: bytes) -> bytes:
    """What the hello names the program by (Hello.program): the server keeps its list under this, the token
    and its GPUs' architecture (server/program_lists.py)."""
    return hashlib.sha256(program).digest()


def parse(data: bytes) -> LastRun:
    """A list's text; lines that do not parse are skipped."""
    modules: dict[tuple[bytes, bool], Module] = {}
    last = LastRun()
    for line in data.split(b"\n"):
        if line.startswith(b"H "):
            try:
                kind, flags, priority, count = (int(x) for x in line[2:].split(b" "))
            except ValueError:
                continue
            if len(last.handles) < MAX_HANDLE_KINDS and 0 <= kind <= 1 and 0 <= flags < 1 << 32 and count > 0:
                last.handles[(kind, flags, priority)] = count
            continue
        if line.startswith(b"Q "):
            _read_question(line, modules)
            continue
        parts = line.split(b" ", 3)
        try:
            digest = bytes.fromhex(parts[1].decode())
            flag = parts[2] == b"1"
        except (IndexError, ValueError, UnicodeDecodeError):
            continue
        if len(digest) != 32 or parts[2] not in (b"0", b"1"):
            continue
        if parts[0] == b"L" and len(parts) == 3 and len(modules) < MAX_MODULES:
            modules.setdefault((digest, flag), Module(digest, flag))
        elif parts[0] in (b"K", b"F") and len(parts) == 4 and parts[3]:
            # a function is looked up in a module load's module; a kernel in the library of either load
            function = parts[0] == b"K" and flag
            library = modules.get((digest, False)) or modules.get((digest, True))
            owner = modules.get((digest, True)) if function else library
            names = None if owner is None else (owner.kernel_functions if parts[0] == b"F" else
                                                owner.functions if function else owner.kernels)
            name = parts[3].decode(errors="replace")
            if names is not None and owner.names() < MAX_NAMES and name not in names:
                names.append(name)
    last.modules = list(modules.values())
    return last


def _read_question(line: bytes, modules: dict[tuple[bytes, bool], Module]) -> None:
    """A `Q` line, kept with its module (a function in a module load's; a kernel in its library's)."""
    parts = line.split(b" ", 9)
    try:
        digest = bytes.fromhex(parts[1].decode())
        which, ask, a, b, c = (int(x) for x in parts[2:7])
        sets = _parse_sets(parts[7].decode())
        config = b"" if parts[8] == b"-" else bytes.fromhex(parts[8].decode())
        name = parts[9].decode()
    except (IndexError, ValueError, UnicodeDecodeError):
        return
    if which not in (LIBRARY_KERNEL, MODULE_FUNCTION, KERNEL_FUNCTION) or ask not in ASKS or not name or \
            not all(0 <= x < 1 << 64 for x in (a, b, c)) or len(config) > MAX_CONFIG or \
            (ask == ASK_CLUSTERS) != (len(config) >= CONFIG_HEAD):
        return
    owner = modules.get((digest, True)) if which == MODULE_FUNCTION else \
        modules.get((digest, False)) or modules.get((digest, True))
    q = Question(which, name, ask, a, b, c, sets, config)
    if owner is not None and len(owner.questions) < MAX_QUESTIONS and q not in owner.questions:
        owner.questions.append(q)


class Recorder:
    """This run's list, written as the program loads and looks up (whole lines, appended); a write that
    fails (a read-only home, a full disk) ends the recording, never the program's call."""

    def __init__(self, path: str) -> None:
        self.fd = -1
        self.modules = 0
        self.seen: set[str] = set()  # the lines written
        self.lines: list[str] = []  # ...in order: the list the server keeps at the end (text), written or not
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError:
            pass

    def loaded(self, digest: bytes, as_module: bool) -> None:
        if self.modules < MAX_MODULES and self._once(f"L {digest.hex()} {int(as_module)}\n"):
            self.modules += 1

    def looked_up(self, digest: bytes, from_module: bool, name: str) -> None:
        self._once(f"K {digest.hex()} {int(from_module)} {name}\n")

    def kernel_function(self, digest: bytes, name: str) -> None:
        self._once(f"F {digest.hex()} 0 {name}\n")

    def _once(self, line: str) -> bool:
        """Write `line` unless it was written already or holds a second line (a name with a newline)."""
        if line in self.seen or line.count("\n") != 1:
            return False
        self.seen.add(line)
        self._write(line)
        return True

    def made_handles(self, kind: int, flags: int, priority: int, count: int) -> None:
        self._write(f"H {kind} {flags} {priority} {count}\n")

    def asked(self, digest: bytes, q: Question) -> None:
        if len(self.seen) < MAX_LINES:
            self._once(f"Q {digest.hex()} {q.which} {q.ask} {q.a} {q.b} {q.c} {_format_sets(q.sets)} "
                       f"{q.config.hex() or '-'} {q.name}\n")

    def text(self) -> bytes:
        """This run's list as written so far (and where the file could not be: a read-only home)."""
        return "".join(self.lines).encode(errors="replace")

    def _write(self, line: str) -> None:
        data = line.encode(errors="replace")
        if len(data) > MAX_LINE:
            return
        self.lines.append(line)
        if self.fd < 0:
            return
        try:
            os.write(self.fd, data)
        except OSError:
            os.close(self.fd)
            self.fd = -1


MAKE_AT_ONCE = layouts.constant("CW_MAKE_AT_ONCE")  # streams or events a batch may make (cuwire/wire/frames.h)


class Run:
    """This run's side of the lists: what the program's last run left (its modules, loaded ahead by one
    Preload at the first load), and this run's list, written as it goes. The last run's list is the one in
    the folder, else the one the server kept (`given`: a fresh client machine). Without a folder
    (CUWIRE_LOAD_LISTS empty), an empty last run and no list."""

    def __init__(self, folder: str, program: bytes, arch: str, given: bytes = b"") -> None:
        path = list_path(folder, program, arch) if folder else ""
        self.last = read(path) if path else LastRun()
        self.from_server = bool(path) and not self.last.modules and not self.last.handles and bool(given)
        if self.from_server:
            self.last = parse(given)
        self.given = given  # (what the server has: this run's list goes back to it when it differs)
        self.recorder = Recorder(path) if path else None
        # the Preload's answers, by (digest, as_module), until the program loads each; None before it went
        self.preloaded: dict[tuple[bytes, bool], pb.PreloadedModule] | None = None
        self.preload_context = 0  # the context current at the Preload: its kernels' functions are that one's
        self.digests: dict[int, bytes] = {}  # a loaded library's or module's handle -> its image's digest
        self.kernel_digests: dict[int, bytes] = {}  # a CUkernel looked up by name -> its library's digest
        self.named: set[tuple] = set()  # lookups (the client's keys) a load did not answer: kept in the list
        self.handles_made: dict[tuple[int, int, int], int] = {}  # streams and events made, by kind
        # the kernels and functions given out: handle -> (its module's digest, how it was found, its name)
        self.identities: dict[int, tuple[bytes, int, str]] = {}
        self.kernel_numbers: dict[tuple[bytes, str], int] = {}  # (digest, name) -> its number (identify)
        self.preload_cleared = 0  # cuwire_answers_cleared() when the Preload went: its answers hold till it moves
        # streams and events the Preload made in its context, by kind (kind, flags, priority), till asked for
        self.made_ahead: dict[tuple[int, int, int], list[int]] = {}

    def preload_args(self) -> pb.Preload_Args | None:
        """The Preload of the last run's modules, and of as many streams and events of each kind as it made
        (None when there are none): asked once."""
        self.preloaded = {}
        if not self.last.modules and not self.last.handles:
            return None
        return pb.Preload_Args(handles=[
            pb.MakeHandles_Args(kind=kind, flags=flags, priority=priority, count=min(count, MAKE_AT_ONCE))
            for (kind, flags, priority), count in self.last.handles.items()], modules=[
            pb.PreloadModule(digest=m.digest, as_module=m.as_module, kernels=m.kernels, functions=m.functions,
                             kernel_functions=m.kernel_functions,
                             questions=[pb.Question(which=q.which, name=q.name, ask=q.ask, a=q.a, b=q.b, c=q.c,
                                                    set_attributes=[p[0] for p in q.sets],
                                                    set_values=[p[1] for p in q.sets], config=q.config)
                                        for q in m.questions]) for m in self.last.modules])

    def take(self, digest: bytes, as_module: bool) -> pb.PreloadedModule | None:
        """The module's load answered ahead, once (a second load of the same image goes to the server)."""
        return self.preloaded.pop((digest, as_module), None) if self.preloaded else None

    def loaded(self, digest: bytes, as_module: bool, module: int, library_module: int) -> None:
        self.digests[module] = digest
        if as_module:
            self.digests[library_module] = digest
        if self.recorder is not None:
            self.recorder.loaded(digest, as_module)

    def looked_up(self, args: pb.GetKernel_Args, kernel: int, key: tuple, kernel_name: str | None) -> None:
        """A lookup the program made (GetKernel_Args) and the kernel or function it found. One its module's
        load did not answer (`key` in named) goes on the list: by name in the module, or a kernel's function
        by the kernel's name."""
        if args.name and not args.from_module and args.module in self.digests:
            self.kernel_digests[kernel] = self.digests[args.module]
        if key not in self.named or self.recorder is None:
            return
        if args.kernel:
            digest = self.kernel_digests.get(args.kernel)
            if digest is not None and kernel_name is not None:
                self.recorder.kernel_function(digest, kernel_name)
        elif args.module in self.digests:
            self.recorder.looked_up(self.digests[args.module], args.from_module, args.name)

    def identify(self, handle: int, digest: bytes, which: int, name: str) -> int:
        """The kernel or function `handle` was found by `name` in the image of `digest` (`which`: how): its
        occupancy questions can go on the list. Its kernel's number (one per image and name, from 1)."""
        self.identities[handle] = (digest, which, name)
        return self.kernel_numbers.setdefault((digest, name), len(self.kernel_numbers) + 1)

    def identify_function(self, function: int, kernel: int) -> int:
        """`function` is the CUfunction of `kernel`, a library's kernel given out before: its kernel's
        number, or 0 when `kernel` is not known."""
        known = self.identities.get(kernel)
        if known is None or known[1] != LIBRARY_KERNEL:
            return 0
        return self.identify(function, known[0], KERNEL_FUNCTION, known[2])

    def asked(self, ask: int, handle: int, a: int, b: int, c: int, sets: Sets = (), config: bytes = b"") -> None:
        """The program asked an occupancy question of `handle` under `sets`, which the server answered (or the
        Preload did ahead): on the list, when the handle's kernel or function is known by name."""
        known = self.identities.get(handle)
        if known is not None and self.recorder is not None:
            self.recorder.asked(known[0], Question(known[1], known[2], ask, a, b, c, sets, config))

    def preload_answered(self, args: pb.Preload_Args, res: pb.Preload_Result) -> None:
        """The Preload's answer: the modules loaded ahead, until the program loads each, and the streams
        and events made ahead, until it asks for them."""
        self.preloaded = {(m.digest, m.as_module): m for m in res.modules}
        for h, made in zip(args.handles, res.made, strict=False):
            if made.status == 0 and made.handles:
                self.made_ahead[(h.kind, h.flags, h.priority)] = list(made.handles)[:h.count]

    def take_made(self, kind: int, flags: int, priority: int, context: int) -> list[int]:
        """The streams or events of a kind the Preload made, once, when asked for in its context."""
        if context != self.preload_context:
            return []
        return self.made_ahead.pop((kind, flags, priority), [])

    def handle_batch(self, kind: int, flags: int, priority: int, count: int) -> int:
        """How many streams or events of a kind (client/handle_pools.c) to make at once: at the first batch
        of a kind, as many as the last run had made, up to MAKE_AT_ONCE; else `count`."""
        if self.handles_made.get((kind, flags, priority)):
            return count
        return min(max(count, self.last.handles.get((kind, flags, priority), 0)), MAKE_AT_ONCE)

    def made_handles(self, kind: int, flags: int, priority: int, count: int) -> None:
        key = (kind, flags, priority)
        self.handles_made[key] = self.handles_made.get(key, 0) + count
        if self.recorder is not None:
            self.recorder.made_handles(kind, flags, priority, self.handles_made[key])
