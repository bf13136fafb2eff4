// cuwire benchmark workload: the same binary runs natively and through cuwire (bench/run.sh), and each
// line it prints is "name: value unit" for run.sh to put side by side.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>

#include "../tests/test_apps/check.h"  // CHECK: a failed call says so and exits 1

__global__ void tiny(int *p) { if (threadIdx.x == 0 && blockIdx.x == 0) p[0] += 1; }

static double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main()
{
    const int calls = 2000;
    int *d;
    CHECK(cudaMalloc(&d, 1 << 20));
    CHECK(cudaMemset(d, 0, 1 << 20));
    tiny<<<1, 32>>>(d);  // warm up: module load, kernel lookup
    CHECK(cudaDeviceSynchronize());

    int h = 0;
    double t = now();
    for (int i = 0; i < calls; i++)
        CHECK(cudaMemcpy(d, &h, sizeof h, cudaMemcpyHostToDevice));
    std::printf("small cudaMemcpy H2D (4 bytes): %.2f us/call\n", (now() - t) / calls * 1e6);

    t = now();
    for (int i = 0; i < calls; i++)
        CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("small cudaMemcpy D2H (4 bytes), a call that waits: %.2f us/call\n", (now() - t) / calls * 1e6);
    h = 0;

    // a call that waits and does no GPU work: each timed alone, the median printed
    std::vector<double> each(calls);
    for (int i = 0; i < calls; i++) {
        t = now();
        CHECK(cudaStreamQuery(0));
        each[i] = now() - t;
    }
    std::sort(each.begin(), each.end());
    std::printf("cudaStreamQuery, a call that waits (p50): %.2f us/call\n", each[calls / 2] * 1e6);

    t = now();
    for (int i = 0; i < calls; i++)
        CHECK(cudaGetDeviceCount(&h));
    std::printf("cudaGetDeviceCount: %.2f us/call\n", (now() - t) / calls * 1e6);

    t = now();
    for (int i = 0; i < calls; i++)
        tiny<<<1, 32>>>(d);
    CHECK(cudaDeviceSynchronize());
    std::printf("kernel launch (throughput, one sync at the end): %.2f us/launch\n", (now() - t) / calls * 1e6);

    cudaEvent_t ev;
    CHECK(cudaEventCreate(&ev));
    t = now();
    for (int i = 0; i < calls; i++)
        CHECK(cudaEventRecord(ev, 0));
    CHECK(cudaDeviceSynchronize());
    std::printf("cudaEventRecord (queued): %.2f us/call\n", (now() - t) / calls * 1e6);
    CHECK(cudaEventDestroy(ev));

    const size_t big = 256u << 20;
    std::vector<char> host(big, 1);
    char *dbig;
    CHECK(cudaMalloc(&dbig, big));
    double h2d = 1e9, d2h = 1e9;  // the best of three of each
    for (int i = 0; i < 3; i++) {
        t = now();
        CHECK(cudaMemcpy(dbig, host.data(), big, cudaMemcpyHostToDevice));
        h2d = std::min(h2d, now() - t);
        t = now();
        CHECK(cudaMemcpy(host.data(), dbig, big, cudaMemcpyDeviceToHost));
        d2h = std::min(d2h, now() - t);
    }
    std::printf("cudaMemcpy H2D 256 MiB (pageable, best of 3): %.2f GB/s\n", big / h2d / 1e9);
    std::printf("cudaMemcpy D2H 256 MiB (pageable, best of 3): %.2f GB/s\n", big / d2h / 1e9);

    char *pinned;
    CHECK(cudaMallocHost(&pinned, big));
    std::fill(pinned, pinned + big, 2);
    h2d = d2h = 1e9;
    for (int i = 0; i < 3; i++) {
        t = now();
        CHECK(cudaMemcpy(dbig, pinned, big, cudaMemcpyHostToDevice));
        h2d = std::min(h2d, now() - t);
        t = now();
        CHECK(cudaMemcpy(pinned, dbig, big, cudaMemcpyDeviceToHost));
        d2h = std::min(d2h, now() - t);
    }
    std::printf("cudaMemcpy H2D 256 MiB (pinned, best of 3): %.2f GB/s\n", big / h2d / 1e9);
    std::printf("cudaMemcpy D2H 256 MiB (pinned, best of 3): %.2f GB/s\n", big / d2h / 1e9);
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(dbig));

    CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
    // the small copies above overwrote the warm-up launch's count with 0
    std::printf("kernel ran %d times (expected %d)\n", h, calls);
    CHECK(cudaFree(d));
    return h == calls ? 0 : 1;
}
