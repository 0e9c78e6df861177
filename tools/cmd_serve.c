/* qhx serve: the command (options, listening, stopping); tools/serve.c is the server. */
#include "cli.h"
#include "serve.h"

#include <microhttpd.h>

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char serve_help[] =
    "usage: qhx serve MODEL [--host 127.0.0.1] [--port 8080] [--parallel 4] [--ctx N] [-n 4096] [--cache-mb 2048]\n"
    "                 [--cache-dir DIR [--cache-dir-mb 8192]] [--timeout 30]\n"
    "An OpenAI-compatible HTTP server: GET /health, GET /v1/models, POST /v1/completions,\n"
    "POST /v1/chat/completions (stream, max_tokens, temperature, top_p, top_k, min_p, seed, stop,\n"
    "presence/frequency/repetition penalties, logit_bias, logprobs, ignore_eos, tools and tool_calls,\n"
    "response_format, chat_template_kwargs.enable_thinking, thinking_budget) and POST /v1/responses\n"
    "(the Responses API: previous_response_id, GET and DELETE /v1/responses/ID reach the responses\n"
    "it stores); POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API);\n"
    "llama-server's grammar (GBNF) and json_schema fields in both completions;\n"
    "POST /tokenize and /detokenize as llama-server has them; GET /metrics (Prometheus text). A\n"
    "request field it does not implement is a 400 naming it. Listens on loopback unless --host says\n"
    "otherwise; --port 0 picks a free port. The address it listens on is printed on stderr, then a\n"
    "line per request (id, status, prompt/cached/generated tokens, time to first token, tok/s).\n"
    "Stops on SIGINT or SIGTERM.\n"
    "  --api-key KEY  require \"Authorization: Bearer KEY\" (or Anthropic's \"x-api-key: KEY\") on\n"
    "                 every route but /health (or set QHX_API_KEY); without one, listening\n"
    "                 beyond loopback prints a warning\n"
    "  --cors ORIGIN  let browser pages from ORIGIN (or *) call the server; preflights answered\n"
    "  --timeout S    a client has S seconds to send a request's headers (from connecting, or\n"
    "                 from the end of its last reply) and S more for its body, else the\n"
    "                 connection is closed (default 30; -to); replies have no deadline\n"
    "  --parallel N   sessions generating at once, their decode steps batched: one pass over the\n"
    "                 weights for all of them (default 4; -np)\n"
    "  --ctx N        positions a slot may use, prompt and reply (default: the model's context;\n"
    "                 -c, --ctx-size); the memory a slot can reach is printed at start\n"
    "  -n, --n-predict N  the most tokens a reply may have (default 4096): a request without\n"
    "                 max_tokens runs to an end of turn, the context's end or this; a larger\n"
    "                 max_tokens is clamped (finish_reason \"length\")\n"
    "  --draft ngram|mtp  speculative decoding for every request, drafting by lookup or with the\n"
    "                 model's MTP head (same answers; --draft-max N drafts at most)\n"
    "  --cache-mb N   memory for the prefix cache (default 2048; 0: off): snapshots at every chat\n"
    "                 message, prompt end and reply, so a request sharing a prefix with an earlier\n"
    "                 one evaluates only the rest, with the same answer as without the cache\n"
    CACHE_DIR_HELP RUNTIME_HELP;


