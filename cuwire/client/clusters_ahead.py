"""Cluster questions (cuOccupancyMaxActiveClusters, cuOccupancyMaxPotentialClusterSize) answered ahead by a
run's Preload, from its last run's list (load_lists.py): kept here until the program asks them, each under
the attributes set of its kernel that it was answered under (client/answers_cache.c's digest of them).
client/launches.py asks here before it asks the server; client/runtime.py keeps the Preload's answers here.
"""

from __future__ import annotations

import struct
import threading

from _cuwire import lib

from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb
from cuwire.wire import layouts

# CUlaunchConfig: grid[3], block[3], shared memory (u32), stream, attrs (at 40), numAttrs (at 48);
# CUlaunchAttribute: 72 bytes, its id (u32) first, its value at 8 (a cluster dimension: x, y, z as u32)
LAUNCH_ATTRIBUTE = 72
HEAD = layouts.constant("CW_CLUSTER_CONFIG_HEAD")  # a question's grid, block and shared memory, then attributes
_CLUSTER_DIMENSION = cu.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
MOST = 4096  # answers kept at most
_NOT_SETS = (1 << 64) - 1  # (cuwire_sets_digest_of: not sets a program makes)


def width_at(body: bytes) -> int | None:
    """Where the cluster dimension's x is in the attributes, when the cluster is a row (y = z = 1)."""
    for i in range(0, len(body), LAUNCH_ATTRIBUTE):
        kind, x, y, z = struct.unpack_from("<I4xIII", body, i)
        if kind == _CLUSTER_DIMENSION and x and y == 1 and z == 1:
            return i + 8
    return None


def at_width(head: bytes, body: bytes, at: int, width: int, w: int) -> tuple[bytes, bytes]:
    """A configuration (its head, grid first, and its attributes) of clusters `width` wide with the cluster
    dimension's x at `at`, made `w` wide, the grid's x keeping its multiple of it: a sweep's question."""
    grid_x = struct.unpack_from("<I", head)[0]
    return struct.pack("<I", grid_x // width * w) + head[4:], body[:at] + struct.pack("<I", w) + body[at + 4:]


class ClustersAhead:
    """(function, potential, configuration, sets' digest) -> (status, clusters, the sweep the question on
    the list asked; None for a width its sweep brought)."""

    def __init__(self) -> None:
        self.answers: dict[tuple, tuple[int, int, int | None]] = {}
        self.lock = threading.Lock()

    def keep(self, a: pb.Answer) -> None:
        """A cluster question the Preload answered; each width of its sweep too."""
        if len(a.set_attributes) != len(a.set_values) or len(a.config) < HEAD:
            return
        digest = lib.cuwire_sets_digest_of(list(a.set_attributes), list(a.set_values), len(a.set_attributes))
        if digest == _NOT_SETS:
            return
        potential, head, body = bool(a.a), a.config[:HEAD], a.config[HEAD:]
        at = None if potential else width_at(body)
        with self.lock:
            if len(self.answers) >= MOST:
                return
            self.answers[(a.handle, potential, a.config, digest)] = (a.status, a.value, a.b)
            width = struct.unpack_from("<I", body, at)[0] if at is not None else 0
            grid_x = struct.unpack_from("<I", head)[0]
            if not (a.sweep_status and width and grid_x % width == 0):
                return
            for w, (status, clusters) in enumerate(zip(a.sweep_status, a.sweep_clusters, strict=False), start=1):
                wide = b"".join(at_width(head, body, at, width, w))
                self.answers.setdefault((a.handle, potential, wide, digest), (status, clusters, None))

    def get(self, func: int, potential: bool, config: bytes, digest: int) -> tuple[int, int, int | None] | None:
        with self.lock:
            return self.answers.get((func, potential, config, digest))


ahead = ClustersAhead()
