/* On a GPU host: the sizes the real driver gives its private export tables (the first word of each), to
 * check cuwire's tables (client/export_tables.c) against. Usage: export_tables_probe UUIDHEX... */
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

typedef int (*get_table_t)(const void **, const unsigned char *);

int main(int argc, char **argv)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        fprintf(stderr, "no libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    get_table_t get = (get_table_t)dlsym(cuda, "cuGetExportTable");
    printf("cuInit -> %d\n", init(0));
    for (int i = 1; i < argc; i++) {
        unsigned char uuid[16];
        for (int b = 0; b < 16; b++)
            sscanf(argv[i] + 2 * b, "%2hhx", &uuid[b]);
        const void **table = NULL;
        int err = get((const void **)&table, uuid);
        if (err)
            printf("%s: error %d\n", argv[i], err);
        else
            printf("%s: first word %lu (%lu slots of 8 bytes)\n", argv[i], (unsigned long)(uintptr_t)table[0],
                   (unsigned long)(uintptr_t)table[0] / 8);
    }
    return 0;
}
