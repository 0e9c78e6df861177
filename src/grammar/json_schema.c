/* JSON Schema (draft 2020-12) -> GBNF, so a constrained reply always parses and validates.
 *
 * Each schema becomes one rule matching exactly the JSON values it accepts (no surrounding
 * space); containers allow `ws` (a space, or a newline and up to 20 spaces or tabs of indent) around
 * their punctuation, and the value up to 8 spaces or newlines before it.
 * Keywords apply per type, as the standard says: {"minimum": 3} still accepts "a string".
 * Enforced: type, properties, required, additionalProperties, items, prefixItems, minItems,
 * maxItems, enum, const, anyOf, oneOf (disjoint branches only: exclusion is not a grammar), allOf
 * (merged), $ref/$defs (local pointers; recursive too, but not back to itself before reading),
 * minLength, maxLength, pattern (pattern.c), integer minimum/maximum/exclusive*, number minimum 0,
 * and format date, time, date-time, uuid, ipv4
 * (other formats are annotations, as the standard makes them by default). Object members come in
 * any order when a schema lists at most 8 properties, else in the order listed. Any other
 * keyword that constrains a value is refused by name; annotations are ignored. */
#include "grammar/grammar.h"
#include "grammar/pattern.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ANY_ORDER 8    /* properties whose members may come in any order (2^n rules) */
#define MAX_RULES 20000
#define MAX_DEPTH 64       /* nested schemas, and merges */

typedef struct {
    char *ptr;       /* "#/$defs/x" */
    int rule;
} ref_rule;

typedef struct {
    int from, to; /* rule `from` may begin with rule `to`, reading nothing first */
} lead;

typedef struct {
    qhx_buf out;
    json_t *root;
    ref_rule *refs;
    size_t n_refs, cap_refs;
    lead *leads;
    size_t n_leads, cap_leads;
    int n_rules, depth;
    qhx_status err;
    char where[256];  /* the schema path being compiled, for errors */
} gen;

