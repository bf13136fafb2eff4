"""Device memory backed by the server host's memory once the GPU has no more (CUWIRE_HOST_OVERFLOW).

Natively, a program that asks for more device memory than the GPU has gets CUDA_ERROR_OUT_OF_MEMORY. With
this setting, a cuMemAlloc that the GPU (or the session's budget, CUWIRE_SESSION_MEMORY) cannot serve is
served with managed memory that prefers the host and is mapped for the GPU: its kernels reach it across
the bus, slower, and no page moves back and forth between the host and the GPU. Each session may hold up
to the setting's bytes this way. It is off by default, and an allocation the GPU can serve is made as
before.
"""

from __future__ import annotations

import logging

from cuwire.generated import cuda_constants as cu
from cuwire.server.errors import OUT_OF_MEMORY, CudaFail

log = logging.getLogger("cuwire.server")


def allocate(s, dptr, size: int) -> int:
    """Serve a device allocation the GPU could not serve from host memory, within the session's limit;
    its status (OUT_OF_MEMORY where the setting is off). It is the session's as any allocation (s.owns)."""
    limit = s.server.settings.host_overflow
    if not limit:
        return OUT_OF_MEMORY
    if s.overflowed + size > limit:
        raise CudaFail(OUT_OF_MEMORY, f"the GPU has no more device memory, and {size} more bytes of host memory "
                                      f"would take the session past its overflow ({s.overflowed} of {limit} bytes "
                                      "held, CUWIRE_HOST_OVERFLOW)")
    status = s.lib.cuMemAllocManaged(dptr, size, cu.CU_MEM_ATTACH_GLOBAL)
    if status:
        return status
    address = int(dptr[0])
    device = s.ffi.new("CUdevice *")
    status = s.lib.cuCtxGetDevice(device)
    host, gpu = s.ffi.new("CUmemLocation *"), s.ffi.new("CUmemLocation *")
    host.type = cu.CU_MEM_LOCATION_TYPE_HOST
    gpu.type, gpu.id = cu.CU_MEM_LOCATION_TYPE_DEVICE, device[0]
    for advice, where in ((cu.CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host), (cu.CU_MEM_ADVISE_SET_ACCESSED_BY, gpu)):
        status = status or s.lib.cuMemAdvise_v2(address, size, advice, where[0])
    if status:
        s.lib.cuMemFree_v2(address)
        return status
    if not s.overflowed:
        log.info("session %s: the GPU has no more device memory; allocations go to host memory from now on "
                 "(up to %d bytes, CUWIRE_HOST_OVERFLOW)", s.name, limit)
    s.overflowed += size
    s.host_backed.add(address)
    return 0
