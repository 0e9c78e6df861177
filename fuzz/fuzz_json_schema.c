/* JSON Schema compiled to a grammar (src/grammar/json_schema.c, pattern.c): the input is a schema,
 * a NUL, then a text. A schema compiles or is refused with a message; its grammar must compile;
 * and any text the grammar takes whole is JSON (numbers of any size: fuzz/regress/json_schema's
 * big-integer input). */
#include "grammar/grammar.h"
#include "qhexrt.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The text with every number outside strings shrunk to at most two digits a run ([1-9] as 1, 0
 * as 0): the same JSON syntax (a leading zero stays one), but magnitudes jansson can hold. JSON
 * has no limit on them; jansson refuses past a double's. */
static char *shrink_numbers(const char *t, size_t n, size_t *out_n) {
    char *o = malloc(n + 1);
    size_t k = 0;
    int in_string = 0;
    for (size_t i = 0; o && i < n; i++) {
        const char ch = t[i];
        if (in_string) {
            o[k++] = ch;
            if (ch == '\\' && i + 1 < n) o[k++] = t[++i];
            else if (ch == '"') in_string = 0;
        } else if (ch >= '0' && ch <= '9') {
            size_t run = 0;
            for (; i < n && t[i] >= '0' && t[i] <= '9'; i++, run++)
                if (run < 2) o[k++] = t[i] == '0' ? '0' : '1';
            i--;
        } else {
            o[k++] = ch;
            in_string = ch == '"';
        }
    }
    *out_n = k;
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    const uint8_t *nul = memchr(p, 0, n);
    const size_t slen = nul ? (size_t)(nul - p) : n;
    const char *text = nul ? (const char *)nul + 1 : "";
    const size_t tlen = nul ? n - slen - 1 : 0;
    char *gbnf = NULL;
    if (qhx_json_schema_to_gbnf((const char *)p, slen, &gbnf)) {
        if (!*qhx_last_error()) abort();
        return 0;
    }
    qhx_grammar *g = NULL;
    if (qhx_gbnf_compile(gbnf, strlen(gbnf), NULL, &g)) abort(); /* what the schema compiler writes is GBNF */
    free(gbnf);
    qhx_gmatch *m;
    if (qhx_gmatch_new(g, &m)) abort();
    if (qhx_gmatch_accept(m, text, tlen) == 0 && qhx_gmatch_can_end(m)) {
        json_error_t e;
        size_t jn;
        char *shrunk = shrink_numbers(text, tlen, &jn);
        json_t *j = shrunk ? json_loadb(shrunk, jn, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e) : NULL;
        if (shrunk && !j) abort(); /* the grammar took text that is not JSON */
        json_decref(j);
        free(shrunk);
    }
    qhx_gmatch_free(m);
    qhx_grammar_free(g);
    return 0;
}
