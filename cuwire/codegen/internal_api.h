/* cuwire: driver entry points that cuda.h does not declare (its macros map the names away, or another
 * header declares them) but that programs and CUDA libraries still ask for by name. Written down here,
 * as data, and parsed like the public headers. */
# 1 "cuda.h"
/* Older driver ABIs that cuda.h maps away from. */
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
#undef cuStreamGetCaptureInfo
CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out);
/* cuGraphAddNode as programs built with CUDA 12.2 and 12.3 headers call it (no edge data; 12.4's is _v2) */
#undef cuGraphAddNode
CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams);
/* cuCtxCreate as programs built with CUDA 12 headers call it (CUDA 13's cuCtxCreate is _v4) */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
/* cudaProfiler.h's driver calls (that header is not parsed) */
CUresult cuProfilerStart(void);
CUresult cuProfilerStop(void);
# 1 "nvml.h"
/* NVML's first ABIs of the running-process queries, which nvml.h declares only under
 * NVML_NO_UNVERSIONED_FUNC_DEFS (its macros map the names to _v3): PyTorch's caching allocator asks for
 * nvmlDeviceGetComputeRunningProcesses by name, for its out-of-memory report. */
#undef nvmlDeviceGetComputeRunningProcesses
#undef nvmlDeviceGetGraphicsRunningProcesses
#undef nvmlDeviceGetMPSComputeRunningProcesses
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_v2_t *infos);
/* NVML's first ABI of the NVLink remote PCI query, which NCCL's topology asks for by name: it fills only the
 * first 32 bytes of nvmlPciInfo_t (NVML 8's 16-byte bus id, domain, bus, device and the device id), so a
 * caller's subsystem id and busId stay as they were (measured with driver 580 on the 2-GPU H100 and H200
 * hosts: tests/tools/nvml_probe.py fills the struct and counts what the call wrote). */
typedef struct nvmlPciInfoV1_st {
    char busId[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
} nvmlPciInfoV1_t;
#undef nvmlDeviceGetNvLinkRemotePciInfo
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfoV1_t *pci);
