/* The helpers every qhx subcommand shares (tools/cli.h). */
#include "util/afile.h"
#include "util/buf.h"
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *cmd_name = "qhx";

int die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cmd_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int api_error(void) { return die("%s", qhx_last_error()); }

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Strict integer parsing: the whole argument, in [lo, hi]. */
int parse_long(const char *flag, const char *s, long long lo, long long hi, long long *out) {
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

/* Strict float parsing: the whole argument, finite, in [lo, hi]. */
int parse_float(const char *flag, const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !(v >= lo && v <= hi)) {
        die("%s: '%s' is not a number in [%g, %g]", flag, s ? s : "", lo, hi);
        return -1;
    }
    *out = (float)v;
    return 0;
}

/* "1,2,3" -> ids; refuses empty items, signs, junk and anything beyond int32. `flag` names the
 * option in errors. */
int parse_ids(const char *flag, const char *s, int32_t **ids, int *n) {
    *ids = NULL;
    *n = 0;
    if (!s || !*s) return die("%s: empty list", flag), -1;
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    if (cap > (1u << 24)) return die("%s: more than %u items", flag, 1u << 24), -1;
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
    return die("%s: '%s' is not a comma-separated list of non-negative integers", flag, s), -1;
}

/* Writes a whole file under a temporary name and renames it into place (the library's one writer). */
int write_atomic(const char *path, const void *data, size_t len) {
    qhx_afile a;
    if (qhx_afile_open(&a, path, UINT64_MAX)) return api_error();
    qhx_afile_put(&a, data, len);
    return qhx_afile_close(&a, 1) ? api_error() : 0;
}

/* ---- shared option parsing ------------------------------------------------------------------- */

int want_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) return die("%s: needs a value", argv[*i]), -1;
    (*i)++;
    return 0;
}

