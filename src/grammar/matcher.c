/* Where a generation stands in its grammar, and which tokens may come next.
 *
 * The state is a set of stacks, as in llama.cpp's grammar sampler: each stack is a position
 * waiting for a character (its top) over the positions to return to when the rules it is inside
 * end. Stacks are hash-consed nodes (pos, parent), so equal stacks are one id, a state is a small
 * set of ids, and a node's successors (the stacks after its character) are worked out once and
 * kept. Bytes go in one at a time: a character split over tokens waits in a partial UTF-8 decode,
 * checked against the ranges it could still become.
 *
 * The mask walks the tokenizer's pieces as a trie from the current state, dropping a whole subtree
 * as soon as its prefix is refused, and is kept per state (the same state, e.g. inside the same
 * string, gives the same mask). Inside a string that takes any character, which is where most
 * pieces are allowed, it walks only the 3 % of pieces that hold a '"', '\' or control, from that
 * byte on (qhx_trie.tail); inside one with a maxLength it takes the others by their length
 * (qhx_trie.upto) and walks the tails by the characters before them (qhx_trie.tail_at). Callers
 * check the sampled token first and ask for the mask only when it is refused. */
#include "grammar/grammar.h"
#include "tokenizer/tokenizer_internal.h"
#include "util/buf.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- the tokenizer's pieces as a trie ---------------------------------------------------------- */

typedef struct {
    uint32_t child;     /* children lie at node[child .. child + n_child), by byte */
    uint32_t tok;       /* the ids whose piece ends here: ids[tok .. tok + n_tok) */
    uint32_t end;       /* the subtree's ids: ids[tok .. end) */
    uint16_t n_child, n_tok;
    uint8_t byte;
    uint8_t utf8_ok;    /* bit s: from UTF-8 decoder state s, this edge and every path below are valid */
    uint8_t high;       /* a byte >= 0x80 on this edge or below */
    uint8_t chars;      /* the most characters on a path from this edge down (at most 255) */
} tnode;

struct qhx_trie {
    tnode *node;
    uint64_t (*ascii)[2]; /* the ASCII bytes on each node's edge and below */
    size_t n_node;
    int32_t *ids;
    int n_vocab;
    /* Inside a JSON string that takes every character (a string state: the same state after each),
     * a piece is allowed by what follows its first '"', '\' or control, the characters before it
     * leaving the state as it was. So the tokenizer's trie keeps its pieces sorted three ways:
     * `clean`, the ids (bits) of pieces of string characters only (valid UTF-8, possibly ending
     * inside a character); `tail`, a trie of the other pieces from their first such byte (under
     * their own ids), for those whose characters before it are whole and valid; and the rest,
     * which no string state takes. NULL in a tail trie. */
    uint64_t *clean;
    struct qhx_trie *tail;
    /* Inside a string with a maxLength, R characters left, each leading to the same next state
     * (runway()): the clean pieces of at most R characters, and the tail pieces of c <= R
     * characters before their special byte, walked from the state after c characters. So the
     * clean pieces are kept by length too: `upto[r]` those of at most r characters (r < N_UPTO),
     * `longer` the rest with their lengths, longest first; and `tail_at[c]` the tails of c. */
    uint64_t *upto;          /* [N_UPTO][n_words] */
    int32_t *longer;
    uint8_t *longer_chars;
    size_t n_longer;
    struct qhx_trie **tail_at;
    int n_tail_at;
    int max_chars;           /* the most characters of a clean piece or before a tail */
};

#define N_UPTO 16

/* UTF-8 validity as an 8-state automaton: 0 between characters, 1-3 continuation bytes still
 * due, 4-7 the second byte's narrower ranges (E0, ED, F0, F4: no overlongs, surrogates or code
 * points past U+10FFFF); -1 invalid. */
static int utf8_next(int s, uint8_t b) {
    switch (s) {
    case 0:
        if (b < 0x80) return 0;
        if (b >= 0xC2 && b <= 0xDF) return 1;
        if (b == 0xE0) return 4;
        if (b == 0xED) return 5;
        if (b >= 0xE1 && b <= 0xEF) return 2;
        if (b == 0xF0) return 6;
        if (b >= 0xF1 && b <= 0xF3) return 3;
        if (b == 0xF4) return 7;
        return -1;
    case 4: return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 5: return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 6: return b >= 0x90 && b <= 0xBF ? 2 : -1;
    case 7: return b >= 0x80 && b <= 0x8F ? 2 : -1;
    default: return b >= 0x80 && b <= 0xBF ? s - 1 : -1;
    }
}

/* What each subtree holds, children before parents (they lie after them). */
static void summarize(qhx_trie *tr) {
    for (size_t i = tr->n_node; i-- > 0;) {
        tnode *nd = &tr->node[i];
        uint64_t a0 = 0, a1 = 0;
        int high = 0;
        uint8_t below = 0xFF; /* the states every child takes from */
        unsigned chars = 0;
        for (uint32_t c = 0; c < nd->n_child; c++) {
            const tnode *ch = &tr->node[nd->child + c];
            a0 |= tr->ascii[nd->child + c][0], a1 |= tr->ascii[nd->child + c][1];
            high |= ch->high;
            below &= ch->utf8_ok;
            if (ch->chars > chars) chars = ch->chars;
        }
        if (i && (nd->byte & 0xC0) != 0x80) chars++; /* a continuation byte starts no character */
        nd->chars = (uint8_t)(chars < 255 ? chars : 255);
        if (i) { /* the root has no edge */
            if (nd->byte < 64) a0 |= 1ull << nd->byte;
            else if (nd->byte < 128) a1 |= 1ull << (nd->byte - 64);
            else high = 1;
            uint8_t ok = 0;
            for (int st = 0; st < 8; st++) {
                int nx = utf8_next(st, nd->byte);
                if (nx >= 0 && (below >> nx & 1)) ok |= (uint8_t)(1u << st);
            }
            nd->utf8_ok = ok;
        }
        tr->ascii[i][0] = a0, tr->ascii[i][1] = a1;
        nd->high = (uint8_t)high;
    }
}

typedef struct {
    const char *p;
    uint32_t len;
    int32_t id;
    uint8_t chars;   /* a tail's: the characters before it */
} piece_ref;

