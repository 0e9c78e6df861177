/* qhx serve's generation job, shared by the server (tools/serve.c) and the reply shapes other than
 * OpenAI's chat and text completions: the Responses API (tools/serve_responses.c) and
 * Anthropic's Messages API (tools/serve_messages.c). A shape turns what the job has written so
 * far into its API's events and bodies; generation, tool-call reading and scheduling are the
 * server's. */
#ifndef QHX_SERVE_JOB_H
#define QHX_SERVE_JOB_H

#include "cli.h"
#include "serve.h"
#include "tool_calls.h"
#include "util/buf.h"

#include <jansson.h>

typedef struct {
    server *sv;
    request *rq;
    int slot, fd;                 /* fd: the stream's pipe, or the client's socket to poll */
    int failed;                   /* the client is gone */
    think_split ts;
    int cached;                   /* prompt tokens resumed from the prefix cache */
    int decoding;                 /* counted in sv->n_decoding: its steps go into the batched passes */
    double t_recv, t_start, t_first, t_end; /* request parsed, slot taken, first token, done */
    double t_piece;               /* when the current prefill piece began */
    int reply_cacheable;          /* a finished chat reply: worth a snapshot after it */
    char *reasoning, *content;    /* everything so far (non-streaming) */
    size_t n_reasoning, n_content, cap_reasoning, cap_content;
    /* with tools: each channel read for calls (tools/tool_calls.h); what of it is text, the calls,
     * and what a stream has not sent yet of each */
    tc_stream tc_reasoning, tc_content;
    qhx_buf shown_reasoning, shown_content;
    json_t *calls;
    size_t sent_reasoning, sent_content, sent_calls;
    int tool_stop;                /* parallel_tool_calls false and a call is out: the reply ends */
    int n_thought, n_closed;      /* thinking_budget: reasoning tokens so far; close_ids forced so far */
    int items, open_reasoning, open_message; /* a shaped stream: items (blocks) so far, the open ones' indices + 1 */
    json_t *lp;                   /* logprobs: chat, one entry a token; completions, the legacy four lists */
    size_t lp_sent;               /* entries a stream has sent */
    size_t text_offset;           /* completions: where the next token's text starts */
} job;

/* A reply's API, when not OpenAI's chat or text completions. Each takes the job as it stands:
 * open, a stream's first events; delta, a chat delta (the choice, taken) as its events, final
 * once generation is over; close, a stream's last events after the final delta; whole, the
 * body of a reply that is not streamed. Nonzero from a writer: the client is gone. */
struct reply_shape {
    int (*open)(job *jb);
    int (*delta)(job *jb, json_t *choice, int final);
    int (*close)(job *jb, const qhx_generate_result *res);
    json_t *(*whole)(job *jb, const qhx_generate_result *res);
};
extern const reply_shape responses_shape, messages_shape;

int write_all(int fd, const char *s, size_t n);
/* one server-sent event, "event: TYPE" and its data (taken) */
int send_sse(job *jb, const char *type, json_t *data);
/* the reply's text as the client sees it: with tools, what the call reader left as text */
void visible(const job *jb, const char **r, size_t *nr, const char **c, size_t *nc);

#endif
