/*
 * qhx — the qhexrt command line. One binary, one subcommand per job; built only on the public API
 * (include/qhexrt.h) plus the forge and tokenizer entry points.
 */
#include "qhexrt.h"

#include <jansson.h>

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- qhx logits ------------------------------------------------------------------------------ */

static const char logits_help[] =
    "usage: qhx logits MODEL --tokens 1,2,3 --out FILE [--stepwise]\n"
    "Evaluates the tokens from a fresh state and writes the fp32 little-endian logits of every\n"
    "position, row-major [T, vocab_size], to FILE (atomically).\n"
    "  MODEL        a bundle (qhx forge) or a Hugging Face checkpoint directory\n"
    "  --stepwise   feed one token at a time (recurrent path) instead of the whole sequence\n" RUNTIME_HELP;

static int cmd_logits(int argc, char **argv) {
    opts o = {0};
    if (parse_common(argc, argv, &o)) return 2;
    if (o.help) return fputs(logits_help, stdout), 0;
    if (!o.model || !o.tokens || !o.out || o.prompt) return die("needs MODEL, --tokens and --out (see qhx logits --help)"), 2;
    int32_t *ids;
    int n;
    if (parse_ids("--tokens", o.tokens, &ids, &n)) return 2;
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    qhx_session *s = NULL;
    float *logits = NULL;
    int rc = 1;
    if (open_model(&o, &rt, &m)) goto done;
    if (qhx_session_new(m, &s)) { api_error(); goto done; }
    qhx_model_info info;
    qhx_model_get_info(m, &info);
    logits = malloc(sizeof(float) * (size_t)n * info.vocab_size);
    if (!logits) { die("out of memory for %d x %d logits", n, info.vocab_size); goto done; }
    if (qhx_session_eval(s, ids, n, o.stepwise ? QHX_EVAL_STEPWISE : QHX_EVAL_SEQUENCE, logits, NULL)) { api_error(); goto done; }
    rc = write_atomic(o.out, logits, sizeof(float) * (size_t)n * info.vocab_size);
done:
    free(logits);
    free(ids);
    close_model(rt, m, s);
    return rc;
}

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
    "  --greedy      greedy decoding (the default; overrides --temp)\n" SAMPLING_HELP RUNTIME_HELP;

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
        if (g->len + len > g->cap) {
            size_t cap = (g->len + len) * 2 + 256;
            char *t = realloc(g->text, cap);
            if (!t) return 1;
            g->text = t;
            g->cap = cap;
        }
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

static int cmd_generate(int argc, char **argv) {
    opts o = {.n = 64};
    if (parse_common(argc, argv, &o)) return 2;
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
    int rc = 1;
    if (open_model(&o, &rt, &m)) goto done;
    if (qhx_session_new(m, &s)) { api_error(); goto done; }
    if (prompt) {
        qhx_tokenizer *tok;
        if (qhx_model_tokenizer(m, &tok) ||
            qhx_tokenizer_encode(tok, prompt, prompt_len, o.special ? QHX_ENCODE_SPECIAL : 0, &ids, &n)) {
            api_error();
            goto done;
        }
        if (!n) { die("the prompt encodes to no tokens"); goto done; }
        if (!o.ids && !o.json) gen_write(&g, prompt, prompt_len);
    }
    qhx_generate_result res;
    double t0 = now_s();
    qhx_status st = qhx_generate(s, ids, (int)n, &o.gen, on_token, &g, &res);
    double t1 = now_s();
    if (st) {
        if (!o.json) gen_end_line(&g);
        api_error();
        goto done;
    }
    double ttft = g.count ? g.t_first - t0 : t1 - t0;
    double decode = g.count > 1 ? (g.count - 1) / (t1 - g.t_first) : 0.0;
    if (o.json) {
        json_t *j = json_pack("{s:s%, s:O, s:i, s:i, s:s, s:I, s:f, s:f, s:f}", "text", g.text ? g.text : "", g.len,
                              "ids", g.id_list, "prompt_tokens", (int)n, "completion_tokens", res.n_generated,
                              "finish_reason", finish_name(res.finish), "seed", (json_int_t)o.gen.seed, "ttft_ms",
                              ttft * 1e3, "prefill_tok_s", n / ttft, "decode_tok_s", decode);
        char *out = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (!out) { die("the generated text is not valid UTF-8"); json_decref(j); goto done; }
        printf("%s\n", out);
        free(out);
        json_decref(j);
    } else {
        gen_end_line(&g);
        if (!o.ids)
            fprintf(stderr, "prompt %zu tokens, generated %d (%s); time to first token %.1f ms; prefill %.1f tok/s; decode %.1f tok/s\n",
                    n, g.count, finish_name(res.finish), ttft * 1e3, n / ttft, decode);
    }
    rc = 0;
done:
    free(ids);
    free(file_text);
    free(g.text);
    json_decref(g.id_list);
    close_model(rt, m, s);
    return rc;
}

