/*
 * qhx chat: multi-turn chat in a terminal, in the model's chat format.
 *
 * Every turn renders the whole conversation with the chat template and resumes from the prefix
 * cache (qhexrt.h: qhx_prefix_cache) at the last message boundary the rendering shares with an earlier
 * one: a recurrent state cannot be rolled back, and the template does rewrite history (it drops
 * the reasoning of earlier turns), so the session is snapshotted at every message boundary on the
 * way. Resumed turns answer exactly as if the whole rendering were evaluated afresh. When the
 * conversation no longer fits the context, the oldest turns go first, and the user is told.
 * On a terminal, lines are edited with Debian's libedit (BSD-licensed): arrow keys move and recall
 * history and never reach the model as escape codes; a line ending in \ goes on on the next.
 */
#include "util/buf.h"
#include "cli.h"

#include <jansson.h>

#include <errno.h>
#include <histedit.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) { (void)sig; interrupted = 1; }

/* Reads one line from fd 0 (without the newline). Returns 1 for a line, 0 at end of input, -1 when
 * Ctrl-C interrupted the read (the partial line is dropped). Polls in short steps so a Ctrl-C that
 * lands just before a read is not lost. */
static int read_line(char *buf, size_t cap, size_t *len) {
    *len = 0;
    for (;;) {
        char c;
        struct pollfd p = {0, POLLIN, 0};
        if (interrupted) return -1;
        if (poll(&p, 1, 100) == 0) continue;
        if (interrupted) return -1;
        ssize_t k = read(0, &c, 1);
        if (k < 0 && errno == EINTR) {
            if (interrupted) return -1;
            continue;
        }
        if (k <= 0) return *len ? 1 : 0;
        if (c == '\n') return 1;
        if (*len + 1 < cap) buf[(*len)++] = c;
    }
}

/* ---- line editing on a terminal (libedit) -------------------------------------------------- */

static EditLine *el;
static History *hist;

/* \1 marks the prompt's escape codes as taking no columns */
static const char *el_prompt(EditLine *e) { (void)e; return "\1\033[1m\1>\1\033[0m\1 "; }
static const char *el_prompt_more(EditLine *e) { (void)e; return "\1\033[1m\1.\1\033[0m\1 "; }

/* libedit's characters come from here: fd 0 polled in short steps, so that a Ctrl-C landing
 * before a read is seen (a blocking read would wait past it); -1 then ends el_gets. UTF-8 is
 * decoded here, whatever the locale. */
