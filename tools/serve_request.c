/* qhx serve's request parsing: an OpenAI request body to prompt ids and generation options,
 * every refusal a 400 naming the field (tools/serve.h). */
#include "cli.h"
#include "serve.h"

#include <jansson.h>

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void request_free(request *rq) {
    if (!rq) return;
    free(rq->ids);
    json_decref(rq->history);
    json_decref(rq->tools);
    json_decref(rq->namespaced);
    json_decref(rq->resp_items);
    free(rq->bias_ids);
    free(rq->bias);
    free(rq->close_ids);
    qhx_grammar_free(rq->grammar);
    for (int i = 0; i < rq->gen.n_stop; i++) free(rq->stop[i]);
    free(rq);
}

/* Reads an optional number field into *out; a wrong type or range is a 400 naming the field. */
static int get_number(json_t *body, const char *key, double lo, double hi, float *out, char *err, size_t cap) {
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    double d = json_number_value(v);
    if (!json_is_number(v) || !(d >= lo && d <= hi))
        return snprintf(err, cap, "'%s' must be a number in [%g, %g]", key, lo, hi), -1;
    *out = (float)d;
    return 0;
}

static int get_int(json_t *body, const char *key, long long lo, long long hi, long long *out, char *err, size_t cap) {
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return snprintf(err, cap, "'%s' must be an integer in [%lld, %lld]", key, lo, hi), -1;
    *out = json_integer_value(v);
    return 1;
}

static int get_bool(json_t *body, const char *key, int *out, char *err, size_t cap) {
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return snprintf(err, cap, "'%s' must be a boolean", key), -1;
    *out = json_is_true(v);
    return 0;
}

