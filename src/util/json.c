#include "util/json.h"
#include "util/buf.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cJSON's rule, which bundles' model_hash was first defined over: 15 significant digits when
 * they read back within a relative DBL_EPSILON, else 17; integral values as integers. */
static void put_real(qhx_buf *b, double d) {
    char s[32];
    if (isnan(d) || isinf(d)) {
        qhx_buf_puts(b, "null");
        return;
    }
    if (d == floor(d) && fabs(d) <= 2147483647.0) {
        snprintf(s, sizeof s, "%d", (int)d);
    } else {
        snprintf(s, sizeof s, "%1.15g", d);
        const double back = strtod(s, NULL), big = fabs(back) > fabs(d) ? fabs(back) : fabs(d);
        if (!(fabs(back - d) <= big * DBL_EPSILON)) snprintf(s, sizeof s, "%1.17g", d);
    }
    qhx_buf_puts(b, s);
}

static void put_string(qhx_buf *b, const char *s, size_t n) {
    qhx_buf_append(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
        char u[8];
        if (!esc && c < 0x20) snprintf(u, sizeof u, "\\u%04x", c), esc = u;
        if (esc) qhx_buf_puts(b, esc);
        else qhx_buf_append(b, s + i, 1);
    }
    qhx_buf_append(b, "\"", 1);
}

static void put_value(qhx_buf *b, const json_t *v) {
    size_t i;
    const char *key;
    const json_t *e;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        qhx_buf_append(b, "{", 1);
        i = 0;
        json_object_foreach((json_t *)v, key, e) {
            if (i++) qhx_buf_append(b, ",", 1);
            put_string(b, key, strlen(key));
            qhx_buf_append(b, ":", 1);
            put_value(b, e);
        }
        qhx_buf_append(b, "}", 1);
        break;
    case JSON_ARRAY:
        qhx_buf_append(b, "[", 1);
        json_array_foreach(v, i, e) {
            if (i) qhx_buf_append(b, ",", 1);
            put_value(b, e);
        }
        qhx_buf_append(b, "]", 1);
        break;
    case JSON_STRING: put_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
    case JSON_REAL: put_real(b, json_number_value(v)); break;
    case JSON_TRUE: qhx_buf_puts(b, "true"); break;
    case JSON_FALSE: qhx_buf_puts(b, "false"); break;
    default: qhx_buf_puts(b, "null"); break;
    }
}

char *qhx_json_canonical(const json_t *v) {
    qhx_buf b = {0};
    put_value(&b, v);
    if (b.oom) qhx_buf_free(&b);
    return b.s;
}
