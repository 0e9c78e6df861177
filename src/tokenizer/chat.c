/*
 * The Qwen3.5 chat format: a C rendering of the Qwen3.5-4B chat template (Jinja, shipped in
 * tests/data/qwen3.5-chat-template), step for step, so that prompts are byte-identical to what
 * Hugging Face's apply_chat_template produces without carrying a Jinja engine.
 */
#include "qhexrt.h"
#include "util/buf.h"
#include "util/error.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef qhx_buf sbuf;

static void put(sbuf *b, const char *s, size_t n) { (void)qhx_buf_append(b, s, n); }
static void puts_(sbuf *b, const char *s) { (void)qhx_buf_puts(b, s); }

typedef struct {
    const char *s;
    size_t n;
} span;

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static span trim(span x) {
    while (x.n && is_space((unsigned char)x.s[0])) x.s++, x.n--;
    while (x.n && is_space((unsigned char)x.s[x.n - 1])) x.n--;
    return x;
}

static int starts(span x, const char *p) { size_t k = strlen(p); return x.n >= k && !memcmp(x.s, p, k); }
static int ends(span x, const char *p) { size_t k = strlen(p); return x.n >= k && !memcmp(x.s + x.n - k, p, k); }

static const char *find(span x, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= x.n; i++)
        if (!memcmp(x.s + i, needle, k)) return x.s + i;
    return NULL;
}

static const char *rfind(span x, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = x.n >= k ? x.n - k + 1 : 0; i-- > 0;)
        if (!memcmp(x.s + i, needle, k)) return x.s + i;
    return NULL;
}

/* render_content(): a string, a list of parts, or nothing; into b. */
static qhx_status render_content(const json_t *content, sbuf *b, int is_system) {
    if (!content || json_is_null(content)) return QHX_OK;
    if (json_is_string(content)) { put(b, json_string_value(content), json_string_length(content)); return QHX_OK; }
    if (!json_is_array(content)) return qhx_fail(QHX_ERR_ARG, "chat: unexpected content type (need a string or a list of parts)");
    size_t i;
    json_t *item;
    json_array_foreach(content, i, item) {
        const char *type = json_string_value(json_object_get(item, "type"));
        int image = json_object_get(item, "image") || json_object_get(item, "image_url") || (type && !strcmp(type, "image"));
        int video = json_object_get(item, "video") || (type && !strcmp(type, "video"));
        if (image || video) {
            if (is_system) return qhx_fail(QHX_ERR_ARG, "chat: system message cannot contain %s", image ? "images" : "videos");
            puts_(b, image ? "<|vision_start|><|image_pad|><|vision_end|>" : "<|vision_start|><|video_pad|><|vision_end|>");
        } else if (json_is_string(json_object_get(item, "text"))) {
            json_t *t = json_object_get(item, "text");
            put(b, json_string_value(t), json_string_length(t));
        } else {
            return qhx_fail(QHX_ERR_ARG, "chat: unexpected item type in content (part %zu)", i);
        }
    }
    return QHX_OK;
}

/* render_content(...)|trim as a malloc'd string */
static qhx_status content_trimmed(const json_t *msg, int is_system, sbuf *out) {
    sbuf raw = {0};
    qhx_status rc = render_content(json_object_get(msg, "content"), &raw, is_system);
    if (!rc) {
        span t = trim((span){raw.s ? raw.s : "", raw.len});
        put(out, t.s, t.n);
        if (!out->s) put(out, "", 0);
    }
    free(raw.s);
    return rc;
}

static const char *role_of(const json_t *m) {
    const char *r = json_string_value(json_object_get(m, "role"));
    return r ? r : "";
}

/* Jinja's `value | string` for a tool-call argument, and `tojson` for mappings and lists. */
static void put_arg(sbuf *b, const json_t *v) {
    if (json_is_string(v)) { put(b, json_string_value(v), json_string_length(v)); return; }
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER); /* ", " and ": " separators, like Python */
    if (s) puts_(b, s);
    free(s);
}

