/* cuwire client: answers that cannot change, kept after the server gave them once.
 *
 * A kernel's attributes (cuKernelGetAttribute, cuFuncGetAttribute) and its occupancy for a block size
 * (cuOccupancyMaxActiveBlocksPerMultiprocessor*) are fixed once it is loaded, except through the calls
 * that set a function's attributes or cache preference; PyTorch asks them before many launches. Each
 * query's stub tries the cache first (annotation `fast`) and stores the server's answer (annotation
 * `after`); the first attribute asked of a kernel or function brings all of them. A setter that sets the
 * value the cache already holds is answered here; any other set clears what depends on it (annotation `fast`,
 * returning -1 to go on as usual). A program's occupancy questions go on its run's list, each with the
 * attributes the program had set of that kernel by then, and its next run has them answered ahead under
 * those sets (below: kernel_sets, ahead). Unloads forget nothing: the server keeps every module it loaded for the
 * session (its module cache), so a handle is never reused for another kernel. A context's limits are kept
 * too (cuwire_cached_limit, below), and each kernel's function in a context (cuKernelGetFunction, which
 * cuBLAS and cuDNN ask before launches: answered by the client's Python the first time, here after).
 */
#include <pthread.h>
#include <stdint.h>

#include "cuda_api.h"
#include "runtime.h"
#include "session.h"
#include "table.h"

/* (SET_STATUS: whether a set succeeds, only ever answered ahead) */
enum {
    KERNEL_ATTRIBUTE = 1, FUNCTION_ATTRIBUTE, OCCUPANCY, OCCUPANCY_FLAGS, LIMIT, AVAILABLE_SHARED, SET_STATUS,
    CACHE_PREFERENCE, /* the last a kernel or function was set to (a key of its own, which no set forgets) */
    KERNEL_FUNCTION   /* a kernel's function in a context (cuKernelGetFunction): no set changes it */
};
#define OCCUPANCY_KINDS (1u << OCCUPANCY | 1u << OCCUPANCY_FLAGS | 1u << AVAILABLE_SHARED)
/* The kinds of answers every one of which an attribute set of a kernel (a function) may change: the other
 * kind's (a kernel's functions have handles of their own), and occupancy (forget_handle's all_of). */
#define AFTER_KERNEL_SET (1u << FUNCTION_ATTRIBUTE | OCCUPANCY_KINDS)
#define AFTER_FUNCTION_SET (1u << KERNEL_ATTRIBUTE | OCCUPANCY_KINDS)

struct entry {
    uint64_t key[5]; /* the query and its arguments (table.h) */
    int64_t value;   /* (a limit is a size_t) */
};
/* Every attribute of a kernel takes CU_FUNC_ATTRIBUTE_MAX entries: CuPy's linear algebra asks those of
 * hundreds of kernels (a table of fixed size filled, and each question cost two round trips). Up to 2^18
 * slots (12 MiB). */
