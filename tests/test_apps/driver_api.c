/* A driver-API program, as written against cuda.h alone: it makes its own context (cuCtxCreate), loads
 * a module from PTX text (JIT-compiled by the driver), looks up kernels and a __device__ variable, and
 * launches with cuLaunchKernel, both with a parameter array and with a packed parameter buffer.
 * Links libcuda.so.1 and nothing else of CUDA. */
#include "check.h"
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* nvcc -ptx -arch=compute_75 of:
 *   extern "C" __global__ void axpb(float *out, const float *in, float a, float b, int n)
 *   { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = in[i] * a + b; }
 *   __device__ int launches;
 *   extern "C" __global__ void count_launch(void) { if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(&launches, 1); }
 */
static const char PTX[] =
    ".version 9.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".global .align 4 .u32 launches;\n"
    ".visible .entry axpb(\n"
    "    .param .u64 axpb_param_0, .param .u64 axpb_param_1, .param .f32 axpb_param_2,\n"
    "    .param .f32 axpb_param_3, .param .u32 axpb_param_4)\n"
    "{\n"
    "    .reg .pred %p<2>; .reg .f32 %f<5>; .reg .b32 %r<6>; .reg .b64 %rd<8>;\n"
    "    ld.param.u64 %rd1, [axpb_param_0];\n"
    "    ld.param.u64 %rd2, [axpb_param_1];\n"
    "    ld.param.f32 %f1, [axpb_param_2];\n"
    "    ld.param.f32 %f2, [axpb_param_3];\n"
    "    ld.param.u32 %r2, [axpb_param_4];\n"
    "    mov.u32 %r3, %ctaid.x;\n"
    "    mov.u32 %r4, %ntid.x;\n"
    "    mov.u32 %r5, %tid.x;\n"
    "    mad.lo.s32 %r1, %r3, %r4, %r5;\n"
    "    setp.ge.s32 %p1, %r1, %r2;\n"
    "    @%p1 bra $L__BB0_2;\n"
    "    cvta.to.global.u64 %rd3, %rd2;\n"
    "    mul.wide.s32 %rd4, %r1, 4;\n"
    "    add.s64 %rd5, %rd3, %rd4;\n"
    "    ld.global.f32 %f3, [%rd5];\n"
    "    fma.rn.f32 %f4, %f3, %f1, %f2;\n"
    "    cvta.to.global.u64 %rd6, %rd1;\n"
    "    add.s64 %rd7, %rd6, %rd4;\n"
    "    st.global.f32 [%rd7], %f4;\n"
    "$L__BB0_2:\n"
    "    ret;\n"
    "}\n"
    ".visible .entry count_launch()\n"
    "{\n"
    "    .reg .pred %p<2>; .reg .b32 %r<5>; .reg .b64 %rd<2>;\n"
    "    mov.u32 %r1, %tid.x;\n"
    "    mov.u32 %r2, %ctaid.x;\n"
    "    or.b32 %r3, %r1, %r2;\n"
    "    setp.ne.s32 %p1, %r3, 0;\n"
    "    @%p1 bra $L__BB1_2;\n"
    "    mov.u64 %rd1, launches;\n"
    "    atom.global.add.u32 %r4, [%rd1], 1;\n"
    "$L__BB1_2:\n"
    "    ret;\n"
    "}\n";

#define N 1000

