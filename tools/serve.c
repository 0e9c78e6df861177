/*
 * qhx serve: an OpenAI-compatible HTTP server, Anthropic's Messages API beside it (libmicrohttpd
 * does the HTTP).
 *
 * One thread per connection parses and validates a request completely (JSON, types, chat
 * rendering, tokens, context) before anything is generated, so every client error is a 4xx in
 * OpenAI's error shape (which is Anthropic's too). The Responses and Messages APIs are chat
 * requests answered in their own shapes (tools/serve_job.h). Generation runs on one of
 * --parallel sessions ("slots"); requests beyond that wait in a bounded queue. Slots take turns
 * on the model (prompts, speculative verify passes) in arrival order, and their decode steps run
 * together: each slot in its decode loop posts its next token, and once every such slot has, one
 * of them steps them all with
 * qhx_sessions_step, one pass over the weights for every stream. Each has its own session and
 * sampler and a batched row is what a lone step gives bit for bit, which is why a stream's
 * tokens do not depend on what runs beside it. A streaming response is a pipe that a
 * worker thread writes server-sent events into: when the client goes away, libmicrohttpd closes
 * the pipe, the next write fails, and the worker cancels and frees its slot.
 */
#include "cli.h"
#include "serve_job.h"

#include <jansson.h>
#include <microhttpd.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_BODY (1u << 20)   /* request bodies over 1 MiB get 413 */


/* ---- responses ---- */

/* Queues r with its status counted for /metrics and the CORS header when --cors is on. */
enum MHD_Result serve_queue(server *sv, struct MHD_Connection *c, unsigned status, struct MHD_Response *r) {
    if (sv->cors) MHD_add_response_header(r, "Access-Control-Allow-Origin", sv->cors);
    pthread_mutex_lock(&sv->lock);
    if (status < sizeof sv->stats.by_status / sizeof *sv->stats.by_status) sv->stats.by_status[status]++;
    pthread_mutex_unlock(&sv->lock);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result send_json(server *sv, struct MHD_Connection *c, unsigned status, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) MHD_add_response_header(r, "Retry-After", "1");
    return serve_queue(sv, c, status, r);
}

/* OpenAI's error shape, with "type": "error" beside it: so it is Anthropic's too. */
enum MHD_Result send_error(server *sv, struct MHD_Connection *c, unsigned status, const char *type, const char *param,
                           const char *code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:s, s:{s:s, s:s, s:s?, s:s?}}", "type", "error", "error", "message", msg, "type", type, "param", param,
                          "code", code);
    return send_json(sv, c, status, e);
}

/* A generation that failed on what the request asked for (past the context, a grammar too
 * ambiguous to constrain) is the client's to fix: 400; anything else is the server's. */
static unsigned failure_status(qhx_status st) { return st == QHX_ERR_ARG || st == QHX_ERR_RANGE ? 400 : 500; }
static const char *error_type(unsigned status) { return status < 500 ? "invalid_request_error" : "server_error"; }

/* ---- generation ---- */

static int grow(job *jb, size_t more) {
    /* the think splitter may put all of it in either */
    return qhx_reserve(&jb->reasoning, &jb->cap_reasoning, jb->n_reasoning + more + 16, 1) ||
                   qhx_reserve(&jb->content, &jb->cap_content, jb->n_content + more + 16, 1)
               ? -1
               : 0;
}

int write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

int send_sse(job *jb, const char *type, json_t *data) {
    json_object_set_new(data, "type", json_string(type));
    char *s = json_dumps(data, JSON_COMPACT);
    json_decref(data);
    if (!s) return -1;
    const int rc = write_all(jb->fd, "event: ", 7) || write_all(jb->fd, type, strlen(type)) || write_all(jb->fd, "\ndata: ", 7) ||
                   write_all(jb->fd, s, strlen(s)) || write_all(jb->fd, "\n\n", 2);
    free(s);
    return rc ? -1 : 0;
}

void visible(const job *jb, const char **r, size_t *nr, const char **c, size_t *nc) {
    const int tools = jb->rq->tools != NULL;
    *r = tools ? jb->shown_reasoning.s : jb->reasoning, *nr = tools ? jb->shown_reasoning.len : jb->n_reasoning;
    *c = tools ? jb->shown_content.s : jb->content, *nc = tools ? jb->shown_content.len : jb->n_content;
}

