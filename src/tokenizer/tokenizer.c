/*
 * Encoding and decoding, in Hugging Face's order: split out added tokens (leftmost-longest), then
 * per remaining segment normalize (utf8proc), split with the pre-tokenizer regex (PCRE2, JIT),
 * and run byte-level BPE on each piece (lowest merge rank first, leftmost on ties). Pieces are
 * memoised in a word cache, which is what makes repeated text cheap.
 */
#include "tokenizer/tokenizer_internal.h"
#include "grammar/grammar.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/mapfile.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

typedef struct {
    int32_t *ids;
    size_t n, cap;
} idvec;

static int push(idvec *v, int32_t id) {
    if (qhx_reserve(&v->ids, &v->cap, v->n + 1, sizeof *v->ids)) return -1;
    v->ids[v->n++] = id;
    return 0;
}

int qhx_tokenizer_n_ids(const qhx_tokenizer *t) { return t->n_ids; }

size_t qhx_tokenizer_max_piece(const qhx_tokenizer *t) { return t->max_piece; }

int32_t qhx_tokenizer_find_added(const qhx_tokenizer *t, const char *content) {
    for (int i = 0; i < t->n_added; i++)
        if (!strcmp(t->added[i].content, content)) return t->added[i].id;
    return -1;
}

/* ---- BPE on one piece ---------------------------------------------------------------------- */

typedef struct {
    uint32_t rank, pos;
} merge_cand;

