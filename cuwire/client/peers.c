/* cuwire client: peer access between devices of two servers of a device list (docs/several-servers.md).
 * No GPU of one server reaches another server's memory, so they answer as GPUs without a peer path do:
 * no access (cuDeviceCanAccessPeer), no peer attribute (cuDeviceGetP2PAttribute), peer access refused
 * (cuCtxEnablePeerAccess), and NVML's P2P status "not supported" (nvmlDeviceGetP2PStatus, which NCCL
 * asks). Devices of one server go to it, as any call (-1: the usual path).
 *
 * A copy between two servers' memory (cuMemcpyDtoD, cuMemcpyPeer and their Async forms, annotation `split`;
 * cuMemcpy and cuMemcpyAsync of two device addresses, calls.c) goes server to server (runtime.py
 * copy_between, server/peer_copy.py): done when it returns, the asynchronous forms too (after each side's
 * earlier work, before anything later). A stream waiting for another server's event: below. */
#include "capture.h"
#include "cuda_api.h"
#include "runtime.h"

/* Whether the two name devices of two servers (each known, and not the same). */
static int apart(int a, int b) { return a >= 0 && b >= 0 && a != b; }

int cuwire_fast_cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    if (!canAccessPeer || !apart(cuwire_route_device(dev), cuwire_route_device(peerDev)))
        return -1;
    *canAccessPeer = 0;
    return CUDA_SUCCESS;
}

int cuwire_fast_cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                        CUdevice dstDevice)
{
    if (!value || !apart(cuwire_route_device(srcDevice), cuwire_route_device(dstDevice)))
        return -1; /* (an attribute that does not exist: the server says so) */
    *value = 0;
    return CUDA_SUCCESS;
}

int cuwire_fast_cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    (void)Flags;
    if (!apart(cuwire_route_current(), cuwire_route_handle((uint64_t)(uintptr_t)peerContext)))
        return -1;
    return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
}

int cuwire_fast_nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,
                                      nvmlGpuP2PStatus_t *p2pStatus)
{
    (void)p2pIndex;
    if (!p2pStatus || !apart(cuwire_route_nvml((uint64_t)(uintptr_t)device1),
                             cuwire_route_nvml((uint64_t)(uintptr_t)device2)))
        return -1;
    *p2pStatus = NVML_P2P_STATUS_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

CUresult cuwire_split_cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return (CUresult)cuwire_py_copy_between(dstDevice, srcDevice, ByteCount);
}

CUresult cuwire_split_cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream)
{
    (void)hStream; /* (done when it returns: ordered after both servers' earlier work) */
    return (CUresult)cuwire_py_copy_between(dstDevice, srcDevice, ByteCount);
}

CUresult cuwire_split_cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                   CUcontext srcContext, size_t ByteCount)
{
    (void)dstContext, (void)srcContext; /* (each address names its server: the contexts are theirs) */
    return (CUresult)cuwire_py_copy_between(dstDevice, srcDevice, ByteCount);
}

CUresult cuwire_split_cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                        CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    (void)dstContext, (void)srcContext, (void)hStream;
    return (CUresult)cuwire_py_copy_between(dstDevice, srcDevice, ByteCount);
}

int cuwire_copy_across(uint64_t dst, uint64_t src, size_t n)
{
    if (!apart(cuwire_route_value(dst), cuwire_route_value(src)))
        return -1; /* (host memory, or one server's) */
    return cuwire_py_copy_between(dst, src, n);
}

/* A stream of one server waiting for an event of another's (XLA orders a copy between two devices so): no
 * server can wait for the other's event, so the client does, before it returns (cuEventSynchronize, on the
 * event's server); the stream's later work is queued after that, so it comes after the event, as it would
 * natively. The program's thread waits where natively only the stream would. Not while the stream is
 * captured into a graph (a graph of one server cannot wait for another's work): refused by name. */
CUresult cuwire_split_cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    (void)Flags;
    if (cuwire_capture_of(hStream))
        return (CUresult)cuwire_route_split("cuStreamWaitEvent (a stream being captured)");
    return cuEventSynchronize(hEvent);
}
