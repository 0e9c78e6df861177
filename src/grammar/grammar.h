/* Grammars for constrained decoding: a context-free grammar over Unicode code points (compiled from
 * llama.cpp's GBNF, or from a JSON Schema through GBNF), and the matcher that walks it byte by byte
 * over the tokenizer's pieces. The grammar is immutable once compiled (share it between threads);
 * each generation keeps its own matcher. */
#ifndef QHX_GRAMMAR_H
#define QHX_GRAMMAR_H
#include <stddef.h>
#include <stdint.h>
#include "qhexrt.h"

/* A rule's alternatives lie one after another in sym[], each ended by G_END; a position is an
 * index into sym[]. Groups and repetitions compile to rules of their own, so every element of a
 * sequence is one symbol: a character set or a rule. */
enum { G_END = 0, G_CHARS, G_RULE };
typedef struct {
    uint8_t kind;
    int32_t arg; /* G_CHARS: index into cs[]; G_RULE: the rule */
} qhx_gsym;

typedef struct {
    uint64_t ascii[2];   /* code points below 128, as bits */
    uint32_t off, n;     /* sorted disjoint ranges in ranges[] (all code points, ASCII too) */
} qhx_gcharset;

typedef struct qhx_trie qhx_trie;

struct qhx_grammar {
    qhx_gsym *sym;
    size_t n_sym;
    qhx_gcharset *cs;
    size_t n_cs;
    uint32_t (*ranges)[2];
    size_t n_ranges;
    int32_t *alt;        /* the start positions of every rule's alternatives, rule by rule */
    uint32_t *rule_alt;  /* rule r's alternatives are alt[rule_alt[r] .. rule_alt[r + 1]) */
    char **names;
    int n_rules, root;
    const qhx_tokenizer *tok;
    const qhx_trie *trie;        /* the tokenizer's pieces (owned by the tokenizer) */
};

/* GBNF text -> grammar (tok may be NULL for a grammar that only matches text). */
qhx_status qhx_gbnf_compile(const char *text, size_t len, const qhx_tokenizer *tok, qhx_grammar **out);
/* whether c holds cp: a bit for ASCII (the mask's inner loop), a binary search above */
static inline int qhx_gcharset_has(const qhx_grammar *g, const qhx_gcharset *c, uint32_t cp) {
    if (cp < 128) return (int)(c->ascii[cp >> 6] >> (cp & 63) & 1);
    uint32_t lo = 0, hi = c->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        const uint32_t *r = g->ranges[c->off + mid];
        if (cp < r[0]) hi = mid;
        else if (cp > r[1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}
/* whether c holds any code point in [lo, hi] */
int qhx_gcharset_any(const qhx_grammar *g, const qhx_gcharset *c, uint32_t lo, uint32_t hi);

/* ---- the matcher: where a generation stands in its grammar ---------------------------------- */
typedef struct qhx_gmatch qhx_gmatch;

/* Stacks a state may hold: an ambiguous grammar ((a{0,1000}){0,1000}) could otherwise grow its
 * state without bound; past this, checks refuse and masks fail (qhx_gmatch_error says why). */
#define QHX_GMATCH_MAX_STACKS 8192
/* Stacks one mask may step over the vocabulary's trie (~20 ns each): a state of a few stacks
 * steps up to ~1 M, one of thousands (nested repetitions through rules) would take minutes. */
#define QHX_GMATCH_MASK_WORK (32 << 20)

qhx_status qhx_gmatch_new(const qhx_grammar *g, qhx_gmatch **out);
void qhx_gmatch_free(qhx_gmatch *m);
/* Back to the start. */
void qhx_gmatch_reset(qhx_gmatch *m);
/* 1 when the bytes can follow what was accepted so far (nothing changes), else 0. */
int qhx_gmatch_check(qhx_gmatch *m, const char *bytes, size_t n);
/* Takes the bytes: 0, or -1 when the grammar refuses them (the matcher unchanged). */
int qhx_gmatch_accept(qhx_gmatch *m, const char *bytes, size_t n);
/* Whether the text so far is a whole sentence of the grammar; whether anything more may follow. */
int qhx_gmatch_can_end(const qhx_gmatch *m);
int qhx_gmatch_can_go_on(const qhx_gmatch *m);
/* The tokens whose pieces may follow, as bits (1 = allowed) over the tokenizer's ids; special
 * added tokens are never allowed (end of sequence is the caller's, by qhx_gmatch_can_end). The
 * array lives in the matcher until the next call. */
const uint64_t *qhx_gmatch_mask(qhx_gmatch *m);

/* The tokenizer's pieces as a trie, built once per tokenizer (qhx_tokenizer keeps it). */
const qhx_trie *qhx_tokenizer_trie(const qhx_tokenizer *t);
void qhx_trie_free(qhx_trie *t);

/* Why the last mask failed: QHX_ERR_RANGE with a message for a state past QHX_GMATCH_MAX_STACKS
 * or a mask past QHX_GMATCH_MASK_WORK, else QHX_ERR_NOMEM. */
qhx_status qhx_gmatch_error(const qhx_gmatch *m);
/* A token's piece (its raw bytes), or NULL for special tokens and ids without text. */
const char *qhx_gmatch_piece(const qhx_gmatch *m, int32_t id, size_t *len);
#endif
