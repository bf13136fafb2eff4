// link_app: large copies of data that compresses and of data that does not, timed, for bench/slow_link.sh
// (a link slowed in network namespaces, where CUWIRE_COMPRESS matters). No kernels: the emulated device
// serves it as well as a GPU. Each line is "name: value unit"; the round trip of every byte is checked.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../tests/test_apps/check.h"  // CHECK: a failed call says so and exits 1

static double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv)
{
    const size_t n = (argc > 1 ? std::atoi(argv[1]) : 64) << 20;
    std::vector<float> sparse(n / 4), noise(n / 4), back(n / 4);
    unsigned x = 12345;
    for (size_t i = 0; i < n / 4; i++) {
        x = x * 1664525u + 1013904223u;
        noise[i] = (float)x / 4294967296.0f;               // random mantissas: does not compress
        sparse[i] = (x >> 28) == 0 ? (float)(x >> 20) : 0;  // mostly zeros, like activations after ReLU
    }
    float *d;
    CHECK(cudaMalloc(&d, n));
    // one copy each way first, not timed: it touches the (emulated) device's memory for the first time, and
    // CUWIRE_COMPRESS=auto times the link with it
    CHECK(cudaMemcpy(d, noise.data(), n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
    int failures = 0;
    for (auto *data : {&sparse, &noise}) {
        const char *name = data == &sparse ? "sparse" : "random";
        double t = now();
        CHECK(cudaMemcpy(d, data->data(), n, cudaMemcpyHostToDevice));
        double h2d = now() - t;
        t = now();
        CHECK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
        double d2h = now() - t;
        failures += std::memcmp(back.data(), data->data(), n) != 0;
        std::printf("H2D %zu MiB %s: %.1f MB/s\n", n >> 20, name, n / h2d / 1e6);
        std::printf("D2H %zu MiB %s: %.1f MB/s\n", n >> 20, name, n / d2h / 1e6);
    }
    CHECK(cudaFree(d));
    std::printf("link_app: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
