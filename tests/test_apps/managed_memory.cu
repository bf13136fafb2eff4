// managed_memory: cudaMallocManaged memory written by the host, then by a kernel, read back by the host with
// no copy; the host and kernels writing it in turn; prefetch and advice; copies and memsets on it; freed.
// Through cuwire with a server on the same host the memory is shared with the server and mapped for the
// GPU; over TCP the client keeps a host copy in step with the server's (client/managed.c).
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

// the odd elements, one more each
__global__ void addToOdd(int *p, int n) {
    int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x) + 1;
    if (i < n) p[i] += 1;
}

static int check(const char *what, const int *p, int n, int mul, int add) {
    for (int i = 0; i < n; i++)
        if (p[i] != i * mul + add) {
            printf("%-40s FAIL at %d: %d\n", what, i, p[i]);
            return 1;
        }
    printf("%-40s OK\n", what);
    return 0;
}

int main() {
    const int n = 100000;
    int failures = 0, device = 0, *m, *d, host[16];
    CHECK(cudaMallocManaged((void **)&m, n * sizeof(int)));
    for (int i = 0; i < n; i++) m[i] = i;  // the host writes it
    cudaMemLocation where = {cudaMemLocationTypeDevice, device};
    CHECK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetPreferredLocation, where));
    CHECK(cudaMemPrefetchAsync(m, n * sizeof(int), where, 0, 0));
    streamScaleAdd<<<(n + 255) / 256, 256>>>(m, m, 3, 1, n);  // the GPU changes it in place
    CHECK(cudaDeviceSynchronize());
    failures += check("kernel on managed memory, read by the host", m, n, 3, 1);

    for (int round = 0; round < 3; round++) {  // the host writes the even elements, a kernel the odd ones
        for (int i = 0; i < n; i += 2) m[i] += 1;
        addToOdd<<<(n / 2 + 255) / 256, 256>>>(m, n);
        CHECK(cudaDeviceSynchronize());
    }
    failures += check("host and kernels writing in turn", m, n, 3, 4);

    CHECK(cudaMalloc((void **)&d, n * sizeof(int)));
    CHECK(cudaMemcpy(d, m, n * sizeof(int), cudaMemcpyDefault));  // managed -> device
    streamScaleAdd<<<(n + 255) / 256, 256>>>(d, d, 1, 1, n);
    CHECK(cudaMemcpy(m, d, n * sizeof(int), cudaMemcpyDefault));  // device -> managed
    failures += check("copies between managed and device memory", m, n, 3, 5);

    CHECK(cudaMemset(m, 0, 16 * sizeof(int)));
    CHECK(cudaDeviceSynchronize());
    memcpy(host, m, sizeof host);
    int zeros = 1;
    for (int i = 0; i < 16; i++) zeros &= host[i] == 0;
    printf("%-40s %s\n", "cudaMemset on managed memory", zeros && m[16] == 16 * 3 + 5 ? "OK" : "FAIL");
    failures += !(zeros && m[16] == 16 * 3 + 5);

    CHECK(cudaFree(d));
    CHECK(cudaFree(m));
    printf("managed_memory: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