static int fail(gen *g, qhx_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(gen *g, qhx_status code, const char *fmt, ...) {
    if (g->err) return -1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g->err = qhx_fail(code, "json schema: %s%s%s", g->where[0] ? g->where : "", g->where[0] ? ": " : "", msg);
    return -1;
}

static void outf(gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outf(gen *g, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { qhx_buf_append(&g->out, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { g->out.oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    qhx_buf_append(&g->out, big, (size_t)n);
    free(big);
}

static int new_rule(gen *g) {
    if (g->n_rules >= MAX_RULES) return fail(g, QHX_ERR_ARG, "the schema needs over %d rules", MAX_RULES);
    return g->n_rules++;
}

/* what holds for one root only: its $ref rules (pointers into it) and their leads, once checked */
static void gen_forget_root(gen *g) {
    for (size_t i = 0; i < g->n_refs; i++) free(g->refs[i].ptr);
    g->n_refs = g->n_leads = 0;
}

static void gen_free(gen *g) {
    gen_forget_root(g);
    free(g->refs), free(g->leads);
}

static void leads_to(gen *g, int from, int to) {
    if (qhx_reserve(&g->leads, &g->cap_leads, g->n_leads + 1, sizeof *g->leads)) { fail(g, QHX_ERR_NOMEM, "out of memory"); return; }
    g->leads[g->n_leads++] = (lead){from, to};
}

static const char *ref_of(const gen *g, int rule) {
    for (size_t i = 0; i < g->n_refs; i++)
        if (g->refs[i].rule == rule) return g->refs[i].ptr;
    return NULL;
}

/* A $ref that comes back to itself before reading anything ({"$ref": "#"}, or through anyOf) would
 * be a left-recursive rule, which no left-to-right matcher can run: refused by its pointer. A
 * depth-first walk over the leads; a lead back to a rule on the walk's stack closes a cycle. */
static int no_left_cycle(gen *g) {
    const size_t n = (size_t)g->n_rules;
    int *start = calloc(n + 2, sizeof *start), *adj = malloc((g->n_leads + 1) * sizeof *adj);
    int *stack = malloc((n + 1) * 2 * sizeof *stack); /* pairs: a rule, the next of its leads to follow */
    uint8_t *color = calloc(n + 1, 1);                /* 0 unseen, 1 on the stack, 2 done */
    int rc = start && adj && stack && color ? 0 : fail(g, QHX_ERR_NOMEM, "out of memory");
    /* the leads by rule, a counting sort: rule r's are adj[start[r] .. start[r + 1]) */
    for (size_t i = 0; !rc && i < g->n_leads; i++) start[g->leads[i].from + 2]++;
    for (size_t r = 0; !rc && r < n; r++) start[r + 2] += start[r + 1];
    for (size_t i = 0; !rc && i < g->n_leads; i++) adj[start[g->leads[i].from + 1]++] = g->leads[i].to;
    for (int r0 = 0; !rc && r0 < (int)n; r0++) {
        if (color[r0]) continue;
        int top = 0;
        stack[0] = r0, stack[1] = start[r0], color[r0] = 1;
        while (top >= 0 && !rc) {
            const int r = stack[2 * top];
            if (stack[2 * top + 1] == start[r + 1]) { color[r] = 2, top--; continue; }
            const int to = adj[stack[2 * top + 1]++];
            if (color[to] == 0) { top++, stack[2 * top] = to, stack[2 * top + 1] = start[to], color[to] = 1; continue; }
            if (color[to] == 2) continue;
            int k = top; /* the cycle: the stack from `to` up, named by its first $ref */
            while (stack[2 * k] != to) k--;
            const char *ptr = NULL;
            for (; k <= top && !ptr; k++) ptr = ref_of(g, stack[2 * k]);
            rc = fail(g, QHX_ERR_UNSUPPORTED, "$ref '%.100s' comes back to itself before reading anything (through "
                                              "$ref alone, anyOf or oneOf), which no left-to-right grammar can enforce", ptr ? ptr : "#");
        }
    }
    free(start), free(adj), free(stack), free(color);
    return rc;
}

/* A GBNF literal for bytes s[0..n): "..." with escapes. */
static void lit(qhx_buf *b, const char *s, size_t n) {
    qhx_buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') snprintf(esc, sizeof esc, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", c);
        else esc[0] = (char)c, esc[1] = 0;
        qhx_buf_puts(b, esc);
    }
    qhx_buf_puts(b, "\"");
}

/* The GBNF literal for the text pre + mid + post (malloc'd; NULL when out of memory): a key with its
 * quotes, a tool call's tags. */
static char *lit_of(const char *pre, const char *mid, const char *post) {
    qhx_buf t = {0}, b = {0};
    qhx_buf_puts(&t, pre), qhx_buf_puts(&t, mid), qhx_buf_puts(&t, post);
    if (!t.oom) lit(&b, t.s, t.len);
    qhx_buf_free(&t);
    if (b.oom) qhx_buf_free(&b);
    return b.s;
}

/* A value's compact JSON text as a GBNF literal, keys in the order written. */
static int lit_json(gen *g, qhx_buf *b, const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!s) return fail(g, QHX_ERR_NOMEM, "out of memory");
    lit(b, s, strlen(s));
    free(s);
    return 0;
}

static const char *PRELUDE =
    "ws ::= \" \"? | \"\\n\" [ \\t]{0,20}\n"
    "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "int ::= \"-\"? (\"0\" | [1-9] [0-9]*)\n"
    "integer ::= int (\".0\")?\n"
    "frac ::= (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n"
    "number ::= int frac\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)*)? \"}\"\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
    "never ::= [^\\x00-\\U0010ffff]\n"
    /* formats */
    "d2 ::= [0-9] [0-9]\n"
    "year ::= [0-9]{4}\n"
    "leap-year ::= d2 (\"0\" [48] | [2468] [048] | [13579] [26]) | (\"0\" [48] | [2468] [048] | [13579] [26]) \"00\"\n"
    "date ::= year \"-\" (\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"
    " | year \"-\" (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\")"
    " | year \"-02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]) | leap-year \"-02-29\"\n"
    /* a leap second only as 23:59:60 in UTC: the offsets that put one elsewhere are refused */
    "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]+)? "
    "([zZ] | [-+] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9]) | \"23:59:60\" (\".\" [0-9]+)? ([zZ] | [-+] \"00:00\")\n"
    "date-time ::= date [tT] time\n"
    "hex ::= [0-9a-fA-F]\n"
    "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"
    "octet ::= [0-9] | [1-9] [0-9] | \"1\" [0-9] [0-9] | \"2\" [0-4] [0-9] | \"25\" [0-5]\n"
    "ipv4 ::= octet \".\" octet \".\" octet \".\" octet\n";

static int schema_rule(gen *g, json_t *s);

/* ---- merging (allOf, and a schema's own keywords with each of its anyOf branches) --------------- */

static json_t *resolve(gen *g, const char *ref);

static int is_annotation(const char *k) {
    static const char *const ann[] = {"title", "description", "$schema", "$id", "$comment", "default", "examples",
                                      "deprecated", "readOnly", "writeOnly", "$anchor", "$defs", "definitions",
                                      "contentMediaType", "contentEncoding", "contentSchema", "$vocabulary", NULL};
    for (int i = 0; ann[i]; i++)
        if (!strcmp(k, ann[i])) return 1;
    return 0;
}

static const char *const TYPES[] = {"null", "boolean", "object", "array", "number", "string", "integer"};
enum { T_NULL = 1, T_BOOL = 2, T_OBJECT = 4, T_ARRAY = 8, T_NUMBER = 16, T_STRING = 32, T_INTEGER = 64, T_ALL = 127 };

static int type_bit(const json_t *one) {
    for (int k = 0; k < 7; k++)
        if (json_is_string(one) && !strcmp(json_string_value(one), TYPES[k])) return 1 << k;
    return 0;
}

/* The types a schema's "type" allows, as bits (T_ALL when absent); -1 when malformed. */
static int type_bits(gen *g, const json_t *t) {
    if (!t) return T_ALL;
    int bits = 0;
    if (json_is_string(t)) {
        if (!(bits = type_bit(t))) return fail(g, QHX_ERR_ARG, "'type' names no JSON type");
    } else if (json_is_array(t)) {
        size_t i;
        const json_t *one;
        json_array_foreach(t, i, one) {
            int b = type_bit(one);
            if (!b) return fail(g, QHX_ERR_ARG, "'type' names no JSON type");
            bits |= b;
        }
    } else {
        return fail(g, QHX_ERR_ARG, "'type' must be a string or an array of them");
    }
    if (bits & T_NUMBER) bits |= T_INTEGER; /* a number type holds the integers */
    return bits;
}

static json_t *types_json(int bits) {
    json_t *a = json_array();
    for (int k = 0; k < 7; k++)
        if (bits & (1 << k)) json_array_append_new(a, json_string(TYPES[k]));
    return a;
}

/* a and b into one schema that accepts what both accept (NULL and g->err on failure) */
static json_t *merge(gen *g, json_t *a, json_t *b) {
    if (json_is_true(a)) return json_incref(b);
    if (json_is_true(b)) return json_incref(a);
    if (json_is_false(a) || json_is_false(b)) return json_false();
    if (!json_is_object(a) || !json_is_object(b)) return fail(g, QHX_ERR_ARG, "a schema must be an object or a boolean"), NULL;
    if (++g->depth > MAX_DEPTH) return fail(g, QHX_ERR_ARG, "allOf/$ref nested too deep"), NULL;
    json_t *ap = json_object_get(a, "additionalProperties"), *bp = json_object_get(b, "additionalProperties");
    json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    if ((ap && pb && !json_equal(pa, pb)) || (bp && pa && !json_equal(pa, pb))) {
        g->depth--;
        return fail(g, QHX_ERR_UNSUPPORTED, "'additionalProperties' beside properties of another schema (allOf, $ref, "
                                            "anyOf) cannot be enforced"), NULL;
    }
    json_t *m = json_deep_copy(a);
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v) {
        json_t *old = json_object_get(m, k);
        if (!old || is_annotation(k)) {
            if (!old) json_object_set(m, k, v);
            continue;
        }
        if (json_equal(old, v)) continue;
        if (!strcmp(k, "type")) {
            int x = type_bits(g, old), y = type_bits(g, v);
            if (x < 0 || y < 0) break;
            int both = x & y;
            if ((x & T_NUMBER) && !(y & T_NUMBER)) both &= ~T_NUMBER;
            if ((y & T_NUMBER) && !(x & T_NUMBER)) both &= ~T_NUMBER;
            json_object_set_new(m, k, types_json(both));
        } else if (!strcmp(k, "required")) {
            json_t *r = json_deep_copy(old), *e;
            size_t i;
            json_array_foreach(v, i, e) json_array_append(r, e);
            json_object_set_new(m, k, r);
        } else if (!strcmp(k, "properties")) {
            json_t *p = json_deep_copy(old), *e;
            const char *name;
            json_object_foreach(v, name, e) {
                json_t *was = json_object_get(p, name);
                json_object_set_new(p, name, was ? json_pack("{s:[OO]}", "allOf", was, e) : json_incref(e));
            }
            json_object_set_new(m, k, p);
        } else if (!strcmp(k, "items") || !strcmp(k, "additionalProperties")) {
            json_object_set_new(m, k, json_pack("{s:[OO]}", "allOf", old, v));
        } else if (!strcmp(k, "minimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems") ||
                   !strcmp(k, "exclusiveMinimum")) {
            if (json_number_value(v) > json_number_value(old)) json_object_set(m, k, v);
        } else if (!strcmp(k, "maximum") || !strcmp(k, "maxLength") || !strcmp(k, "maxItems") ||
                   !strcmp(k, "exclusiveMaximum")) {
            if (json_number_value(v) < json_number_value(old)) json_object_set(m, k, v);
        } else {
            fail(g, QHX_ERR_ARG, "allOf: '%s' differs between the schemas merged, which is not supported", k);
            break;
        }
    }
    g->depth--;
    if (g->err) { json_decref(m); return NULL; }
    return m;
}

/* s with allOf and $ref (when it has siblings) folded in: a new reference */
static json_t *flatten(gen *g, json_t *s) {
    if (!json_is_object(s)) return json_incref(s);
    json_t *all = json_object_get(s, "allOf"), *ref = json_object_get(s, "$ref");
    if (!all && !ref) return json_incref(s);
    if (++g->depth > MAX_DEPTH) return fail(g, QHX_ERR_ARG, "allOf/$ref nested too deep"), NULL;
    json_t *m = json_deep_copy(s);
    json_object_del(m, "allOf");
    json_object_del(m, "$ref");
    if (all && !json_is_array(all)) { fail(g, QHX_ERR_ARG, "'allOf' must be an array"); goto out; }
    if (ref) {
        if (!json_is_string(ref)) { fail(g, QHX_ERR_ARG, "'$ref' must be a string"); goto out; }
        json_t *t = resolve(g, json_string_value(ref)), *f = t ? flatten(g, t) : NULL;
        json_t *x = f ? merge(g, m, f) : NULL;
        json_decref(f);
        json_decref(m);
        m = x;
        if (!m) goto out;
    }
    size_t i;
    json_t *e;
    json_array_foreach(all, i, e) {
        json_t *f = flatten(g, e), *x = f ? merge(g, m, f) : NULL;
        json_decref(f);
        json_decref(m);
        if (!(m = x)) goto out;
    }
out:
    g->depth--;
    if (g->err) { json_decref(m); return NULL; }
    return m;
}

/* ---- $ref ------------------------------------------------------------------------------------------ */

/* A local JSON pointer ("#", "#/$defs/a", with ~0 ~1 and %-escapes) into the root. */
static json_t *resolve(gen *g, const char *ref) {
    if (ref[0] != '#') return fail(g, QHX_ERR_UNSUPPORTED, "$ref '%.100s' is not local (only #/... pointers are)", ref), NULL;
    json_t *at = g->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char key[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof key) {
            if (p[0] == '~' && p[1] == '0') key[n++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1') key[n++] = '/', p += 2;
            else if (p[0] == '%' && p[1] && p[2]) {
                unsigned v;
                if (sscanf(p + 1, "%2x", &v) != 1) break;
                key[n++] = (char)v, p += 3;
            } else key[n++] = *p++;
        }
        key[n] = 0;
        if (json_is_object(at)) at = json_object_get(at, key);
        else if (json_is_array(at)) {
            char *end;
            long i = strtol(key, &end, 10);
            at = *end || !n ? NULL : json_array_get(at, (size_t)i);
        } else at = NULL;
        if (!at) break;
    }
    if (*p || !at) return fail(g, QHX_ERR_ARG, "$ref '%.100s' points at nothing", ref), NULL;
    return at;
}

/* ---- the value kinds --------------------------------------------------------------------------------- */

static int ref_rule_of(gen *g, const char *ref) {
    for (size_t i = 0; i < g->n_refs; i++)
        if (!strcmp(g->refs[i].ptr, ref)) return g->refs[i].rule;
    json_t *t = resolve(g, ref);
    if (!t) return -1;
    int r = new_rule(g);
    if (r < 0 || qhx_reserve(&g->refs, &g->cap_refs, g->n_refs + 1, sizeof *g->refs)) return r < 0 ? -1 : fail(g, QHX_ERR_NOMEM, "out of memory");
    g->refs[g->n_refs++] = (ref_rule){strdup(ref), r};
    int body = schema_rule(g, t);
    if (body < 0) return -1;
    outf(g, "r%d ::= r%d\n", r, body);
    leads_to(g, r, body);
    return r;
}

/* Integers in [lo, hi] (as decimal strings of the same length, no sign) */
static void digits_between(qhx_buf *b, const char *lo, const char *hi, size_t n) {
    if (n == 0) return;
    if (lo[0] == hi[0]) {
        char c[2] = {lo[0], 0};
        lit(b, c, 1);
        qhx_buf_puts(b, " ");
        digits_between(b, lo + 1, hi + 1, n - 1);
        return;
    }
    int lo_zeros = 1, hi_nines = 1;
    for (size_t i = 1; i < n; i++) lo_zeros &= lo[i] == '0', hi_nines &= hi[i] == '9';
    char tmp[64];
    qhx_buf_puts(b, "(");
    if (lo_zeros && hi_nines) {
        snprintf(tmp, sizeof tmp, "[%c-%c] [0-9]{%zu}", lo[0], hi[0], n - 1);
        qhx_buf_puts(b, tmp);
    } else {
        char nines[32], zeros[32];
        memset(nines, '9', n), memset(zeros, '0', n);
        char c[2] = {lo[0], 0};
        lit(b, c, 1);
        qhx_buf_puts(b, " (");
        digits_between(b, lo + 1, nines, n - 1);
        qhx_buf_puts(b, ")");
        if (lo[0] + 1 <= hi[0] - 1) {
            snprintf(tmp, sizeof tmp, " | [%c-%c] [0-9]{%zu}", lo[0] + 1, hi[0] - 1, n - 1);
            qhx_buf_puts(b, tmp);
        }
        qhx_buf_puts(b, " | ");
        c[0] = hi[0];
        lit(b, c, 1);
        qhx_buf_puts(b, " (");
        digits_between(b, zeros, hi + 1, n - 1);
        qhx_buf_puts(b, ")");
    }
    qhx_buf_puts(b, ")");
}

/* Non-negative integers in [lo, hi] (hi < 0: no bound), without leading zeros */
static void nonneg_range(qhx_buf *b, long long lo, long long hi) {
    char a[32], z[32];
    int first = 1;
    int la = snprintf(a, sizeof a, "%lld", lo);
    int lh = hi >= 0 ? snprintf(z, sizeof z, "%lld", hi) : 99;
    qhx_buf_puts(b, "(");
    for (int len = la; len <= lh && len <= 19; len++) {
        char from[32], to[32];
        if (len == la) memcpy(from, a, (size_t)la + 1);
        else { memset(from, '0', (size_t)len); from[0] = '1'; from[len] = 0; }
        if (hi >= 0 && len == lh) memcpy(to, z, (size_t)lh + 1);
        else { memset(to, '9', (size_t)len); to[len] = 0; }
        if (hi < 0 && len == la + 1) { /* every longer one */
            char tmp[64];
            snprintf(tmp, sizeof tmp, "%s[1-9] [0-9]{%d,}", first ? "" : " | ", la);
            qhx_buf_puts(b, tmp);
            first = 0;
            break;
        }
        if (!first) qhx_buf_puts(b, " | ");
        first = 0;
        qhx_buf_puts(b, "(");
        digits_between(b, from, to, (size_t)len);
        qhx_buf_puts(b, ")");
    }
    qhx_buf_puts(b, ")");
}

static int bound(gen *g, const json_t *s, const char *k, double *v) {
    json_t *x = json_object_get(s, k);
    if (!x) return 0;
    if (!json_is_number(x)) return fail(g, QHX_ERR_ARG, "'%s' must be a number", k);
    *v = json_number_value(x);
    return 1;
}

/* The integers the schema's bounds allow (and N.0, which JSON Schema counts as integral; not N.00: a
 * model that starts on zeros must not be able to write them forever) */
static int integer_rule(gen *g, const json_t *s) {
    double lo = -INFINITY, hi = INFINITY, v = 0;
    int k;
    if ((k = bound(g, s, "minimum", &v)) < 0) return -1;
    if (k) lo = ceil(v);
    if ((k = bound(g, s, "exclusiveMinimum", &v)) < 0) return -1;
    if (k && floor(v) + 1 > lo) lo = floor(v) + 1;
    if ((k = bound(g, s, "maximum", &v)) < 0) return -1;
    if (k) hi = floor(v);
    if ((k = bound(g, s, "exclusiveMaximum", &v)) < 0) return -1;
    if (k && ceil(v) - 1 < hi) hi = ceil(v) - 1;
    if (lo < -1e18 && lo != -INFINITY) return fail(g, QHX_ERR_UNSUPPORTED, "integer bounds beyond 1e18 are not supported");
    if (hi > 1e18 && hi != INFINITY) return fail(g, QHX_ERR_UNSUPPORTED, "integer bounds beyond 1e18 are not supported");
    int r = new_rule(g);
    if (r < 0) return -1;
    if (lo == -INFINITY && hi == INFINITY) { outf(g, "r%d ::= integer\n", r); return r; }
    if (lo > hi) { outf(g, "r%d ::= never\n", r); return r; }
    qhx_buf b = {0};
    int alt = 0;
    if (lo < 0) { /* -x for x in [max(1, -hi), -lo] */
        qhx_buf_puts(&b, "\"-\" ");
        nonneg_range(&b, hi < 1 ? (long long)-hi : 1, lo == -INFINITY ? -1 : (long long)-lo);
        alt = 1;
    }
    if (hi >= 0) {
        if (alt) qhx_buf_puts(&b, " | ");
        nonneg_range(&b, lo > 0 ? (long long)lo : 0, hi == INFINITY ? -1 : (long long)hi);
    }
    if (b.oom) { qhx_buf_free(&b); return fail(g, QHX_ERR_NOMEM, "out of memory"); }
    outf(g, "r%d ::= (%s) (\".0\")?\n", r, b.s);
    qhx_buf_free(&b);
    return r;
}

static int number_rule(gen *g, const json_t *s) {
    double v = 0;
    int r = new_rule(g);
    if (r < 0) return -1;
    int has_min = bound(g, s, "minimum", &v);
    if (has_min < 0) return -1;
    const char *k[] = {"exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf"};
    for (int i = 0; i < 4; i++)
        if (json_object_get(s, k[i]))
            return fail(g, QHX_ERR_UNSUPPORTED, "'%s' on numbers that need not be integers cannot be enforced", k[i]);
    if (has_min && v != 0)
        return fail(g, QHX_ERR_UNSUPPORTED, "'minimum' other than 0 on numbers that need not be integers cannot be enforced");
    if (has_min) outf(g, "r%d ::= (\"0\" | [1-9] [0-9]*) frac\n", r);
    else outf(g, "r%d ::= number\n", r);
    return r;
}

static int count(gen *g, const json_t *s, const char *k, long *v) {
    json_t *x = json_object_get(s, k);
    if (!x) return 0;
    double d = json_number_value(x);
    if (!json_is_number(x) || d < 0 || d != floor(d)) return fail(g, QHX_ERR_ARG, "'%s' must be a non-negative integer", k);
    if (d > 4096) return fail(g, QHX_ERR_UNSUPPORTED, "'%s' over 4096 is not supported", k);
    *v = (long)d;
    return 1;
}

static int string_rule(gen *g, const json_t *s) {
    long min = 0, max = -1;
    if (count(g, s, "minLength", &min) < 0 || count(g, s, "maxLength", &max) < 0) return -1;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    const char *f = json_is_string(fmt) ? json_string_value(fmt) : NULL;
    static const char *const known[] = {"date", "time", "date-time", "uuid", "ipv4", NULL};
    int kf = -1;
    for (int i = 0; f && known[i]; i++)
        if (!strcmp(f, known[i])) kf = i;
    int r = new_rule(g);
    if (r < 0) return -1;
    if (pat) {
        if (!json_is_string(pat)) return fail(g, QHX_ERR_ARG, "'pattern' must be a string");
        if (min || max >= 0 || kf >= 0)
            return fail(g, QHX_ERR_UNSUPPORTED, "'pattern' together with '%s' cannot be enforced",
                        kf >= 0 ? "format" : min ? "minLength" : "maxLength");
        char prefix[32];
        snprintf(prefix, sizeof prefix, "r%d-p", r);
        qhx_buf body = {0};
        if (qhx_pattern_gbnf(json_string_value(pat), prefix, &g->out, &body)) {
            qhx_buf_free(&body);
            return fail(g, QHX_ERR_UNSUPPORTED, "'pattern': %s", qhx_last_error());
        }
        outf(g, "r%d ::= \"\\\"\" %s \"\\\"\"\n", r, body.s ? body.s : "");
        qhx_buf_free(&body);
        return r;
    }
    if (kf >= 0) {
        if (min || max >= 0) return fail(g, QHX_ERR_UNSUPPORTED, "'format' together with a length cannot be enforced");
        outf(g, "r%d ::= \"\\\"\" %s \"\\\"\"\n", r, known[kf]);
        return r;
    }
    if (max >= 0 && max < min) { outf(g, "r%d ::= never\n", r); return r; }
    if (max >= 0) outf(g, "r%d ::= \"\\\"\" char{%ld,%ld} \"\\\"\"\n", r, min, max);
    else if (min) outf(g, "r%d ::= \"\\\"\" char{%ld,} \"\\\"\"\n", r, min);
    else outf(g, "r%d ::= string\n", r);
    return r;
}

static int array_rule(gen *g, const json_t *s) {
    long min = 0, max = -1;
    if (count(g, s, "minItems", &min) < 0 || count(g, s, "maxItems", &max) < 0) return -1;
    json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    json_t *uniq = json_object_get(s, "uniqueItems");
    if (json_is_true(uniq)) return fail(g, QHX_ERR_UNSUPPORTED, "'uniqueItems' cannot be enforced");
    if (prefix && !json_is_array(prefix)) return fail(g, QHX_ERR_ARG, "'prefixItems' must be an array");
    long np = prefix ? (long)json_array_size(prefix) : 0;
    if (json_is_false(items) && (max < 0 || max > np)) max = np; /* nothing after the prefix */
    int r = new_rule(g);
    if (r < 0) return -1;
    if (max >= 0 && max < min) { outf(g, "r%d ::= never\n", r); return r; }
    int *el = calloc((size_t)np + 1, sizeof *el);
    if (!el) return fail(g, QHX_ERR_NOMEM, "out of memory");
    for (long i = 0; i < np; i++)
        if ((el[i] = schema_rule(g, json_array_get(prefix, (size_t)i))) < 0) { free(el); return -1; }
    int rest = items ? schema_rule(g, items) : -2; /* -2: any value */
    if (rest == -1) { free(el); return -1; }
    /* a chain: position i may end (i >= min) or take one more element */
    long last = np > min ? np : min;
    if (last > 4096) { free(el); return fail(g, QHX_ERR_UNSUPPORTED, "arrays of over 4096 fixed items are not supported"); }
    int chain0 = g->n_rules;
    g->n_rules += (int)last + 1;
    for (long i = 0; i <= last; i++) {
        char item[32];
        if (i < np) snprintf(item, sizeof item, "r%d", el[i]);
        else if (rest == -2) snprintf(item, sizeof item, "value");
        else snprintf(item, sizeof item, "r%d", rest);
        const char *sep = i ? "\",\" ws " : "";
        outf(g, "r%d ::= ", chain0 + (int)i);
        int any = 0;
        if (i >= min && (max < 0 || i <= max)) outf(g, "\"]\""), any = 1;
        if (max >= 0 && i >= max) { if (!any) outf(g, "never"); outf(g, "\n"); continue; }
        if (i < last) {
            outf(g, "%s%s%s ws r%d\n", any ? " | " : "", sep, item, chain0 + (int)i + 1);
        } else if (max < 0) {
            outf(g, "%s%s%s ws (\",\" ws %s ws)* \"]\"\n", any ? " | " : "", sep, item, item);
        } else {
            outf(g, "%s%s%s ws (\",\" ws %s ws){0,%ld} \"]\"\n", any ? " | " : "", sep, item, item, max - i - 1);
        }
    }
    free(el);
    outf(g, "r%d ::= \"[\" ws r%d\n", r, chain0);
    return r;
}

/* ---- objects ------------------------------------------------------------------------------------- */

typedef struct {
    uint32_t *cp;   /* a name's characters, as they appear between the quotes of its JSON key */
    size_t n;
} name_cps;

static size_t utf8_cps(const char *s, uint32_t *out) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int k = *p < 0x80 ? 0 : *p >= 0xF0 ? 3 : *p >= 0xE0 ? 2 : 1;
        uint32_t v = k ? *p & (0x3F >> k) : *p;
        p++;
        for (int i = 0; i < k && *p; i++) v = v << 6 | (*p++ & 0x3F);
        out[n++] = v;
    }
    return n;
}

