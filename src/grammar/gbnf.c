/* GBNF, llama.cpp's grammar notation, compiled to the flat rule table the matcher walks:
 *   name ::= alternative | alternative      (a newline ends a rule unless inside parentheses or
 *                                             after ::= or |; # starts a comment)
 * with "literals" (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), [character classes] ([^...]
 * negated), . (any character), rule names, ( groups ), and the postfix * + ? {m} {m,} {m,n}.
 * The start rule is `root`. Left recursion cannot be walked by a stack matcher: it is refused,
 * naming the rule, as are undefined rules. A quantifier over a quantified element is folded into
 * one (stacked()), so x++ and (x+)* cost what x+ and x* do. */
#include "grammar/grammar.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/hashmap.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RULES 65536
#define MAX_REPEAT 4096 /* {m,n} bounds: each repetition is a copy */
#define MAX_DEPTH 200   /* nested groups */

typedef struct {
    qhx_gsym *s;
    size_t n, cap;
} seq;

typedef struct {
    char *name;
    seq *alts;
    size_t n_alts, cap_alts;
    int defined;
    const char *at;  /* where it was first used, for "undefined" (its line is counted then) */
} brule;

typedef struct {
    const char *p, *end, *start;
    brule *rules;
    size_t n_rules, cap_rules;
    qhx_strmap by_name; /* name -> rule: a schema's key can make thousands of rules */
    uint32_t (*ranges)[2];
    size_t n_ranges, cap_ranges;
    qhx_gcharset *cs;
    size_t n_cs, cap_cs;
    int depth;
    qhx_status err;
    char single;       /* the sequence or group just parsed: one element under this * + or ?, else 0 */
    qhx_gsym single_x; /* that element */
} parser;

static int line_of(const parser *ps, const char *at) {
    int line = 1;
    for (const char *q = ps->start; q < at && q < ps->end; q++) line += *q == '\n';
    return line;
}

static qhx_status perr(parser *ps, const char *what) {
    if (!ps->err) ps->err = qhx_fail(QHX_ERR_ARG, "grammar: line %d: %s", line_of(ps, ps->p), what);
    return ps->err;
}

static qhx_status oom(parser *ps) {
    if (!ps->err) ps->err = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    return ps->err;
}

static int seq_push(seq *q, uint8_t kind, int32_t arg) {
    if (qhx_reserve(&q->s, &q->cap, q->n + 1, sizeof *q->s)) return -1;
    q->s[q->n++] = (qhx_gsym){kind, arg};
    return 0;
}

static int word_char(int c) { return isalnum(c) || c == '-' || c == '_'; }

static void skip_space(parser *ps, int newline_ok) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        } else if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
            ps->p++;
        } else {
            break;
        }
    }
}

/* The rule named name[0..n), created (undefined) when new: its index, or -1. */
static int rule_id(parser *ps, const char *name, size_t n, const char *at) {
    int32_t found;
    if (qhx_strmap_get(&ps->by_name, name, n, &found)) return found;
    if (ps->n_rules >= MAX_RULES) return perr(ps, "too many rules"), -1;
    if (qhx_reserve(&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules)) return oom(ps), -1;
    brule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = strndup(name, n)) || qhx_strmap_put(&ps->by_name, name, n, (int32_t)ps->n_rules)) return free(r->name), oom(ps), -1;
    r->at = at;
    return (int)ps->n_rules++;
}

/* A rule for a group or repetition: "parent-N" */
static int new_rule(parser *ps, int parent) {
    char name[300];
    snprintf(name, sizeof name, "%.250s-%zu", ps->rules[parent].name, ps->n_rules);
    int r = rule_id(ps, name, strlen(name), ps->p);
    if (r >= 0) ps->rules[r].defined = 1;
    return r;
}

static int add_alt(parser *ps, int rule, seq *q) {
    brule *r = &ps->rules[rule];
    if (qhx_reserve(&r->alts, &r->cap_alts, r->n_alts + 1, sizeof *r->alts)) {
        free(q->s);
        return oom(ps), -1;
    }
    r->alts[r->n_alts++] = *q;
    *q = (seq){0};
    return 0;
}

