/* Preloaded beside the client in gpu-test: at exit, writes every mapped file whose name contains
 * "libcuda", "libcudart" or "libcuwire" to $CUWIRE_MAPS_OUT, so the test can show no real CUDA library was loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((destructor)) static void probe(void)
{
    const char *out = getenv("CUWIRE_MAPS_OUT");
    if (!out)
        return;
    FILE *in = fopen("/proc/self/maps", "r"), *o = fopen(out, "a");
    char line[4096];
    char exe[1024] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0)
        exe[n] = 0;
    if (o)
        fprintf(o, "probe ran in %s\n", exe); /* so a missing probe cannot pass for a clean process */
    while (in && o && fgets(line, sizeof line, in)) {
        const char *path = strchr(line, '/');
        if (path && (strstr(path, "libcuda") || strstr(path, "libcudart") || strstr(path, "libcuwire")))
            fputs(path, o);
    }
    if (in)
        fclose(in);
    if (o)
        fclose(o);
}