static cw_table answers = CW_TABLE(struct entry, 5, 1u << 18);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Counts the forgettings of every kernel's answers, and (kernel_generations) of each kernel's: answers kept
 * elsewhere (client/launches.py's clusters) forget a kernel's when cuwire_answers_generation_of it moves. */
static unsigned long long generation;
/* Counts the forgettings of every answer (a cache configuration set): answers the server gave ahead, for a
 * moment before it, are not kept after one (load_lists.py), and those kept are dropped (ahead, below). */
static unsigned long long cleared;
/* Whether the program's occupancy questions go on its run's list (load_lists.py): set by Python. */
static int recording;
/* GPUs of different models (a device list's servers, or one server's: runtime.py open_sessions): an answer is
 * kept per device, that of the calling thread's current context (in the key's kind, above its low 32 bits),
 * since one CUkernel's attributes and occupancy differ between GPU models; answers given ahead are not used. */
static int per_device;
void cuwire_answers_per_device(int on) { __atomic_store_n(&per_device, on, __ATOMIC_RELEASE); }
static uint64_t here(uint64_t kind)
{
    CUdevice dev = 0;
    if (!__atomic_load_n(&per_device, __ATOMIC_ACQUIRE) || cuwire_local_cuCtxGetDevice_v2(&dev, NULL) != CUDA_SUCCESS)
        return kind;
    return kind | (uint64_t)(uint32_t)(dev + 1) << 32;
}
#define KIND_OF(k) ((k) & 0xffffffffu)

unsigned long long cuwire_answers_cleared(void) { return __atomic_load_n(&cleared, __ATOMIC_ACQUIRE); }
void cuwire_record_questions(int on) { __atomic_store_n(&recording, on, __ATOMIC_RELEASE); }

/* 0 and the value when known; -1 when the server must be asked. */
static int lookup_value(const uint64_t key[5], int64_t *out)
{
    pthread_mutex_lock(&lock);
    struct entry *e = cw_table_find(&answers, key);
    if (e)
        *out = e->value;
    pthread_mutex_unlock(&lock);
    return e ? 0 : -1;
}

static int lookup(const uint64_t key[5], int *out)
{
    int64_t value;
    if (!out || lookup_value(key, &value) != 0)
        return -1; /* (the server says what a NULL output is) */
    *out = (int)value;
    return 0;
}

static void store(const uint64_t key[5], int64_t value)
{
    pthread_mutex_lock(&lock);
    struct entry *e = cw_table_put(&answers, key);
    if (e)
        e->value = value;
    pthread_mutex_unlock(&lock);
}

/* Which kernel each kernel or function handle the client gave out is: its image and name, numbered by
 * Python as the program finds it (load_lists.Run.identify). A kernel's CUkernel and its functions (one a
 * context) are one kernel; an attribute set of one forgets the answers of that kernel's handles, and of
 * handles not known, but leaves other kernels' (cuBLASLt sets a kernel's shared memory before its first
 * launch, between the occupancy questions of others). */
struct kernel_of {
    uint64_t key[1]; /* the handle */
    uint64_t kernel; /* its number, not 0 */
};
static cw_table kernels = CW_TABLE(struct kernel_of, 1, 1u << 20);

void cuwire_note_kernel(uint64_t handle, uint64_t kernel)
{
    pthread_mutex_lock(&lock);
    struct kernel_of *k = handle && kernel ? cw_table_put(&kernels, &handle) : NULL;
    if (k)
        k->kernel = kernel;
    pthread_mutex_unlock(&lock);
}

/* lock held; 0 when not known */
static uint64_t kernel_of(uint64_t handle)
{
    struct kernel_of *k = handle ? cw_table_find(&kernels, &handle) : NULL;
    return k ? k->kernel : 0;
}

/* The attributes the program set of each kernel in this run (cuFuncSetAttribute, cuKernelSetAttribute): an
 * occupancy answer, and whether a set succeeds, depend on them. A question goes on the run's list with the
 * sets made by then, the next run's Preload answers it with those sets made and undone, and its answer
 * holds whenever the kernel's sets are those again (cuBLAS and cuDNN set a detection kernel's shared memory,
 * then ask its occupancy). Kept by kernel (a kernel's handles are one), else by handle. A cache preference
 * set leaves them unknown: the Preload cannot make it and undo it. */
#define SET_FIRST CW_SET_FIRST /* (frames.h: the settable attributes) */
#define SET_SLOTS CW_SET_COUNT
_Static_assert(CW_SET_FIRST == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "the first settable attribute");
struct kernel_sets {
    uint64_t key[1];
    unsigned made;    /* a bit per attribute set (attribute - SET_FIRST) */
    int unknown;      /* a cache preference was set */
    int32_t values[SET_SLOTS];
};
static cw_table kernel_sets = CW_TABLE(struct kernel_sets, 1, 1u << 20);

/* lock held */
static uint64_t sets_key(uint64_t handle)
{
    uint64_t kernel = kernel_of(handle);
    return kernel ? kernel | 1ull << 63 : handle;
}

/* A digest of sets (0: none), for the keys of the answers given ahead. */
static uint64_t sets_digest(unsigned made, const int32_t *values)
{
    uint64_t h = 0;
    for (int i = 0; i < SET_SLOTS; i++)
        if (made & 1u << i) {
            uint64_t word = (uint64_t)(SET_FIRST + i) << 32 | (uint32_t)values[i];
            for (int b = 0; b < 64; b += 8) /* FNV-1a */
                h = (h ^ (word >> b & 0xff)) * 0x100000001b3ull;
        }
    return h;
}

/* lock held: the digest of the sets the kernel of `handle` has now; -1 when they are unknown */
static int current_sets(uint64_t handle, uint64_t *digest)
{
    uint64_t key = sets_key(handle);
    struct kernel_sets *k = handle ? cw_table_find(&kernel_sets, &key) : NULL;
    if (k && k->unknown)
        return -1;
    *digest = k ? sets_digest(k->made, k->values) : 0;
    return 0;
}

/* A set the driver took (or that cannot fail, queued); unknown: a cache preference. */
static void note_set(uint64_t handle, CUfunction_attribute attrib, int value, int unknown)
{
    unsigned slot = (unsigned)attrib - SET_FIRST;
    if (slot >= SET_SLOTS && !unknown)
        return;
    pthread_mutex_lock(&lock);
    uint64_t key = sets_key(handle);
    struct kernel_sets *k = handle ? cw_table_put(&kernel_sets, &key) : NULL;
    if (k && unknown)
        k->unknown = 1;
    else if (k && slot < SET_SLOTS) {
        k->made |= 1u << slot;
        k->values[slot] = value;
    }
    pthread_mutex_unlock(&lock);
}

/* The sets of the kernel of `handle` (for its run's list: load_lists.py): how many, or -1 when unknown. */
int cuwire_sets_of(uint64_t handle, int32_t *attributes, int32_t *values, int most)
{
    int n = 0;
    pthread_mutex_lock(&lock);
    uint64_t key = sets_key(handle);
    struct kernel_sets *k = handle ? cw_table_find(&kernel_sets, &key) : NULL;
    if (k && k->unknown)
        n = -1;
    for (int i = 0; k && n >= 0 && i < SET_SLOTS && n < most; i++)
        if (k->made & 1u << i) {
            attributes[n] = SET_FIRST + i;
            values[n++] = k->values[i];
        }
    pthread_mutex_unlock(&lock);
    return n;
}

/* The answers the Preload gave (cuwire_keep_answer_ahead): by the question, its handle and arguments, and
 * the digest of the sets it was answered under. Kept till every answer is forgotten (forget_all); a set
 * forgets none of them, since each holds under its own sets. */
struct ahead_entry {
    uint64_t key[6];
    int64_t value;
};
static cw_table ahead = CW_TABLE(struct ahead_entry, 6, 1u << 16);

/* How many times each known kernel's answers were forgotten (by its number). */
struct kernel_generation {
    uint64_t key[1];
    unsigned long long generation;
};
static cw_table kernel_generations = CW_TABLE(struct kernel_generation, 1, 1u << 20);

/* Moves whenever the answers of the kernel `handle` is may have changed: a set of it, or of a kernel not
 * known, or every answer forgotten (the two counts only grow, so their sum moves when either does). */
unsigned long long cuwire_answers_generation_of(uint64_t handle)
{
    pthread_mutex_lock(&lock);
    uint64_t kernel = kernel_of(handle);
    struct kernel_generation *g = kernel ? cw_table_find(&kernel_generations, &kernel) : NULL;
    unsigned long long now = generation + (g ? g->generation : 0);
    pthread_mutex_unlock(&lock);
    return now;
}

/* A setter changed what some answers are: forget them all (the context's cache configuration). */
static int forget_all(void)
{
    pthread_mutex_lock(&lock);
    cw_table_clear(&answers);
    cw_table_clear(&ahead);
    generation++;
    __atomic_add_fetch(&cleared, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    return -1;
}

/* The attributes a program may set (cuFuncSetAttribute, cuKernelSetAttribute): each changes by its own set
 * only, so setting one leaves the others' kept answers as they are. */
static int settable(uint64_t attrib)
{
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        return 1;
    }
    return 0;
}

/* The shared memory a kernel may take: its set changes that attribute alone (and occupancy), the others
 * being the compiler's or set on their own. */
static int changes_itself_alone(uint64_t attrib)
{
    return attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ||
           attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
}

/* Attribute `attrib` of one kernel or function changes: forget the attributes of that handle of that kind
 * and the answers of the kinds in `all_of` of the same kernel's other handles (a kernel's functions have
 * handles of their own, and any of them may be the one an occupancy query names; of every handle when the
 * kernel is not known), but for the other settable attributes' answers, and keep the rest: libraries set
 * several attributes of several kernels before their launches (cuDNN's attention: two of one kernel, in
 * turn), each to the same value every time. A shared memory set forgets, of the attributes, that one
 * alone: a library that sets it, then asks the others, asks the server nothing more. */
static int forget_handle(uint64_t kind, uint64_t handle, unsigned all_of, uint64_t attrib)
{
    pthread_mutex_lock(&lock);
    uint64_t kernel = kernel_of(handle);
    for (unsigned i = 0; i < answers.cap; i++) {
        struct entry *e = cw_table_at(&answers, i);
        uint64_t k = e ? KIND_OF(e->key[0]) : 0;
        if (!k || !((k == kind && e->key[1] == handle) || (all_of & (1u << k))))
            continue;
        uint64_t other = k == LIMIT || e->key[1] == handle ? 0 : kernel_of(e->key[1]);
        if (kernel && other && other != kernel)
            continue; /* another kernel's */
        int attribute = k == KERNEL_ATTRIBUTE || k == FUNCTION_ATTRIBUTE;
        if (attribute && changes_itself_alone(attrib)) {
            if (e->key[2] == attrib)
                cw_table_remove(e);
        } else if (!(attribute && e->key[2] != attrib && settable(e->key[2]))) {
            cw_table_remove(e);
        }
    }
    struct kernel_generation *g = kernel ? cw_table_put(&kernel_generations, &kernel) : NULL;
    if (g)
        g->generation++;
    else /* (not known, or the table full) */
        generation++;
    pthread_mutex_unlock(&lock);
    return -1;
}

#define KEY(kind, ...) const uint64_t key[5] = {here(kind), __VA_ARGS__}
#define KEY_AS(name, kind, ...) const uint64_t name[5] = {here(kind), __VA_ARGS__}

/* The attribute key of "every attribute of this handle was asked" (forgotten with the handle's attributes). */
#define EVERY_ATTRIBUTE (UINT64_MAX - 1)

/* Keep every attribute of a kernel on a device (kind KERNEL_ATTRIBUTE) or of a function, as the server
 * answered them all at once: those the driver refused are not kept (asking one of them takes the usual
 * path, and says what failed), and the handle is marked as asked. */
static void keep_every_attribute(uint64_t kind, uint64_t handle, uint64_t device, const int32_t *statuses,
                                 const int32_t *values)
{
    for (int i = 0; i < CU_FUNC_ATTRIBUTE_MAX; i++)
        if (statuses[i] == 0) {
            KEY(kind, handle, (uint64_t)i, device);
            store(key, values[i]);
        }
    KEY(kind, handle, EVERY_ATTRIBUTE, device);
    store(key, 1);
}

/* Every attribute of a kernel or function, asked of the server at once the first time one is missing,
 * and kept: the runtime asks 16 of them before a kernel's first launch. */
static void ask_every_attribute(uint64_t kind, uint64_t handle, CUdevice dev)
{
    uint64_t device = kind == KERNEL_ATTRIBUTE ? (uint64_t)(uint32_t)dev : 0;
    KEY(kind, handle, EVERY_ATTRIBUTE, device);
    int seen;
    if (lookup(key, &seen) == 0 || cuwire_forked || __atomic_load_n(&cuwire_finished, __ATOMIC_ACQUIRE) ||
        !CUWIRE_READY())
        return;
    int32_t statuses[CU_FUNC_ATTRIBUTE_MAX], values[CU_FUNC_ATTRIBUTE_MAX];
    for (int i = 0; i < CU_FUNC_ATTRIBUTE_MAX; i++)
        statuses[i] = -1; /* not answered */
    if (cuwire_py_function_attributes(kind == KERNEL_ATTRIBUTE ? handle : 0, kind == KERNEL_ATTRIBUTE ? 0 : handle,
                                      dev, statuses, values, CU_FUNC_ATTRIBUTE_MAX))
        return; /* the usual path asks the one attribute, and says what failed */
    keep_every_attribute(kind, handle, device, statuses, values);
}

/* Every attribute of a kernel on a device (`kernel` 1) or of a function (0), as a module load brought them
 * (client/runtime.py load_image): kept as ask_every_attribute keeps them, so its round trip is not made. */
void cuwire_keep_every_attribute(int kernel, uint64_t handle, int dev, const int32_t *statuses,
                                 const int32_t *values, int count)
{
    if (count < CU_FUNC_ATTRIBUTE_MAX)
        return; /* (from a server whose driver knows fewer attributes: asked as before) */
    keep_every_attribute(kernel ? KERNEL_ATTRIBUTE : FUNCTION_ATTRIBUTE, handle,
                         kernel ? (uint64_t)(uint32_t)dev : 0, statuses, values);
}

/* An attribute from the cache, or from every attribute asked at once; -1 when the server must be asked. */
static int cached_attribute(int *pi, CUfunction_attribute attrib, uint64_t kind, uint64_t handle, CUdevice dev)
{
    uint64_t device = kind == KERNEL_ATTRIBUTE ? (uint64_t)(uint32_t)dev : 0;
    KEY(kind, handle, (uint64_t)attrib, device);
    if (lookup(key, pi) == 0)
        return CUDA_SUCCESS;
    if (!pi || (unsigned)attrib >= CU_FUNC_ATTRIBUTE_MAX)
        return -1;
    ask_every_attribute(kind, handle, dev);
    return lookup(key, pi);
}

int cuwire_cached_kernel_attribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    return cached_attribute(pi, attrib, KERNEL_ATTRIBUTE, (uintptr_t)kernel, dev);
}

