/* qhx serve's side routes: GET /metrics (Prometheus text), POST /tokenize and POST /detokenize in
 * llama-server's shapes, and the API key check (tools/serve.h). */
#include "serve.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* got is key, compared in time independent of where they differ */
static int same_key(const char *key, const char *got) {
    const size_t n = strlen(key), m = strlen(got);
    unsigned diff = m != n;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? got[i] : 0);
    return diff == 0;
}

int serve_key_ok(const char *key, const char *authorization, const char *x_api_key) {
    static const char bearer[] = "Bearer ";
    if (authorization && !strncmp(authorization, bearer, sizeof bearer - 1) && same_key(key, authorization + sizeof bearer - 1)) return 1;
    return x_api_key && same_key(key, x_api_key);
}

static enum MHD_Result metrics(server *sv, struct MHD_Connection *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return send_error(sv, c, 500, "server_error", NULL, NULL, "out of memory");
    pthread_mutex_lock(&sv->dl.lock);
    const unsigned long closed = sv->dl.closed;
    pthread_mutex_unlock(&sv->dl.lock);
    pthread_mutex_lock(&sv->lock);
    fprintf(f, "# HELP qhx_requests_total HTTP responses by status code.\n# TYPE qhx_requests_total counter\n");
    for (unsigned s = 100; s < sizeof sv->stats.by_status / sizeof *sv->stats.by_status; s++)
        if (sv->stats.by_status[s]) fprintf(f, "qhx_requests_total{status=\"%u\"} %lu\n", s, sv->stats.by_status[s]);
    qhx_prefix_cache_stats cs;
    qhx_prefix_cache_get_stats(sv->cache, &cs);
    const struct {
        const char *name, *type, *help;
        double v;
    } m[] = {
        {"qhx_prompt_tokens_total", "counter", "Prompt tokens of finished generations.", (double)sv->stats.prompt_tokens},
        {"qhx_cached_tokens_total", "counter", "Prompt tokens resumed from the prefix cache.", (double)sv->stats.cached_tokens},
        {"qhx_generated_tokens_total", "counter", "Tokens generated.", (double)sv->stats.generated_tokens},
        {"qhx_connections_timed_out_total", "counter", "Connections closed for sending a request slower than --timeout.", (double)closed},
        {"qhx_prefill_seconds_total", "counter", "Time spent evaluating prompts (slot taken to first token).", sv->stats.prefill_s},
        {"qhx_decode_seconds_total", "counter", "Time spent generating after the first token.", sv->stats.decode_s},
        {"qhx_prefill_tokens_per_second", "gauge", "Uncached prompt tokens over prefill time, since start.",
         sv->stats.prefill_s > 0 ? (double)(sv->stats.prompt_tokens - sv->stats.cached_tokens) / sv->stats.prefill_s : 0},
        {"qhx_decode_tokens_per_second", "gauge", "Tokens after each first one over decode time, since start.",
         sv->stats.decode_s > 0 ? (double)sv->stats.decode_tokens / sv->stats.decode_s : 0},
        {"qhx_queue_depth", "gauge", "Requests waiting for a slot.", (double)sv->n_waiting},
        {"qhx_slots_busy", "gauge", "Slots generating.", (double)sv->n_running},
        {"qhx_slots", "gauge", "Slots (--parallel).", (double)sv->n_slots},
        {"qhx_prefix_cache_bytes", "gauge", "Memory held by the prefix cache.", (double)cs.bytes},
        {"qhx_prefix_cache_hits_total", "counter", "Requests that resumed from the prefix cache.", (double)cs.hits},
        {"qhx_prefix_cache_dir_bytes", "gauge", "State files of the prefix cache in --cache-dir.", (double)cs.dir_bytes},
        {"qhx_prefix_cache_dir_hits_total", "counter", "Requests that resumed from a state file in --cache-dir.", (double)cs.dir_hits},
    };
    pthread_mutex_unlock(&sv->lock);
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.6g\n", m[i].name, m[i].help, m[i].name, m[i].type, m[i].name, m[i].v);
    if (fclose(f)) { free(text); return send_error(sv, c, 500, "server_error", NULL, NULL, "out of memory"); }
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    return serve_queue(sv, c, MHD_HTTP_OK, r);
}

/* Fields of a side route's body other than `known` are refused, as everywhere else. */
static const char *unknown_field(json_t *body, const char *const *known) {
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
        if (!serve_listed(known, k)) return k;
    return NULL;
}

