"""cuDevicePrimaryCtxReset's server half. The session holds the device's primary context for its whole life
and the client hands its handle out itself (cuDevicePrimaryCtxRetain is answered by the client), so after a
reset, which destroys everything the context held, the server makes the context again at once, as the
program's next runtime call would, and makes it current on the session's thread: cudaDeviceReset, then more
CUDA, works as natively. With --isolation thread every session of the process shares that context, so a
reset, which would destroy the other sessions' memory and streams, is refused by name."""

from __future__ import annotations

import logging

from cuwire.generated import cuwire_pb2 as pb
from cuwire.server.errors import NOT_SUPPORTED, CudaFail

log = logging.getLogger("cuwire.server")


def cuDevicePrimaryCtxReset_v2(s, a: pb.cuDevicePrimaryCtxReset_v2_Args) -> pb.cuDevicePrimaryCtxReset_v2_Result:
    settings = s.server.settings
    if settings.isolation == "thread" and not settings.session_name:  # (the listener's session processes serve one)
        raise CudaFail(NOT_SUPPORTED, "cuDevicePrimaryCtxReset (cudaDeviceReset): with --isolation thread the "
                                      "primary context is every session's; run the server with --isolation process")
    r = pb.cuDevicePrimaryCtxReset_v2_Result()
    r.status = s.lib.cuDevicePrimaryCtxReset_v2(a.dev)
    if r.status != 0:
        return r
    ctx = s.ffi.new("CUcontext *")
    again = s.lib.cuDevicePrimaryCtxRetain(ctx, a.dev)  # the session's hold on it, as before the reset
    held = [d.primary_context for d in s.server.devices]
    made = int(s.ffi.cast("uintptr_t", ctx[0])) if again == 0 else 0
    if made not in held:
        log.warning("session %s: after cuDevicePrimaryCtxReset the primary context of device %d is %#x (error %d), "
                    "not the one the client holds (%s): its next calls fail", s.name, a.dev, made, again,
                    ", ".join(f"{h:#x}" for h in held))
        return r
    s.lib.cuCtxSetCurrent(ctx[0])
    return r


HANDLERS = {f.__name__: f for f in (cuDevicePrimaryCtxReset_v2,)}