static int add_range(parser *ps, uint32_t lo, uint32_t hi) {
    if (qhx_reserve(&ps->ranges, &ps->cap_ranges, ps->n_ranges + 1, sizeof *ps->ranges)) return oom(ps), -1;
    ps->ranges[ps->n_ranges][0] = lo;
    ps->ranges[ps->n_ranges][1] = hi;
    ps->n_ranges++;
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Closes the character set whose ranges start at `from`: sorted, merged, complemented when
 * negated. Its index, or -1. */
static int end_charset(parser *ps, size_t from, int negate) {
    uint32_t (*r)[2] = ps->ranges ? ps->ranges + from : NULL; /* an empty [^...] has none */
    size_t n = ps->n_ranges - from, k = 0;
    if (n) qsort(r, n, sizeof *r, cmp_range);
    for (size_t i = 0; i < n; i++) {
        if (k && r[i][0] <= r[k - 1][1] + 1) {
            if (r[i][1] > r[k - 1][1]) r[k - 1][1] = r[i][1];
        } else {
            r[k][0] = r[i][0], r[k][1] = r[i][1], k++;
        }
    }
    ps->n_ranges = from + k;
    if (negate) {
        uint32_t tmp[64][2], (*src)[2] = tmp;
        if (k > 64 && !(src = malloc(sizeof *src * k))) return oom(ps), -1;
        if (k) memcpy(src, ps->ranges + from, sizeof *src * k);
        ps->n_ranges = from;
        uint32_t next = 0;
        int rc = 0;
        for (size_t i = 0; i < k && !rc; i++) {
            if (src[i][0] > next) rc = add_range(ps, next, src[i][0] - 1);
            next = src[i][1] + 1;
        }
        if (!rc && next <= 0x10FFFF) rc = add_range(ps, next, 0x10FFFF);
        if (src != tmp) free(src);
        if (rc) return -1;
    }
    if (qhx_reserve(&ps->cs, &ps->cap_cs, ps->n_cs + 1, sizeof *ps->cs)) return oom(ps), -1;
    qhx_gcharset *c = &ps->cs[ps->n_cs];
    memset(c, 0, sizeof *c);
    c->off = (uint32_t)from;
    c->n = (uint32_t)(ps->n_ranges - from);
    for (uint32_t i = 0; i < c->n; i++)
        for (uint32_t cp = ps->ranges[from + i][0]; cp <= ps->ranges[from + i][1] && cp < 128; cp++)
            c->ascii[cp >> 6] |= 1ull << (cp & 63);
    return (int)ps->n_cs++;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class, escapes decoded: the code point, or -1. */
static long next_char(parser *ps) {
    const unsigned char *p = (const unsigned char *)ps->p, *end = (const unsigned char *)ps->end;
    if (p >= end) return perr(ps, "unexpected end of grammar"), -1;
    if (*p == '\\') {
        if (p + 1 >= end) return perr(ps, "unexpected end after \\"), -1;
        int digits = 0;
        switch (p[1]) {
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'n': ps->p += 2; return '\n';
        case 'r': ps->p += 2; return '\r';
        case 't': ps->p += 2; return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/': case '.':
            ps->p += 2;
            return p[1];
        default: return perr(ps, "unknown escape in a literal or class"), -1;
        }
        unsigned long v = 0;
        for (int i = 0; i < digits; i++) {
            int h = p + 2 + i < end ? hexval(p[2 + i]) : -1;
            if (h < 0) return perr(ps, "bad hexadecimal escape"), -1;
            v = v << 4 | (unsigned)h;
        }
        if (v > 0x10FFFF) return perr(ps, "escape beyond U+10FFFF"), -1;
        ps->p += 2 + digits;
        return (long)v;
    }
    /* UTF-8 */
    int need = *p < 0x80 ? 0 : *p >= 0xF0 ? 3 : *p >= 0xE0 ? 2 : *p >= 0xC0 ? 1 : -1;
    if (need < 0 || p + need >= end + (need ? 0 : 1)) return perr(ps, "invalid UTF-8"), -1;
    unsigned long v = need ? *p & (0x3F >> need) : *p;
    for (int i = 1; i <= need; i++) {
        if ((p[i] & 0xC0) != 0x80) return perr(ps, "invalid UTF-8"), -1;
        v = v << 6 | (p[i] & 0x3F);
    }
    ps->p += 1 + need;
    return (long)v;
}

static int parse_alternates(parser *ps, int rule);

/* A rule r ::= x r | ε (star) or r ::= x | ε (optional); the rule's index, or -1. */
static int repeat_rule(parser *ps, int parent, qhx_gsym x, int star) {
    int r = new_rule(ps, parent);
    if (r < 0) return -1;
    seq a = {0}, e = {0};
    if (seq_push(&a, x.kind, x.arg) || (star && seq_push(&a, G_RULE, r))) {
        free(a.s);
        return oom(ps), -1;
    }
    if (add_alt(ps, r, &a) || add_alt(ps, r, &e)) return -1;
    return r;
}

/* Applies {min,max} (max -1: unbounded) to the last symbol of q. */
static int repeat(parser *ps, int rule, seq *q, long min, long max) {
    qhx_gsym x = q->s[--q->n];
    for (long i = 0; i < min; i++)
        if (seq_push(q, x.kind, x.arg)) return oom(ps), -1;
    if (max < 0) {
        int r = repeat_rule(ps, rule, x, 1);
        return r < 0 || seq_push(q, G_RULE, r) ? -1 : 0;
    }
    /* max - min optional copies, nested: o1 ::= x o2 | ε ... so "aa" parses one way */
    int inner = -1;
    for (long i = min; i < max; i++) {
        int r = new_rule(ps, rule);
        if (r < 0) return -1;
        seq a = {0}, e = {0};
        if (seq_push(&a, x.kind, x.arg) || (inner >= 0 && seq_push(&a, G_RULE, inner))) {
            free(a.s);
            return oom(ps), -1;
        }
        if (add_alt(ps, r, &a) || add_alt(ps, r, &e)) return -1;
        inner = r;
    }
    if (inner >= 0 && seq_push(q, G_RULE, inner)) return oom(ps), -1;
    return 0;
}

static long parse_int(parser *ps) {
    if (ps->p >= ps->end || !isdigit((unsigned char)*ps->p)) return perr(ps, "expected a number in {}"), -1;
    long v = 0;
    while (ps->p < ps->end && isdigit((unsigned char)*ps->p)) {
        v = v * 10 + (*ps->p++ - '0');
        if (v > MAX_REPEAT) return perr(ps, "repetition bound over 4096"), -1;
    }
    return v;
}

/* q[from..) as one symbol: itself, or a rule holding it (a literal of several characters). */
static int one_symbol(parser *ps, int rule, seq *q, size_t from) {
    if (q->n == from) return perr(ps, "a repetition with nothing before it"), -1;
    if (q->n - from == 1) return 0;
    int r = new_rule(ps, rule);
    seq a = {0};
    if (r < 0) return -1;
    for (size_t i = from; i < q->n; i++)
        if (seq_push(&a, q->s[i].kind, q->s[i].arg)) return free(a.s), oom(ps), -1;
    if (add_alt(ps, r, &a)) return -1;
    q->n = from;
    return seq_push(q, G_RULE, r) ? (oom(ps), -1) : 0;
}

/* A quantifier over a quantified element, as one quantifier: (x+)+ is x+, (x?)? is x?, every other
 * pair of * + ? is x*. Stacked, they are ambiguous ("xx" is one x+ or two) and a state's stacks
 * double with each level; (x*)* would even be left-recursive. */
static char stacked(char inner, char outer) { return inner == outer && inner != '*' ? inner : '*'; }

/* One alternative: elements until | ) or the end of the rule. */
static int parse_sequence(parser *ps, int rule, seq *q, int nested) {
    size_t last = 0; /* where the last element starts in q */
    char lastq = 0;  /* the * + or ? over it, of the element lastx */
    qhx_gsym lastx = {0};
    for (;;) {
        skip_space(ps, nested);
        ps->single = last == 0 ? lastq : 0, ps->single_x = lastx;
        if (ps->p >= ps->end) return 0;
        char c = *ps->p;
        if (c != '*' && c != '+' && c != '?' && c != '{') last = q->n, lastq = 0;
        if (c == '|' || c == ')' || c == '\n' || c == '\r') return 0;
        if (c == '"') {
            ps->p++;
            while (ps->p < ps->end && *ps->p != '"') {
                size_t from = ps->n_ranges;
                long cp = next_char(ps);
                if (cp < 0 || add_range(ps, (uint32_t)cp, (uint32_t)cp)) return -1;
                int cs = end_charset(ps, from, 0);
                if (cs < 0 || seq_push(q, G_CHARS, cs)) return cs < 0 ? -1 : (oom(ps), -1);
            }
            if (ps->p >= ps->end) return perr(ps, "unterminated literal"), -1;
            ps->p++;
        } else if (c == '[') {
            ps->p++;
            int negate = ps->p < ps->end && *ps->p == '^';
            if (negate) ps->p++;
            size_t from = ps->n_ranges;
            while (ps->p < ps->end && *ps->p != ']') {
                long lo = next_char(ps), hi = lo;
                if (lo < 0) return -1;
                if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
                    ps->p++;
                    if ((hi = next_char(ps)) < 0) return -1;
                    if (hi < lo) return perr(ps, "character range out of order"), -1;
                }
                if (add_range(ps, (uint32_t)lo, (uint32_t)hi)) return -1;
            }
            if (ps->p >= ps->end) return perr(ps, "unterminated character class"), -1;
            ps->p++;
            int cs = end_charset(ps, from, negate);
            if (cs < 0 || seq_push(q, G_CHARS, cs)) return cs < 0 ? -1 : (oom(ps), -1);
        } else if (c == '.') {
            ps->p++;
            size_t from = ps->n_ranges;
            if (add_range(ps, 0, 0x10FFFF)) return -1;
            int cs = end_charset(ps, from, 0);
            if (cs < 0 || seq_push(q, G_CHARS, cs)) return cs < 0 ? -1 : (oom(ps), -1);
        } else if (word_char((unsigned char)c)) {
            const char *s = ps->p;
            while (ps->p < ps->end && word_char((unsigned char)*ps->p)) ps->p++;
            int r = rule_id(ps, s, (size_t)(ps->p - s), s);
            if (r < 0 || seq_push(q, G_RULE, r)) return r < 0 ? -1 : (oom(ps), -1);
        } else if (c == '(') {
            ps->p++;
            if (++ps->depth > MAX_DEPTH) return perr(ps, "groups nested too deep"), -1;
            int r = new_rule(ps, rule);
            if (r < 0 || parse_alternates(ps, r)) return -1;
            ps->depth--;
            skip_space(ps, 1);
            if (ps->p >= ps->end || *ps->p != ')') return perr(ps, "expected )"), -1;
            ps->p++;
            if (seq_push(q, G_RULE, r)) return oom(ps), -1;
            lastq = ps->single, lastx = ps->single_x; /* (x+) is x+ to a quantifier after it */
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (lastq && c != '{') { /* stacked: one quantifier over the element */
                c = stacked(lastq, c);
                q->n = last;
                if (seq_push(q, lastx.kind, lastx.arg)) return oom(ps), -1;
            } else {
                if (one_symbol(ps, rule, q, last)) return -1;
                lastx = q->s[q->n - 1];
            }
            ps->p++;
            long min = c == '+', max = c == '?' ? 1 : -1;
            if (c == '{') {
                skip_space(ps, 0);
                if ((min = parse_int(ps)) < 0) return -1;
                skip_space(ps, 0);
                max = min;
                if (ps->p < ps->end && *ps->p == ',') {
                    ps->p++;
                    skip_space(ps, 0);
                    max = -1;
                    if (ps->p < ps->end && *ps->p != '}' && (max = parse_int(ps)) < 0) return -1;
                    skip_space(ps, 0);
                }
                if (ps->p >= ps->end || *ps->p != '}') return perr(ps, "expected } after a repetition"), -1;
                ps->p++;
                if (max >= 0 && max < min) return perr(ps, "repetition {m,n} with n < m"), -1;
            }
            if (repeat(ps, rule, q, min, max)) return -1;
            lastq = c == '{' ? 0 : c;
        } else {
            return perr(ps, "unexpected character"), -1;
        }
    }
}

static int parse_alternates(parser *ps, int rule) {
    for (int n = 1;; n++) {
        seq q = {0};
        if (parse_sequence(ps, rule, &q, ps->depth > 0)) {
            free(q.s);
            return -1;
        }
        const char single = ps->single;
        if (add_alt(ps, rule, &q)) return -1;
        skip_space(ps, ps->depth > 0);
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            skip_space(ps, 1);
            continue;
        }
        ps->single = n == 1 ? single : 0;
        return 0;
    }
}

