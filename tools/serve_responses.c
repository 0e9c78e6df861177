/* qhx serve's POST /v1/responses. The request: a Responses API body as the chat request it
 * amounts to, which parse_body then checks, renders and tokenizes as any chat completion. What
 * agents send by default is taken (the Codex CLI: developer messages, reasoning items handed
 * back, namespaced tools, a hosted web_search); what would change a reply and is not done here
 * is a 400 naming it. The reply: output items (reasoning, message, function calls), streamed as
 * the API's events, one item at a time (tools/serve_job.h's reply_shape). */
#include "serve_job.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fields[] = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "tools",
                                     "tool_choice", "parallel_tool_calls", "text", "store", "metadata", "user", "include",
                                     "truncation", "service_tier", "top_logprobs", "seed", "reasoning", "prompt_cache_key",
                                     "client_metadata", "safety_identifier", "previous_response_id", NULL};

/* Tools OpenAI runs on its side: this server has none of them, so the model is not offered them
 * (and so never calls one), as a model without them would answer. */
static const char *const hosted[] = {"web_search", "web_search_preview", "file_search", "code_interpreter", "image_generation",
                                     "computer_use_preview", "mcp", NULL};

static const char *const in_out[] = {"input_text", "output_text", NULL};

/* an item's content (or output): a string, or text parts */
static json_t *text_of(const json_t *c, char *err, size_t cap, const char *field, size_t i) {
    char where[64];
    snprintf(where, sizeof where, "input[%zu].%s", i, field);
    return serve_parts_text(c, in_out, "", "input_text and output_text parts", where, err, cap);
}

/* a reasoning item's text: what include "reasoning.encrypted_content" handed out (the reasoning
 * itself; nothing here is secret), else its reasoning_text parts, else its summary */
static json_t *reasoning_of(const json_t *it, char *err, size_t cap, size_t i) {
    const json_t *enc = json_object_get(it, "encrypted_content"), *content = json_object_get(it, "content");
    if (json_is_string(enc)) return json_incref((json_t *)enc);
    if (json_array_size(content)) {
        char where[64];
        snprintf(where, sizeof where, "input[%zu].content", i);
        return serve_parts_text(content, (const char *const[]){"reasoning_text", NULL}, "", "reasoning_text parts", where, err, cap);
    }
    json_t *s = NULL;
    size_t k;
    const json_t *p;
    json_array_foreach(json_object_get(it, "summary"), k, p) {
        const json_t *text = json_object_get(p, "text");
        if (!json_is_string(text)) return json_decref(s), snprintf(err, cap, "input[%zu].summary[%zu] needs a string text", i, k), NULL;
        if (!(s = serve_join(s, "\n\n", text))) return NULL;
    }
    return s ? s : json_string("");
}

/* the assistant turn a call or reasoning joins: the last message when it is one, else a new one */
static json_t *assistant_turn(json_t *msgs) {
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    if (!last || strcmp(json_string_value(json_object_get(last, "role")), "assistant"))
        json_array_append_new(msgs, last = json_pack("{s:s, s:s}", "role", "assistant", "content", ""));
    return last;
}

/* the input items (an array, checked non-empty) as chat messages. System and developer messages
 * before the first other one are the system message (the template takes one, first); a later one
 * is a user turn. Function calls and reasoning join the assistant turn they belong to. */