static int cand_less(merge_cand a, merge_cand b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void heap_push(merge_cand *h, size_t *n, merge_cand c) {
    size_t i = (*n)++;
    while (i && cand_less(c, h[(i - 1) / 2])) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = c;
}

static merge_cand heap_pop(merge_cand *h, size_t *n) {
    merge_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(h[c + 1], h[c])) c++;
        if (!cand_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Merges the symbols of piece[0..n) into out. Work arrays come from the caller (sized n). */
static int bpe(const qhx_tokenizer *t, const unsigned char *piece, size_t n, idvec *out, int32_t *sym, int32_t *next,
               int32_t *prev, merge_cand *heap) {
    if (t->ignore_merges) {
        int32_t id;
        if (qhx_strmap_get(&t->vocab, (const char *)piece, n, &id)) return push(out, id);
    }
    size_t hn = 0;
    uint64_t v;
    for (size_t i = 0; i < n; i++) {
        sym[i] = t->byte_id[piece[i]];
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (qhx_u64map_get(&t->merges, (uint64_t)(uint32_t)sym[i] << 32 | (uint32_t)sym[i + 1], &v))
            heap_push(heap, &hn, (merge_cand){(uint32_t)(v >> 32), (uint32_t)i});
    while (hn) {
        merge_cand c = heap_pop(heap, &hn);
        int32_t p = (int32_t)c.pos, q = next[p];
        if (sym[p] < 0 || q < 0) continue; /* stale: p was merged away or is now last */
        if (!qhx_u64map_get(&t->merges, (uint64_t)(uint32_t)sym[p] << 32 | (uint32_t)sym[q], &v) || (uint32_t)(v >> 32) != c.rank)
            continue; /* stale: a neighbour changed */
        sym[p] = (int32_t)(uint32_t)v;
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0 && qhx_u64map_get(&t->merges, (uint64_t)(uint32_t)sym[prev[p]] << 32 | (uint32_t)sym[p], &v))
            heap_push(heap, &hn, (merge_cand){(uint32_t)(v >> 32), (uint32_t)prev[p]});
        if (next[p] >= 0 && qhx_u64map_get(&t->merges, (uint64_t)(uint32_t)sym[p] << 32 | (uint32_t)sym[next[p]], &v))
            heap_push(heap, &hn, (merge_cand){(uint32_t)(v >> 32), (uint32_t)p});
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        if (push(out, sym[i])) return -1;
    return 0;
}

typedef struct {
    int32_t *sym, *next, *prev;
    merge_cand *heap;
    size_t cap[4];
} bpe_work;

#define CACHE_MAX_PIECE 256
#define CACHE_MAX_ENTRIES (1u << 20)

static int encode_piece(qhx_tokenizer *t, const unsigned char *p, size_t n, idvec *out, bpe_work *w) {
    if (n == 1) return push(out, t->byte_id[p[0]]);
    const int cacheable = n <= CACHE_MAX_PIECE;
    if (cacheable) {
        pthread_mutex_lock(&t->lock);
        int32_t at;
        if (qhx_strmap_get(&t->cache, (const char *)p, n, &at)) {
            const int32_t *c = t->cache_ids + at;
            int rc = 0;
            for (int32_t i = 1; i <= c[0] && !rc; i++) rc = push(out, c[i]);
            pthread_mutex_unlock(&t->lock);
            return rc;
        }
        pthread_mutex_unlock(&t->lock);
    }
    if (qhx_reserve(&w->sym, &w->cap[0], n, sizeof *w->sym) || qhx_reserve(&w->next, &w->cap[1], n, sizeof *w->next) ||
        qhx_reserve(&w->prev, &w->cap[2], n, sizeof *w->prev) ||
        qhx_reserve(&w->heap, &w->cap[3], 2 * n, sizeof *w->heap)) /* each merge pushes at most 2 */
        return -1;
    size_t start = out->n;
    if (bpe(t, p, n, out, w->sym, w->next, w->prev, w->heap)) return -1;
    if (cacheable) {
        size_t cnt = out->n - start;
        pthread_mutex_lock(&t->lock);
        if (t->cache.count >= CACHE_MAX_ENTRIES) { qhx_strmap_clear(&t->cache); t->cache_len = 0; }
        if (!qhx_reserve(&t->cache_ids, &t->cache_cap, t->cache_len + cnt + 1, sizeof *t->cache_ids) &&
            !qhx_strmap_put(&t->cache, (const char *)p, n, (int32_t)t->cache_len)) {
            t->cache_ids[t->cache_len] = (int32_t)cnt;
            memcpy(t->cache_ids + t->cache_len + 1, out->ids + start, cnt * sizeof(int32_t));
            t->cache_len += cnt + 1;
        }
        pthread_mutex_unlock(&t->lock);
    }
    return 0;
}

/* ---- a segment between added tokens -------------------------------------------------------- */

static qhx_status encode_segment(qhx_tokenizer *t, const char *s, size_t n, idvec *out, bpe_work *w,
                                 pcre2_match_data *md) {
    if (!n) return QHX_OK;
    utf8proc_uint8_t *norm = NULL;
    if (t->norm) {
        int ascii = 1;
        for (size_t i = 0; i < n && ascii; i++) ascii = (unsigned char)s[i] < 0x80;
        if (!ascii) { /* normalization forms leave ASCII unchanged */
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &norm, t->norm);
            if (r < 0) return qhx_fail(QHX_ERR_NOMEM, "normalizer: %s", utf8proc_errmsg(r));
            s = (const char *)norm;
            n = (size_t)r;
        }
    }
    char *prefixed = NULL;
    if (t->add_prefix_space && s[0] != ' ') {
        prefixed = malloc(n + 1);
        if (!prefixed) { free(norm); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
        prefixed[0] = ' ';
        memcpy(prefixed + 1, s, n);
        s = prefixed;
        n++;
    }
    qhx_status rc = QHX_OK;
    const unsigned char *u = (const unsigned char *)s;
    if (!t->split) {
        if (encode_piece(t, u, n, out, w)) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    } else {
        size_t pos = 0, gap = 0;
        while (pos <= n && !rc) {
            int m = pcre2_match(t->split, u, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (m < 0) break;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[1] == ov[0]) { /* empty match: step one character */
                pos = ov[0] + 1;
                while (pos < n && (u[pos] & 0xc0) == 0x80) pos++;
                if (ov[0] >= n) break;
                continue;
            }
            if (ov[0] > gap && encode_piece(t, u + gap, ov[0] - gap, out, w)) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
            if (!rc && encode_piece(t, u + ov[0], ov[1] - ov[0], out, w)) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
            pos = gap = ov[1];
        }
        if (!rc && gap < n && encode_piece(t, u + gap, n - gap, out, w)) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    free(prefixed);
    free(norm);
    return rc;
}

/* ---- whole texts --------------------------------------------------------------------------- */

/* Leftmost-longest added token starting exactly at s[i], or NULL. */
static const qhx_added_token *added_at(const qhx_tokenizer *t, const char *s, size_t n, size_t i, int allow_special) {
    const qhx_added_token *best = NULL;
    for (int k = 0; k < t->n_added; k++) {
        const qhx_added_token *a = &t->added[k];
        if (a->special && !allow_special) continue;
        if (a->len <= n - i && (!best || a->len > best->len) && !memcmp(s + i, a->content, a->len)) best = a;
    }
    return best;
}

/* Replaces invalid UTF-8 by U+FFFD (malloc'd copy), or reports the first bad byte offset. */
static qhx_status check_utf8(const char *s, size_t n, int replace, char **fixed, size_t *fixed_len) {
    *fixed = NULL;
    size_t i = 0;
    char *o = NULL;
    size_t on = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) { if (o) o[on++] = s[i]; i++; continue; }
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k > 0) {
            if (o) { memcpy(o + on, s + i, (size_t)k); on += (size_t)k; }
            i += (size_t)k;
            continue;
        }
        if (!replace) return qhx_fail(QHX_ERR_ARG, "text is not valid UTF-8 at byte offset %zu", i);
        if (!o) {
            o = malloc(n * 3 + 1);
            if (!o) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
            memcpy(o, s, i);
            on = i;
        }
        memcpy(o + on, "\xef\xbf\xbd", 3);
        on += 3;
        i++;
        while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80) i++; /* one U+FFFD per maximal bad run start */
    }
    *fixed = o;
    *fixed_len = on;
    return QHX_OK;
}

