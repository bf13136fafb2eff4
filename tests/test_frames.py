"""The wire's fixed layouts are defined once, in cuwire/wire/frames.h: the C of both sides includes it, and
Python's struct formats are read from it (cuwire/wire/layouts.py). Here gcc, compiling the header as the
client and the server do, and Python's reading of it agree on every layout, and no C file of either side
packs a record of its own."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cuwire.wire import layouts

ROOT = Path(__file__).resolve().parent.parent
STRUCTS = re.findall(r"^struct CW_PACKED (cw_\w+) \{", layouts.HEADER.read_text(), re.M)


def test_the_header_names_the_layouts():
    assert {"cw_frame_header", "cw_call_reply", "cw_launch_head", "cw_copy_head", "cw_copy_from", "cw_copy_shared",
            "cw_host_func", "cw_set_context", "cw_record_header"} <= set(STRUCTS)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_c_and_python_read_the_same_layouts(tmp_path):
    lines = ""
    for s in STRUCTS:  # each struct's size, and each field's offset
        lines += f'    printf("{s} %zu", sizeof(struct {s}));\n'
        for name in layouts.offsets(s):
            lines += f'    printf(" {name}=%zu", offsetof(struct {s}, {name}));\n'
        lines += '    printf("\\n");\n'
    program = tmp_path / "sizes.c"
    program.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "frames.h"\nint main(void)\n{\n'
                       + lines + "    return 0;\n}\n")
    subprocess.run(["gcc", f"-I{layouts.HEADER.parent}", "-o", str(tmp_path / "sizes"), str(program)], check=True)
    out = subprocess.run([str(tmp_path / "sizes")], capture_output=True, text=True, check=True).stdout.splitlines()
    for line, s in zip(out, STRUCTS, strict=True):
        name, size, *fields = line.split()
        assert (name, int(size)) == (s, layouts.layout(s).size), line
        assert {f: int(v) for f, v in (x.split("=") for x in fields)} == layouts.offsets(s), line


def test_no_side_packs_a_record_of_its_own():
    own = []
    for path in [*(ROOT / "cuwire" / "client").glob("*.c"), ROOT / "cuwire" / "server" / "records.c"]:
        for m in re.finditer(r"struct __attribute__\(\(packed\)\) (\w*)\s*\{", path.read_text()):
            if not m.group(1).startswith("integrity_"):  # (the runtime's private table hash, not the wire)
                own.append(f"{path.name}: {m.group(1) or 'an unnamed struct'}")
    assert not own, own


def test_python_takes_its_numbers_from_the_header():
    from cuwire.server import records
    from cuwire.wire import transport

    assert transport.HEADER.format == layouts.layout("cw_frame_header").format
    assert (transport.MAGIC, transport.MAX_MESSAGE) == (layouts.constant("CW_MAGIC"), 64 << 20)
    assert records.CALL_REPLY.size == 24 and records.CALL_RESULT_MAX == 64 << 10