static json_t *messages(const json_t *instr, const json_t *input, char *err, size_t cap) {
    json_t *msgs = json_array(), *system = json_is_string(instr) ? json_incref((json_t *)instr) : NULL, *thought = NULL;
    size_t i;
    const json_t *it;
    json_array_foreach(input, i, it) {
        const char *type = json_string_value(json_object_get(it, "type")), *role = json_string_value(json_object_get(it, "role"));
        const json_t *ns = json_object_get(it, "namespace");
        if (type && !strcmp(type, "function_call")) {
            const json_t *name = json_object_get(it, "name"), *args = json_object_get(it, "arguments"), *id = json_object_get(it, "call_id");
            if (!json_is_string(name) || !json_is_string(args) || !json_is_string(id) || (ns && !json_is_null(ns) && !json_is_string(ns))) {
                snprintf(err, cap, "input[%zu]: a function_call needs string call_id, name and arguments", i);
                goto fail;
            }
            json_t *turn = assistant_turn(msgs), *calls = json_object_get(turn, "tool_calls");
            if (!calls) json_object_set_new(turn, "tool_calls", calls = json_array());
            json_t *full = json_is_string(ns) ? json_sprintf("%s.%s", json_string_value(ns), json_string_value(name)) : json_incref((json_t *)name);
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:o, s:O}}", "id", id, "type", "function", "function", "name", full,
                                                   "arguments", args));
        } else if (type && !strcmp(type, "function_call_output")) {
            if (!json_is_string(json_object_get(it, "call_id"))) {
                snprintf(err, cap, "input[%zu]: a function_call_output needs a string call_id", i);
                goto fail;
            }
            json_t *out = text_of(json_object_get(it, "output"), err, cap, "output", i);
            if (!out) goto fail;
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", json_object_get(it, "call_id"), "content", out));
        } else if (type && !strcmp(type, "reasoning")) {
            json_t *r = reasoning_of(it, err, cap, i);
            if (!r) goto fail;
            thought = serve_join(thought, "\n\n", r); /* several in a row: one block */
            json_decref(r);
            if (!thought) goto fail;
            continue;
        } else if ((!type || !strcmp(type, "message")) && serve_listed((const char *const[]){"user", "assistant", "system", "developer", NULL}, role)) {
            json_t *c = text_of(json_object_get(it, "content"), err, cap, "content", i);
            if (!c) goto fail;
            const int sys = !strcmp(role, "system") || !strcmp(role, "developer");
            if (sys && !json_array_size(msgs)) {
                system = serve_join(system, "\n\n", c);
                json_decref(c);
                if (!system) goto fail;
                continue;
            }
            json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", sys ? "user" : role, "content", c));
        } else {
            snprintf(err, cap, "input[%zu]: only messages, reasoning, function_call and function_call_output items are supported", i);
            goto fail;
        }
        if (thought) { /* the reasoning before this item belongs to the assistant turn it is part of */
            json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
            if (!strcmp(json_string_value(json_object_get(last, "role")), "assistant") && !json_object_get(last, "reasoning_content"))
                json_object_set(last, "reasoning_content", thought);
            json_decref(thought), thought = NULL;
        }
    }
    json_decref(thought);
    if (system) json_array_insert_new(msgs, 0, json_pack("{s:s, s:o}", "role", "system", "content", system));
    return msgs;
fail:
    json_decref(msgs), json_decref(system), json_decref(thought);
    return NULL;
}

/* function tools as the chat form; a namespace's tools as functions named "NS.name" (a dot is
 * never in an OpenAI function name), noted in *namespaced so the calls come back with their
 * namespace; hosted tools left out. The tool at fault, or NULL with the list. */
