/* cuwire client: a table of entries found by a key of a few 64-bit words, for what the client keeps (kept
 * answers, streams and events given out, kernel nodes, tensor maps): one implementation of open addressing
 * (table.c).
 *
 * An entry begins with its key; a first key word of 0 marks an empty slot, CW_GONE a removed one (lookups
 * go on past it, new entries take its place). The table grows to twice its size when half full, up to
 * `most` slots; full, it keeps nothing more (what it would have kept is asked again, as before). It has no
 * lock of its own: its owner holds one. An entry's address holds until the next cw_table_put.
 */
#ifndef CUWIRE_TABLE_H
#define CUWIRE_TABLE_H
#include <stddef.h>
#include <stdint.h>

#define CW_GONE UINT64_MAX

typedef struct cw_table {
    char *slots;
    unsigned cap, used; /* used: slots not empty, removed ones too */
    unsigned most;      /* a power of two */
    unsigned keys;      /* key words at the start of each entry */
    size_t size;        /* bytes of an entry */
} cw_table;

/* A table of entries of `type` whose first `keys` words are the key, of at most `most` slots. */
#define CW_TABLE(type, keys, most) {NULL, 0, 0, (most), (keys), sizeof(type)}

/* The entry of `key`, or NULL. */
void *cw_table_find(const cw_table *t, const uint64_t *key);
/* The entry of `key`: the one there, or a new one (the key written, the rest zeroed); NULL when full. */
void *cw_table_put(cw_table *t, const uint64_t *key);
/* Slot i's entry (i below t->cap), or NULL when it is empty or removed: for a walk over the table. */
void *cw_table_at(const cw_table *t, unsigned i);
/* The entry is removed. */
void cw_table_remove(void *entry);
/* Every entry removed. */
void cw_table_clear(cw_table *t);

#endif
