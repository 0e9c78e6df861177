/* Qwen3.5 tool calls read out of replies (tools/tool_calls.c), on recorded texts in the template's
 * format, the failure modes other runtimes' users reported included (an omitted <tool_call>
 * opener, Ollama #18530; a missing </parameter>; arguments in any order, ik_llama.cpp #1369;
 * several calls), values typed by the tool's schema; and every text read in pieces of every size
 * gives exactly what reading it whole gives. */
#include "testlib.h"
#include "tool_calls.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char text[4096];
    size_t n;
    char calls[4096]; /* name(args) ... */
} seen;

static void on_text(void *user, const char *s, size_t n) {
    seen *x = user;
    memcpy(x->text + x->n, s, n);
    x->n += n;
    x->text[x->n] = 0;
}

static void on_call(void *user, const char *name, json_t *args) {
    seen *x = user;
    char *a = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    snprintf(x->calls + strlen(x->calls), sizeof x->calls - strlen(x->calls), "%s%s", name, a);
    free(a);
}

static json_t *tools;

static void read_in_pieces(const char *text, size_t piece, int final, seen *x) {
    memset(x, 0, sizeof *x);
    tc_stream st = {0};
    const size_t n = strlen(text);
    for (size_t end = piece ? piece : n; end < n; end += piece) tc_scan(&st, text, end, TC_RUNNING, tools, on_text, on_call, x);
    tc_scan(&st, text, n, final, tools, on_text, on_call, x);
}

/* the text and calls read from a reply that ended as `final` says, whole and in pieces of 1-39 */
static void expect_as(const char *what, int final, const char *text, const char *want_text, const char *want_calls) {
    seen whole, part;
    read_in_pieces(text, 0, final, &whole);
    CHECK(!strcmp(whole.text, want_text), "%s: text '%s', want '%s'", what, whole.text, want_text);
    CHECK(!strcmp(whole.calls, want_calls), "%s: calls '%s', want '%s'", what, whole.calls, want_calls);
    for (size_t piece = 1; piece < 40; piece++) {
        read_in_pieces(text, piece, final, &part);
        CHECK(!strcmp(part.text, whole.text) && !strcmp(part.calls, whole.calls), "%s in pieces of %zu: '%s' / '%s'", what, piece,
              part.text, part.calls);
    }
}

static void expect(const char *what, const char *text, const char *want_text, const char *want_calls) {
    expect_as(what, TC_END, text, want_text, want_calls);
}

int main(void) {
    tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                       "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"metric\":{\"type\":\"boolean\"},"
                       "\"zip\":{\"type\":\"string\"},\"opts\":{\"type\":\"object\"},\"tags\":{\"type\":[\"array\",\"null\"]},"
                       "\"ratio\":{\"type\":\"number\"}}}}}]", 0, NULL);
    expect("no call", "The weather is fine.\n\nIt <is> not <tool a call.", "The weather is fine.\n\nIt <is> not <tool a call.", "");
    expect("one call after text",
           "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
           "</parameter>\n</function>\n</tool_call>",
           "Let me check.", "get_weather{\"city\":\"Paris\",\"days\":3}");
    expect("typed by schema: a digit string stays a string, booleans, objects, arrays, numbers",
           "<tool_call>\n<function=get_weather>\n<parameter=zip>\n75001\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
           "<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=tags>\n[\"x\"]\n</parameter>\n<parameter=ratio>\n0.5\n"
           "</parameter>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>",
           "", "get_weather{\"zip\":\"75001\",\"metric\":true,\"opts\":{\"a\":[1,2]},\"tags\":[\"x\"],\"ratio\":0.5,\"days\":\"three\"}");
    expect("an integer written 2.0 is the integer 2 (JSON Schema counts it integral); 2.5 stays text",
           "<tool_call>\n<function=get_weather>\n<parameter=days>\n2.0\n</parameter>\n</function>\n</tool_call>"
           "<tool_call>\n<function=get_weather>\n<parameter=days>\n2.5\n</parameter>\n</function>\n</tool_call>",
           "", "get_weather{\"days\":2}get_weather{\"days\":\"2.5\"}");
    expect("two calls, arguments in the model's order",
           "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n<parameter=city>\nOslo\n</parameter>\n</function>\n"
           "</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
           "", "get_weather{\"days\":2,\"city\":\"Oslo\"}get_weather{\"city\":\"Rome\"}");
    expect("the <tool_call> opener left out (Ollama #18530)",
           "Sure.\n<function=get_weather>\n<parameter=city>\nLima\n</parameter>\n</function>", "Sure.",
           "get_weather{\"city\":\"Lima\"}");
    expect("</parameter> and </tool_call> left out",
           "<tool_call>\n<function=lookup>\n<parameter=q>\nfirst line\nsecond line\n<parameter=n>\n5\n</function>",
           "", "lookup{\"q\":\"first line\\nsecond line\",\"n\":5}");
    expect("an unknown tool: values that parse as JSON are JSON",
           "<tool_call>\n<function=other>\n<parameter=x>\n\"quoted\"\n</parameter>\n<parameter=y>\nnull\n</parameter>\n</function>\n</tool_call>",
           "", "other{\"x\":\"\\\"quoted\\\"\",\"y\":null}");
    expect("cut off mid-call (max_tokens): text", "Checking <tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
           "Checking <tool_call>\n<function=get_weather>\n<parameter=city>\nPar", "");
    expect("not a call: garbage inside", "<tool_call>\nhello\n</tool_call> done", "<tool_call>\nhello\n</tool_call> done", "");
    expect("a function tag with a space in its name line", "<function=a b\n>x</function>", "<function=a b\n>x</function>", "");
    expect("text after a call stays text",
           "<tool_call>\n<function=f>\n</function>\n</tool_call>\nDone.", "Done.", "f{}");
    /* cut short by max_tokens mid-call: the whole calls and the text before stay, the unfinished
     * call is dropped (ended by the model, the same text is text: it never became a call) */
    const char *cut_mid = "Two.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>\n"
                          "<tool_call>\n<function=get_weather>\n<parameter=city>\nBa";
    expect_as("cut mid-call", TC_CUT, cut_mid, "Two.", "get_weather{\"city\":\"Oslo\"}");
    expect_as("cut at a call's opener", TC_CUT, "Look: <tool_call>\n<func", "Look:", "");
    expect_as("cut in plain text", TC_CUT, "In the beginning <tool", "In the beginning <tool", "");
    expect_as("cut after a whole call", TC_CUT, "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
              "", "get_weather{\"days\":2}");
    expect("ended mid-call by the model", "Look: <tool_call>\n<function=get_weather>\n<parameter=city>\nBa",
           "Look: <tool_call>\n<function=get_weather>\n<parameter=city>\nBa", "");
    json_decref(tools);
    return tl_finish("tool_calls");
}
