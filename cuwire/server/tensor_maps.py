"""cuTensorMapReplaceAddress's server half: the tensor map is 128 bytes of the program's host memory, sent
and sent back. The generated half would also take a device address for it (the parameter is memory the
client may find on either side), and the driver would then write to that address as host memory: so a
map that is not in the message is refused."""

from __future__ import annotations

from cuwire.generated import cuwire_pb2 as pb
from cuwire.server.errors import INVALID_VALUE, CudaFail

TENSOR_MAP = 128  # sizeof(CUtensorMap)


def cuTensorMapReplaceAddress(s, a: pb.cuTensorMapReplaceAddress_Args) -> pb.cuTensorMapReplaceAddress_Result:
    if not a.HasField("tensorMap_host"):
        raise CudaFail(INVALID_VALUE, "a tensor map in device memory (the driver reads and writes it on the host)")
    tensor_map = s.inout_buffer(a.tensorMap_host, TENSOR_MAP)
    r = pb.cuTensorMapReplaceAddress_Result(status=s.lib.cuTensorMapReplaceAddress(
        s.ffi.cast("CUtensorMap *", tensor_map), s.ptr("void *", a.globalAddress)))
    if r.status == 0:
        r.tensorMap = s.take(tensor_map, TENSOR_MAP)
    return r


HANDLERS = {f.__name__: f for f in (cuTensorMapReplaceAddress,)}