/* flag a is one of the space-separated words of list */
static int flag_in(const char *list, const char *a) {
    const size_t n = strlen(a);
    for (const char *p = list; (p = strstr(p, a)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
    return 0;
}

/* every flag parse_common knows: only the wording of a refusal depends on it */
static const char all_flags[] =
    "-m -p --prompt -n --n-predict -t --threads --kernels --backend --mmap --kv --tokens -o --out --ctx -c --ctx-size --chunks "
    "--decode --prompts --depth -f --file --prompt-cache --system --host --api-key --cors --port --cache-mb --cache-dir --cache-dir-mb --parallel -np --timeout -to --think --no-think "
    "--verbose --temp --temperature --top-k --top-p --min-p --repeat-penalty --presence-penalty --frequency-penalty "
    "--repeat-last-n --draft --draft-max --seed -s --stop --ignore-eos --json --greedy --ids --stepwise --second-half --special "
    "--grammar --json-schema";

int parse_common(int argc, char **argv, opts *o, const char *allowed) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] && strcmp(a, "-h") && strcmp(a, "--help") && !flag_in(allowed, a))
            return (flag_in(all_flags, a) ? die("%s does not apply to %s (see %s --help)", a, cmd_name, cmd_name)
                                          : die("unknown option '%s' (see %s --help)", a, cmd_name)), -1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) o->help = 1;
        else if (!strcmp(a, "-m")) { if (want_value(argc, argv, &i)) return -1; o->model = argv[i]; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (want_value(argc, argv, &i)) return -1; o->prompt = argv[i]; }
        else if (!strcmp(a, "--tokens")) { if (want_value(argc, argv, &i)) return -1; o->tokens = argv[i]; }
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) { if (want_value(argc, argv, &i)) return -1; o->out = argv[i]; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 0, 1 << 30, &o->n)) return -1;
        }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 1, 1024, &o->threads)) return -1;
            if (cpus > 0 && o->threads > cpus) /* more threads than CPUs only take turns and wait on each other */
                return die("%s %lld: this machine has %ld online CPUs", a, o->threads, cpus), -1;
        }
        else if (!strcmp(a, "--kernels") || !strcmp(a, "--backend")) { if (want_value(argc, argv, &i)) return -1; o->kernels = argv[i]; }
        else if (!strcmp(a, "--mmap")) o->mmap = 1;
        else if (!strcmp(a, "--kv")) {
            if (want_value(argc, argv, &i)) return -1;
            if (!strcmp(argv[i], "f32")) o->kv = QHX_KV_F32;
            else if (!strcmp(argv[i], "f16")) o->kv = QHX_KV_F16;
            else if (!strcmp(argv[i], "q8")) o->kv = QHX_KV_Q8;
            else return die("--kv: '%s' is not a KV cache form (f32, f16 or q8)", argv[i]), -1;
        }
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 2, 1 << 20, &o->ctx)) return -1;
        }
        else if (!strcmp(a, "--chunks")) {
            if (want_value(argc, argv, &i) || parse_long("--chunks", argv[i], 1, 1 << 30, &o->chunks)) return -1;
        }
        else if (!strcmp(a, "--decode")) {
            if (want_value(argc, argv, &i) || parse_long("--decode", argv[i], 1, 1 << 20, &o->decode)) return -1;
        }
        else if (!strcmp(a, "--prompts")) { if (want_value(argc, argv, &i)) return -1; o->prompts = argv[i]; }
        else if (!strcmp(a, "--depth")) { if (want_value(argc, argv, &i)) return -1; o->depths = argv[i]; }
        else if (!strcmp(a, "--file") || !strcmp(a, "-f")) { if (want_value(argc, argv, &i)) return -1; o->file = argv[i]; }
        else if (!strcmp(a, "--grammar")) { if (want_value(argc, argv, &i)) return -1; o->grammar = argv[i]; }
        else if (!strcmp(a, "--json-schema")) { if (want_value(argc, argv, &i)) return -1; o->json_schema = argv[i]; }
        else if (!strcmp(a, "--prompt-cache")) { if (want_value(argc, argv, &i)) return -1; o->prompt_cache = argv[i]; }
        else if (!strcmp(a, "--system")) { if (want_value(argc, argv, &i)) return -1; o->system = argv[i]; }
        else if (!strcmp(a, "--host")) { if (want_value(argc, argv, &i)) return -1; o->host = argv[i]; }
        else if (!strcmp(a, "--api-key")) { if (want_value(argc, argv, &i)) return -1; o->api_key = argv[i]; }
        else if (!strcmp(a, "--cors")) { if (want_value(argc, argv, &i)) return -1; o->cors = argv[i]; }
        else if (!strcmp(a, "--port")) {
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 0, 65535, &o->port)) return -1;
        }
        else if (!strcmp(a, "--cache-mb")) {
            if (want_value(argc, argv, &i) || parse_long("--cache-mb", argv[i], 0, 1 << 24, &o->cache_mb)) return -1;
        }
        else if (!strcmp(a, "--cache-dir")) {
            if (want_value(argc, argv, &i)) return -1;
            if (!*argv[i]) return die("--cache-dir: empty"), -1;
            o->cache_dir = argv[i];
        }
        else if (!strcmp(a, "--cache-dir-mb")) {
            if (want_value(argc, argv, &i) || parse_long("--cache-dir-mb", argv[i], 1, 1LL << 32, &o->cache_dir_mb)) return -1;
            o->cache_dir_mb_given = 1;
        }
        else if (!strcmp(a, "--timeout") || !strcmp(a, "-to")) {
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 1, 86400, &o->timeout)) return -1;
        }
        else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) {
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 1, 64, &o->parallel)) return -1;
        }
        else if (!strcmp(a, "--think")) o->think = 1;
        else if (!strcmp(a, "--verbose")) o->verbose = 1;
        else if (!strcmp(a, "--no-think")) o->think = 0;
        else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) {
            if (want_value(argc, argv, &i) || parse_float(a, argv[i], 0, 100, &o->gen.temperature)) return -1;
        }
        else if (!strcmp(a, "--top-k")) {
            long long v;
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 0, INT_MAX, &v)) return -1;
            o->gen.top_k = (int)v;
        }
        else if (!strcmp(a, "--top-p")) { if (want_value(argc, argv, &i) || parse_float(a, argv[i], 0, 1, &o->gen.top_p)) return -1; }
        else if (!strcmp(a, "--min-p")) { if (want_value(argc, argv, &i) || parse_float(a, argv[i], 0, 1, &o->gen.min_p)) return -1; }
        else if (!strcmp(a, "--repeat-penalty")) {
            if (want_value(argc, argv, &i) || parse_float(a, argv[i], 0, 100, &o->gen.repeat_penalty)) return -1;
        }
        else if (!strcmp(a, "--presence-penalty")) {
            if (want_value(argc, argv, &i) || parse_float(a, argv[i], -100, 100, &o->gen.presence_penalty)) return -1;
        }
        else if (!strcmp(a, "--frequency-penalty")) {
            if (want_value(argc, argv, &i) || parse_float(a, argv[i], -100, 100, &o->gen.frequency_penalty)) return -1;
        }
        else if (!strcmp(a, "--repeat-last-n")) {
            long long v;
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], -1, 1 << 24, &v)) return -1;
            o->gen.penalty_window = v == 0 ? 1 : (int)v;
        }
        else if (!strcmp(a, "--draft")) {
            if (want_value(argc, argv, &i)) return -1;
            if (!strcmp(argv[i], "ngram")) o->gen.draft = QHX_DRAFT_NGRAM;
            else if (!strcmp(argv[i], "none")) o->gen.draft = QHX_DRAFT_NONE;
            else if (!strcmp(argv[i], "mtp")) o->gen.draft = QHX_DRAFT_MTP;
            else return die("--draft: '%s' is not a drafter (ngram, mtp or none)", argv[i]), -1;
        }
        else if (!strcmp(a, "--draft-max")) {
            long long v;
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 1, QHX_MAX_DRAFT, &v)) return -1;
            o->gen.draft_max = (int)v;
        }
        else if (!strcmp(a, "--seed") || !strcmp(a, "-s")) {
            long long v;
            if (want_value(argc, argv, &i) || parse_long(a, argv[i], 0, LLONG_MAX, &v)) return -1;
            o->gen.seed = (uint64_t)v;
            o->seed_set = 1;
        }
        else if (!strcmp(a, "--stop")) {
            if (want_value(argc, argv, &i)) return -1;
            if (o->gen.n_stop == QHX_MAX_STOP) return die("--stop: at most %d stop strings", QHX_MAX_STOP), -1;
            size_t L = strlen(argv[i]);
            if (!L || L > QHX_MAX_STOP_BYTES) return die("--stop: a stop string has 1 to %d bytes", QHX_MAX_STOP_BYTES), -1;
            o->stop[o->gen.n_stop++] = argv[i];
            o->gen.stop = o->stop;
        }
        else if (!strcmp(a, "--ignore-eos")) o->gen.ignore_eos = 1;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--greedy")) o->greedy = 1;
        else if (!strcmp(a, "--ids")) o->ids = 1;
        else if (!strcmp(a, "--stepwise")) o->stepwise = 1;
        else if (!strcmp(a, "--second-half")) o->second_half = 1;
        else if (!strcmp(a, "--special")) o->special = 1;
        else if (a[0] == '-' && a[1]) return die("unknown option '%s' (see %s --help)", a, cmd_name), -1;
        else if (!o->model) o->model = a;
        else if (!o->prompt) o->prompt = a;
        else return die("unexpected argument '%s'", a), -1;
    }
    return 0;
}