void cuwire_keep_kernel_attribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    KEY(KERNEL_ATTRIBUTE, (uintptr_t)kernel, (uint64_t)attrib, (uint64_t)(uint32_t)dev);
    store(key, *pi);
}

int cuwire_cached_function_attribute(int *pi, CUfunction_attribute attrib, CUfunction f)
{
    return cached_attribute(pi, attrib, FUNCTION_ATTRIBUTE, (uintptr_t)f, 0);
}

void cuwire_keep_function_attribute(int *pi, CUfunction_attribute attrib, CUfunction f)
{
    KEY(FUNCTION_ATTRIBUTE, (uintptr_t)f, (uint64_t)attrib);
    store(key, *pi);
}

/* ------------------------------------------------------------------ occupancy, and questions asked ahead
 * A question's kind on a run's list and on the wire is frames.h's CW_ASK_*; its arguments are (a, b, c):
 * the block size, the dynamic shared memory and the flags of an occupancy question, the blocks and the
 * block size of the dynamic shared memory available. The program's questions that the server answered
 * go on its run's list, and so do the ones answered ahead from its last run's list when the program asks
 * them: its next run asks them all with its first load (cuwire.Preload), not one round trip each. */
static const unsigned ask_kinds[] = {[CW_ASK_OCCUPANCY] = OCCUPANCY, [CW_ASK_OCCUPANCY_FLAGS] = OCCUPANCY_FLAGS,
                                     [CW_ASK_AVAILABLE_SHARED] = AVAILABLE_SHARED, [CW_ASK_SET] = SET_STATUS};