static const char tools_preamble[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
    "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural "
    "language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question "
    "like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

static qhx_status render(const json_t *req, sbuf *b) {
    const json_t *msgs = json_object_get(req, "messages"), *tools = json_object_get(req, "tools");
    const json_t *agp = json_object_get(req, "add_generation_prompt"), *think = json_object_get(req, "enable_thinking");
    if (!json_is_array(msgs) || !json_array_size(msgs)) return qhx_fail(QHX_ERR_ARG, "chat: no messages provided");
    const size_t n = json_array_size(msgs);
    for (size_t i = 0; i < n; i++)
        if (!json_is_object(json_array_get(msgs, i))) return qhx_fail(QHX_ERR_ARG, "chat: message %zu is not an object", i);
    /* continue_final_message (HF's apply_chat_template): the final assistant message left open, to
     * be continued where its content ends; no generation prompt after it */
    const int cont = json_is_true(json_object_get(req, "continue_final_message"));
    if (cont && strcmp(role_of(json_array_get(msgs, n - 1)), "assistant"))
        return qhx_fail(QHX_ERR_ARG, "chat: continue_final_message needs a final assistant message");
    if (cont && json_is_true(agp)) return qhx_fail(QHX_ERR_ARG, "chat: continue_final_message and add_generation_prompt are exclusive");
    const json_t *first = json_array_get(msgs, 0);
    const int first_system = !strcmp(role_of(first), "system");
    sbuf tmp = {0};
    qhx_status rc = QHX_OK;

    if (json_is_array(tools) && json_array_size(tools)) {
        puts_(b, "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool) { puts_(b, "\n"); put_arg(b, tool); }
        puts_(b, tools_preamble);
        if (first_system) {
            if ((rc = content_trimmed(first, 1, &tmp))) goto out;
            if (tmp.len) { puts_(b, "\n\n"); put(b, tmp.s, tmp.len); }
        }
        puts_(b, "<|im_end|>\n");
    } else if (first_system) {
        if ((rc = content_trimmed(first, 1, &tmp))) goto out;
        puts_(b, "<|im_start|>system\n");
        put(b, tmp.s, tmp.len);
        puts_(b, "<|im_end|>\n");
    }

    /* the last user turn that is a real query, not a wrapped tool response */
    long last_query = -1;
    for (size_t k = n; k-- > 0 && last_query < 0;) {
        const json_t *m = json_array_get(msgs, k);
        if (strcmp(role_of(m), "user")) continue;
        tmp.len = 0;
        if ((rc = content_trimmed(m, 0, &tmp))) goto out;
        span c = {tmp.s, tmp.len};
        if (!(starts(c, "<tool_response>") && ends(c, "</tool_response>"))) last_query = (long)k;
    }
    if (last_query < 0) { rc = qhx_fail(QHX_ERR_ARG, "chat: no user query found in messages"); goto out; }

    for (size_t k = 0; k < n; k++) {
        const json_t *m = json_array_get(msgs, k);
        const char *role = role_of(m);
        tmp.len = 0;
        if ((rc = content_trimmed(m, 0, &tmp))) goto out;
        span content = {tmp.s ? tmp.s : "", tmp.len};
        if (!strcmp(role, "system")) {
            if (k) { rc = qhx_fail(QHX_ERR_ARG, "chat: system message must be at the beginning"); goto out; }
        } else if (!strcmp(role, "user")) {
            puts_(b, "<|im_start|>user\n");
            put(b, content.s, content.n);
            puts_(b, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            span reasoning = {"", 0};
            const json_t *rcj = json_object_get(m, "reasoning_content");
            if (json_is_string(rcj)) {
                reasoning = (span){json_string_value(rcj), json_string_length(rcj)};
            } else if (find(content, "</think>")) {
                /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                span before = {content.s, (size_t)(find(content, "</think>") - content.s)};
                while (before.n && before.s[before.n - 1] == '\n') before.n--;
                const char *open = rfind(before, "<think>");
                if (open) { before.n -= (size_t)(open + 7 - before.s); before.s = open + 7; }
                while (before.n && before.s[0] == '\n') before.s++, before.n--;
                reasoning = before;
                /* content.split('</think>')[-1].lstrip('\n') */
                const char *close = rfind(content, "</think>");
                content.n -= (size_t)(close + 8 - content.s);
                content.s = close + 8;
                while (content.n && content.s[0] == '\n') content.s++, content.n--;
            }
            reasoning = trim(reasoning);
            puts_(b, "<|im_start|>assistant\n");
            if ((long)k > last_query) {
                puts_(b, "<think>\n");
                put(b, reasoning.s, reasoning.n);
                puts_(b, "\n</think>\n\n");
            }
            put(b, content.s, content.n);
            const json_t *calls = json_object_get(m, "tool_calls");
            size_t i;
            json_t *call;
            json_array_foreach(calls, i, call) {
                const json_t *fn = json_object_get(call, "function");
                if (fn) call = (json_t *)fn;
                const char *name = json_string_value(json_object_get(call, "name"));
                if (!name) { rc = qhx_fail(QHX_ERR_ARG, "chat: tool call %zu has no name", i); goto out; }
                puts_(b, i ? "\n<tool_call>\n<function=" : trim(content).n ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
                puts_(b, name);
                puts_(b, ">\n");
                json_t *args = json_object_get(call, "arguments"), *parsed = NULL;
                if (json_is_string(args)) args = parsed = json_loads(json_string_value(args), 0, NULL); /* OpenAI sends a JSON string */
                const char *key;
                json_t *val;
                json_object_foreach(args, key, val) {
                    puts_(b, "<parameter=");
                    puts_(b, key);
                    puts_(b, ">\n");
                    put_arg(b, val);
                    puts_(b, "\n</parameter>\n");
                }
                json_decref(parsed);
                puts_(b, "</function>\n</tool_call>");
            }
            if (!cont || k + 1 < n) puts_(b, "<|im_end|>\n");
        } else if (!strcmp(role, "tool")) {
            if (k > 0 && strcmp(role_of(json_array_get(msgs, k - 1)), "tool")) puts_(b, "<|im_start|>user");
            puts_(b, "\n<tool_response>\n");
            put(b, content.s, content.n);
            puts_(b, "\n</tool_response>");
            if (k + 1 == n || strcmp(role_of(json_array_get(msgs, k + 1)), "tool")) puts_(b, "<|im_end|>\n");
        } else {
            rc = qhx_fail(QHX_ERR_ARG, "chat: unexpected message role '%.40s'", role);
            goto out;
        }
    }
    /* add_generation_prompt defaults to true: a chat prompt is rendered to be answered */
    if (!cont && (!agp || json_is_true(agp))) {
        puts_(b, "<|im_start|>assistant\n");
        puts_(b, json_is_false(think) ? "<think>\n\n</think>\n\n" : "<think>\n");
    }
out:
    free(tmp.s);
    if (!rc && b->oom) rc = qhx_fail(QHX_ERR_NOMEM, "chat: out of memory");
    return rc;
}

qhx_status qhx_chat_render(const char *request, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    json_error_t err;
    json_t *req = json_loadb(request, len, JSON_ALLOW_NUL, &err);
    if (!json_is_object(req)) {
        json_decref(req);
        return qhx_fail(QHX_ERR_ARG, "chat: request is not a JSON object (%s at line %d column %d)", err.text, err.line, err.column);
    }
    sbuf b = {0};
    qhx_status rc = render(req, &b);
    json_decref(req);
    if (rc) { free(b.s); return rc; }
    if (!b.s) put(&b, "", 0);
    if (b.oom) { free(b.s); return qhx_fail(QHX_ERR_NOMEM, "chat: out of memory"); }
    *out = b.s;
    if (out_len) *out_len = b.len;
    return QHX_OK;
}
