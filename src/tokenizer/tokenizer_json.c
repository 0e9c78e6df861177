/* The tokenizer.json loader (tokenizer.c loads by magic): reads a Hugging Face tokenizer.json into the tables of tokenizer_internal.h. Every part that
 * affects ids is read from the file; unsupported components are refused by name. */
#include "tokenizer/tokenizer_internal.h"
#include "util/error.h"
#include "util/mapfile.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>


static qhx_status read_normalizer(qhx_tokenizer *t, const cJSON *n, const char *name) {
    if (!n || cJSON_IsNull(n)) return QHX_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(n, "type");
    const char *ty = cJSON_IsString(type) ? type->valuestring : "?";
    if (!strcmp(ty, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(n, "normalizers")) {
            qhx_status rc = read_normalizer(t, e, name);
            if (rc) return rc;
        }
        return QHX_OK;
    }
    int opt = !strcmp(ty, "NFC")    ? UTF8PROC_STABLE | UTF8PROC_COMPOSE
              : !strcmp(ty, "NFD")  ? UTF8PROC_STABLE | UTF8PROC_DECOMPOSE
              : !strcmp(ty, "NFKC") ? UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT
              : !strcmp(ty, "NFKD") ? UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT
                                    : 0;
    if (!opt) return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: normalizer '%.40s' is not supported (NFC, NFD, NFKC, NFKD or none)", name, ty);
    if (t->norm) return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: more than one Unicode normalization form in the normalizer", name);
    t->norm = opt;
    return QHX_OK;
}

/* GPT-2's split, used by ByteLevel when use_regex is true. */
static const char gpt2_regex[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* A pattern from tokenizer.json, with \p{..} brought up to utf8proc's Unicode version (the compact
 * form stores the widened pattern, so it is widened once). */
static qhx_status compile_widened(qhx_tokenizer *t, const char *pattern, const char *name) {
    char *widened = qhx_regex_newer_unicode(pattern);
    if (!widened) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    qhx_status rc = qhx_tokenizer_compile_split(t, widened, name);
    free(widened);
    return rc;
}

static qhx_status read_pretokenizer(qhx_tokenizer *t, const cJSON *p, const char *name) {
    if (!p || cJSON_IsNull(p)) return QHX_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
    const char *ty = cJSON_IsString(type) ? type->valuestring : "?";
    if (!strcmp(ty, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(p, "pretokenizers")) {
            qhx_status rc = read_pretokenizer(t, e, name);
            if (rc) return rc;
        }
        return QHX_OK;
    }
    if (!strcmp(ty, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        const cJSON *inv = cJSON_GetObjectItemCaseSensitive(p, "invert");
        if (!cJSON_IsString(re)) return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: Split pre-tokenizer without a Regex pattern", name);
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") || cJSON_IsTrue(inv))
            return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: Split behavior must be Isolated, not inverted", name);
        return compile_widened(t, re->valuestring, name);
    }
    if (!strcmp(ty, "ByteLevel")) {
        t->add_prefix_space = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space"));
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
        if (!ur || cJSON_IsTrue(ur)) return compile_widened(t, gpt2_regex, name);
        return QHX_OK;
    }
    return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: pre-tokenizer '%.40s' is not supported (Split, ByteLevel, Sequence)", name, ty);
}

/* Scratch of one merge worker: the merge's halves, un-byte-levelled side by side. */
typedef struct {
    char *buf;
    size_t cap;
} merge_scratch;

/* What is wrong with a merge, so read_merges can say it for the lowest bad rank. */
typedef enum { MERGE_OK, MERGE_SHAPE, MERGE_NOT_TWO, MERGE_NOT_IN_VOCAB, MERGE_NOMEM } merge_status;

/* Merge e's halves: a[0, na) and b[0, nb); MERGE_SHAPE or MERGE_NOT_TWO when it has none. */
static merge_status merge_halves(const cJSON *e, const char **a, size_t *na, const char **b, size_t *nb) {
    if (cJSON_IsString(e)) { /* "a b" */
        const char *sp = strchr(e->valuestring, ' ');
        if (!sp || strchr(sp + 1, ' ')) return MERGE_NOT_TWO;
        *a = e->valuestring, *na = (size_t)(sp - *a), *b = sp + 1, *nb = strlen(*b);
        return MERGE_OK;
    }
    if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) && cJSON_IsString(e->child->next)) {
        *a = e->child->valuestring, *na = strlen(*a), *b = e->child->next->valuestring, *nb = strlen(*b);
        return MERGE_OK;
    }
    return MERGE_SHAPE;
}

