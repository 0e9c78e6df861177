/* qhx serve's server state, its request parser (tools/serve_request.c, which fuzz/fuzz_request.c
 * links as the server runs it), its scheduling (tools/serve_sched.c), its side routes
 * (tools/serve_routes.c) and the server itself (tools/serve.c). */
#ifndef QHX_SERVE_H
#define QHX_SERVE_H
#include "qhexrt.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>

#define MAX_CONNECTIONS 128 /* libmicrohttpd's limit: a thread each */

typedef struct resp_store resp_store;

typedef struct {
    struct MHD_Connection *c;   /* NULL: a free entry */
    int fd;
    double deadline;            /* monotonic seconds; 0: none (a reply is being made) */
    const char *what;           /* what must be in by then: "headers" or "body" */
} watched;

typedef struct {
    qhx_model *m;
    qhx_tokenizer *tok;
    qhx_model_info mi;
    char model_id[256];
    int max_tokens;             /* the largest max_tokens a request may ask for */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    qhx_session **slot;
    int *slot_busy, n_slots, n_waiting, n_running;
    unsigned long turn_next, turn_now;  /* a ticket lock: whose turn on the model it is */
    volatile sig_atomic_t stopping;
    unsigned long n_requests;
    qhx_prefix_cache *cache;    /* snapshots at the split points of earlier prompts and replies */
    uint64_t cache_budget;
    int draft, draft_max;       /* speculative decoding for every request (--draft): the same answers */
    struct step_req **posted;   /* batched decode (tools/serve.c): the steps waiting for the next pass */
    int n_posted, n_decoding, leading;
    double decode_s;            /* seconds of batched decode passes so far: what a long prefill yields to */
    float *batch_logits;        /* [n_slots][vocab] */
    const char *api_key;        /* --api-key: every route but /health wants "Authorization: Bearer KEY" */
    const char *cors;           /* --cors: the origin browsers may call from (or "*") */
    resp_store *responses;      /* the Responses API's stored responses (tools/serve_store.c) */
    struct {                    /* deadlines for what clients send (tools/serve_deadline.c), under their own lock */
        double timeout;         /* --timeout: seconds for a request's headers, as many for its body */
        pthread_mutex_t lock;
        pthread_cond_t cv;
        pthread_t thread;
        int stop;
        unsigned long closed;   /* connections shut for a missed deadline */
        watched w[MAX_CONNECTIONS];
    } dl;
    struct {                    /* GET /metrics, under lock */
        unsigned long by_status[600];
        unsigned long long prompt_tokens, cached_tokens, generated_tokens, decode_tokens;
        double prefill_s, decode_s;
    } stats;
} server;

typedef struct reply_shape reply_shape;

typedef struct {
    int chat, stream, include_usage, thinking;
    const reply_shape *shape;   /* a chat request answered in another API's shape (tools/serve_job.h), or NULL */
    json_t *tools;              /* chat with tools and tool_choice "auto": calls in the reply become tool_calls */
    int logprobs;               /* report each token's log-probability, and top_logprobs alternatives */
    int think_budget;           /* thinking_budget: reasoning tokens before the block is closed (-1: none) */
    int32_t *close_ids;         /* "\n</think>\n\n", forced once the budget is spent */
    int n_close;
    int32_t *bias_ids;          /* logit_bias */
    float *bias;
    int one_call;               /* parallel_tool_calls false: the reply ends with its first call */
    int32_t *ids;
    int n_ids;
    json_t *history;            /* chat: the render request without its generation prompt, for the reply's snapshot */
    qhx_grammar *grammar;       /* response_format json_object/json_schema, or a forced tool call */
    json_t *namespaced;         /* responses: {"NS.name": "NS"} for each tool of a namespace */
    int encrypted_reasoning;    /* responses: include "reasoning.encrypted_content"; messages: thinking display "omitted" */
    json_t *resp_items;         /* responses: the conversation as input items (the previous response's, then this
                                 * input), to store with the reply's output; NULL with store: false */
    qhx_generate_opts gen;
    char *stop[QHX_MAX_STOP];
    char id[48];
    long created;
} request;

/* Why a request was refused, as OpenAI's error object says it. */
typedef struct {
    unsigned status;
    const char *param, *code;   /* static strings, or param_name */
    char param_name[128];       /* a field named by the request itself */
    char message[512];
} refusal;

/* Turns a body into a request with its prompt ids (its sampling options checked, a chat rendered
 * and tokenized, the context checked): NULL, and why in *why, when it is refused. */
