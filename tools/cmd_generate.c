/* qhx generate, and the seed's positional form qhx_generate: a prompt in, text (or ids, or one JSON object) out. */
#include "util/buf.h"
#include "cli.h"
#include "qhexrt.h"

#include <jansson.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
/* ---- qhx generate ---------------------------------------------------------------------------- */

static const char generate_help[] =
    "usage: qhx generate MODEL (PROMPT | --file F | --tokens 1,2,3) [-n N] [sampling] [--ids | --json]\n"
    "Generates from a prompt, greedy unless told otherwise. The prompt and the output stream to stdout as\n"
    "text; token counts, time to first token and prefill/decode speed go to stderr. Generation stops at\n"
    "the model's end-of-turn ids, a --stop string or -n tokens.\n"
    "  -n N          tokens to generate at most (default 64)\n"
    "  --file F      read the prompt text from F (- for stdin; at most 64 MiB)\n"
    "  --tokens      the prompt as comma-separated token ids instead of text\n"
    "  --special     match special tokens such as <|im_start|> in the prompt text\n"
    "  --ids         print only the generated ids, space-separated, on one line\n"
    "  --json        print one JSON object: text, ids, counts, finish reason, seed and timings\n"
    "  --prompt-cache FILE  resume from the session state in FILE where it holds the start of this\n"
    "                prompt, evaluate only the rest, and write the state after the prompt back to FILE\n"
    "  --greedy      greedy decoding (the default; overrides --temp)\n" SAMPLING_HELP GRAMMAR_HELP RUNTIME_HELP;

typedef struct {
    int ids, json, count;
    json_t *id_list;
    char *text;
    size_t len, cap;
    double t_first;
    char last; /* the last byte written to stdout, 0 before any */
} gen_out;

static void gen_write(gen_out *g, const char *p, size_t n) {
    if (!n) return;
    fwrite(p, 1, n, stdout);
    g->last = p[n - 1];
}

static void gen_write_id(gen_out *g, int32_t tok) {
    printf(g->count > 1 ? " %d" : "%d", tok);
    g->last = '0';
}

/* Ends the text on a line of its own and pushes it out before anything goes to stderr, which
 * is unbuffered: a text without a final newline must not run into the statistics line. */
static void gen_end_line(gen_out *g) {
    if (g->last && g->last != '\n') putchar('\n');
    fflush(stdout);
}

static int on_token(int32_t tok, const char *text, size_t len, void *user) {
    gen_out *g = user;
    if (tok >= 0 && !g->count++) g->t_first = now_s();
    if (g->json) {
        if (tok >= 0) json_array_append_new(g->id_list, json_integer(tok));
        if (qhx_reserve(&g->text, &g->cap, g->len + len, 1)) return 1;
        if (len) memcpy(g->text + g->len, text, len);
        g->len += len;
        return 0;
    }
    if (g->ids || !text) {
        if (tok >= 0) gen_write_id(g, tok);
    } else {
        gen_write(g, text, len);
    }
    fflush(stdout);
    return 0;
}

static const char *finish_name(qhx_finish f) {
    return f == QHX_FINISH_STOP ? "stop" : f == QHX_FINISH_LENGTH ? "length" : "cancelled";
}

/* --prompt-cache: restores the state in path when it holds a prefix of the prompt, evaluates the
 * prompt up to its last token and writes the state there back (so a rerun of the same prompt
 * still has a token to evaluate for its first logits); qhx_generate then takes the last token.
 * *done: prompt tokens evaluated here, *reused: of them from the file. */
static int prompt_cache(qhx_session *s, qhx_model *m, const char *path, const int32_t *ids, int n, int *done, int *reused) {
    *done = *reused = 0;
    if (n < 2) return 0;
    qhx_snapshot *snap = NULL;
    if (access(path, F_OK) == 0) {
        if (qhx_snapshot_load(m, path, &snap)) return api_error(), 1;
        const int pos = qhx_snapshot_tokens(snap, NULL, 0);
        int32_t *held = malloc(sizeof(int32_t) * (pos + 1));
        if (!held) return qhx_snapshot_free(snap), die("out of memory"), 1;
        qhx_snapshot_tokens(snap, held, pos);
        const int prefix = pos <= n - 1 && !memcmp(held, ids, sizeof(int32_t) * pos);
        free(held);
        if (prefix && qhx_session_restore(s, snap)) return qhx_snapshot_free(snap), api_error(), 1;
        if (prefix) *reused = pos;
        qhx_snapshot_free(snap);
        snap = NULL;
    }
    *done = n - 1;
    if (*reused == n - 1) return 0;
    if (qhx_session_eval(s, ids + *reused, n - 1 - *reused, QHX_EVAL_SEQUENCE, NULL, NULL) || qhx_session_snapshot(s, &snap) ||
        qhx_snapshot_save(snap, path))
        return qhx_snapshot_free(snap), api_error(), 1;
    qhx_snapshot_free(snap);
    return 0;
}