void default_seed(opts *o) {
    if (o->seed_set) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    o->gen.seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 32;
    o->gen.seed &= (uint64_t)LLONG_MAX; /* so --seed can repeat it */
}

const char *kv_name(qhx_kv_form form) { return form == QHX_KV_F32 ? "f32" : form == QHX_KV_Q8 ? "q8" : "f16"; }

/* The runtime the options ask for, and the model on it. */
int open_model(const opts *o, qhx_runtime **rt, qhx_model **m) {
    qhx_runtime_opts ro = {.kernels = o->kernels, .n_threads = (int)o->threads, .progress = isatty(2) ? cli_progress : NULL,
                           .map_weights = o->mmap, .kv_cache = o->kv};
    *m = NULL;
    if (qhx_runtime_new(&ro, rt)) return api_error();
    if (qhx_model_open(*rt, o->model, m)) return api_error();
    qhx_model_info mi;
    qhx_model_get_info(*m, &mi);
    if (o->gen.draft == QHX_DRAFT_MTP && !mi.mtp_layers)
        return die("--draft mtp: %s has no MTP head (no mtp.* tensors, or a bundle forged without them); try --draft ngram",
                   o->model);
    return 0;
}

int check_cache_dir(const opts *o) {
    if (!o->cache_dir && o->cache_dir_mb_given) return die("--cache-dir-mb: needs --cache-dir"), 1;
    if (o->cache_dir && !o->cache_mb) return die("--cache-dir: the prefix cache is off (--cache-mb 0)"), 1;
    return 0;
}

int open_cache_dir(qhx_prefix_cache *pc, const opts *o) {
    if (!o->cache_dir) return 0;
    if (qhx_prefix_cache_set_dir(pc, o->cache_dir, (uint64_t)o->cache_dir_mb << 20)) return api_error(), 1;
    return 0;
}

void close_model(qhx_runtime *rt, qhx_model *m, qhx_session *s) {
    qhx_session_free(s);
    qhx_model_close(m);
    qhx_runtime_free(rt);
}