static json_t *chat_tools(const json_t *tools, json_t *namespaced, char *err, size_t cap) {
    json_t *ct = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type")), *ns = NULL;
        if (serve_listed(hosted, type)) continue;
        const json_t *group = json_object_get(t, "tools");
        if (type && !strcmp(type, "namespace") && json_is_string(json_object_get(t, "name")) && json_is_array(group)) {
            ns = json_string_value(json_object_get(t, "name"));
        } else {
            group = NULL;
        }
        for (size_t k = 0; k < (group ? json_array_size(group) : 1); k++) {
            const json_t *f = group ? json_array_get(group, k) : t;
            const char *ftype = json_string_value(json_object_get(f, "type"));
            if (!ftype || strcmp(ftype, "function") || !json_is_string(json_object_get(f, "name"))) {
                json_decref(ct);
                if (group) snprintf(err, cap, "tools[%zu].tools[%zu]: only function tools are supported in a namespace", i, k);
                else snprintf(err, cap, "tools[%zu]: only function and namespace tools are supported (hosted ones are left out)", i);
                return NULL;
            }
            json_t *name = ns ? json_sprintf("%s.%s", ns, json_string_value(json_object_get(f, "name"))) : json_incref(json_object_get(f, "name"));
            if (ns) json_object_set_new(namespaced, json_string_value(name), json_string(ns));
            json_t *fn = json_pack("{s:o}", "name", name);
            if (json_object_get(f, "description")) json_object_set(fn, "description", json_object_get(f, "description"));
            if (json_object_get(f, "parameters")) json_object_set(fn, "parameters", json_object_get(f, "parameters"));
            json_array_append_new(ct, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
    }
    return ct;
}

request *parse_responses(server *sv, const char *body, size_t len, refusal *why) {
    json_t *j = serve_load_object(body, len, fields, why), *chat = NULL, *msgs = NULL, *input = NULL;
    if (!j) return NULL;
    json_t *namespaced = json_object(), *v;
    char *err = why->message;
    const size_t cap = sizeof why->message;
    const char *param = NULL, *k;
    int encrypted = 0;
    const json_t *fmt = json_object_get(json_object_get(j, "text"), "format"), *inc = json_object_get(j, "include");
    if (fmt && !json_is_string(json_object_get(fmt, "type"))) {
        param = "text";
        snprintf(err, cap, "'text.format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
        goto fail;
    }
    for (size_t i = 0; i < json_array_size(inc); i++) /* the one extra output: the reasoning, to hand back next turn */
        if (!(encrypted = !strcmp(json_string_value(json_array_get(inc, i)) ? json_string_value(json_array_get(inc, i)) : "",
                                  "reasoning.encrypted_content"))) break;
    if (inc && !json_is_null(inc) && (!json_is_array(inc) || (json_array_size(inc) && !encrypted))) {
        param = "include";
        snprintf(err, cap, "'include': only \"reasoning.encrypted_content\" is implemented");
        goto fail;
    }
    /* reasoning {effort, summary}: the effort is chat's reasoning_effort; the summary is the
     * reasoning itself, whatever its detail */
    const json_t *reason = json_object_get(j, "reasoning"), *effort = json_object_get(reason, "effort");
    json_object_foreach((json_t *)(json_is_object(reason) ? reason : NULL), k, v)
        if (strcmp(k, "effort") && strcmp(k, "summary")) { snprintf(err, cap, "'reasoning.%.60s' is not implemented", k); param = "reasoning"; goto fail; }
    if (reason && !json_is_null(reason) && !json_is_object(reason)) {
        param = "reasoning";
        snprintf(err, cap, "'reasoning' must be {\"effort\": ..., \"summary\": ...}");
        goto fail;
    }
    /* the conversation: a stored response's items (its instructions are not carried over), then
     * this input, as items */
    const json_t *prev = json_object_get(j, "previous_response_id"), *in = json_object_get(j, "input"), *store = json_object_get(j, "store");
    if (prev && !json_is_null(prev)) {
        param = "previous_response_id";
        if (!json_is_string(prev)) { snprintf(err, cap, "'previous_response_id' must be a string"); goto fail; }
        if (!(input = rstore_get(sv->responses, json_string_value(prev), 1))) {
            why->status = 404, why->code = "previous_response_not_found";
            snprintf(err, cap, "Previous response with id '%.100s' not found (not stored here, deleted, or forgotten).", json_string_value(prev));
            goto fail;
        }
    }
    if (!input) input = json_array();
    if (json_is_string(in)) json_array_append_new(input, json_pack("{s:s, s:O}", "role", "user", "content", in));
    else if (json_is_array(in)) json_array_extend(input, (json_t *)in);
    param = "input";
    if ((in && !json_is_string(in) && !json_is_array(in)) || !json_array_size(input)) {
        snprintf(err, cap, "'input' must be a string or a non-empty array of items");
        goto fail;
    }
    const json_t *instr = json_object_get(j, "instructions");
    if (instr && !json_is_null(instr) && !json_is_string(instr)) { param = "instructions"; snprintf(err, cap, "'instructions' must be a string"); goto fail; }
    if (!(msgs = messages(instr, input, err, cap))) goto fail;
    chat = json_pack("{s:O}", "messages", msgs);
    const json_t *tools = json_object_get(j, "tools");
    if (tools && !json_is_null(tools)) {
        json_t *ct = json_is_array(tools) ? chat_tools(tools, namespaced, err, cap) : NULL;
        if (!json_is_array(tools)) snprintf(err, cap, "'tools' must be an array");
        if (!ct) { param = "tools"; goto fail; }
        json_object_set_new(chat, "tools", ct);
    }
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "tool_choice", "parallel_tool_calls", "metadata",
                                       "user", "store", "seed", "service_tier", "prompt_cache_key", "safety_identifier", NULL};
    for (int i = 0; same[i]; i++)
        if (json_object_get(j, same[i])) json_object_set(chat, same[i], json_object_get(j, same[i]));
    const json_t *choice = json_object_get(j, "tool_choice"), *cns = json_object_get(choice, "namespace");
    if (json_is_string(cns) && json_is_string(json_object_get(choice, "name"))) /* a namespaced function, as offered */
        json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:o}}", "type", "function", "function", "name",
                                                           json_sprintf("%s.%s", json_string_value(cns),
                                                                        json_string_value(json_object_get(choice, "name")))));
    if (json_object_get(j, "max_output_tokens")) json_object_set(chat, "max_tokens", json_object_get(j, "max_output_tokens"));
    if (effort) json_object_set(chat, "reasoning_effort", (json_t *)effort);
    if (fmt) { /* text.format {type, name, schema, strict} -> response_format {type, json_schema: {name, schema, strict}} */
        json_t *rf = json_pack("{s:O}", "type", json_object_get(fmt, "type"));
        if (json_object_get(fmt, "schema"))
            json_object_set_new(rf, "json_schema", json_pack("{s:O}", "schema", json_object_get(fmt, "schema")));
        json_object_set_new(chat, "response_format", rf);
    }
    if (json_object_get(j, "top_logprobs")) {
        json_object_set(chat, "top_logprobs", json_object_get(j, "top_logprobs"));
        json_object_set_new(chat, "logprobs", json_true());
    }
    const int keep = !json_is_false(store);
    json_decref(j), json_decref(msgs);
    request *rq = parse_body(sv, chat, 1, why); /* the chat request it amounts to, not written out and read back */
    if (!rq) { /* name the Responses API's fields */
        json_decref(input);
        if (why->param && !strcmp(why->param, "max_tokens")) why->param = "max_output_tokens";
        if (why->param && !strcmp(why->param, "messages")) why->param = "input";
        if (why->param && !strcmp(why->param, "response_format")) why->param = "text";
        if (why->param && !strcmp(why->param, "reasoning_effort")) why->param = "reasoning";
        json_decref(namespaced);
        return NULL;
    }
    rq->shape = &responses_shape;
    rq->encrypted_reasoning = encrypted;
    if (keep) rq->resp_items = input; /* stored with the output once the reply is done */
    else json_decref(input);
    if (json_object_size(namespaced)) rq->namespaced = namespaced;
    else json_decref(namespaced);
    memcpy(rq->id, "resp", 4); /* "resp-..." for "chatcmpl-..." */
    memmove(rq->id + 4, rq->id + 8, strlen(rq->id + 8) + 1);
    return rq;