/* The (left id, right id) key and (rank, merged id) value of merge e. Reads t only. */
static merge_status merge_entry(const qhx_tokenizer *t, const cJSON *e, int rank, const int16_t cp_to_byte[512],
                                merge_scratch *w, uint64_t *key, uint64_t *val) {
    const char *a, *b;
    size_t na, nb;
    const merge_status st = merge_halves(e, &a, &na, &b, &nb);
    if (st) return st;
    if (na + nb + 1 > w->cap) {
        w->cap = 2 * (na + nb) + 64;
        free(w->buf);
        if (!(w->buf = malloc(w->cap))) { w->cap = 0; return MERGE_NOMEM; }
    }
    memcpy(w->buf, a, na);
    const size_t la = qhx_unbytelevel(w->buf, na, cp_to_byte);
    memcpy(w->buf + la, b, nb);
    const size_t lb = qhx_unbytelevel(w->buf + la, nb, cp_to_byte);
    int32_t ia, ib, im;
    if (!qhx_strmap_get(&t->vocab, w->buf, la, &ia) || !qhx_strmap_get(&t->vocab, w->buf + la, lb, &ib) ||
        !qhx_strmap_get(&t->vocab, w->buf, la + lb, &im))
        return MERGE_NOT_IN_VOCAB;
    *key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    *val = (uint64_t)rank << 32 | (uint32_t)im;
    return MERGE_OK;
}

typedef struct {
    const qhx_tokenizer *t;
    const cJSON *first;
    int r0, r1;
    const int16_t *cp_to_byte;
    uint64_t *key, *val;  /* by rank */
    int bad;              /* the first rank that failed, or -1 */
    const cJSON *bad_e;   /* that merge */
    merge_status why;
} merge_job;

static void *merge_range(void *arg) {
    merge_job *j = arg;
    merge_scratch w = {0};
    const cJSON *e = j->first;
    for (int r = j->r0; r < j->r1 && j->bad < 0; r++, e = e->next)
        if ((j->why = merge_entry(j->t, e, r, j->cp_to_byte, &w, &j->key[r], &j->val[r]))) j->bad = r, j->bad_e = e;
    free(w.buf);
    return NULL;
}

/* Merges: the lookups (three per merge, ~150 k merges) run on two threads, each on half of the
 * ranks; the pairs then go into the map in rank order, so the first (lowest-rank) occurrence of a
 * pair wins, as in HF. A failure is reported for the lowest failing rank. */
static qhx_status read_merges(qhx_tokenizer *t, const cJSON *merges, int nm, const char *name, const int16_t cp_to_byte[512]) {
    uint64_t *key = malloc(sizeof *key * ((size_t)nm + 1)), *val = malloc(sizeof *val * ((size_t)nm + 1));
    if (!key || !val) { free(key), free(val); return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", name); }
    const int half = nm / 2;
    const cJSON *mid = merges->child;
    for (int r = 0; r < half; r++) mid = mid->next;
    merge_job jobs[2] = {{t, merges->child, 0, half, cp_to_byte, key, val, -1, NULL, MERGE_OK},
                         {t, mid, half, nm, cp_to_byte, key, val, -1, NULL, MERGE_OK}};
    pthread_t helper;
    const int threaded = nm >= 4096 && !pthread_create(&helper, NULL, merge_range, &jobs[1]);
    merge_range(&jobs[0]);
    if (threaded) pthread_join(helper, NULL);
    else merge_range(&jobs[1]);
    const merge_job *bad = jobs[0].bad >= 0 ? &jobs[0] : jobs[1].bad >= 0 ? &jobs[1] : NULL;
    qhx_status rc = QHX_OK;
    if (bad) {
        const char *a = "", *b = "";
        size_t na = 0, nb = 0;
        merge_halves(bad->bad_e, &a, &na, &b, &nb);
        switch (bad->why) {
        case MERGE_SHAPE: rc = qhx_fail(QHX_ERR_FORMAT, "%s: merge %d is neither \"a b\" nor [\"a\", \"b\"]", name, bad->bad); break;
        case MERGE_NOT_TWO:
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: merge %d '%.40s' is not two tokens", name, bad->bad, bad->bad_e->valuestring);
            break;
        case MERGE_NOMEM: rc = qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", name); break;
        default:
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: merge %d ('%.*s' + '%.30s') uses or makes a token not in the vocab", name, bad->bad,
                          (int)(na < 30 ? na : 30), a, b);
        }
    }
    for (int r = 0; r < nm && !rc; r++) {
        uint64_t old;
        if (!qhx_u64map_get(&t->merges, key[r], &old)) qhx_u64map_put(&t->merges, key[r], val[r]);
    }
    free(key);
    free(val);
    return rc;
}

