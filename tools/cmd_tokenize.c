/* qhx tokenize, detokenize and template: the tokenizer and the chat format as filters on stdin. */
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

int cmd_tokenize(int argc, char **argv) {
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

int cmd_detokenize(int argc, char **argv) {
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

int cmd_template(int argc, char **argv) {
    int jsonl = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return fputs(template_help, stdout), 0;
        if (!strcmp(argv[i], "--jsonl")) jsonl = 1;
        else return die("unknown argument '%s' (see qhx template --help)", argv[i]), 2;
    }
    if (!jsonl) return die("needs --jsonl (see qhx template --help)"), 2;
    return each_stdin_line(template_line, NULL);
}