fail:
    json_decref(j), json_decref(chat), json_decref(msgs), json_decref(namespaced), json_decref(input);
    why->param = param;
    return NULL;
}

/* ---- the reply: items, events, the response object ---- */

static json_t *item_id(const job *jb, const char *kind) { return json_sprintf("%s_%s", kind, jb->rq->id + 5); }

/* a function_call output item; a namespaced tool's call names its namespace apart */
static json_t *call_item(const job *jb, const json_t *call) {
    const json_t *fn = json_object_get(call, "function"), *name = json_object_get(fn, "name");
    json_t *item = json_pack("{s:s, s:s+, s:O, s:O, s:O, s:s}", "type", "function_call", "id", "fc_",
                             json_string_value(json_object_get(call, "id")), "call_id", json_object_get(call, "id"), "name", name,
                             "arguments", json_object_get(fn, "arguments"), "status", "completed");
    const char *ns = json_string_value(json_object_get(jb->rq->namespaced, json_string_value(name)));
    if (ns) {
        json_object_set_new(item, "namespace", json_string(ns));
        json_object_set_new(item, "name", json_string(json_string_value(name) + strlen(ns) + 1));
    }
    return item;
}

/* the reasoning item, whole: its text as the summary, and as encrypted_content when the request
 * includes it (the client hands it back next turn, and the prompt is then the one this turn ran) */
static json_t *reasoning_item(const job *jb) {
    const char *r, *c;
    size_t nr, nc;
    visible(jb, &r, &nr, &c, &nc);
    while (nr && r[nr - 1] == '\n') nr--;
    json_t *item = json_pack("{s:s, s:o, s:[{s:s, s:s%}]}", "type", "reasoning", "id", item_id(jb, "rs"), "summary", "type",
                             "summary_text", "text", r ? r : "", nr);
    if (jb->rq->encrypted_reasoning) json_object_set_new(item, "encrypted_content", json_stringn(r ? r : "", nr));
    return item;
}

