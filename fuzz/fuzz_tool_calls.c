/* Tool calls read out of model text (tools/tool_calls.c): any bytes, read whole and in pieces of
 * the size the first byte says (its top bit: the reply was cut short, TC_CUT, not ended); both
 * readings must hand out the same text and the same calls, and a cut reply the calls an ended one
 * gives, its text a prefix of that one's. */
#include "../tools/tool_calls.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *out;
    size_t n, cap;
} buf;

typedef struct {
    buf text, calls; /* the texts concatenated (pieces split them differently), the calls in order */
} sink;

static void add(buf *k, const char *s, size_t n) {
    if (k->n + n + 1 > k->cap) {
        k->cap = 2 * (k->n + n + 1);
        k->out = realloc(k->out, k->cap);
        if (!k->out) abort();
    }
    memcpy(k->out + k->n, s, n);
    k->n += n;
}

static void on_text(void *user, const char *s, size_t n) { add(&((sink *)user)->text, s, n); }

static void on_call(void *user, const char *name, json_t *args) {
    char *a = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!a) abort(); /* every value a call holds is JSON it can write */
    buf *c = &((sink *)user)->calls;
    add(c, "(", 1), add(c, name, strlen(name)), add(c, a, strlen(a));
    free(a);
}

static json_t *tools;

static int same(const buf *a, const buf *b) { return a->n == b->n && (!a->n || !memcmp(a->out, b->out, a->n)); }

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    if (!n) return 0;
    if (!tools)
        tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":{\"a\":{\"type\":\"integer\"},"
                           "\"b\":{\"type\":[\"object\",\"string\"]},\"c\":{\"type\":\"string\"}}}}}]", 0, NULL);
    const size_t piece = p[0] % 17 + 1;
    const int final = p[0] & 0x80 ? TC_CUT : TC_END;
    const char *text = (const char *)p + 1;
    const size_t len = n - 1;
    sink whole = {0}, part = {0}, ended = {0};
    tc_stream a = {0}, b = {0}, c = {0};
    tc_scan(&a, text, len, final, tools, on_text, on_call, &whole);
    for (size_t end = piece; end < len; end += piece) tc_scan(&b, text, end, TC_RUNNING, tools, on_text, on_call, &part);
    tc_scan(&b, text, len, final, tools, on_text, on_call, &part);
    tc_scan(&c, text, len, TC_END, tools, on_text, on_call, &ended);
    if (a.shown != len || b.shown != len || a.n_calls != b.n_calls) abort();
    if (!same(&whole.text, &part.text) || !same(&whole.calls, &part.calls)) abort();
    if (!same(&whole.calls, &ended.calls) || whole.text.n > ended.text.n ||
        (whole.text.n && memcmp(whole.text.out, ended.text.out, whole.text.n)))
        abort();
    free(whole.text.out), free(whole.calls.out), free(part.text.out), free(part.calls.out), free(ended.text.out), free(ended.calls.out);
    return 0;
}
