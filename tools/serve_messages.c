/* qhx serve's POST /v1/messages: Anthropic's Messages API, which Claude Code and the Anthropic
 * SDKs speak. The request: system, messages of text, thinking, tool_use and tool_result blocks,
 * tools with input_schema, tool_choice, thinking, as the chat request it amounts to, which
 * parse_body then checks, renders and tokenizes as any chat completion. The reply: thinking, text
 * and tool_use content blocks, streamed as the API's events one block at a time
 * (tools/serve_job.h's reply_shape). The thinking block's signature is the thinking itself
 * (nothing here is secret): handed back, it is the assistant turn's reasoning, as the model wrote
 * it. What would change a reply and is not done here is a 400 naming it. */
#include "serve_job.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fields[] = {"model", "messages", "system", "max_tokens", "stop_sequences", "stream", "temperature", "top_p",
                                     "top_k", "metadata", "tools", "tool_choice", "thinking", "context_management", "output_config",
                                     "service_tier", NULL};


/* text blocks (or a string) as one string; any other block is refused, named by where */
static json_t *text_of(const json_t *c, const char *sep, char *err, size_t cap, const char *where) {
    return serve_parts_text(c, (const char *const[]){"text", NULL}, sep, "text blocks", where, err, cap);
}

/* the last message if it has role, else a new one */
static json_t *turn_of(json_t *msgs, const char *role) {
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    if (!last || strcmp(json_string_value(json_object_get(last, "role")), role) || json_object_get(last, "tool_calls"))
        json_array_append_new(msgs, last = json_pack("{s:s, s:s}", "role", role, "content", ""));
    return last;
}

/* one message's blocks into chat messages: a user's text and tool results (each a tool message,
 * in order), an assistant's thinking, text and tool uses (one assistant turn) */
static int blocks(json_t *msgs, const char *role, const json_t *content, size_t i, char *err, size_t cap) {
    const int user = !strcmp(role, "user");
    if (json_is_string(content)) {
        json_t *m = turn_of(msgs, role);
        json_object_set_new(m, "content", serve_join(json_incref(json_object_get(m, "content")), "\n", content));
        return 0;
    }
    if (!json_is_array(content)) return snprintf(err, cap, "messages[%zu].content must be a string or an array of blocks", i), -1;
    size_t k;
    const json_t *b;
    json_array_foreach(content, k, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        char where[64];
        snprintf(where, sizeof where, "messages[%zu].content[%zu]", i, k);
        if (type && !strcmp(type, "text") && json_is_string(json_object_get(b, "text"))) {
            json_t *m = turn_of(msgs, role), *t = json_object_get(b, "text");
            json_object_set_new(m, "content", serve_join(json_incref(json_object_get(m, "content")), "\n", t));
        } else if (user && type && !strcmp(type, "tool_result") && json_is_string(json_object_get(b, "tool_use_id"))) {
            json_t *out = json_object_get(b, "content") ? text_of(json_object_get(b, "content"), "\n", err, cap, where) : json_string("");
            if (!out) return -1;
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", json_object_get(b, "tool_use_id"), "content", out));
        } else if (!user && type && !strcmp(type, "tool_use") && json_is_string(json_object_get(b, "id")) &&
                   json_is_string(json_object_get(b, "name")) && json_is_object(json_object_get(b, "input"))) {
            json_t *m = json_array_get(msgs, json_array_size(msgs) - 1), *calls;
            if (!m || strcmp(json_string_value(json_object_get(m, "role")), "assistant")) m = turn_of(msgs, role);
            if (!(calls = json_object_get(m, "tool_calls"))) json_object_set_new(m, "tool_calls", calls = json_array());
            char *args = json_dumps(json_object_get(b, "input"), JSON_COMPACT);
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", json_object_get(b, "id"), "type", "function", "function",
                                                   "name", json_object_get(b, "name"), "arguments", args ? args : "{}"));
            free(args);
        } else if (!user && type && !strcmp(type, "thinking")) {
            /* the thinking, or when it was omitted its signature, which is the same text */
            const json_t *t = json_object_get(b, "thinking"), *sig = json_object_get(b, "signature");
            const json_t *r = json_string_length(t) ? t : sig;
            if (!json_is_string(r)) return snprintf(err, cap, "%s: a thinking block needs its thinking or signature", where), -1;
            json_t *m = turn_of(msgs, role);
            json_object_set_new(m, "reasoning_content", serve_join(json_incref(json_object_get(m, "reasoning_content")), "\n\n", r));
        } else {
            return snprintf(err, cap, "%s: '%s' blocks are not supported in %s messages (this runs the text model)", where,
                            type ? type : "(no type)", role),
                   -1;
        }
    }
    return 0;
}