static void record(unsigned ask, uint64_t handle, uint64_t a, uint64_t b, uint64_t c)
{
    if (__atomic_load_n(&recording, __ATOMIC_ACQUIRE) && CUWIRE_READY() && !cuwire_forked)
        cuwire_py_asked(ask, handle, a, b, c);
}

/* lock held: the Preload's answer to a question, under the sets its kernel has now; -1 when it gave none. */
static int answer_ahead(unsigned ask, uint64_t handle, uint64_t a, uint64_t b, uint64_t c, int64_t *out)
{
    uint64_t digest;
    if (__atomic_load_n(&per_device, __ATOMIC_ACQUIRE) || current_sets(handle, &digest) != 0)
        return -1;
    const uint64_t key[6] = {ask_kinds[ask], handle, a, b, c, digest};
    struct ahead_entry *e = cw_table_find(&ahead, key);
    if (e)
        *out = e->value;
    return e ? 0 : -1;
}

/* Whether a context's cache configuration was ever set (cuCtxSetCacheConfig): occupancy depends on it, and
 * the client's model (below) does not know what the driver makes of it. */
static int context_cache_set;

/* The client's own answer to an occupancy question of a kernel it named (cuwire/occupancy.py, through
 * client/launches.py): 0 and the answer, or -1 where the server must be asked (a kernel not named, sets not
 * known, one GPU's answer not every device's, a case the model leaves to the driver). */
