/*
 * qhx — the qhexrt command line. One binary, one subcommand per job; built only on the public API
 * (include/qhexrt.h) plus the forge and tokenizer entry points.
 */
#include "qhexrt.h"
#include "forge/synth.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *cmd_name = "qhx";

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cmd_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static int api_error(void) { return die("%s", qhx_last_error()); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Strict integer parsing: the whole argument, in [lo, hi]. */
static int parse_long(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        die("%s: '%s' is not an integer in [%lld, %lld]", flag, s ? s : "", lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* "1,2,3" -> ids; refuses empty items, signs, junk and anything beyond int32. */
static int parse_tokens(const char *s, int32_t **ids, int *n) {
    *ids = NULL;
    *n = 0;
    if (!s || !*s) return die("--tokens: empty token list"), -1;
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    if (cap > (1u << 24)) return die("--tokens: more than %u ids", 1u << 24), -1;
    int32_t *out = malloc(cap * sizeof *out);
    if (!out) return die("out of memory"), -1;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        if (*p < '0' || *p > '9') break;
        long long v = strtoll(p, &end, 10);
        if (errno || v > INT32_MAX) break;
        out[(*n)++] = (int32_t)v;
        if (*end == 0) { *ids = out; return 0; }
        if (*end != ',') break;
        p = end + 1;
    }
    free(out);
    *n = 0;
    return die("--tokens: '%s' is not a comma-separated list of token ids", s), -1;
}

/* Writes a whole file under a temporary name and renames it into place. */
static int write_atomic(const char *path, const void *data, size_t len) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return die("%s: %s", path, strerror(errno));
    int ok = fwrite(data, 1, len, f) == len;
    ok &= fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return die("%s: write failed: %s", path, strerror(e));
    }
    return 0;
}

/* ---- shared option parsing ------------------------------------------------------------------- */

typedef struct {
    const char *model, *tokens, *out, *prompt;
    long long n;
    int greedy, ids, stepwise, help;
} opts;

static int want_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) return die("%s: needs a value", argv[*i]), -1;
    (*i)++;
    return 0;
}

static int parse_common(int argc, char **argv, opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) o->help = 1;
        else if (!strcmp(a, "--tokens")) { if (want_value(argc, argv, &i)) return -1; o->tokens = argv[i]; }
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) { if (want_value(argc, argv, &i)) return -1; o->out = argv[i]; }
        else if (!strcmp(a, "-n")) {
            if (want_value(argc, argv, &i) || parse_long("-n", argv[i], 0, 1 << 30, &o->n)) return -1;
        }
        else if (!strcmp(a, "--greedy")) o->greedy = 1;
        else if (!strcmp(a, "--ids")) o->ids = 1;
        else if (!strcmp(a, "--stepwise")) o->stepwise = 1;
        else if (a[0] == '-' && a[1]) return die("unknown option '%s' (see %s --help)", a, cmd_name), -1;
        else if (!o->model) o->model = a;
        else if (!o->prompt) o->prompt = a;
        else return die("unexpected argument '%s'", a), -1;
    }
    return 0;
}

/* ---- qhx logits ------------------------------------------------------------------------------ */

static const char logits_help[] =
    "usage: qhx logits MODEL --tokens 1,2,3 --out FILE [--stepwise]\n"
    "Evaluates the tokens from a fresh state and writes the fp32 little-endian logits of every\n"
    "position, row-major [T, vocab_size], to FILE (atomically).\n"
    "  MODEL       a Hugging Face checkpoint directory\n"
    "  --stepwise  feed one token at a time (recurrent path) instead of the whole sequence\n";

