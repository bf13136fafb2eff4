/* cuwire client: open addressing on a key of a few 64-bit words (table.h). */
#include <stdlib.h>
#include <string.h>

#include "table.h"

#define FIRST 1024u /* slots of a table's first allocation */

static unsigned slot_of(const cw_table *t, const uint64_t *key, unsigned cap)
{
    uint64_t h = 1469598103934665603ull;
    for (unsigned i = 0; i < t->keys; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return (unsigned)(h ^ (h >> 32)) & (cap - 1);
}

static uint64_t *entry(const cw_table *t, char *slots, unsigned i) { return (uint64_t *)(slots + (size_t)i * t->size); }

static int live(const uint64_t *e) { return e[0] && e[0] != CW_GONE; }

void *cw_table_find(const cw_table *t, const uint64_t *key)
{
    for (unsigned i = t->cap ? slot_of(t, key, t->cap) : 0, n = 0; n < t->cap; i = (i + 1) & (t->cap - 1), n++) {
        uint64_t *e = entry(t, t->slots, i);
        if (!e[0])
            return NULL;
        if (memcmp(e, key, t->keys * sizeof *key) == 0)
            return e;
    }
    return NULL;
}

/* Room for one more: the table made, or made again without its removed entries, twice as large when the
 * kept ones fill half of it. 0, or -1 when it may not grow (or no memory). */
static int make_room(cw_table *t)
{
    if ((t->used + 1) * 2 <= t->cap)
        return 0;
    unsigned kept = 0, cap = t->cap ? t->cap : (FIRST < t->most ? FIRST : t->most);
    for (unsigned i = 0; i < t->cap; i++)
        kept += live(entry(t, t->slots, i));
    while ((kept + 1) * 2 > cap && cap < t->most)
        cap *= 2;
    if ((kept + 1) * 2 > cap)
        return -1;
    char *slots = calloc(cap, t->size);
    if (!slots)
        return -1;
    for (unsigned i = 0; i < t->cap; i++) {
        uint64_t *e = entry(t, t->slots, i);
        if (!live(e))
            continue;
        unsigned j = slot_of(t, e, cap);
        while (entry(t, slots, j)[0])
            j = (j + 1) & (cap - 1);
        memcpy(entry(t, slots, j), e, t->size);
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    t->used = kept;
    return 0;
}

void *cw_table_put(cw_table *t, const uint64_t *key)
{
    uint64_t *e = cw_table_find(t, key);
    if (e)
        return e;
    if (make_room(t) != 0)
        return NULL;
    unsigned j = slot_of(t, key, t->cap);
    while (live(entry(t, t->slots, j)))
        j = (j + 1) & (t->cap - 1);
    e = entry(t, t->slots, j);
    t->used += !e[0];
    memset(e, 0, t->size);
    memcpy(e, key, t->keys * sizeof *key);
    return e;
}

void *cw_table_at(const cw_table *t, unsigned i)
{
    if (i >= t->cap)
        return NULL;
    uint64_t *e = entry(t, t->slots, i);
    return live(e) ? e : NULL;
}

void cw_table_remove(void *e) { ((uint64_t *)e)[0] = CW_GONE; }

void cw_table_clear(cw_table *t)
{
    if (t->slots)
        memset(t->slots, 0, (size_t)t->cap * t->size);
    t->used = 0;
}