static void cp_class(qhx_buf *b, uint32_t c) {
    char t[16];
    snprintf(t, sizeof t, c < 0x10000 ? "\\u%04x" : "\\U%08x", c);
    qhx_buf_puts(b, t);
}

/* Rule for the rest of a key body that is none of names[lo..hi) (which share `depth` characters) */
static int not_names(gen *g, name_cps *names, size_t lo, size_t hi, size_t depth) {
    int r = new_rule(g);
    if (r < 0) return -1;
    qhx_buf b = {0};
    int whole = 0; /* a name ends here */
    size_t i = lo;
    while (i < hi && names[i].n == depth) whole = 1, i++;
    qhx_buf_puts(&b, "[^\"\\\\\\x00-\\x1f");
    for (size_t j = i; j < hi;) {
        uint32_t c = names[j].cp[depth];
        cp_class(&b, c);
        while (j < hi && names[j].cp[depth] == c) j++;
    }
    qhx_buf_puts(&b, "] char*");
    int escaped = 0; /* a name goes on with an escape here: other escapes are not told apart from it */
    for (size_t j = i; j < hi; j++) escaped |= names[j].cp[depth] == '\\';
    if (!escaped) qhx_buf_puts(&b, " | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" hex{4}) char*");
    if (!whole) qhx_buf_puts(&b, " | \"\"");
    for (size_t j = i; j < hi;) {
        uint32_t c = names[j].cp[depth];
        size_t k = j;
        while (k < hi && names[k].cp[depth] == c) k++;
        int sub = not_names(g, names, j, k, depth + 1);
        if (sub < 0) { qhx_buf_free(&b); return -1; }
        char t[64];
        qhx_buf_puts(&b, " | [");
        cp_class(&b, c);
        snprintf(t, sizeof t, "] r%d", sub);
        qhx_buf_puts(&b, t);
        j = k;
    }
    if (b.oom) { qhx_buf_free(&b); return fail(g, QHX_ERR_NOMEM, "out of memory"); }
    outf(g, "r%d ::= %s\n", r, b.s);
    qhx_buf_free(&b);
    return r;
}

