"""Which session a call goes to (client/routes.c, docs/several-servers.md "Sessions and routing"): the
client's C routing table, compiled here alone with gcc and asked as the generated stubs ask it. With one
session every route is 0; with a device list a handle or a device address names its server by the windows
of address space Python gives each session (cuwire/address_space.py), a device ordinal by the joined
device list, and anything else goes where the calling thread's current context lies."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cuwire import address_space

CLIENT = Path(__file__).resolve().parents[1] / "cuwire" / "client"

PROGRAM = r"""
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include "routes.h"

static uint64_t current; /* the calling thread's current context, as session.c keeps it */
uint64_t cuwire_current_context(void) { return current; }

int main(int argc, char **argv)
{
    /* argv: commands, each one word: "add:N:DEVICES:LO-HI,LO-HI" (a session), "ctx:VALUE", or an ask:
     * "h:VALUE" (a handle), "f:VALUE" (a CUfunction; "k:..." gives one an alias), "v:VALUE" (an address),
     * "d:ORDINAL", "c" (the current context); each ask prints its answer on a line of its own */
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (a[0] == 'a') {
            int n = (int)strtol(a + 4, &a, 10), devices = (int)strtol(a + 1, &a, 10), windows = 0;
            uint64_t starts[4], ends[4];
            while (*a == ':' || *a == ',') {
                starts[windows] = strtoull(a + 1, &a, 0);
                ends[windows++] = strtoull(a + 1, &a, 0);
            }
            printf("%d\n", cuwire_route_add_session(n, starts, ends, windows, devices));
        } else if (a[0] == 'c' && a[1] == 't') {
            current = strtoull(a + 4, NULL, 0);
        } else if (a[0] == 's') {
            printf("%d\n", cuwire_route_stream(strtoull(a + 2, NULL, 0)));
        } else if (a[0] == 'j') { /* "j:A:B": cuwire_route_also */
            char *rest;
            int first = (int)strtol(a + 2, &rest, 10);
            printf("%d\n", cuwire_route_also(first, atoi(rest + 1)));
        } else if (a[0] == 'k') { /* "k:HANDLE:SESSION:ALIAS": a library's kernel loaded on another server too */
            char *rest;
            uint64_t handle = strtoull(a + 2, &rest, 0);
            int session = (int)strtol(rest + 1, &rest, 10);
            cuwire_route_alias_add(handle, session, strtoull(rest + 1, NULL, 0));
        } else if (a[0] == 'h') {
            printf("%d\n", cuwire_route_handle(strtoull(a + 2, NULL, 0)));
        } else if (a[0] == 'f') {
            printf("%d\n", cuwire_route_function(strtoull(a + 2, NULL, 0)));
        } else if (a[0] == 'v') {
            printf("%d\n", cuwire_route_value(strtoull(a + 2, NULL, 0)));
        } else if (a[0] == 'd') {
            printf("%d\n", cuwire_route_device(atoi(a + 2)));
        } else if (a[0] == 'c') {
            printf("%d\n", cuwire_route_current());
        } else if (a[0] == 'n') {
            printf("%d\n", cuwire_route_sessions());
        }
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def routes(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    where = tmp_path_factory.mktemp("routes")
    (where / "main.c").write_text(PROGRAM)
    generated = CLIENT.parent / "generated"
    subprocess.run(["gcc", "-O2", f"-I{CLIENT}", f"-I{generated}", "-o", str(where / "routes"), str(where / "main.c"),
                    str(CLIENT / "routes.c"), str(CLIENT / "table.c"), "-lpthread"],
                   check=True)
    return where / "routes"


def ask(program: Path, *commands: str) -> list[int]:
    out = subprocess.run([str(program), *commands], capture_output=True, text=True, check=True).stdout
    return [int(line) for line in out.split()]


def add(session: int, number: int, devices: int) -> str:
    """The command that opens `session` for the list's `number`th server (its windows), with `devices`."""
    spans = ",".join(f"{lo:#x}-{hi:#x}" for lo, hi in address_space.windows(number))
    return f"add:{session}:{devices}" + (f":{spans}" if spans else "")


def test_room_for_a_device_list_and_a_program_own_server():
    """The C client's table has room for a device list's servers (address_space.MOST_SERVERS) and the
    program's own server's session: the two files say the same."""
    found = re.search(r"^#define CW_SESSIONS_MAX (\d+)", (CLIENT / "routes.h").read_text(), re.M)
    assert found and int(found.group(1)) == address_space.MOST_SERVERS + 1


def test_one_session_routes_everything_to_it(routes):
    """A program of one server: every ask answers 0 at once, whatever the value (the stubs' fast path)."""
    lo, _hi = address_space.windows(2)[1]
    assert ask(routes, "n", "h:0", "h:1", f"h:{lo}", f"v:{lo}", "v:0x7f0000000000", "d:0", "d:5", "c") == \
        [1, 0, 0, 0, 0, 0, 0, 0, 0]


def test_a_device_list_routes_by_window_ordinal_and_context(routes):
    """Two servers of a list (numbered 1 and 2: their windows), two devices and one: a handle or an address
    in a server's window names it, in either of its two windows; one in none names nobody (-1: the stub
    asks the next argument); the special streams 0, 1 and 2 name nobody; ordinals 0-1 are the first
    server's, 2 the second's, 3 nobody's; with no argument, the current context's server, or the first
    when the thread has none or one outside every window."""
    first, second = address_space.windows(1), address_space.windows(2)
    asks = [add(0, 1, 2), add(1, 2, 1), "n",
            f"h:{first[0][0]}", f"h:{first[1][0] + 4096}", f"h:{second[0][0]}", f"h:{second[1][1] - 1}",
            f"h:{second[1][1]}", "h:0", "h:1", "h:2",
            f"v:{first[1][0]}", f"v:{second[1][0]}", "v:0x7f0000000000",
            "d:0", "d:1", "d:2", "d:3",
            "c", f"ctx:{second[1][0] + 64}", "c", "ctx:0x5ff05c0", "c"]
    assert ask(routes, *asks) == [0, 0, 2,
                                  0, 0, 1, 1,
                                  -1, -1, -1, -1,
                                  0, 1, -1,
                                  0, 0, 1, -1,
                                  0, 1, 0]


def test_streams_and_joins(routes):
    """A stream names its server by its window, and a special one (0, 1, 2) the current context's; a call's
    route joins its arguments' answers: one that names none (-1) changes nothing, two servers split it."""
    second = address_space.windows(2)
    asks = [add(0, 1, 1), add(1, 2, 1), f"s:{second[1][0]}", "s:0", f"ctx:{second[1][0] + 64}", "s:0", "s:2",
            "j:-1:1", "j:1:-1", "j:1:1", "j:0:1", "j:-2:0", "j:-1:-1"]
    assert ask(routes, *asks) == [0, 0, 1, 0, 1, 1, 1, 1, 1, -2, -2, -1]


def test_refusals(routes):
    """A session past the most a program may have, or with more windows than a session has, is refused."""
    lo, hi = address_space.windows(1)[1]
    too_many = f"add:0:1:{lo:#x}-{hi:#x}" + f",{lo:#x}-{hi:#x}" * 4
    assert ask(routes, f"add:{address_space.MOST_SERVERS + 1}:1", "add:-1:1", too_many, "n") == [-1, -1, -1, 1]


def test_a_library_kernel_names_no_server(routes):
    """A CUkernel, which the program may pass where a CUfunction goes (the occupancy questions, attribute
    sets), is every server's once the client loaded its library on each: it names none (the call goes to the
    current context's server, carrying that server's alias), while a context's function names its own. Only a
    CUfunction argument is asked so (cuwire_route_function): other handles' routes take no lock."""
    first, second = address_space.windows(1), address_space.windows(2)
    kernel, function = first[1][0] + 4096, first[1][0] + 8192
    asks = [add(0, 1, 1), add(1, 2, 1), f"f:{kernel}", f"k:{kernel}:1:{second[1][0] + 4096}", f"f:{kernel}",
            f"h:{kernel}", f"f:{function}", f"f:{second[1][0] + 4096}"]
    assert ask(routes, *asks) == [0, 0, 0, -1, 0, 0, 1]  # (as another handle kind, by its window still)
