/* The compact binary tokenizer: the loaded tables as they lie in memory, so that loading is reading
 * the file, one checksum and one sequential check of each table: no parsing, no hashing of keys
 * into new tables. (Read rather than mapped: the tables hold offsets, checked once; a file rewritten
 * in place under a mapping could change them afterwards.)
 *
 *   magic    "QHXTOK\r\n"
 *   header   u32 version, n_ids, n_vocab, n_merges, n_added, norm, flags, pattern_len,
 *            vocab_mask, merges_mask; u64 vocab_words, file size, XXH3-64 of everything after
 *            the header
 *   pattern  the pre-tokenizer regex source (pattern_len bytes; 0 = no split)
 *   lengths  n_ids x u32: each piece's length (0xffffffff = no token)
 *   pieces   their bytes, each followed by a NUL
 *   vocab    vocab_mask + 1 x u64 slots, then vocab_words x u32 records in slot order (hashmap.h)
 *   merges   merges_mask + 1 x (u64 left << 32 | right, u64 rank << 32 | merged id)
 *   added    n_added x (u32 id, u32 length, u8 special, lstrip, rstrip, 0), then their bytes
 *   bytes    256 x u32: the token of each byte
 * Little-endian; each section starts on a multiple of 8 bytes (zero padding). The checksum catches
 * a damaged file; the structural checks make a crafted one (a fuzzer fixes up the checksum) safe. */
#include "tokenizer/tokenizer_internal.h"
#include "util/afile.h"
#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define VERSION 2
#define GAP 0xffffffffu

typedef struct {
    uint32_t version, n_ids, n_vocab, n_merges, n_added, norm, flags, pattern_len, vocab_mask, merges_mask;
    uint64_t vocab_words, size, xxh3;
} header;

#define BODY (8 + sizeof(header)) /* where the checksummed part begins */

void qhx_tokenizer_compact_seal(unsigned char *p, size_t len) {
    if (len < BODY) return;
    header h;
    memcpy(&h, p + 8, sizeof h);
    h.size = len;
    h.xxh3 = XXH3_64bits(p + BODY, len - BODY);
    memcpy(p + 8, &h, sizeof h);
}

/* ---- writing ---- */

typedef qhx_afile writer; /* the checksum covers the body: from BODY on */

static void put(writer *o, const void *p, size_t n) { qhx_afile_put(o, p, n); }
static void put32(writer *o, uint32_t v) { put(o, &v, 4); }
static void pad8(writer *o) {
    static const char zero[8];
    put(o, zero, (8 - o->at % 8) % 8);
}

static void put_tables(writer *o, const qhx_tokenizer *t, const header *h, const uint64_t *vslots, const uint32_t *vrec) {
    put(o, t->split_pattern, h->pattern_len);
    pad8(o);
    for (int i = 0; i < t->n_ids; i++) put32(o, t->piece[i] ? t->piece_len[i] : GAP);
    pad8(o);
    for (int i = 0; i < t->n_ids; i++)
        if (t->piece[i]) put(o, t->piece[i], t->piece_len[i]), put(o, "", 1);
    pad8(o);
    put(o, vslots, ((size_t)h->vocab_mask + 1) * sizeof *vslots);
    put(o, vrec, h->vocab_words * sizeof *vrec);
    pad8(o);
    put(o, t->merges.slot, ((size_t)h->merges_mask + 1) * sizeof *t->merges.slot);
    for (int i = 0; i < t->n_added; i++) {
        const qhx_added_token *a = &t->added[i];
        const uint8_t fl[4] = {(uint8_t)a->special, (uint8_t)a->lstrip, (uint8_t)a->rstrip, 0};
        put32(o, (uint32_t)a->id), put32(o, (uint32_t)a->len), put(o, fl, 4);
    }
    for (int i = 0; i < t->n_added; i++) put(o, t->added[i].content, t->added[i].len);
    pad8(o);
    for (int b = 0; b < 256; b++) put32(o, (uint32_t)t->byte_id[b]);
}