qhx_status qhx_tokenizer_encode(qhx_tokenizer *t, const char *text, size_t n, int flags, int32_t **ids, size_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    if (!text && n) return qhx_fail(QHX_ERR_ARG, "text is NULL");
    if (n > QHX_MAX_TEXT_BYTES)
        return qhx_fail(QHX_ERR_RANGE, "text of %zu bytes is over the %u MiB limit of one encode", n, QHX_MAX_TEXT_BYTES >> 20);
    char *fixed;
    size_t fixed_len;
    qhx_status rc = check_utf8(text, n, flags & QHX_ENCODE_REPLACE_INVALID, &fixed, &fixed_len);
    if (rc) return rc;
    if (fixed) { text = fixed; n = fixed_len; }
    idvec out = {0};
    bpe_work w = {0};
    pcre2_match_data *md = t->split ? pcre2_match_data_create_from_pattern(t->split, NULL) : NULL;
    if (t->split && !md) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    const int allow_special = flags & QHX_ENCODE_SPECIAL;
    size_t seg = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (!t->added_first[(unsigned char)text[i]]) continue;
        const qhx_added_token *a = added_at(t, text, n, i, allow_special);
        if (!a) continue;
        size_t end = i, next = i + a->len;
        if (a->lstrip) while (end > seg && (text[end - 1] == ' ' || text[end - 1] == '\t' || text[end - 1] == '\n')) end--;
        if (a->rstrip) while (next < n && (text[next] == ' ' || text[next] == '\t' || text[next] == '\n')) next++;
        rc = encode_segment(t, text + seg, end - seg, &out, &w, md);
        if (!rc && push(&out, a->id)) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
        seg = next;
        i = next - 1;
    }
    if (!rc) rc = encode_segment(t, text + seg, n - seg, &out, &w, md);
    if (md) pcre2_match_data_free(md);
    free(w.sym);
    free(w.next);
    free(w.prev);
    free(w.heap);
    free(fixed);
    if (rc) { free(out.ids); return rc; }
    *ids = out.ids ? out.ids : malloc(sizeof(int32_t));
    *n_ids = out.n;
    return *ids ? QHX_OK : qhx_fail(QHX_ERR_NOMEM, "out of memory");
}

/* ---- streaming decode ---------------------------------------------------------------------- */

/* Length of the UTF-8 sequence a lead byte announces, 0 if it cannot start one. */
static int seq_len(unsigned char b) { return b < 0x80 ? 1 : b < 0xc2 ? 0 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : b < 0xf5 ? 4 : 0; }