static int modelled(unsigned ask, uint64_t handle, uint64_t a, uint64_t b, uint64_t c, int64_t *out)
{
    if (ask == CW_ASK_SET || __atomic_load_n(&per_device, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&context_cache_set, __ATOMIC_ACQUIRE) || cuwire_forked || !CUWIRE_READY())
        return -1;
    return cuwire_py_model_occupancy(ask, handle, a, b, c, out);
}

/* A kept answer to a question, or one given ahead under the kernel's sets now, or the client's model's: that
 * one is kept from now on, and goes on the run's list (the program asked it). */
static int answered(unsigned ask, uint64_t handle, uint64_t a, uint64_t b, uint64_t c, int64_t *out)
{
    KEY(ask_kinds[ask], handle, a, b, c);
    int given = -1;
    pthread_mutex_lock(&lock);
    struct entry *e = cw_table_find(&answers, key);
    if (e)
        *out = e->value;
    else if ((given = answer_ahead(ask, handle, a, b, c, out)) == 0 && (e = cw_table_put(&answers, key)))
        e->value = *out;
    pthread_mutex_unlock(&lock);
    if (!e && given != 0 && modelled(ask, handle, a, b, c, out) == 0) {
        store(key, *out);
        given = 0;
    }
    if (given == 0)
        record(ask, handle, a, b, c);
    return e || given == 0 ? 0 : -1;
}

static void keep_asked(unsigned ask, uint64_t handle, uint64_t a, uint64_t b, uint64_t c, int64_t value)
{
    KEY(ask_kinds[ask], handle, a, b, c);
    store(key, value);
    record(ask, handle, a, b, c);
}

/* The digest of `count` sets (attributes and values), as the answers given ahead are kept by; UINT64_MAX
 * when one is not an attribute a program sets. */
uint64_t cuwire_sets_digest_of(const int32_t *attributes, const int32_t *values, int count)
{
    unsigned made = 0;
    int32_t set[SET_SLOTS] = {0};
    for (int i = 0; i < count; i++) {
        unsigned slot = (unsigned)attributes[i] - SET_FIRST;
        if (slot >= SET_SLOTS)
            return UINT64_MAX;
        made |= 1u << slot;
        set[slot] = values[i];
    }
    return sets_digest(made, set);
}

/* The digest of the sets the kernel of `handle` has now: 0, or -1 when they are unknown (client/launches.py
 * keeps the cluster answers given ahead by it). */
int cuwire_sets_digest_now(uint64_t handle, uint64_t *digest)
{
    pthread_mutex_lock(&lock);
    int r = current_sets(handle, digest);
    pthread_mutex_unlock(&lock);
    return r;
}

/* An answer the server gave ahead (cuwire.Preload, from the last run's list), under the `count` sets given
 * (attributes and values): the program's question is answered by it when its kernel's sets are those. */