request *parse_request(server *sv, const char *body, size_t len, int chat, refusal *why);
/* The same from a parsed body, which it takes */
request *parse_body(server *sv, json_t *body, int chat, refusal *why);
/* For the other APIs' parsers: whether k is in the NULL-ended list; a body as a JSON object whose
 * fields are all in `fields` (else NULL, and why: bad JSON, or the field, named) */
int serve_listed(const char *const *list, const char *k);
json_t *serve_load_object(const char *body, size_t len, const char *const *fields, refusal *why);
/* a + sep + b as one string (a taken; a NULL or empty a is b alone) */
json_t *serve_join(json_t *a, const char *sep, const json_t *b);
/* A string, or parts whose type is one of `types`, as one string (their texts joined by sep);
 * anything else refused into err, named by where, saying what is supported */
json_t *serve_parts_text(const json_t *c, const char *const *types, const char *sep, const char *what, const char *where, char *err,
                         size_t cap);
/* A Responses API body as the chat request it amounts to (tools/serve_responses.c); refusals name
 * the Responses API's fields. */
request *parse_responses(server *sv, const char *body, size_t len, refusal *why);
/* An Anthropic Messages API body, the same way (tools/serve_messages.c) */
request *parse_messages(server *sv, const char *body, size_t len, refusal *why);
void request_free(request *rq);

/* Stored responses (tools/serve_store.c): the Responses API's, each its conversation as input
 * items and its response object, the least recently used forgotten past `budget` bytes.
 * rstore_put takes both; rstore_get gives a copy of an entry's items (items nonzero) or response,
 * or NULL; rstore_delete says whether there was one. */
resp_store *rstore_new(size_t budget);
void rstore_free(resp_store *st);
void rstore_put(resp_store *st, const char *id, json_t *items, json_t *response);
json_t *rstore_get(resp_store *st, const char *id, int items);
int rstore_delete(resp_store *st, const char *id);
#define RSTORE_BYTES ((size_t)64 << 20)

/* Scheduling (tools/serve_sched.c). queue_enter: a place in the queue (-1: full, 503); slot_take:
 * waits there for a free slot (-1: stopping, or the client behind fd, -1 for none, has gone);
 * turn_begin/turn_end: the model, one evaluation at a time in arrival order. sched_step: a
 * slot's decode step (called holding the turn; returns holding it) posted to the next batched
 * pass, which the last decoding slot to post runs for all (*registered: this slot is counted
 * among them; sched_step_done takes it out). sched_yield_time: waits, not holding the turn,
 * while the decoding slots get `piece` seconds of passes (or that much time passes); nonzero
 * when the server is stopping. */
int queue_enter(server *sv);
int client_gone(int fd);
int slot_take(server *sv, int fd);
void slot_give(server *sv, int k);
void turn_begin(server *sv);
void turn_end(server *sv);
qhx_status sched_step(server *sv, qhx_session *s, int32_t tok, float *logits, int *registered);
void sched_step_done(server *sv, int *registered);
int sched_yield_time(server *sv, double piece);
#define MAX_QUEUE 64 /* requests waiting for a slot beyond this get 503 */

/* Starts libmicrohttpd's threads serving sv at addr (tools/serve.c); *bound: the port it got.
 * NULL when it cannot listen (errno says why). */
struct sockaddr;
/* Responses (tools/serve.c): queued with the status counted for /metrics and the CORS header;
 * JSON; OpenAI's error shape. */
enum MHD_Result serve_queue(server *sv, struct MHD_Connection *c, unsigned status, struct MHD_Response *r);
enum MHD_Result send_json(server *sv, struct MHD_Connection *c, unsigned status, json_t *j);
enum MHD_Result send_error(server *sv, struct MHD_Connection *c, unsigned status, const char *type, const char *param,
                           const char *code, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* GET /metrics, POST /tokenize, POST /detokenize (tools/serve_routes.c). */
enum MHD_Result serve_side_route(server *sv, struct MHD_Connection *c, const char *url, const char *method, const char *body,
                                 size_t len, int too_big);
/* The server's key, as "Authorization: Bearer KEY" (OpenAI's clients) or "x-api-key: KEY"
 * (Anthropic's), compared in time independent of where they differ. */
int serve_key_ok(const char *key, const char *authorization, const char *x_api_key);
/* Deadlines (tools/serve_deadline.c): deadline_notify is libmicrohttpd's connection callback;
 * deadline_set gives the connection `what` ("body", "headers") to arrive in --timeout seconds from
 * now, or (NULL) no deadline while its reply is made. */
int deadline_start(server *sv);
void deadline_stop(server *sv);
void deadline_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code);
void deadline_set(server *sv, struct MHD_Connection *c, const char *what);
struct MHD_Daemon *serve_listen(server *sv, const struct sockaddr *addr, int v6, unsigned port, unsigned *bound);

#endif