static int parse_rules(parser *ps) {
    for (;;) {
        skip_space(ps, 1);
        if (ps->p >= ps->end) return 0;
        const char *s = ps->p;
        while (ps->p < ps->end && word_char((unsigned char)*ps->p)) ps->p++;
        if (ps->p == s) return perr(ps, "expected a rule name"), -1;
        int r = rule_id(ps, s, (size_t)(ps->p - s), s);
        if (r < 0) return -1;
        if (ps->rules[r].defined) return perr(ps, "rule defined twice"), -1;
        ps->rules[r].defined = 1;
        skip_space(ps, 0);
        if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3)) return perr(ps, "expected ::="), -1;
        ps->p += 3;
        skip_space(ps, 1);
        if (parse_alternates(ps, r)) return -1;
        if (ps->p < ps->end && *ps->p == ')') return perr(ps, "unmatched )"), -1;
    }
}

/* Nullable rules, then the left corners: r -> s when s can come first in r. A cycle is left
 * recursion, which a stack matcher would follow forever. */
static int left_recursive(const parser *ps, int r, uint8_t *mark, const uint8_t *nullable) {
    if (mark[r] == 1) return r;
    if (mark[r] == 2) return -1;
    mark[r] = 1;
    const brule *b = &ps->rules[r];
    for (size_t a = 0; a < b->n_alts; a++)
        for (size_t i = 0; i < b->alts[a].n; i++) {
            qhx_gsym s = b->alts[a].s[i];
            if (s.kind != G_RULE) break;
            int hit = left_recursive(ps, s.arg, mark, nullable);
            if (hit >= 0) return hit;
            if (!nullable[s.arg]) break;
        }
    mark[r] = 2;
    return -1;
}