static int cmp_piece(const void *a, const void *b) {
    const piece_ref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    return x->len != y->len ? (x->len < y->len ? -1 : 1) : (x->id < y->id ? -1 : x->id > y->id);
}

void qhx_trie_free(qhx_trie *t) {
    if (!t) return;
    free(t->node);
    free(t->ascii);
    free(t->ids);
    free(t->clean);
    qhx_trie_free(t->tail);
    free(t->upto);
    free(t->longer);
    free(t->longer_chars);
    for (int c = 0; c < t->n_tail_at; c++) qhx_trie_free(t->tail_at[c]);
    free(t->tail_at);
    free(t);
}

/* The bytes a JSON string may hold unescaped: not '"', '\\' or a control (and all of >= 0x80). */
static const uint64_t STRING_ASCII[2] = {0xFFFFFFFB00000000ull, 0xFFFFFFFFEFFFFFFFull};

static int string_byte(uint8_t b) { return b >= 128 || (STRING_ASCII[b >> 6] >> (b & 63) & 1); }

/* The trie of the n pieces r (sorted in place), each under its id. */
static qhx_trie *trie_of(piece_ref *r, size_t n, int n_vocab) {
    qhx_trie *tr = calloc(1, sizeof *tr);
    if (!tr) return NULL;
    qsort(r, n, sizeof *r, cmp_piece);
    tr->n_vocab = n_vocab;
    if (!(tr->ids = malloc(sizeof *tr->ids * (n + 1)))) goto fail;
    for (size_t i = 0; i < n; i++) tr->ids[i] = r[i].id;
    /* breadth first: a node's children are made together, so they lie side by side */
    typedef struct { uint32_t node, lo, hi, depth; } work;
    size_t cap = 0, cap_w = 0, n_w = 0;
    work *w = NULL;
    if (qhx_reserve(&tr->node, &cap, 1, sizeof *tr->node) || qhx_reserve(&w, &cap_w, 1, sizeof *w)) { free(w); goto fail; }
    memset(tr->node, 0, sizeof *tr->node);
    tr->n_node = 1;
    w[n_w++] = (work){0, 0, (uint32_t)n, 0};
    for (size_t q = 0; q < n_w; q++) {
        work k = w[q];
        uint32_t i = k.lo;
        while (i < k.hi && r[i].len == k.depth) i++;
        tr->node[k.node].tok = k.lo;
        tr->node[k.node].end = k.hi;
        tr->node[k.node].n_tok = (uint16_t)(i - k.lo);
        uint32_t groups = 0;
        for (uint32_t j = i; j < k.hi; groups++) {
            uint8_t b = (uint8_t)r[j].p[k.depth];
            while (j < k.hi && (uint8_t)r[j].p[k.depth] == b) j++;
        }
        if (!groups) continue;
        if (qhx_reserve(&tr->node, &cap, tr->n_node + groups, sizeof *tr->node) ||
            qhx_reserve(&w, &cap_w, n_w + groups, sizeof *w)) { free(w); goto fail; }
        tr->node[k.node].child = (uint32_t)tr->n_node;
        tr->node[k.node].n_child = (uint16_t)groups;
        for (uint32_t j = i; j < k.hi;) {
            uint8_t b = (uint8_t)r[j].p[k.depth];
            uint32_t s = j;
            while (j < k.hi && (uint8_t)r[j].p[k.depth] == b) j++;
            tnode *c = &tr->node[tr->n_node];
            memset(c, 0, sizeof *c);
            c->byte = b;
            w[n_w++] = (work){(uint32_t)tr->n_node++, s, j, k.depth + 1};
        }
    }
    free(w);
    if (!(tr->ascii = malloc(sizeof *tr->ascii * tr->n_node))) goto fail;
    summarize(tr);
    return tr;
fail:
    qhx_trie_free(tr);
    return NULL;
}

/* The characters in p[0..len): the bytes that start one (a partial last one counts). */
static unsigned chars_of(const char *p, size_t len) {
    unsigned n = 0;
    for (size_t k = 0; k < len; k++) n += ((uint8_t)p[k] & 0xC0) != 0x80;
    return n;
}

/* The clean pieces by length (upto, longer) and the tails by the characters before them
 * (tail_at), from the clean ids' lengths chars[] and the tails. */
static int sort_by_length(qhx_trie *tr, const uint8_t *chars, const piece_ref *tails, size_t n_tail) {
    const size_t words = ((size_t)tr->n_vocab + 63) / 64;
    if (!(tr->upto = calloc(N_UPTO * words, sizeof *tr->upto))) return -1;
    size_t at[257] = {0}; /* the longer ones longest first: a counting sort by 255 - length */
    for (int32_t id = 0; id < tr->n_vocab; id++) {
        if (!(tr->clean[id >> 6] >> (id & 63) & 1)) continue;
        if (chars[id] > tr->max_chars) tr->max_chars = chars[id];
        if (chars[id] >= N_UPTO) { at[255 - chars[id] + 1]++; continue; }
        for (int r = chars[id]; r < N_UPTO; r++) tr->upto[(size_t)r * words + (id >> 6)] |= 1ull << (id & 63);
    }
    for (int k = 1; k < 257; k++) at[k] += at[k - 1];
    tr->n_longer = at[256];
    tr->longer = malloc(sizeof *tr->longer * (tr->n_longer + 1));
    tr->longer_chars = malloc(tr->n_longer + 1);
    if (!tr->longer || !tr->longer_chars) return -1;
    for (int32_t id = 0; id < tr->n_vocab; id++)
        if ((tr->clean[id >> 6] >> (id & 63) & 1) && chars[id] >= N_UPTO) {
            const size_t i = at[255 - chars[id]]++;
            tr->longer[i] = id, tr->longer_chars[i] = chars[id];
        }
    int n_at = 0;
    for (size_t i = 0; i < n_tail; i++) n_at = tails[i].chars + 1 > n_at ? tails[i].chars + 1 : n_at;
    if (n_at - 1 > tr->max_chars) tr->max_chars = n_at - 1;
    if (!(tr->tail_at = calloc((size_t)n_at + 1, sizeof *tr->tail_at))) return -1;
    tr->n_tail_at = n_at;
    piece_ref *group = malloc(sizeof *group * (n_tail + 1));
    if (!group) return -1;
    for (int c = 0; c < n_at; c++) {
        size_t n = 0;
        for (size_t i = 0; i < n_tail; i++)
            if (tails[i].chars == c) group[n++] = tails[i];
        if (n && !(tr->tail_at[c] = trie_of(group, n, tr->n_vocab))) { free(group); return -1; }
    }
    free(group);
    return 0;
}