/* system, then the messages. A system message (or the system field) before the first other one
 * is the system message; a later one is a user turn (the template takes one system message,
 * first). The field at fault, or NULL. */
static const char *messages(const json_t *j, json_t *msgs, char *err, size_t cap) {
    json_t *system = NULL;
    const json_t *sys = json_object_get(j, "system"), *in = json_object_get(j, "messages");
    if (sys && !json_is_null(sys) && !(system = text_of(sys, "\n", err, cap, "system"))) return "system";
    if (!json_is_array(in) || !json_array_size(in)) return json_decref(system), snprintf(err, cap, "'messages' must be a non-empty array"), "messages";
    size_t i;
    const json_t *m;
    json_array_foreach(in, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const json_t *content = json_object_get(m, "content");
        if (!serve_listed((const char *const[]){"user", "assistant", "system", NULL}, role)) {
            json_decref(system);
            return snprintf(err, cap, "messages[%zu]: the role must be user, assistant or system", i), "messages";
        }
        if (!strcmp(role, "system")) {
            json_t *t = text_of(content, "\n", err, cap, "messages[].content");
            if (!t) return json_decref(system), "messages";
            if (!json_array_size(msgs)) system = serve_join(system, "\n\n", t);
            else json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", t));
            json_decref(t);
            continue;
        }
        if (blocks(msgs, role, content, i, err, cap)) return json_decref(system), "messages";
    }
    if (system) json_array_insert_new(msgs, 0, json_pack("{s:s, s:o}", "role", "system", "content", system));
    return NULL;
}

/* tools {name, description, input_schema} as the chat form. Anthropic's own tools (a type with a
 * date: web search, bash, the text editor; they carry no schema) and tools deferred for a tool
 * search (defer_loading) are not offered. */
