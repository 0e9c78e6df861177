/* Reading Qwen3.5's tool calls out of generated text (tools/tool_calls.h says the format and why
 * the reader is lenient). A scan starts where the last one settled: everything before st->shown
 * has been handed out, so a stream costs one pass over its text, not one a token. */
#include "tool_calls.h"

#include <stdlib.h>
#include <math.h>
#include <string.h>

#define OPEN_CALL "<tool_call>"
#define CLOSE_CALL "</tool_call>"
#define OPEN_FN "<function="
#define CLOSE_FN "</function>"
#define OPEN_PARAM "<parameter="
#define CLOSE_PARAM "</parameter>"

static const char *find(const char *s, const char *end, const char *pat) {
    return s < end ? memmem(s, (size_t)(end - s), pat, strlen(pat)) : NULL;
}

static int starts(const char *s, const char *end, const char *pat) {
    const size_t m = strlen(pat);
    return (size_t)(end - s) >= m && !memcmp(s, pat, m);
}

/* [s, end) is a proper start of pat: more text could still complete it */
static int could_start(const char *s, const char *end, const char *pat) {
    const size_t n = (size_t)(end - s);
    return n < strlen(pat) && !memcmp(s, pat, n);
}

/* bytes at the end of [s, end) that are a proper start of pat */
static size_t partial_tail(const char *s, const char *end, const char *pat) {
    const size_t n = (size_t)(end - s), m = strlen(pat);
    for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
        if (!memcmp(end - k, pat, k)) return k;
    return 0;
}

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static const char *skip_space(const char *s, const char *end) {
    while (s < end && is_space(*s)) s++;
    return s;
}

/* the property schema of parameter key of tool name, or NULL */
static const json_t *param_schema(const json_t *tools, const char *name, const char *key) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        if (!fn) fn = t;
        const char *n = json_string_value(json_object_get(fn, "name"));
        if (n && !strcmp(n, name)) return json_object_get(json_object_get(json_object_get(fn, "parameters"), "properties"), key);
    }
    return NULL;
}

/* 2.0 is an integer, as JSON Schema counts them */
static int integral(const json_t *v) {
    return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9.007199254740992e15);
}

static int type_fits(const char *type, const json_t *v) {
    return (!strcmp(type, "integer") && integral(v)) || (!strcmp(type, "number") && json_is_number(v)) ||
           (!strcmp(type, "boolean") && json_is_boolean(v)) || (!strcmp(type, "null") && json_is_null(v)) ||
           (!strcmp(type, "object") && json_is_object(v)) || (!strcmp(type, "array") && json_is_array(v));
}

/* A parameter's text as the value its schema's type asks for: the JSON it parses as when that
 * fits one of the types, else the text as a string. Without a type, any JSON but a string. */
static json_t *typed(const char *v, size_t n, const json_t *schema) {
    json_t *parsed = json_loadb(v, n, JSON_DECODE_ANY, NULL), *out = NULL;
    const json_t *type = json_object_get(schema, "type");
    if (parsed && json_is_string(type)) {
        if (type_fits(json_string_value(type), parsed)) out = parsed;
    } else if (parsed && json_is_array(type)) {
        size_t i;
        const json_t *t;
        json_array_foreach(type, i, t) if (json_is_string(t) && type_fits(json_string_value(t), parsed)) out = parsed;
    } else if (parsed && !json_is_string(parsed)) {
        out = parsed;
    }
    if (out && json_is_real(out) && integral(out) && json_is_string(type) && !strcmp(json_string_value(type), "integer")) {
        json_t *i = json_integer((json_int_t)json_real_value(out)); /* written as 2, as the schema's type says */
        json_decref(out);
        return i;
    }
    if (out) return out;
    json_decref(parsed);
    return json_stringn(v, n);
}

enum { INCOMPLETE, MALFORMED, COMPLETE };

/* The call at p (at <tool_call> or <function=): COMPLETE with *next after it, *name and *args
 * set; INCOMPLETE when more text could still finish it; MALFORMED when it cannot be a call. */