/* The sampling fields both endpoints share. Returns the offending field's name, or NULL. */
static const char *parse_sampling(server *sv, json_t *body, request *rq, char *err, size_t cap) {
    qhx_generate_opts *g = &rq->gen;
    g->temperature = 1; /* OpenAI's defaults */
    g->top_p = 1;
    if (get_number(body, "temperature", 0, 2, &g->temperature, err, cap)) return "temperature";
    if (get_number(body, "top_p", 0, 1, &g->top_p, err, cap)) return "top_p";
    if (get_number(body, "min_p", 0, 1, &g->min_p, err, cap)) return "min_p";
    if (get_number(body, "presence_penalty", -2, 2, &g->presence_penalty, err, cap)) return "presence_penalty";
    if (get_number(body, "frequency_penalty", -2, 2, &g->frequency_penalty, err, cap)) return "frequency_penalty";
    if (get_number(body, "repetition_penalty", 0, 10, &g->repeat_penalty, err, cap)) return "repetition_penalty";
    long long v;
    int r;
    if ((r = get_int(body, "top_k", 0, INT_MAX, &v, err, cap)) < 0) return "top_k";
    if (r) g->top_k = (int)v;
    if ((r = get_int(body, "seed", LLONG_MIN, LLONG_MAX, &v, err, cap)) < 0) return "seed";
    if (r) g->seed = (uint64_t)v;
    else g->seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)(uintptr_t)rq;
    if ((r = get_int(body, "n", 1, 1, &v, err, cap)) < 0) return "n";
    /* Omitted: until the context ends, capped by --n-predict (as OpenAI's chat and llama-server
     * do; clients leave it out by default). Larger than that: clamped (parse_request), finishing
     * with "length". */
    const char *mt = json_object_get(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    g->max_tokens = sv->max_tokens;
    if ((r = get_int(body, mt, 1, LLONG_MAX, &v, err, cap)) < 0) return mt;
    if (r && v < sv->max_tokens) g->max_tokens = (int)v;
    if (get_bool(body, "stream", &rq->stream, err, cap)) return "stream";
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so) || get_bool(so, "include_usage", &rq->include_usage, err, cap))
            return snprintf(err, cap, "'stream_options' must be an object {\"include_usage\": bool}"), "stream_options";
    }
    json_t *stop = json_object_get(body, "stop");
    if (stop && !json_is_null(stop)) {
        size_t n = json_is_string(stop) ? 1 : json_array_size(stop);
        if ((!json_is_string(stop) && !json_is_array(stop)) || n > QHX_MAX_STOP)
            return snprintf(err, cap, "'stop' must be a string or an array of at most %d strings", QHX_MAX_STOP), "stop";
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_is_string(stop) ? stop : json_array_get(stop, i);
            if (!json_is_string(s) || !json_string_length(s) || json_string_length(s) > QHX_MAX_STOP_BYTES ||
                strlen(json_string_value(s)) != json_string_length(s))
                return snprintf(err, cap, "'stop' strings must be 1 to %d bytes", QHX_MAX_STOP_BYTES), "stop";
            if (!(rq->stop[rq->gen.n_stop] = strdup(json_string_value(s))))
                return snprintf(err, cap, "out of memory"), "stop";
            rq->gen.n_stop++;
        }
        rq->gen.stop = (const char *const *)rq->stop;
    }
    /* ignore_eos (llama-server's and vLLM's; load generators such as `vllm bench serve` send it):
     * the end of turn does not end the reply, max_tokens does */
    if (get_bool(body, "ignore_eos", &g->ignore_eos, err, cap)) return "ignore_eos";
    /* logit_bias: {"token id": bias in [-100, 100]} */
    json_t *lb = json_object_get(body, "logit_bias");
    if (lb && !json_is_null(lb)) {
        const size_t n = json_object_size(lb);
        if (!json_is_object(lb) || n > 1024)
            return snprintf(err, cap, "'logit_bias' must be an object of at most 1024 {\"token id\": bias}"), "logit_bias";
        rq->bias_ids = malloc(sizeof(int32_t) * (n + 1)), rq->bias = malloc(sizeof(float) * (n + 1));
        if (!rq->bias_ids || !rq->bias) return snprintf(err, cap, "out of memory"), "logit_bias";
        const char *k;
        json_t *b;
        json_object_foreach(lb, k, b) {
            char *end;
            const long id = strtol(k, &end, 10);
            if (!*k || *end || id < 0 || id >= sv->mi.vocab_size || !json_is_number(b) || !(fabs(json_number_value(b)) <= 100))
                return snprintf(err, cap, "'logit_bias': '%.40s' must be a token id in [0, %d) with a bias in [-100, 100]", k,
                                sv->mi.vocab_size), "logit_bias";
            rq->bias_ids[g->n_bias] = (int32_t)id, rq->bias[g->n_bias++] = (float)json_number_value(b);
        }
        g->bias_ids = rq->bias_ids, g->bias = rq->bias;
    }
    /* chat: logprobs true and top_logprobs N; completions: logprobs N */
    json_t *lp = json_object_get(body, "logprobs");
    if (rq->chat) {
        if (get_bool(body, "logprobs", &rq->logprobs, err, cap)) return "logprobs";
        if ((r = get_int(body, "top_logprobs", 0, QHX_MAX_TOP_LOGPROBS, &v, err, cap)) < 0) return "top_logprobs";
        if (r && !rq->logprobs) return snprintf(err, cap, "'top_logprobs' needs \"logprobs\": true"), "top_logprobs";
        if (r) g->top_logprobs = (int)v;
    } else if (lp && !json_is_null(lp)) {
        if ((r = get_int(body, "logprobs", 0, QHX_MAX_TOP_LOGPROBS, &v, err, cap)) < 0) return "logprobs";
        rq->logprobs = 1, g->top_logprobs = (int)v;
    }
    return NULL;
}


/* The fields a request may carry: those the server implements and those that cannot change a reply
 * (user, metadata, ...). Any other field, or a value asking for what the server does not do
 * (logprobs, a logit_bias, echo, a suffix, a response_format or tool_choice it cannot enforce,
 * image parts), is a 400 naming it: never a 200 that pretends. Returns the field, or NULL. */