static enum MHD_Result tokenize(server *sv, struct MHD_Connection *c, json_t *body) {
    static const char *const known[] = {"content", "parse_special", "with_pieces", "add_special", NULL};
    const char *bad = unknown_field(body, known);
    if (bad) return send_error(sv, c, 400, "invalid_request_error", NULL, NULL, "'%.100s' is not a field of /tokenize", bad);
    json_t *content = json_object_get(body, "content"), *special = json_object_get(body, "parse_special"),
           *pieces = json_object_get(body, "with_pieces"), *add = json_object_get(body, "add_special");
    if (!json_is_string(content)) return send_error(sv, c, 400, "invalid_request_error", "content", NULL, "'content' must be a string");
    if ((special && !json_is_boolean(special)) || (pieces && !json_is_boolean(pieces)) || (add && !json_is_boolean(add)))
        return send_error(sv, c, 400, "invalid_request_error", NULL, NULL, "'parse_special', 'with_pieces', 'add_special' are booleans");
    /* Qwen's tokenizer adds no BOS: add_special changes nothing, so either value is honoured */
    int32_t *ids = NULL;
    size_t n = 0;
    if (qhx_tokenizer_encode(sv->tok, json_string_value(content), json_string_length(content),
                             json_is_true(special) ? QHX_ENCODE_SPECIAL : 0, &ids, &n))
        return send_error(sv, c, 400, "invalid_request_error", "content", NULL, "%s", qhx_last_error());
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        if (!json_is_true(pieces)) { json_array_append_new(list, json_integer(ids[i])); continue; }
        char *text = NULL;
        size_t len = 0;
        json_t *piece = NULL;
        if (!qhx_tokenizer_decode(sv->tok, ids + i, 1, &text, &len)) piece = json_stringn(text, len);
        if (!piece) { /* part of a character: its bytes, as llama-server gives them */
            piece = json_array();
            for (size_t k = 0; text && k < len; k++) json_array_append_new(piece, json_integer((unsigned char)text[k]));
        }
        free(text);
        json_array_append_new(list, json_pack("{s:i, s:o}", "id", ids[i], "piece", piece));
    }
    free(ids);
    return send_json(sv, c, MHD_HTTP_OK, json_pack("{s:o}", "tokens", list));
}

static enum MHD_Result detokenize(server *sv, struct MHD_Connection *c, json_t *body) {
    static const char *const known[] = {"tokens", NULL};
    const char *bad = unknown_field(body, known);
    if (bad) return send_error(sv, c, 400, "invalid_request_error", NULL, NULL, "'%.100s' is not a field of /detokenize", bad);
    json_t *tokens = json_object_get(body, "tokens");
    if (!json_is_array(tokens)) return send_error(sv, c, 400, "invalid_request_error", "tokens", NULL, "'tokens' must be an array of ids");
    const size_t n = json_array_size(tokens);
    int32_t *ids = malloc(sizeof *ids * (n ? n : 1));
    if (!ids) return send_error(sv, c, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(tokens, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= sv->mi.vocab_size) {
            free(ids);
            return send_error(sv, c, 400, "invalid_request_error", "tokens", NULL, "tokens[%zu] is not a token id in [0, %d)", i,
                              sv->mi.vocab_size);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    char *text = NULL;
    size_t len = 0;
    const qhx_status st = qhx_tokenizer_decode(sv->tok, ids, n, &text, &len);
    free(ids);
    if (st) return send_error(sv, c, 400, "invalid_request_error", "tokens", NULL, "%s", qhx_last_error());
    json_t *out = json_pack("{s:s%}", "content", text ? text : "", len);
    free(text);
    return out ? send_json(sv, c, MHD_HTTP_OK, out) : send_error(sv, c, 500, "server_error", NULL, NULL, "the text is not valid UTF-8");
}

enum MHD_Result serve_side_route(server *sv, struct MHD_Connection *c, const char *url, const char *method, const char *body,
                                 size_t len, int too_big) {
    const int metrics_route = !strcmp(url, "/metrics");
    if (strcmp(method, metrics_route ? "GET" : "POST"))
        return send_error(sv, c, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error", NULL, NULL, "use %s %s",
                          metrics_route ? "GET" : "POST", url);
    if (metrics_route) return metrics(sv, c);
    if (too_big) return send_error(sv, c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error", NULL, "request_too_large", "request body too large");
    json_error_t jerr;
    json_t *j = json_loadb(body, len, 0, &jerr);
    if (!json_is_object(j)) {
        json_decref(j);
        return send_error(sv, c, 400, "invalid_request_error", NULL, NULL, "request body must be a JSON object");
    }
    enum MHD_Result ret = !strcmp(url, "/tokenize") ? tokenize(sv, c, j) : detokenize(sv, c, j);
    json_decref(j);
    return ret;
}