/* ---- qhx tokenize / detokenize --------------------------------------------------------------- */

static const char tokenize_help[] =
    "usage: qhx tokenize TOKENIZER [--jsonl] [--special] [--replace-invalid]\n"
    "Reads text on stdin and prints its token ids, space-separated, on one line.\n"
    "  TOKENIZER          a tokenizer.json, or a directory holding one\n"
    "  --jsonl            read lines {\"text\": ...}; write one line {\"ids\": [...]} per input line\n"
    "  --special          match special tokens (<|im_start|> ...) in the text\n"
    "  --replace-invalid  replace invalid UTF-8 with U+FFFD instead of failing\n";

static const char detokenize_help[] =
    "usage: qhx detokenize TOKENIZER [--jsonl]\n"
    "Reads token ids (separated by spaces, commas or newlines) on stdin and prints the text.\n"
    "  --jsonl  read lines {\"ids\": [...]}; write one line {\"text\": ...} per input line\n";

static int print_ids_line(const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    return printf("\n") < 0;
}

static int tok_flags(int argc, char **argv, const char **path, int *jsonl, int *flags, const char *help) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return fputs(help, stdout), 1;
        if (!strcmp(a, "--jsonl")) *jsonl = 1;
        else if (!strcmp(a, "--special") && flags) *flags |= QHX_ENCODE_SPECIAL;
        else if (!strcmp(a, "--replace-invalid") && flags) *flags |= QHX_ENCODE_REPLACE_INVALID;
        else if (a[0] == '-' && a[1]) return die("unknown option '%s' (see %s --help)", a, cmd_name), 2;
        else if (!*path) *path = a;
        else return die("unexpected argument '%s'", a), 2;
    }
    if (!*path) return die("needs TOKENIZER (see %s --help)", cmd_name), 2;
    return 0;
}

typedef struct {
    qhx_tokenizer *tok;
    int flags;
} tok_ctx;

static int tokenize_line(const char *line, size_t len, long lineno, void *user) {
    tok_ctx *c = user;
    json_t *j = json_loadb(line, len, JSON_ALLOW_NUL, NULL), *text = json_object_get(j, "text");
    int32_t *ids;
    size_t n;
    int rc = 0;
    if (!json_is_string(text)) rc = die("stdin line %ld: expected {\"text\": \"...\"}", lineno);
    else if (qhx_tokenizer_encode(c->tok, json_string_value(text), json_string_length(text), c->flags, &ids, &n))
        rc = die("stdin line %ld: %s", lineno, qhx_last_error());
    else {
        fputs("{\"ids\": [", stdout);
        for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        fputs("]}\n", stdout);
        free(ids);
    }
    json_decref(j);
    return rc;
}

static int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL;
    int jsonl = 0, flags = 0, r = tok_flags(argc, argv, &path, &jsonl, &flags, tokenize_help);
    if (r) return r == 1 ? 0 : r;
    qhx_tokenizer *t;
    if (qhx_tokenizer_load(path, &t)) return api_error();
    int rc = 0;
    if (!jsonl) {
        size_t len;
        char *text = read_text(NULL, &len);
        int32_t *ids;
        size_t n;
        if (!text) rc = 1;
        else if (qhx_tokenizer_encode(t, text, len, flags, &ids, &n)) rc = api_error();
        else { print_ids_line(ids, n); free(ids); }
        free(text);
    } else {
        tok_ctx c = {t, flags};
        rc = each_stdin_line(tokenize_line, &c);
    }
    qhx_tokenizer_free(t);
    return rc;
}

static int decode_print(qhx_tokenizer *t, const int32_t *ids, size_t n, int jsonl) {
    char *text;
    size_t len;
    if (qhx_tokenizer_decode(t, ids, n, &text, &len)) return api_error();
    if (jsonl) {
        json_t *o = json_pack("{s:s%}", "text", text, len);
        char *s = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (s) printf("%s\n", s);
        free(s);
        json_decref(o);
        if (!s) { free(text); return die("decoded text is not valid UTF-8; it cannot be written as JSON"); }
    } else {
        fwrite(text, 1, len, stdout);
    }
    free(text);
    return 0;
}