static int check(parser *ps) {
    for (size_t r = 0; r < ps->n_rules; r++)
        if (!ps->rules[r].defined)
            return ps->err = qhx_fail(QHX_ERR_ARG, "grammar: line %d: rule '%s' is not defined", line_of(ps, ps->rules[r].at),
                                      ps->rules[r].name), -1;
    uint8_t *nullable = calloc(ps->n_rules, 2);
    if (!nullable) return oom(ps), -1;
    uint8_t *mark = nullable + ps->n_rules;
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t r = 0; r < ps->n_rules; r++) {
            if (nullable[r]) continue;
            for (size_t a = 0; a < ps->rules[r].n_alts && !nullable[r]; a++) {
                const seq *q = &ps->rules[r].alts[a];
                size_t i = 0;
                while (i < q->n && q->s[i].kind == G_RULE && nullable[q->s[i].arg]) i++;
                if (i == q->n) nullable[r] = 1, changed = 1;
            }
        }
    }
    int bad = -1;
    for (size_t r = 0; r < ps->n_rules && bad < 0; r++) bad = left_recursive(ps, (int)r, mark, nullable);
    free(nullable);
    if (bad >= 0)
        return ps->err = qhx_fail(QHX_ERR_ARG, "grammar: rule '%s' is left-recursive (a rule that can start with "
                                               "itself cannot be matched left to right)", ps->rules[bad].name), -1;
    return 0;
}

