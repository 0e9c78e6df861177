/* pty_drive SCRIPT CMD [ARGS...]: runs CMD on a pseudo-terminal and plays SCRIPT against it, the way
 * a person at a terminal would (expect-style). Script lines:
 *   expect TEXT   wait (up to 120 s) until TEXT appears in the output after the last match
 *   send TEXT     type TEXT; \n is Enter, \x03 is Ctrl-C
 *   sleep MS      pause
 *   exit CODE     wait for CMD to end and require its exit status
 * Every wait is multiplied by $QHX_SLOW (tests/lib.sh sets it under memcheck).
 * The whole transcript goes to stdout. Exits 0 when every step held, 1 otherwise (saying which). */
#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char out[1 << 22];
static size_t n_out, matched;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads whatever the program has written within ms milliseconds; -1 at its end. */
static int pump(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, ms);
    if (r <= 0) return 0;
    char buf[4096];
    ssize_t k = read(fd, buf, sizeof buf);
    if (k <= 0) return -1;
    fwrite(buf, 1, (size_t)k, stdout);
    fflush(stdout);
    if (n_out + (size_t)k < sizeof out) memcpy(out + n_out, buf, (size_t)k), n_out += (size_t)k;
    return 1;
}

static void unescape(char *s) {
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] == 'n') { *w++ = '\n'; r++; }
        else if (r[0] == '\\' && r[1] == 'x' && r[2] && r[3]) {
            char hex[3] = {r[2], r[3], 0};
            *w++ = (char)strtol(hex, NULL, 16);
            r += 3;
        } else *w++ = *r;
    }
    *w = 0;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: pty_drive SCRIPT CMD [ARGS...]\n"); return 2; }
    FILE *script = fopen(argv[1], "r");
    if (!script) { perror(argv[1]); return 2; }
    const double slow = getenv("QHX_SLOW") && atof(getenv("QHX_SLOW")) >= 1 ? atof(getenv("QHX_SLOW")) : 1;
    int fd;
    struct winsize ws = {.ws_row = 40, .ws_col = 120};
    pid_t pid = forkpty(&fd, NULL, NULL, &ws);
    if (pid < 0) { perror("forkpty"); return 2; }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        perror(argv[2]);
        _exit(127);
    }
    char line[4096];
    int lineno = 0, failed = 0, ended = 0, status = 0;
    while (!failed && fgets(line, sizeof line, script)) {
        lineno++;
        line[strcspn(line, "\n")] = 0;
        char *arg = strchr(line, ' ');
        if (arg) *arg++ = 0; else arg = line + strlen(line);
        unescape(arg);
        if (!strcmp(line, "expect")) {
            double until = now() + 120 * slow;
            char *hit;
            out[n_out] = 0;
            while (!(hit = memmem(out + matched, n_out - matched, arg, strlen(arg)))) {
                if (now() > until || pump(fd, 100) < 0) break;
            }
            if (!hit) { fprintf(stderr, "\npty_drive: line %d: never saw '%s'\n", lineno, arg); failed = 1; }
            else matched = (size_t)(hit - out) + strlen(arg);
        } else if (!strcmp(line, "send")) {
            if (write(fd, arg, strlen(arg)) != (ssize_t)strlen(arg)) { fprintf(stderr, "pty_drive: write failed\n"); failed = 1; }
        } else if (!strcmp(line, "sleep")) {
            double until = now() + atoi(arg) / 1000.0 * slow;
            while (now() < until && pump(fd, 20) >= 0) {}
        } else if (!strcmp(line, "exit")) {
            double until = now() + 60 * slow;
            while (pump(fd, 100) >= 0 && now() < until) {}
            if (waitpid(pid, &status, 0) != pid) { perror("waitpid"); failed = 1; }
            ended = 1;
            int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            if (code != atoi(arg)) { fprintf(stderr, "\npty_drive: line %d: exit status %d, want %s\n", lineno, code, arg); failed = 1; }
        } else if (line[0] && line[0] != '#') {
            fprintf(stderr, "pty_drive: line %d: unknown step '%s'\n", lineno, line);
            failed = 1;
        }
    }
    fclose(script);
    if (!ended) { kill(pid, SIGKILL); waitpid(pid, &status, 0); }
    return failed;
}