/* the message item, whole: the answer as one output_text part */
static json_t *message_item(const job *jb) {
    const char *r, *c;
    size_t nr, nc;
    visible(jb, &r, &nr, &c, &nc);
    json_t *part = json_pack("{s:s, s:s%, s:[]}", "type", "output_text", "text", c ? c : "", nc, "annotations");
    if (jb->lp) json_object_set(part, "logprobs", jb->lp);
    return json_pack("{s:s, s:o, s:s, s:s, s:[o]}", "type", "message", "id", item_id(jb, "msg"), "status", "completed", "role",
                     "assistant", "content", part);
}

/* the response object: its output items (reasoning as a summary, the message, each function
 * call), status and usage */
static json_t *response_object(job *jb, const qhx_generate_result *res, int done) {
    const request *rq = jb->rq;
    const char *r, *c;
    size_t nr, nc;
    visible(jb, &r, &nr, &c, &nc);
    while (nr && r[nr - 1] == '\n') nr--;
    json_t *out = json_array();
    const int thought = done && rq->thinking && nr;
    if (thought) json_array_append_new(out, reasoning_item(jb));
    if (done && (nc || (!json_array_size(jb->calls) && !thought))) json_array_append_new(out, message_item(jb)); /* never no item */
    for (size_t i = 0; done && i < json_array_size(jb->calls); i++) json_array_append_new(out, call_item(jb, json_array_get(jb->calls, i)));
    const int cut = done && res->finish != QHX_FINISH_STOP;
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:o, s:s, s:o}", "id", rq->id, "object", "response", "created_at", (int)rq->created,
                          "status", !done ? "in_progress" : cut ? "incomplete" : "completed", "incomplete_details",
                          cut ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(), "model", jb->sv->model_id, "output", out);
    if (done)
        json_object_set_new(o, "usage", json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", res->n_prompt, "input_tokens_details",
                                                  "cached_tokens", jb->cached, "output_tokens", res->n_generated, "output_tokens_details",
                                                  "reasoning_tokens", 0, "total_tokens", res->n_prompt + res->n_generated));
    return o;
}

/* an item-level event: its item_id and output_index, and the rest (taken) */
static int item_event(job *jb, const char *type, const char *kind, int at, json_t *rest) {
    json_object_set_new(rest, "item_id", item_id(jb, kind));
    json_object_set_new(rest, "output_index", json_integer(at));
    return send_sse(jb, type, rest);
}

/* A chat delta as the Responses API's events, in the order OpenAI sends them (the official
 * SDK's stream helper builds its response from them): reasoning opens a reasoning item and its
 * summary part (summary deltas), the answer a message item and its output_text part (text
 * deltas), each call a function_call item (its arguments as one delta); a part and its item
 * close, with their whole text, when the next kind begins (within one delta too: with tools,
 * reasoning and answer can come together). Takes the choice. */
