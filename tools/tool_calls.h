/* Tool calls in Qwen3.5's own format, read out of a reply as it streams (tools/tool_calls.c):
 *
 *   <tool_call>
 *   <function=NAME>
 *   <parameter=KEY>
 *   VALUE (any text, several lines too)
 *   </parameter>
 *   </function>
 *   </tool_call>
 *
 * What the chat template tells the model to write. The reader also takes a call whose
 * <tool_call> opener or closer the model left out, a parameter whose </parameter> it left out,
 * and calls anywhere in the text, its reasoning included; anything that does not parse as a
 * call stays text. Each value is typed by the tool's JSON schema (parameters.properties.KEY.type:
 * a string stays a string, numbers, booleans, null, objects and arrays are parsed when they parse
 * as that type); without a schema, text that parses as JSON (other than a string) is that value. */
#ifndef QHX_TOOL_CALLS_H
#define QHX_TOOL_CALLS_H
#include <jansson.h>
#include <stddef.h>

typedef struct {
    size_t shown;  /* bytes of the text already handed out, as text or inside calls */
    int n_calls;   /* calls already handed out */
    int after_call; /* nothing but space handed out since the last call */
} tc_stream;

typedef void (*tc_text_fn)(void *user, const char *s, size_t n);
/* args: a JSON object the callee may keep (json_incref) */
typedef void (*tc_call_fn)(void *user, const char *name, json_t *args);

/* Reads text[0, len), everything one channel (reasoning or answer) has generated so far, on from
 * where the last call left off: on_text gets the text outside calls that can no longer turn into
 * one, on_call each complete call. Until final, a call still being written, or text that could be
 * the start of one ("<tool_c"), is held back. final TC_END (the model ended the channel) releases
 * what never became a call as text; TC_CUT (max_tokens cut it) drops a call still being written,
 * which is neither text nor a call a client could run (finish_reason "length" says so).
 * tools: the request's tools (for the schemas), or NULL. */
enum { TC_RUNNING = 0, TC_END = 1, TC_CUT = 2 };
void tc_scan(tc_stream *st, const char *text, size_t len, int final, const json_t *tools, tc_text_fn on_text, tc_call_fn on_call,
             void *user);

#endif
