// ipc: memory and an event one process shares with another (cudaIpcGetMemHandle, cudaIpcOpenMemHandle,
// cudaIpcGetEventHandle, cudaIpcOpenEventHandle), as CUDA's simpleIPC and PyTorch's tensors sent between
// processes do. The program forks before either process touches CUDA; the parent fills device memory,
// records an interprocess event after its last memset, and sends both handles down a pipe; the child opens
// them, waits for the event, checks the bytes, writes some of its own and closes the memory; the parent then
// sees the child's bytes. A handle of zeros is refused. Output: the child's lines, then the parent's.
#include <cstdio>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static const size_t SIZE = 1 << 20;

struct Handles {
    cudaIpcMemHandle_t memory;
    cudaIpcEventHandle_t event;
};

static bool read_all(int fd, void *buf, size_t n) {
    char *p = (char *)buf;
    while (n) {
        ssize_t got = read(fd, p, n);
        if (got <= 0) return false;
        p += got, n -= (size_t)got;
    }
    return true;
}

static int child(int from_parent, int to_parent) {
    Handles h;
    if (!read_all(from_parent, &h, sizeof h)) return 2;
    cudaIpcMemHandle_t zeros;
    memset(&zeros, 0, sizeof zeros);
    void *forged = NULL;
    printf("child: a handle of zeros refused: %s\n",
           cudaIpcOpenMemHandle(&forged, zeros, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess ? "yes" : "no");
    cudaGetLastError();
    unsigned char *d = NULL;
    CHECK(cudaIpcOpenMemHandle((void **)&d, h.memory, cudaIpcMemLazyEnablePeerAccess));
    cudaEvent_t done;
    CHECK(cudaIpcOpenEventHandle(&done, h.event));
    CHECK(cudaStreamWaitEvent(0, done, 0));
    static unsigned char host[SIZE];
    CHECK(cudaMemcpy(host, d, SIZE, cudaMemcpyDeviceToHost));
    bool first = true, second = true;
    for (size_t i = 0; i < SIZE / 2; i++) first = first && host[i] == 0x5a;
    for (size_t i = SIZE / 2; i < SIZE; i++) second = second && host[i] == 0x33;
    printf("child: the parent's bytes: %s, %s\n", first ? "0x5a" : "wrong", second ? "0x33" : "wrong");
    cudaPointerAttributes attributes;
    CHECK(cudaPointerGetAttributes(&attributes, d + 4096));
    printf("child: opened memory is device memory: %s\n", attributes.type == cudaMemoryTypeDevice ? "yes" : "no");
    CHECK(cudaMemset(d, 0x77, 4096));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaIpcCloseMemHandle(d));
    CHECK(cudaEventDestroy(done));
    printf("child: wrote 4096 bytes of 0x77 and closed the memory\n");
    fflush(stdout);
    char ok = 1;
    return write(to_parent, &ok, 1) == 1 ? 0 : 3;
}

int main() {
    int down[2], up[2];
    if (pipe(down) || pipe(up)) return 2;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(down[1]), close(up[0]);  // (the parent's ends: a child that fails ends the parent's wait)
        _exit(child(down[0], up[1]));
    }
    close(down[0]), close(up[1]);

    unsigned char *d;
    CHECK(cudaMalloc((void **)&d, SIZE));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t done;
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming | cudaEventInterprocess));
    CHECK(cudaMemsetAsync(d, 0x5a, SIZE / 2, s));
    CHECK(cudaMemsetAsync(d + SIZE / 2, 0x33, SIZE / 2, s));
    CHECK(cudaEventRecord(done, s));
    Handles h, again;
    CHECK(cudaIpcGetMemHandle(&h.memory, d));
    CHECK(cudaIpcGetEventHandle(&h.event, done));
    CHECK(cudaIpcGetMemHandle(&again.memory, d));
    bool same = memcmp(&h.memory, &again.memory, sizeof h.memory) == 0;
    if (write(down[1], &h, sizeof h) != (ssize_t)sizeof h) return 2;
    char ok = 0;
    bool heard = read_all(up[0], &ok, 1);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("parent: the child ended with status %d, said it was done: %s\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
           heard && ok ? "yes" : "no");
    printf("parent: the same memory's handle twice is the same: %s\n", same ? "yes" : "no");
    static unsigned char host[SIZE];
    CHECK(cudaMemcpy(host, d, SIZE, cudaMemcpyDeviceToHost));
    bool written = true, kept = true;
    for (size_t i = 0; i < 4096; i++) written = written && host[i] == 0x77;
    for (size_t i = 4096; i < SIZE / 2; i++) kept = kept && host[i] == 0x5a;
    printf("parent: the child's bytes: %s; its own beyond them: %s\n", written ? "0x77" : "wrong", kept ? "0x5a" : "wrong");
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    bool pass = status == 0 && heard && written && kept;
    printf("ipc: %s\n", pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
}
