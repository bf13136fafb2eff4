/* cuwire client: NVML's start-up answered once. PyTorch calls nvmlInit and nvmlDeviceGetCount five times
 * each as it starts; through cuwire each was a round trip. NVML counts its initializations: the client
 * keeps that count, so only the first nvmlInit (while none is open) and the last nvmlShutdown reach the
 * server, and the device count, which is the host's and does not change, is kept once answered while NVML
 * is initialized (annotations `fast` and `after` in libnvidia-ml.so.1.toml).
 */
#include <stdatomic.h>

#define NVML_SUCCESS 0

static atomic_int opened;           /* nvmlInit calls not yet shut down (the server's count is 1 while > 0) */
static atomic_int devices = -1;     /* nvmlDeviceGetCount's answer, once given; -1: not yet */

/* A further nvmlInit while NVML is open: counted here. */
int cuwire_nvml_init_again(void)
{
    int n = atomic_load(&opened);
    while (n > 0)
        if (atomic_compare_exchange_weak(&opened, &n, n + 1))
            return NVML_SUCCESS;
    return -1; /* the first: the server initializes NVML */
}

void cuwire_nvml_opened(void) { atomic_fetch_add(&opened, 1); }

void cuwire_nvml_opened_with_flags(unsigned int flags)
{
    (void)flags;
    cuwire_nvml_opened();
}

/* nvmlShutdown: all but the last are counted here; the last reaches the server. */
int cuwire_nvml_shutdown_early(void)
{
    int n = atomic_load(&opened);
    while (n > 1)
        if (atomic_compare_exchange_weak(&opened, &n, n - 1))
            return NVML_SUCCESS;
    return -1;
}

void cuwire_nvml_closed(void)
{
    atomic_store(&opened, 0);
    atomic_store(&devices, -1);
}

int cuwire_nvml_known_count(unsigned int *deviceCount)
{
    int n = atomic_load(&devices);
    if (!deviceCount || n < 0 || atomic_load(&opened) <= 0)
        return -1; /* the server says what is wrong, or answers */
    *deviceCount = (unsigned int)n;
    return NVML_SUCCESS;
}

void cuwire_nvml_keep_count(unsigned int *deviceCount) { atomic_store(&devices, (int)*deviceCount); }
