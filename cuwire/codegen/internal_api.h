/* cuwire: the registration and launch internals that nvcc's host code calls.
 * They are exported by libcudart.so.13 but declared only in C++ headers
 * (crt/host_runtime.h, crt/device_functions.h), so their C prototypes are
 * written down here, as data, and parsed like the public headers. */
# 1 "crt/host_runtime.h"
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName,
                       int ext, size_t size, int constant, int global);
void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
                              const char *deviceName, int ext, size_t size, int constant, int global);
void __cudaRegisterHostVar(void **fatCubinHandle, const char *deviceName, char *hostVar, size_t size);
void __cudaRegisterUnifiedTable(void *table);
char __cudaInitModule(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream);
cudaError_t __cudaGetProcAddress(const char *symbol, void **funcPtr, unsigned long long flags,
                                 enum cudaDriverEntryPointQueryResult *driverStatus);
# 1 "crt/device_functions.h"
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                               cudaStream_t stream);
# 1 "cuda.h"
/* Older driver ABIs that cuda.h maps away from but CUDA libraries still ask for by name. */
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
#undef cuStreamGetCaptureInfo
CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out);
/* cuCtxCreate as programs built with CUDA 12 headers call it (CUDA 13's cuCtxCreate is _v4) */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
/* cudaProfiler.h's driver calls (that header is not parsed) */
CUresult cuProfilerStart(void);
CUresult cuProfilerStop(void);