static int cmp_names(const void *a, const void *b) {
    const name_cps *x = a, *y = b;
    for (size_t i = 0; i < x->n && i < y->n; i++)
        if (x->cp[i] != y->cp[i]) return x->cp[i] < y->cp[i] ? -1 : 1;
    return x->n < y->n ? -1 : x->n > y->n;
}

/* A JSON key that is none of the n names (JSON-escaped bodies) */
static int other_key(gen *g, char **body, size_t n) {
    name_cps *names = calloc(n + 1, sizeof *names);
    if (!names) return fail(g, QHX_ERR_NOMEM, "out of memory");
    int r = -1;
    for (size_t i = 0; i < n; i++) {
        if (!(names[i].cp = malloc(sizeof(uint32_t) * (strlen(body[i]) + 1)))) { fail(g, QHX_ERR_NOMEM, "out of memory"); goto out; }
        names[i].n = utf8_cps(body[i], names[i].cp);
    }
    qsort(names, n, sizeof *names, cmp_names);
    int rest = not_names(g, names, 0, n, 0);
    if (rest >= 0 && (r = new_rule(g)) >= 0) outf(g, "r%d ::= \"\\\"\" r%d \"\\\"\"\n", r, rest);
out:
    for (size_t i = 0; i < n; i++) free(names[i].cp);
    free(names);
    return r;
}