int cmd_generate(int argc, char **argv) {
    opts o = {.n = 64};
    if (parse_common(argc, argv, &o, "-m -p --prompt -n --n-predict --tokens -f --file --prompt-cache --special --json --greedy --ids --grammar --json-schema" SAMPLING_FLAGS RUNTIME_FLAGS)) return 2;
    if (o.help) return fputs(generate_help, stdout), 0;
    if (!o.model || (!!o.tokens + !!o.prompt + !!o.file) != 1)
        return die("needs MODEL and one of PROMPT, --file or --tokens (see qhx generate --help)"), 2;
    if (o.ids && o.json) return die("--ids and --json: choose one"), 2;
    if (o.greedy) o.gen.temperature = 0;
    default_seed(&o);
    o.gen.max_tokens = (int)o.n;
    int32_t *ids = NULL;
    size_t n = 0;
    char *file_text = NULL;
    const char *prompt = o.prompt;
    size_t prompt_len = prompt ? strlen(prompt) : 0;
    if (o.tokens) {
        int ni;
        if (parse_ids("--tokens", o.tokens, &ids, &ni)) return 2;
        n = (size_t)ni;
    }
    if (o.file && !(prompt = file_text = read_text(o.file, &prompt_len))) return 1;
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    qhx_session *s = NULL;
    gen_out g = {.ids = o.ids, .json = o.json, .id_list = json_array()};
    qhx_grammar *grammar = NULL;
    int rc = 1;
    if (open_model(&o, &rt, &m)) goto done;
    if (qhx_session_new(m, &s)) { api_error(); goto done; }
    if (open_grammar(&o, m, &grammar)) goto done;
    o.gen.grammar = grammar;
    if (prompt) {
        qhx_tokenizer *tok;
        if (qhx_model_tokenizer(m, &tok) ||
            qhx_tokenizer_encode(tok, prompt, prompt_len, o.special ? QHX_ENCODE_SPECIAL : 0, &ids, &n)) {
            api_error();
            goto done;
        }
        if (!n) { die("the prompt encodes to no tokens"); goto done; }
    }
    qhx_generate_result res;
    double t0 = now_s();
    int cached = 0, reused = 0;
    if (o.prompt_cache && prompt_cache(s, m, o.prompt_cache, ids, (int)n, &cached, &reused)) goto done;
    if (prompt && !o.ids && !o.json) gen_write(&g, prompt, prompt_len);
    qhx_status st = qhx_generate(s, ids + cached, (int)n - cached, &o.gen, on_token, &g, &res);
    double t1 = now_s();
    if (st) {
        if (!o.json) gen_end_line(&g);
        api_error();
        goto done;
    }
    double ttft = g.count ? g.t_first - t0 : t1 - t0;
    double decode = g.count > 1 ? (g.count - 1) / (t1 - g.t_first) : 0.0;
    if (o.json) {
        json_t *j = json_pack("{s:s%, s:O, s:i, s:i, s:i, s:s, s:I, s:f, s:f, s:f, s:i, s:i, s:i}", "text", g.text ? g.text : "", g.len,
                              "ids", g.id_list, "prompt_tokens", (int)n, "cached_tokens", reused, "completion_tokens", res.n_generated,
                              "finish_reason", finish_name(res.finish), "seed", (json_int_t)o.gen.seed, "ttft_ms",
                              ttft * 1e3, "prefill_tok_s", (n - reused) / ttft, "decode_tok_s", decode, "drafted", res.n_drafted,
                              "accepted", res.n_accepted, "verify_passes", res.n_verify);
        char *out = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (!out) { die("the generated text is not valid UTF-8"); json_decref(j); goto done; }
        printf("%s\n", out);
        free(out);
        json_decref(j);
    } else {
        gen_end_line(&g);
        char cache_note[64] = "", draft_note[96] = "";
        if (o.prompt_cache) snprintf(cache_note, sizeof cache_note, " (%d from the prompt cache)", reused);
        if (o.gen.draft)
            snprintf(draft_note, sizeof draft_note, "; drafted %d, accepted %d in %d verify passes", res.n_drafted, res.n_accepted,
                     res.n_verify);
        if (!o.ids)
            fprintf(stderr, "prompt %zu tokens%s, generated %d (%s); time to first token %.1f ms; prefill %.1f tok/s; decode %.1f tok/s%s\n",
                    n, cache_note, g.count, finish_name(res.finish), ttft * 1e3, (n - reused) / ttft, decode, draft_note);
    }
    rc = 0;
done:
    free(ids);
    free(file_text);
    free(g.text);
    json_decref(g.id_list);
    close_model(rt, m, s);
    qhx_grammar_free(grammar);
    return rc;
}

/* ---- qhx_generate: the seed's positional form ------------------------------------------------ */


int qhx_generate_positional(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        puts("usage: qhx_generate MANIFEST BACKEND SYSLIB DIR N_TOKENS PROMPT\n"
             "The seed runtime's form of qhx generate. BACKEND: cpu (or a kernel set: ref, scalar, avx2,\n"
             "avx512); SYSLIB: - (the cpu backend needs none); DIR: the directory holding the manifest's files.");
        return 0;
    }
    if (argc != 7) return die("usage: qhx_generate MANIFEST BACKEND SYSLIB DIR N_TOKENS PROMPT"), 2;
    const char *manifest = argv[1], *backend = argv[2], *syslib = argv[3], *dir = argv[4];
    if (strcmp(syslib, "-")) return die("SYSLIB '%s': the cpu backend loads no system library; pass -", syslib), 2;
    char a[PATH_MAX], b[PATH_MAX], mdir[PATH_MAX];
    snprintf(mdir, sizeof mdir, "%s", manifest);
    char *slash = strrchr(mdir, '/');
    if (slash) *slash = 0; else snprintf(mdir, sizeof mdir, ".");
    if (!realpath(dir, a)) return die("DIR %s: %s", dir, strerror(errno)), 1;
    if (!realpath(mdir, b) || strcmp(a, b)) return die("DIR %s: the manifest's files live next to it, in %s", dir, mdir), 2;
    char *args[] = {"generate", (char *)manifest, argv[6], "-n", argv[5], "--kernels",
                    !strcmp(backend, "cpu") ? "auto" : (char *)backend, NULL};
    return cmd_generate(7, args);
}
