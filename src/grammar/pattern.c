/* ECMAScript regular expressions (JSON Schema's `pattern`) -> GBNF over a JSON string's body.
 * A regex is regular, so it fits a grammar: alternation, groups, quantifiers and character
 * classes map one to one. What differs is the alphabet: the grammar reads the string as JSON
 * text, so a character the regex allows is also allowed in its escaped forms (\" \\ \n \u00XX),
 * and unanchored ends match any text. */
#include "grammar/pattern.h"
#include "util/error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t (*r)[2];
    size_t n, cap;
} cset;

typedef struct {
    const char *p;
    const char *prefix;
    qhx_buf *rules;
    int n_rules;
    const char *err;
} rx;

static int add(cset *s, uint32_t lo, uint32_t hi) {
    if (qhx_reserve(&s->r, &s->cap, s->n + 1, sizeof *s->r)) return -1;
    s->r[s->n][0] = lo, s->r[s->n][1] = hi;
    s->n++;
    return 0;
}

static int cmp_r(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void normalize(cset *s) {
    if (s->n) qsort(s->r, s->n, sizeof *s->r, cmp_r);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (k && s->r[i][0] <= s->r[k - 1][1] + 1) {
            if (s->r[i][1] > s->r[k - 1][1]) s->r[k - 1][1] = s->r[i][1];
        } else {
            s->r[k][0] = s->r[i][0], s->r[k][1] = s->r[i][1], k++;
        }
    }
    s->n = k;
}

static int negate(cset *s) {
    normalize(s);
    cset o = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[i][0] > next && add(&o, next, s->r[i][0] - 1)) return -1;
        next = s->r[i][1] + 1;
    }
    if (next <= 0x10FFFF && add(&o, next, 0x10FFFF)) return -1;
    free(s->r);
    *s = o;
    return 0;
}

static int has(const cset *s, uint32_t c) {
    for (size_t i = 0; i < s->n; i++)
        if (c >= s->r[i][0] && c <= s->r[i][1]) return 1;
    return 0;
}

static void put_cp(qhx_buf *b, uint32_t c) {
    char t[16];
    if (c < 0x10000) snprintf(t, sizeof t, "\\u%04x", c);
    else snprintf(t, sizeof t, "\\U%08x", c);
    qhx_buf_puts(b, t);
}

/* A set of characters as JSON text: the plain ones as a class, the others escaped. */
static void emit_set(qhx_buf *b, cset *s) {
    normalize(s);
    qhx_buf_puts(b, "(");
    int alt = 0;
    cset plain = {0};
    for (size_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i][0], hi = s->r[i][1];
        /* cut out 0x00-0x1f, '"' and '\\' */
        uint32_t cuts[][2] = {{0, 0x1f}, {'"', '"'}, {'\\', '\\'}};
        uint32_t a = lo;
        while (a <= hi) {
            int cut = -1;
            for (int k = 0; k < 3; k++)
                if (a >= cuts[k][0] && a <= cuts[k][1]) cut = k;
            if (cut >= 0) { a = cuts[cut][1] + 1; continue; }
            uint32_t e = hi;
            for (int k = 0; k < 3; k++)
                if (cuts[k][0] > a && cuts[k][0] - 1 < e) e = cuts[k][0] - 1;
            add(&plain, a, e);
            if (e == 0x10FFFF) break;
            a = e + 1;
        }
    }
    if (plain.n) {
        qhx_buf_puts(b, "[");
        for (size_t i = 0; i < plain.n; i++) {
            put_cp(b, plain.r[i][0]);
            if (plain.r[i][1] != plain.r[i][0]) qhx_buf_puts(b, "-"), put_cp(b, plain.r[i][1]);
        }
        qhx_buf_puts(b, "]");
        alt = 1;
    }
    free(plain.r);
    static const char *const short_esc[32] = {['\b'] = "b", ['\f'] = "f", ['\n'] = "n", ['\r'] = "r", ['\t'] = "t"};
    for (uint32_t c = 0; c < 0x20; c++) {
        if (!has(s, c)) continue;
        char t[64];
        if (short_esc[c]) snprintf(t, sizeof t, "%s\"\\\\%s\" | \"\\\\u00%02x\" | \"\\\\u00%02X\"", alt ? " | " : "", short_esc[c], c, c);
        else snprintf(t, sizeof t, "%s\"\\\\u00%02x\" | \"\\\\u00%02X\"", alt ? " | " : "", c, c);
        qhx_buf_puts(b, t);
        alt = 1;
    }
    if (has(s, '"')) qhx_buf_puts(b, alt ? " | \"\\\\\\\"\"" : "\"\\\\\\\"\""), alt = 1;
    if (has(s, '\\')) qhx_buf_puts(b, alt ? " | \"\\\\\\\\\"" : "\"\\\\\\\\\""), alt = 1;
    if (has(s, '/')) qhx_buf_puts(b, alt ? " | \"\\\\/\"" : "\"\\\\/\""), alt = 1;
    if (!alt) qhx_buf_puts(b, "[^\\x00-\\U0010ffff]");
    qhx_buf_puts(b, ")");
}