/* a member value's rule: rN, or any value (-3) */
static const char *vname(char *buf, int v) {
    if (v == -3) return "value";
    snprintf(buf, 32, "r%d", v);
    return buf;
}

static int object_rule(gen *g, const json_t *s) {
    char vn[32];
    static const char *const refused[] = {"patternProperties", "propertyNames", "minProperties", "maxProperties",
                                          "dependentRequired", "dependentSchemas", "unevaluatedProperties", NULL};
    for (int i = 0; refused[i]; i++)
        if (json_object_get(s, refused[i])) return fail(g, QHX_ERR_UNSUPPORTED, "'%s' cannot be enforced", refused[i]);
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(g, QHX_ERR_ARG, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(g, QHX_ERR_ARG, "'required' must be an array");
    /* the members named: properties, then required names not among them */
    size_t n = 0, cap = json_object_size(props) + json_array_size(req) + 1;
    char **key = calloc(cap, sizeof *key);          /* JSON-escaped, no quotes */
    int *val = calloc(cap, sizeof *val), *must = calloc(cap, sizeof *must);
    int r = -1, addv = -2; /* -2: no other keys; otherwise the rule of their values */
    if (!key || !val || !must) { fail(g, QHX_ERR_NOMEM, "out of memory"); goto out; }
    const char *name;
    json_t *v;
    json_object_foreach(props, name, v) {
        json_t *js = json_string(name);
        char *d = json_dumps(js, JSON_ENCODE_ANY);
        json_decref(js);
        if (!d) { fail(g, QHX_ERR_NOMEM, "out of memory"); goto out; }
        d[strlen(d) - 1] = 0;
        key[n] = strdup(d + 1);
        free(d);
        if ((val[n] = schema_rule(g, v)) < 0) { n++; goto out; }
        n++;
    }
    if (add && !json_is_false(add) && (addv = schema_rule(g, add)) < 0) goto out;
    if (!add) addv = -3; /* any value */
    size_t i;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v)) { fail(g, QHX_ERR_ARG, "'required' must hold strings"); goto out; }
        json_t *js = json_string(json_string_value(v));
        char *d = json_dumps(js, JSON_ENCODE_ANY);
        json_decref(js);
        if (!d) { fail(g, QHX_ERR_NOMEM, "out of memory"); goto out; }
        d[strlen(d) - 1] = 0;
        size_t k = 0;
        while (k < n && strcmp(key[k], d + 1)) k++;
        if (k == n) { /* a required member no property describes: the other keys' values */
            key[n] = strdup(d + 1);
            if (addv == -2) val[n] = -4; /* cannot be there: the object is impossible */
            else val[n] = addv;
            n++;
        }
        must[k] = 1;
        free(d);
    }
    for (size_t k = 0; k < n; k++)
        if (must[k] && val[k] == -4) { r = new_rule(g); if (r >= 0) outf(g, "r%d ::= never\n", r); goto out; }
    char addrule[64] = "";
    if (addv != -2) {
        int ok = other_key(g, key, n);
        if (ok < 0) goto out;
        if (addv == -3) snprintf(addrule, sizeof addrule, "r%d ws \":\" ws value ws", ok);
        else snprintf(addrule, sizeof addrule, "r%d ws \":\" ws r%d ws", ok, addv);
    }
    if ((r = new_rule(g)) < 0) goto out;
    if (n <= MAX_ANY_ORDER) { /* state: the members still possible (bits) and whether one came */
        int base = g->n_rules;
        g->n_rules += 2 << n;
        if (g->n_rules > MAX_RULES) { fail(g, QHX_ERR_ARG, "the schema needs over %d rules", MAX_RULES); goto out; }
        for (unsigned left = 0; left < 1u << n; left++)
            for (int first = 0; first < 2; first++) {
                const char *sep = first ? "" : "\",\" ws ";
                int ends = 1;
                outf(g, "r%d ::=", base + (int)(left * 2 + first));
                for (size_t k = 0; k < n; k++) {
                    if (!(left >> k & 1)) continue;
                    if (must[k]) ends = 0;
                    char *kl = lit_of("\"", key[k], "\"");
                    outf(g, " %s%s ws \":\" ws %s ws r%d |", sep, kl ? kl : "never", vname(vn, val[k]), base + (int)((left & ~(1u << k)) * 2));
                    free(kl);
                }
                if (addrule[0]) outf(g, " %s%s r%d |", sep, addrule, base + (int)(left * 2));
                if (ends) outf(g, " \"}\"\n");
                else outf(g, " never\n");
            }
        outf(g, "r%d ::= \"{\" ws r%d\n", r, base + (int)(((1u << n) - 1) * 2 + 1));
    } else { /* in the order listed: chain position k, whether one came */
        int base = g->n_rules;
        g->n_rules += 2 * ((int)n + 1);
        for (size_t k = 0; k <= n; k++)
            for (int first = 0; first < 2; first++) {
                const char *sep = first ? "" : "\",\" ws ";
                outf(g, "r%d ::=", base + (int)(k * 2 + first));
                if (k == n) {
                    if (addrule[0]) outf(g, " %s%s r%d |", sep, addrule, base + (int)(k * 2));
                    outf(g, " \"}\"\n");
                    continue;
                }
                char *kl = lit_of("\"", key[k], "\"");
                outf(g, " %s%s ws \":\" ws %s ws r%d", sep, kl ? kl : "never", vname(vn, val[k]), base + (int)((k + 1) * 2));
                free(kl);
                if (!must[k]) outf(g, " | r%d", base + (int)((k + 1) * 2 + first));
                outf(g, "\n");
            }
        outf(g, "r%d ::= \"{\" ws r%d\n", r, base + 1);
    }