static qhx_status read_model(qhx_tokenizer *t, const cJSON *model, const char *name, const int16_t cp_to_byte[512]) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE"))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: model type '%.40s' is not supported (BPE)", name,
                        cJSON_IsString(type) ? type->valuestring : "?");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: byte_fallback BPE is not supported (byte-level BPE only)", name);
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
    const cJSON *ew = cJSON_GetObjectItemCaseSensitive(model, "end_of_word_suffix");
    if ((cJSON_IsString(cs) && *cs->valuestring) || (cJSON_IsString(ew) && *ew->valuestring))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: continuing_subword_prefix / end_of_word_suffix are not supported", name);
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return qhx_fail(QHX_ERR_FORMAT, "%s: model needs a 'vocab' object and a 'merges' array", name);
    int nv = cJSON_GetArraySize(vocab), nm = cJSON_GetArraySize(merges);
    if (nv > QHX_TOK_MAX_IDS || nm > QHX_TOK_MAX_IDS) return qhx_fail(QHX_ERR_RANGE, "%s: vocabulary or merges over %d entries", name, QHX_TOK_MAX_IDS);
    if (qhx_strmap_init(&t->vocab, (uint32_t)nv + 1) || qhx_u64map_init(&t->merges, (uint32_t)nm + 1))
        return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", name);
    char *buf = NULL;
    size_t cap = 0;
    qhx_status rc = QHX_OK;
    for (const cJSON *e = vocab->child; e && !rc; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= QHX_TOK_MAX_IDS || e->valuedouble != (int32_t)e->valuedouble) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: vocab entry '%.40s' has no valid id", name, e->string);
            break;
        }
        size_t len = strlen(e->string);
        if (len + 1 > cap) { cap = 2 * len + 64; free(buf); buf = malloc(cap); if (!buf) { rc = qhx_fail(QHX_ERR_NOMEM, "out of memory"); break; } }
        memcpy(buf, e->string, len);
        len = qhx_unbytelevel(buf, len, cp_to_byte);
        if (qhx_strmap_put(&t->vocab, buf, len, (int32_t)e->valuedouble)) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    free(buf);
    /* the vocab's pieces are its keys: the records stay put from here on */
    for (size_t at = 0; !rc && at < t->vocab.rec_len; at += qhx_strmap_rec_words(t->vocab.rec[at + 1]))
        rc = qhx_tok_set_piece(t, (int32_t)t->vocab.rec[at], (const char *)(t->vocab.rec + at + 2), t->vocab.rec[at + 1], name);
    if (!rc) rc = read_merges(t, merges, nm, name, cp_to_byte);
    if (rc) return rc;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        if (!qhx_strmap_get(&t->vocab, &c, 1, &t->byte_id[b]))
            return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: the vocab has no token for byte 0x%02x (not byte-level BPE)", name, b);
    }
    return QHX_OK;
}

