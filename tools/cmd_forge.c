/* qhx synth and qhx forge: random-weight checkpoints, and checkpoints forged into gated W8 bundles. */
#include "cli.h"
#include "qhexrt.h"
#include "qhexrt_tools.h"

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
static void print_line(const char *line, void *user) {
    (void)user;
    puts(line);
}

/* ---- qhx synth ------------------------------------------------------------------------------- */

static const char synth_help_head[] =
    "usage: qhx synth --preset NAME --seed N --out DIR [--bundle w8|w4 [--lmhead f16|w8|w4] [--context-len N]] [--force]\n"
    "Writes a Hugging Face checkpoint (config.json + safetensors, sharded when large) with seeded\n"
    "random weights, with the MTP head real Qwen3.5 checkpoints carry (mtp.*). Streams to disk;\n"
    "the directory appears only when complete.\n"
    "  --bundle w8|w4   write a bundle instead, its weights drawn as they are quantized (no BF16\n"
    "                   copy on disk: how the MoE shapes fit; no tokenizer, no gates)\n"
    "  --lmhead f16|w8|w4  the bundle's lm-head (default f16, as qhx forge)\n"
    "  --context-len N  the bundle's positions (default 4096)\n"
    "  --force          replace an existing DIR\n"
    "presets:\n";

int cmd_synth(int argc, char **argv) {
    const char *preset = NULL, *out = NULL, *bundle = NULL, *lmhead = NULL;
    long long seed = 0, ctx = 0;
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
        else if (!strcmp(a, "--bundle")) { if (want_value(argc, argv, &i)) return 2; bundle = argv[i]; }
        else if (!strcmp(a, "--lmhead")) { if (want_value(argc, argv, &i)) return 2; lmhead = argv[i]; }
        else if (!strcmp(a, "--context-len")) { if (want_value(argc, argv, &i) || parse_long("--context-len", argv[i], 1, INT_MAX, &ctx)) return 2; }
        else return die("unknown argument '%s' (see qhx synth --help)", a), 2;
    }
    if (!preset || !out) return die("needs --preset and --out (see qhx synth --help)"), 2;
    if ((ctx || lmhead) && !bundle) return die("%s is a bundle's (add --bundle w8|w4)", ctx ? "--context-len" : "--lmhead"), 2;
    if (bundle) {
        qhx_forge_opts fo = {.synth = preset, .seed = (uint64_t)seed, .out = out, .weights = bundle, .lmhead = lmhead, .force = force,
                             .context_len = (int)ctx, .progress = isatty(2) ? cli_progress : NULL, .report = print_line};
        return qhx_forge(&fo) ? api_error() : 0;
    }
    if (qhx_synth(preset, (uint64_t)seed, out, force, isatty(2) ? cli_progress : NULL, NULL)) return api_error();
    return 0;
}

/* ---- qhx forge ------------------------------------------------------------------------------- */

static const char forge_help[] =
    "usage: qhx forge (CHECKPOINT | FILE.gguf) -o BUNDLE [--max-context-bytes N] [--context-len N]\n"
    "                 [--weights w8|w4] [--lmhead f16|w8|w4] [--no-gate] [--gate-tokens N] [--gate-trials N] [--force] [-t N] [--kernels K]\n"
    "Forges a Hugging Face checkpoint, or a GGUF of llama.cpp's qwen35 (its weights decoded exactly\n"
    "and the converter's changes undone), into a bundle: W8 (or W4) decode shards by layer range (as\n"
    "few as fit the per-shard ceiling), an fp16 embedding, an fp16 (or W8, or W4) lm-head, the MTP head (a\n"
    "file of its own) when the source has one, the tokenizer and a manifest. Then gates it against\n"
    "the fp32 reference (the source's own weights): each shard on random hidden states, and greedy\n"
    "generation end to end. A failed gate fails the forge; nothing is left behind.\n"
    "  --max-context-bytes N  per-shard ceiling (default 2147483648: the 4B shape -> 2 shards)\n"
    "  --context-len N        positions a session may use (default min(max_position_embeddings, 4096))\n"
    "  --weights w8|w4        decoder matrices: int8 with a scale a row (default), or 4-bit codes with an\n"
    "                         fp16 scale every 32 columns (half the bytes a token; docs/bundle.md)\n"
    "  --lmhead f16|w8|w4     lm-head precision (default f16; a tied f16 head is the embedding file)\n"
    "  --no-gate              skip the gates (and read a GGUF a row at a time: less memory than its fp32)\n"
    "  --gate-tokens N        greedy gate tokens per prompt (default 64)\n"
    "  --gate-trials N        export gate random inputs per shard (default 5)\n"
    "  --force                replace an existing BUNDLE (only once the new one is complete)\n" RUNTIME_HELP;

int cmd_forge(int argc, char **argv) {
    qhx_forge_opts fo = {.gate = 1, .progress = isatty(2) ? cli_progress : NULL, .report = print_line};
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
        else if (!strcmp(a, "--weights")) { if (want_value(argc, argv, &i)) return 2; fo.weights = argv[i]; }
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
    int rc = qhx_forge(&fo) ? api_error() : 0;
    qhx_runtime_free(rt);
    if (!rc) printf("bundle written to %s\n", fo.out);
    return rc;
}