out:
    for (size_t k = 0; k < cap; k++) free(key ? key[k] : NULL);
    free(key);
    free(val);
    free(must);
    return g->err ? -1 : r;
}

/* ---- a schema ------------------------------------------------------------------------------------ */

static int json_type_bit(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE: case JSON_FALSE: return T_BOOL;
    case JSON_OBJECT: return T_OBJECT;
    case JSON_ARRAY: return T_ARRAY;
    case JSON_STRING: return T_STRING;
    case JSON_INTEGER: return T_INTEGER | T_NUMBER;
    case JSON_REAL: return json_real_value(v) == floor(json_real_value(v)) ? T_INTEGER | T_NUMBER : T_NUMBER;
    }
    return 0;
}

static int keyword_known(const char *k) {
    static const char *const kw[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                     "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "minLength",
                                     "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                                     "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "patternProperties",
                                     "propertyNames", "minProperties", "maxProperties", "dependentRequired",
                                     "dependentSchemas", "unevaluatedProperties", "multipleOf", NULL};
    for (int i = 0; kw[i]; i++)
        if (!strcmp(k, kw[i])) return 1;
    return is_annotation(k);
}

/* A value as a GBNF expression for every text equal to it: containers with space anywhere JSON
 * allows it and members in any order (through the object and array rules), integral numbers also
 * as 1.0. */
static int literal(gen *g, qhx_buf *b, json_t *v) {
    char name[32];
    json_t *s = NULL;
    if (json_is_object(v)) {
        json_t *props = json_object(), *req = json_array(), *x;
        const char *k;
        json_object_foreach(v, k, x) {
            json_object_set_new(props, k, json_pack("{s:O}", "const", x));
            json_array_append_new(req, json_string(k));
        }
        s = json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required", req, "additionalProperties", 0);
    } else if (json_is_array(v)) {
        json_t *items = json_array(), *x;
        size_t i;
        json_array_foreach(v, i, x) json_array_append_new(items, json_pack("{s:O}", "const", x));
        s = json_pack("{s:s, s:o, s:b, s:i}", "type", "array", "prefixItems", items, "items", 0, "minItems", (int)json_array_size(v));
    }
    if (s) {
        int r = schema_rule(g, s);
        json_decref(s);
        if (r < 0) return -1;
        snprintf(name, sizeof name, "r%d", r);
        qhx_buf_puts(b, name);
        return 0;
    }
    if (json_is_number(v) && json_number_value(v) == floor(json_number_value(v)) && fabs(json_number_value(v)) < 1e18) {
        snprintf(name, sizeof name, "%lld", (long long)json_number_value(v));
        qhx_buf_puts(b, "(");
        lit(b, name, strlen(name));
        qhx_buf_puts(b, " (\".0\")?)");
        return 0;
    }
    return lit_json(g, b, v);
}

/* The values a schema's enum/const allows (a new array), or NULL when it has neither. */
static json_t *literals(const json_t *s) {
    json_t *en = json_object_get(s, "enum"), *co = json_object_get(s, "const");
    if (co) return json_pack("[O]", co);
    return en && json_is_array(en) ? json_incref(en) : NULL;
}

static int lits_disjoint(const json_t *a, const json_t *b) {
    size_t i, j;
    json_t *x, *y;
    json_array_foreach(a, i, x) json_array_foreach(b, j, y) if (json_equal(x, y)) return 0;
    return 1;
}

/* Whether no value can match both schemas, by what is cheap to see: types apart, literals apart,
 * or a required member whose literals are apart (a discriminator). */
static int disjoint(gen *g, json_t *a, json_t *b) {
    if (json_is_false(a) || json_is_false(b)) return 1;
    if (!json_is_object(a) || !json_is_object(b)) return 0;
    json_t *la = literals(a), *lb = literals(b);
    int ta = type_bits(g, json_object_get(a, "type")), tb = type_bits(g, json_object_get(b, "type"));
    size_t i;
    json_t *e;
    if (la) { int t = 0; json_array_foreach(la, i, e) t |= json_type_bit(e); ta &= t; }
    if (lb) { int t = 0; json_array_foreach(lb, i, e) t |= json_type_bit(e); tb &= t; }
    int apart = ta >= 0 && tb >= 0 && !(ta & tb);
    if (!apart && la && lb) apart = lits_disjoint(la, lb);
    json_decref(la), json_decref(lb);
    if (apart) return 1;
    json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    json_t *ra = json_object_get(a, "required"), *rb = json_object_get(b, "required");
    const char *k;
    json_t *v;
    json_object_foreach(pa, k, v) {
        json_t *w = json_object_get(pb, k);
        int in_a = 0, in_b = 0;
        json_array_foreach(ra, i, e) in_a |= json_is_string(e) && !strcmp(json_string_value(e), k);
        json_array_foreach(rb, i, e) in_b |= json_is_string(e) && !strcmp(json_string_value(e), k);
        if (!w || !in_a || !in_b || !json_is_object(v) || !json_is_object(w)) continue;
        json_t *x = literals(v), *y = literals(w);
        apart = x && y && lits_disjoint(x, y);
        json_decref(x), json_decref(y);
        if (apart && (ta & tb) == T_OBJECT) return 1;
    }
    return 0;
}