static json_t *chat_tools(const json_t *tools, char *err, size_t cap) {
    json_t *ct = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        if (json_is_true(json_object_get(t, "defer_loading")) || (type && strcmp(type, "custom"))) continue;
        if (!json_is_string(json_object_get(t, "name")) || !json_is_object(json_object_get(t, "input_schema"))) {
            json_decref(ct);
            return snprintf(err, cap, "tools[%zu] must be {\"name\": ..., \"input_schema\": {...}}", i), NULL;
        }
        json_t *fn = json_pack("{s:O}", "name", json_object_get(t, "name")); /* in OpenAI's order: the template writes the tools as JSON */
        if (json_is_string(json_object_get(t, "description"))) json_object_set(fn, "description", json_object_get(t, "description"));
        json_object_set(fn, "parameters", json_object_get(t, "input_schema"));
        json_array_append_new(ct, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return ct;
}

/* thinking, tool_choice, output_config and context_management into chat's fields. The field at
 * fault, or NULL. */
static const char *options(const json_t *j, json_t *chat, int *omitted, char *err, size_t cap) {
    const json_t *th = json_object_get(j, "thinking"), *tc = json_object_get(j, "tool_choice"), *oc = json_object_get(j, "output_config");
    const json_t *cm = json_object_get(j, "context_management");
    const char *k;
    json_t *v;
    if (th && !json_is_null(th)) {
        const char *type = json_string_value(json_object_get(th, "type")), *display = json_string_value(json_object_get(th, "display"));
        const json_t *budget = json_object_get(th, "budget_tokens");
        if (!serve_listed((const char *const[]){"enabled", "adaptive", "disabled", NULL}, type) ||
            (display && !serve_listed((const char *const[]){"summarized", "omitted", NULL}, display)) || (budget && !json_is_integer(budget)))
            return snprintf(err, cap, "'thinking' must be {\"type\": \"enabled\" | \"adaptive\" | \"disabled\", \"budget_tokens\", \"display\"}"), "thinking";
        json_object_set_new(chat, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", strcmp(type, "disabled") != 0));
        if (budget && !strcmp(type, "enabled")) json_object_set(chat, "thinking_budget", (json_t *)budget);
        *omitted = display && !strcmp(display, "omitted");
    }
    if (tc && !json_is_null(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        const json_t *name = json_object_get(tc, "name"), *one = json_object_get(tc, "disable_parallel_tool_use");
        if (!serve_listed((const char *const[]){"auto", "any", "tool", "none", NULL}, type) || (!strcmp(type, "tool") && !json_is_string(name)))
            return snprintf(err, cap, "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}"), "tool_choice";
        json_object_set_new(chat, "tool_choice", !strcmp(type, "tool") ? json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name)
                                                 : json_string(!strcmp(type, "any") ? "required" : type));
        if (json_is_true(one)) json_object_set_new(chat, "parallel_tool_calls", json_false());
    }
    /* output_config: effort (Qwen3.5 reasons or not, with no degrees between: every effort keeps
     * the thinking as asked) and format, a JSON Schema the answer follows */
    json_object_foreach((json_t *)(json_is_object(oc) ? oc : NULL), k, v) {
        if (!strcmp(k, "effort") && serve_listed((const char *const[]){"low", "medium", "high", "max", NULL}, json_string_value(v))) continue;
        if (!strcmp(k, "format") && !strcmp(json_string_value(json_object_get(v, "type")) ? json_string_value(json_object_get(v, "type")) : "", "json_schema") &&
            json_object_get(v, "schema")) {
            json_object_set_new(chat, "response_format", json_pack("{s:s, s:{s:O}}", "type", "json_schema", "json_schema", "schema",
                                                                   json_object_get(v, "schema")));
            continue;
        }
        return snprintf(err, cap, "'output_config.%.40s' is not implemented as sent", k), "output_config";
    }
    if (oc && !json_is_null(oc) && !json_is_object(oc)) return snprintf(err, cap, "'output_config' must be an object"), "output_config";
    /* context_management: clearing old thinking would change the prompt; keeping all of it does not */
    size_t i;
    json_array_foreach(json_object_get(cm, "edits"), i, v)
        if (strcmp(json_string_value(json_object_get(v, "type")) ? json_string_value(json_object_get(v, "type")) : "", "clear_thinking_20251015") ||
            strcmp(json_string_value(json_object_get(v, "keep")) ? json_string_value(json_object_get(v, "keep")) : "", "all"))
            return snprintf(err, cap, "'context_management.edits[%zu]': only clear_thinking keeping \"all\" is implemented", i), "context_management";
    return NULL;
}

request *parse_messages(server *sv, const char *body, size_t len, refusal *why) {
    json_t *j = serve_load_object(body, len, fields, why), *chat = NULL;
    if (!j) return NULL;
    json_t *msgs = json_array();
    char *err = why->message;
    const size_t cap = sizeof why->message;
    const char *param = NULL;
    int omitted = 0;
    if ((param = messages(j, msgs, err, cap))) goto fail;
    chat = json_pack("{s:O}", "messages", msgs);
    const json_t *tools = json_object_get(j, "tools");
    if (tools && !json_is_null(tools)) {
        json_t *ct = json_is_array(tools) ? chat_tools(tools, err, cap) : NULL;
        if (!json_is_array(tools)) snprintf(err, cap, "'tools' must be an array");
        if (!ct) { param = "tools"; goto fail; }
        json_object_set_new(chat, "tools", ct);
    }
    if ((param = options(j, chat, &omitted, err, cap))) goto fail;
    /* a final assistant message is a prefill: the reply continues it */
    const json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    if (!strcmp(json_string_value(json_object_get(last, "role")), "assistant")) json_object_set_new(chat, "continue_final_message", json_true());
    static const char *const same[][2] = {{"model", "model"}, {"max_tokens", "max_tokens"}, {"stop_sequences", "stop"}, {"stream", "stream"},
                                          {"temperature", "temperature"}, {"top_p", "top_p"}, {"top_k", "top_k"}, {"service_tier", "service_tier"}};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
        if (json_object_get(j, same[i][0])) json_object_set(chat, same[i][1], json_object_get(j, same[i][0]));
    json_decref(j), json_decref(msgs);
    request *rq = parse_body(sv, chat, 1, why); /* the chat request it amounts to */
    if (!rq) { /* name the Messages API's fields */
        static const char *const names[][2] = {{"stop", "stop_sequences"}, {"chat_template_kwargs", "thinking"}, {"thinking_budget", "thinking"},
                                               {"response_format", "output_config"}, {"parallel_tool_calls", "tool_choice"}};
        for (size_t i = 0; why->param && i < sizeof names / sizeof *names; i++)
            if (!strcmp(why->param, names[i][0])) why->param = names[i][1];
        return NULL;
    }
    rq->shape = &messages_shape;
    rq->encrypted_reasoning = omitted; /* here: the thinking block carries its text in the signature only */
    memcpy(rq->id, "msg_", 4); /* "msg_..." for "chatcmpl-..." */
    memmove(rq->id + 4, rq->id + 9, strlen(rq->id + 9) + 1);
    return rq;
fail:
    json_decref(j), json_decref(chat), json_decref(msgs);
    why->param = param;
    return NULL;
}

/* ---- the reply: content blocks, events, the message object ---- */

/* the reasoning as the client sees it (trailing newlines dropped); empty: no thinking block */
static void thought(const job *jb, const char **r, size_t *nr) {
    const char *c;
    size_t nc;
    visible(jb, r, nr, &c, &nc);
    while (*nr && (*r)[*nr - 1] == '\n') (*nr)--;
    if (!jb->rq->thinking) *nr = 0;
}

static json_t *tool_use(const json_t *call) {
    const json_t *fn = json_object_get(call, "function");
    json_t *input = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
    return json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id", json_object_get(call, "id"), "name", json_object_get(fn, "name"),
                     "input", json_is_object(input) ? input : (json_decref(input), json_object()));
}

static const char *stop_reason(const job *jb, const qhx_generate_result *res) {
    return res->finish != QHX_FINISH_STOP ? "max_tokens"
           : json_array_size(jb->calls)   ? "tool_use"
           : res->stop_string >= 0        ? "stop_sequence"
                                          : "end_turn";
}

static json_t *stop_sequence(const job *jb, const qhx_generate_result *res) {
    return res->stop_string >= 0 && res->stop_string < jb->rq->gen.n_stop ? json_string(jb->rq->stop[res->stop_string]) : json_null();
}

static json_t *usage(const job *jb, const qhx_generate_result *res) {
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", res->n_prompt - jb->cached, "output_tokens", res->n_generated,
                     "cache_read_input_tokens", jb->cached, "cache_creation_input_tokens", 0);
}

