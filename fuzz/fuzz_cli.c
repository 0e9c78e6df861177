/* the CLI's argument parsing (numbers, id lists, flags): the input, split at NUL bytes, is the
 * argument list of a model command (the CLI as a library, tools/cli.h) whose MODEL does not exist, so parsing is all that runs.
 * Run with -close_fd_mask=3: nearly every input ends in a one-line error on stderr. */
#include "../tools/cli.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    static const char *const cmds[] = {"generate", "logits", "inspect", "perplexity", "bench", "chat", "serve"};
    if (n < 1 || n > 4096) return 0;
    char *buf = malloc(n + 1);
    char *args[64];
    int argc = 0;
    if (!buf) return 0;
    memcpy(buf, p + 1, n - 1);
    buf[n - 1] = 0;
    args[argc++] = "qhx";
    args[argc++] = (char *)cmds[p[0] % 7];
    args[argc++] = "/nonexistent/qhx-fuzz-model";
    for (char *s = buf; s < buf + n - 1 && argc < 63; s += strlen(s) + 1)
        if (*s && strcmp(s, "-h") && strcmp(s, "--help")) args[argc++] = s; /* help prints to stdout, no news */
    args[argc] = NULL;
    qhx_main(argc, args);
    free(buf);
    return 0;
}