static void free_parser(parser *ps) {
    for (size_t r = 0; r < ps->n_rules; r++) {
        for (size_t a = 0; a < ps->rules[r].n_alts; a++) free(ps->rules[r].alts[a].s);
        free(ps->rules[r].alts);
        free(ps->rules[r].name);
    }
    free(ps->rules);
    free(ps->ranges);
    free(ps->cs);
    qhx_strmap_free(&ps->by_name);
}

void qhx_grammar_free(qhx_grammar *g) {
    if (!g) return;
    for (int r = 0; r < g->n_rules; r++) free(g->names[r]);
    free(g->names);
    free(g->sym);
    free(g->cs);
    free(g->ranges);
    free(g->alt);
    free(g->rule_alt);
    free(g);
}

qhx_status qhx_gbnf_compile(const char *text, size_t len, const qhx_tokenizer *tok, qhx_grammar **out) {
    *out = NULL;
    parser ps = {.p = text, .end = text + len, .start = text};
    if (!text) return qhx_fail(QHX_ERR_ARG, "grammar: no text");
    if (qhx_strmap_init(&ps.by_name, 64)) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    if (parse_rules(&ps) || check(&ps)) {
        free_parser(&ps);
        return ps.err;
    }
    int root = -1;
    for (size_t r = 0; r < ps.n_rules; r++)
        if (!strcmp(ps.rules[r].name, "root")) root = (int)r;
    if (root < 0) {
        free_parser(&ps);
        return qhx_fail(QHX_ERR_ARG, "grammar: no rule named 'root'");
    }
    qhx_grammar *g = calloc(1, sizeof *g);
    size_t n_sym = 0, n_alt = 0;
    for (size_t r = 0; r < ps.n_rules; r++) {
        n_alt += ps.rules[r].n_alts;
        for (size_t a = 0; a < ps.rules[r].n_alts; a++) n_sym += ps.rules[r].alts[a].n + 1;
    }
    if (g) {
        g->sym = malloc(sizeof *g->sym * (n_sym + 1));
        g->alt = malloc(sizeof *g->alt * (n_alt + 1));
        g->rule_alt = malloc(sizeof *g->rule_alt * (ps.n_rules + 1));
        g->names = calloc(ps.n_rules + 1, sizeof *g->names);
    }
    if (!g || !g->sym || !g->alt || !g->rule_alt || !g->names) {
        qhx_grammar_free(g);
        free_parser(&ps);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    size_t k = 0, ka = 0;
    for (size_t r = 0; r < ps.n_rules; r++) {
        g->rule_alt[r] = (uint32_t)ka;
        for (size_t a = 0; a < ps.rules[r].n_alts; a++) {
            g->alt[ka++] = (int32_t)k;
            if (ps.rules[r].alts[a].n) memcpy(g->sym + k, ps.rules[r].alts[a].s, sizeof *g->sym * ps.rules[r].alts[a].n);
            k += ps.rules[r].alts[a].n;
            g->sym[k++] = (qhx_gsym){G_END, 0};
        }
        g->names[r] = ps.rules[r].name;
        ps.rules[r].name = NULL;
    }
    g->rule_alt[ps.n_rules] = (uint32_t)ka;
    g->sym[k] = (qhx_gsym){G_END, 0};
    g->n_sym = k;
    g->n_rules = (int)ps.n_rules;
    g->root = root;
    g->cs = ps.cs, g->n_cs = ps.n_cs, ps.cs = NULL;
    g->ranges = ps.ranges, g->n_ranges = ps.n_ranges, ps.ranges = NULL;
    g->tok = tok;
    free_parser(&ps);
    if (tok && !(g->trie = qhx_tokenizer_trie(tok))) {
        qhx_grammar_free(g);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    *out = g;
    return QHX_OK;
}

int qhx_gcharset_any(const qhx_grammar *g, const qhx_gcharset *c, uint32_t lo, uint32_t hi) {
    for (uint32_t i = 0; i < c->n; i++) {
        const uint32_t *r = g->ranges[c->off + i];
        if (r[0] <= hi && r[1] >= lo) return 1;
    }
    return 0;
}
