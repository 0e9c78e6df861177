#include "util/hashmap.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS (1u << 30)

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t p = 16;
    while (p < n && p < MAX_SLOTS) p <<= 1;
    return p;
}

/* ---- string -> int32 ---- */

int qhx_strmap_init(qhx_strmap *m, uint32_t expect) {
    memset(m, 0, sizeof *m);
    m->mask = pow2_at_least((uint64_t)expect * 2) - 1;
    m->rec_cap = (size_t)(expect < 16 ? 16 : expect) * 4;
    m->slots = calloc((size_t)m->mask + 1, sizeof *m->slots);
    m->rec = malloc(m->rec_cap * sizeof *m->rec);
    return m->slots && m->rec ? 0 : -1;
}

void qhx_strmap_free(qhx_strmap *m) {
    if (!m->borrowed) {
        free(m->slots);
        free(m->rec);
    }
    memset(m, 0, sizeof *m);
}

void qhx_strmap_clear(qhx_strmap *m) {
    if (m->borrowed) return;
    memset(m->slots, 0, sizeof(uint64_t) * ((size_t)m->mask + 1));
    m->count = 0;
    m->rec_len = 0;
}

static void place(uint64_t *slots, uint32_t mask, uint64_t h, size_t at) {
    uint32_t i = (uint32_t)h & mask;
    while (slots[i]) i = (i + 1) & mask;
    slots[i] = (h >> 32 << 32) | (uint32_t)(at + 1);
}

/* Twice the slots, every record placed again. */
static int grow(qhx_strmap *m) {
    if (m->mask + 1 >= MAX_SLOTS) return -1;
    const uint32_t nmask = m->mask * 2 + 1;
    uint64_t *slots = calloc((size_t)nmask + 1, sizeof *slots);
    if (!slots) return -1;
    for (size_t at = 0; at < m->rec_len; at += qhx_strmap_rec_words(m->rec[at + 1]))
        place(slots, nmask, qhx_hash_bytes((const char *)(m->rec + at + 2), m->rec[at + 1]), at);
    free(m->slots);
    m->slots = slots;
    m->mask = nmask;
    return 0;
}

int qhx_strmap_put(qhx_strmap *m, const char *key, size_t len, int32_t value) {
    if (m->borrowed || len > UINT32_MAX / 2) return -1;
    const uint64_t h = qhx_hash_bytes(key, len);
    uint32_t *r = qhx_strmap_rec_hashed(m, key, len, h);
    if (r) {
        r[0] = (uint32_t)value;
        return 0;
    }
    if ((m->count + 1) * 2 > m->mask + 1 && grow(m)) return -1;
    const size_t words = qhx_strmap_rec_words(len);
    if (m->rec_len + words > m->rec_cap) {
        const size_t ncap = (m->rec_cap + words) * 2;
        uint32_t *grown = ncap >= UINT32_MAX ? NULL : realloc(m->rec, ncap * sizeof *grown);
        if (!grown) return -1;
        m->rec = grown;
        m->rec_cap = ncap;
    }
    r = m->rec + m->rec_len;
    r[0] = (uint32_t)value;
    r[1] = (uint32_t)len;
    r[words - 1] = 0; /* the padding, so that exported files are reproducible */
    memcpy(r + 2, key, len);
    place(m->slots, m->mask, h, m->rec_len);
    m->rec_len += words;
    m->count++;
    return 0;
}

int qhx_strmap_export(const qhx_strmap *m, uint64_t **slots_out, uint32_t **rec_out) {
    uint64_t *slots = malloc(((size_t)m->mask + 1) * sizeof *slots);
    uint32_t *rec = malloc((m->rec_len + 1) * sizeof *rec);
    if (!slots || !rec) { free(slots), free(rec); return -1; }
    size_t out = 0;
    for (uint32_t i = 0; i <= m->mask; i++) {
        slots[i] = 0;
        if (!m->slots[i]) continue;
        const uint32_t *r = m->rec + ((uint32_t)m->slots[i] - 1);
        const size_t words = qhx_strmap_rec_words(r[1]);
        memcpy(rec + out, r, words * sizeof *rec);
        slots[i] = (m->slots[i] >> 32 << 32) | (uint32_t)(out + 1);
        out += words;
    }
    *slots_out = slots;
    *rec_out = rec;
    return 0;
}

