/* Debian 12's PCRE2 (10.42) carries Unicode 14.0 tables; Hugging Face's tokenizers match with
 * Unicode 16.0 ones, so `\p{L}` there also matches letters PCRE2 has never heard of (Kaktovik
 * numerals, CJK extension I, the Egyptian hieroglyph extension, Garay, ...). unicode_added.h,
 * generated from the Unicode Character Database, lists the code points 15.0, 15.1 and 16.0
 * assigned, with their general category. For each `\p{X}` of a general category in a
 * pre-tokenizer pattern, those in X are listed next to it, inside the same character class, so the
 * pattern means what its authors meant; a newer PCRE2 that knows some of them already finds them
 * listed twice, which changes nothing.
 *
 * `\s` (and `\S` outside a class) is spelled out too: PCRE2 counts U+180E MONGOLIAN VOWEL SEPARATOR
 * as horizontal space, a leftover from Unicode 6.2, while the tokenizers' engine follows the
 * White_Space property, which dropped it in 6.3 (measured: the only code point below U+30000 where
 * the two tokenized apart). */
#include "util/buf.h"
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/unicode_added.h"

#define C(x) (1u << UTF8PROC_CATEGORY_##x)
static const struct {
    const char *name;
    uint32_t mask;
} props[] = {
    {"L", C(LU) | C(LL) | C(LT) | C(LM) | C(LO)}, {"Lu", C(LU)}, {"Ll", C(LL)}, {"Lt", C(LT)}, {"Lm", C(LM)}, {"Lo", C(LO)},
    {"N", C(ND) | C(NL) | C(NO)}, {"Nd", C(ND)}, {"Nl", C(NL)}, {"No", C(NO)},
    {"M", C(MN) | C(MC) | C(ME)}, {"Mn", C(MN)}, {"Mc", C(MC)}, {"Me", C(ME)},
    {"P", C(PC) | C(PD) | C(PS) | C(PE) | C(PI) | C(PF) | C(PO)},
    {"S", C(SM) | C(SC) | C(SK) | C(SO)},
};
#define N_PROPS (sizeof props / sizeof props[0])

/* the White_Space property: what \s means to Hugging Face's engine */
static const char white_space[] = "\\t\\n\\x0b\\f\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

static void append(char **s, size_t *len, size_t *cap, uint32_t a, uint32_t b) {
    char item[40];
    const int n = a == b ? snprintf(item, sizeof item, "\\x{%x}", a) : snprintf(item, sizeof item, "\\x{%x}-\\x{%x}", a, b);
    if (qhx_reserve(s, cap, *len + (size_t)n + 1, 1)) return; /* out of memory: fewer extras, the pattern stays valid */
    memcpy(*s + *len, item, (size_t)n + 1);
    *len += (size_t)n;
}

/* "\x{..}-\x{..}..." for the added code points in props[k]; malloc'd, NULL when out of memory */
static char *extras_of(size_t k) {
    char *s = calloc(1, 1);
    size_t len = 0, cap = 1;
    const size_t n = sizeof unicode_added / sizeof unicode_added[0];
    for (size_t i = 0; i < n && s; i++) {
        if (!(props[k].mask >> unicode_added[i].category & 1)) continue;
        const uint32_t lo = unicode_added[i].lo; /* adjacent ranges of categories both in X: one item */
        while (i + 1 < n && unicode_added[i + 1].lo == unicode_added[i].hi + 1 && (props[k].mask >> unicode_added[i + 1].category & 1)) i++;
        append(&s, &len, &cap, lo, unicode_added[i].hi);
    }
    return s;
}

char *qhx_regex_newer_unicode(const char *pattern) {
    size_t cap = strlen(pattern) * 2 + 64, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    int in_class = 0;
    for (const char *p = pattern; *p;) {
        const char *start = p;
        const char *name = NULL, *replace = NULL;
        size_t name_len = 0;
        int negate = 0;
        if (p[0] == '\\' && (p[1] == 's' || (p[1] == 'S' && !in_class))) { /* a \S inside [...] keeps PCRE2's sense */
            replace = white_space;
            negate = p[1] == 'S';
            p += 2;
        } else if (p[0] == '\\' && p[1] == 'p' && p[2] == '{') {
            const char *end = strchr(p + 3, '}');
            if (end) name = p + 3, name_len = (size_t)(end - name), p = end + 1;
            else p += 2;
        } else if (p[0] == '\\' && p[1]) {
            p += 2; /* any other escape, copied as is */
        } else {
            if (*p == '[' && !in_class) {
                in_class = 1;
                p++;
                if (*p == '^') p++;
                if (*p == ']') p++; /* a leading ']' is literal */
            } else if (*p == ']' && in_class) {
                in_class = 0;
                p++;
            } else {
                p++;
            }
        }
        const char *add = "";
        char *owned = NULL;
        for (size_t k = 0; name && k < N_PROPS && !owned; k++)
            if (strlen(props[k].name) == name_len && !memcmp(props[k].name, name, name_len) && (owned = extras_of(k))) add = owned;
        if (replace) add = replace, start = p; /* \s: only the list */
        const size_t n = (size_t)(p - start), extra = strlen(add);
        if (qhx_reserve(&out, &cap, len + n + extra + 4, 1)) {
            free(out);
            free(owned);
            return NULL;
        }
        if (*add && !in_class) out[len++] = '['; /* \p{L} alone becomes [\p{L}...], \s [\t\n...] */
        if (negate) out[len++] = '^';
        memcpy(out + len, start, n);
        len += n;
        memcpy(out + len, add, extra);
        len += extra;
        if (*add && !in_class) out[len++] = ']';
        free(owned);
    }
    out[len] = 0;
    return out;
}