int main(void)
{
    CHECK_DRIVER(cuInit(0));
    int count = 0, version = 0;
    CHECK_DRIVER(cuDeviceGetCount(&count));
    CHECK_DRIVER(cuDriverGetVersion(&version));
    printf("devices: %d, driver API %s\n", count, version >= 13000 ? ">= 13.0" : "older");
    CUdevice dev;
    CHECK_DRIVER(cuDeviceGet(&dev, 0));

    CUcontext ctx, current;
    CUctxCreateParams none = {0}; /* empty parameters, as CUDA 13's samples pass them */
    CHECK_DRIVER(cuCtxCreate(&ctx, &none, 0, dev));
    CHECK_DRIVER(cuCtxGetCurrent(&current));
    CUdevice ctx_dev = -1;
    CHECK_DRIVER(cuCtxGetDevice(&ctx_dev));
    unsigned int api = 0;
    CHECK_DRIVER(cuCtxGetApiVersion(ctx, &api));
    printf("cuCtxCreate: the new context is current: %s, its device: %d, API version >= 3020: %s\n",
           current == ctx ? "yes" : "no", (int)ctx_dev, api >= 3020 ? "yes" : "no");
    CUstream stream;
    CUcontext stream_ctx = NULL;
    CUgreenCtx green = (CUgreenCtx)&green;
    CHECK_DRIVER(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK_DRIVER(cuStreamGetCtx_v2(stream, &stream_ctx, &green));
    printf("cuStreamGetCtx_v2: the stream's context is the new one: %s, a green context: %s\n",
           stream_ctx == ctx ? "yes" : "no", green ? "yes" : "no");
    /* captured work takes any address (the node keeps it, unread until the graph runs): XLA captures with
     * placeholder addresses while it compiles */
    CUgraph placeholder_graph = NULL;
    CHECK_DRIVER(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CUresult placeholder = cuMemsetD8Async((CUdeviceptr)0x80, 0, 131072, stream);
    CHECK_DRIVER(cuStreamEndCapture(stream, &placeholder_graph));
    size_t placeholder_nodes = 0;
    CHECK_DRIVER(cuGraphGetNodes(placeholder_graph, NULL, &placeholder_nodes));
    printf("a memset at a placeholder address captured: %d, the graph's nodes: %zu\n", (int)placeholder,
           placeholder_nodes);
    CHECK_DRIVER(cuGraphDestroy(placeholder_graph));
    CHECK_DRIVER(cuStreamDestroy(stream));
    int least = 99, greatest = 99, least_alone = 99, greatest_alone = 99;
    CHECK_DRIVER(cuCtxGetStreamPriorityRange(&least, &greatest));
    CHECK_DRIVER(cuCtxGetStreamPriorityRange(&least_alone, NULL)); /* either may be NULL (cuSOLVER's way) */
    CHECK_DRIVER(cuCtxGetStreamPriorityRange(NULL, &greatest_alone));
    printf("cuCtxGetStreamPriorityRange: least %d, greatest %d; asked alone: the same: %s\n", least, greatest,
           least_alone == least && greatest_alone == greatest ? "yes" : "no");

    CUmodule mod;
    char log[4096] = "";
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {log, (void *)(size_t)sizeof log};
    CHECK_DRIVER(cuModuleLoadDataEx(&mod, PTX, 2, opts, values));
    CUfunction axpb, count_launch;
    CHECK_DRIVER(cuModuleGetFunction(&axpb, mod, "axpb"));
    CHECK_DRIVER(cuModuleGetFunction(&count_launch, mod, "count_launch"));
    CUresult missing = cuModuleGetFunction(&count_launch, mod, "no_such_kernel");
    printf("a kernel the module lacks: %s\n", missing == CUDA_ERROR_NOT_FOUND ? "CUDA_ERROR_NOT_FOUND" : "other");
    CHECK_DRIVER(cuModuleGetFunction(&count_launch, mod, "count_launch"));
    CUdeviceptr launches;
    size_t launches_size = 0;
    CHECK_DRIVER(cuModuleGetGlobal(&launches, &launches_size, mod, "launches"));
    printf("module loaded from PTX: 2 kernels, __device__ launches of %zu bytes\n", launches_size);
    CUfunctionLoadingState loading = CU_FUNCTION_LOADING_STATE_MAX;
    CHECK_DRIVER(cuFuncIsLoaded(&loading, axpb));
    CHECK_DRIVER(cuFuncLoad(axpb));
    printf("axpb loaded: %s\n", loading == CU_FUNCTION_LOADING_STATE_LOADED ? "yes" : "no");

    /* function attributes, asked twice (the client keeps the answer), then changed: the next answer
     * must be the new value */
    int dyn_before = -1, dyn_again = -1, dyn_after = -1, max_threads = 0;
    CHECK_DRIVER(cuFuncGetAttribute(&dyn_before, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, axpb));
    CHECK_DRIVER(cuFuncGetAttribute(&dyn_again, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, axpb));
    CHECK_DRIVER(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, axpb));
    CHECK_DRIVER(cuFuncSetAttribute(axpb, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536));
    CHECK_DRIVER(cuFuncGetAttribute(&dyn_after, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, axpb));
    printf("axpb: max threads per block %d; dynamic shared memory limit %d, again %d, after setting 65536: %d\n",
           max_threads, dyn_before, dyn_again, dyn_after);
    int dyn_same = -1, dyn_lower = -1;
    CHECK_DRIVER(cuFuncSetAttribute(axpb, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536));
    CHECK_DRIVER(cuFuncGetAttribute(&dyn_same, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, axpb));
    CHECK_DRIVER(cuFuncSetAttribute(axpb, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
    CHECK_DRIVER(cuFuncGetAttribute(&dyn_lower, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, axpb));
    printf("axpb: set to 65536 again: %d; then to 1024: %d\n", dyn_same, dyn_lower);

    /* a module from a file (cuModuleLoad reads it on the program's side), and a file that is not there */
    char path[64];
    snprintf(path, sizeof path, "/tmp/cuwire-driver-api-%d.ptx", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f || fwrite(PTX, 1, sizeof PTX - 1, f) != sizeof PTX - 1 || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    CUmodule from_file;
    CHECK_DRIVER(cuModuleLoad(&from_file, path));
    CUlibrary library_from_file;
    CHECK_DRIVER(cuLibraryLoadFromFile(&library_from_file, path, NULL, NULL, 0, NULL, NULL, 0));
    unlink(path);
    CUfunction axpb_from_file;
    CHECK_DRIVER(cuModuleGetFunction(&axpb_from_file, from_file, "axpb"));
    CUkernel axpb_kernel;
    CHECK_DRIVER(cuLibraryGetKernel(&axpb_kernel, library_from_file, "axpb"));
    CUlibrary kernels_library;
    CUmodule functions_module;
    unsigned int kernel_count = 0, function_count = 0;
    CHECK_DRIVER(cuKernelGetLibrary(&kernels_library, axpb_kernel));
    CHECK_DRIVER(cuFuncGetModule(&functions_module, axpb_from_file));
    CHECK_DRIVER(cuLibraryGetKernelCount(&kernel_count, library_from_file));
    CHECK_DRIVER(cuModuleGetFunctionCount(&function_count, from_file));
    /* each of them enumerated: named, and the function asked about */
    CUkernel listed_kernels[2];
    CUfunction listed_functions[2];
    int axpb_kernels = 0, axpb_functions = 0, listed_threads = 0;
    if (kernel_count == 2 && function_count == 2) {
        CHECK_DRIVER(cuLibraryEnumerateKernels(listed_kernels, 2, library_from_file));
        CHECK_DRIVER(cuModuleEnumerateFunctions(listed_functions, 2, from_file));
        for (int i = 0; i < 2; i++) {
            const char *kernel_name = NULL, *function_name = NULL;
            CHECK_DRIVER(cuKernelGetName(&kernel_name, listed_kernels[i]));
            CHECK_DRIVER(cuFuncGetName(&function_name, listed_functions[i]));
            axpb_kernels += strcmp(kernel_name, "axpb") == 0 && listed_kernels[i] == axpb_kernel;
            if (strcmp(function_name, "axpb") == 0) {
                axpb_functions++;
                CHECK_DRIVER(cuFuncGetAttribute(&listed_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                                listed_functions[i]));
            }
        }
    }
    CUresult absent = cuModuleLoad(&from_file, "/nonexistent/cuwire.ptx");
    CUresult absent_library = cuLibraryLoadFromFile(&library_from_file, "/nonexistent/cuwire.ptx", NULL, NULL, 0,
                                                    NULL, NULL, 0);
    printf("cuModuleLoad of a PTX file: loaded; of a missing file: %s\n",
           absent == CUDA_ERROR_FILE_NOT_FOUND ? "CUDA_ERROR_FILE_NOT_FOUND" : "other");
    printf("cuLibraryLoadFromFile of a PTX file: loaded, axpb found; of a missing file: %s\n",
           absent_library == CUDA_ERROR_FILE_NOT_FOUND ? "CUDA_ERROR_FILE_NOT_FOUND" : "other");
    printf("the kernel's library: %s; the function's module: %s; kernels in the library %u, functions in the "
           "module %u\n", kernels_library == library_from_file ? "that library" : "another",
           functions_module == from_file ? "that module" : "another", kernel_count, function_count);
    printf("enumerated: axpb among the kernels %d time(s), the same kernel; among the functions %d time(s), "
           "max threads per block %d\n", axpb_kernels, axpb_functions, listed_threads);

    /* PTX the JIT refuses: the error comes back, and so does the JIT's log, into the program's buffer */
    static const char BAD_PTX[] = ".version 9.0\n.target sm_75\n.address_size 64\n"
                                  ".visible .entry broken_kernel()\n{\n    not_an_instruction;\n}\n";
    char bad_log[4096] = "";
    void *bad_values[] = {bad_log, (void *)(size_t)sizeof bad_log};
    CUmodule bad;
    CUresult refused = cuModuleLoadDataEx(&bad, BAD_PTX, 2, opts, bad_values);
    const char *refused_name = NULL;
    cuGetErrorName(refused, &refused_name);
    printf("PTX with an error: %s, the JIT's error log %s\n", refused_name ? refused_name : "?",
           bad_log[0] && (size_t)bad_values[1] == strlen(bad_log) ? "filled in" : "empty");

    /* linking at run time: the PTX compiled and linked into a cubin, which then loads as a module */
    char link_log[4096] = "";
    CUjit_option link_opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
    void *link_values[] = {link_log, (void *)(size_t)sizeof link_log};
    CUlinkState link;
    CHECK_DRIVER(cuLinkCreate(2, link_opts, link_values, &link));
    CHECK_DRIVER(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)PTX, sizeof PTX, "axpb.ptx", 0, NULL, NULL));
    void *linked = NULL;
    size_t linked_size = 0;
    CHECK_DRIVER(cuLinkComplete(link, &linked, &linked_size));
    CUmodule linked_mod;
    CHECK_DRIVER(cuModuleLoadData(&linked_mod, linked));
    CHECK_DRIVER(cuLinkDestroy(link));
    CUfunction axpb_linked;
    CHECK_DRIVER(cuModuleGetFunction(&axpb_linked, linked_mod, "axpb"));
    printf("cuLink*: PTX linked into an image (%s), loaded, axpb found in it\n", linked_size > 0 ? "not empty" : "empty");

    float host_in[N], host_out[N];
    for (int i = 0; i < N; i++)
        host_in[i] = (float)i * 0.25f - 100.0f;
    CUdeviceptr d_in, d_out;
    CHECK_DRIVER(cuMemAlloc(&d_in, N * sizeof(float)));
    CHECK_DRIVER(cuMemAlloc(&d_out, N * sizeof(float)));
    CHECK_DRIVER(cuMemcpyHtoD(d_in, host_in, sizeof host_in));
    CHECK_DRIVER(cuMemsetD32(d_out, 0, N));
    CHECK_DRIVER(cuMemsetD32(launches, 0, 1));

    /* parameters as an array of pointers */
    float a = 1.5f, b = -2.0f;
    int n = N;
    void *params[] = {&d_out, &d_in, &a, &b, &n};
    CHECK_DRIVER(cuLaunchKernel(axpb, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
    CHECK_DRIVER(cuLaunchKernel(count_launch, 4, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CHECK_DRIVER(cuCtxSynchronize());
    CHECK_DRIVER(cuMemcpyDtoH(host_out, d_out, sizeof host_out));
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += host_out[i];
    printf("axpb (parameter array): out[0]=%.9g out[999]=%.9g sum=%.9g\n", host_out[0], host_out[N - 1], sum);

    /* the same kernel (from the linked module) with a packed parameter buffer (CU_LAUNCH_PARAM_BUFFER_POINTER), laid out as the
     * PTX declares the parameters: 8 + 8 + 4 + 4 + 4 = 28 bytes */
    char packed[28];
    float a2 = 0.5f, b2 = 3.0f;
    memcpy(packed, &d_out, 8);
    memcpy(packed + 8, &d_out, 8);
    memcpy(packed + 16, &a2, 4);
    memcpy(packed + 20, &b2, 4);
    memcpy(packed + 24, &n, 4);
    size_t packed_size = sizeof packed;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                     CU_LAUNCH_PARAM_END};
    CHECK_DRIVER(cuLaunchKernel(axpb_linked, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
    CHECK_DRIVER(cuLaunchKernel(count_launch, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CHECK_DRIVER(cuMemcpyDtoH(host_out, d_out, sizeof host_out));
    sum = 0;
    for (int i = 0; i < N; i++)
        sum += host_out[i];
    printf("axpb (packed buffer): out[0]=%.9g out[999]=%.9g sum=%.9g\n", host_out[0], host_out[N - 1], sum);
    int launched = 0;
    CHECK_DRIVER(cuMemcpyDtoH(&launched, launches, sizeof launched));
    printf("count_launch ran %d times\n", launched);

    CHECK_DRIVER(cuMemFree(d_in));
    CHECK_DRIVER(cuMemFree(d_out));
    CHECK_DRIVER(cuModuleUnload(mod));
    CHECK_DRIVER(cuCtxDestroy(ctx));
    CHECK_DRIVER(cuCtxGetCurrent(&current));
    printf("cuCtxDestroy: no context current: %s\n", current == NULL ? "yes" : "no");

    /* error texts asked again and again (libraries do, cuDNN 9 times a call): the same text every time */
    const char *first = NULL, *again = NULL, *name = NULL;
    int same = 1;
    CHECK_DRIVER(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &first));
    for (int i = 0; i < 100; i++) {
        CHECK_DRIVER(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &again));
        same = same && again && strcmp(again, first) == 0;
    }
    CHECK_DRIVER(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &name));
    printf("cuGetErrorString 101 times: \"%s\", the same each time: %s; its name %s\n", first,
           same ? "yes" : "no", name);
    printf("cuGetErrorString of an unknown code: %s\n",
           cuGetErrorString((CUresult)123456, &again) == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : "?");
    return 0;
}