static qhx_trie *build_trie(const qhx_tokenizer *t) {
    qhx_trie *tr = NULL;
    piece_ref *r = malloc(sizeof *r * (size_t)(t->n_ids + 1)), *tails = malloc(sizeof *r * (size_t)(t->n_ids + 1));
    uint8_t *special = calloc((size_t)t->n_ids + 1, 1), *chars = calloc((size_t)t->n_ids + 1, 1);
    uint64_t *clean = calloc(((size_t)t->n_ids + 63) / 64 + 1, sizeof *clean);
    size_t n = 0, n_tail = 0;
    if (!r || !tails || !special || !chars || !clean) goto done;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].special && t->added[i].id >= 0 && t->added[i].id < t->n_ids) special[t->added[i].id] = 1;
    for (int32_t id = 0; id < t->n_ids; id++) {
        if (!t->piece[id] || !t->piece_len[id] || special[id]) continue;
        const char *p = t->piece[id];
        const uint32_t len = t->piece_len[id];
        r[n++] = (piece_ref){p, len, id, 0};
        uint32_t k = 0;
        int st = 0;
        while (k < len && st >= 0 && string_byte((uint8_t)p[k])) st = utf8_next(st, (uint8_t)p[k++]);
        if (st < 0) continue; /* invalid UTF-8 before any special byte */
        unsigned c = chars_of(p, k);
        c = c < 255 ? c : 255; /* 255: at least (max_chars says a runway path cannot count them) */
        if (k == len) clean[id >> 6] |= 1ull << (id & 63), chars[id] = (uint8_t)c;
        else if (st == 0) tails[n_tail++] = (piece_ref){p + k, len - k, id, (uint8_t)c};
    }
    if (!(tr = trie_of(r, n, t->n_ids))) goto done;
    tr->clean = clean, clean = NULL;
    if (sort_by_length(tr, chars, tails, n_tail) || !(tr->tail = trie_of(tails, n_tail, t->n_ids))) qhx_trie_free(tr), tr = NULL;
done:
    free(r);
    free(tails);
    free(special);
    free(chars);
    free(clean);
    return tr;
}

const qhx_trie *qhx_tokenizer_trie(const qhx_tokenizer *ct) {
    qhx_tokenizer *t = (qhx_tokenizer *)ct; /* the trie is a cache: built once, under the lock */
    pthread_mutex_lock(&t->lock);
    if (!t->trie) t->trie = build_trie(t);
    qhx_trie *tr = t->trie;
    pthread_mutex_unlock(&t->lock);
    return tr;
}

/* ---- the matcher ------------------------------------------------------------------------------- */

enum { ACCEPT = 0 };    /* the empty stack: the grammar may end here */
#define N_CACHED 32     /* masks kept, by state */

typedef struct {
    int32_t pos, parent;
    int32_t succ, n_succ;    /* the stacks after this one's character, in pool[]; succ -1: not yet */
} gnode;

typedef struct {
    uint32_t acc;            /* the bits so far */
    uint8_t need;            /* continuation bytes still to come (0: none pending) */
    uint32_t min;            /* the smallest code point of the sequence's length (overlongs) */
} upart;

typedef struct {
    uint64_t hash;
    int32_t *set;
    int n;
    upart u;
    uint64_t *mask;
    int busy;                /* being built: a nested call takes another entry */
} cached;

/* What loops_of says of a state (looked: computed yet); shared down the bytes that keep the
 * state as it is, which need no step at all, and kept per state. */
typedef struct {
    uint64_t bits[2];
    int high, looked;
    int runway;              /* string characters the state takes in a row (runway()), -1: not yet */
    int closed;              /* and the state after them takes no string character */
} loop_info;

#define N_LOOPS 256
typedef struct {
    int n;            /* 0: empty */
    int32_t set[16];  /* sorted */
    loop_info li;
} loop_entry;

struct qhx_gmatch {
    const qhx_grammar *g;
    loop_entry *loops;       /* [N_LOOPS], by the state's hash */
    gnode *node;
    size_t n_node, cap_node;
    uint64_t *hkey;          /* (pos, parent) -> id, open addressing; UINT64_MAX empty */
    int32_t *hval;
    size_t hcap;
    int32_t *pool;
    size_t n_pool, cap_pool;
    uint32_t *seen, *seen2;  /* stamps per node: set building, successor building */
    uint32_t epoch, epoch2;
    size_t cap_seen;
    int32_t *cur;            /* the state: a set of node ids */
    size_t n_cur, cap_cur;
    upart u;
    int32_t *work;           /* scratch sets, stacked (the mask's walk keeps one per depth) */
    size_t n_work, cap_work;
    uint64_t *mask;
    size_t n_words;
    cached cache[N_CACHED];
    int next_cache;
    int oom;
    enum { FINE, TOO_MANY_STACKS, TOO_MUCH_WORK } too_many; /* why the last step failed: past QHX_GMATCH_MAX_STACKS or QHX_GMATCH_MASK_WORK */
    int64_t work_left;       /* stacks a mask may still step */
};

static uint64_t node_key(int32_t pos, int32_t parent) { return (uint64_t)(uint32_t)pos << 32 | (uint32_t)parent; }

static int grow_seen(qhx_gmatch *m) {
    if (m->n_node <= m->cap_seen) return 0;
    size_t cap = m->cap_seen ? 2 * m->cap_seen : 256;
    while (cap < m->n_node) cap *= 2;
    uint32_t *a = realloc(m->seen, sizeof *a * cap);
    if (!a) return -1;
    m->seen = a;
    uint32_t *b = realloc(m->seen2, sizeof *b * cap);
    if (!b) return -1;
    m->seen2 = b;
    memset(a + m->cap_seen, 0, sizeof *a * (cap - m->cap_seen));
    memset(b + m->cap_seen, 0, sizeof *b * (cap - m->cap_seen));
    m->cap_seen = cap;
    return 0;
}

