/* The compact binary tokenizer: the loaded tables written out as they are, so loading is a few
 * bounded copies and hash-map inserts instead of parsing ~10 MB of JSON.
 *
 *   header   magic "QHXTOK\r\n", u32 version, n_ids, n_vocab, n_merges, n_added, norm, flags,
 *            pattern_len, u64 file size
 *   pattern  the pre-tokenizer regex source (pattern_len bytes; 0 = no split)
 *   pieces   n_ids x u32 length (0xffffffff = no token), then their bytes
 *   vocab    n_vocab x (u32 id, u32 length), then their bytes
 *   merges   n_merges x (u64 pair, u64 rank << 32 | merged id), as the encoder looks them up
 *   added    n_added x (u32 id, u32 length, u8 special, lstrip, rstrip, pad), then their bytes
 *   bytes    256 x u32: the token of each byte
 * Little-endian; every count and length is checked against the file before it is used. */
#include "tokenizer/tokenizer_internal.h"
#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VERSION 1
#define GAP 0xffffffffu
#define MAX_IDS (1 << 24)

typedef struct {
    uint32_t version, n_ids, n_vocab, n_merges, n_added, norm, flags, pattern_len;
    uint64_t size;
} header;

/* ---- writing ---- */

typedef struct {
    FILE *f;
    int bad;
} writer;

static void put(writer *o, const void *p, size_t n) {
    if (!o->bad && n && fwrite(p, 1, n, o->f) != n) o->bad = 1;
}
static void put32(writer *o, uint32_t v) { put(o, &v, 4); }

qhx_status qhx_tokenizer_save_compact(const qhx_tokenizer *t, const char *path) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    writer o = {fopen(tmp, "wb"), 0};
    if (!o.f) return qhx_fail(QHX_ERR_IO, "%s: %s", tmp, strerror(errno));
    header h = {VERSION, (uint32_t)t->n_ids, t->vocab.count, t->merges.count, (uint32_t)t->n_added, (uint32_t)t->norm,
                (uint32_t)(t->add_prefix_space | t->ignore_merges << 1), t->split_pattern ? (uint32_t)strlen(t->split_pattern) : 0, 0};
    put(&o, QHX_TOK_MAGIC, 8);
    put(&o, &h, sizeof h); /* size patched below */
    put(&o, t->split_pattern, h.pattern_len);
    for (int i = 0; i < t->n_ids; i++) put32(&o, t->piece[i] ? t->piece_len[i] : GAP);
    for (int i = 0; i < t->n_ids; i++)
        if (t->piece[i]) put(&o, t->piece[i], t->piece_len[i]);
    for (uint32_t e = 0; e < t->vocab.count; e++) put32(&o, (uint32_t)t->vocab.entry[e].value), put32(&o, t->vocab.entry[e].len);
    for (uint32_t e = 0; e < t->vocab.count; e++) put(&o, t->vocab.arena + t->vocab.entry[e].off, t->vocab.entry[e].len);
    for (uint32_t s = 0; s <= t->merges.mask; s++)
        if (t->merges.keys[s] != UINT64_MAX) put(&o, &t->merges.keys[s], 8), put(&o, &t->merges.vals[s], 8);
    for (int i = 0; i < t->n_added; i++) {
        const qhx_added_token *a = &t->added[i];
        const uint8_t fl[4] = {(uint8_t)a->special, (uint8_t)a->lstrip, (uint8_t)a->rstrip, 0};
        put32(&o, (uint32_t)a->id), put32(&o, (uint32_t)a->len), put(&o, fl, 4);
    }
    for (int i = 0; i < t->n_added; i++) put(&o, t->added[i].content, t->added[i].len);
    for (int b = 0; b < 256; b++) put32(&o, (uint32_t)t->byte_id[b]);
    long size = ftell(o.f);
    h.size = size > 0 ? (uint64_t)size : 0;
    if (!o.bad && (fseek(o.f, 8, SEEK_SET) || fwrite(&h, sizeof h, 1, o.f) != 1)) o.bad = 1;
    if (fflush(o.f) || fsync(fileno(o.f))) o.bad = 1;
    if (fclose(o.f)) o.bad = 1;
    if (o.bad || rename(tmp, path)) {
        remove(tmp);
        return qhx_fail(QHX_ERR_IO, "%s: write failed", path);
    }
    return QHX_OK;
}

/* ---- reading ---- */

typedef struct {
    const unsigned char *p, *end;
    const char *name;
} in;

/* the next n bytes, or NULL (and the error set) when the file ends first */
static const unsigned char *take(in *r, uint64_t n) {
    if (n > (uint64_t)(r->end - r->p)) {
        qhx_fail(QHX_ERR_FORMAT, "%s: truncated compact tokenizer", r->name);
        return NULL;
    }
    const unsigned char *p = r->p;
    r->p += n;
    return p;
}

static uint32_t u32at(const unsigned char *p, size_t i) {
    uint32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}

