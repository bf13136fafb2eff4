/* cuwire's wire, the fixed layouts: the frame header every message travels under, and the records of the
 * calls the C of both sides packs and unpacks without protobuf. One definition: the client's C
 * (cuwire/client/) and the server's record loop (cuwire/server/records.c) include this file, and Python
 * reads the same layouts and numbers from it (cuwire/wire/layouts.py, through cffi). Little-endian,
 * packed. The messages themselves are protobuf: cuwire/wire/protocol.proto.
 *
 * Kept simple for layouts.py's reading: one field per line or a list of fields of one type, integer types
 * of <stdint.h> and arrays of them, and #define lines of plain numbers. */
#ifndef CUWIRE_FRAMES_H
#define CUWIRE_FRAMES_H
#include <stdint.h>

#define CW_PACKED __attribute__((packed))

/* A frame: the header, `size` bytes of message, then `payload` bytes of raw buffers beside it. */
#define CW_MAGIC 0x31575543         /* "CUW1": the message is a protobuf Batch or Reply */
#define CW_MAGIC_RECORDS 0x32575543 /* "CUW2": queued-call records, the last one a call the client waits for;
                                     * the answer is a records frame too (cw_call_reply, then its bytes) */
#define CW_MAGIC_QUEUED 0x33575543  /* "CUW3": queued calls only, sent early: no answer */
#define CW_MESSAGE_MAX 67108864     /* the largest message (64 MiB): bulk bytes go in the payload */
#define CW_CALL_RESULT_MAX 65536    /* the largest result a records frame's call brings back (64 KiB) */
#define CW_MAKE_AT_ONCE 64          /* streams or events one cuwire.MakeHandles makes at most */
/* A library load the client names goes without waiting (LoadModule_Args.name): with its bytes up to this
 * many, and past it by its digest alone, where the welcome listed the image as in the server's module
 * cache (Welcome.large_images: at most this many, pinned there for the session) */
#define CW_IMAGE_WITH_LOAD_MOST 1048576
#define CW_LARGE_IMAGES_MOST 256
/* The questions a run's list keeps and the next run's cuwire.Preload asks ahead (PreloadModule.questions,
 * client/answers_cache.c): cuOccupancyMaxActiveBlocksPerMultiprocessor, its WithFlags,
 * cuOccupancyAvailableDynamicSMemPerBlock, whether an attribute set succeeds, and every attribute of a
 * kernel or function. Each but the last is asked with the attributes the program had set of that kernel
 * by then (Question.set_attributes): its answer holds under those. */
