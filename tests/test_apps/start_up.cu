// start_up: what a framework's start-up asks for, as PyTorch does: 32 non-blocking streams of each of two
// priorities, events by eights, and every attribute of a kernel before its first launch. Through cuwire
// the client makes streams and events ahead in batches and asks a kernel's attributes at once
// (tests/test_round_trips.py counts the round trips); each stream and event must still be the program's
// own: distinct, with the flags and priority asked for, usable, and made again after cudaDeviceReset
// destroyed the others. Every count printed is checked against what the program asked. With "--creates",
// only the start-up's calls: the streams, the events and the attributes, then one synchronization, then
// every stream and event destroyed.
#include <cstdio>
#include <set>
#include <cuda_runtime.h>

#include "check.h"
#include "stream_kernels.h"

static int streams_as_asked(int priority, cudaStream_t *made, int n) {
    int right = 0;
    for (int i = 0; i < n; i++) {
        CHECK(cudaStreamCreateWithPriority(&made[i], cudaStreamNonBlocking, priority));
        unsigned flags = 0;
        int p = 0;
        CHECK(cudaStreamGetFlags(made[i], &flags));
        CHECK(cudaStreamGetPriority(made[i], &p));
        right += flags == cudaStreamNonBlocking && p == priority;
    }
    return right;
}

// Limits as libraries ask them, before launches and again and again: the same answer each time, a set one
// read back as set, and after cudaDeviceReset the defaults again. Returns the malloc heap's size as first read.
static size_t limits(const char *when, size_t heap_before) {
    size_t fifo = 0, heap = 0, first_fifo = 0, first_heap = 0, stack = 0;
    int same = 1;
    for (int i = 0; i < 10; i++) {
        CHECK(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize));
        CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
        CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
        if (i == 0)
            first_fifo = fifo, first_heap = heap;
        same &= fifo == first_fifo && heap == first_heap && stack > 0;
    }
    CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 2 * first_heap));
    CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
    printf("%s: limits the same when asked 10 times: %s; the heap set to twice reads twice: %s%s\n", when,
           same ? "yes" : "no", heap == 2 * first_heap ? "yes" : "no",
           heap_before ? (first_heap == heap_before ? "; back to its default: yes" : "; back to its default: no")
                       : "");
    return first_heap;
}

