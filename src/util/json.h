/* jansson is the JSON library of every reader and writer here but one: what they share. The one
 * exception is the tokenizer.json loader (tokenizer/tokenizer_json.c), which keeps cJSON because
 * jansson parses that 11 MB file 2.3x slower (bench/README.md, "Tokenizer"). */
#ifndef QHX_JSON_H
#define QHX_JSON_H
#include <jansson.h>
#include <math.h>

/* A number as JSON writes it: integral values as integers (so "4096", never "4096.0"), others as
 * reals printed to round-trip (%.17g). */
static inline json_t *qhx_json_number(double v) {
    return v == floor(v) && fabs(v) < 9007199254740992.0 ? json_integer((json_int_t)v) : json_real(v);
}

/* v set as o's member k: v (still o's to free), or NULL when either is */
static inline json_t *qhx_json_add(json_t *o, const char *k, json_t *v) { return json_object_set_new(o, k, v) ? NULL : v; }

/* A document from memory: NULL when it is not JSON (or not within len) */
static inline json_t *qhx_json_parse(const char *text, size_t len) {
    json_error_t err;
    return json_loadb(text, len, 0, &err);
}

/* One text for a value, whoever wrote it: compact, keys in order, numbers by cJSON's rule (see
 * util/json.c). What a bundle's model_hash covers. malloc'd; NULL when out of memory. */
char *qhx_json_canonical(const json_t *v);

#endif