/* Linear probing leaves a key at its home slot or after it with no empty slot in between: its
 * home lies in the run of occupied slots that ends at the key. Walking the slots in order, the
 * run's first slot is known, so each key is checked in O(1) and the whole table in one pass. */
static int in_run(uint32_t i, uint32_t home, uint32_t run, uint32_t mask) {
    return ((i - home) & mask) <= ((i - run) & mask);
}

static int shape_ok(uint32_t mask, uint32_t count) {
    return mask >= 15 && mask < MAX_SLOTS && !(mask & (mask + 1)) && count <= (mask + 1) / 2;
}

int qhx_strmap_view(qhx_strmap *m, const uint64_t *slots, uint32_t mask, const uint32_t *rec, size_t rec_len, uint32_t count) {
    if (!shape_ok(mask, count) || rec_len >= UINT32_MAX) return -1;
    uint32_t j = mask; /* slot 0's run may have begun at the end of the table */
    while (j > 0 && slots[j]) j--;
    uint32_t run = (j + 1) & mask, seen = 0;
    size_t at = 0;
    for (uint32_t i = 0; i <= mask; i++) {
        const uint64_t s = slots[i];
        if (!s) { run = (i + 1) & mask; continue; }
        if ((uint32_t)s - 1 != at || rec_len - at < 2) return -1;
        const uint32_t len = rec[at + 1];
        const size_t words = qhx_strmap_rec_words(len);
        if (words > rec_len - at) return -1;
        const uint64_t h = qhx_hash_bytes((const char *)(rec + at + 2), len);
        if ((uint32_t)(h >> 32) != (uint32_t)(s >> 32) || !in_run(i, (uint32_t)h & mask, run, mask)) return -1;
        at += words;
        seen++;
    }
    if (seen != count || at != rec_len) return -1;
    *m = (qhx_strmap){(uint64_t *)slots, (uint32_t *)rec, rec_len, rec_len, mask, count, 1};
    return 0;
}

/* ---- uint64 -> uint64 ---- */

int qhx_u64map_init(qhx_u64map *m, uint32_t expect) {
    memset(m, 0, sizeof *m);
    m->mask = pow2_at_least((uint64_t)expect * 2) - 1;
    m->slot = malloc(sizeof *m->slot * ((size_t)m->mask + 1));
    if (!m->slot) return -1;
    memset(m->slot, 0xff, sizeof *m->slot * ((size_t)m->mask + 1));
    return 0;
}

void qhx_u64map_free(qhx_u64map *m) {
    if (!m->borrowed) free(m->slot);
    memset(m, 0, sizeof *m);
}

int qhx_u64map_put(qhx_u64map *m, uint64_t key, uint64_t val) {
    if (m->borrowed || (m->count + 1) * 2 > m->mask + 1) return -1; /* sized up front; never over half full */
    uint32_t i = qhx_u64map_home(key, m->mask);
    while (m->slot[i].key != UINT64_MAX && m->slot[i].key != key) i = (i + 1) & m->mask;
    if (m->slot[i].key == UINT64_MAX) m->count++;
    m->slot[i] = (qhx_u64pair){key, val};
    return 0;
}

int qhx_u64map_view(qhx_u64map *m, const qhx_u64pair *slot, uint32_t mask, uint32_t count) {
    if (!shape_ok(mask, count)) return -1;
    uint32_t j = mask;
    while (j > 0 && slot[j].key != UINT64_MAX) j--;
    uint32_t run = (j + 1) & mask, seen = 0;
    for (uint32_t i = 0; i <= mask; i++) {
        if (slot[i].key == UINT64_MAX) { run = (i + 1) & mask; continue; }
        if (!in_run(i, qhx_u64map_home(slot[i].key, mask), run, mask)) return -1;
        seen++;
    }
    if (seen != count) return -1;
    *m = (qhx_u64map){(qhx_u64pair *)slot, mask, count, 1};
    return 0;
}