static qhx_status parse(qhx_tokenizer **out_t, const unsigned char *data, size_t len, const char *name) {
    in r = {data + 8, data + len, name};
    header h;
    const unsigned char *hp = take(&r, sizeof h);
    if (!hp) return QHX_ERR_FORMAT;
    memcpy(&h, hp, sizeof h);
    if (h.version != VERSION)
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: compact tokenizer version %u, this qhexrt reads %d", name, h.version, VERSION);
    if (h.size != len) return qhx_fail(QHX_ERR_FORMAT, "%s: %zu bytes, its header says %llu (truncated?)", name, len, (unsigned long long)h.size);
    if (h.n_ids == 0 || h.n_ids > MAX_IDS || h.n_vocab > h.n_ids || h.n_merges > MAX_IDS || h.n_added > h.n_ids)
        return qhx_fail(QHX_ERR_FORMAT, "%s: implausible table sizes", name);
    qhx_tokenizer *t = qhx_tokenizer_alloc((int)h.n_ids);
    if (!t) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    *out_t = t;
    t->norm = (int)h.norm;
    t->add_prefix_space = h.flags & 1;
    t->ignore_merges = (h.flags >> 1) & 1;
    const unsigned char *pat = take(&r, h.pattern_len);
    if (!pat) return QHX_ERR_FORMAT;
    if (h.pattern_len) {
        char *p = strndup((const char *)pat, h.pattern_len);
        if (!p) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
        qhx_status rc = qhx_tokenizer_compile_split(t, p, name);
        free(p);
        if (rc) return rc;
    }
    const unsigned char *lens = take(&r, 4ull * h.n_ids);
    if (!lens) return QHX_ERR_FORMAT;
    uint64_t total = 0; /* every piece with its NUL, in one block */
    for (uint32_t i = 0; i < h.n_ids; i++)
        if (u32at(lens, i) != GAP) total += (uint64_t)u32at(lens, i) + 1;
    if (total > (uint64_t)(r.end - r.p) + h.n_ids) return qhx_fail(QHX_ERR_FORMAT, "%s: piece lengths exceed the file", name);
    if (!(t->piece_block = malloc((size_t)total + 1))) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    char *at = t->piece_block;
    for (uint32_t i = 0; i < h.n_ids; i++) {
        const uint32_t n = u32at(lens, i);
        if (n == GAP) continue;
        const unsigned char *b = take(&r, n);
        if (!b) return QHX_ERR_FORMAT;
        t->piece[i] = at;
        memcpy(at, b, n);
        at[n] = 0;
        at += (size_t)n + 1;
        t->piece_len[i] = n;
        if (n > t->max_piece) t->max_piece = n;
        t->n_ids = (int)i + 1;
    }
    const unsigned char *ve = take(&r, 8ull * h.n_vocab);
    if (!ve) return QHX_ERR_FORMAT;
    if (qhx_strmap_init(&t->vocab, h.n_vocab + 1) || qhx_u64map_init(&t->merges, h.n_merges + 1))
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    for (uint32_t e = 0; e < h.n_vocab; e++) {
        const uint32_t id = u32at(ve, 2 * e), n = u32at(ve, 2 * e + 1);
        const unsigned char *b = take(&r, n);
        if (!b) return QHX_ERR_FORMAT;
        if (id >= h.n_ids) return qhx_fail(QHX_ERR_FORMAT, "%s: vocab id %u out of range", name, id);
        if (qhx_strmap_put(&t->vocab, (const char *)b, n, (int32_t)id) < 0) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    const unsigned char *me = take(&r, 16ull * h.n_merges);
    if (!me) return QHX_ERR_FORMAT;
    for (uint32_t m = 0; m < h.n_merges; m++) {
        uint64_t key, val;
        memcpy(&key, me + 16 * m, 8);
        memcpy(&val, me + 16 * m + 8, 8);
        if ((key >> 32) >= h.n_ids || (uint32_t)key >= h.n_ids || (uint32_t)val >= h.n_ids)
            return qhx_fail(QHX_ERR_FORMAT, "%s: merge %u refers to an id out of range", name, m);
        if (qhx_u64map_put(&t->merges, key, val)) return qhx_fail(QHX_ERR_FORMAT, "%s: duplicate or too many merges", name);
    }
    const unsigned char *ae = take(&r, 12ull * h.n_added);
    if (!ae) return QHX_ERR_FORMAT;
    t->added = calloc((size_t)h.n_added + 1, sizeof *t->added);
    if (!t->added) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < h.n_added; i++) {
        qhx_added_token *a = &t->added[i];
        a->id = (int32_t)u32at(ae + 12 * i, 0);
        a->len = u32at(ae + 12 * i, 1);
        a->special = ae[12 * i + 8], a->lstrip = ae[12 * i + 9], a->rstrip = ae[12 * i + 10];
        const unsigned char *b = take(&r, a->len);
        if (!b) return QHX_ERR_FORMAT;
        if ((uint32_t)a->id >= h.n_ids || !a->len) return qhx_fail(QHX_ERR_FORMAT, "%s: added token %u is invalid", name, i);
        if (!(a->content = strndup((const char *)b, a->len))) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
        t->n_added++; /* owned by t from here on, freed with it (a leak fuzz_tokenizer_compact found) */
        if (strlen(a->content) != a->len) return qhx_fail(QHX_ERR_FORMAT, "%s: added token %u contains a NUL", name, i);
        t->added_first[b[0]] = 1;
    }
    const unsigned char *bytes = take(&r, 1024);
    if (!bytes) return QHX_ERR_FORMAT;
    for (int b = 0; b < 256; b++) {
        t->byte_id[b] = (int32_t)u32at(bytes, (size_t)b);
        if ((uint32_t)t->byte_id[b] >= h.n_ids) return qhx_fail(QHX_ERR_FORMAT, "%s: byte token out of range", name);
    }
    if (r.p != r.end) return qhx_fail(QHX_ERR_FORMAT, "%s: %zu trailing bytes", name, (size_t)(r.end - r.p));
    return QHX_OK;
}

qhx_status qhx_tokenizer_parse_compact(const unsigned char *p, size_t len, const char *name, qhx_tokenizer **out) {
    *out = NULL;
    qhx_tokenizer *t = NULL;
    qhx_status rc = parse(&t, p, len, name);
    if (rc) { qhx_tokenizer_free(t); return rc; }
    *out = t;
    return QHX_OK;
}
