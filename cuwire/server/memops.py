"""cuStreamBatchMemOp's server half, and the check a graph's batch memory operation node shares: the batch
travels as the program's CUstreamBatchMemOpParams array, and every address a wait or write in it names must be
the session's memory, with all the bytes it touches, before the driver sees the batch (the generated half
could not look inside the array)."""

from __future__ import annotations

from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb
from cuwire.server.errors import INVALID_VALUE, CudaFail, WireError

PARAMS = 48  # sizeof(CUstreamBatchMemOpParams)
# CUstreamBatchMemOpType -> bytes its address must have (0: it names no memory)
OPERATIONS = {cu.CU_STREAM_MEM_OP_WAIT_VALUE_32: 4, cu.CU_STREAM_MEM_OP_WRITE_VALUE_32: 4,
              cu.CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES: 0, cu.CU_STREAM_MEM_OP_WAIT_VALUE_64: 8,
              cu.CU_STREAM_MEM_OP_WRITE_VALUE_64: 8, cu.CU_STREAM_MEM_OP_BARRIER: 0}


def checked_ops(s, data: bytes, count: int):
    """A CUstreamBatchMemOpParams array of `count` operations from `data`, every address in it the session's."""
    if len(data) != count * PARAMS:
        raise WireError(f"{len(data)} bytes for {count} memory operations")
    ffi = s.ffi
    ops = ffi.new("CUstreamBatchMemOpParams[]", max(count, 1))
    ffi.memmove(ops, data, count * PARAMS)
    for i in range(count):
        size = OPERATIONS.get(ops[i].operation)
        if size is None:
            raise CudaFail(INVALID_VALUE, f"memory operation {i} of the batch has type {ops[i].operation}")
        if size:  # (waitValue and writeValue share their layout)
            s.device(ops[i].waitValue.address, size)
    return ops


def cuStreamBatchMemOp_v2(s, a: pb.cuStreamBatchMemOp_v2_Args) -> pb.cuStreamBatchMemOp_v2_Result:
    data = s.payload_bytes(a.paramArray, a.count * PARAMS)  # (its size checked like any buffer's)
    return pb.cuStreamBatchMemOp_v2_Result(status=s.lib.cuStreamBatchMemOp_v2(
        s.handle("CUstream_st", "CUstream", a.stream), a.count, checked_ops(s, data, a.count), a.flags))


HANDLERS = {f.__name__: f for f in (cuStreamBatchMemOp_v2,)}