void cuwire_keep_answer_ahead(unsigned ask, uint64_t handle, uint64_t a, uint64_t b, uint64_t c, int64_t value,
                              const int32_t *attributes, const int32_t *values, int count)
{
    uint64_t digest = cuwire_sets_digest_of(attributes, values, count);
    if (ask >= sizeof ask_kinds / sizeof *ask_kinds || !ask_kinds[ask] || digest == UINT64_MAX)
        return;
    const uint64_t key[6] = {ask_kinds[ask], handle, a, b, c, digest};
    pthread_mutex_lock(&lock);
    struct ahead_entry *e = cw_table_put(&ahead, key);
    if (e)
        e->value = value;
    pthread_mutex_unlock(&lock);
}

int cuwire_cached_occupancy(int *blocks, CUfunction f, int block_size, size_t shared)
{
    int64_t value;
    if (!blocks || answered(CW_ASK_OCCUPANCY, (uintptr_t)f, (uint32_t)block_size, shared, 0, &value) != 0)
        return -1;
    *blocks = (int)value;
    return CUDA_SUCCESS;
}

void cuwire_keep_occupancy(int *blocks, CUfunction f, int block_size, size_t shared)
{
    keep_asked(CW_ASK_OCCUPANCY, (uintptr_t)f, (uint32_t)block_size, shared, 0, *blocks);
}

int cuwire_cached_occupancy_flags(int *blocks, CUfunction f, int block_size, size_t shared, unsigned int flags)
{
    int64_t value;
    if (!blocks || answered(CW_ASK_OCCUPANCY_FLAGS, (uintptr_t)f, (uint32_t)block_size, shared, flags, &value) != 0)
        return -1;
    *blocks = (int)value;
    return CUDA_SUCCESS;
}

void cuwire_keep_occupancy_flags(int *blocks, CUfunction f, int block_size, size_t shared, unsigned int flags)
{
    keep_asked(CW_ASK_OCCUPANCY_FLAGS, (uintptr_t)f, (uint32_t)block_size, shared, flags, *blocks);
}

/* cuOccupancyAvailableDynamicSMemPerBlock: cuBLASLt asks it of a kernel before its launches. */
int cuwire_cached_available_shared(size_t *shared, CUfunction f, int blocks, int block_size)
{
    int64_t value;
    if (!shared || answered(CW_ASK_AVAILABLE_SHARED, (uintptr_t)f, (uint32_t)blocks, (uint32_t)block_size, 0,
                            &value) != 0)
        return -1;
    *shared = (size_t)value;
    return CUDA_SUCCESS;
}

void cuwire_keep_available_shared(size_t *shared, CUfunction f, int blocks, int block_size)
{
    keep_asked(CW_ASK_AVAILABLE_SHARED, (uintptr_t)f, (uint32_t)blocks, (uint32_t)block_size, 0, (int64_t)*shared);
}

/* Setting an attribute to the value it has changes nothing: answered here (libraries set the same
 * attributes before every launch). Any other value: forget what depends on it, and ask the server. */
int cuwire_forget_answers_kernel_attribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    int now;
    KEY(KERNEL_ATTRIBUTE, (uintptr_t)kernel, (uint64_t)attrib, (uint64_t)(uint32_t)dev);
    if (lookup(key, &now) == 0 && now == val) {
        note_set((uintptr_t)kernel, attrib, val, 0); /* (a set, though of the value it had) */
        return CUDA_SUCCESS;
    }
    if (settable(attrib)) /* (whether it succeeds, for the next run: the server answers it now) */
        record(CW_ASK_SET, (uintptr_t)kernel, (uint64_t)attrib, (uint32_t)val, 0);
    return forget_handle(KERNEL_ATTRIBUTE, (uintptr_t)kernel,
                         AFTER_KERNEL_SET, (uint64_t)attrib);
}

int cuwire_forget_answers_function_attribute(CUfunction f, CUfunction_attribute attrib, int value)
{
    int now;
    KEY(FUNCTION_ATTRIBUTE, (uintptr_t)f, (uint64_t)attrib);
    if (lookup(key, &now) == 0 && now == value) {
        note_set((uintptr_t)f, attrib, value, 0);
        return CUDA_SUCCESS;
    }
    if (settable(attrib))
        record(CW_ASK_SET, (uintptr_t)f, (uint64_t)attrib, (uint32_t)value, 0);
    return forget_handle(FUNCTION_ATTRIBUTE, (uintptr_t)f,
                         AFTER_FUNCTION_SET, (uint64_t)attrib);
}

/* The most dynamic shared memory a kernel with `shared` bytes of static shared memory may be set to on
 * device `dev` (any device: -1, the least of them), as the driver checks it: the two together within the
 * device's opt-in limit per block; -1 when unknown. */
CUresult cuwire_local_cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult cuwire_local_cuDeviceGetCount(int *count);
static long dynamic_shared_room(int shared, CUdevice dev)
{
    int first = dev, end = dev + 1, optin = 0;
    long least = -1;
    if (dev < 0) { /* every device */
        first = 0;
        if (cuwire_local_cuDeviceGetCount(&end) != CUDA_SUCCESS)
            return -1;
    }
    for (int d = first; d < end; d++) {
        if (cuwire_local_cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d) != 0)
            return -1;
        if (least < 0 || optin < least)
            least = optin;
    }
    return least < 0 ? -1 : least - shared;
}