static const char *const any_fields[] = {"model", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                                         "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                                         "repetition_penalty", "seed", "stop", "n", "user", "store", "metadata",
                                         "service_tier", "logprobs", "logit_bias", "grammar", "json_schema", "ignore_eos", "prompt_cache_key", "safety_identifier", NULL};
static const char *const chat_fields[] = {"messages", "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
                                          "response_format", "top_logprobs", "thinking_budget", "reasoning_effort",
                                          "continue_final_message", NULL};
static const char *const completion_fields[] = {"prompt", "echo", "suffix", "best_of", NULL};

int serve_listed(const char *const *list, const char *k) {
    for (; k && *list; list++)
        if (!strcmp(*list, k)) return 1;
    return 0;
}

json_t *serve_join(json_t *a, const char *sep, const json_t *b) {
    const size_t na = a ? json_string_length(a) : 0, ns = na ? strlen(sep) : 0, nb = json_string_length(b);
    char *s = malloc(na + ns + nb + 1);
    json_t *r = NULL;
    if (s) {
        if (na) memcpy(s, json_string_value(a), na), memcpy(s + na, sep, ns);
        memcpy(s + na + ns, json_string_value(b), nb);
        r = json_stringn(s, na + ns + nb);
    }
    free(s);
    json_decref(a);
    return r;
}

json_t *serve_parts_text(const json_t *c, const char *const *types, const char *sep, const char *what, const char *where, char *err,
                         size_t cap) {
    if (json_is_string(c)) return json_incref((json_t *)c);
    if (!json_is_array(c)) return snprintf(err, cap, "%s must be a string or an array of %s", where, what), NULL;
    json_t *s = NULL;
    size_t k;
    const json_t *p;
    json_array_foreach(c, k, p) {
        const json_t *text = json_object_get(p, "text");
        if (!serve_listed(types, json_string_value(json_object_get(p, "type"))) || !json_is_string(text)) {
            json_decref(s);
            return snprintf(err, cap, "%s[%zu]: only %s are supported (this runs the text model)", where, k, what), NULL;
        }
        if (!(s = serve_join(s, sep, text))) return NULL;
    }
    return s ? s : json_string("");
}

/* The first field of body in neither list (b may be NULL), kept in why->param_name and refused in
 * why's message; NULL when all are known. */
static const char *unknown_field(json_t *body, const char *const *a, const char *const *b, refusal *why) {
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        if (serve_listed(a, k) || (b && serve_listed(b, k))) continue;
        snprintf(why->param_name, sizeof why->param_name, "%s", k); /* k dies with the body */
        snprintf(why->message, sizeof why->message, "'%.100s' is not a field this server implements", k);
        return why->param_name;
    }
    return NULL;
}

json_t *serve_load_object(const char *body, size_t len, const char *const *fields, refusal *why) {
    json_error_t jerr;
    json_t *j = json_loadb(body, len, 0, &jerr);
    *why = (refusal){.status = 400};
    if (!j || !json_is_object(j)) {
        snprintf(why->message, sizeof why->message, j ? "request body must be a JSON object" : "request body is not valid JSON: %s (line %d, column %d)",
                 jerr.text, jerr.line, jerr.column);
        return json_decref(j), NULL;
    }
    if ((why->param = unknown_field(j, fields, NULL, why))) return json_decref(j), NULL;
    return j;
}

