"""Stream and kernel-node attributes (cuStreamGet/SetAttribute, cuGraphKernelNodeGet/SetAttribute): a
CUlaunchAttributeValue of 64 bytes, read or written as the attribute's kind says. (Their Copy forms name
two handles only: generated.)

Only the kinds whose value holds plain numbers (and the access policy window's base address, a hint
the GPU's L2 takes, never dereferenced by the host) are taken: a value holding an event handle or a
place to write to (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, LAUNCH_COMPLETION_EVENT,
DEVICE_UPDATABLE_KERNEL_NODE) would reach the driver unchecked, so those are refused by name.
"""

from __future__ import annotations

from cuwire.generated import cuda_constants as cu
from cuwire.generated import cuwire_pb2 as pb
from cuwire.server.errors import NOT_SUPPORTED, CudaFail, WireError

VALUE = "CUlaunchAttributeValue"
STREAM, NODE = ("CUstream_st", "CUstream"), ("CUgraphNode_st", "CUgraphNode")
# The launch attributes whose values are plain data (the driver refuses what does not apply to streams or to nodes)
PLAIN = {cu.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, cu.CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
         cu.CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, cu.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
         cu.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, cu.CU_LAUNCH_ATTRIBUTE_PRIORITY,
         cu.CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP, cu.CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
         cu.CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION, cu.CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING}


def _kind(attr: int) -> int:
    if attr not in PLAIN:
        raise CudaFail(NOT_SUPPORTED, f"attribute {attr} (its value holds a handle or an address to write to: "
                                      "not taken from the wire)")
    return attr


def _value(s, data: bytes):
    if len(data) != s.ffi.sizeof(VALUE):
        raise WireError(f"{VALUE}: sent {len(data)} bytes, expected {s.ffi.sizeof(VALUE)}")
    value = s.ffi.new(f"{VALUE} *")
    s.ffi.memmove(value, data, len(data))
    return value


def cuStreamGetAttribute(s, a: pb.cuStreamGetAttribute_Args) -> pb.cuStreamGetAttribute_Result:
    value = s.ffi.new(f"{VALUE} *")
    r = pb.cuStreamGetAttribute_Result(status=s.lib.cuStreamGetAttribute(s.handle(*STREAM, a.hStream), _kind(a.attr),
                                                                          value))
    if r.status == 0:
        r.value_out = s.take(value)
    return r


def cuStreamSetAttribute(s, a: pb.cuStreamSetAttribute_Args) -> pb.cuStreamSetAttribute_Result:
    return pb.cuStreamSetAttribute_Result(status=s.lib.cuStreamSetAttribute(
        s.handle(*STREAM, a.hStream), _kind(a.attr), _value(s, a.value)))


def cuGraphKernelNodeGetAttribute(s, a: pb.cuGraphKernelNodeGetAttribute_Args
                                  ) -> pb.cuGraphKernelNodeGetAttribute_Result:
    value = s.ffi.new(f"{VALUE} *")
    r = pb.cuGraphKernelNodeGetAttribute_Result(status=s.lib.cuGraphKernelNodeGetAttribute(
        s.handle(*NODE, a.hNode), _kind(a.attr), value))
    if r.status == 0:
        r.value_out = s.take(value)
    return r


def cuGraphKernelNodeSetAttribute(s, a: pb.cuGraphKernelNodeSetAttribute_Args
                                  ) -> pb.cuGraphKernelNodeSetAttribute_Result:
    return pb.cuGraphKernelNodeSetAttribute_Result(status=s.lib.cuGraphKernelNodeSetAttribute(
        s.handle(*NODE, a.hNode), _kind(a.attr), _value(s, a.value)))


HANDLERS = {f.__name__: f for f in (cuStreamGetAttribute, cuStreamSetAttribute, cuGraphKernelNodeGetAttribute,
                                     cuGraphKernelNodeSetAttribute)}