static int send_event(job *jb, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return -1;
    int rc = write_all(jb->fd, "data: ", 6) || write_all(jb->fd, s, strlen(s)) || write_all(jb->fd, "\n\n", 2);
    free(s);
    return rc ? -1 : 0;
}

static json_t *chunk(job *jb, json_t *choice) {
    const request *rq = jb->rq;
    return json_pack("{s:s, s:s, s:i, s:s, s:[o]}", "id", rq->id, "object",
                     rq->chat ? "chat.completion.chunk" : "text_completion", "created", (int)rq->created, "model",
                     jb->sv->model_id, "choices", choice);
}

/* ---- log-probabilities ---- */

/* a token's text for logprobs: its bytes as UTF-8 (a token that splits a character shows U+FFFD) */
static json_t *token_text(server *sv, int32_t id) {
    char *t = NULL;
    size_t n = 0;
    json_t *s = qhx_tokenizer_decode(sv->tok, &id, 1, &t, &n) ? json_string("") : json_stringn(t, n);
    free(t);
    return s ? s : json_string("");
}

static json_t *token_bytes(const json_t *text) {
    json_t *b = json_array();
    const unsigned char *p = (const unsigned char *)json_string_value(text);
    for (size_t i = 0; i < json_string_length(text); i++) json_array_append_new(b, json_integer(p[i]));
    return b;
}

/* qhx_generate_opts.logprobs: the entry of the token about to be reported. Chat: OpenAI's
 * {token, logprob, bytes, top_logprobs: [...]}; completions: appended to tokens, token_logprobs,
 * top_logprobs ({text: logprob}) and text_offset. */
static void on_logprobs(int32_t tok, float logprob, const int32_t *ids, const float *lps, int n, void *user) {
    job *jb = user;
    server *sv = jb->sv;
    json_t *text = token_text(sv, tok);
    if (jb->rq->chat) {
        json_t *top = json_array();
        for (int i = 0; i < n; i++) {
            json_t *ti = token_text(sv, ids[i]);
            json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", ti, "logprob", (double)lps[i], "bytes", token_bytes(ti)));
        }
        json_array_append_new(jb->lp, json_pack("{s:O, s:f, s:o, s:o}", "token", text, "logprob", (double)logprob, "bytes",
                                                token_bytes(text), "top_logprobs", top));
    } else {
        json_t *top = json_object();
        for (int i = 0; i < n; i++) {
            json_t *ti = token_text(sv, ids[i]);
            json_object_set_new(top, json_string_value(ti), json_real(lps[i]));
            json_decref(ti);
        }
        json_array_append(json_object_get(jb->lp, "tokens"), text);
        json_array_append_new(json_object_get(jb->lp, "token_logprobs"), json_real(logprob));
        json_array_append_new(json_object_get(jb->lp, "top_logprobs"), top);
        json_array_append_new(json_object_get(jb->lp, "text_offset"), json_integer((json_int_t)jb->text_offset));
        jb->text_offset += json_string_length(text);
    }
    json_decref(text);
}

/* the logprobs of the tokens since the last chunk (all, when not streaming), or JSON null */
static json_t *logprobs_since(job *jb, size_t *sent) {
    if (!jb->lp) return json_null();
    if (jb->rq->chat) {
        json_t *c = json_array();
        for (size_t i = *sent; i < json_array_size(jb->lp); i++) json_array_append(c, json_array_get(jb->lp, i));
        *sent = json_array_size(jb->lp);
        return json_pack("{s:o}", "content", c);
    }
    static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    json_t *o = json_object();
    size_t n = 0;
    for (int k = 0; k < 4; k++) {
        json_t *all = json_object_get(jb->lp, keys[k]), *part = json_array();
        for (size_t i = *sent; i < json_array_size(all); i++) json_array_append(part, json_array_get(all, i));
        n = json_array_size(all);
        json_object_set_new(o, keys[k], part);
    }
    *sent = n;
    return o;
}

/* ---- tool calls (a chat request with tools) ---- */

static void shown_reasoning(void *user, const char *s, size_t n) { qhx_buf_append(&((job *)user)->shown_reasoning, s, n); }
static void shown_content(void *user, const char *s, size_t n) { qhx_buf_append(&((job *)user)->shown_content, s, n); }