/* Whether a set of an attribute cannot fail, so it is queued (annotation queued_when; it is asked before
 * `fast`), to a value other than the one kept:
 * - the largest dynamic shared memory (cuBLAS, cuDNN and PyTorch's attention set it before their kernels'
 *   first launches), of a kernel or function whose attributes are kept (so the server knows it), within
 *   the device's room as the driver checks it;
 * - a set the Preload made, under the sets the kernel has now, and the driver took (CW_ASK_SET).
 * What depends on it is forgotten, as for any set; `after` then keeps the value set. */
static int set_cannot_fail(uint64_t kind, uint64_t handle, CUfunction_attribute attrib, int val, CUdevice dev,
                           unsigned all_of)
{
    uint64_t device = kind == KERNEL_ATTRIBUTE ? (uint64_t)(uint32_t)dev : 0;
    int now, shared;
    int64_t status;
    KEY(kind, handle, (uint64_t)attrib, device);
    KEY_AS(static_key, kind, handle, (uint64_t)CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, device);
    if (!settable(attrib) || cuwire_forked || !CUWIRE_READY())
        return 0;
    int dynamic_shared = attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && val >= 0;
    if (dynamic_shared && lookup(static_key, &shared) != 0) {
        /* not known (a library of more kernels than a load describes): the round trip the set would make
         * brings every attribute instead, so the set is checked here, and the reads after it are answered */
        ask_every_attribute(kind, handle, kind == KERNEL_ATTRIBUTE ? dev : 0);
    }
    if (lookup(key, &now) == 0 && now == val)
        return 0; /* (answered by `fast`: the same value) */
    if (dynamic_shared && lookup(static_key, &shared) == 0) {
        long room = dynamic_shared_room(shared, kind == KERNEL_ATTRIBUTE ? dev : -1);
        if (room >= 0 && val <= room) {
            forget_handle(kind, handle, all_of, (uint64_t)attrib);
            return 1;
        }
    }
    pthread_mutex_lock(&lock);
    int given = answer_ahead(CW_ASK_SET, handle, (uint64_t)attrib, (uint32_t)val, 0, &status);
    pthread_mutex_unlock(&lock);
    if (given != 0 || status != 0)
        return 0; /* the server says what the driver says */
    record(CW_ASK_SET, handle, (uint64_t)attrib, (uint32_t)val, 0);
    forget_handle(kind, handle, all_of, (uint64_t)attrib);
    return 1;
}

int cuwire_queue_kernel_attribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    return set_cannot_fail(KERNEL_ATTRIBUTE, (uintptr_t)kernel, attrib, val, dev,
                           AFTER_KERNEL_SET);
}

int cuwire_queue_function_attribute(CUfunction f, CUfunction_attribute attrib, int value)
{
    return set_cannot_fail(FUNCTION_ATTRIBUTE, (uintptr_t)f, attrib, value, -1,
                           AFTER_FUNCTION_SET);
}

/* ... and once the server has set it, the value is the answer (the next set of the same value is
 * answered here: libraries set the same attribute before every launch). */
void cuwire_keep_set_kernel_attribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    KEY(KERNEL_ATTRIBUTE, (uintptr_t)kernel, (uint64_t)attrib, (uint64_t)(uint32_t)dev);
    store(key, val);
    note_set((uintptr_t)kernel, attrib, val, 0); /* (a kernel's sets are kept for any device alike) */
}

void cuwire_keep_set_function_attribute(CUfunction f, CUfunction_attribute attrib, int value)
{
    KEY(FUNCTION_ATTRIBUTE, (uintptr_t)f, (uint64_t)attrib);
    store(key, value);
    note_set((uintptr_t)f, attrib, value, 0);
}

/* A kernel's or function's cache preference changes its occupancy, and may change its preferred carveout
 * as read back: forgotten as a set of that attribute forgets (the kernel's answers, not every kernel's),
 * and its sets are unknown from then on (the Preload does not make cache preferences). A set of the
 * preference it was last set to changes nothing: answered here (JAX sets one before each launch). */