static const char *unsupported(json_t *body, int chat, refusal *why) {
    char *err = why->message;
    const size_t cap = sizeof why->message;
    const char *bad = unknown_field(body, any_fields, chat ? chat_fields : completion_fields, why);
    if (bad) return bad;
#define OFF(key, cond, what)                                                                                          \
    do {                                                                                                              \
        json_t *x = json_object_get(body, key);                                                                       \
        if (x && !json_is_null(x) && !(cond)) return snprintf(err, cap, "'%s': %s", key, what), key;                 \
    } while (0)
    OFF("echo", json_is_false(x), "echoing the prompt is not implemented");
    OFF("suffix", json_is_string(x) && !json_string_length(x), "insertion (a suffix) is not implemented");
    OFF("best_of", json_is_integer(x) && json_integer_value(x) == 1, "only best_of 1 is implemented");
    OFF("response_format", json_is_object(x) && json_is_string(json_object_get(x, "type")),
        "must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
    OFF("tool_choice", json_is_string(x) || json_is_object(x), "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}");
    OFF("parallel_tool_calls", json_is_boolean(x), "must be a boolean");
    OFF("grammar", json_is_string(x), "must be a GBNF grammar in a string");
    OFF("json_schema", json_is_object(x) || json_is_boolean(x), "must be a JSON Schema (an object or a boolean)");
#undef OFF
    json_t *msgs = json_object_get(body, "messages");
    for (size_t i = 0; chat && i < json_array_size(msgs); i++) {
        json_t *content = json_object_get(json_array_get(msgs, i), "content");
        for (size_t j = 0; json_is_array(content) && j < json_array_size(content); j++) {
            json_t *part = json_array_get(content, j);
            const char *type = json_string_value(json_object_get(part, "type"));
            if (!json_is_object(part) || !type || strcmp(type, "text") || !json_is_string(json_object_get(part, "text")))
                return snprintf(err, cap, "messages[%zu].content[%zu]: only text parts are supported (this runs the text model)",
                                i, j),
                       "messages";
        }
    }
    return NULL;
}

/* The grammar the answer must follow (after the reasoning block, when thinking), from one of:
 * response_format json_object / json_schema, tool_choice "required" / a named function, or
 * llama-server's own fields, "grammar" (GBNF) and "json_schema" (a schema). Two at once is a 400
 * (which one won would be a guess), but for the one pair OpenAI's API orders. The field at fault,
 * or NULL. */
static const char *constrain(server *sv, json_t *j, request *rq, char *err, size_t cap) {
    json_t *rf = json_object_get(j, "response_format"), *choice = json_object_get(j, "tool_choice");
    json_t *gram = json_object_get(j, "grammar"), *schema = json_object_get(j, "json_schema");
    const char *type = json_string_value(json_object_get(rf, "type"));
    const char *forced = NULL; /* tool_choice: "" any tool, else the function's name */
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (!strcmp(c, "required")) forced = "";
        else if (strcmp(c, "auto") && strcmp(c, "none"))
            return snprintf(err, cap, "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}"), "tool_choice";
    } else if (json_is_object(choice)) {
        json_t *fn = json_object_get(choice, "function");
        forced = json_string_value(json_object_get(fn ? fn : choice, "name"));
        if (!forced || strcmp(json_string_value(json_object_get(choice, "type")) ? json_string_value(json_object_get(choice, "type")) : "", "function"))
            return snprintf(err, cap, "'tool_choice' must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}"), "tool_choice";
    }
    if (type && strcmp(type, "text") && strcmp(type, "json_object") && strcmp(type, "json_schema"))
        return snprintf(err, cap, "'response_format': type '%.40s' is not text, json_object or json_schema", type), "response_format";
    /* the one source of the grammar. A forced call outranks response_format, as in OpenAI's API:
     * the format shapes a text answer, and a forced turn gives none */
    const char *field = NULL;
    const char *const asked[] = {forced ? "tool_choice" : NULL, type && strcmp(type, "text") && !forced ? "response_format" : NULL,
                                 gram && !json_is_null(gram) ? "grammar" : NULL, schema && !json_is_null(schema) ? "json_schema" : NULL};
    for (size_t i = 0; i < sizeof asked / sizeof *asked; i++) {
        if (!asked[i]) continue;
        if (field) return snprintf(err, cap, "'%s' and '%s' both constrain the answer; send one", field, asked[i]), asked[i];
        field = asked[i];
    }
    if (!field) return NULL;
    char *gbnf = NULL, *text = NULL;
    qhx_status rc = QHX_OK;
    if (!strcmp(field, "tool_choice")) {
        if (!rq->tools) return snprintf(err, cap, "'tool_choice' forces a call but the request has no tools"), "tool_choice";
        text = json_dumps(rq->tools, JSON_COMPACT);
        rc = text ? qhx_tool_call_gbnf(text, strlen(text), *forced ? forced : NULL, *forced || rq->one_call ? 1 : 0, &gbnf)
                  : QHX_ERR_NOMEM;
    } else if (!strcmp(field, "response_format") && !strcmp(type, "json_object")) {
        rc = qhx_json_schema_to_gbnf("{\"type\": \"object\"}", 18, &gbnf);
    } else if (!strcmp(field, "response_format") || !strcmp(field, "json_schema")) {
        if (!strcmp(field, "response_format") && !(schema = json_object_get(json_object_get(rf, "json_schema"), "schema")))
            return snprintf(err, cap, "'response_format': json_schema needs {\"json_schema\": {\"schema\": ...}}"), field;
        text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
        rc = text ? qhx_json_schema_to_gbnf(text, strlen(text), &gbnf) : QHX_ERR_NOMEM;
    }
    if (!rc) {
        const char *src = gbnf ? gbnf : json_string_value(gram);
        rc = qhx_grammar_from_gbnf(sv->tok, src, gbnf ? strlen(gbnf) : json_string_length(gram), &rq->grammar);
    }
    free(gbnf);
    free(text);
    if (rc) return snprintf(err, cap, "'%s': %s", field, qhx_last_error()), field;
    rq->gen.grammar = rq->grammar;
    rq->gen.grammar_after = rq->chat && rq->thinking ? "</think>" : NULL;
    return NULL;
}