static int bad(rx *x, const char *what) {
    if (!x->err) x->err = what;
    return -1;
}

static int hexn(const char *p, int n, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < n; i++) {
        char c = p[i];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return -1;
        *v = *v << 4 | (uint32_t)h;
    }
    return 0;
}

static int add_class_escape(cset *s, char c) {
    int rc = 0;
    switch (c) {
    case 'd': return add(s, '0', '9');
    case 'w': return add(s, '0', '9') | add(s, 'A', 'Z') | add(s, 'a', 'z') | add(s, '_', '_');
    case 's':
        rc |= add(s, '\t', '\r') | add(s, ' ', ' ') | add(s, 0xa0, 0xa0) | add(s, 0x1680, 0x1680);
        rc |= add(s, 0x2000, 0x200a) | add(s, 0x2028, 0x2029) | add(s, 0x202f, 0x202f) | add(s, 0x205f, 0x205f);
        rc |= add(s, 0x3000, 0x3000) | add(s, 0xfeff, 0xfeff);
        return rc;
    }
    return 1; /* not a class escape */
}

/* One escaped character after '\\' (p at the letter): its code point, or -1 (x->err set). */
static long escape_char(rx *x) {
    char c = *x->p++;
    uint32_t v;
    switch (c) {
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'v': return '\v';
    case 'f': return '\f';
    case '0': return 0;
    case 'x': if (hexn(x->p, 2, &v)) return bad(x, "bad \\x escape"); x->p += 2; return v;
    case 'u': if (hexn(x->p, 4, &v)) return bad(x, "bad \\u escape"); x->p += 4; return v;
    case 'b': case 'B': return bad(x, "word boundaries (\\b, \\B) are not supported");
    case 'p': case 'P': return bad(x, "Unicode properties (\\p) are not supported");
    case 'c': case 'k': return bad(x, "\\c and \\k escapes are not supported");
    case 0: return bad(x, "pattern ends with \\");
    }
    if (c >= '1' && c <= '9') return bad(x, "backreferences are not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return bad(x, "unknown escape");
    return (unsigned char)c;
}

static long utf8_char(rx *x) {
    const unsigned char *p = (const unsigned char *)x->p;
    int k = *p < 0x80 ? 0 : *p >= 0xF0 ? 3 : *p >= 0xE0 ? 2 : 1;
    uint32_t v = k ? *p & (0x3F >> k) : *p;
    for (int i = 1; i <= k; i++) {
        if ((p[i] & 0xC0) != 0x80) return bad(x, "invalid UTF-8");
        v = v << 6 | (p[i] & 0x3F);
    }
    x->p += 1 + k;
    return v;
}

/* [...] at x->p (after '[') into s */
static int parse_class(rx *x, cset *s) {
    int neg = *x->p == '^';
    if (neg) x->p++;
    int first = 1;
    while (*x->p && (*x->p != ']' || (first && 0))) {
        first = 0;
        long lo;
        if (*x->p == '\\') {
            x->p++;
            char c = *x->p;
            if (c == 'd' || c == 'w' || c == 's') { x->p++; if (add_class_escape(s, c)) return -1; continue; }
            if (c == 'D' || c == 'W' || c == 'S') {
                cset t = {0};
                x->p++;
                if (add_class_escape(&t, (char)(c + 32)) || negate(&t)) { free(t.r); return -1; }
                for (size_t i = 0; i < t.n; i++) add(s, t.r[i][0], t.r[i][1]);
                free(t.r);
                continue;
            }
            if (c == 'b') { x->p++; lo = '\b'; }
            else if ((lo = escape_char(x)) < 0) return -1;
        } else {
            lo = utf8_char(x);
            if (lo < 0) return -1;
        }
        long hi = lo;
        if (x->p[0] == '-' && x->p[1] && x->p[1] != ']') {
            x->p++;
            if (*x->p == '\\') { x->p++; if ((hi = escape_char(x)) < 0) return -1; }
            else if ((hi = utf8_char(x)) < 0) return -1;
            if (hi < lo) return bad(x, "class range out of order");
        }
        if (add(s, (uint32_t)lo, (uint32_t)hi)) return -1;
    }
    if (*x->p != ']') return bad(x, "unterminated [");
    x->p++;
    return neg ? negate(s) : 0;
}

static int parse_alt(rx *x, qhx_buf *b, int top);

/* one atom, its quantifier after it */
static int parse_atom(rx *x, qhx_buf *b) {
    qhx_buf a = {0};
    cset s = {0};
    int rc = 0;
    char c = *x->p;
    if (c == '(') {
        x->p++;
        if (*x->p == '?') {
            if (x->p[1] == ':') x->p += 2;
            else return bad(x, "lookaround and named groups are not supported");
        }
        qhx_buf_puts(&a, "(");
        if (parse_alt(x, &a, 0)) rc = -1;
        else if (*x->p != ')') rc = bad(x, "unmatched (");
        else x->p++, qhx_buf_puts(&a, ")");
    } else if (c == '[') {
        x->p++;
        if (parse_class(x, &s)) rc = -1;
        else emit_set(&a, &s);
    } else if (c == '.') {
        x->p++;
        rc = add(&s, '\n', '\n') | add(&s, '\r', '\r') | add(&s, 0x2028, 0x2029) | negate(&s);
        if (!rc) emit_set(&a, &s);
    } else if (c == '\\') {
        x->p++;
        char e = *x->p;
        if (e == 'd' || e == 'w' || e == 's' || e == 'D' || e == 'W' || e == 'S') {
            x->p++;
            rc = add_class_escape(&s, e >= 'a' ? e : (char)(e + 32));
            if (!rc && e < 'a') rc = negate(&s);
            if (!rc) emit_set(&a, &s);
        } else {
            long v = escape_char(x);
            if (v < 0) rc = -1;
            else add(&s, (uint32_t)v, (uint32_t)v), emit_set(&a, &s);
        }
    } else if (c == '^' || c == '$') {
        rc = bad(x, "^ and $ are supported only at the ends of the pattern");
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        rc = bad(x, "a quantifier with nothing before it");
    } else {
        long v = utf8_char(x);
        if (v < 0) rc = -1;
        else add(&s, (uint32_t)v, (uint32_t)v), emit_set(&a, &s);
    }
    free(s.r);
    if (rc) { qhx_buf_free(&a); return -1; }
    /* quantifier */
    char q = *x->p;
    char t[64] = "";
    if (q == '*' || q == '+' || q == '?') {
        x->p++;
        t[0] = q, t[1] = 0;
    } else if (q == '{') {
        unsigned m, n;
        int used = 0;
        if (sscanf(x->p, "{%u,%u}%n", &m, &n, &used) == 2 && used) snprintf(t, sizeof t, "{%u,%u}", m, n);
        else if ((used = 0, sscanf(x->p, "{%u,}%n", &m, &used) == 1 && used)) snprintf(t, sizeof t, "{%u,}", m);
        else if ((used = 0, sscanf(x->p, "{%u}%n", &m, &used) == 1 && used)) snprintf(t, sizeof t, "{%u}", m);
        else { qhx_buf_free(&a); return bad(x, "bad {m,n} quantifier"); }
        if (m > 1000 || (strchr(t, ',') && t[strlen(t) - 2] != ',' && n > 1000)) { qhx_buf_free(&a); return bad(x, "quantifier bound over 1000"); }
        x->p += used;
    }
    if (t[0] && *x->p == '?') x->p++; /* lazy: the same language */
    if (t[0] && (*x->p == '*' || *x->p == '+' || *x->p == '{')) { qhx_buf_free(&a); return bad(x, "nested quantifier"); }
    if (t[0]) qhx_buf_puts(b, "(");
    qhx_buf_puts(b, a.s ? a.s : "\"\"");
    if (t[0]) qhx_buf_puts(b, ")"), qhx_buf_puts(b, t);
    qhx_buf_puts(b, " ");
    qhx_buf_free(&a);
    return 0;
}

static int parse_seq(rx *x, qhx_buf *b, int top) {
    int any = 0;
    while (*x->p && *x->p != '|' && *x->p != ')') {
        if (top && *x->p == '$' && (x->p[1] == 0 || x->p[1] == '|')) break;
        if (parse_atom(x, b)) return -1;
        any = 1;
    }
    if (!any) qhx_buf_puts(b, "\"\" ");
    return 0;
}

/* the any-text that unanchored ends match */
static const char *ANY = "([^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))*";

static int parse_alt(rx *x, qhx_buf *b, int top) {
    for (int first = 1;; first = 0) {
        if (!first) qhx_buf_puts(b, " | ");
        int start = top && *x->p == '^';
        if (start) x->p++;
        if (top && !start) qhx_buf_puts(b, ANY), qhx_buf_puts(b, " ");
        if (parse_seq(x, b, top)) return -1;
        if (top) {
            if (*x->p == '$') x->p++;
            else qhx_buf_puts(b, ANY);
        }
        if (*x->p != '|') return 0;
        x->p++;
    }
}

int qhx_pattern_gbnf(const char *re, const char *prefix, qhx_buf *rules, qhx_buf *body) {
    rx x = {.p = re, .prefix = prefix, .rules = rules};
    qhx_buf_puts(body, "(");
    if (parse_alt(&x, body, 1) || (*x.p && (x.err = "unmatched )"))) {
        qhx_fail(QHX_ERR_UNSUPPORTED, "%s (at offset %ld of the pattern)", x.err ? x.err : "out of memory", (long)(x.p - re));
        return -1;
    }
    qhx_buf_puts(body, ")");
    if (body->oom) return qhx_fail(QHX_ERR_NOMEM, "out of memory"), -1;
    return 0;
}
