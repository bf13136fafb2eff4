"""A program's CUDA_VISIBLE_DEVICES, honoured by its session as the driver honours it natively.

The client sends the program's value in its hello. Its entries name the server's devices: an index is the
server's own device of that number (the i-th of those `--devices` or the server's CUDA_VISIBLE_DEVICES
exposes), a UUID (GPU-..., MIG-...) a device by name (one the server exposes, by that name or by the UUID of
one it exposes by number, or any where it exposes all of its machine's). A device list's client names the
GPUs it chose by UUID (client/device_choice.py), whatever the server was given.
As the driver reads the variable, the list ends at the first entry that names no device. A session in a
process of its own runs CUDA with the result, so its driver applies it; sessions sharing one process
(--isolation thread) cannot, and take a value that names all of the server's devices in order only.
"""

from __future__ import annotations

import os

from cuwire.settings import Settings


def server_exposes(settings: Settings) -> str | None:
    """The server's own CUDA_VISIBLE_DEVICES: --devices (CUWIRE_DEVICES), else the variable it was started
    with; None where it serves every GPU of its machine."""
    return settings.devices or os.environ.get("CUDA_VISIBLE_DEVICES")


def session_devices(exposed: str | None, asked: str, uuids: list[str] | None = None) -> str:
    """The CUDA_VISIBLE_DEVICES a session's process runs with: `asked` (the program's) in the terms of
    `exposed` (the server's own value; None: every device of the machine); `uuids`: the UUIDs of the
    devices `exposed` names, in its order, where known."""
    base = [e.strip() for e in exposed.split(",")] if exposed is not None else None
    same = uuids and base is not None and len(uuids) == len(base)
    by_uuid = dict(zip(uuids, base, strict=True)) if same else {}
    chosen = []
    for raw in asked.split(","):
        entry = raw.strip()
        if entry.isdigit():
            if base is None:
                chosen.append(str(int(entry)))
            elif int(entry) < len(base):
                chosen.append(base[int(entry)])
            else:
                break
        elif entry.startswith(("GPU-", "MIG-")) and (base is None or entry in base):
            chosen.append(entry)
        elif entry in by_uuid:
            chosen.append(by_uuid[entry])
        else:
            break  # (a negative number, a word, an empty entry: the driver stops reading there too)
    return ",".join(chosen)


def shared_process_allows(count: int, asked: str, exposed: str | None = None,
                          uuids: list[str] | None = None) -> bool:
    """Whether a session sharing the server's process (--isolation thread), which sees the server's `count`
    devices (`uuids`, where known), may be served: its program's value names all of them, in order (or is
    the server's own)."""
    every = ",".join(str(i) for i in range(count))
    return session_devices(every, asked, uuids) == every or (exposed is not None and asked.strip() == exposed.strip())
