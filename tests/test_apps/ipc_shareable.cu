// ipc_shareable: memory shared between a program's processes through file descriptors, as CUDA's memMapIPCDrv
// and streamOrderedAllocationIPC do: a physical allocation (cuMemCreate, cuMemExportToShareableHandle) and a
// memory pool with an allocation from it (cudaMemPoolExportToShareableHandle, cudaMemPoolExportPointer). The
// program forks before either process touches CUDA; the parent fills both, sends the descriptors over a Unix
// socket (SCM_RIGHTS) with the pointer's export data; the child imports them, maps the allocation, checks the
// bytes, writes its own, and gives all back; the parent then sees the child's bytes. A descriptor that is no
// shareable handle is refused. Output: the child's lines, then the parent's.
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static const size_t POOL_BYTES = 1 << 20;

struct Message {
    cudaMemPoolPtrExportData pointer;
    size_t size;  // the physical allocation's (a multiple of the granularity)
};

static bool send_fds(int sock, const Message &m, int a, int b) {
    char control[CMSG_SPACE(2 * sizeof(int))] = {};
    iovec io = {(void *)&m, sizeof m};
    msghdr msg = {};
    msg.msg_iov = &io, msg.msg_iovlen = 1, msg.msg_control = control, msg.msg_controllen = sizeof control;
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    int fds[2] = {a, b};
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    return sendmsg(sock, &msg, 0) == (ssize_t)sizeof m;
}

static bool receive_fds(int sock, Message &m, int &a, int &b) {
    char control[CMSG_SPACE(2 * sizeof(int))] = {};
    iovec io = {&m, sizeof m};
    msghdr msg = {};
    msg.msg_iov = &io, msg.msg_iovlen = 1, msg.msg_control = control, msg.msg_controllen = sizeof control;
    if (recvmsg(sock, &msg, MSG_WAITALL) != (ssize_t)sizeof m) return false;
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(2 * sizeof(int))) return false;
    int fds[2];
    memcpy(fds, CMSG_DATA(c), sizeof fds);
    a = fds[0], b = fds[1];
    return true;
}

static CUdeviceptr map_for_this_device(CUmemGenericAllocationHandle h, size_t size) {
    CUdeviceptr va;
    CHECK_DRIVER(cuMemAddressReserve(&va, size, 0, 0, 0));
    CHECK_DRIVER(cuMemMap(va, size, 0, h, 0));
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE, access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK_DRIVER(cuMemSetAccess(va, size, &access, 1));
    return va;
}

static bool all(const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return false;
    return true;
}

static int child(int sock) {
    Message m;
    int allocation_fd, pool_fd;
    if (!receive_fds(sock, m, allocation_fd, pool_fd)) return 2;
    CHECK(cudaFree(0));
    int not_a_handle = open("/dev/null", O_RDONLY);
    CUmemGenericAllocationHandle h;
    printf("child: a descriptor that is no shareable handle refused: %s\n",
           cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)not_a_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
               != CUDA_SUCCESS ? "yes" : "no");
    close(not_a_handle);

    CHECK_DRIVER(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)allocation_fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(allocation_fd);
    CUdeviceptr va = map_for_this_device(h, m.size);
    static unsigned char host[4 << 20];
    CHECK_DRIVER(cuMemcpyDtoH(host, va, m.size));
    printf("child: the parent's physical allocation: %s\n", all(host, m.size, 0x42) ? "0x42" : "wrong");
    CHECK_DRIVER(cuMemsetD8(va, 0x43, 4096));
    CHECK_DRIVER(cuCtxSynchronize());
    CHECK_DRIVER(cuMemUnmap(va, m.size));
    CHECK_DRIVER(cuMemRelease(h));
    CHECK_DRIVER(cuMemAddressFree(va, m.size));

    cudaMemPool_t pool;
    CHECK(cudaMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)pool_fd, cudaMemHandleTypePosixFileDescriptor, 0));
    close(pool_fd);
    unsigned char *p;
    CHECK(cudaMemPoolImportPointer((void **)&p, pool, &m.pointer));
    CHECK(cudaMemcpy(host, p, POOL_BYTES, cudaMemcpyDeviceToHost));
    printf("child: the parent's allocation from its pool: %s\n", all(host, POOL_BYTES, 0x24) ? "0x24" : "wrong");
    CHECK(cudaMemset(p, 0x25, 4096));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(p));
    CHECK(cudaMemPoolDestroy(pool));
    printf("child: wrote 4096 bytes into each and gave them back\n");
    fflush(stdout);
    char ok = 1;
    return write(sock, &ok, 1) == 1 ? 0 : 3;
}

int main() {
    int socks[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, socks)) return 2;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(socks[0]);
        _exit(child(socks[1]));
    }
    close(socks[1]);

    CHECK(cudaFree(0));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE, prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t granularity;
    CHECK_DRIVER(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    Message m = {};
    m.size = granularity;
    CUmemGenericAllocationHandle h;
    CHECK_DRIVER(cuMemCreate(&h, m.size, &prop, 0));
    int allocation_fd = -1;
    CHECK_DRIVER(cuMemExportToShareableHandle(&allocation_fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUdeviceptr va = map_for_this_device(h, m.size);
    CHECK_DRIVER(cuMemsetD8(va, 0x42, m.size));

    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice, props.location.id = 0;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    int pool_fd = -1;
    CHECK(cudaMemPoolExportToShareableHandle(&pool_fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned char *p;
    CHECK(cudaMallocFromPoolAsync((void **)&p, POOL_BYTES, pool, s));
    CHECK(cudaMemsetAsync(p, 0x24, POOL_BYTES, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolExportPointer(&m.pointer, p));
    CHECK_DRIVER(cuCtxSynchronize());

    if (!send_fds(socks[0], m, allocation_fd, pool_fd)) return 2;
    close(allocation_fd), close(pool_fd);
    char ok = 0;
    bool heard = read(socks[0], &ok, 1) == 1;
    int status = 0;
    waitpid(pid, &status, 0);
    printf("parent: the child ended with status %d, said it was done: %s\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
           heard && ok ? "yes" : "no");
    static unsigned char host[4 << 20];
    CHECK_DRIVER(cuMemcpyDtoH(host, va, m.size));
    bool physical = all(host, 4096, 0x43) && all(host + 4096, m.size - 4096, 0x42);
    CHECK(cudaMemcpy(host, p, POOL_BYTES, cudaMemcpyDeviceToHost));
    bool pooled = all(host, 4096, 0x25) && all(host + 4096, POOL_BYTES - 4096, 0x24);
    printf("parent: the child's bytes in the physical allocation: %s; in the pool's: %s\n",
           physical ? "yes" : "no", pooled ? "yes" : "no");
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolDestroy(pool));
    CHECK(cudaStreamDestroy(s));
    CHECK_DRIVER(cuMemUnmap(va, m.size));
    CHECK_DRIVER(cuMemRelease(h));
    CHECK_DRIVER(cuMemAddressFree(va, m.size));
    bool pass = status == 0 && heard && physical && pooled;
    printf("ipc_shareable: %s\n", pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
}