static void on_call(void *user, const char *name, json_t *args) {
    job *jb = user;
    if (jb->rq->one_call && json_array_size(jb->calls)) return; /* parallel_tool_calls false: the first only */
    char id[96], *a = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    snprintf(id, sizeof id, "call_%s_%zu", jb->rq->id, json_array_size(jb->calls));
    json_array_append_new(jb->calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name", name,
                                               "arguments", a ? a : "{}"));
    free(a);
    if (jb->rq->one_call) jb->tool_stop = 1;
}

/* The channels read so far for calls (final: TC_END or TC_CUT as the reply is complete or cut
 * short; the reasoning is complete once the answer has begun); a call the model writes inside
 * its reasoning is a call too (vLLM #39056 leaves it in the reasoning). */
static void read_calls(job *jb, int final) {
    const json_t *tools = jb->rq->tools;
    tc_scan(&jb->tc_reasoning, jb->reasoning ? jb->reasoning : "", jb->n_reasoning, jb->n_content > 0 ? TC_END : final, tools,
            shown_reasoning, on_call, jb);
    tc_scan(&jb->tc_content, jb->content ? jb->content : "", jb->n_content, final, tools, shown_content, on_call, jb);
}

/* a chat stream's delta: what is new of the reasoning, the answer and the calls since the last
 * (the answer from c0, or with tools from what was sent). The reasoning's trailing newlines wait
 * for what follows them: the whole reply has none, so a stream that ends there says the same. */
static json_t *chat_delta(job *jb, size_t c0) {
    json_t *delta = json_object();
    const char *r, *c;
    size_t nr, nc;
    visible(jb, &r, &nr, &c, &nc);
    if (jb->rq->tools) c0 = jb->sent_content, jb->sent_content = nc;
    while (nr > jb->sent_reasoning && r[nr - 1] == '\n') nr--;
    if (nr > jb->sent_reasoning) {
        json_object_set_new(delta, "reasoning_content", json_stringn(r + jb->sent_reasoning, nr - jb->sent_reasoning));
        jb->sent_reasoning = nr;
    }
    if (nc > c0) json_object_set_new(delta, "content", json_stringn(c + c0, nc - c0));
    if (jb->calls && json_array_size(jb->calls) > jb->sent_calls) {
        json_t *calls = json_array();
        for (size_t i = jb->sent_calls; i < json_array_size(jb->calls); i++) {
            json_t *call = json_deep_copy(json_array_get(jb->calls, i));
            json_object_set_new(call, "index", json_integer((json_int_t)i));
            json_array_append_new(calls, call);
        }
        jb->sent_calls = json_array_size(jb->calls);
        json_object_set_new(delta, "tool_calls", calls);
    }
    if (json_object_size(delta)) return json_pack("{s:i, s:o, s:n}", "index", 0, "delta", delta, "finish_reason");
    json_decref(delta);
    return NULL;
}


/* qhx_generate_opts.force: once thinking_budget reasoning tokens are out, the tokens that close
 * the block, one a step */
static int32_t serve_force(void *user) {
    job *jb = user;
    const request *rq = jb->rq;
    if (jb->n_closed < rq->n_close && (jb->n_closed > 0 || (jb->ts.in_reasoning && jb->n_thought >= rq->think_budget)))
        return rq->close_ids[jb->n_closed++];
    return -1;
}

static int serve_on_token(int32_t tok, const char *text, size_t len, void *user) {
    job *jb = user;
    server *sv = jb->sv;
    if (!jb->t_first) jb->t_first = now_s();
    if (jb->ts.in_reasoning && !jb->n_closed) jb->n_thought++;
    turn_end(sv); /* let the other slots have their token */
    if (sv->stopping) jb->failed = 1;
    if (!jb->failed && !jb->rq->stream && client_gone(jb->fd)) jb->failed = 1; /* it will not read the answer */
    if (!jb->failed && len) {
        const size_t c0 = jb->n_content;
        if (grow(jb, len)) jb->failed = 1;
        else if (jb->rq->chat) think_split_feed(&jb->ts, text, len, jb->reasoning, &jb->n_reasoning, jb->content, &jb->n_content);
        else memcpy(jb->content + jb->n_content, text, len), jb->n_content += len;
        if (!jb->failed && jb->rq->tools) read_calls(jb, TC_RUNNING);
        if (!jb->failed && jb->rq->stream) {
            json_t *choice = jb->rq->chat ? chat_delta(jb, c0)
                                          : json_pack("{s:s%, s:i, s:n, s:n}", "text", jb->content + c0, jb->n_content - c0,
                                                      "index", 0, "logprobs", "finish_reason");
            if (choice && jb->lp) json_object_set_new(choice, "logprobs", logprobs_since(jb, &jb->lp_sent));
            if (choice && (jb->rq->shape ? jb->rq->shape->delta(jb, choice, 0) : send_event(jb, chunk(jb, choice)))) jb->failed = 1;
        }
    }
    turn_begin(sv);
    return jb->failed || jb->tool_stop;
}