/* 0: a valid but incomplete prefix; k > 0: a complete character of k bytes; -1: can never be valid. */
static int utf8_check(const unsigned char *p, int n) {
    const int need = seq_len(p[0]);
    if (!need) return -1;
    for (int i = 1; i < n && i < need; i++) {
        unsigned char lo = 0x80, hi = 0xbf;
        if (i == 1) { /* no overlongs, no surrogates, nothing past U+10FFFF */
            if (p[0] == 0xe0) lo = 0xa0;
            else if (p[0] == 0xed) hi = 0x9f;
            else if (p[0] == 0xf0) lo = 0x90;
            else if (p[0] == 0xf4) hi = 0x8f;
        }
        if (p[i] < lo || p[i] > hi) return -1;
    }
    return n >= need ? need : 0;
}

/* Adds one byte; writes every character it completes. Like from_utf8_lossy (which HF's decode
 * uses), a maximal invalid prefix becomes one U+FFFD. */
static int emit(qhx_detok_stream *st, unsigned char b, char *out, size_t cap, size_t *o) {
    st->pending[st->n_pending++] = b;
    while (st->n_pending) {
        int r = utf8_check(st->pending, st->n_pending), drop;
        if (r == 0) return 0;
        if (r > 0) {
            if (*o + (size_t)r > cap) return -1;
            memcpy(out + *o, st->pending, (size_t)r);
            *o += (size_t)r;
            drop = r;
        } else {
            if (*o + 3 > cap) return -1;
            memcpy(out + *o, "\xef\xbf\xbd", 3);
            *o += 3;
            /* everything before the new byte was a valid prefix; the new byte starts afresh */
            drop = st->n_pending > 1 ? st->n_pending - 1 : 1;
        }
        st->n_pending -= drop;
        memmove(st->pending, st->pending + drop, (size_t)st->n_pending);
    }
    return 0;
}

int qhx_detok_push(const qhx_tokenizer *t, qhx_detok_stream *st, int32_t id, char *out, size_t cap) {
    if (id < 0 || id >= t->n_ids || !t->piece[id]) return -1;
    size_t o = 0;
    for (uint32_t i = 0; i < t->piece_len[id]; i++)
        if (emit(st, (unsigned char)t->piece[id][i], out, cap, &o)) return -1;
    return (int)o;
}

/* The whole text through the streaming decoder, so both turn bytes that form no character into
 * U+FFFD as Hugging Face's from_utf8_lossy does (a raw piece may be a lone continuation byte). */
qhx_status qhx_tokenizer_decode(const qhx_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len) {
    *text = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_ids || !t->piece[ids[i]])
            return qhx_fail(QHX_ERR_RANGE, "token id %d (position %zu) is not in the tokenizer's %d ids", ids[i], i, t->n_ids);
        total += t->piece_len[ids[i]];
    }
    const size_t cap = 3 * total + 3; /* every byte may become U+FFFD */
    char *s = malloc(cap + 1);
    if (!s) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    qhx_detok_stream st = {0};
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)qhx_detok_push(t, &st, ids[i], s + o, cap - o); /* ids checked, room sized */
    o += (size_t)qhx_detok_flush(&st, s + o, cap - o);
    s[o] = 0;
    *text = s;
    if (len) *len = o;
    return QHX_OK;
}

int qhx_detok_flush(qhx_detok_stream *st, char *out, size_t cap) {
    if (!st->n_pending) return 0;
    if (cap < 3) return -1;
    st->n_pending = 0;
    memcpy(out, "\xef\xbf\xbd", 3);
    return 3;
}

/* ---- the tokenizer's life: alloc, load (by magic: the compact form or tokenizer.json, each a
 * leaf loader), free, and the split regex both loaders compile ---- */

#define MAX_FILE_BYTES (512u << 20)

qhx_status qhx_tokenizer_compile_split(qhx_tokenizer *t, const char *pattern, const char *name) {
    if (t->split) return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: more than one regex split in the pre-tokenizer", name);
    int err;
    PCRE2_SIZE off;
    t->split = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL); /* the pattern is untrusted: let PCRE2 check its UTF-8 (fuzz_tokenizer_compact found this) */
    if (!t->split) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return qhx_fail(QHX_ERR_FORMAT, "%s: pre-tokenizer regex does not compile at offset %zu: %s", name, (size_t)off, (char *)msg);
    }
    pcre2_jit_compile(t->split, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
    t->split_pattern = strdup(pattern);
    return t->split_pattern ? QHX_OK : qhx_fail(QHX_ERR_NOMEM, "out of memory");
}