static int cache_set(uint64_t kind, uint64_t handle, CUfunc_cache config, uint64_t device, unsigned all_of)
{
    int now;
    KEY(CACHE_PREFERENCE, kind, handle, device);
    if (lookup(key, &now) == 0 && now == (int)config)
        return CUDA_SUCCESS;
    note_set(handle, 0, 0, 1);
    return forget_handle(kind, handle, all_of, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
}

int cuwire_forget_answers_function_cache(CUfunction f, CUfunc_cache config)
{
    return cache_set(FUNCTION_ATTRIBUTE, (uintptr_t)f, config, 0, AFTER_FUNCTION_SET);
}

int cuwire_forget_answers_kernel_cache(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    return cache_set(KERNEL_ATTRIBUTE, (uintptr_t)kernel, config, (uint64_t)(uint32_t)dev, AFTER_KERNEL_SET);
}

/* Whether a cache preference cannot fail, so it is queued (annotation queued_when): one CUDA names, of a
 * kernel or function whose attributes are kept (so the server knows it, on that device), other than the
 * one it was last set to (that one `fast` answers). What depends on it is forgotten, as `fast` does. */
static int cache_set_cannot_fail(uint64_t kind, uint64_t handle, CUfunc_cache config, uint64_t device,
                                 unsigned all_of)
{
    int known, now;
    KEY(kind, handle, (uint64_t)CU_FUNC_ATTRIBUTE_NUM_REGS, device);
    KEY_AS(last, CACHE_PREFERENCE, kind, handle, device);
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL || cuwire_forked || !CUWIRE_READY() ||
        lookup(key, &known) != 0 || (lookup(last, &now) == 0 && now == (int)config))
        return 0;
    cache_set(kind, handle, config, device, all_of);
    return 1;
}

int cuwire_queue_function_cache(CUfunction f, CUfunc_cache config)
{
    return cache_set_cannot_fail(FUNCTION_ATTRIBUTE, (uintptr_t)f, config, 0, AFTER_FUNCTION_SET);
}

int cuwire_queue_kernel_cache(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    return cache_set_cannot_fail(KERNEL_ATTRIBUTE, (uintptr_t)kernel, config, (uint64_t)(uint32_t)dev,
                                 AFTER_KERNEL_SET);
}

/* ... and once set, the preference is the one a set of the same answers. */
void cuwire_keep_function_cache(CUfunction f, CUfunc_cache config)
{
    KEY(CACHE_PREFERENCE, FUNCTION_ATTRIBUTE, (uintptr_t)f, 0);
    store(key, config);
}

void cuwire_keep_kernel_cache(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    KEY(CACHE_PREFERENCE, KERNEL_ATTRIBUTE, (uintptr_t)kernel, (uint64_t)(uint32_t)dev);
    store(key, config);
}

int cuwire_forget_answers_context_cache(CUfunc_cache config)
{
    (void)config;
    __atomic_store_n(&context_cache_set, 1, __ATOMIC_RELEASE);
    return forget_all();
}

/* A context's limits (cuCtxGetLimit), but for its stack size, which the driver raises by itself for a
 * kernel that needs more: kept per context once asked (libraries ask before launches, GPT-2's generation
 * hundreds of times), until any cuCtxSetLimit, and forgotten with the context (cuCtxDestroy, a primary
 * context's reset: a new context may come at the same address, with its own limits). */
int cuwire_cached_limit(size_t *pvalue, CUlimit limit)
{
    uint64_t ctx = cuwire_current_context();
    if (!pvalue || !ctx || limit == CU_LIMIT_STACK_SIZE)
        return -1;
    KEY(LIMIT, ctx, (uint64_t)limit);
    int64_t value;
    if (lookup_value(key, &value) != 0)
        return -1;
    *pvalue = (size_t)value;
    return CUDA_SUCCESS;
}

void cuwire_keep_limit(size_t *pvalue, CUlimit limit)
{
    uint64_t ctx = cuwire_current_context();
    if (!pvalue || !ctx || limit == CU_LIMIT_STACK_SIZE)
        return;
    KEY(LIMIT, ctx, (uint64_t)limit);
    store(key, (int64_t)*pvalue);
}

/* Every kept limit, forgotten: a limit was set (`fast` of cuCtxSetLimit, which then goes on as usual), or
 * a context went away. */
void cuwire_forget_limits(void) { forget_handle(LIMIT, 0, 1u << LIMIT, 0); }

int cuwire_forget_limits_set(CUlimit limit, size_t value)
{
    (void)limit, (void)value;
    cuwire_forget_limits();
    return -1;
}

/* cuKernelGetFunction (`fast`): the function the client's Python gave for this kernel in the caller's
 * context (client/modules.py keeps it here), without Python; -1 the first time. */
int cuwire_fast_kernel_get_function(CUfunction *pFunc, CUkernel kernel)
{
    uint64_t ctx = cuwire_current_context();
    if (!pFunc || !kernel || !ctx)
        return -1; /* (the usual path says what is wrong) */
    KEY(KERNEL_FUNCTION, ctx, (uint64_t)(uintptr_t)kernel);
    int64_t function;
    if (lookup_value(key, &function) != 0)
        return -1;
    *pFunc = (CUfunction)(uintptr_t)function;
    return CUDA_SUCCESS;
}

void cuwire_keep_kernel_function(uint64_t kernel, uint64_t function)
{
    uint64_t ctx = cuwire_current_context();
    if (kernel && function && ctx) {
        KEY(KERNEL_FUNCTION, ctx, kernel);
        store(key, (int64_t)function);
    }
}