static json_t *usage_json(const qhx_generate_result *res, int cached) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", res->n_prompt, "completion_tokens", res->n_generated,
                     "total_tokens", res->n_prompt + res->n_generated, "prompt_tokens_details", "cached_tokens", cached);
}

/* After a generation: the counters /metrics reports, and one line on stderr. */
static void log_request(job *jb, unsigned status, const qhx_generate_result *res) {
    server *sv = jb->sv;
    const int fresh = res->n_prompt - jb->cached, gen = res->n_generated;
    const double prefill = jb->t_first > jb->t_start ? jb->t_first - jb->t_start : 0;
    const double decode = jb->t_first && jb->t_end > jb->t_first ? jb->t_end - jb->t_first : 0;
    pthread_mutex_lock(&sv->lock);
    sv->stats.prompt_tokens += (unsigned long long)res->n_prompt;
    sv->stats.cached_tokens += (unsigned long long)jb->cached;
    sv->stats.generated_tokens += (unsigned long long)gen;
    sv->stats.decode_tokens += (unsigned long long)(gen > 1 ? gen - 1 : 0); /* the first came with the prefill */
    sv->stats.prefill_s += prefill;
    sv->stats.decode_s += decode;
    pthread_mutex_unlock(&sv->lock);
    fprintf(stderr, "qhx serve: %s %u%s prompt %d (cached %d) generated %d; ttft %.1f ms; prefill %.1f tok/s; decode %.1f tok/s\n",
            jb->rq->id, status, jb->failed ? " (client gone)" : "", res->n_prompt, jb->cached, gen,
            jb->t_first ? (jb->t_first - jb->t_recv) * 1e3 : 0.0, prefill > 0 ? fresh / prefill : 0.0,
            decode > 0 && gen > 1 ? (gen - 1) / decode : 0.0);
}

/* qhx_generate_opts.step for every request: into the next batched pass (tools/serve_sched.c). */
static qhx_status serve_step(qhx_session *s, int32_t tok, float *logits, void *user) {
    job *jb = user;
    return sched_step(jb->sv, s, tok, logits, &jb->decoding);
}

/* qhx_prefix_cache_prefill's yield between the pieces of a long prompt: the streams decoding meanwhile get as
 * much time on the model as the piece took (or the piece's time passes), new requests get their
 * turn, and a client gone (a stream's keep-alive comment fails to write) or a server stopping
 * cancels the prefill there. */
static int serve_yield(void *user) {
    job *jb = user;
    server *sv = jb->sv;
    const double piece = now_s() - jb->t_piece;
    turn_end(sv);
    static const char ping[] = ": prefill\n\n";
    if (jb->rq->stream ? write_all(jb->fd, ping, sizeof ping - 1) != 0 : client_gone(jb->fd)) jb->failed = 1;
    const int stop = jb->failed || sched_yield_time(sv, piece);
    turn_begin(sv);
    jb->t_piece = now_s();
    return stop;
}