int cmd_serve(int argc, char **argv) {
    opts o = {.n = 4096, .port = 8080, .parallel = 4, .host = "127.0.0.1", .cache_mb = 2048, .cache_dir_mb = 8192, .timeout = 30};
    if (parse_common(argc, argv, &o, "-m -n --n-predict --host --port --api-key --cors --timeout -to --parallel -np --cache-mb --cache-dir --cache-dir-mb --ctx -c --ctx-size --draft --draft-max" RUNTIME_FLAGS)) return 2;
    if (o.help) return fputs(serve_help, stdout), 0;
    if (!o.model || o.prompt) return die("needs MODEL and nothing else (see qhx serve --help)"), 2;
    if (o.n < 1) return die("-n: at least 1"), 2;
    if (check_cache_dir(&o)) return 2;
    struct sockaddr_storage addr = {0};
    socklen_t alen;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
    int v6 = strchr(o.host, ':') != NULL;
    if (v6 ? inet_pton(AF_INET6, o.host, &a6->sin6_addr) != 1 : inet_pton(AF_INET, o.host, &a4->sin_addr) != 1)
        return die("--host: '%s' is not an IPv4 or IPv6 address", o.host), 2;
    if (v6) { a6->sin6_family = AF_INET6; a6->sin6_port = htons((uint16_t)o.port); alen = sizeof *a6; }
    else { a4->sin_family = AF_INET; a4->sin_port = htons((uint16_t)o.port); alen = sizeof *a4; }
    (void)alen;

    if (o.api_key && !*o.api_key) return die("--api-key: empty"), 2;
    if (!o.api_key) o.api_key = getenv("QHX_API_KEY"); /* kept out of the process list */
    if (o.api_key && !*o.api_key) o.api_key = NULL;
    if (o.cors && (!*o.cors || strpbrk(o.cors, "\r\n"))) return die("--cors: '%s' is not an origin", o.cors), 2;
    server sv = {.max_tokens = (int)o.n, .n_slots = (int)o.parallel, .draft = o.gen.draft, .draft_max = o.gen.draft_max,
                 .api_key = o.api_key, .cors = o.cors, .dl.timeout = (double)o.timeout};
    qhx_runtime *rt = NULL;
    int rc = 1;
    struct MHD_Daemon *d = NULL;
    int watching = 0;
    pthread_mutex_init(&sv.lock, NULL);
    pthread_cond_init(&sv.cv, NULL);
    sv.slot = calloc((size_t)sv.n_slots, sizeof *sv.slot);
    sv.slot_busy = calloc((size_t)sv.n_slots, sizeof *sv.slot_busy);
    if (!sv.slot || !sv.slot_busy) { die("out of memory"); goto done; }
    if (open_model(&o, &rt, &sv.m)) goto done;
    qhx_model_get_info(sv.m, &sv.mi);
    if (qhx_model_tokenizer(sv.m, &sv.tok)) { api_error(); goto done; }
    sv.cache_budget = (uint64_t)o.cache_mb << 20;
    if (qhx_prefix_cache_new(sv.m, sv.cache_budget, &sv.cache)) { api_error(); goto done; }
    if (open_cache_dir(sv.cache, &o)) goto done;
    if (!(sv.responses = rstore_new(RSTORE_BYTES))) { die("out of memory"); goto done; }
    for (int i = 0; i < sv.n_slots; i++)
        if (qhx_session_new(sv.m, &sv.slot[i])) { api_error(); goto done; }
    sv.posted = calloc((size_t)sv.n_slots, sizeof *sv.posted);
    sv.batch_logits = malloc(sizeof(float) * (size_t)sv.n_slots * (size_t)sv.mi.vocab_size);
    if (!sv.posted || !sv.batch_logits) { die("out of memory"); goto done; }
    if (o.ctx > sv.mi.max_context) {
        die("--ctx %lld: %s holds at most %d positions", o.ctx, o.model, sv.mi.max_context);
        goto done;
    }
    if (o.ctx) sv.mi.max_context = (int)o.ctx; /* every request's prompt and reply fit it: KV grows no further */
    if (sv.max_tokens > sv.mi.max_context) sv.max_tokens = sv.mi.max_context;
    const char *base = strrchr(o.model, '/');
    while (base && !base[1] && base > o.model) { /* "dir/" */
        const char *p = base - 1;
        while (p > o.model && *p != '/') p--;
        base = p;
    }
    snprintf(sv.model_id, sizeof sv.model_id, "%s", base && base[1] ? base + (*base == '/') : o.model);
    char *slash = strchr(sv.model_id, '/');
    if (slash) *slash = 0;

    signal(SIGPIPE, SIG_IGN); /* a client gone mid-stream is a failed write, not a dead server */
    sigset_t stop_signals; /* blocked here, so in every thread libmicrohttpd starts: main takes them */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    unsigned port;
    if (deadline_start(&sv)) { die("cannot start a thread"); goto done; }
    watching = 1;
    d = serve_listen(&sv, (struct sockaddr *)&addr, v6, (unsigned)o.port, &port);
    if (!d) { die("cannot listen on %s port %lld: %s", o.host, o.port, strerror(errno)); goto done; }
    const double slot_mb = (sv.mi.state_bytes + (double)sv.mi.kv_bytes_per_token * sv.mi.max_context) / 1048576.0;
    fprintf(stderr, "qhx serve: %s (%s, %d slots, context %d, at most %.1f MB a slot with the KV cache in %s, prefix cache %lld MB) listening on http://%s%s%s:%u\n",
            sv.model_id, qhx_runtime_kernels(rt), sv.n_slots, sv.mi.max_context, slot_mb,
            kv_name(sv.mi.kv_cache), o.cache_mb, v6 ? "[" : "", o.host,
            v6 ? "]" : "", port);
    if (o.cache_dir) {
        qhx_prefix_cache_stats ds;
        qhx_prefix_cache_get_stats(sv.cache, &ds);
        fprintf(stderr, "qhx serve: prefix cache in %s: %d state files of this model, %.1f MB of %lld", o.cache_dir, ds.dir_files,
                ds.dir_bytes / 1048576.0, o.cache_dir_mb);
        if (ds.dir_others)
            fprintf(stderr, "; %d other state files (another model, kernel set or --kv) left alone", ds.dir_others);
        fputc('\n', stderr);
    }
    const int loopback = v6 ? !strcmp(o.host, "::1") : !strncmp(o.host, "127.", 4);
    if (!loopback && !sv.api_key)
        fprintf(stderr, "qhx serve: warning: listening on %s without --api-key: anyone who reaches this port can use it\n", o.host);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "qhx serve: stopping (signal %d)\n", sig);
    pthread_mutex_lock(&sv.lock);
    sv.stopping = 1; /* running generations cancel at their next token; queued ones never start */
    pthread_cond_broadcast(&sv.cv);
    pthread_mutex_unlock(&sv.lock);
    MHD_stop_daemon(d);
    for (;;) { /* stream workers are detached: wait until every slot is back */
        pthread_mutex_lock(&sv.lock);
        int busy = sv.n_running + sv.n_waiting;
        pthread_mutex_unlock(&sv.lock);
        if (!busy) break;
        usleep(10000);
    }
    qhx_prefix_cache_stats cs;
    qhx_prefix_cache_get_stats(sv.cache, &cs);
    fprintf(stderr, "qhx serve: prefix cache: %lu hits, %lu misses, %lu evictions, %d snapshots in %.1f MB\n", cs.hits, cs.misses,
            cs.evictions, cs.entries, cs.bytes / 1048576.0);
    if (o.cache_dir)
        fprintf(stderr, "qhx serve: prefix cache in %s: %lu resumed from files, %lu written, %lu deleted; %d files in %.1f MB\n",
                o.cache_dir, cs.dir_hits, cs.dir_writes, cs.dir_deleted, cs.dir_files, cs.dir_bytes / 1048576.0);
    rc = 0;
done:
    if (watching) deadline_stop(&sv); /* after the daemon: its connections are gone */
    qhx_prefix_cache_free(sv.cache);
    rstore_free(sv.responses);
    for (int i = 0; sv.slot && i < sv.n_slots; i++) qhx_session_free(sv.slot[i]);
    free(sv.slot);
    free(sv.slot_busy);
    free(sv.posted);
    free(sv.batch_logits);
    close_model(rt, sv.m, NULL);
    return rc;
}
