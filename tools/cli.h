/* What the qhx subcommands share: error reporting, strict argument parsing, the common options
 * and bounded input readers. Built only on the public API. */
#ifndef QHX_CLI_H
#define QHX_CLI_H

#include "qhexrt.h"

#include <stddef.h>
#include <stdint.h>

extern const char *cmd_name;

int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int api_error(void);
double now_s(void);
int parse_long(const char *flag, const char *s, long long lo, long long hi, long long *out);
int parse_float(const char *flag, const char *s, double lo, double hi, float *out);
int parse_ids(const char *flag, const char *s, int32_t **ids, int *n);
/* Steps *i to the value of flag argv[*i]; fails (reported) when there is none. */
int want_value(int argc, char **argv, int *i);
int write_atomic(const char *path, const void *data, size_t len);

typedef struct {
    const char *model, *tokens, *out, *prompt, *kernels, *prompts, *file, *system, *host, *prompt_cache, *api_key, *cors, *depths, *grammar, *json_schema, *cache_dir;
    long long n, threads, ctx, chunks, decode, port, parallel, cache_mb, cache_dir_mb, timeout;
    int cache_dir_mb_given, greedy, ids, stepwise, special, json, help, think, seed_set, mmap, verbose, second_half;
    qhx_kv_form kv;                       /* --kv */
    qhx_generate_opts gen;                /* sampling flags */
    const char *stop[QHX_MAX_STOP];
} opts;

/* Parses the flags into o; non-flags (or -m, -p) fill model, then prompt. `allowed`: the
 * space-separated flags this command uses (every spelling; -h/--help always): any other known
 * flag is refused by name rather than accepted and ignored. */
int parse_common(int argc, char **argv, opts *o, const char *allowed);
#define RUNTIME_FLAGS " -t --threads --kernels --backend --mmap --kv "
#define SAMPLING_FLAGS                                                                                             \
    " --temp --temperature --top-k --top-p --min-p --repeat-penalty --repeat-last-n --presence-penalty"           \
    " --frequency-penalty --seed -s --stop --ignore-eos --draft --draft-max "
/* The library's progress reports as one line on stderr, rewritten in place (for a terminal). */
void cli_progress(const char *what, uint64_t done, uint64_t total, void *user);
/* A seed from the clock unless --seed gave one. */
void default_seed(opts *o);
int open_model(const opts *o, qhx_runtime **rt, qhx_model **m);
/* --cache-dir and --cache-dir-mb: check_cache_dir refuses a combination that would leave one
 * unused (1, reported), open_cache_dir puts the directory on the prefix cache (1 on failure,
 * reported, naming it). */
int check_cache_dir(const opts *o);
int open_cache_dir(qhx_prefix_cache *pc, const opts *o);
#define CACHE_DIR_HELP \
    "  --cache-dir DIR  keep the prefix cache's snapshots as state files in DIR too (created if\n" \
    "                 missing), so the next run on this model resumes long prompts from them\n" \
    "                 (checked as they are read; other models' files are left alone)\n" \
    "  --cache-dir-mb N  the most the files in DIR may take (default 8192); the least worth go\n"
/* "f32", "f16" or "q8", as --kv spells them */
const char *kv_name(qhx_kv_form form);
/* Frees a session, its model and their runtime, in that order (any may be NULL). */
void close_model(qhx_runtime *rt, qhx_model *m, qhx_session *s);
/* --grammar FILE (GBNF) or --json-schema FILE compiled for m's tokenizer into *g (NULL when
 * neither was given); 1 on failure (reported, naming the file). */
int open_grammar(const opts *o, qhx_model *m, qhx_grammar **g);
#define GRAMMAR_HELP \
    "  --grammar FILE         constrain the output to a grammar in llama.cpp's GBNF (start rule root)\n" \
    "  --json-schema FILE     constrain the output to JSON a JSON Schema accepts (docs/usage.md lists\n" \
    "                         the keywords; others are refused by name)\n"