static int rehash(qhx_gmatch *m, size_t cap) {
    uint64_t *k = malloc(sizeof *k * cap);
    int32_t *v = malloc(sizeof *v * cap);
    if (!k || !v) { free(k); free(v); return -1; }
    memset(k, 0xff, sizeof *k * cap);
    for (size_t id = 1; id < m->n_node; id++) {
        uint64_t key = node_key(m->node[id].pos, m->node[id].parent);
        size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
        while (k[i] != UINT64_MAX) i = (i + 1) & (cap - 1);
        k[i] = key, v[i] = (int32_t)id;
    }
    free(m->hkey);
    free(m->hval);
    m->hkey = k, m->hval = v, m->hcap = cap;
    return 0;
}

/* The node (pos, parent), made when new; -1 when out of memory. */
static int32_t intern(qhx_gmatch *m, int32_t pos, int32_t parent) {
    uint64_t key = node_key(pos, parent);
    size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (m->hcap - 1);
    for (; m->hkey[i] != UINT64_MAX; i = (i + 1) & (m->hcap - 1))
        if (m->hkey[i] == key) return m->hval[i];
    if (qhx_reserve(&m->node, &m->cap_node, m->n_node + 1, sizeof *m->node)) return -1;
    int32_t id = (int32_t)m->n_node++;
    m->node[id] = (gnode){pos, parent, -1, 0};
    if (grow_seen(m)) return -1;
    if (2 * m->n_node > m->hcap) return rehash(m, 2 * m->hcap) ? -1 : id;
    m->hkey[i] = key, m->hval[i] = id;
    return id;
}

/* Appends to work[] (deduplicated by the stamps `which` of epoch: 0 seen[], 1 seen2[]) the
 * stacks that wait for a character at pos, or further up once pos's sequence ends. */
static int expand(qhx_gmatch *m, int32_t pos, int32_t parent, int which, uint32_t epoch) {
    const qhx_grammar *g = m->g;
    for (;;) {
        const qhx_gsym s = g->sym[pos];
        int32_t id;
        if (s.kind == G_END) {
            if (parent >= 0) { /* the rule ends: go on where it was entered */
                pos = m->node[parent].pos;
                parent = m->node[parent].parent;
                continue;
            }
            id = ACCEPT;
        } else if (s.kind == G_CHARS) {
            if ((id = intern(m, pos, parent)) < 0) return -1;
        } else {
            int32_t cont = parent;
            if (g->sym[pos + 1].kind != G_END && (cont = intern(m, pos + 1, parent)) < 0) return -1;
            for (uint32_t a = g->rule_alt[s.arg]; a < g->rule_alt[s.arg + 1]; a++)
                if (expand(m, g->alt[a], cont, which, epoch)) return -1;
            return 0;
        }
        uint32_t *st = which ? m->seen2 : m->seen; /* intern may have moved them */
        if (st[id] == epoch) return 0;
        st[id] = epoch;
        if (qhx_reserve(&m->work, &m->cap_work, m->n_work + 1, sizeof *m->work)) return -1;
        m->work[m->n_work++] = id;
        return 0;
    }
}

/* The stacks after node id's character (worked out once, then kept). */
static int successors(qhx_gmatch *m, int32_t id) {
    if (m->node[id].succ >= 0) return 0;
    size_t from = m->n_work;
    if (++m->epoch2 == 0) { memset(m->seen2, 0, sizeof *m->seen2 * m->cap_seen); m->epoch2 = 1; }
    if (expand(m, m->node[id].pos + 1, m->node[id].parent, 1, m->epoch2)) return -1;
    size_t n = m->n_work - from;
    if (qhx_reserve(&m->pool, &m->cap_pool, m->n_pool + n, sizeof *m->pool)) return -1;
    memcpy(m->pool + m->n_pool, m->work + from, sizeof *m->pool * n);
    m->node[id].succ = (int32_t)m->n_pool;
    m->node[id].n_succ = (int32_t)n;
    m->n_pool += n;
    m->n_work = from;
    return 0;
}

static const qhx_gcharset *top(const qhx_gmatch *m, int32_t id) { return &m->g->cs[m->g->sym[m->node[id].pos].arg]; }

/* A character still partial in v: the set stays as it is (*at = from) when some stack may still
 * take a code point it can become; its length, 0 when none can. */
static long keep_partial(qhx_gmatch *m, size_t from, size_t n, upart *u, upart v, size_t *at) {
    uint32_t lo = v.acc << (6 * v.need), hi = lo | ((1u << (6 * v.need)) - 1);
    if (lo < v.min) lo = v.min;
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = m->work[from + i];
        if (id != ACCEPT && qhx_gcharset_any(m->g, top(m, id), lo, hi)) {
            *u = v;
            *at = from;
            return (long)n;
        }
    }
    return 0;
}

/* The state after byte b from the set work[from .. from + n) and *u: at work[*at ..] (appended,
 * or the same set while a character is partial), its length returned (0 when refused, -1 out of
 * memory); *u updated. */
