"""The hello, built in one place: what a client says when it opens a session (the client library and the
`cuwire` commands alike), and the one test of whether two sides speak the same API."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

import cuwire
from cuwire.generated import wire_ids
from cuwire.wire import protocol_pb2 as pb

# Bytes of a program's list (client/load_lists.py) the server keeps, compressed (server/program_lists.py): a
# PyTorch program's is some tens of KiB; the client sends none longer (cuwire.KeepList)
MOST_LIST_KEPT = 1 << 20


def gpu_arch(devices: Sequence[pb.Device]) -> str:
    """The architecture of a welcome's first GPU, as a module image names it (`sm_90`; "" with none): a
    program's list of what it loads is kept per architecture, on the client and by the server."""
    return f"sm_{devices[0].major}{devices[0].minor}" if devices else ""


def make_hello(token: str = "", **fields: object) -> pb.Hello:
    """The Hello of this process: its versions, the token, its pid and host, its CUDA_VISIBLE_DEVICES, and any
    further fields (the address ranges a client keeps, a join key, ...); tests replace fields the same way."""
    said: dict[str, object] = dict(client_version=cuwire.__version__, cuda_version=wire_ids.CUDA_VERSION,
                                   api_digest=wire_ids.API_DIGEST, token=token, pid=os.getpid(),
                                   host=socket.gethostname())
    if "CUDA_VISIBLE_DEVICES" in os.environ:  # (set, even empty: it says which devices the program may see)
        said["visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    said.update(fields)
    return pb.Hello(**said)


def same_api(message: pb.Hello | pb.Welcome) -> bool:
    """Whether the other side was generated from the same CUDA headers as this one."""
    return message.api_digest == wire_ids.API_DIGEST and message.cuda_version == wire_ids.CUDA_VERSION


def this_api() -> str:
    """This side's API, as the messages about a mismatch name it."""
    return f"CUDA {wire_ids.CUDA_VERSION} with API digest {wire_ids.API_DIGEST}"