request *parse_body(server *sv, json_t *j, int chat, refusal *why) {
    char *err = why->message;
    const size_t cap = sizeof why->message;
    *why = (refusal){.status = 400};
    request *rq = calloc(1, sizeof *rq);
    unsigned status = 400;
    const char *param = NULL, *code = NULL;
    char *text = NULL;
    size_t text_len = 0;
    int special = 0;
    if (!json_is_object(j)) { snprintf(err, cap, "request body must be a JSON object"); goto fail; }
    if (!rq) { snprintf(err, cap, "out of memory"); status = 500; goto fail; }
    rq->chat = chat;
    rq->thinking = 1;
    rq->think_budget = -1;
    if ((param = unsupported(j, chat, why))) goto fail;
    json_t *model = json_object_get(j, "model");
    if (model && !json_is_string(model)) { param = "model"; snprintf(err, cap, "'model' must be a string"); goto fail; }
    if ((param = parse_sampling(sv, j, rq, err, cap))) goto fail;
    rq->gen.draft = sv->draft, rq->gen.draft_max = sv->draft_max;
    if (chat) {
        json_t *msgs = json_object_get(j, "messages"), *tools = json_object_get(j, "tools");
        if (!json_is_array(msgs) || !json_array_size(msgs)) {
            param = "messages";
            snprintf(err, cap, "'messages' must be a non-empty array");
            goto fail;
        }
        for (size_t i = 0; i < json_array_size(msgs); i++) {
            json_t *m = json_array_get(msgs, i), *role = json_object_get(m, "role");
            if (!json_is_object(m) || !json_is_string(role)) {
                param = "messages";
                snprintf(err, cap, "messages[%zu] must be an object with a string 'role'", i);
                goto fail;
            }
        }
        if (tools && !json_is_null(tools) && !json_is_array(tools)) { param = "tools"; snprintf(err, cap, "'tools' must be an array"); goto fail; }
        for (size_t i = 0; json_is_array(tools) && i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i), *fn = json_object_get(t, "function");
            if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
                param = "tools";
                snprintf(err, cap, "tools[%zu] must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
                goto fail;
            }
        }
        /* tool_choice "none": the tools are not shown to the model, and nothing it writes is a call */
        const json_t *choice = json_object_get(j, "tool_choice");
        if (json_is_string(choice) && !strcmp(json_string_value(choice), "none")) tools = NULL;
        if (json_is_array(tools) && json_array_size(tools)) rq->tools = json_incref(tools);
        rq->one_call = json_is_false(json_object_get(j, "parallel_tool_calls"));
        json_t *kw = json_object_get(j, "chat_template_kwargs");
        if (kw && !json_is_null(kw) && !json_is_object(kw)) {
            param = "chat_template_kwargs";
            snprintf(err, cap, "'chat_template_kwargs' must be an object");
            goto fail;
        }
        if (get_bool(kw, "enable_thinking", &rq->thinking, err, cap)) { param = "chat_template_kwargs"; goto fail; }
        /* reasoning_effort (OpenAI's): "none" and "minimal" turn the reasoning off, the others
         * leave it on; Qwen3.5 has no degrees between */
        json_t *effort = json_object_get(j, "reasoning_effort");
        if (effort && !json_is_null(effort)) {
            const char *e = json_string_value(effort);
            static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", NULL};
            int known = 0;
            for (int i = 0; e && efforts[i]; i++) known |= !strcmp(e, efforts[i]);
            if (!known || json_object_get(kw, "enable_thinking")) {
                param = "reasoning_effort";
                snprintf(err, cap, known ? "'reasoning_effort' and chat_template_kwargs.enable_thinking both set the reasoning; send one"
                                         : "'reasoning_effort' must be none, minimal, low, medium, high or xhigh");
                goto fail;
            }
            rq->thinking = strcmp(e, "none") && strcmp(e, "minimal");
        }
        /* thinking_budget (Qwen's own API's name): at most this many reasoning tokens, then the
         * block is closed as the template closes it and the answer follows */
        long long budget = -1;
        if (get_int(j, "thinking_budget", 0, INT_MAX, &budget, err, cap) < 0) { param = "thinking_budget"; goto fail; }
        rq->think_budget = rq->thinking ? (int)budget : -1;
        size_t nc = 0;
        if (rq->think_budget >= 0 && qhx_tokenizer_encode(sv->tok, "\n</think>\n\n", strlen("\n</think>\n\n"), QHX_ENCODE_SPECIAL, &rq->close_ids, &nc)) {
            param = "thinking_budget";
            snprintf(err, cap, "%s", qhx_last_error());
            goto fail;
        }
        rq->n_close = (int)nc;
        /* continue_final_message (vLLM's; Anthropic's prefill): the reply continues the final
         * assistant message as the template renders it, unclosed; its thinking, if any, is over */
        int cont = 0;
        if (get_bool(j, "continue_final_message", &cont, err, cap)) { param = "continue_final_message"; goto fail; }
        const char *last_role = json_string_value(json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "role"));
        if (cont && strcmp(last_role, "assistant")) {
            param = "continue_final_message";
            snprintf(err, cap, "'continue_final_message' needs a final assistant message to continue");
            goto fail;
        }
        if (cont) rq->thinking = 0, rq->think_budget = -1;
        if ((param = constrain(sv, j, rq, err, cap))) goto fail;
        json_t *req = json_pack("{s:O, s:b, s:b, s:b}", "messages", msgs, "add_generation_prompt", !cont, "enable_thinking", rq->thinking,
                                "continue_final_message", cont);
        if (rq->tools) json_object_set(req, "tools", tools);
        char *rj = req ? json_dumps(req, JSON_COMPACT) : NULL;
        if (req) json_object_set_new(req, "add_generation_prompt", json_false());
        if (cont) json_decref(req), req = NULL; /* the reply is no message of its own: no snapshot after it */
        rq->history = req;
        if (!rj || qhx_chat_render(rj, strlen(rj), &text, &text_len)) {
            free(rj);
            param = "messages";
            snprintf(err, cap, "%s", rj ? qhx_last_error() : "out of memory");
            goto fail;
        }
        free(rj);
        special = 1; /* the template's markers are special tokens; user text is inside them as rendered */
    } else {
        json_t *p = json_object_get(j, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
        if (json_is_string(p)) {
            if (!(text = strndup(json_string_value(p), json_string_length(p)))) { status = 500; snprintf(err, cap, "out of memory"); goto fail; }
            text_len = json_string_length(p);
        } else if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0))) {
            size_t n = json_array_size(p);
            if (n > (size_t)sv->mi.max_context) {
                param = "prompt";
                snprintf(err, cap, "the prompt has %zu tokens; the context is %d", n, sv->mi.max_context);
                goto fail;
            }
            rq->ids = malloc(sizeof(int32_t) * n);
            rq->n_ids = (int)n;
            for (size_t i = 0; rq->ids && i < n; i++) {
                json_t *v = json_array_get(p, i);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= sv->mi.vocab_size) {
                    param = "prompt";
                    snprintf(err, cap, "prompt[%zu] is not a token id in [0, %d)", i, sv->mi.vocab_size);
                    goto fail;
                }
                rq->ids[i] = (int32_t)json_integer_value(v);
            }
            if (!rq->ids) { status = 500; snprintf(err, cap, "out of memory"); goto fail; }
        } else {
            param = "prompt";
            snprintf(err, cap, "'prompt' must be a string, a one-string array or an array of token ids");
            goto fail;
        }
        if ((param = constrain(sv, j, rq, err, cap))) goto fail;
    }
    if (text) {
        size_t n = 0;
        qhx_status st = qhx_tokenizer_encode(sv->tok, text, text_len, special ? QHX_ENCODE_SPECIAL : 0, &rq->ids, &n);
        if (st) { param = chat ? "messages" : "prompt"; snprintf(err, cap, "%s", qhx_last_error()); goto fail; }
        rq->n_ids = (int)n;
        if (!n) { param = "prompt"; snprintf(err, cap, "the prompt is empty"); goto fail; }
    }
    if (rq->n_ids >= sv->mi.max_context) { /* no room for a single token */
        param = chat ? "messages" : "prompt";
        code = "context_length_exceeded";
        snprintf(err, cap, "This model's maximum context length is %d tokens. However, your prompt has %d tokens, "
                 "leaving no room for the completion.", sv->mi.max_context, rq->n_ids);
        goto fail;
    }
    if (rq->gen.max_tokens > sv->mi.max_context - rq->n_ids) rq->gen.max_tokens = sv->mi.max_context - rq->n_ids;
    free(text);
    json_decref(j);
    why->status = 0;
    pthread_mutex_lock(&sv->lock);
    unsigned long k = ++sv->n_requests;
    pthread_mutex_unlock(&sv->lock);
    snprintf(rq->id, sizeof rq->id, "%s-%lx%lu", chat ? "chatcmpl" : "cmpl", (unsigned long)time(NULL), k);
    rq->created = (long)time(NULL);
    return rq;
fail:
    json_decref(j);
    free(text);
    if (rq) request_free(rq);
    why->status = status;
    why->param = param; /* a static string, or why->param_name */
    why->code = code;
    return NULL;
}

request *parse_request(server *sv, const char *body, size_t len, int chat, refusal *why) {
    json_error_t jerr;
    json_t *j = json_loadb(body, len, 0, &jerr);
    if (j) return parse_body(sv, j, chat, why);
    *why = (refusal){.status = 400};
    snprintf(why->message, sizeof why->message, "request body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
             jerr.column);
    return NULL;
}
