/* Two open-addressing hash maps the tokenizer needs: byte string -> int32 (the vocabulary and
 * the word cache) and uint64 -> uint64 (merge pairs). Both are flat arrays with offsets, never
 * pointers, so a compact tokenizer file can carry them ready-made: qhx_*map_view adopts such a
 * table after checking that every key sits where a lookup will look for it. */
#ifndef QHX_HASHMAP_H
#define QHX_HASHMAP_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Eight bytes per multiply (keys are mostly shorter than that), then murmur3's finalizer: the low
 * bits pick the slot, the high 32 are the tag. Compact files store these hashes: a change here
 * needs a new compact tokenizer version. */
static inline uint64_t qhx_hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    if (n) {
        uint64_t w = 0;
        for (size_t i = 0; i < n; i++) w |= (uint64_t)(unsigned char)p[i] << (8 * i);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* A record is [value, length, key bytes padded to 4]: one cache line holds all a lookup compares,
 * so a hit costs the slot and the record, nothing else. */
typedef struct {
    uint64_t *slots;          /* (hash high 32 bits << 32) | (record offset in words + 1); 0 = empty */
    uint32_t *rec;            /* the records, one after another */
    size_t rec_len, rec_cap;  /* in 4-byte words */
    uint32_t mask, count;
    int borrowed;             /* slots and rec belong to a mapped file: never freed nor grown */
} qhx_strmap;

static inline size_t qhx_strmap_rec_words(size_t key_len) { return 2 + (key_len + 3) / 4; }

int qhx_strmap_init(qhx_strmap *m, uint32_t expect);
void qhx_strmap_free(qhx_strmap *m);
void qhx_strmap_clear(qhx_strmap *m);
/* Inserts (or overwrites) key -> value; returns 0, or -1 when out of memory or borrowed. */
int qhx_strmap_put(qhx_strmap *m, const char *key, size_t len, int32_t value);
/* The record of key (h = qhx_hash_bytes(key, len)), or NULL. */
static inline uint32_t *qhx_strmap_rec_hashed(const qhx_strmap *m, const char *key, size_t len, uint64_t h) {
    const uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & m->mask;; i = (i + 1) & m->mask) {
        const uint64_t s = m->slots[i];
        if (!s) return NULL;
        uint32_t *r = m->rec + ((uint32_t)s - 1);
        if ((uint32_t)(s >> 32) == tag && r[1] == len && !memcmp(r + 2, key, len)) return r;
    }
}
static inline uint32_t *qhx_strmap_rec(const qhx_strmap *m, const char *key, size_t len) {
    return qhx_strmap_rec_hashed(m, key, len, qhx_hash_bytes(key, len));
}
/* Returns 1 and sets *value when key is present, else 0. */
static inline int qhx_strmap_get(const qhx_strmap *m, const char *key, size_t len, int32_t *value) {
    const uint32_t *r = qhx_strmap_rec(m, key, len);
    if (r) *value = (int32_t)r[0];
    return r != NULL;
}
/* The table laid out for a file: the same slots, with the records in slot order (so that
 * qhx_strmap_view checks it in one sequential pass). Both arrays malloc'd; -1 when out of memory. */
int qhx_strmap_export(const qhx_strmap *m, uint64_t **slots, uint32_t **rec);
/* Adopts an exported table lying in memory the caller keeps alive. Returns 0, or -1 when it is
 * not one qhx_strmap_export could have written (a slot out of place, a record out of bounds,
 * over half full). */
int qhx_strmap_view(qhx_strmap *m, const uint64_t *slots, uint32_t mask, const uint32_t *rec, size_t rec_len, uint32_t count);

typedef struct {
    uint64_t key, val;
} qhx_u64pair;

typedef struct {
    qhx_u64pair *slot; /* key UINT64_MAX = empty; key and value share a cache line */
    uint32_t mask, count;
    int borrowed;
} qhx_u64map;

static inline uint32_t qhx_u64map_home(uint64_t key, uint32_t mask) {
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & mask;
}

int qhx_u64map_init(qhx_u64map *m, uint32_t expect);
void qhx_u64map_free(qhx_u64map *m);
/* Keys must not be UINT64_MAX (the empty marker). Returns 0, or -1 when full or borrowed. */
int qhx_u64map_put(qhx_u64map *m, uint64_t key, uint64_t val);
/* Returns 1 and sets *val when found. */
static inline int qhx_u64map_get(const qhx_u64map *m, uint64_t key, uint64_t *val) {
    for (uint32_t i = qhx_u64map_home(key, m->mask);; i = (i + 1) & m->mask) {
        if (m->slot[i].key == key) { *val = m->slot[i].val; return 1; }
        if (m->slot[i].key == UINT64_MAX) return 0;
    }
}
/* Adopts mask + 1 slots in memory the caller keeps alive (as qhx_strmap_view). */
int qhx_u64map_view(qhx_u64map *m, const qhx_u64pair *slot, uint32_t mask, uint32_t count);

#endif