#define RUNTIME_HELP \
    "  -t N         threads (default: every core)\n" \
    "  --mmap       map a bundle's weights from the page cache instead of reading them in (shared\n" \
    "               between processes; slower where TLB misses are dear, as on virtual machines)\n" \
    "  --kv F       the KV cache's form: f32, f16 (half the bytes) or q8 (int8 blocks of 32 with a\n" \
    "               scale, 0.28 of them); default f16 (greedy-exact against f32 on the tests)\n" \
    KERNELS_HELP

/* the sets this build has (kernels/sets.c) */
#ifdef __aarch64__
#define KERNELS_HELP \
    "  --kernels K  auto (default: the first this CPU runs of neon-i8mm, neon, scalar), neon-i8mm\n" \
    "               (smmla), neon (sdot), scalar (the portable twin), ref (the fp32 reference).\n" \
    "               Activations follow the weights:\n" \
    "               int16 for W8 (greedy-exact against fp32), int8 for W4, fp32 for the rest\n"
#else
#define KERNELS_HELP \
    "  --kernels K  auto (default: the first this CPU runs of avx512, avx2, scalar), avx512\n" \
    "               (AVX-512 VNNI), avx2, scalar (the portable twin), ref (the fp32 reference).\n" \
    "               Activations follow the weights: int16 for W8 (greedy-exact against fp32),\n" \
    "               int8 for W4, fp32 for the rest\n"
#endif

#define SAMPLING_HELP \
    "sampling (default greedy):\n" \
    "  --temp F               temperature; 0 = greedy\n" \
    "  --top-k N              keep the N most probable tokens (0 = off)\n" \
    "  --top-p F              nucleus: the smallest set holding F of the probability (1 = off)\n" \
    "  --min-p F              drop tokens below F x the top token's probability (0 = off)\n" \
    "  --repeat-penalty F     penalise tokens in the last --repeat-last-n (1 = off)\n" \
    "  --repeat-last-n N      window of the penalties (default 64; -1 = everything)\n" \
    "  --presence-penalty F   subtract F once per token in the window\n" \
    "  --frequency-penalty F  subtract F per occurrence in the window\n" \
    "  --seed N               random seed (default: from the clock; printed with --json)\n" \
    "  --stop S               stop where the text S appears (repeatable, up to 16)\n" \
    "  --ignore-eos           keep going past the model's end-of-turn tokens\n" \
    "  --draft ngram|mtp|none speculative decoding: draft tokens by looking the context up (ngram)\n" \
    "                         or with the model's MTP head (mtp), verify them in one pass; the\n" \
    "                         same output, faster where the drafts are kept\n" \
    "  --draft-max N          tokens drafted per step at most (default 8, at most 16; mtp 15)\n"

/* Reads all of stdin (or a file), at most QHX_MAX_TEXT_BYTES: a larger input fails with a message
 * naming it, after reading no more than the limit. NULL on failure (reported). */
char *read_text(const char *path, size_t *len);

/* Calls fn on every line of stdin (1-based numbers) until fn fails; lines over QHX_MAX_TEXT_BYTES
 * fail. Returns fn's code or 1. */
typedef int (*line_fn)(const char *line, size_t len, long lineno, void *user);
int each_stdin_line(line_fn fn, void *user);

/* Splits a thinking model's output, as it streams, into reasoning (up to </think>, which is
 * dropped) and the answer (its leading newlines dropped). Text that could be the start of
 * </think> is held until it is or is not. */
typedef struct {
    int in_reasoning;     /* set it when the prompt opened a <think> block */
    int answer_started;
    char hold[8];
    size_t n_hold;
} think_split;

/* Appends the bytes of t to reasoning or answer (each needs room for n more bytes). */
void think_split_feed(think_split *ts, const char *t, size_t n, char *reasoning, size_t *n_reasoning, char *answer,
                      size_t *n_answer);

/* The commands, one file each (tools/cmd_*.c, chat.c, serve.c): argc/argv from the command's name
 * on; the exit status (0, 1 a failure, 2 a usage error). */
int cmd_generate(int argc, char **argv);
int qhx_generate_positional(int argc, char **argv); /* the seed's qhx_generate: argv[0] is the program */
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_forge(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* The whole command line (tools/qhx.c): what main runs, and what fuzz/fuzz_cli.c feeds. */
int qhx_main(int argc, char **argv);

#endif