/* ---- bounded input ---- */

char *read_text(const char *path, size_t *len) {
    const char *name = path && strcmp(path, "-") ? path : "stdin";
    FILE *f = path && strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return die("%s: %s", name, strerror(errno)), NULL;
    qhx_buf b = {0};
    char chunk[1 << 16];
    for (size_t k; !b.oom && b.len <= QHX_MAX_TEXT_BYTES && (k = fread(chunk, 1, sizeof chunk, f)) > 0;) qhx_buf_append(&b, chunk, k);
    int err = f != stdin && ferror(f);
    if (f != stdin) fclose(f);
    if (!b.s && !b.oom) qhx_buf_append(&b, "", 0);
    if (b.oom) return qhx_buf_free(&b), die("%s: out of memory", name), NULL;
    char *buf = b.s;
    size_t n = b.len;
    if (err) return free(buf), die("%s: read error", name), NULL;
    if (n > QHX_MAX_TEXT_BYTES)
        return free(buf), die("%s: more than %u MiB of text (the limit of one prompt)", name, QHX_MAX_TEXT_BYTES >> 20), NULL;
    buf[n] = 0;
    *len = n;
    return buf;
}

int each_stdin_line(line_fn fn, void *user) {
    size_t cap = 1 << 12, n = 0;
    char *line = malloc(cap);
    int rc = 0, c = 0;
    long lineno = 1;
    if (!line) return die("stdin: out of memory");
    while (!rc && c != EOF) {
        n = 0;
        while ((c = getc_unlocked(stdin)) != EOF) { /* unlocked: one call per byte */
            if (n + 1 >= cap) {
                if (cap > QHX_MAX_TEXT_BYTES) { rc = die("stdin line %ld: longer than %u MiB", lineno, QHX_MAX_TEXT_BYTES >> 20); break; }
                if (qhx_reserve(&line, &cap, 2 * cap, 1)) { rc = die("stdin: out of memory"); break; }
            }
            line[n++] = (char)c;
            if (c == '\n') break;
        }
        if (!rc && n) rc = fn(line, n, lineno++, user);
    }
    free(line);
    return rc;
}

/* ---- thinking models ---- */

static const char THINK_END[] = "</think>";

void think_split_feed(think_split *ts, const char *t, size_t n, char *reasoning, size_t *n_reasoning, char *answer,
                      size_t *n_answer) {
    for (size_t i = 0; i < n; i++) {
        const char ch = t[i];
        if (ts->in_reasoning) {
            ts->hold[ts->n_hold++] = ch;
            if (memcmp(ts->hold, THINK_END, ts->n_hold)) { /* not a prefix of </think>: release up to one that is */
                size_t k = 1;
                while (k < ts->n_hold && memcmp(ts->hold + k, THINK_END, ts->n_hold - k)) k++;
                memcpy(reasoning + *n_reasoning, ts->hold, k);
                *n_reasoning += k;
                memmove(ts->hold, ts->hold + k, ts->n_hold - k);
                ts->n_hold -= k;
            } else if (ts->n_hold == sizeof THINK_END - 1) {
                ts->in_reasoning = 0;
                ts->n_hold = 0;
            }
        } else {
            if (!ts->answer_started && ch == '\n') continue; /* the template puts "\n\n" after </think> */
            ts->answer_started = 1;
            answer[(*n_answer)++] = ch;
        }
    }
}

void cli_progress(const char *what, uint64_t done, uint64_t total, void *user) {
    (void)user;
    if (done >= total) fprintf(stderr, "\r\033[K");
    else fprintf(stderr, "\r%s %5.1f%% of %.2f GB", what, 100.0 * (double)done / (double)total, total / 1e9);
}

int open_grammar(const opts *o, qhx_model *m, qhx_grammar **g) {
    *g = NULL;
    if (!o->grammar && !o->json_schema) return 0;
    if (o->grammar && o->json_schema) return die("--grammar and --json-schema: choose one"), 1;
    const char *path = o->grammar ? o->grammar : o->json_schema;
    size_t len;
    char *text = read_text(path, &len);
    if (!text) return 1;
    qhx_tokenizer *tok;
    qhx_status rc = qhx_model_tokenizer(m, &tok);
    if (!rc) rc = o->grammar ? qhx_grammar_from_gbnf(tok, text, len, g) : qhx_grammar_from_json_schema(tok, text, len, g);
    free(text);
    if (rc) return die("%s: %s", path, qhx_last_error()), 1;
    return 0;
}
