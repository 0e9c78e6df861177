/* A byte-level BPE tokenizer from plain lists, as a GGUF's tokenizer.ggml.* keys hold them: the
 * tokens by id (byte-level text) with llama.cpp's token types, the merges "a b" by rank, and the
 * pre-tokenizer by name. It encodes as the Hugging Face tokenizer.json it was converted from:
 * NFC, the named split regex, BPE, added tokens matched first. */
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/tokenizer_lists.h"
#include "util/buf.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* The splits of Hugging Face's Qwen2/Qwen3 tokenizer.json and of Qwen3.5's (which adds \p{M} to
 * the letter runs), by the names llama.cpp's converter gives them. */
static const struct {
    const char *name, *regex;
} pres[] = {
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen35", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

static qhx_status read_tokens(qhx_tokenizer *t, const qhx_vocab_lists *v, const char *name, const int16_t c2b[512]) {
    int n_added = 0;
    for (int i = 0; i < v->n_tokens; i++) n_added += v->types[i] == QHX_TOKTYPE_CONTROL || v->types[i] == QHX_TOKTYPE_USER;
    if (qhx_strmap_init(&t->vocab, (uint32_t)v->n_tokens + 1) || qhx_u64map_init(&t->merges, (uint32_t)v->n_merges + 1) ||
        !(t->added = calloc((size_t)n_added + 1, sizeof *t->added)))
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    char *buf = NULL;
    size_t cap = 0;
    qhx_status rc = QHX_OK;
    for (int i = 0; i < v->n_tokens && !rc; i++) {
        const char *s = v->tokens[i];
        size_t len = v->token_len[i];
        switch (v->types[i]) {
        case QHX_TOKTYPE_NORMAL: case QHX_TOKTYPE_UNKNOWN:
            if (qhx_reserve((void **)&buf, &cap, len + 1, 1)) {
                rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
                break;
            }
            memcpy(buf, s, len);
            len = qhx_unbytelevel(buf, len, c2b);
            if (qhx_strmap_put(&t->vocab, buf, len, i)) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
            break;
        case QHX_TOKTYPE_CONTROL: case QHX_TOKTYPE_USER: {
            /* added tokens are stored as their text; a control token is a special one */
            if (!len || memchr(s, 0, len)) {
                rc = qhx_fail(QHX_ERR_FORMAT, "%s: added token %d is empty or holds a NUL", name, i);
                break;
            }
            qhx_added_token *a = &t->added[t->n_added++];
            if (!(a->content = malloc(len + 1))) {
                rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
                break;
            }
            memcpy(a->content, s, len);
            a->content[len] = 0;
            a->len = len;
            a->id = i;
            a->special = v->types[i] == QHX_TOKTYPE_CONTROL;
            t->added_first[(unsigned char)s[0]] = 1;
            rc = qhx_tok_set_piece(t, i, a->content, len, name);
            break;
        }
        case QHX_TOKTYPE_UNUSED: break; /* padding ids the converter added past the vocabulary */
        default: rc = qhx_fail(QHX_ERR_UNSUPPORTED, "%s: token %d has token type %d (byte tokens are not byte-level BPE)", name, i, v->types[i]);
        }
    }
    free(buf);
    for (size_t at = 0; !rc && at < t->vocab.rec_len; at += qhx_strmap_rec_words(t->vocab.rec[at + 1]))
        rc = qhx_tok_set_piece(t, (int32_t)t->vocab.rec[at], (const char *)(t->vocab.rec + at + 2), t->vocab.rec[at + 1], name);
    return rc;
}

/* Merges in rank order; the first occurrence of a pair wins, as in Hugging Face. */
static qhx_status read_merges(qhx_tokenizer *t, const qhx_vocab_lists *v, const char *name, const int16_t c2b[512]) {
    char *buf = NULL;
    size_t cap = 0;
    qhx_status rc = QHX_OK;
    for (int r = 0; r < v->n_merges && !rc; r++) {
        const char *m = v->merges[r], *sp = memchr(m, ' ', v->merge_len[r]);
        const size_t len = v->merge_len[r];
        if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - m))) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: merge %d '%.*s' is not two tokens", name, r, (int)(len < 40 ? len : 40), m);
            break;
        }
        if (qhx_reserve((void **)&buf, &cap, len + 1, 1)) {
            rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
            break;
        }
        const size_t na = (size_t)(sp - m), nb = len - na - 1;
        memcpy(buf, m, na);
        const size_t la = qhx_unbytelevel(buf, na, c2b);
        memcpy(buf + la, sp + 1, nb);
        const size_t lb = qhx_unbytelevel(buf + la, nb, c2b);
        int32_t ia, ib, im;
        uint64_t old;
        if (!qhx_strmap_get(&t->vocab, buf, la, &ia) || !qhx_strmap_get(&t->vocab, buf + la, lb, &ib) ||
            !qhx_strmap_get(&t->vocab, buf, la + lb, &im))
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: merge %d ('%.*s') uses or makes a token not in the vocab", name, r, (int)(len < 40 ? len : 40), m);
        else if (!qhx_u64map_get(&t->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, &old) &&
                 qhx_u64map_put(&t->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, (uint64_t)r << 32 | (uint32_t)im))
            rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    free(buf);
    return rc;
}

qhx_status qhx_tokenizer_from_lists(const qhx_vocab_lists *v, const char *name, qhx_tokenizer **out) {
    *out = NULL;
    int p = -1;
    for (int i = 0; i < (int)(sizeof pres / sizeof *pres); i++)
        if (v->pre && !strcmp(v->pre, pres[i].name)) p = i;
    if (p < 0) return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: pre-tokenizer '%.40s' is not supported (qwen2, qwen35)", name, v->pre ? v->pre : "(none)");
    if (v->n_tokens < 256 || v->n_tokens > QHX_TOK_MAX_IDS || v->n_merges < 0 || v->n_merges > QHX_TOK_MAX_IDS)
        return qhx_fail(QHX_ERR_RANGE, "%s: %d tokens and %d merges (256 to %d each)", name, v->n_tokens, v->n_merges, QHX_TOK_MAX_IDS);
    qhx_tokenizer *t = qhx_tokenizer_alloc(v->n_tokens);
    if (!t) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    uint32_t b2c[256];
    int16_t c2b[512];
    qhx_bytelevel_tables(b2c);
    memset(c2b, 0xff, sizeof c2b);
    for (int b = 0; b < 256; b++) c2b[b2c[b]] = (int16_t)b;
    t->norm = UTF8PROC_STABLE | UTF8PROC_COMPOSE; /* NFC, as Qwen's tokenizer.json normalizes */
    qhx_status rc = read_tokens(t, v, name, c2b);
    if (!rc) rc = read_merges(t, v, name, c2b);
    for (int b = 0; !rc && b < 256; b++) {
        char c = (char)b;
        if (!qhx_strmap_get(&t->vocab, &c, 1, &t->byte_id[b]))
            rc = qhx_fail(QHX_ERR_UNSUPPORTED, "%s: the vocab has no token for byte 0x%02x (not byte-level BPE)", name, b);
    }
    char *widened = rc ? NULL : qhx_regex_newer_unicode(pres[p].regex); /* as tokenizer.json patterns are */
    if (!rc) rc = widened ? qhx_tokenizer_compile_split(t, widened, name) : qhx_fail(QHX_ERR_NOMEM, "out of memory");
    free(widened);
    if (rc) {
        qhx_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return QHX_OK;
}