qhx_status qhx_tokenizer_save_compact(const qhx_tokenizer *t, const char *path) {
    uint64_t *vslots;
    uint32_t *vrec;
    if (qhx_strmap_export(&t->vocab, &vslots, &vrec)) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    writer o;
    qhx_status rc = qhx_afile_open(&o, path, BODY);
    if (!rc) {
        header h = {VERSION, (uint32_t)t->n_ids, t->vocab.count, t->merges.count, (uint32_t)t->n_added, (uint32_t)t->norm,
                    (uint32_t)(t->add_prefix_space | t->ignore_merges << 1),
                    t->split_pattern ? (uint32_t)strlen(t->split_pattern) : 0, t->vocab.mask, t->merges.mask,
                    t->vocab.rec_len, 0, 0};
        put(&o, QHX_TOK_MAGIC, 8);
        put(&o, &h, sizeof h); /* size and checksum patched below */
        put_tables(&o, t, &h, vslots, vrec);
        h.size = o.at;
        h.xxh3 = qhx_afile_sum(&o);
        qhx_afile_patch(&o, 8, &h, sizeof h);
        rc = qhx_afile_close(&o, 1);
    }
    free(vslots);
    free(vrec);
    return rc;
}

/* ---- reading ---- */

typedef struct {
    const unsigned char *base, *p, *end;
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

/* skips the padding to the next section */
static int align8(in *r) { return take(r, (8 - (size_t)(r->p - r->base) % 8) % 8) != NULL; }

static uint32_t u32at(const unsigned char *p, size_t i) {
    uint32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}

static qhx_status bad(const char *name, const char *what) {
    return qhx_fail(QHX_ERR_FORMAT, "%s: compact tokenizer: %s", name, what);
}

static qhx_status read_pieces(qhx_tokenizer *t, in *r, const header *h) {
    const unsigned char *lens = take(r, 4ull * h->n_ids);
    if (!lens || !align8(r)) return QHX_ERR_FORMAT;
    for (uint32_t i = 0; i < h->n_ids; i++) {
        const uint32_t n = u32at(lens, i);
        if (n == GAP) continue;
        const unsigned char *b = take(r, (uint64_t)n + 1);
        if (!b) return QHX_ERR_FORMAT;
        if (b[n]) return bad(r->name, "a piece is not NUL-terminated");
        t->piece[i] = (const char *)b;
        t->piece_len[i] = n;
        if (n > t->max_piece) t->max_piece = n;
        t->n_ids = (int)i + 1;
    }
    return align8(r) ? QHX_OK : QHX_ERR_FORMAT;
}

static qhx_status read_vocab(qhx_tokenizer *t, in *r, const header *h) {
    if (h->vocab_mask >= 1u << 30 || h->vocab_words >= UINT32_MAX) return bad(r->name, "vocab table too large");
    const unsigned char *slots = take(r, 8ull * ((uint64_t)h->vocab_mask + 1)), *rec = take(r, 4ull * h->vocab_words);
    if (!slots || !rec || !align8(r)) return QHX_ERR_FORMAT;
    if (qhx_strmap_view(&t->vocab, (const uint64_t *)slots, h->vocab_mask, (const uint32_t *)rec, h->vocab_words, h->n_vocab))
        return bad(r->name, "the vocab table is not laid out as this qhexrt writes it");
    for (size_t at = 0; at < t->vocab.rec_len; at += qhx_strmap_rec_words(t->vocab.rec[at + 1]))
        if (t->vocab.rec[at] >= h->n_ids) return bad(r->name, "a vocab id is out of range");
    return QHX_OK;
}

static qhx_status read_merges(qhx_tokenizer *t, in *r, const header *h) {
    if (h->merges_mask >= 1u << 30) return bad(r->name, "merge table too large");
    const unsigned char *slots = take(r, 16ull * ((uint64_t)h->merges_mask + 1));
    if (!slots) return QHX_ERR_FORMAT;
    if (qhx_u64map_view(&t->merges, (const qhx_u64pair *)slots, h->merges_mask, h->n_merges))
        return bad(r->name, "the merge table is not laid out as this qhexrt writes it");
    for (uint32_t i = 0; i <= t->merges.mask; i++) {
        const qhx_u64pair *s = &t->merges.slot[i];
        if (s->key != UINT64_MAX && ((s->key >> 32) >= h->n_ids || (uint32_t)s->key >= h->n_ids || (uint32_t)s->val >= h->n_ids))
            return bad(r->name, "a merge refers to an id out of range");
    }
    return QHX_OK;
}

static qhx_status read_added(qhx_tokenizer *t, in *r, const header *h) {
    const unsigned char *ae = take(r, 12ull * h->n_added);
    if (!ae) return QHX_ERR_FORMAT;
    t->added = calloc((size_t)h->n_added + 1, sizeof *t->added);
    if (!t->added) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < h->n_added; i++) {
        qhx_added_token *a = &t->added[i];
        a->id = (int32_t)u32at(ae + 12 * i, 0);
        a->len = u32at(ae + 12 * i, 1);
        a->special = ae[12 * i + 8], a->lstrip = ae[12 * i + 9], a->rstrip = ae[12 * i + 10];
        const unsigned char *b = take(r, a->len);
        if (!b) return QHX_ERR_FORMAT;
        if ((uint32_t)a->id >= h->n_ids || !a->len) return bad(r->name, "an added token is invalid");
        if (!(a->content = strndup((const char *)b, a->len))) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
        t->n_added++; /* owned by t from here on, freed with it (a leak fuzz_tokenizer_compact found) */
        if (strlen(a->content) != a->len) return bad(r->name, "an added token contains a NUL");
        t->added_first[b[0]] = 1;
    }
    return align8(r) ? QHX_OK : QHX_ERR_FORMAT;
}