static long step(qhx_gmatch *m, size_t from, size_t n, upart *u, uint8_t b, size_t *at) {
    uint32_t cp;
    if (u->need == 0) {
        if (b >= 0x80) {
            int need = b >= 0xF5 ? -1 : b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC2 ? 1 : -1;
            if (need < 0) return 0;
            upart v = {b & (0x3Fu >> need), (uint8_t)need, need == 1 ? 0x80 : need == 2 ? 0x800 : 0x10000};
            return keep_partial(m, from, n, u, v, at);
        }
        cp = b;
    } else {
        if ((b & 0xC0) != 0x80) return 0;
        upart v = {u->acc << 6 | (b & 0x3F), (uint8_t)(u->need - 1), u->min};
        if (v.need) return keep_partial(m, from, n, u, v, at);
        cp = v.acc;
        if (cp < v.min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    }
    if ((m->work_left -= (int64_t)n) < 0) { m->too_many = TOO_MUCH_WORK; return -1; }
    size_t out = m->n_work;
    if (++m->epoch == 0) { memset(m->seen, 0, sizeof *m->seen * m->cap_seen); m->epoch = 1; }
    for (size_t i = 0; i < n; i++) {
        int32_t id = m->work[from + i];
        if (id == ACCEPT || !qhx_gcharset_has(m->g, top(m, id), cp)) continue;
        if (successors(m, id)) return -1;
        const gnode *nd = &m->node[id];
        if (qhx_reserve(&m->work, &m->cap_work, m->n_work + (size_t)nd->n_succ, sizeof *m->work)) return -1;
        for (int32_t k = 0; k < nd->n_succ; k++) {
            int32_t s = m->pool[nd->succ + k];
            if (m->seen[s] == m->epoch) continue;
            m->seen[s] = m->epoch;
            m->work[m->n_work++] = s;
        }
    }
    *u = (upart){0};
    *at = out;
    if (m->n_work - out > QHX_GMATCH_MAX_STACKS) { m->too_many = TOO_MANY_STACKS; return -1; } /* an ambiguous grammar's blow-up */
    return (long)(m->n_work - out);
}

/* Runs bytes from the current state; the end state lies at work[*at .. *at + return). */
static long run(qhx_gmatch *m, const char *bytes, size_t len, upart *u, size_t *at) {
    m->n_work = 0;
    m->too_many = FINE;
    if (qhx_reserve(&m->work, &m->cap_work, m->n_cur, sizeof *m->work)) return -1;
    memcpy(m->work, m->cur, sizeof *m->work * m->n_cur);
    m->n_work = m->n_cur;
    size_t from = 0, n = m->n_cur;
    *u = m->u;
    for (size_t i = 0; i < len; i++) {
        long k = step(m, from, n, u, (uint8_t)bytes[i], &from);
        if (k <= 0) return k;
        n = (size_t)k;
        if (from > 4096) { /* keep the scratch short on long texts */
            memmove(m->work, m->work + from, sizeof *m->work * n);
            m->n_work = n;
            from = 0;
        }
    }
    *at = from;
    return (long)n;
}

int qhx_gmatch_check(qhx_gmatch *m, const char *bytes, size_t n) {
    upart u;
    size_t at;
    return run(m, bytes, n, &u, &at) > 0;
}

int qhx_gmatch_accept(qhx_gmatch *m, const char *bytes, size_t n) {
    upart u;
    size_t at;
    long k = run(m, bytes, n, &u, &at);
    if (k <= 0) return -1;
    if (qhx_reserve(&m->cur, &m->cap_cur, (size_t)k, sizeof *m->cur)) return -1;
    memcpy(m->cur, m->work + at, sizeof *m->cur * (size_t)k);
    m->n_cur = (size_t)k;
    m->u = u;
    return 0;
}

int qhx_gmatch_can_end(const qhx_gmatch *m) {
    if (m->u.need) return 0;
    for (size_t i = 0; i < m->n_cur; i++)
        if (m->cur[i] == ACCEPT) return 1;
    return 0;
}

int qhx_gmatch_can_go_on(const qhx_gmatch *m) {
    for (size_t i = 0; i < m->n_cur; i++)
        if (m->cur[i] != ACCEPT) return 1;
    return 0;
}

/* A state's few ids in order (at most 16: insertion beats qsort's set-up many times over). */
static void sort_ids(int32_t *a, size_t n) {
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && a[j - 1] > a[j]; j--) {
            int32_t t = a[j];
            a[j] = a[j - 1], a[j - 1] = t;
        }
}

/* whether work[a..a+n) and work[b..b+n) hold the same ids (a set's order is not fixed) */
static int same_set(qhx_gmatch *m, size_t a, size_t b, size_t n) {
    int32_t x[16], y[16];
    if (n > 16) return 0;
    memcpy(x, m->work + a, sizeof(int32_t) * n), memcpy(y, m->work + b, sizeof(int32_t) * n);
    sort_ids(x, n), sort_ids(y, n);
    return !memcmp(x, y, sizeof(int32_t) * n);
}

static int covers(const qhx_grammar *g, const qhx_gcharset *c, uint32_t lo, uint32_t hi) {
    for (uint32_t i = 0; i < c->n; i++)
        if (g->ranges[c->off + i][0] <= lo && g->ranges[c->off + i][1] >= hi) return 1;
    return 0;
}

/* The state after any non-ASCII character from work[from..from+n), at work[*at..]: its size, or
 * -1 when some stack takes some non-ASCII characters but not all (otherwise U+0080 stands for
 * them all). */
static long after_high(qhx_gmatch *m, size_t from, size_t n, size_t *at) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = m->work[from + i];
        if (id == ACCEPT) continue;
        const qhx_gcharset *c = top(m, id);
        int all = covers(m->g, c, 0x80, 0xD7FF) && covers(m->g, c, 0xE000, 0x10FFFF);
        if (!all && qhx_gcharset_any(m->g, c, 0x80, 0x10FFFF)) return -1;
    }
    upart v = {0};
    long k = step(m, from, n, &v, 0xC2, at);
    if (k > 0) k = step(m, *at, (size_t)k, &v, 0x80, at);
    return k;
}

/* The bytes that lead the state work[from..from+n) back to itself: ASCII ones as bits, and
 * whether every non-ASCII character does (inside a JSON string, all but " \ and controls). Only
 * through such bytes can a whole subtree of pieces be allowed without walking it. */
static void loops_of(qhx_gmatch *m, size_t from, size_t n, uint64_t loop[2], int *high) {
    loop[0] = loop[1] = 0;
    *high = 0;
    if (n > 16) return;
    for (int b = 'e', first = 1; b < 128; b = first ? 0 : b + 1, first = 0) { /* 'e' first: most states do not loop */
        if (!first && b == 'e') continue;
        size_t mark = m->n_work;
        upart v = {0};
        size_t at;
        long k = step(m, from, n, &v, (uint8_t)b, &at);
        int same = k == (long)n && same_set(m, from, at, n);
        m->n_work = mark;
        if (k < 0 || (first && !same)) return;
        if (same) loop[b >> 6] |= 1ull << (b & 63);
    }
    size_t mark = m->n_work, at;
    const long k = after_high(m, from, n, &at);
    *high = k == (long)n && same_set(m, from, at, n);
    m->n_work = mark;
}


/* The table's entry for a state (made, its fields unknown, when new); NULL for large states. */
static loop_entry *entry_of(qhx_gmatch *m, size_t from, size_t n) {
    if (n > 16 || !m->loops) return NULL;
    int32_t key[16];
    memcpy(key, m->work + from, sizeof(int32_t) * n);
    sort_ids(key, n);
    uint64_t h = n;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)key[i]) * 0x9e3779b97f4a7c15ull;
    loop_entry *e = &m->loops[(h >> 40) % N_LOOPS];
    if (e->n != (int)n || memcmp(e->set, key, sizeof(int32_t) * n)) {
        e->n = (int)n;
        memcpy(e->set, key, sizeof(int32_t) * n);
        e->li = (loop_info){.runway = -1};
    }
    return e;
}

