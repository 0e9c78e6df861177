/*
 * qhx — the qhexrt command line. One binary, one subcommand per job, each in its own file
 * (tools/cmd_*.c, chat.c, serve.c); built only on the public API (include/qhexrt.h) plus the forge
 * and tokenizer entry points. This file is the command table; tools/main.c the program.
 */
#include "cli.h"
#include "qhexrt.h"

#include <stdio.h>
#include <string.h>

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
    {"forge", cmd_forge, "forge a checkpoint or GGUF into a gated W8 bundle"},
    {"inspect", cmd_inspect, "summarise a bundle, checkpoint or GGUF: plan, sizes, gates, state"},
    {"perplexity", cmd_perplexity, "perplexity of a model on a text file"},
    {"bench", cmd_bench, "prefill and decode speed against the machine's memory bandwidth"},
};

static void usage(FILE *f) {
    fprintf(f, "qhx %s — Qwen3.5 runtime\nusage: qhx COMMAND [ARGS]   (qhx help COMMAND, or qhx COMMAND --help, for details)\ncommands:\n", QHX_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].about);
    fprintf(f, "MODEL: a Hugging Face checkpoint directory, a bundle (its directory or manifest.json), or a GGUF\n"
               "file of llama.cpp's qwen35 architecture (any of F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,\n"
               "Q4_K, Q5_K, Q6_K; its weights are decoded to fp32 at open, so forging it into a bundle is the\n"
               "way to run it at speed).\n");
}

int qhx_main(int argc, char **argv) {
    const char *base = strrchr(argv[0], '/');
    if (!strcmp(base ? base + 1 : argv[0], "qhx_generate")) {
        cmd_name = "qhx_generate";
        return qhx_generate_positional(argc, argv);
    }
    if (argc < 2) return usage(stderr), 2;
    if (!strcmp(argv[1], "help") && argc == 3) { /* qhx help CMD: that command's --help */
        static char *help_argv[3] = {NULL, NULL, "--help"};
        help_argv[0] = argv[0], help_argv[1] = argv[2];
        return qhx_main(3, help_argv);
    }
    if (!strcmp(argv[1], "help") && argc > 3) return die("help: one command at a time (qhx help COMMAND)"), 2;
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