static int send_response_events(job *jb, json_t *choice, int final) {
    const json_t *d = json_object_get(choice, "delta");
    const json_t *r = json_object_get(d, "reasoning_content"), *c = json_object_get(d, "content"), *calls = json_object_get(d, "tool_calls");
    int bad = 0;
    json_t *said = r ? json_incref((json_t *)r) : NULL;
    if (r && !jb->open_reasoning && !jb->open_message && !jb->items) {
        /* the item opens at the reasoning's first character that is not a newline, with all of
         * it so far: newlines alone are no reasoning, as the whole reply has none then */
        const char *rs, *cs;
        size_t nr, nc;
        visible(jb, &rs, &nr, &cs, &nc);
        while (nr && rs[nr - 1] == '\n') nr--;
        json_decref(said), said = NULL;
        if (nr) {
            jb->open_reasoning = ++jb->items;
            bad |= send_sse(jb, "response.output_item.added", json_pack("{s:i, s:{s:s, s:o, s:[]}}", "output_index", jb->open_reasoning - 1,
                                                                        "item", "type", "reasoning", "id", item_id(jb, "rs"), "summary"));
            bad |= item_event(jb, "response.reasoning_summary_part.added", "rs", jb->open_reasoning - 1,
                              json_pack("{s:i, s:{s:s, s:s}}", "summary_index", 0, "part", "type", "summary_text", "text", ""));
            visible(jb, &rs, &nr, &cs, &nc);
            said = json_stringn(rs, nr);
        }
    }
    if (said && jb->open_reasoning)
        bad |= item_event(jb, "response.reasoning_summary_text.delta", "rs", jb->open_reasoning - 1,
                          json_pack("{s:i, s:O}", "summary_index", 0, "delta", said));
    json_decref(said);
    if ((c || calls || final) && jb->open_reasoning) {
        const int at = jb->open_reasoning - 1;
        json_t *item = reasoning_item(jb), *text = json_object_get(json_array_get(json_object_get(item, "summary"), 0), "text");
        bad |= item_event(jb, "response.reasoning_summary_text.done", "rs", at, json_pack("{s:i, s:O}", "summary_index", 0, "text", text));
        bad |= item_event(jb, "response.reasoning_summary_part.done", "rs", at,
                          json_pack("{s:i, s:{s:s, s:O}}", "summary_index", 0, "part", "type", "summary_text", "text", text));
        bad |= send_sse(jb, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", at, "item", item));
        jb->open_reasoning = 0;
    }
    if ((c || (final && !jb->items && !calls)) && !jb->open_message) { /* a reply of nothing is one empty message, as whole */
        jb->open_message = ++jb->items;
        bad |= send_sse(jb, "response.output_item.added", json_pack("{s:i, s:{s:s, s:o, s:s, s:s, s:[]}}", "output_index", jb->open_message - 1,
                                                                    "item", "type", "message", "id", item_id(jb, "msg"), "role",
                                                                    "assistant", "status", "in_progress", "content"));
        bad |= item_event(jb, "response.content_part.added", "msg", jb->open_message - 1,
                          json_pack("{s:i, s:{s:s, s:s, s:[]}}", "content_index", 0, "part", "type", "output_text", "text", "", "annotations"));
    }
    if (c) {
        json_t *e = json_pack("{s:i, s:O}", "content_index", 0, "delta", c);
        const json_t *lp = json_object_get(json_object_get(choice, "logprobs"), "content");
        if (lp) json_object_set(e, "logprobs", (json_t *)lp);
        bad |= item_event(jb, "response.output_text.delta", "msg", jb->open_message - 1, e);
    }
    if ((calls || final) && jb->open_message) {
        const int at = jb->open_message - 1;
        json_t *item = message_item(jb), *part = json_array_get(json_object_get(item, "content"), 0);
        bad |= item_event(jb, "response.output_text.done", "msg", at, json_pack("{s:i, s:O}", "content_index", 0, "text", json_object_get(part, "text")));
        bad |= item_event(jb, "response.content_part.done", "msg", at, json_pack("{s:i, s:O}", "content_index", 0, "part", part));
        bad |= send_sse(jb, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", at, "item", item));
        jb->open_message = 0;
    }
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *item = call_item(jb, json_array_get(calls, i)), *opened = json_deep_copy(item), *args = json_object_get(item, "arguments");
        json_object_set_new(opened, "arguments", json_string(""));
        json_object_set_new(opened, "status", json_string("in_progress"));
        json_t *id = json_object_get(item, "id");
        bad |= send_sse(jb, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", jb->items, "item", opened));
        bad |= send_sse(jb, "response.function_call_arguments.delta", json_pack("{s:O, s:i, s:O}", "item_id", id, "output_index", jb->items, "delta", args));
        bad |= send_sse(jb, "response.function_call_arguments.done", json_pack("{s:O, s:i, s:O}", "item_id", id, "output_index", jb->items, "arguments", args));
        bad |= send_sse(jb, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", jb->items, "item", item));
        jb->items++;
    }
    json_decref(choice);
    return bad ? -1 : 0;
}

static int open_stream(job *jb) { return send_sse(jb, "response.created", json_pack("{s:o}", "response", response_object(jb, NULL, 0))); }

/* the finished response (returned), stored unless the request said store: false: its
 * conversation's items, its output after them */
static json_t *finished(job *jb, const qhx_generate_result *res) {
    json_t *o = response_object(jb, res, 1);
    if (jb->rq->resp_items && !jb->failed) {
        json_t *items = jb->rq->resp_items, *stored = json_deep_copy(o); /* shares nothing with what is sent */
        jb->rq->resp_items = NULL;
        json_array_extend(items, json_object_get(stored, "output"));
        rstore_put(jb->sv->responses, jb->rq->id, items, stored);
    }
    return o;
}

static int close_stream(job *jb, const qhx_generate_result *res) {
    const int cut = res->finish != QHX_FINISH_STOP;
    return send_sse(jb, cut ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", finished(jb, res)));
}

static json_t *whole(job *jb, const qhx_generate_result *res) { return finished(jb, res); }

const reply_shape responses_shape = {open_stream, send_response_events, close_stream, whole};