/* loops_of through the matcher's table of states seen */
static void loops_kept(qhx_gmatch *m, size_t from, size_t n, loop_info *lp) {
    lp->looked = 1;
    loop_entry *e = entry_of(m, from, n);
    if (!e) { lp->bits[0] = lp->bits[1] = 0, lp->high = 0; return; }
    if (e->li.looked) { lp->bits[0] = e->li.bits[0], lp->bits[1] = e->li.bits[1], lp->high = e->li.high; return; }
    loops_of(m, from, n, lp->bits, &lp->high);
    e = entry_of(m, from, n);
    e->li.bits[0] = lp->bits[0], e->li.bits[1] = lp->bits[1], e->li.high = lp->high, e->li.looked = 1;
}

/* How many string characters in a row the state takes where every such character leads to the
 * same state ('e' stands for them): inside a string with a maxLength, what is left of it (255: no
 * end). Kept per state (each step along the way is the next position's state). 0 when the state
 * is no such. Every string character goes where 'e' goes when each stack takes all of them or
 * none of them: a character's successors are those of the stacks that take it. *closed (NULL: not
 * asked): the state after them takes no string character at all (a string at its maxLength, only
 * its closing quote), so no clean piece of more characters is allowed. */
static int runway(qhx_gmatch *m, size_t from, size_t n, int depth, int *closed) {
    loop_entry *e = entry_of(m, from, n);
    if (e && e->li.runway >= 0) {
        if (closed) *closed = e->li.closed;
        return e->li.runway;
    }
    int r = 0, shut = 0;
    if (depth < 300 && n <= 16) {
        int same = 1;
        for (size_t i = 0; i < n && same; i++) {
            int32_t id = m->work[from + i];
            if (id == ACCEPT) continue;
            const qhx_gcharset *c = top(m, id);
            const int takes_e = (int)(c->ascii[1] >> ('e' - 64) & 1);
            const uint64_t a0 = c->ascii[0] & STRING_ASCII[0], a1 = c->ascii[1] & STRING_ASCII[1];
            if (takes_e)
                same = a0 == STRING_ASCII[0] && a1 == STRING_ASCII[1] && covers(m->g, c, 0x80, 0xD7FF) && covers(m->g, c, 0xE000, 0x10FFFF);
            else
                same = !a0 && !a1 && !qhx_gcharset_any(m->g, c, 0x80, 0x10FFFF);
        }
        size_t at_e = 0, mark = m->n_work;
        upart v = {0};
        long k = same ? step(m, from, n, &v, 'e', &at_e) : 0;
        if (k > 0) {
            if (k == (long)n && same_set(m, from, at_e, n)) r = 255; /* it loops */
            else r = 1 + runway(m, at_e, (size_t)k, depth + 1, &shut);
            if (r > 255) r = 255;
        } else {
            shut = same && k == 0; /* every stack takes none of the string characters */
        }
        m->n_work = mark;
        e = entry_of(m, from, n); /* the table may have been written on the way */
    }
    if (e) e->li.runway = r, e->li.closed = shut;
    if (closed) *closed = shut;
    return r;
}

/* The pieces ids[from .. to) are allowed. */
static void allow(qhx_gmatch *m, const qhx_trie *tr, uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to; i++) m->mask[tr->ids[i] >> 6] |= 1ull << (tr->ids[i] & 63);
}

static int string_state(const loop_info *lp) {
    return lp->high && (lp->bits[0] & STRING_ASCII[0]) == STRING_ASCII[0] && (lp->bits[1] & STRING_ASCII[1]) == STRING_ASCII[1];
}

static const uint64_t *mask_of(qhx_gmatch *m, const int32_t *set, size_t n, upart u, int nested);

/* The pieces below node ci (its own included) as the mask of the string state work[at..at+k)
 * has them; 0 when out of memory. */
static int allow_as(qhx_gmatch *m, const qhx_trie *tr, const tnode *ch, size_t at, size_t k) {
    int32_t L[16];
    memcpy(L, m->work + at, sizeof *L * k);
    sort_ids(L, k);
    uint64_t *mask = m->mask;
    const uint64_t *lm = mask_of(m, L, k, (upart){0}, 1);
    m->mask = mask;
    if (!lm) { m->oom = 1; return 0; }
    for (uint32_t i = ch->tok; i < ch->end; i++) {
        const int32_t id = tr->ids[i];
        mask[id >> 6] |= lm[id >> 6] & 1ull << (id & 63);
    }
    return 1;
}

/* The pieces below trie node t allowed from the state work[from..from+n) with the partial
 * character u, into m->mask; children whose first byte has its bit in skip (NULL: none) are left
 * out. `clean`: the path to t holds string characters only, from no partial character. Then a
 * subtree whose first byte leads into a string state L (an object key beside named ones, once
 * the bytes leave the names) is allowed as L's own mask allows it: L takes the path back to
 * itself, so from the root L and this path's state see the same rest. */