static int one_round(const char *when) {
    int lowest = 0, highest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    cudaStream_t low[32], high[32];
    int right = streams_as_asked(lowest, low, 32) + streams_as_asked(highest, high, 32);
    std::set<cudaStream_t> distinct(low, low + 32);
    distinct.insert(high, high + 32);

    cudaEvent_t events[40];
    std::set<cudaEvent_t> distinct_events;
    for (int i = 0; i < 40; i++) {
        CHECK(cudaEventCreateWithFlags(&events[i], i < 32 ? cudaEventDisableTiming : cudaEventDefault));
        distinct_events.insert(events[i]);
    }

    // every stream runs a kernel and records an event; the host waits on each event
    const int n = 1024;
    int *x;
    CHECK(cudaMalloc((void **)&x, 64 * n * sizeof(int)));
    for (int s = 0; s < 64; s++) {
        cudaStream_t stream = s < 32 ? low[s] : high[s - 32];
        streamFill<<<(n + 255) / 256, 256, 0, stream>>>(x + s * n, s * 100, n);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(events[s % 40], stream));
        CHECK(cudaEventSynchronize(events[s % 40]));
    }
    int sums_right = 0;
    for (int s = 0; s < 64; s++) {
        int got[16];
        CHECK(cudaMemcpy(got, x + s * n + 16, sizeof got, cudaMemcpyDeviceToHost));
        int right_here = 1;
        for (int i = 0; i < 16; i++)
            right_here &= got[i] == s * 100 + i;
        sums_right += right_here;
    }
    float ms = -1;
    CHECK(cudaEventRecord(events[32], low[0]));
    CHECK(cudaEventRecord(events[33], low[0]));
    CHECK(cudaEventSynchronize(events[33]));
    CHECK(cudaEventElapsedTime(&ms, events[32], events[33]));  // a timing event, as asked
    int timing_refused = cudaEventElapsedTime(&ms, events[0], events[1]) == cudaErrorInvalidResourceHandle;
    cudaGetLastError();

    printf("%s: streams as asked %d of 64, distinct %zu; events distinct %zu of 40, timing ones time: %s, "
           "the others refuse: %s; kernels right on %d of 64 streams\n", when, right, distinct.size(),
           distinct_events.size(), ms >= 0 ? "yes" : "no", timing_refused ? "yes" : "no", sums_right);
    for (int i = 0; i < 32; i++) {
        CHECK(cudaStreamDestroy(low[i]));
        CHECK(cudaStreamDestroy(high[i]));
    }
    for (int i = 0; i < 40; i++)
        CHECK(cudaEventDestroy(events[i]));
    CHECK(cudaFree(x));
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1) {  // --creates
        int lowest = 0, highest = 0;
        CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
        cudaStream_t streams[64];
        cudaEvent_t events[40];
        for (int i = 0; i < 64; i++)
            CHECK(cudaStreamCreateWithPriority(&streams[i], cudaStreamNonBlocking, i < 32 ? lowest : highest));
        for (int i = 0; i < 40; i++)
            CHECK(cudaEventCreateWithFlags(&events[i], i < 32 ? cudaEventDisableTiming : cudaEventDefault));
        cudaFuncAttributes attributes;
        CHECK(cudaFuncGetAttributes(&attributes, streamFill));
        CHECK(cudaFuncGetAttributes(&attributes, streamScaleAdd));
        size_t fifo = 0;
        for (int i = 0; i < 10; i++)  // a library's question before each launch: one round trip in all
            CHECK(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize));
        for (int i = 0; i < 40; i++)
            CHECK(cudaEventRecord(events[i], streams[i]));
        CHECK(cudaDeviceSynchronize());
        for (int i = 0; i < 64; i++)  // destroys of what the program made: queued through cuwire
            CHECK(cudaStreamDestroy(streams[i]));
        for (int i = 0; i < 40; i++)
            CHECK(cudaEventDestroy(events[i]));
        CHECK(cudaDeviceSynchronize());
        printf("64 streams, 40 events, the attributes of 2 kernels; all destroyed\n");
        return 0;
    }
    cudaFuncAttributes first, again;
    CHECK(cudaFuncGetAttributes(&first, streamFill));
    CHECK(cudaFuncSetAttribute(streamFill, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024));
    CHECK(cudaFuncGetAttributes(&again, streamFill));
    printf("kernel attributes: max threads per block %d, dynamic shared memory at most %d then %d\n",
           first.maxThreadsPerBlock, first.maxDynamicSharedSizeBytes, again.maxDynamicSharedSizeBytes);
    // a set past the default 48 KiB, as cuBLAS and attention kernels make before their first launch (through
    // cuwire: queued, checked by the client as the driver checks it), then a launch that needs it
    int optin = 0, *y;
    CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    int too_much = cudaFuncSetAttribute(streamFill, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        optin - again.sharedSizeBytes + 1) == cudaErrorInvalidValue;
    cudaGetLastError();
    CHECK(cudaFuncSetAttribute(streamFill, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
    CHECK(cudaMalloc((void **)&y, 256 * sizeof(int)));
    streamFill<<<1, 256, 64 << 10>>>(y, 7, 256);
    CHECK(cudaGetLastError());
    int got[256], right = 0;
    CHECK(cudaMemcpy(got, y, sizeof got, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 256; i++)
        right += got[i] == 7 + (i & 15);
    CHECK(cudaFuncGetAttributes(&again, streamFill));
    CHECK(cudaFree(y));
    printf("a set past the device's room refused: %s; set to 64 KiB: reads %d, a launch using it right on %d of "
           "256\n", too_much ? "yes" : "no", again.maxDynamicSharedSizeBytes, right);
    size_t heap = limits("limits", 0);
    one_round("first");
    CHECK(cudaDeviceReset());  // destroys every stream and event: those made ahead too, and resets the limits
    limits("limits after cudaDeviceReset", heap);
    one_round("after cudaDeviceReset");
    return 0;
}
