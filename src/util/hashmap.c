#include "util/hashmap.h"

#include <stdlib.h>
#include <string.h>

static uint32_t pow2_at_least(uint32_t n) {
    uint32_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

int qhx_strmap_init(qhx_strmap *m, uint32_t expect) {
    memset(m, 0, sizeof *m);
    m->mask = pow2_at_least(expect * 2) - 1;
    m->cap_entries = expect < 16 ? 16 : expect;
    m->slots = calloc((size_t)m->mask + 1, sizeof *m->slots);
    m->entry = malloc(sizeof *m->entry * m->cap_entries);
    m->arena_cap = (size_t)m->cap_entries * 8;
    m->arena = malloc(m->arena_cap);
    return m->slots && m->entry && m->arena ? 0 : -1;
}

void qhx_strmap_free(qhx_strmap *m) {
    free(m->slots);
    free(m->entry);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

void qhx_strmap_clear(qhx_strmap *m) {
    memset(m->slots, 0, sizeof(uint64_t) * ((size_t)m->mask + 1));
    m->count = 0;
    m->arena_len = 0;
}

int32_t qhx_strmap_find(const qhx_strmap *m, const char *key, size_t len) {
    uint64_t h = qhx_hash_bytes(key, len);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & m->mask;; i = (i + 1) & m->mask) {
        uint64_t s = m->slots[i];
        if (!s) return -1;
        uint32_t e = (uint32_t)s - 1;
        if ((uint32_t)(s >> 32) == tag && m->entry[e].len == len && !memcmp(m->arena + m->entry[e].off, key, len))
            return (int32_t)e;
    }
}

static int grow(qhx_strmap *m) {
    uint32_t ncap = m->cap_entries * 2;
    qhx_strmap_entry *en = realloc(m->entry, sizeof *en * ncap);
    if (en) m->entry = en;
    uint64_t *slots = calloc(((size_t)m->mask + 1) * 2, sizeof *slots);
    if (!en || !slots) { free(slots); return -1; }
    m->cap_entries = ncap;
    uint32_t nmask = m->mask * 2 + 1;
    for (uint32_t e = 0; e < m->count; e++) {
        uint64_t h = qhx_hash_bytes(m->arena + m->entry[e].off, m->entry[e].len);
        uint32_t i = (uint32_t)h & nmask;
        while (slots[i]) i = (i + 1) & nmask;
        slots[i] = (h >> 32 << 32) | (e + 1);
    }
    free(m->slots);
    m->slots = slots;
    m->mask = nmask;
    return 0;
}

int32_t qhx_strmap_put(qhx_strmap *m, const char *key, size_t len, int32_t value) {
    int32_t e = qhx_strmap_find(m, key, len);
    if (e >= 0) { m->entry[e].value = value; return e; }
    if (len > UINT32_MAX / 2 || (m->count + 1 >= m->cap_entries && grow(m))) return -1;
    if (m->arena_len + len > m->arena_cap) {
        size_t ncap = (m->arena_cap + len) * 2;
        char *a = ncap > UINT32_MAX ? NULL : realloc(m->arena, ncap);
        if (!a) return -1;
        m->arena = a;
        m->arena_cap = ncap;
    }
    e = (int32_t)m->count++;
    m->entry[e] = (qhx_strmap_entry){(uint32_t)m->arena_len, (uint32_t)len, value};
    memcpy(m->arena + m->arena_len, key, len);
    m->arena_len += len;
    uint64_t h = qhx_hash_bytes(key, len);
    uint32_t i = (uint32_t)h & m->mask;
    while (m->slots[i]) i = (i + 1) & m->mask;
    m->slots[i] = (h >> 32 << 32) | (uint32_t)(e + 1);
    return e;
}

int qhx_u64map_init(qhx_u64map *m, uint32_t expect) {
    m->mask = pow2_at_least(expect * 2) - 1;
    m->count = 0;
    m->keys = malloc(sizeof(uint64_t) * ((size_t)m->mask + 1));
    m->vals = malloc(sizeof(uint64_t) * ((size_t)m->mask + 1));
    if (!m->keys || !m->vals) return -1;
    memset(m->keys, 0xff, sizeof(uint64_t) * ((size_t)m->mask + 1));
    return 0;
}

void qhx_u64map_free(qhx_u64map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

int qhx_u64map_put(qhx_u64map *m, uint64_t key, uint64_t val) {
    if (m->count * 2 > m->mask) return -1; /* sized up front; never over half full */
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    uint32_t i = (uint32_t)(h >> 32) & m->mask;
    while (m->keys[i] != UINT64_MAX && m->keys[i] != key) i = (i + 1) & m->mask;
    if (m->keys[i] == UINT64_MAX) m->count++;
    m->keys[i] = key;
    m->vals[i] = val;
    return 0;
}