static int parse_call(const char *p, const char *end, int final, const json_t *tools, const char **next, char **name, json_t **args) {
    const char *q = p;
    const int wrapped = starts(q, end, OPEN_CALL);
    if (wrapped) {
        q = skip_space(q + strlen(OPEN_CALL), end);
        if (q == end || could_start(q, end, OPEN_FN)) return INCOMPLETE;
        if (!starts(q, end, OPEN_FN)) return MALFORMED;
    }
    q += strlen(OPEN_FN);
    const char *gt = q;
    while (gt < end && *gt != '>' && *gt != '\n' && *gt != '<') gt++;
    if (gt == end) return INCOMPLETE;
    if (*gt != '>' || gt == q) return MALFORMED;
    *name = strndup(q, (size_t)(gt - q));
    *args = json_object();
    q = gt + 1;
    int rc = MALFORMED;
    for (;;) {
        q = skip_space(q, end);
        if (starts(q, end, OPEN_PARAM)) {
            const char *k = q + strlen(OPEN_PARAM), *kend = k;
            while (kend < end && *kend != '>' && *kend != '\n' && *kend != '<') kend++;
            if (kend == end) { rc = INCOMPLETE; break; }
            if (*kend != '>' || kend == k) break;
            const char *v = kend + 1;
            if (v < end && *v == '\n') v++;
            /* the value ends at its closer, or where the model went on without one */
            const char *stops[3] = {find(v, end, CLOSE_PARAM), find(v, end, OPEN_PARAM), find(v, end, CLOSE_FN)}, *vend = NULL;
            for (int i = 0; i < 3; i++)
                if (stops[i] && (!vend || stops[i] < vend)) vend = stops[i];
            if (!vend) { rc = INCOMPLETE; break; }
            q = vend == stops[0] ? vend + strlen(CLOSE_PARAM) : vend;
            if (vend > v && vend[-1] == '\n') vend--;
            char *key = strndup(k, (size_t)(kend - k));
            const json_t *schema = key ? param_schema(tools, *name, key) : NULL;
            if (key) json_object_set_new(*args, key, typed(v, (size_t)(vend - v), schema));
            free(key);
        } else if (starts(q, end, CLOSE_FN)) {
            q = skip_space(q + strlen(CLOSE_FN), end);
            if (starts(q, end, CLOSE_CALL)) q += strlen(CLOSE_CALL);
            else if (!final && (q == end || could_start(q, end, CLOSE_CALL))) { rc = INCOMPLETE; break; }
            *next = q;
            return COMPLETE;
        } else {
            if (q == end || could_start(q, end, OPEN_PARAM) || could_start(q, end, CLOSE_FN)) rc = INCOMPLETE;
            break;
        }
    }
    free(*name), *name = NULL;
    json_decref(*args), *args = NULL;
    return rc;
}

/* Text [a, b) outside calls: the whitespace around a call is dropped (the template sets calls
 * off with newlines), and until the text is final a trailing run of it is held back, since a call
 * may follow it. */
static void emit(tc_stream *st, const char *text, const char *a, const char *b, int before_call, int final, tc_text_fn on_text,
                 void *user) {
    if (st->after_call) {
        const char *s = skip_space(a, b);
        if (s == b && !final && !before_call) { st->shown = (size_t)(a - text); return; }
        a = s;
    }
    const char *e = b;
    if (before_call || !final) while (e > a && is_space(e[-1])) e--;
    if (e > a) on_text(user, a, (size_t)(e - a)), st->after_call = 0;
    st->shown = (size_t)((before_call || final ? b : e) - text);
}

void tc_scan(tc_stream *st, const char *text, size_t len, int final, const json_t *tools, tc_text_fn on_text, tc_call_fn on_call,
             void *user) {
    const char *end = text + len, *p = text + st->shown;
    while (p <= end) {
        const char *a = find(p, end, OPEN_CALL), *b = find(p, end, OPEN_FN), *o = a && (!b || a < b) ? a : b;
        if (!o) {
            size_t hold = 0;
            if (!final) {
                const size_t ka = partial_tail(p, end, OPEN_CALL), kb = partial_tail(p, end, OPEN_FN);
                hold = ka > kb ? ka : kb;
            }
            emit(st, text, p, end - hold, 0, final, on_text, user);
            return;
        }
        const char *next;
        char *name = NULL;
        json_t *args = NULL;
        const int rc = parse_call(o, end, final, tools, &next, &name, &args);
        if (rc == INCOMPLETE && !final) { /* the text before it is out; the call (and the space before it) waits */
            emit(st, text, p, o, 0, 0, on_text, user);
            return;
        }
        if (rc == INCOMPLETE && final == TC_CUT) { /* cut short mid-call: the text before it, then nothing */
            emit(st, text, p, o, 1, 1, on_text, user);
            st->shown = len;
            return;
        }
        if (rc != COMPLETE) { /* not a call after all: its first byte is text */
            emit(st, text, p, o + 1, 0, 1, on_text, user);
            p = o + 1;
            continue;
        }
        emit(st, text, p, o, 1, final, on_text, user);
        on_call(user, name, args);
        json_decref(args);
        free(name);
        st->n_calls++, st->after_call = 1;
        st->shown = (size_t)(next - text);
        p = next;
    }
}