/* Runs a queued request on a free slot; what qhx_generate returns. */
static qhx_status run_job(job *jb, qhx_generate_result *res) {
    server *sv = jb->sv;
    memset(res, 0, sizeof *res);
    if ((jb->slot = slot_take(sv, jb->fd)) < 0) return jb->failed = 1, QHX_ERR_CANCELLED; /* stopping, or the client left */
    if (jb->failed) { slot_give(sv, jb->slot); return QHX_ERR_CANCELLED; }
    turn_begin(sv);
    jb->t_start = now_s();
    qhx_session *s = sv->slot[jb->slot];
    jb->ts.in_reasoning = jb->rq->chat && jb->rq->thinking;
    jb->t_piece = jb->t_start;
    qhx_status st = qhx_prefix_cache_prefill(sv->cache, s, jb->rq->ids, jb->rq->n_ids, &jb->cached, serve_yield, jb);
    const int at = qhx_session_pos(s);
    jb->rq->gen.step = serve_step, jb->rq->gen.step_user = jb;
    jb->calls = jb->rq->tools ? json_array() : NULL;
    if (jb->rq->think_budget >= 0) jb->rq->gen.force = serve_force, jb->rq->gen.force_user = jb;
    if (jb->rq->logprobs) {
        jb->lp = jb->rq->chat ? json_array()
                              : json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
        jb->rq->gen.logprobs = on_logprobs, jb->rq->gen.logprobs_user = jb;
    }
    if (!st) st = qhx_generate(s, jb->rq->ids + at, jb->rq->n_ids - at, &jb->rq->gen, serve_on_token, jb, res);
    if (st == QHX_ERR_CANCELLED && jb->tool_stop && !jb->failed) st = QHX_OK, res->finish = QHX_FINISH_STOP;
    if (!st && jb->rq->tools) read_calls(jb, res->finish == QHX_FINISH_LENGTH ? TC_CUT : TC_END);
    sched_step_done(sv, &jb->decoding); /* the others' passes no longer wait for this slot */
    res->n_prompt = jb->rq->n_ids;
    jb->reply_cacheable = !st && jb->rq->history && !jb->failed && sv->cache_budget;
    jb->t_end = now_s();
    turn_end(sv);
    slot_give(sv, jb->slot);
    return st;
}

typedef struct {
    server *sv;
    request *rq;
    json_t *reply; /* the reply as a chat message */
} reply_job;

static void *reply_worker(void *arg) {
    reply_job *r = arg;
    server *sv = r->sv;
    const int k = slot_take(sv, -1);
    if (k >= 0) {
        turn_begin(sv);
        json_t *h = json_deep_copy(r->rq->history);
        json_array_append(json_object_get(h, "messages"), r->reply);
        char *conv = json_dumps(h, JSON_COMPACT);
        if (conv) qhx_prefix_cache_add_reply(sv->cache, sv->slot[k], conv, strlen(conv), r->rq->ids, r->rq->n_ids);
        free(conv);
        json_decref(h);
        turn_end(sv);
        slot_give(sv, k);
    }
    request_free(r->rq);
    json_decref(r->reply);
    free(r);
    return NULL;
}

/* After the answer is out: the reply's snapshot (qhx_prefix_cache_add_reply) on a slot of its own, in the
 * background, taking the request and the reply text from the job. */
static void schedule_reply(job *jb) {
    if (!jb->reply_cacheable) return;
    reply_job *r = malloc(sizeof *r);
    pthread_t th;
    pthread_attr_t at;
    if (!r || queue_enter(jb->sv)) { free(r); return; }
    /* a reply with calls as the client hands it back: the text around them, the calls, and its
     * reasoning (kept in history while the calls' results follow) */
    json_t *reply = json_pack("{s:s, s:s%}", "role", "assistant", "content", jb->content ? jb->content : "", jb->n_content);
    if (json_array_size(jb->calls)) {
        const char *rs, *cs;
        size_t nr, nc;
        visible(jb, &rs, &nr, &cs, &nc);
        json_object_set_new(reply, "content", json_stringn(cs ? cs : "", nc));
        json_object_set_new(reply, "reasoning_content", json_stringn(rs ? rs : "", nr));
        json_object_set(reply, "tool_calls", jb->calls);
    }
    *r = (reply_job){jb->sv, jb->rq, reply};
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, reply_worker, r)) {
        pthread_mutex_lock(&jb->sv->lock);
        jb->sv->n_waiting--;
        pthread_mutex_unlock(&jb->sv->lock);
        json_decref(reply);
        free(r);
    } else {
        jb->rq = NULL;
    }
    pthread_attr_destroy(&at);
}

static const char *finish_reason(const job *jb, const qhx_generate_result *res) {
    return res->finish != QHX_FINISH_STOP ? "length" : json_array_size(jb->calls) ? "tool_calls" : "stop";
}

