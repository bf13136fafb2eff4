/* Loads the CUDA runtime at run time with dlopen (no link-time dependency, no preload needed) and
 * does malloc / copy / memset / copy back / free through it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*memset_fn)(void *, int, size_t);
typedef int (*count_fn)(int *);
typedef const char *(*name_fn)(int);

#define H2D 1
#define D2H 2
#define D2D 3

int main(void)
{
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!rt) {
        printf("dlopen failed: %s\n", dlerror());
        return 1;
    }
    count_fn getDeviceCount = (count_fn)dlsym(rt, "cudaGetDeviceCount");
    malloc_fn cudaMalloc = (malloc_fn)dlsym(rt, "cudaMalloc");
    free_fn cudaFree = (free_fn)dlsym(rt, "cudaFree");
    memcpy_fn cudaMemcpy = (memcpy_fn)dlsym(rt, "cudaMemcpy");
    memset_fn cudaMemset = (memset_fn)dlsym(rt, "cudaMemset");
    name_fn cudaGetErrorName = (name_fn)dlsym(rt, "cudaGetErrorName");
    if (!getDeviceCount || !cudaMalloc || !cudaFree || !cudaMemcpy || !cudaMemset || !cudaGetErrorName) {
        printf("dlsym failed\n");
        return 1;
    }
    int n = 0, err = getDeviceCount(&n);
    printf("cudaGetDeviceCount -> %s, at least one device: %s\n", cudaGetErrorName(err), n > 0 ? "yes" : "no");
    enum { N = 1 << 16 };
    unsigned char *host = malloc(N), *back = malloc(N);
    for (int i = 0; i < N; i++)
        host[i] = (unsigned char)(i * 7 + 3);
    void *a = NULL, *b = NULL;
    int bad = 0;
    bad |= cudaMalloc(&a, N) | cudaMalloc(&b, N);
    bad |= cudaMemcpy(a, host, N, H2D);
    bad |= cudaMemcpy(b, a, N, D2D);
    bad |= cudaMemcpy(back, b, N, D2H);
    int same = memcmp(host, back, N) == 0;
    bad |= cudaMemset(b, 0x5a, N / 2);
    bad |= cudaMemcpy(back, b, N, D2H);
    int set = back[0] == 0x5a && back[N / 2 - 1] == 0x5a && back[N / 2] == host[N / 2];
    bad |= cudaFree(a) | cudaFree(b);
    printf("round trip through H2D, D2D, D2H: %s\n", same ? "OK" : "FAIL");
    printf("memset of the first half: %s\n", set ? "OK" : "FAIL");
    printf("errors: %d\n", bad);
    printf("dlopen_app: %s\n", !bad && same && set ? "PASS" : "FAIL");
    free(host);
    free(back);
    return !bad && same && set ? 0 : 1;
}