static void walk(qhx_gmatch *m, const qhx_trie *tr, uint32_t t, size_t from, size_t n, upart u, loop_info *lp, const uint64_t *skip,
                 int clean) {
    const tnode *nd = &tr->node[t];
    for (uint32_t c = 0; c < nd->n_child && !m->oom; c++) {
        const uint32_t ci = nd->child + c;
        const tnode *ch = &tr->node[ci];
        if (skip && (skip[ch->byte >> 6] >> (ch->byte & 63) & 1)) continue;
        if (u.need == 0 && ch->end - ch->tok >= 8) {
            if (!lp->looked) loops_kept(m, from, n, lp);
            if (!(tr->ascii[ci][0] & ~lp->bits[0]) && !(tr->ascii[ci][1] & ~lp->bits[1]) && (!ch->high || (lp->high && (ch->utf8_ok & 1)))) {
                allow(m, tr, ch->tok, ch->end);
                continue; /* every piece below keeps the state where it is */
            }
            /* a string with room for every piece below, all of them string characters */
            if (!(tr->ascii[ci][0] & ~STRING_ASCII[0]) && !(tr->ascii[ci][1] & ~STRING_ASCII[1]) && (!ch->high || (ch->utf8_ok & 1))) {
                if (lp->runway < 0) lp->runway = runway(m, from, n, 0, NULL);
                if (ch->chars <= lp->runway) {
                    allow(m, tr, ch->tok, ch->end);
                    continue;
                }
            }
        }
        const int still = clean && string_byte(ch->byte);
        if (u.need == 0 && lp->looked && ch->byte < 128 && (lp->bits[ch->byte >> 6] >> (ch->byte & 63) & 1)) {
            allow(m, tr, ch->tok, ch->tok + ch->n_tok); /* the same state: no step */
            if (ch->n_child) walk(m, tr, ci, from, n, u, lp, NULL, still);
            continue;
        }
        upart v = u;
        size_t mark = m->n_work;
        size_t at;
        long k = step(m, from, n, &v, ch->byte, &at);
        if (k < 0) { m->oom = 1; return; }
        if (k > 0 && ch->n_child) {
            loop_info sub = {.runway = -1};
            if (still && v.need == 0 && k <= 16 && ch->end - ch->tok >= 8) {
                loops_kept(m, at, (size_t)k, &sub);
                if (string_state(&sub)) {
                    allow_as(m, tr, ch, at, (size_t)k);
                    m->n_work = mark;
                    continue;
                }
            }
            allow(m, tr, ch->tok, ch->tok + ch->n_tok);
            walk(m, tr, ci, at, (size_t)k, v, &sub, NULL, still);
        } else if (k > 0) {
            allow(m, tr, ch->tok, ch->tok + ch->n_tok);
        }
        m->n_work = mark;
    }
}

/* The mask of a state with a runway of R characters that ends closed (a string with a maxLength:
 * see qhx_trie): its clean pieces by length, and each tail group walked from the state after its
 * characters. */
static void runway_mask(qhx_gmatch *m, uint64_t *mask, size_t from, size_t n, int R) {
    const qhx_trie *tr = m->g->trie;
    if (R < N_UPTO) {
        memcpy(mask, tr->upto + (size_t)R * m->n_words, sizeof *mask * m->n_words);
    } else {
        memcpy(mask, tr->clean, sizeof *mask * m->n_words);
        for (size_t i = 0; i < tr->n_longer && tr->longer_chars[i] > R; i++) mask[tr->longer[i] >> 6] &= ~(1ull << (tr->longer[i] & 63));
    }
    m->mask = mask;
    for (int c = 0; c < tr->n_tail_at && c <= R && !m->oom; c++) {
        if (tr->tail_at[c]) {
            loop_info lp = {.runway = -1};
            walk(m, tr->tail_at[c], 0, from, n, (upart){0}, &lp, NULL, 0);
        }
        if (c == R || c + 1 == tr->n_tail_at) break;
        upart v = {0}; /* every string character leads where 'e' does */
        const long k = step(m, from, n, &v, 'e', &from);
        if (k < 0) m->oom = 1;
        if (k <= 0) break;
        n = (size_t)k;
    }
}

/* Where a state that is no string state enters one: an object key where any key may stand beside
 * the named ones (the named keys' literals mix with "any other key", so the walk would step through
 * every piece holding a '"'). L, the state after DEL (a string character no named key holds), when
 * it is a string state: into[b / 64] bit b for every first byte b that leads there too, bit 128 +
 * 0 when every non-ASCII character does. Then a piece starting with such a byte is allowed exactly
 * when L allows it, since L takes the byte back to itself. 0 when there is no such L. */
static size_t string_entry(qhx_gmatch *m, size_t from, size_t n, int32_t L[16], uint64_t into[4]) {
    memset(into, 0, sizeof(uint64_t) * 4);
    upart v = {0};
    size_t l0, at;
    const long k = step(m, from, n, &v, 0x7F, &l0);
    if (k <= 0 || k > 16) return 0;
    loop_info lp = {.runway = -1};
    loops_kept(m, l0, (size_t)k, &lp);
    if (!string_state(&lp)) return 0;
    const size_t base = l0 + (size_t)k; /* L stays at work[l0..base) while the bytes are tried */
    for (int b = 0; b < 128; b++) {
        if (!string_byte((uint8_t)b)) continue;
        upart w = {0};
        m->n_work = base;
        if (step(m, from, n, &w, (uint8_t)b, &at) == k && same_set(m, l0, at, (size_t)k)) into[b >> 6] |= 1ull << (b & 63);
    }
    m->n_work = base;
    if (after_high(m, from, n, &at) == k && same_set(m, l0, at, (size_t)k)) into[2] = into[3] = ~0ull;
    memcpy(L, m->work + l0, sizeof *L * (size_t)k);
    sort_ids(L, (size_t)k);
    m->n_work = from + n;
    return (size_t)k;
}

/* The mask of the state set[0..n) (sorted) with the partial character u, kept per state: NULL
 * when out of memory. A string state (one that every string character leaves as it is) takes its
 * pieces as the trie sorted them (qhx_trie.clean, .tail), a string with a maxLength by their
 * lengths (runway_mask); a state that enters a string state (string_entry) takes that state's mask
 * for the pieces that start by entering it, and walks the rest. It works above the scratch sets in
 * use, so a walk may ask for another state's mask (`nested`: such a call, which enters no other). */
