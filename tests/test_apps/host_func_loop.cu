// host_func_loop [N]: N host functions in one stream (cudaLaunchHostFunc), each after a memset, with a
// synchronization every ten: each must run once, in stream order. Over TCP the server posts them on the
// session's host-function connection (client/callbacks.c); tests/test_resume.py cuts that connection while
// they run, and none may be lost or run twice.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

struct counter {
    int next;  // the number of the host function that must run next
    int wrong; // host functions that ran out of order (or twice)
};

struct call {
    counter *c;
    int number;
};

static void CUDART_CB count(void *arg) {
    call *k = (call *)arg;
    k->c->wrong += k->number != k->c->next;
    k->c->next++;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 200;
    void *d;
    cudaStream_t s;
    CHECK(cudaMalloc(&d, 4096));
    CHECK(cudaStreamCreate(&s));
    counter c = {0, 0};
    call *calls = (call *)malloc(n * sizeof(call));
    for (int i = 0; i < n; i++) {
        calls[i] = {&c, i};
        CHECK(cudaMemsetAsync(d, i & 0xff, 4096, s));
        CHECK(cudaLaunchHostFunc(s, count, &calls[i]));
        if (i % 10 == 9)
            CHECK(cudaStreamSynchronize(s));
    }
    CHECK(cudaStreamSynchronize(s));
    printf("host_func_loop: %d of %d host functions ran, %d out of order\n", c.next, n, c.wrong);
    free(calls);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    return c.next == n && c.wrong == 0 ? 0 : 1;
}