static int schema_body(gen *g, json_t *s) {
    int r;
    if (json_is_true(s)) { if ((r = new_rule(g)) >= 0) outf(g, "r%d ::= value\n", r); return r; }
    if (json_is_false(s)) { if ((r = new_rule(g)) >= 0) outf(g, "r%d ::= never\n", r); return r; }
    if (!json_is_object(s)) return fail(g, QHX_ERR_ARG, "a schema must be an object or a boolean");
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v)
        if (!keyword_known(k)) return fail(g, QHX_ERR_UNSUPPORTED, "keyword '%s' cannot be enforced", k);
    json_t *ref = json_object_get(s, "$ref");
    int alone = ref != NULL;
    json_object_foreach(s, k, v) if (strcmp(k, "$ref") && !is_annotation(k)) alone = 0;
    if (alone) {
        if (!json_is_string(ref)) return fail(g, QHX_ERR_ARG, "'$ref' must be a string");
        return ref_rule_of(g, json_string_value(ref));
    }
    json_t *f = flatten(g, s);
    if (!f) return -1;
    if (!json_is_object(f)) { r = schema_body(g, f); json_decref(f); return r; }
    json_object_foreach(f, k, v)
        if (!keyword_known(k)) { /* k lives in f */
            fail(g, QHX_ERR_UNSUPPORTED, "keyword '%s' cannot be enforced", k);
            json_decref(f);
            return -1;
        }
    const char *alts_key = json_object_get(f, "anyOf") ? "anyOf" : json_object_get(f, "oneOf") ? "oneOf" : NULL;
    if (alts_key) {
        json_t *alts = json_incref(json_object_get(f, alts_key)), *rest = json_copy(f); /* f may be the schema itself */
        json_decref(f);
        if (!(f = rest)) return json_decref(alts), fail(g, QHX_ERR_NOMEM, "out of memory");
        json_object_del(f, alts_key);
        if (!json_is_array(alts) || !json_array_size(alts)) {
            json_decref(alts), json_decref(f);
            return fail(g, QHX_ERR_ARG, "'%s' must be a non-empty array", alts_key);
        }
        size_t n = json_array_size(alts), i;
        int *sub = calloc(n, sizeof *sub);
        json_t *a;
        r = sub ? 0 : fail(g, QHX_ERR_NOMEM, "out of memory");
        json_t **ms = calloc(n, sizeof *ms);
        if (!ms) r = fail(g, QHX_ERR_NOMEM, "out of memory");
        json_array_foreach(alts, i, a) {
            if (r < 0) break;
            json_t *fa = flatten(g, a);
            if (!(ms[i] = fa ? merge(g, f, fa) : NULL)) r = -1;
            json_decref(fa);
        }
        /* oneOf is anyOf when no value can match two branches; overlap would need exclusion */
        for (size_t x = 0; r >= 0 && !strcmp(alts_key, "oneOf") && x < n; x++)
            for (size_t y = x + 1; r >= 0 && y < n; y++)
                if (!disjoint(g, ms[x], ms[y]))
                    r = fail(g, QHX_ERR_UNSUPPORTED, "'oneOf' whose branches %zu and %zu may both match cannot be "
                                                     "enforced (use anyOf, or make them disjoint by type or const)", x, y);
        /* with nothing beside the alternatives, a branch's $ref stays a rule: recursion through anyOf */
        int bare = 1;
        json_object_foreach(f, k, v) if (!is_annotation(k)) bare = 0;
        for (i = 0; i < n && r >= 0; i++)
            if ((sub[i] = bare ? schema_rule(g, json_array_get(alts, i)) : schema_body(g, ms[i])) < 0) r = -1;
        for (i = 0; ms && i < n; i++) json_decref(ms[i]);
        free(ms);
        if (r >= 0 && (r = new_rule(g)) >= 0) {
            outf(g, "r%d ::=", r);
            for (i = 0; i < n; i++) outf(g, "%s r%d", i ? " |" : "", sub[i]), leads_to(g, r, sub[i]);
            outf(g, "\n");
        }
        free(sub);
        json_decref(alts);
        json_decref(f);
        return r;
    }
    int types = type_bits(g, json_object_get(f, "type"));
    if (types < 0) { json_decref(f); return -1; }
    if (json_object_get(f, "multipleOf")) { json_decref(f); return fail(g, QHX_ERR_UNSUPPORTED, "'multipleOf' cannot be enforced"); }
    json_t *en = json_object_get(f, "enum"), *co = json_object_get(f, "const");
    if (en || co) {
        if (en && !json_is_array(en)) { json_decref(f); return fail(g, QHX_ERR_ARG, "'enum' must be an array"); }
        qhx_buf b = {0};
        size_t i;
        json_t *e;
        int any = 0;
        json_array_foreach(en, i, e) {
            if (co && !json_equal(co, e)) continue;
            if (!(json_type_bit(e) & types)) continue;
            if (any) qhx_buf_puts(&b, " | ");
            if (literal(g, &b, e)) break;
            any = 1;
        }
        if (!en && (json_type_bit(co) & types) && !literal(g, &b, co)) any = 1;
        json_decref(f);
        if ((r = new_rule(g)) >= 0) outf(g, "r%d ::= %s\n", r, any && b.s ? b.s : "never");
        qhx_buf_free(&b);
        return g->err ? -1 : r;
    }
    int br[7], nb = 0;
    if (types & T_NULL) { if ((br[nb] = new_rule(g)) < 0) goto bad; outf(g, "r%d ::= null\n", br[nb++]); }
    if (types & T_BOOL) { if ((br[nb] = new_rule(g)) < 0) goto bad; outf(g, "r%d ::= boolean\n", br[nb++]); }
    if ((types & T_OBJECT) && (br[nb++] = object_rule(g, f)) < 0) goto bad;
    if ((types & T_ARRAY) && (br[nb++] = array_rule(g, f)) < 0) goto bad;
    if ((types & T_STRING) && (br[nb++] = string_rule(g, f)) < 0) goto bad;
    if (types & T_NUMBER) {
        if ((br[nb++] = number_rule(g, f)) < 0) goto bad;
    } else if ((types & T_INTEGER) && (br[nb++] = integer_rule(g, f)) < 0) {
        goto bad;
    }
    json_decref(f);
    if ((r = new_rule(g)) < 0) return -1;
    outf(g, "r%d ::=", r);
    for (int i = 0; i < nb; i++) outf(g, "%s r%d", i ? " |" : "", br[i]);
    if (!nb) outf(g, " never");
    outf(g, "\n");
    return r;
bad:
    json_decref(f);
    return -1;
}

static int schema_rule(gen *g, json_t *s) {
    if (++g->depth > MAX_DEPTH) return fail(g, QHX_ERR_ARG, "schemas nested too deep");
    int r = schema_body(g, s);
    g->depth--;
    return r;
}

qhx_status qhx_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf) {
    *gbnf = NULL;
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!root) return qhx_fail(QHX_ERR_ARG, "json schema: not JSON: %s at line %d", je.text, je.line);
    gen g = {.root = root};
    qhx_buf_puts(&g.out, PRELUDE);
    int r = schema_rule(&g, root);
    if (r >= 0) outf(&g, "root ::= [ \\t\\n]{0,8} r%d ws\n", r);
    if (!g.err) no_left_cycle(&g);
    gen_free(&g);
    json_decref(root);
    if (!g.err && g.out.oom) g.err = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    if (g.err) { qhx_buf_free(&g.out); return g.err; }
    *gbnf = g.out.s;
    return QHX_OK;
}