void qhx_bytelevel_tables(uint32_t byte_to_cp[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        byte_to_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* The alphabet lies below U+0200, so one- and two-byte sequences are decoded here (half the load
 * time went to a library call per character). */
size_t qhx_unbytelevel(char *s, size_t len, const int16_t cp_to_byte[512]) {
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        const unsigned char c = (unsigned char)s[i];
        if (c < 0x80 && cp_to_byte[c] >= 0) {
            s[o++] = (char)cp_to_byte[c], i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xc7 && i + 1 < len && ((unsigned char)s[i + 1] & 0xc0) == 0x80) {
            const int cp = (c & 0x1f) << 6 | ((unsigned char)s[i + 1] & 0x3f);
            if (cp_to_byte[cp] >= 0) {
                s[o++] = (char)cp_to_byte[cp], i += 2;
                continue;
            }
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0) { s[o++] = s[i++]; continue; }
        if (cp < 512 && cp_to_byte[cp] >= 0) {
            s[o++] = (char)cp_to_byte[cp];
        } else {
            memmove(s + o, s + i, (size_t)k);
            o += (size_t)k;
        }
        i += (size_t)k;
    }
    return o;
}

qhx_status qhx_tok_set_piece(qhx_tokenizer *t, int32_t id, const char *bytes, size_t len, const char *name) {
    if (id < 0 || id >= t->id_cap) return qhx_fail(QHX_ERR_FORMAT, "%s: token id %d out of range", name, id);
    t->piece[id] = bytes;
    t->piece_len[id] = (uint32_t)len;
    if (len > t->max_piece) t->max_piece = (uint32_t)len;
    if (id >= t->n_ids) t->n_ids = id + 1;
    return QHX_OK;
}

qhx_tokenizer *qhx_tokenizer_alloc(int n_ids) {
    qhx_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    pthread_mutex_init(&t->lock, NULL);
    t->id_cap = n_ids;
    t->piece = calloc((size_t)n_ids + 1, sizeof *t->piece);
    t->piece_len = calloc((size_t)n_ids + 1, sizeof *t->piece_len);
    if (!t->piece || !t->piece_len || qhx_strmap_init(&t->cache, 1 << 14)) {
        qhx_tokenizer_free(t);
        return NULL;
    }
    return t;
}

qhx_status qhx_tokenizer_load(const char *path, qhx_tokenizer **out) {
    *out = NULL;
    if (!path) return qhx_fail(QHX_ERR_ARG, "tokenizer path is NULL");
    struct stat st;
    char *full = stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? qhx_path_join(path, "tokenizer.json") : strdup(path);
    if (!full) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    /* read, not mapped: the compact form's tables hold offsets, checked once at load; a file
     * rewritten in place under a mapping could change them after the check */
    char *buf;
    size_t len;
    qhx_status rc = qhx_read_file(full, MAX_FILE_BYTES, &buf, &len);
    if (!rc && len >= 8 && !memcmp(buf, QHX_TOK_MAGIC, 8)) {
        if (!(rc = qhx_tokenizer_parse_compact((const unsigned char *)buf, len, full, out)))
            (*out)->blob = buf, buf = NULL; /* the tables live in it */
    } else if (!rc) {
        rc = qhx_tokenizer_parse(buf, len, full, out);
    }
    free(buf);
    free(full);
    return rc;
}

void qhx_tokenizer_free(qhx_tokenizer *t) {
    if (!t) return;
    free(t->piece);
    free(t->piece_len);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    qhx_strmap_free(&t->vocab);
    qhx_u64map_free(&t->merges);
    qhx_strmap_free(&t->cache);
    free(t->cache_ids);
    if (t->split) pcre2_code_free(t->split);
    free(t->split_pattern);
    qhx_trie_free(t->trie);
    pthread_mutex_destroy(&t->lock);
    free(t->blob);
    free(t);
}
