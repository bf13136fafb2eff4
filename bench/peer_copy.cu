// peer_copy: copies between two GPUs, timed, for bench/peer_copy.sh. Natively the driver copies over NVLink or
// PCIe; through cuwire with one server for both GPUs the server's driver does the same; with two servers of a
// device list (`--server a,b`) the bytes go server to server over TCP (server/peer_copy.py). Each line:
// "<how> <MiB> MiB: <GB/s> GB/s (best of <n>)"; every copy's bytes are read back and checked.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../tests/test_apps/check.h"  // CHECK: a failed call says so and exits 1

static double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
    int devices = 0;
    CHECK(cudaGetDeviceCount(&devices));
    if (devices < 2) {
        printf("peer_copy: %d device(s); it needs two\n", devices);
        return 1;
    }
    const size_t most = 256u << 20;
    std::vector<unsigned> host(most / 4), back(most / 4);
    for (size_t i = 0; i < host.size(); i++)
        host[i] = (unsigned)(i * 2654435761u);
    void *src, *dst;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&src, most));
    CHECK(cudaMemcpy(src, host.data(), most, cudaMemcpyHostToDevice));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&dst, most));
    CHECK(cudaMemset(dst, 0, most));
    CHECK(cudaDeviceSynchronize());
    for (size_t mib : {1, 64, 256}) {
        const size_t n = mib << 20;
        for (int how = 0; how < 2; how++) {  // cudaMemcpyPeer; cudaMemcpy of unified addresses
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                double t0 = now();
                if (how == 0)
                    CHECK(cudaMemcpyPeer(dst, 1, src, 0, n));
                else
                    CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
                CHECK(cudaDeviceSynchronize());
                best = std::min(best, now() - t0);
            }
            CHECK(cudaMemcpy(back.data(), dst, n, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n / 4; i++)
                if (back[i] != host[i]) {
                    printf("peer_copy: %zu MiB: word %zu differs\n", mib, i);
                    return 1;
                }
            CHECK(cudaMemset(dst, 0, most));
            printf("%s %zu MiB: %.2f GB/s (best of %d)\n", how == 0 ? "cudaMemcpyPeer" : "cudaMemcpy", mib,
                   n / best / 1e9, reps);
        }
    }
    return 0;
}
