// user_objects: cudaUserObjectCreate and the references graphs hold (cudaGraphRetainUserObject, moved or
// not): a graph's references go with it, an executable graph made from it holds them too, a clone holds
// what its original held, and an object's destructor runs once the last reference went (on a thread of
// CUDA's, so the program waits for it).
#include <stdio.h>
#include <unistd.h>

#include "check.h"
#include "stream_kernels.h"  // streamFill, streamScaleAdd, streamAddInto

static volatile int destroyed[3];

static void CUDART_CB destroy(void *p) { __atomic_add_fetch((int *)p, 1, __ATOMIC_SEQ_CST); }

// how many times the destructor of object i has run, waiting up to `ms` milliseconds for a first time
static int ran(int i, int ms) {
    for (int waited = 0; waited < ms && !__atomic_load_n(&destroyed[i], __ATOMIC_SEQ_CST); waited += 10) usleep(10000);
    return __atomic_load_n(&destroyed[i], __ATOMIC_SEQ_CST);
}
static int gone(int i) { return ran(i, 2000); }        // expected: waits for it
static int kept_alive(int i) { return !ran(i, 100); }  // expected not to run: a short look

int main() {
    int failures = 0, *d;
    CHECK(cudaMalloc(&d, sizeof(int)));
    CHECK(cudaMemset(d, 0, sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    // 1. the program's reference moved to a graph; an executable graph made from it; the graph destroyed
    cudaUserObject_t first;
    CHECK(cudaUserObjectCreate(&first, (void *)&destroyed[0], destroy, 1, cudaUserObjectNoDestructorSync));
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    streamFill<<<1, 1, 0, s>>>(d, 5, 1);
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphRetainUserObject(g, first, 1, cudaGraphUserObjectMove));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    int kept = kept_alive(0);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaDeviceSynchronize());
    printf("moved to a graph: kept by its executable graph %s, destroyed with it %s\n", kept ? "yes" : "no",
           gone(0) == 1 ? "yes" : "no");
    failures += !kept || gone(0) != 1;

    // 2. the program's own references: made with 2, retained once, released three times
    cudaUserObject_t second;
    CHECK(cudaUserObjectCreate(&second, (void *)&destroyed[1], destroy, 2, cudaUserObjectNoDestructorSync));
    CHECK(cudaUserObjectRetain(second, 1));
    CHECK(cudaUserObjectRelease(second, 2));
    int alive = kept_alive(1);
    CHECK(cudaUserObjectRelease(second, 1));
    printf("the program's references: alive with one left %s, destroyed at none %s\n", alive ? "yes" : "no",
           gone(1) == 1 ? "yes" : "no");
    failures += !alive || gone(1) != 1;

    // 3. a graph's reference (not moved), the graph cloned, the original destroyed, the program's released;
    //    the clone's reference released by hand, then the clone destroyed
    cudaUserObject_t third;
    CHECK(cudaUserObjectCreate(&third, (void *)&destroyed[2], destroy, 1, cudaUserObjectNoDestructorSync));
    cudaGraph_t original, clone;
    CHECK(cudaGraphCreate(&original, 0));
    CHECK(cudaGraphRetainUserObject(original, third, 2, 0));
    CHECK(cudaGraphClone(&clone, original));
    CHECK(cudaGraphDestroy(original));
    CHECK(cudaUserObjectRelease(third, 1));
    int held = kept_alive(2);
    CHECK(cudaGraphReleaseUserObject(clone, third, 1));
    int still = kept_alive(2);
    CHECK(cudaGraphDestroy(clone));
    printf("held by a clone: after the original and the program let go %s, after one of its two %s, "
           "destroyed with it %s\n", held ? "yes" : "no", still ? "yes" : "no", gone(2) == 1 ? "yes" : "no");
    failures += !held || !still || gone(2) != 1;

    int h = 0;
    CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
    printf("the graph's kernel wrote %d\n", h);
    failures += h != 5;
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    printf("user_objects: %s\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