qhx_status qhx_grammar_from_json_schema(const qhx_tokenizer *t, const char *schema, size_t len, qhx_grammar **out) {
    *out = NULL;
    char *gbnf;
    qhx_status rc = qhx_json_schema_to_gbnf(schema, len, &gbnf);
    if (rc) return rc;
    rc = qhx_gbnf_compile(gbnf, strlen(gbnf), t, out);
    free(gbnf);
    return rc;
}

qhx_status qhx_grammar_from_gbnf(const qhx_tokenizer *t, const char *gbnf, size_t len, qhx_grammar **out) {
    return qhx_gbnf_compile(gbnf, len, t, out);
}

/* ---- forced tool calls ---------------------------------------------------------------------------- */

/* A parameter's value as Qwen3.5 writes it between <parameter=K>\n and \n</parameter>: strings
 * as raw text (one of the enum's, when it has one; never holding "</", nor any '<' when its length
 * is bounded), anything else as JSON the parameter's schema accepts. */
static int param_rule(gen *g, json_t *p) {
    json_t *t = json_object_get(p, "type"), *en = json_object_get(p, "enum");
    int r = new_rule(g);
    if (r < 0) return -1;
    if (json_is_string(t) && !strcmp(json_string_value(t), "string")) {
        if (json_is_array(en)) {
            qhx_buf b = {0};
            size_t i;
            json_t *e;
            json_array_foreach(en, i, e) {
                if (!json_is_string(e)) continue;
                if (b.len) qhx_buf_puts(&b, " | ");
                lit(&b, json_string_value(e), json_string_length(e));
            }
            outf(g, "r%d ::= %s\n", r, b.len ? b.s : "never");
            qhx_buf_free(&b);
        } else {
            long min = 0, max = -1;
            if (count(g, p, "minLength", &min) < 0 || count(g, p, "maxLength", &max) < 0) return -1;
            if (json_object_get(p, "pattern") || json_object_get(p, "format"))
                return fail(g, QHX_ERR_UNSUPPORTED, "'pattern' and 'format' on a tool's string parameter cannot be enforced");
            if (min || max >= 0) /* counted in characters, none of them '<' */
                outf(g, max >= 0 ? "r%d ::= [^<]{%ld,%ld}\n" : "r%d ::= [^<]{%ld,}\n", r, min, max);
            else
                outf(g, "r%d ::= ([^<] | \"<\" [^/])*\n", r);
        }
        return r;
    }
    int v = schema_rule(g, p);
    if (v < 0) return -1;
    outf(g, "r%d ::= r%d\n", r, v);
    return r;
}

/* One function's <function=NAME> block: its parameters in any order (at most 8; else as listed),
 * the required ones present. */
static int function_rule(gen *g, json_t *fn) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    json_t *params = json_object_get(fn, "parameters");
    json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    size_t n = json_object_size(props);
    if (n > 64) return fail(g, QHX_ERR_UNSUPPORTED, "function '%s' has over 64 parameters", name);
    int val[64], must[64] = {0};
    const char *key[64];
    size_t k = 0;
    const char *pk;
    json_t *pv;
    json_object_foreach(props, pk, pv) {
        key[k] = pk;
        snprintf(g->where, sizeof g->where, "tool '%.60s' parameter '%.60s'", name, pk);
        if ((val[k] = param_rule(g, pv)) < 0) return -1;
        size_t i;
        json_t *e;
        json_array_foreach(req, i, e) must[k] |= json_is_string(e) && !strcmp(json_string_value(e), pk);
        k++;
    }
    g->where[0] = 0;
    int r = new_rule(g);
    if (r < 0) return -1;
    char *head = lit_of("<function=", name, ">\n");
    if (!head) return fail(g, QHX_ERR_NOMEM, "out of memory");
    int base = g->n_rules;
    if (n <= MAX_ANY_ORDER) {
        g->n_rules += 1 << n;
        for (unsigned left = 0; left < 1u << n; left++) {
            int ends = 1;
            outf(g, "r%d ::=", base + (int)left);
            for (size_t i = 0; i < n; i++) {
                if (!(left >> i & 1)) continue;
                if (must[i]) ends = 0;
                char *pq = lit_of("<parameter=", key[i], ">\n");
                outf(g, " %s r%d \"\\n</parameter>\\n\" r%d |", pq ? pq : "never", val[i], base + (int)(left & ~(1u << i)));
                free(pq);
            }
            outf(g, ends ? " \"</function>\"\n" : " never\n");
        }
        outf(g, "r%d ::= %s r%d\n", r, head, base + (int)((1u << n) - 1));
    } else {
        g->n_rules += (int)n + 1;
        for (size_t i = 0; i <= n; i++) {
            outf(g, "r%d ::=", base + (int)i);
            if (i == n) { outf(g, " \"</function>\"\n"); continue; }
            char *pq = lit_of("<parameter=", key[i], ">\n");
            outf(g, " %s r%d \"\\n</parameter>\\n\" r%d", pq ? pq : "never", val[i], base + (int)i + 1);
            if (!must[i]) outf(g, " | r%d", base + (int)i + 1);
            outf(g, "\n");
            free(pq);
        }
        outf(g, "r%d ::= %s r%d\n", r, head, base);
    }
    free(head);
    return r;
}

qhx_status qhx_tool_call_gbnf(const char *tools, size_t len, const char *name, int max_calls, char **gbnf) {
    *gbnf = NULL;
    json_error_t je;
    json_t *root = json_loadb(tools, len, 0, &je);
    if (!json_is_array(root) || !json_array_size(root)) {
        json_decref(root);
        return qhx_fail(QHX_ERR_ARG, "tool calls: the tools must be a non-empty JSON array");
    }
    gen g = {.root = root};
    qhx_buf_puts(&g.out, PRELUDE);
    qhx_buf fns = {0};
    size_t i;
    json_t *t;
    int found = 0;
    json_array_foreach(root, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!fn) fn = t; /* the Responses API's flat form */
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (!fname) { fail(&g, QHX_ERR_ARG, "tools[%zu] has no function name", i); break; }
        if (name && strcmp(name, fname)) continue;
        if (strpbrk(fname, "<>\n")) { fail(&g, QHX_ERR_ARG, "tool name '%.60s' holds < > or a newline", fname); break; }
        g.root = json_object_get(fn, "parameters") ? json_object_get(fn, "parameters") : fn; /* where its $refs point */
        int r = function_rule(&g, fn);
        if (r < 0 || no_left_cycle(&g)) break;
        gen_forget_root(&g); /* the next tool's pointers point into its own parameters */
        char tmp[32];
        snprintf(tmp, sizeof tmp, "%sr%d", found++ ? " | " : "", r);
        qhx_buf_puts(&fns, tmp);
    }
    if (!g.err && !found) fail(&g, QHX_ERR_ARG, "no tool is named '%.100s'", name ? name : "");
    if (!g.err) {
        outf(&g, "call ::= \"<tool_call>\\n\" (%s) \"\\n</tool_call>\"\n", fns.s);
        if (max_calls == 1) outf(&g, "root ::= [ \\t\\n]{0,8} call\n");
        else outf(&g, "root ::= [ \\t\\n]{0,8} call (\"\\n\"{1,2} call)*\n");
    }
    qhx_buf_free(&fns);
    gen_free(&g);
    json_decref(root);
    if (!g.err && g.out.oom) g.err = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    if (g.err) { qhx_buf_free(&g.out); return g.err; }
    *gbnf = g.out.s;
    return QHX_OK;
}
