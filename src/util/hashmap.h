/* Two open-addressing hash maps the tokenizer needs: byte string -> int32 (the vocabulary and
 * the word cache) and uint64 -> uint64 (merge pairs). Keys are copied into an arena. */
#ifndef QHX_HASHMAP_H
#define QHX_HASHMAP_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t off, len;  /* the key: arena[off, off + len) */
} qhx_strmap_entry;

/* A slot holds everything a lookup needs but the key's bytes, so a hit costs two cache lines
 * (slot, key): tokenizer.json loads look up three keys per merge. */
typedef struct {
    uint32_t tag;       /* hash high 32 bits */
    uint32_t off;       /* the key: arena[off, off + len1 - 1) */
    uint32_t len1;      /* key length + 1; 0 = empty */
    int32_t value;
} qhx_strmap_slot;

typedef struct {
    qhx_strmap_slot *slots;
    uint32_t mask;
    uint32_t count;
    qhx_strmap_entry *entry; /* the keys in insertion order, for walking the map */
    char *arena;
    size_t arena_len, arena_cap;
    uint32_t cap_entries;
} qhx_strmap;

int qhx_strmap_init(qhx_strmap *m, uint32_t expect);
void qhx_strmap_free(qhx_strmap *m);
void qhx_strmap_clear(qhx_strmap *m);
/* Returns 1 and sets *value when key is present, else 0. */
int qhx_strmap_get(const qhx_strmap *m, const char *key, size_t len, int32_t *value);
/* Inserts (or overwrites) key -> value; returns 0, or -1 when out of memory. */
int qhx_strmap_put(qhx_strmap *m, const char *key, size_t len, int32_t value);

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