static int detokenize_line(const char *line, size_t len, long lineno, void *user) {
    json_t *j = json_loadb(line, len, 0, NULL), *arr = json_object_get(j, "ids");
    size_t n = json_array_size(arr);
    int32_t *ids = malloc(sizeof *ids * (n + 1));
    int rc = 0;
    if (!json_is_array(arr) || !ids) rc = die("stdin line %ld: expected {\"ids\": [...]}", lineno);
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            rc = die("stdin line %ld: ids[%zu] is not a token id", lineno, i);
        else ids[i] = (int32_t)json_integer_value(v);
    }
    if (!rc) rc = decode_print(user, ids, n, 1);
    free(ids);
    json_decref(j);
    return rc;
}

static int cmd_detokenize(int argc, char **argv) {
    const char *path = NULL;
    int jsonl = 0, r = tok_flags(argc, argv, &path, &jsonl, NULL, detokenize_help);
    if (r) return r == 1 ? 0 : r;
    qhx_tokenizer *t;
    if (qhx_tokenizer_load(path, &t)) return api_error();
    int rc = 0;
    if (!jsonl) {
        size_t len;
        char *text = read_text(NULL, &len);
        int32_t *ids = text ? malloc(sizeof *ids * (len / 2 + 1)) : NULL;
        size_t n = 0;
        char *p = text, *end = text + len;
        if (!text) rc = 1;
        else if (!ids) rc = die("stdin: out of memory");
        while (!rc && p < end) {
            if (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' || *p == '\r') { p++; continue; }
            char *e;
            errno = 0;
            long v = strtol(p, &e, 10);
            if (e == p || errno || v < 0 || v > INT32_MAX || (e < end && !strchr(" ,\n\t\r", *e)))
                rc = die("stdin: '%.*s' is not a token id", (int)strcspn(p, " ,\n\t\r") > 20 ? 20 : (int)strcspn(p, " ,\n\t\r"), p);
            else ids[n++] = (int32_t)v;
            p = e;
        }
        if (!rc) rc = decode_print(t, ids, n, 0);
        free(ids);
        free(text);
    } else {
        rc = each_stdin_line(detokenize_line, t);
    }
    qhx_tokenizer_free(t);
    return rc;
}

/* ---- qhx template ---------------------------------------------------------------------------- */

static const char template_help[] =
    "usage: qhx template --jsonl\n"
    "Reads lines {\"messages\": [...], \"add_generation_prompt\": bool, \"enable_thinking\": bool,\n"
    "\"tools\": [...]} on stdin and writes {\"rendered\": \"...\"} per line: the Qwen3.5 chat format.\n";

static int template_line(const char *line, size_t len, long lineno, void *user) {
    char *text;
    size_t n;
    if (qhx_chat_render(line, len, &text, &n)) return die("stdin line %ld: %s", lineno, qhx_last_error());
    json_t *o = json_pack("{s:s%}", "rendered", text, n);
    char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
    int rc = js ? (printf("%s\n", js), 0) : die("stdin line %ld: out of memory", lineno);
    free(js);
    json_decref(o);
    free(text);
    return rc;
}

static int cmd_template(int argc, char **argv) {
    int jsonl = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return fputs(template_help, stdout), 0;
        if (!strcmp(argv[i], "--jsonl")) jsonl = 1;
        else return die("unknown argument '%s' (see qhx template --help)", argv[i]), 2;
    }
    if (!jsonl) return die("needs --jsonl (see qhx template --help)"), 2;
    return each_stdin_line(template_line, NULL);
}

/* ---- qhx synth ------------------------------------------------------------------------------- */

static const char synth_help_head[] =
    "usage: qhx synth --preset NAME --seed N --out DIR [--force]\n"
    "Writes a Hugging Face checkpoint (config.json + safetensors, sharded when large) with seeded\n"
    "random weights. Streams to disk; the directory appears only when complete.\n"
    "  --force   replace an existing DIR\n"
    "presets:\n";