static int edit_getc(EditLine *e, wchar_t *wc) {
    (void)e;
    unsigned char b[4];
    int n = 0, need = 1;
    while (n < need) {
        struct pollfd p = {0, POLLIN, 0};
        if (interrupted) return -1;
        int r = poll(&p, 1, 100);
        if (r <= 0) continue; /* a timeout, or a signal: look at interrupted again */
        ssize_t k = read(0, &b[n], 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 0;
        if (n == 0) need = b[0] < 0xC0 ? 1 : b[0] < 0xE0 ? 2 : b[0] < 0xF0 ? 3 : 4;
        else if ((b[n] & 0xC0) != 0x80) { *wc = 0xFFFD; return 1; }
        n++;
    }
    uint32_t v = need == 1 ? b[0] : b[0] & (0x3Fu >> (need - 1));
    for (int i = 1; i < need; i++) v = v << 6 | (b[i] & 0x3F);
    *wc = (wchar_t)v;
    return 1;
}

static void edit_open(const char *argv0) {
    el = el_init(argv0, stdin, stdout, stderr);
    hist = history_init();
    HistEvent ev;
    if (!el || !hist) return;
    history(hist, &ev, H_SETSIZE, 500);
    el_set(el, EL_HIST, history, hist);
    el_set(el, EL_EDITOR, "emacs");
    el_set(el, EL_GETCFN, edit_getc);
    el_set(el, EL_PROMPT_ESC, el_prompt, '\1');
}

static void edit_close(void) {
    if (el) el_end(el);
    if (hist) history_end(hist);
    el = NULL, hist = NULL;
}

/* One line through libedit: as read_line, the line kept in history. */
static int edit_line(char *buf, size_t cap, size_t *len, int more) {
    *len = 0;
    el_set(el, EL_PROMPT_ESC, more ? el_prompt_more : el_prompt, '\1');
    int n = 0;
    const char *s = el_gets(el, &n);
    if (interrupted || (!s && n < 0)) return -1;
    if (!s || n == 0) return 0;
    size_t k = (size_t)n;
    if (k && s[k - 1] == '\n') k--;
    if (k >= cap) k = cap - 1;
    memcpy(buf, s, k);
    *len = k;
    if (k) {
        HistEvent ev;
        char *h = strndup(s, k);
        if (h) history(hist, &ev, H_ENTER, h);
        free(h);
    }
    return 1;
}

/* A message: lines joined while they end in a backslash. */
static int read_message(char *buf, size_t cap, size_t *len, int tty_in) {
    size_t have = 0;
    for (int more = 0;; more = 1) {
        size_t k;
        if (!tty_in && more) fputs(". ", stdout), fflush(stdout);
        int got = tty_in && el ? edit_line(buf + have, cap - have, &k, more) : read_line(buf + have, cap - have, &k);
        if (got <= 0) {
            *len = have;
            return got == 0 && have ? 1 : got;
        }
        have += k;
        if (!k || buf[have - 1] != '\\' || have + 1 >= cap) break;
        buf[have - 1] = '\n'; /* the backslash becomes the line break */
    }
    *len = have;
    return 1;
}

static const char chat_commands[] =
    "/help   this list\n"
    "/reset  start the conversation over (the system prompt stays)\n"
    "/exit   leave (or Ctrl-D on an empty line); Ctrl-C stops a reply\n"
    "End a line with \\ to go on on the next; arrow keys edit the line and recall earlier ones.\n";

typedef struct {
    think_split split;
    int tty;
    char *reasoning, *answer; /* the reply so far, apart */
    size_t n_reasoning, n_answer, cap_reasoning, cap_answer;
    size_t shown;             /* reasoning bytes printed: none until it holds more than whitespace */
    int n_tokens;
} reply;

/* Streams the reply: reasoning dimmed on a terminal, the answer as it is. */
static int chat_on_token(int32_t tok, const char *text, size_t len, void *user) {
    reply *r = user;
    if (tok >= 0) r->n_tokens++;
    /* the think splitter may put all of it in either */
    if (qhx_reserve(&r->reasoning, &r->cap_reasoning, r->n_reasoning + len + 1, 1) ||
        qhx_reserve(&r->answer, &r->cap_answer, r->n_answer + len + 1, 1))
        return 1;
    const size_t a0 = r->n_answer;
    think_split_feed(&r->split, text, len, r->reasoning, &r->n_reasoning, r->answer, &r->n_answer);
    size_t from = r->shown;
    if (!r->shown) /* an empty thought ("<think>\n\n</think>") prints nothing */
        while (from < r->n_reasoning && strchr(" \t\r\n", r->reasoning[from])) from++;
    if (r->n_reasoning > from) {
        if (r->tty) fputs("\033[2m", stdout);
        fwrite(r->reasoning + from, 1, r->n_reasoning - from, stdout);
        if (r->tty) fputs("\033[0m", stdout);
        r->shown = r->n_reasoning;
    }
    if (r->n_answer > a0) {
        if (!a0 && r->shown) fputs("\n", stdout); /* the answer starts on its own line */
        fwrite(r->answer + a0, 1, r->n_answer - a0, stdout);
    }
    fflush(stdout);
    return interrupted;
}

/* The assistant message for a reply: the answer, with the reasoning apart. */
static json_t *assistant_message(const reply *r) {
    size_t rl = r->n_reasoning;
    while (rl && r->reasoning[rl - 1] == '\n') rl--;
    json_t *m = json_pack("{s:s, s:s%}", "role", "assistant", "content", r->answer ? r->answer : "", r->n_answer);
    if (rl) json_object_set_new(m, "reasoning_content", json_stringn(r->reasoning, rl));
    return m;
}

/* Renders and tokenizes the conversation; *thinking: whether the prompt opens a <think> block. */
static int render(json_t *msgs, int think, qhx_tokenizer *tok, int32_t **ids, size_t *n, int *thinking) {
    json_t *req = json_pack("{s:O, s:b}", "messages", msgs, "add_generation_prompt", 1);
    if (think >= 0) json_object_set_new(req, "enable_thinking", json_boolean(think));
    char *rj = json_dumps(req, JSON_COMPACT), *text = NULL;
    size_t len;
    json_decref(req);
    int rc = !rj || qhx_chat_render(rj, strlen(rj), &text, &len) ||
             qhx_tokenizer_encode(tok, text, len, QHX_ENCODE_SPECIAL, ids, n);
    *thinking = !rc && len >= 8 && !memcmp(text + len - 8, "<think>\n", 8);
    free(rj);
    free(text);
    return rc ? api_error() : 0;
}

static const char chat_help[] =
    "usage: qhx chat MODEL [--system TEXT] [--think | --no-think] [-n N] [--ctx N] [sampling]\n"
    "Chat in the terminal. Replies stream as they are generated; Ctrl-C stops a reply (and keeps what\n"
    "was said); /reset starts over, /exit (or Ctrl-D) leaves. When the conversation outgrows the\n"
    "context, the oldest turns are dropped, with a note.\n"
    "  --system TEXT  the system prompt\n"
    "  --think        let the model think before answering; --no-think: answer directly\n"
    "                 (default: the chat template's default)\n"
    "  -n N           tokens per reply at most (default 1024)\n"
    "  --ctx N        context to use, at most the model's (default: the model's)\n"
    "  --cache-mb N   memory for snapshots at message boundaries (default 2048; 0: evaluate every\n"
    "                 turn's whole rendering afresh)\n"
    CACHE_DIR_HELP
    "  --verbose      after each reply, its prompt tokens, how many were resumed, and speed\n"
    "sampling defaults here: --temp 0.7 --top-p 0.8 --top-k 20 (Qwen's advice for chat)\n" SAMPLING_HELP RUNTIME_HELP;

int cmd_chat(int argc, char **argv) {
    opts o = {.n = 1024, .think = -1, .cache_mb = 2048, .cache_dir_mb = 8192, .gen = {.temperature = 0.7f, .top_p = 0.8f, .top_k = 20}};
    if (parse_common(argc, argv, &o, "-m -n --n-predict --system --think --no-think --cache-mb --cache-dir --cache-dir-mb --ctx -c --ctx-size --verbose" SAMPLING_FLAGS RUNTIME_FLAGS)) return 2;
    if (o.help) return fputs(chat_help, stdout), 0;
    if (!o.model || o.prompt) return die("needs MODEL (see qhx chat --help)"), 2;
    if (check_cache_dir(&o)) return 2;
    if (o.n < 1) return die("-n: at least 1"), 2;
    default_seed(&o);
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    qhx_session *s = NULL;
    qhx_tokenizer *tok;
    json_t *msgs = json_array();
    int32_t *ids = NULL; /* the latest rendering */
    size_t n_ids = 0;
    qhx_prefix_cache *cache = NULL;
    int thinking = 0;
    char line[1 << 16];
    int rc = 1;
    if (open_model(&o, &rt, &m) || qhx_session_new(m, &s) || qhx_model_tokenizer(m, &tok)) {
        if (m && !s) api_error();
        goto done;
    }
    if (qhx_prefix_cache_new(m, (uint64_t)o.cache_mb << 20, &cache)) { api_error(); goto done; }
    if (open_cache_dir(cache, &o)) goto done;
    qhx_model_info mi;
    qhx_model_get_info(m, &mi);
    const int ctx = o.ctx && o.ctx < mi.max_context ? (int)o.ctx : mi.max_context;
    if (o.n >= ctx) { die("-n %lld leaves no room for a prompt in a context of %d", o.n, ctx); goto done; }
    if (o.system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", o.system));
    const size_t n_fixed = json_array_size(msgs);
    struct sigaction sa = {.sa_handler = on_sigint}; /* no SA_RESTART: Ctrl-C must interrupt read() */
    sigaction(SIGINT, &sa, NULL);
    const int tty = isatty(1), tty_in = tty && isatty(0);
    if (tty_in) edit_open("qhx");
    fprintf(stderr, "qhx chat: %s, context %d; /help lists the commands, /exit leaves, Ctrl-C stops a reply\n", o.model, ctx);
    for (;;) {
        interrupted = 0; /* before the prompt shows: a Ctrl-C after it counts */
        if (!tty_in || !el) fputs(tty ? "\033[1m>\033[0m " : "> ", stdout);
        fflush(stdout);
        size_t len;
        int got = read_message(line, sizeof line, &len, tty_in);
        if (got == 0) { fputs("\n", stdout); break; }
        if (got < 0) { fputs("\n(Ctrl-C stops a reply; /exit or Ctrl-D leaves)\n", stdout); continue; }
        line[len] = 0;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/help")) { fputs(chat_commands, stdout); continue; }
        if (!strcmp(line, "/reset")) {
            while (json_array_size(msgs) > n_fixed) json_array_remove(msgs, n_fixed);
            qhx_session_reset(s);
            fputs("(conversation reset)\n", stdout);
            continue;
        }
        if (!len) continue;
        json_t *user = json_pack("{s:s, s:s%}", "role", "user", "content", line, len);
        if (!user) { fputs("(that line is not valid UTF-8; try again)\n", stdout); continue; }
        json_array_append_new(msgs, user);
        free(ids);
        ids = NULL;
        if (render(msgs, o.think, tok, &ids, &n_ids, &thinking)) goto done;
        size_t dropped = 0;
        while (n_ids + (size_t)o.n > (size_t)ctx && json_array_size(msgs) > n_fixed + 1) {
            json_array_remove(msgs, n_fixed); /* the oldest turn */
            dropped++;
            free(ids);
            ids = NULL;
            if (render(msgs, o.think, tok, &ids, &n_ids, &thinking)) goto done;
        }
        if (dropped) fprintf(stderr, "[context full: dropped the %zu oldest message%s]\n", dropped, dropped > 1 ? "s" : "");
        if (n_ids + (size_t)o.n > (size_t)ctx) {
            fprintf(stderr, "[this message alone (%zu tokens) and a %lld-token reply do not fit the context of %d]\n", n_ids, o.n, ctx);
            json_array_remove(msgs, json_array_size(msgs) - 1);
            continue;
        }
        reply r = {.split.in_reasoning = thinking, .tty = tty};
        qhx_generate_result res;
        o.gen.max_tokens = (int)o.n;
        int resumed = 0;
        const double t0 = now_s();
        qhx_status st = qhx_prefix_cache_prefill(cache, s, ids, (int)n_ids, &resumed, NULL, NULL);
        const int at = qhx_session_pos(s);
        if (!st) st = qhx_generate(s, ids + at, (int)n_ids - at, &o.gen, chat_on_token, &r, &res);
        if (st == QHX_ERR_CANCELLED) fputs(" [stopped]", stdout);
        else if (st) { fputs("\n", stdout); api_error(); free(r.reasoning); free(r.answer); goto done; }
        fputs("\n", stdout);
        if (o.verbose)
            fprintf(stderr, "[prompt %zu tokens, %d resumed; reply %d tokens in %.2f s]\n", n_ids, resumed, r.n_tokens, now_s() - t0);
        json_array_append_new(msgs, assistant_message(&r));
        if (st == QHX_OK) { /* the next turn then resumes at its own message */
            json_t *conv = json_pack("{s:O}", "messages", msgs);
            if (o.think >= 0) json_object_set_new(conv, "enable_thinking", json_boolean(o.think));
            char *cj = json_dumps(conv, JSON_COMPACT);
            if (cj) qhx_prefix_cache_add_reply(cache, s, cj, strlen(cj), ids, (int)n_ids);
            free(cj);
            json_decref(conv);
        }
        free(r.reasoning);
        free(r.answer);
    }
    rc = 0;
done:
    edit_close();
    qhx_prefix_cache_free(cache);
    free(ids);
    json_decref(msgs);
    close_model(rt, m, s);
    return rc;
}
