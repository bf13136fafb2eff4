// managed_hints: what cudaMemAdvise and cudaMemPrefetchAsync said of managed memory, read back with
// cudaMemRangeGetAttribute(s): read-mostly, the preferred location (over the half it was set on, and over the
// whole, where the halves disagree), the devices that access it, where it was last prefetched to (one range
// at a time and in a batch); a batch discard.
#include "check.h"

static int attribute(cudaMemRangeAttribute what, const void *p, size_t n)
{
    int value = -99;
    CHECK(cudaMemRangeGetAttribute(&value, sizeof value, what, p, n));
    return value;
}

int main()
{
    const size_t half = 2 << 20, n = 2 * half;
    char *m;
    CHECK(cudaMallocManaged(&m, n));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaMemLocation device = {cudaMemLocationTypeDevice, 0}, host = {cudaMemLocationTypeHost, 0};

    printf("before any advice: read mostly %d, preferred %d, last prefetched to %d\n",
           attribute(cudaMemRangeAttributeReadMostly, m, n), attribute(cudaMemRangeAttributePreferredLocation, m, n),
           attribute(cudaMemRangeAttributeLastPrefetchLocation, m, n));

    CHECK(cudaMemAdvise(m, n, cudaMemAdviseSetReadMostly, device));
    CHECK(cudaMemAdvise(m, half, cudaMemAdviseSetPreferredLocation, device));
    CHECK(cudaMemAdvise(m + half, half, cudaMemAdviseSetPreferredLocation, host));
    CHECK(cudaMemAdvise(m, n, cudaMemAdviseSetAccessedBy, device));
    printf("read mostly %d; preferred: first half %d (type %d, id %d), second half %d, the whole %d\n",
           attribute(cudaMemRangeAttributeReadMostly, m, n), attribute(cudaMemRangeAttributePreferredLocation, m, half),
           attribute(cudaMemRangeAttributePreferredLocationType, m, half),
           attribute(cudaMemRangeAttributePreferredLocationId, m, half),
           attribute(cudaMemRangeAttributePreferredLocation, m + half, half),
           attribute(cudaMemRangeAttributePreferredLocation, m, n));
    int accessed[3] = {-99, -99, -99};
    CHECK(cudaMemRangeGetAttribute(accessed, sizeof accessed, cudaMemRangeAttributeAccessedBy, m, n));
    printf("accessed by: %d %d %d\n", accessed[0], accessed[1], accessed[2]);

    CHECK(cudaMemPrefetchAsync(m, n, device, 0, s));
    CHECK(cudaStreamSynchronize(s));
    printf("prefetched to the device: last prefetched to %d\n",
           attribute(cudaMemRangeAttributeLastPrefetchLocation, m, n));
    CHECK(cudaMemPrefetchAsync(m, half, host, 0, s));
    CHECK(cudaStreamSynchronize(s));
    printf("first half prefetched to the host: first half %d, the whole %d\n",
           attribute(cudaMemRangeAttributeLastPrefetchLocation, m, half),
           attribute(cudaMemRangeAttributeLastPrefetchLocation, m, n));

    void *ranges[] = {m, m + half};
    size_t sizes2[] = {half, half};
    cudaMemLocation where[] = {device, host};
    size_t from[] = {0, 1};
    CHECK(cudaMemPrefetchBatchAsync(ranges, sizes2, 2, where, from, 2, 0, s));
    CHECK(cudaStreamSynchronize(s));
    printf("a batch prefetch, first half to the device, second to the host: %d, %d\n",
           attribute(cudaMemRangeAttributeLastPrefetchLocation, m, half),
           attribute(cudaMemRangeAttributeLastPrefetchLocation, m + half, half));
    cudaError_t discarded = cudaMemDiscardBatchAsync(ranges, sizes2, 2, 0, s);
    CHECK(cudaStreamSynchronize(s));
    cudaError_t bad_batch = cudaMemPrefetchBatchAsync(ranges, sizes2, 2, where, from, 2, 1, s);
    cudaGetLastError();
    printf("a batch discard: %s; a batch with flags 1: %s\n", cudaGetErrorName(discarded), cudaGetErrorName(bad_batch));

    CHECK(cudaMemAdvise(m, n, cudaMemAdviseUnsetReadMostly, device));
    CHECK(cudaMemAdvise(m, half, cudaMemAdviseUnsetAccessedBy, device));
    int read_mostly = -99, preferred = -99;
    void *data[] = {&read_mostly, &preferred, accessed};
    size_t sizes[] = {sizeof read_mostly, sizeof preferred, sizeof accessed};
    cudaMemRangeAttribute what[] = {cudaMemRangeAttributeReadMostly, cudaMemRangeAttributePreferredLocation,
                                    cudaMemRangeAttributeAccessedBy};
    CHECK(cudaMemRangeGetAttributes(data, sizes, what, 3, m, n));
    printf("after unsetting: read mostly %d, preferred %d, accessed by %d %d\n", read_mostly, preferred, accessed[0],
           accessed[1]);

    int value;
    cudaError_t wrong_size = cudaMemRangeGetAttribute(&value, 2, cudaMemRangeAttributeReadMostly, m, n);
    cudaGetLastError();
    int *device_memory;
    CHECK(cudaMalloc(&device_memory, 4096));
    cudaError_t not_managed = cudaMemRangeGetAttribute(&value, sizeof value, cudaMemRangeAttributeReadMostly,
                                                       device_memory, 4096);
    cudaGetLastError();
    printf("a 2-byte answer: %s; device memory: %s\n", cudaGetErrorName(wrong_size), cudaGetErrorName(not_managed));

    CHECK(cudaFree(device_memory));
    CHECK(cudaFree(m));
    CHECK(cudaMallocManaged(&m, n));
    printf("memory allocated again: read mostly %d, preferred %d\n", attribute(cudaMemRangeAttributeReadMostly, m, n),
           attribute(cudaMemRangeAttributePreferredLocation, m, half));
    CHECK(cudaFree(m));
    printf("managed_hints: done\n");
    return 0;
}