static void job_free(job *jb) {
    request_free(jb->rq);
    free(jb->reasoning);
    free(jb->content);
    qhx_buf_free(&jb->shown_reasoning);
    qhx_buf_free(&jb->shown_content);
    json_decref(jb->calls);
    json_decref(jb->lp);
    free(jb);
}

static void *stream_worker(void *arg) {
    job *jb = arg;
    qhx_generate_result res;
    if (jb->rq->shape) jb->failed = jb->rq->shape->open(jb);
    else if (jb->rq->chat) /* OpenAI's chat streams open with the role */
        jb->failed = send_event(jb, chunk(jb, json_pack("{s:i, s:{s:s, s:s}, s:n}", "index", 0, "delta", "role",
                                                        "assistant", "content", "", "finish_reason")));
    qhx_status st = run_job(jb, &res);
    if (st == QHX_OK && jb->rq->shape) {
        json_t *rest = chat_delta(jb, jb->n_content); /* what the end released (tools) */
        if (!rest) rest = json_pack("{s:{}}", "delta");
        if (jb->lp) json_object_set_new(rest, "logprobs", logprobs_since(jb, &jb->lp_sent));
        int bad = jb->rq->shape->delta(jb, rest, 1);
        if (!bad) bad = jb->rq->shape->close(jb, &res);
        if (bad) jb->reply_cacheable = 0, jb->failed = 1;
        log_request(jb, 200, &res);
    } else if (st == QHX_OK) {
        json_t *rest = jb->rq->tools ? chat_delta(jb, 0) : NULL; /* what the end released */
        if (rest && jb->lp) json_object_set_new(rest, "logprobs", logprobs_since(jb, &jb->lp_sent));
        int bad = rest && send_event(jb, chunk(jb, rest));
        json_t *choice = jb->rq->chat
            ? json_pack("{s:i, s:{}, s:s}", "index", 0, "delta", "finish_reason", finish_reason(jb, &res))
            : json_pack("{s:i, s:s, s:n, s:s}", "index", 0, "text", "", "logprobs", "finish_reason", finish_reason(jb, &res));
        if (jb->lp) json_object_set_new(choice, "logprobs", logprobs_since(jb, &jb->lp_sent)); /* tokens no text came with */
        if (!bad) bad = send_event(jb, chunk(jb, choice));
        if (!bad && jb->rq->include_usage) {
            json_t *u = chunk(jb, json_null());
            json_object_set_new(u, "choices", json_array());
            json_object_set_new(u, "usage", usage_json(&res, jb->cached));
            bad = send_event(jb, u);
        }
        if (!bad) write_all(jb->fd, "data: [DONE]\n\n", 14);
        if (bad) jb->reply_cacheable = 0, jb->failed = 1;
        log_request(jb, 200, &res);
    } else if (st == QHX_ERR_CANCELLED) {
        log_request(jb, 499, &res); /* nginx's "client closed request" */
    } else {
        json_t *e = json_pack("{s:{s:s, s:s}}", "error", "message", qhx_last_error(), "type", error_type(failure_status(st)));
        if (jb->rq->shape) send_sse(jb, "error", e); /* {"type": "error", "error": {...}}: the shapes' error event */
        else send_event(jb, e);
    }
    close(jb->fd);
    schedule_reply(jb);
    job_free(jb);
    return NULL;
}

/* ---- the HTTP side ---- */

typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
} upload;