static qhx_status parse(qhx_tokenizer **out_t, const unsigned char *data, size_t len, const char *name) {
    in r = {data, data + 8, data + len, name};
    header h;
    const unsigned char *hp = take(&r, sizeof h);
    if (!hp) return QHX_ERR_FORMAT;
    memcpy(&h, hp, sizeof h);
    if (h.version != VERSION)
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: compact tokenizer version %u, this qhexrt reads %d", name, h.version, VERSION);
    if (h.size != len) return qhx_fail(QHX_ERR_FORMAT, "%s: %zu bytes, its header says %llu (truncated?)", name, len, (unsigned long long)h.size);
    if ((uintptr_t)data % 8) return bad(name, "not 8-byte aligned in memory");
    if (XXH3_64bits(data + BODY, len - BODY) != h.xxh3) return bad(name, "checksum mismatch (damaged file)");
    if (h.n_ids == 0 || h.n_ids > QHX_TOK_MAX_IDS || h.n_vocab > h.n_ids || h.n_merges > QHX_TOK_MAX_IDS || h.n_added > h.n_ids)
        return bad(name, "implausible table sizes");
    qhx_tokenizer *t = qhx_tokenizer_alloc((int)h.n_ids);
    if (!t) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    *out_t = t;
    t->norm = (int)h.norm;
    t->add_prefix_space = h.flags & 1;
    t->ignore_merges = (h.flags >> 1) & 1;
    const unsigned char *pat = take(&r, h.pattern_len);
    if (!pat || !align8(&r)) return QHX_ERR_FORMAT;
    if (h.pattern_len) {
        char *p = strndup((const char *)pat, h.pattern_len);
        if (!p) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
        qhx_status rc = qhx_tokenizer_compile_split(t, p, name);
        free(p);
        if (rc) return rc;
    }
    qhx_status rc;
    if ((rc = read_pieces(t, &r, &h)) || (rc = read_vocab(t, &r, &h)) || (rc = read_merges(t, &r, &h)) ||
        (rc = read_added(t, &r, &h)))
        return rc;
    const unsigned char *bytes = take(&r, 1024);
    if (!bytes) return QHX_ERR_FORMAT;
    for (int b = 0; b < 256; b++) {
        t->byte_id[b] = (int32_t)u32at(bytes, (size_t)b);
        if ((uint32_t)t->byte_id[b] >= h.n_ids) return bad(name, "a byte token is out of range");
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