static int cmd_synth(int argc, char **argv) {
    const char *preset = NULL, *out = NULL;
    long long seed = 0;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(synth_help_head, stdout);
            const char *name, *about;
            for (int p = 0; qhx_synth_preset_info(p, &name, &about); p++) printf("  %-8s %s\n", name, about);
            return 0;
        } else if (!strcmp(a, "--preset")) { if (want_value(argc, argv, &i)) return 2; preset = argv[i]; }
        else if (!strcmp(a, "--seed")) { if (want_value(argc, argv, &i) || parse_long("--seed", argv[i], 0, LLONG_MAX, &seed)) return 2; }
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) { if (want_value(argc, argv, &i)) return 2; out = argv[i]; }
        else if (!strcmp(a, "--force")) force = 1;
        else return die("unknown argument '%s' (see qhx synth --help)", a), 2;
    }
    if (!preset || !out) return die("needs --preset and --out (see qhx synth --help)"), 2;
    if (qhx_synth(preset, (uint64_t)seed, out, force, isatty(2))) return api_error();
    return 0;
}

/* ---- qhx forge ------------------------------------------------------------------------------- */

static const char forge_help[] =
    "usage: qhx forge CHECKPOINT -o BUNDLE [--max-context-bytes N] [--context-len N] [--lmhead f16|w8]\n"
    "                 [--no-gate] [--gate-tokens N] [--gate-trials N] [--force] [-t N] [--kernels K]\n"
    "Forges a Hugging Face checkpoint into a bundle: W8 decode shards by layer range (as few as fit\n"
    "the per-shard ceiling), an fp16 embedding, an fp16 (or W8) lm-head, the tokenizer and a\n"
    "manifest. Then gates it against the fp32 reference: each shard on random hidden states, and\n"
    "greedy generation end to end. A failed gate fails the forge; nothing is left behind.\n"
    "  --max-context-bytes N  per-shard ceiling (default 2147483648: the 4B shape -> 2 shards)\n"
    "  --context-len N        positions a session may use (default min(max_position_embeddings, 4096))\n"
    "  --lmhead f16|w8        lm-head precision (default f16; a tied f16 head is the embedding file)\n"
    "  --no-gate              skip the gates\n"
    "  --gate-tokens N        greedy gate tokens per prompt (default 64)\n"
    "  --gate-trials N        export gate random inputs per shard (default 5)\n"
    "  --force                replace an existing BUNDLE (only once the new one is complete)\n" RUNTIME_HELP;

static int cmd_forge(int argc, char **argv) {
    qhx_forge_opts fo = {.gate = 1, .progress = isatty(2)};
    opts o = {0};
    long long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return fputs(forge_help, stdout), 0;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) { if (want_value(argc, argv, &i)) return 2; fo.out = argv[i]; }
        else if (!strcmp(a, "--max-context-bytes")) {
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 1, LLONG_MAX, &v)) return 2;
            fo.max_context_bytes = (uint64_t)v;
        } else if (!strcmp(a, "--context-len")) {
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 1, 1 << 30, &v)) return 2;
            fo.context_len = (int)v;
        } else if (!strcmp(a, "--gate-tokens")) {
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 1, 1 << 20, &v)) return 2;
            fo.gate_tokens = (int)v;
        } else if (!strcmp(a, "--gate-trials")) {
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 1, 1000, &v)) return 2;
            fo.gate_trials = (int)v;
        } else if (!strcmp(a, "--lmhead")) { if (want_value(argc, argv, &i)) return 2; fo.lmhead = argv[i]; }
        else if (!strcmp(a, "--no-gate")) fo.gate = 0;
        else if (!strcmp(a, "--force")) fo.force = 1;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 1, 1024, &o.threads)) return 2;
        } else if (!strcmp(a, "--kernels")) { if (want_value(argc, argv, &i)) return 2; o.kernels = argv[i]; }
        else if (!strcmp(a, "--mmap")) o.mmap = 1;
        else if (a[0] == '-' && a[1]) return die("unknown option '%s' (see qhx forge --help)", a), 2;
        else if (!fo.checkpoint) fo.checkpoint = a;
        else return die("unexpected argument '%s'", a), 2;
    }
    if (!fo.checkpoint || !fo.out) return die("needs CHECKPOINT and -o BUNDLE (see qhx forge --help)"), 2;
    qhx_runtime_opts ro = {.kernels = o.kernels, .n_threads = (int)o.threads, .map_weights = o.mmap};
    qhx_runtime *rt;
    if (qhx_runtime_new(&ro, &rt)) return api_error();
    fo.rt = rt;
    int rc = qhx_forge(&fo, stdout) ? api_error() : 0;
    qhx_runtime_free(rt);
    if (!rc) printf("bundle written to %s\n", fo.out);
    return rc;
}