static const uint64_t *mask_of(qhx_gmatch *m, const int32_t *set, size_t n, upart u, int nested) {
    const qhx_trie *tr = m->g->trie;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ u.acc ^ (uint64_t)u.need << 32;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)set[i]) * 0xbf58476d1ce4e5b9ull, h ^= h >> 29;
    for (int i = 0; i < N_CACHED; i++) {
        cached *c = &m->cache[i];
        if (c->mask && c->hash == h && c->n == (int)n && !memcmp(&c->u, &u, sizeof c->u) && !memcmp(c->set, set, sizeof *c->set * n))
            return c->mask;
    }
    while (m->cache[m->next_cache].busy) m->next_cache = (m->next_cache + 1) % N_CACHED; /* a nested call keeps its callers' */
    cached *c = &m->cache[m->next_cache];
    m->next_cache = (m->next_cache + 1) % N_CACHED;
    free(c->set);
    c->set = malloc(sizeof *c->set * (n + 1));
    if (!c->mask) c->mask = malloc(sizeof *c->mask * m->n_words);
    if (!c->set || !c->mask) { free(c->set); c->set = NULL; c->mask = NULL; return NULL; }
    c->hash = 0, c->n = -1;
    memcpy(c->set, set, sizeof *c->set * n);
    const size_t base = m->n_work;
    if (qhx_reserve(&m->work, &m->cap_work, base + n, sizeof *m->work)) return NULL;
    memcpy(m->work + base, set, sizeof *m->work * n);
    m->n_work = base + n;
    c->busy = 1;
    loop_info top = {.runway = -1};
    if (u.need == 0 && n <= 16) loops_kept(m, base, n, &top);
    int32_t L[16];
    uint64_t into[4];
    size_t nl = 0;
    int R, closed;
    m->mask = c->mask;
    if (string_state(&top)) {
        memcpy(c->mask, tr->clean, sizeof *c->mask * m->n_words);
        walk(m, tr->tail, 0, base, n, u, &top, NULL, 0);
    } else if (u.need == 0 && n <= 16 && (R = runway(m, base, n, 0, &closed)) > 0 &&
               (R > tr->max_chars || (R < 255 && closed))) {
        runway_mask(m, c->mask, base, n, R);
    } else if (!nested && u.need == 0 && n <= 16 && (nl = string_entry(m, base, n, L, into)) > 0) {
        const uint64_t *lm = mask_of(m, L, nl, u, 1);
        if (lm) {
            memcpy(c->mask, lm, sizeof *c->mask * m->n_words);
            const tnode *root = &tr->node[0];
            for (uint32_t i = 0; i < root->n_child; i++) { /* the pieces that enter it some other way, or not at all */
                const tnode *ch = &tr->node[root->child + i];
                if (into[ch->byte >> 6] >> (ch->byte & 63) & 1) continue;
                for (uint32_t k = ch->tok; k < ch->end; k++) c->mask[tr->ids[k] >> 6] &= ~(1ull << (tr->ids[k] & 63));
            }
            m->mask = c->mask;
            loop_info lp = {.runway = -1};
            walk(m, tr, 0, base, n, u, &lp, into, 1);
        } else {
            m->oom = 1;
        }
    } else {
        memset(c->mask, 0, sizeof *c->mask * m->n_words);
        walk(m, tr, 0, base, n, u, &top, NULL, !nested && u.need == 0);
    }
    c->busy = 0;
    m->n_work = base;
    if (m->oom) return NULL;
    c->n = (int)n;
    c->u = u;
    c->hash = h;
    return c->mask;
}

const uint64_t *qhx_gmatch_mask(qhx_gmatch *m) {
    if (!m->g->trie) return NULL;
    sort_ids(m->cur, m->n_cur); /* a state is a set: the same set in another order is the same state */
    m->n_work = 0;
    m->oom = 0;
    m->too_many = FINE;
    m->work_left = QHX_GMATCH_MASK_WORK;
    const uint64_t *mask = mask_of(m, m->cur, m->n_cur, m->u, 0);
    m->work_left = INT64_MAX;
    return mask;
}

void qhx_gmatch_reset(qhx_gmatch *m) {
    m->n_work = 0;
    m->u = (upart){0};
    if (++m->epoch == 0) { memset(m->seen, 0, sizeof *m->seen * m->cap_seen); m->epoch = 1; }
    const qhx_grammar *g = m->g;
    m->n_cur = 0;
    for (uint32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        if (expand(m, g->alt[a], -1, 0, m->epoch)) { m->oom = 1; return; }
    if (!qhx_reserve(&m->cur, &m->cap_cur, m->n_work + 1, sizeof *m->cur)) {
        memcpy(m->cur, m->work, sizeof *m->cur * m->n_work);
        m->n_cur = m->n_work;
    } else {
        m->oom = 1;
    }
}

void qhx_gmatch_free(qhx_gmatch *m) {
    if (!m) return;
    free(m->node);
    free(m->hkey);
    free(m->hval);
    free(m->pool);
    free(m->seen);
    free(m->seen2);
    free(m->cur);
    free(m->work);
    free(m->loops);
    for (int i = 0; i < N_CACHED; i++) free(m->cache[i].set), free(m->cache[i].mask);
    free(m);
}

qhx_status qhx_gmatch_new(const qhx_grammar *g, qhx_gmatch **out) {
    *out = NULL;
    qhx_gmatch *m = calloc(1, sizeof *m);
    if (!m) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    m->g = g;
    m->work_left = INT64_MAX;
    m->n_words = g->trie ? ((size_t)g->trie->n_vocab + 63) / 64 : 0;
    if (g->trie && !(m->loops = calloc(N_LOOPS, sizeof *m->loops))) goto fail;
    if (qhx_reserve(&m->node, &m->cap_node, 1, sizeof *m->node) || rehash(m, 1024)) goto fail;
    m->node[0] = (gnode){-1, -1, 0, 0}; /* ACCEPT */
    m->n_node = 1;
    if (grow_seen(m)) goto fail;
    qhx_gmatch_reset(m);
    if (m->oom) goto fail;
    *out = m;
    return QHX_OK;
fail:
    qhx_gmatch_free(m);
    return qhx_fail(QHX_ERR_NOMEM, "out of memory");
}

qhx_status qhx_gmatch_error(const qhx_gmatch *m) {
    if (m->too_many == TOO_MANY_STACKS)
        return qhx_fail(QHX_ERR_RANGE, "grammar: a state grew past %d stacks (an ambiguous grammar, e.g. nested repetitions)",
                        QHX_GMATCH_MAX_STACKS);
    if (m->too_many == TOO_MUCH_WORK)
        return qhx_fail(QHX_ERR_RANGE, "grammar: too ambiguous to constrain (a mask stepped past %d M stacks; e.g. nested repetitions)",
                        QHX_GMATCH_MASK_WORK >> 20);
    return qhx_fail(QHX_ERR_NOMEM, "out of memory");
}

const char *qhx_gmatch_piece(const qhx_gmatch *m, int32_t id, size_t *len) {
    const qhx_tokenizer *t = m->g->tok;
    *len = 0;
    if (!t || id < 0 || id >= t->n_ids || !t->piece[id]) return NULL;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id == id && t->added[i].special) return NULL;
    *len = t->piece_len[id];
    return t->piece[id];
}