static json_t *whole(job *jb, const qhx_generate_result *res) {
    const char *r, *c, *r_all;
    size_t nr, nc, nr_all;
    thought(jb, &r, &nr);
    visible(jb, &r_all, &nr_all, &c, &nc);
    json_t *content = json_array();
    if (nr)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:s%}", "type", "thinking", "thinking", r, jb->rq->encrypted_reasoning ? 0 : nr,
                                                 "signature", r, nr));
    if (nc) json_array_append_new(content, json_pack("{s:s, s:s%}", "type", "text", "text", c, nc));
    for (size_t i = 0; i < json_array_size(jb->calls); i++) json_array_append_new(content, tool_use(json_array_get(jb->calls, i)));
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", jb->rq->id, "type", "message", "role", "assistant", "model",
                     jb->sv->model_id, "content", content, "stop_reason", stop_reason(jb, res), "stop_sequence", stop_sequence(jb, res),
                     "usage", usage(jb, res));
}

static int block_event(job *jb, const char *type, int index, const char *key, json_t *value) {
    return send_sse(jb, type, json_pack("{s:i, s:o}", "index", index, key, value));
}

static int open_stream(job *jb) {
    return send_sse(jb, "message_start", json_pack("{s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:i, s:i}}}", "message", "id", jb->rq->id,
                                                   "type", "message", "role", "assistant", "model", jb->sv->model_id, "content",
                                                   "stop_reason", "stop_sequence", "usage", "input_tokens", jb->rq->n_ids, "output_tokens", 0));
}