/* api: 0 text completions, 1 chat completions, 2 responses, 3 messages, 4 messages' count_tokens */
static enum MHD_Result completion(server *sv, struct MHD_Connection *c, upload *up, int api) {
    if (up->too_big)
        return send_error(sv, c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error", NULL, "request_too_large",
                          "request body over %u bytes", MAX_BODY);
    refusal why;
    const char *body = up->body ? up->body : "";
    request *rq = api == 2 ? parse_responses(sv, body, up->len, &why)
                  : api >= 3 ? parse_messages(sv, body, up->len, &why)
                             : parse_request(sv, body, up->len, api, &why);
    if (!rq)
        return send_error(sv, c, why.status, error_type(why.status), why.param, why.code,
                          "%s", why.message);
    if (api == 4) { /* the prompt it would be, counted */
        json_t *n = json_pack("{s:i}", "input_tokens", rq->n_ids);
        request_free(rq);
        return send_json(sv, c, MHD_HTTP_OK, n);
    }
    const int chat = api > 0;
    if (queue_enter(sv)) {
        request_free(rq);
        return send_error(sv, c, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", NULL, "server_busy",
                          "%d requests are already waiting; try again later", MAX_QUEUE);
    }
    job *jb = calloc(1, sizeof *jb);
    if (!jb) { request_free(rq); return send_error(sv, c, 500, "server_error", NULL, NULL, "out of memory"); }
    jb->sv = sv;
    jb->rq = rq;
    jb->t_recv = now_s();
    if (rq->stream) {
        int fds[2];
        pthread_t th;
        if (pipe2(fds, O_CLOEXEC)) { request_free(rq); free(jb); return send_error(sv, c, 500, "server_error", NULL, NULL, "pipe: %s", strerror(errno)); }
        jb->fd = fds[1];
        struct MHD_Response *r = MHD_create_response_from_pipe(fds[0]);
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (!r || pthread_create(&th, &at, stream_worker, jb)) {
            pthread_attr_destroy(&at);
            if (r) MHD_destroy_response(r); else close(fds[0]);
            close(fds[1]);
            request_free(rq);
            free(jb);
            return send_error(sv, c, 500, "server_error", NULL, NULL, "could not start the stream");
        }
        pthread_attr_destroy(&at);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        return serve_queue(sv, c, MHD_HTTP_OK, r);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    jb->fd = ci ? ci->connect_fd : -1;
    qhx_generate_result res;
    qhx_status st = run_job(jb, &res);
    enum MHD_Result ret;
    if (st == QHX_ERR_CANCELLED) ret = MHD_NO, log_request(jb, 499, &res); /* the client left, or the server is stopping */
    else if (st) ret = send_error(sv, c, failure_status(st), error_type(failure_status(st)), NULL, NULL, "%s", qhx_last_error());
    else {
        while (jb->n_reasoning && jb->reasoning && jb->reasoning[jb->n_reasoning - 1] == '\n') jb->n_reasoning--;
        while (jb->shown_reasoning.len && jb->shown_reasoning.s[jb->shown_reasoning.len - 1] == '\n') jb->shown_reasoning.len--;
        json_t *choice;
        if (chat) {
            const int calls = json_array_size(jb->calls) > 0;
            const char *ct, *rt;
            size_t nc, nr;
            visible(jb, &rt, &nr, &ct, &nc);
            /* OpenAI: a reply that is only calls has content null */
            json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content", calls && !nc ? json_null() : json_stringn(ct ? ct : "", nc));
            if (rq->thinking) json_object_set_new(msg, "reasoning_content", json_stringn(rt ? rt : "", nr));
            if (calls) json_object_set(msg, "tool_calls", jb->calls);
            choice = json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "message", msg, "logprobs", "finish_reason", finish_reason(jb, &res));
        } else {
            choice = json_pack("{s:s%, s:i, s:n, s:s}", "text", jb->content ? jb->content : "", jb->n_content, "index", 0,
                               "logprobs", "finish_reason", finish_reason(jb, &res));
        }
        size_t none = 0;
        if (choice && jb->lp) json_object_set_new(choice, "logprobs", logprobs_since(jb, &none));
        json_t *out = rq->shape ? (json_decref(choice), rq->shape->whole(jb, &res))
                                    : json_pack("{s:s, s:s, s:i, s:s, s:[o], s:o}", "id", rq->id, "object",
                                                chat ? "chat.completion" : "text_completion", "created", (int)rq->created, "model",
                                                sv->model_id, "choices", choice, "usage", usage_json(&res, jb->cached));
        ret = out ? send_json(sv, c, MHD_HTTP_OK, out) : send_error(sv, c, 500, "server_error", NULL, NULL, "the output is not valid UTF-8");
        log_request(jb, out ? 200 : 500, &res);
        if (out) schedule_reply(jb);
    }
    job_free(jb);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *data, size_t *data_size, void **con_cls) {
    server *sv = cls;
    upload *up = *con_cls;
    if (!up) { /* headers are in; the body (if any) follows */
        if (!(up = calloc(1, sizeof *up))) return MHD_NO;
        *con_cls = up;
        deadline_set(sv, c, "body");
        return MHD_YES;
    }
    if (*data_size) {
        if (up->len + *data_size > MAX_BODY) up->too_big = 1;
        if (!up->too_big) {
            if (qhx_reserve(&up->body, &up->cap, up->len + *data_size + 1, 1)) return MHD_NO;
            memcpy(up->body + up->len, data, *data_size);
            up->len += *data_size;
        }
        *data_size = 0;
        return MHD_YES;
    }
    deadline_set(sv, c, NULL); /* the request is in: its reply takes what it takes */
    const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS") && sv->cors) { /* a browser's preflight */
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
        MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
        return serve_queue(sv, c, MHD_HTTP_NO_CONTENT, r);
    }
    if (sv->api_key && strcmp(url, "/health")) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
        if (!serve_key_ok(sv->api_key, auth, xkey))
            return send_error(sv, c, MHD_HTTP_UNAUTHORIZED, "invalid_request_error", NULL, "invalid_api_key",
                              "%s: this server wants \"Authorization: Bearer KEY\" (or \"x-api-key: KEY\") with its --api-key",
                              auth || xkey ? "wrong API key" : "no API key");
    }
    if (!strcmp(url, "/metrics") || !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize"))
        return serve_side_route(sv, c, url, method, up->body ? up->body : "", up->len, up->too_big);
    if (!strcmp(url, "/health")) {
        if (!get) return send_error(sv, c, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error", NULL, NULL, "use GET %s", url);
        return send_json(sv, c, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"));
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get) return send_error(sv, c, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error", NULL, NULL, "use GET %s", url);
        /* OpenAI's list and Anthropic's in one body */
        return send_json(sv, c, MHD_HTTP_OK,
                         json_pack("{s:s, s:[{s:s, s:s, s:i, s:s, s:i, s:s, s:s, s:s}], s:b, s:s, s:s}", "object", "list", "data", "id",
                                   sv->model_id, "object", "model", "created", 0, "owned_by", "qhexrt", "context_length",
                                   sv->mi.max_context, "type", "model", "display_name", sv->model_id, "created_at", "1970-01-01T00:00:00Z",
                                   "has_more", 0, "first_id", sv->model_id, "last_id", sv->model_id));
    }
    if (!strncmp(url, "/v1/responses/", 14) && url[14]) { /* a stored response */
        const int del = !strcmp(method, "DELETE");
        if (!get && !del) return send_error(sv, c, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error", NULL, NULL, "use GET or DELETE %s", url);
        json_t *r = del ? NULL : rstore_get(sv->responses, url + 14, 0);
        if (del ? !rstore_delete(sv->responses, url + 14) : !r)
            return send_error(sv, c, MHD_HTTP_NOT_FOUND, "invalid_request_error", NULL, "not_found",
                              "Response with id '%.100s' not found (not stored here, deleted, or forgotten).", url + 14);
        return send_json(sv, c, MHD_HTTP_OK, del ? json_pack("{s:s, s:s, s:b}", "id", url + 14, "object", "response", "deleted", 1) : r);
    }
    static const char *const apis[] = {"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages",
                                       "/v1/messages/count_tokens"};
    for (int api = 0; api < (int)(sizeof apis / sizeof *apis); api++) {
        if (strcmp(url, apis[api])) continue;
        if (!post) return send_error(sv, c, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error", NULL, NULL, "use POST %s", url);
        return completion(sv, c, up, api);
    }
    return send_error(sv, c, MHD_HTTP_NOT_FOUND, "invalid_request_error", NULL, "not_found", "no route %s %s", method, url);
}

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    deadline_set(cls, c, "headers"); /* of the connection's next request */
    upload *up = *con_cls;
    if (up) free(up->body);
    free(up);
    *con_cls = NULL;
}

struct MHD_Daemon *serve_listen(server *sv, const struct sockaddr *addr, int v6, unsigned port, unsigned *bound) {
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | (v6 ? MHD_USE_IPv6 : 0), (uint16_t)port,
                         NULL, NULL, handle, sv, MHD_OPTION_SOCK_ADDR, addr, MHD_OPTION_NOTIFY_COMPLETED, request_done, sv,
                         MHD_OPTION_NOTIFY_CONNECTION, deadline_notify, sv, MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                         MHD_OPTION_CONNECTION_TIMEOUT, 300u, MHD_OPTION_END);
    const union MHD_DaemonInfo *di = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    *bound = di ? di->port : port;
    return d;
}