#define CW_ASK_OCCUPANCY 1
#define CW_ASK_OCCUPANCY_FLAGS 2
#define CW_ASK_AVAILABLE_SHARED 3
#define CW_ASK_SET 4        /* cuFuncSetAttribute, cuKernelSetAttribute: a = the attribute, b = the value */
#define CW_ASK_ATTRIBUTES 5 /* every attribute of a kernel or function (cuwire.FunctionAttributes) */
#define CW_ASK_CLUSTERS 6   /* cuOccupancyMaxActiveClusters (a = 0) or MaxPotentialClusterSize (a = 1) of a launch
                             * configuration (Question.config: its grid, block and shared memory, then its
                             * attributes), with every cluster width 1..b when b (client/launches.py's sweep) */
#define CW_CLUSTER_CONFIG_HEAD 28     /* bytes of a cluster question's grid, block and shared memory */
#define CW_CLUSTER_ATTRIBUTES_MOST 16 /* launch attributes a cluster question may have */
/* The attributes a program sets of a kernel, which a question's sets name (Question.set_attributes): from
 * CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, this many */
#define CW_SET_FIRST 8
#define CW_SET_COUNT 8
/* ...of a kernel or function the program found by name (Question.which): a library's kernel, a module's
 * function, or a library kernel's function (cuKernelGetFunction) */
#define CW_FOUND_KERNEL 0
#define CW_FOUND_FUNCTION 1
#define CW_FOUND_KERNEL_FUNCTION 2
/* A handle the client names (a library or kernel it gives the program before the server answers its load
 * or lookup: LoadModule_Args.name, GetKernel_Args.name_as) has this bit set, which no address of a
 * process, and so no driver's handle, has; the session takes the driver's for it. */
#define CW_NAME_TAG 0x8000000000000000

struct CW_PACKED cw_frame_header {
    uint32_t magic;
    uint32_t size;    /* of the message */
    uint64_t payload; /* raw bytes after the message */
};

/* Each queued call in a records frame: this, then `size` bytes of record (generated/server_records.h
 * gives a generated call's record; the hand-made ones follow). */
struct CW_PACKED cw_record_header {
    uint32_t id; /* the function's or operation's id (generated/wire_ids.py) */
    uint32_t size;
};

/* The answer to a records frame: this, then result_len bytes of result, error_len of error text (the
 * session refused the frame) and output_len of device printf output, for the program's stdout. */
struct CW_PACKED cw_call_reply {
    int32_t status;       /* the call's CUDA result */
    int32_t queued_error; /* the first error of the queued calls before it, and its function's id */
    uint32_t queued_fn;
    uint32_t result_len;
    uint32_t error_len;
    uint32_t output_len;
};

/* cuwire.SetContext (client/queue.c): the session thread's current context (0 keeps it), and while a
 * capture runs, the capture mode the calling thread needs. */
struct CW_PACKED cw_set_context {
    uint64_t context;
    uint32_t capture_mode;
};

/* A queued launch (client/launches.c): this, then for LaunchKernelEx a u32 count, a u32 pad and the launch
 * attributes, then the parameters laid out at the kernel's offsets. */
struct CW_PACKED cw_launch_head {
    uint64_t kernel;
    uint32_t grid[3];
    uint32_t block[3];
    uint64_t shared_mem;
    uint64_t stream;
};

/* A kernel node's parameters set in an executable graph, queued (client/kernel_nodes.c: the client knew the
 * set cannot fail): this, then the parameters laid out at the kernel's offsets, as a launch's. */
struct CW_PACKED cw_node_set_head {
    uint64_t exec;
    uint64_t node;
    uint64_t kernel;
    uint32_t grid[3];
    uint32_t block[3];
    uint64_t shared_mem;
};

/* A small copy to the device, queued with its bytes (client/queue.c): this, then the bytes. sync: the null
 * stream's synchronous cuMemcpyHtoD, else ...Async. */
struct CW_PACKED cw_copy_head {
    uint64_t dst;
    uint64_t stream;
    uint32_t sync;
    uint32_t pad;
};

/* A small copy from the device, the call of a records frame (client/wire.c): its bytes are the result. */
struct CW_PACKED cw_copy_from {
    uint64_t src;
    uint64_t stream;
    uint32_t sync;
    uint32_t n;
};

/* A copy between the GPU and host memory shared with a client on the server's host (client/host_memory.c):
 * no bytes travel, only where they are in the shared memory. */
struct CW_PACKED cw_copy_shared {
    uint64_t device;
    uint64_t offset;
    uint64_t n;
    uint64_t stream;
    uint32_t to_device;
    uint32_t sync;
};

/* Page-locked memory of a client over TCP that the GPU reaches (client/managed.c): the session maps memory of
 * its own at the client's address and registers it for the GPU (RegisterHost with `anonymous`), and the
 * program's changes reach it written by the server's CPU, in no stream (a kernel may be waiting for them,
 * as XLA's delay kernel waits for its host's release), queued. kind CW_HOST_WRITE: the n bytes follow;
 * CW_HOST_WRITE_RUNS: the runs of bytes the program changed in [address, address + n) follow, a u32 count,
 * `count` (u32 offset, u32 length) pairs, then their bytes one after the other. (The server's copy comes
 * back through cuMemcpyDtoH, as managed memory's does.) */
struct CW_PACKED cw_host_copy {
    uint64_t address;
    uint32_t n;
    uint32_t kind;
};
#define CW_HOST_WRITE 1
#define CW_HOST_WRITE_RUNS 2
#define CW_HOST_RANGES_MOST 64 /* such ranges a session has at once */

/* A host function of the client's in a stream (client/callbacks.c): the server's stand-in posts `id` to the
 * client, whose thread runs the function. */
struct CW_PACKED cw_host_func {
    uint64_t stream;
    uint64_t id;
};

/* Over TCP the stand-in posts it on the session's host-function connection as this; the client writes `seq`
 * back once the function ran. `seq` counts the posts: after the connection dropped and the client opened it
 * again, the post that waited goes again, and a client that ran it already only answers it. */
struct CW_PACKED cw_host_post {
    uint64_t id;
    uint64_t seq;
};

#endif