static int cmd_logits(int argc, char **argv) {
    opts o = {0};
    if (parse_common(argc, argv, &o)) return 2;
    if (o.help) return fputs(logits_help, stdout), 0;
    if (!o.model || !o.tokens || !o.out || o.prompt) return die("needs MODEL, --tokens and --out (see qhx logits --help)"), 2;
    int32_t *ids;
    int n;
    if (parse_tokens(o.tokens, &ids, &n)) return 2;
    qhx_model *m = NULL;
    qhx_session *s = NULL;
    float *logits = NULL;
    int rc = 1;
    if (qhx_model_open(o.model, &m) || qhx_session_new(m, &s)) { api_error(); goto done; }
    qhx_model_info info;
    qhx_model_get_info(m, &info);
    logits = malloc(sizeof(float) * (size_t)n * info.vocab_size);
    if (!logits) { die("out of memory for %d x %d logits", n, info.vocab_size); goto done; }
    if (qhx_session_eval(s, ids, n, o.stepwise ? QHX_EVAL_STEPWISE : QHX_EVAL_SEQUENCE, logits, NULL)) { api_error(); goto done; }
    rc = write_atomic(o.out, logits, sizeof(float) * (size_t)n * info.vocab_size);
done:
    free(logits);
    free(ids);
    qhx_session_free(s);
    qhx_model_close(m);
    return rc;
}

/* ---- qhx generate ---------------------------------------------------------------------------- */

static const char generate_help[] =
    "usage: qhx generate MODEL --tokens 1,2,3 [-n N] [--greedy] [--ids]\n"
    "Greedy generation from a prompt given as token ids.\n"
    "  -n N      tokens to generate (default 64)\n"
    "  --greedy  greedy decoding (the only mode for now)\n"
    "  --ids     print the generated ids space-separated on one line of stdout, nothing else\n";

typedef struct {
    int ids, count;
} gen_out;

static int on_token(int32_t tok, void *user) {
    gen_out *g = user;
    printf(g->count++ ? " %d" : "%d", tok);
    fflush(stdout);
    return 0;
}

static int cmd_generate(int argc, char **argv) {
    opts o = {.n = 64};
    if (parse_common(argc, argv, &o)) return 2;
    if (o.help) return fputs(generate_help, stdout), 0;
    if (!o.model || !o.tokens) return die("needs MODEL and --tokens (see qhx generate --help)"), 2;
    int32_t *ids;
    int n;
    if (parse_tokens(o.tokens, &ids, &n)) return 2;
    qhx_model *m = NULL;
    qhx_session *s = NULL;
    int rc = 1;
    if (qhx_model_open(o.model, &m) || qhx_session_new(m, &s)) { api_error(); goto done; }
    gen_out g = {o.ids, 0};
    qhx_generate_opts go = {.max_tokens = (int)o.n, .stop_at_eos = 0};
    double t0 = now_s();
    if (qhx_generate(s, ids, n, &go, on_token, &g)) {
        if (g.count) printf("\n");
        api_error();
        goto done;
    }
    double dt = now_s() - t0;
    printf("\n");
    if (!o.ids) fprintf(stderr, "%d prompt + %d generated tokens in %.2f s (%.1f tok/s)\n", n, g.count, dt, (n + g.count) / dt);
    rc = 0;
done:
    free(ids);
    qhx_session_free(s);
    qhx_model_close(m);
    return rc;
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
            for (int p = 0; qhx_synth_presets[p].name; p++)
                printf("  %-8s %s\n", qhx_synth_presets[p].name, qhx_synth_presets[p].about);
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

/* ---- main ------------------------------------------------------------------------------------ */

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *about;
} commands[] = {
    {"generate", cmd_generate, "generate tokens from a prompt"},
    {"logits", cmd_logits, "write the logits of every prompt position"},
    {"synth", cmd_synth, "write a random-weight checkpoint of a preset shape"},
};

static void usage(FILE *f) {
    fprintf(f, "qhx %s — Qwen3.5 runtime\nusage: qhx COMMAND [ARGS]   (qhx COMMAND --help for details)\ncommands:\n", QHX_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].about);
}

int main(int argc, char **argv) {
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