/* ---- qhx inspect ----------------------------------------------------------------------------- */

static const char inspect_help[] =
    "usage: qhx inspect MODEL\n"
    "Summarises a bundle (manifest, shards and their sizes, gate results) or a checkpoint, and the\n"
    "per-session state footprint: conv + delta-rule state, KV cache per token.\n";

static double jnum(json_t *o, const char *path) {
    char key[128];
    snprintf(key, sizeof key, "%s", path);
    for (char *k = key, *dot; o && k; k = dot ? dot + 1 : NULL) {
        if ((dot = strchr(k, '.'))) *dot = 0;
        o = json_object_get(o, k);
    }
    return o ? json_number_value(o) : NAN;
}

static int cmd_inspect(int argc, char **argv) {
    opts o = {0};
    if (parse_common(argc, argv, &o)) return 2;
    if (o.help) return fputs(inspect_help, stdout), 0;
    if (!o.model || o.prompt) return die("needs one MODEL (see qhx inspect --help)"), 2;
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    if (open_model(&o, &rt, &m)) { close_model(rt, m, NULL); return 1; }
    qhx_model_info in;
    qhx_model_get_info(m, &in);
    printf("%s: %s\n", o.model, in.is_bundle ? "bundle" : "Hugging Face checkpoint");
    printf("model: %d layers (%d Gated DeltaNet, %d gated attention), hidden %d, vocab %d\n", in.n_layers,
           in.n_linear_layers, in.n_full_layers, in.hidden_size, in.vocab_size);
    printf("context: %d positions\nweights: %.1f MB mapped\n", in.max_context, in.weight_bytes / 1e6);
    printf("kernels: %s, %d threads\n", qhx_runtime_kernels(rt), qhx_runtime_threads(rt));
    printf("state per session: %.2f MB fixed (conv + delta-rule), KV cache %.1f KB per token (%.1f MB at full context)\n",
           in.state_bytes / 1e6, in.kv_bytes_per_token / 1e3, in.kv_bytes_per_token * (double)in.max_context / 1e6);
    const char *text = qhx_model_manifest(m);
    json_t *root = text ? json_loads(text, 0, NULL) : NULL;
    if (root) {
        printf("host op: %s; target %s, weight layout %s\n", json_string_value(json_object_get(json_object_get(root, "plan"), "host_op")),
               json_string_value(json_object_get(json_object_get(root, "target"), "target")),
               json_string_value(json_object_get(json_object_get(root, "target"), "weight_layout")));
        size_t i;
        json_t *sh;
        json_array_foreach(json_object_get(json_object_get(root, "plan"), "decode_shards"), i, sh)
            printf("decode shard %zu: %s, layers %d-%d, %.1f MB\n", i, json_string_value(json_object_get(sh, "file")),
                   (int)json_integer_value(json_array_get(json_object_get(sh, "layers"), 0)),
                   (int)json_integer_value(json_array_get(json_object_get(sh, "layers"), 1)) - 1,
                   jnum(sh, "bytes") / 1e6);
        json_t *plan = json_object_get(root, "plan");
        printf("embedding: %s (fp16, host lookup)\nlm-head: %s (%s%s)\n", json_string_value(json_object_get(json_object_get(plan, "embedding"), "file")),
               json_string_value(json_object_get(json_object_get(plan, "lm_head"), "file")),
               json_string_value(json_object_get(json_object_get(plan, "lm_head"), "dtype")),
               json_is_true(json_object_get(json_object_get(plan, "lm_head"), "tied_to_embedding")) ? ", tied: the embedding file" : "");
        printf("quantization: weight relative RMS error %.3f %%\n", 100 * jnum(root, "quantization.weight_rel_rms_error"));
        json_t *g = json_object_get(root, "gates");
        if (json_is_true(json_object_get(g, "run")))
            printf("gates: oracle-gated export %.0f/%.0f (worst relative error %.2e, tolerance %.2g); greedy %.0f/%.0f tokens, %s\n",
                   jnum(g, "export.passed"), jnum(g, "export.total"), jnum(g, "export.worst_rel_error"), jnum(g, "export.tolerance"),
                   jnum(g, "greedy.matched"), jnum(g, "greedy.total"),
                   json_is_true(json_object_get(json_object_get(g, "greedy"), "passed")) ? "passed" : "FAILED");
        else
            printf("gates: not run (forged with --no-gate)\n");
        json_decref(root);
    }
    close_model(rt, m, NULL);
    return 0;
}

