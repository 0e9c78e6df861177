/* Two open-addressing hash maps the tokenizer needs: byte string -> int32 (the vocabulary and
 * the word cache) and uint64 -> uint64 (merge pairs). Keys are copied into an arena. */
#ifndef QHX_HASHMAP_H
#define QHX_HASHMAP_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t off, len;  /* the key: arena[off, off + len) */
    int32_t value;
} qhx_strmap_entry;

typedef struct {
    uint64_t *slots;   /* (hash high 32 bits << 32) | (entry index + 1); 0 = empty */
    uint32_t mask;
    uint32_t count;
    qhx_strmap_entry *entry; /* one record per key: a lookup touches a slot, an entry and the key */
    char *arena;
    size_t arena_len, arena_cap;
    uint32_t cap_entries;
} qhx_strmap;

int qhx_strmap_init(qhx_strmap *m, uint32_t expect);
void qhx_strmap_free(qhx_strmap *m);
void qhx_strmap_clear(qhx_strmap *m);
/* Returns the entry index or -1. */
int32_t qhx_strmap_find(const qhx_strmap *m, const char *key, size_t len);
/* Returns 1 and sets *value when key is present, else 0. */
static inline int qhx_strmap_get(const qhx_strmap *m, const char *key, size_t len, int32_t *value) {
    const int32_t e = qhx_strmap_find(m, key, len);
    if (e < 0) return 0;
    *value = m->entry[e].value;
    return 1;
}
/* Inserts (or overwrites) key -> value; returns the entry index or -1 when out of memory. */
int32_t qhx_strmap_put(qhx_strmap *m, const char *key, size_t len, int32_t value);

typedef struct {
    uint64_t *keys, *vals;
    uint32_t mask, count;
} qhx_u64map;

int qhx_u64map_init(qhx_u64map *m, uint32_t expect);
void qhx_u64map_free(qhx_u64map *m);
/* Keys must not be UINT64_MAX (the empty marker). Returns 0, or -1 when full. */
int qhx_u64map_put(qhx_u64map *m, uint64_t key, uint64_t val);
/* Returns 1 and sets *val when found. */
static inline int qhx_u64map_get(const qhx_u64map *m, uint64_t key, uint64_t *val) {
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    for (uint32_t i = (uint32_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == key) { *val = m->vals[i]; return 1; }
        if (m->keys[i] == UINT64_MAX) return 0;
    }
}

static inline uint64_t qhx_hash_bytes(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

#endif