/* A chat delta as content block events: thinking opens a thinking block (at its first character
 * that is not a newline: newlines alone are no thinking, as the whole reply has none then; its
 * signature comes as it closes), the answer a text block, each call a tool_use block with its
 * input as one JSON delta; a block closes when the next kind begins. Takes the choice. */
static int delta(job *jb, json_t *choice, int final) {
    const json_t *d = json_object_get(choice, "delta");
    const json_t *r = json_object_get(d, "reasoning_content"), *c = json_object_get(d, "content"), *calls = json_object_get(d, "tool_calls");
    int bad = 0;
    json_t *said = r ? json_incref((json_t *)r) : NULL;
    if (r && !jb->open_reasoning && !jb->items) {
        const char *rs;
        size_t nr;
        thought(jb, &rs, &nr);
        json_decref(said), said = NULL;
        if (nr) {
            jb->open_reasoning = ++jb->items;
            bad |= block_event(jb, "content_block_start", jb->items - 1, "content_block",
                               json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", ""));
            const char *cs;
            size_t nc;
            visible(jb, &rs, &nr, &cs, &nc);
            said = json_stringn(rs, nr);
        }
    }
    if (said && jb->open_reasoning && !jb->rq->encrypted_reasoning)
        bad |= block_event(jb, "content_block_delta", jb->open_reasoning - 1, "delta", json_pack("{s:s, s:O}", "type", "thinking_delta", "thinking", said));
    json_decref(said);
    if ((c || calls || final) && jb->open_reasoning) {
        const char *rs;
        size_t nr;
        thought(jb, &rs, &nr);
        bad |= block_event(jb, "content_block_delta", jb->open_reasoning - 1, "delta", json_pack("{s:s, s:s%}", "type", "signature_delta", "signature", rs, nr));
        bad |= send_sse(jb, "content_block_stop", json_pack("{s:i}", "index", jb->open_reasoning - 1));
        jb->open_reasoning = 0;
    }
    if (c && !jb->open_message) {
        jb->open_message = ++jb->items;
        bad |= block_event(jb, "content_block_start", jb->items - 1, "content_block", json_pack("{s:s, s:s}", "type", "text", "text", ""));
    }
    if (c) bad |= block_event(jb, "content_block_delta", jb->open_message - 1, "delta", json_pack("{s:s, s:O}", "type", "text_delta", "text", c));
    if ((calls || final) && jb->open_message) {
        bad |= send_sse(jb, "content_block_stop", json_pack("{s:i}", "index", jb->open_message - 1));
        jb->open_message = 0;
    }
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *use = tool_use(json_array_get(calls, i)), *input = json_incref(json_object_get(use, "input"));
        char *args = json_dumps(input, JSON_COMPACT);
        json_object_set_new(use, "input", json_object());
        bad |= block_event(jb, "content_block_start", jb->items, "content_block", use);
        bad |= block_event(jb, "content_block_delta", jb->items, "delta", json_pack("{s:s, s:s}", "type", "input_json_delta", "partial_json", args ? args : "{}"));
        bad |= send_sse(jb, "content_block_stop", json_pack("{s:i}", "index", jb->items));
        jb->items++;
        free(args);
        json_decref(input);
    }
    json_decref(choice);
    return bad ? -1 : 0;
}

static int close_stream(job *jb, const qhx_generate_result *res) {
    return send_sse(jb, "message_delta", json_pack("{s:{s:s, s:o}, s:o}", "delta", "stop_reason", stop_reason(jb, res), "stop_sequence",
                                                   stop_sequence(jb, res), "usage", usage(jb, res))) ||
           send_sse(jb, "message_stop", json_object());
}

const reply_shape messages_shape = {open_stream, delta, close_stream, whole};