static qhx_status read_added(qhx_tokenizer *t, const cJSON *added, const char *name) {
    if (!added || cJSON_IsNull(added)) return QHX_OK;
    if (!cJSON_IsArray(added)) return qhx_fail(QHX_ERR_FORMAT, "%s: added_tokens is not an array", name);
    int n = cJSON_GetArraySize(added);
    if (n > 1 << 20) return qhx_fail(QHX_ERR_RANGE, "%s: %d added tokens", name, n);
    t->added = calloc((size_t)n + 1, sizeof *t->added);
    if (!t->added) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"), *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= QHX_TOK_MAX_IDS || !cJSON_IsString(content) || !*content->valuestring)
            return qhx_fail(QHX_ERR_FORMAT, "%s: added token %d needs an id and non-empty content", name, t->n_added);
        qhx_added_token *a = &t->added[t->n_added++];
        a->id = (int32_t)id->valuedouble;
        a->len = strlen(content->valuestring);
        a->content = strdup(content->valuestring);
        if (!a->content) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
        a->special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"));
        a->lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "lstrip"));
        a->rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "rstrip"));
        t->added_first[(unsigned char)a->content[0]] = 1;
        qhx_status rc = qhx_tok_set_piece(t, a->id, a->content, a->len, name);
        if (rc) return rc;
    }
    return QHX_OK;
}

/* Where the text escapes U+0000, or NULL. cJSON's strings are C strings: such a piece would be cut
 * short without a word, so the file is refused instead (no byte-level BPE vocabulary has one; its
 * byte 0 is "\u0100"). Every backslash in JSON text starts a two-character escape, so pairing them
 * from the left finds exactly the escapes. */
static const char *escaped_nul(const char *s, size_t len) {
    for (const char *p = memchr(s, '\\', len), *end = s + len; p && p + 1 < end; p = memchr(p + 2, '\\', (size_t)(end - p - 2)))
        if (p[1] == 'u' && end - p >= 6 && !memcmp(p + 2, "0000", 4)) return p;
    return NULL;
}

/* cJSON allocates every node and string on its own (a Qwen tokenizer.json is about a million of
 * them). An arena through cJSON_InitHooks made the load 1.1-1.2x faster, but the hooks are
 * process-wide: a program that also uses cJSON would allocate from them. So malloc it is. */
qhx_status qhx_tokenizer_parse(const char *json, size_t len, const char *name, qhx_tokenizer **out) {
    *out = NULL;
    const char *nul = escaped_nul(json, len);
    if (nul) return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: U+0000 in a string (at byte %zu) is not supported", name, (size_t)(nul - json));
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return qhx_fail(QHX_ERR_FORMAT, "%s: not a JSON object", name);
    }
    /* size the id tables from the largest id in the vocab and the added tokens */
    double max_id = -1;
    const cJSON *e;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "vocab");
    for (e = vocab ? vocab->child : NULL; e; e = e->next)
        if (cJSON_IsNumber(e) && e->valuedouble > max_id) max_id = e->valuedouble;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "added_tokens")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (cJSON_IsNumber(id) && id->valuedouble > max_id) max_id = id->valuedouble;
    }
    qhx_tokenizer *t = qhx_tokenizer_alloc(max_id >= QHX_TOK_MAX_IDS ? QHX_TOK_MAX_IDS : (int)max_id + 1);
    if (!t) { cJSON_Delete(root); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
    qhx_status rc = QHX_OK;
    uint32_t b2c[256];
    int16_t c2b[512];
    qhx_bytelevel_tables(b2c);
    memset(c2b, 0xff, sizeof c2b);
    for (int b = 0; b < 256; b++) c2b[b2c[b]] = (int16_t)b;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!rc && !cJSON_IsObject(model)) rc = qhx_fail(QHX_ERR_FORMAT, "%s: no 'model' object", name);
    if (!rc) rc = read_model(t, model, name, c2b);
    if (!rc) rc = read_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), name);
    if (!rc) rc = read_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), name);
    if (!rc) rc = read_pretokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), name);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    const cJSON *dty = dec ? cJSON_GetObjectItemCaseSensitive(dec, "type") : NULL;
    if (!rc && dec && !cJSON_IsNull(dec) && !(cJSON_IsString(dty) && !strcmp(dty->valuestring, "ByteLevel")))
        rc = qhx_fail(QHX_ERR_UNSUPPORTED, "%s: decoder '%.40s' is not supported (ByteLevel)", name, cJSON_IsString(dty) ? dty->valuestring : "?");
    cJSON_Delete(root);
    if (rc) { qhx_tokenizer_free(t); return rc; }
    *out = t;
    return QHX_OK;
}
