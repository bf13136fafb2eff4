"""A program's CUDA_VISIBLE_DEVICES over a device list of several servers (docs/several-servers.md).

Natively the variable picks among one machine's GPUs. With `CUWIRE_SERVER=a,b` the program's machine is the
list: every GPU of a, then every GPU of b, numbered so; an index counts there, and a UUID (or the start of
one that names a single GPU, as the driver takes it) names a GPU of any of them. As the driver reads the
variable, the list ends at the first entry that names no GPU (or one named already). The client asks each
server which GPUs it exposes (a check of its hello: Reply.devices), chooses here, and opens a session on each
server chosen, telling it which of its own GPUs (their UUIDs). The servers go in the order of the program's
first GPU of each; a server's GPUs must then follow one another in the variable (a list of sessions cannot
interleave two servers' devices): otherwise the program is refused by name.
"""

from __future__ import annotations


class ChoiceError(ValueError):
    """The variable picks GPUs of the list in an order the list cannot give: the message says why."""


def choose(value: str, exposed: list[list[str]]) -> list[tuple[int, list[str]]]:
    """(server's place in the list, the UUIDs of its GPUs the program sees, in the program's order) for each
    server the program sees a GPU of, in the order the program numbers them. `exposed`: each server's GPUs'
    UUIDs, in its own numbering."""
    joined = [(server, uuid) for server, uuids in enumerate(exposed) for uuid in uuids]
    picked: list[tuple[int, str]] = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.isdigit():
            found = [joined[int(entry)]] if int(entry) < len(joined) else []
        elif entry.startswith(("GPU-", "MIG-")):
            found = [each for each in joined if each[1].startswith(entry)]
        else:
            found = []  # (a negative number, a word, an empty entry: the driver stops reading there too)
        if len(found) != 1 or found[0] in picked:
            break
        picked.append(found[0])
    order: list[tuple[int, list[str]]] = []
    for server, uuid in picked:
        if order and order[-1][0] == server:
            order[-1][1].append(uuid)
        elif any(s == server for s, _ in order):
            raise ChoiceError(f"CUDA_VISIBLE_DEVICES={value!r} names GPUs of server {server + 1} of the device "
                              "list apart from one another: a list gives each server's GPUs together, so name "
                              "them one after the other")
        else:
            order.append((server, [uuid]))
    return order