/* ---- qhx perplexity -------------------------------------------------------------------------- */

static const char perplexity_help[] =
    "usage: qhx perplexity MODEL FILE [--ctx N] [--json] [-t N] [--kernels K]\n"
    "The whole FILE is tokenized as one text (no special tokens), split into consecutive windows of\n"
    "N tokens (default 512; the last may be shorter), each evaluated from a fresh state.\n"
    "perplexity = exp(mean negative log-likelihood of every token of every window but its first).\n"
    "  --json   print {\"tokens\": scored tokens, \"perplexity\": X} only\n" RUNTIME_HELP;

static int cmd_perplexity(int argc, char **argv) {
    opts o = {.ctx = 512};
    if (parse_common(argc, argv, &o)) return 2;
    if (o.help) return fputs(perplexity_help, stdout), 0;
    const int json = o.json;
    const long long ctx = o.ctx;
    if (!o.model || !o.prompt) return die("needs MODEL and FILE (see qhx perplexity --help)"), 2;
    const char *file = o.prompt;
    FILE *fp = fopen(file, "rb");
    if (!fp) return die("%s: %s", file, strerror(errno));
    size_t len = 0, cap = 1 << 16;
    char *text = malloc(cap);
    for (size_t got; text && (got = fread(text + len, 1, cap - len, fp)) > 0;) {
        len += got;
        if (len == cap) { char *t = realloc(text, cap *= 2); if (!t) { free(text); text = NULL; } else text = t; }
    }
    fclose(fp);
    if (!text) return die("%s: out of memory", file);
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    qhx_session *s = NULL;
    qhx_tokenizer *tok;
    int32_t *ids = NULL;
    size_t n = 0;
    float *logits = NULL;
    int rc = 1;
    if (open_model(&o, &rt, &m)) goto done;
    if (qhx_model_tokenizer(m, &tok) || qhx_tokenizer_encode(tok, text, len, 0, &ids, &n) || qhx_session_new(m, &s)) {
        api_error();
        goto done;
    }
    qhx_model_info in;
    qhx_model_get_info(m, &in);
    if (ctx > in.max_context) { die("--ctx %lld exceeds the model's context of %d", ctx, in.max_context); goto done; }
    enum { PIECE = 64 }; /* windows are fed in 64-token pieces: the logits of a whole window may not fit */
    const size_t V = (size_t)in.vocab_size;
    logits = malloc(sizeof(float) * PIECE * V);
    if (!logits) { die("out of memory"); goto done; }
    double nll = 0;
    size_t scored = 0;
    for (size_t w0 = 0; w0 < n; w0 += (size_t)ctx) {
        const size_t wn = n - w0 < (size_t)ctx ? n - w0 : (size_t)ctx;
        qhx_session_reset(s);
        for (size_t p0 = 0; p0 < wn; p0 += PIECE) {
            const size_t pn = wn - p0 < PIECE ? wn - p0 : PIECE;
            if (qhx_session_eval(s, ids + w0 + p0, (int)pn, QHX_EVAL_SEQUENCE, logits, NULL)) { api_error(); goto done; }
            for (size_t t = 0; t < pn && p0 + t + 1 < wn; t++) {
                const float *row = logits + t * V;
                float mx = row[0];
                for (size_t v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
                double sum = 0;
                for (size_t v = 0; v < V; v++) sum += exp((double)row[v] - mx);
                nll += log(sum) + mx - row[ids[w0 + p0 + t + 1]];
                scored++;
            }
        }
        if (!json && isatty(2)) fprintf(stderr, "\rperplexity: %zu/%zu tokens", w0 + wn, n);
    }
    if (!scored) { die("%s: fewer than 2 tokens in every window: nothing to score", file); goto done; }
    if (!json && isatty(2)) fputc('\n', stderr);
    if (json) printf("{\"tokens\": %zu, \"perplexity\": %.6f}\n", scored, exp(nll / scored));
    else printf("%s: %zu tokens scored in windows of %lld; perplexity %.4f\n", file, scored, ctx, exp(nll / scored));
    rc = 0;
done:
    free(text);
    free(ids);
    free(logits);
    close_model(rt, m, s);
    return rc;
}

/* ---- qhx bench ------------------------------------------------------------------------------- */

static const char bench_help[] =
    "usage: qhx bench MODEL [--json] [--prompts 128,512,1024] [--decode N] [-t N] [--kernels K]\n"
    "Prefill of each prompt size from a fresh session, then N decode steps (default 128) after a\n"
    "128-token prompt, on seeded random token ids. Reports tok/s, the weight bytes decode reads per\n"
    "second against this machine's read bandwidth measured in the same run, time to first token\n"
    "(the 512-token prompt, or the largest below it) and peak RSS.\n" RUNTIME_HELP;

static int cmd_bench(int argc, char **argv) {
    opts o = {.decode = 128, .prompts = "128,512,1024"};
    if (parse_common(argc, argv, &o)) return 2;
    if (o.help) return fputs(bench_help, stdout), 0;
    const int json = o.json;
    const long long n_decode = o.decode;
    const char *sizes_arg = o.prompts;
    if (!o.model || o.prompt) return die("needs one MODEL (see qhx bench --help)"), 2;
    int32_t *sizes;
    int n_sizes;
    if (parse_ids("--prompts", sizes_arg, &sizes, &n_sizes)) return 2;
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    qhx_session *s = NULL;
    int32_t *ids = NULL;
    int rc = 1;
    if (open_model(&o, &rt, &m)) goto done;
    qhx_model_info in;
    qhx_model_get_info(m, &in);
    int longest = 128;
    for (int i = 0; i < n_sizes; i++) {
        if (sizes[i] < 1 || sizes[i] > in.max_context) { die("--prompts: %d is not in [1, %d]", sizes[i], in.max_context); goto done; }
        longest = sizes[i] > longest ? sizes[i] : longest;
    }
    if (128 + n_decode > in.max_context) { die("--decode %lld: 128 + N exceeds the context of %d", n_decode, in.max_context); goto done; }
    ids = malloc(sizeof(int32_t) * (size_t)longest);
    float *last = malloc(sizeof(float) * (size_t)in.vocab_size);
    if (!ids || !last) { free(last); die("out of memory"); goto done; }
    uint64_t seed = 42;
    for (int i = 0; i < longest; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((seed >> 33) % (uint64_t)in.vocab_size);
    }
    if (qhx_session_new(m, &s)) { free(last); api_error(); goto done; }
    if (!json) fprintf(stderr, "bench: %s on %s kernels, %d threads\n", o.model, qhx_runtime_kernels(rt), qhx_runtime_threads(rt));
    double *pre = calloc((size_t)n_sizes, sizeof *pre), ttft = 0;
    int ttft_size = 0;
    for (int i = 0; i < n_sizes; i++) {
        qhx_session_reset(s);
        const double t0 = now_s();
        if (qhx_session_eval(s, ids, sizes[i], QHX_EVAL_SEQUENCE, NULL, last)) { free(last), free(pre); api_error(); goto done; }
        const double dt = now_s() - t0;
        pre[i] = sizes[i] / dt;
        if (sizes[i] <= 512 && sizes[i] >= ttft_size) ttft = dt, ttft_size = sizes[i];
        if (!json) fprintf(stderr, "  prefill %5d tokens: %8.1f tok/s (%.2f s)\n", sizes[i], pre[i], dt);
    }
    qhx_session_reset(s);
    /* Decode in segments of 16 tokens, each followed by one read pass over the weights: the host
     * is shared, so its bandwidth moves while decode runs, and a probe at another moment measures
     * another machine. The fraction compares the two averaged over the same stretch of time; the
     * best of a few passes over fresh memory, a peak rather than an average, is reported beside. */
    double dec_s = 0;
    qhx_read_probe probe = {0, 0};
    if (qhx_session_eval(s, ids, 128, QHX_EVAL_SEQUENCE, NULL, last)) { free(last), free(pre); api_error(); goto done; }
    for (int i = 0; i < n_decode; i++) {
        int32_t best = 0; /* greedy: the next input is the argmax, as in generation */
        for (int v = 1; v < in.vocab_size; v++) best = last[v] > last[best] ? v : best;
        const double t0 = now_s();
        if (qhx_session_eval(s, &best, 1, QHX_EVAL_STEPWISE, NULL, last)) { free(last), free(pre); api_error(); goto done; }
        dec_s += now_s() - t0;
        if (i % 16 == 15 || i == n_decode - 1) {
            const qhx_read_probe p = qhx_model_read_weights(m);
            probe.bytes += p.bytes, probe.seconds += p.seconds;
        }
    }
    const double dec = n_decode / dec_s;
    free(last);
    struct rusage ru; /* before the peak probe, which allocates 1 GiB of its own */
    getrusage(RUSAGE_SELF, &ru);
    const double rss_mb = ru.ru_maxrss / 1024.0;
    const double bw = probe.bytes / probe.seconds / 1e9, peak = qhx_runtime_read_bandwidth(rt, 0);
    const double gbs = dec * in.decode_bytes_per_token / 1e9;
    if (json) {
        printf("{\"model\": \"%s\", \"kernels\": \"%s\", \"threads\": %d, \"prefill\": [", o.model, qhx_runtime_kernels(rt),
               qhx_runtime_threads(rt));
        for (int i = 0; i < n_sizes; i++) printf("%s{\"tokens\": %d, \"tok_s\": %.2f}", i ? ", " : "", sizes[i], pre[i]);
        printf("], \"decode\": {\"tokens\": %lld, \"tok_s\": %.2f}, \"weight_bytes_per_token\": %llu, \"weight_gb_s\": %.2f, "
               "\"bandwidth_gb_s\": %.2f, \"bandwidth_frac\": %.3f, \"bandwidth_peak_gb_s\": %.2f, \"bandwidth_peak_frac\": %.3f, "
               "\"ttft_ms\": %.1f, \"ttft_prompt_tokens\": %d, "
               "\"peak_rss_mb\": %.1f, \"mapped_weights_mb\": %.1f}\n",
               n_decode, dec, (unsigned long long)in.decode_bytes_per_token, gbs, bw, gbs / bw, peak, gbs / peak, ttft * 1e3, ttft_size, rss_mb,
               in.weight_bytes / 1e6);
    } else {
        fprintf(stderr, "  decode %lld tokens: %.2f tok/s; %.1f MB of weights per token = %.2f GB/s, %.0f %% of the %.2f GB/s a read loop\n"
                        "    got over the same weights between decode segments (%.0f %% of the %.2f GB/s best pass over fresh memory)\n",
                n_decode, dec, in.decode_bytes_per_token / 1e6, gbs, 100 * gbs / bw, bw, 100 * gbs / peak, peak);
        fprintf(stderr, "  time to first token (%d-token prompt): %.1f ms; peak RSS %.1f MB (weights mapped %.1f MB)\n", ttft_size,
                ttft * 1e3, rss_mb, in.weight_bytes / 1e6);
    }
    free(pre);
    rc = 0;
done:
    free(sizes);
    free(ids);
    close_model(rt, m, s);
    return rc;
}

/* ---- qhx_generate: the seed's positional form ------------------------------------------------ */


static int qhx_generate_positional(int argc, char **argv) {
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

/* ---- main ------------------------------------------------------------------------------------ */

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *about;
} commands[] = {
    {"generate", cmd_generate, "generate tokens from a prompt"},
    {"logits", cmd_logits, "write the logits of every prompt position"},
    {"tokenize", cmd_tokenize, "text to token ids"},
    {"detokenize", cmd_detokenize, "token ids to text"},
    {"chat", cmd_chat, "talk to a model in the terminal"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server"},
    {"template", cmd_template, "render conversations in the Qwen3.5 chat format"},
    {"synth", cmd_synth, "write a random-weight checkpoint of a preset shape"},
    {"forge", cmd_forge, "forge a checkpoint into a gated W8 bundle"},
    {"inspect", cmd_inspect, "summarise a bundle or checkpoint: plan, sizes, gates, state"},
    {"perplexity", cmd_perplexity, "perplexity of a model on a text file"},
    {"bench", cmd_bench, "prefill and decode speed against the machine's memory bandwidth"},
};

static void usage(FILE *f) {
    fprintf(f, "qhx %s — Qwen3.5 runtime\nusage: qhx COMMAND [ARGS]   (qhx COMMAND --help for details)\ncommands:\n", QHX_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].about);
}

int main(int argc, char **argv) {
    const char *base = strrchr(argv[0], '/');
    if (!strcmp(base ? base + 1 : argv[0], "qhx_generate")) {
        cmd_name = "qhx_generate";
        return qhx_generate_positional(argc, argv);
    }
    if (argc < 2) return usage(stderr), 2;
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) return usage(stdout), 0;
    if (!strcmp(argv[1], "--version")) return printf("qhx %s\n", QHX_VERSION), 0;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            static char name[64];
            snprintf(name, sizeof name, "qhx %s", commands[i].name);
            cmd_name = name;
            return commands[i].run(argc - 1, argv + 1);
        }
    die("unknown command '%s' (see qhx --help)", argv[1]);
    return 2;
}
