/* The chat format against the golden renderings of the reference Jinja engine
 * (tests/data/chat), plus the template's own error cases. */
#include "qhexrt.h"
#include "testlib.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* want ending in "..." is a prefix */
static void expect_render(const char *req, const char *want) {
    char *out;
    qhx_status st = qhx_chat_render(req, strlen(req), &out, NULL);
    CHECK(st == QHX_OK, "%s: %s", req, qhx_last_error());
    if (st) return;
    size_t wl = strlen(want);
    int prefix = wl > 3 && !strcmp(want + wl - 3, "...");
    CHECK(prefix ? !strncmp(out, want, wl - 3) : !strcmp(out, want), "%s\n got: %s\nwant: %s", req, out, want);
    free(out);
}

static void expect_error(const char *req, const char *needle) {
    char *out = NULL;
    qhx_status st = qhx_chat_render(req, strlen(req), &out, NULL);
    CHECK(st != QHX_OK && !out && strstr(qhx_last_error(), needle), "%s: status %d, '%s'", req, st, qhx_last_error());
    free(out);
}

/* Each line's conversation rendered as its "rendered" says: qwen3.5-chat.jsonl by @huggingface/jinja,
 * qwen3.5-chat-tools.jsonl (tools, calls with text before them, several calls and responses,
 * nested arguments, reasoning kept in a tool loop) by Jinja2 as Hugging Face runs it
 * (tests/oracle/chat_render_jinja.py). */
static void goldens(const char *path) {
    char *text = tl_read(path, NULL);
    CHECK(text != NULL, "no golden chat data in %s", path);
    int lines = 0, same = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        char *out;
        lines++;
        if (qhx_chat_render(line, strlen(line), &out, NULL) == QHX_OK) {
            if (!strcmp(out, json_string_value(json_object_get(j, "rendered")))) same++;
            else fprintf(stderr, "line %d:\n got: %s\nwant: %s\n", lines, out, json_string_value(json_object_get(j, "rendered")));
            free(out);
        }
        json_decref(j);
    }
    free(text);
    printf("  golden renderings (%s): %d/%d\n", path, same, lines);
    CHECK(lines > 0 && same == lines, "%s: %d of %d renderings differ", path, lines - same, lines);
}

int main(void) {
    goldens("tests/data/chat/qwen3.5-chat.jsonl");
    goldens("tests/data/chat/qwen3.5-chat-tools.jsonl");

    /* tools, tool calls and tool responses, written out from the template by hand */
    expect_render("{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":"
                  "[{\"function\":{\"name\":\"get\",\"arguments\":{\"city\":\"Paris\",\"days\":2}}}]},{\"role\":\"tool\",\"content\":\"sunny\"}],"
                  "\"add_generation_prompt\":false}",
                  "<|im_start|>user\nw?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=get>\n"
                  "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
                  "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n");
    expect_render("{\"messages\":[{\"role\":\"system\",\"content\":\" Be brief. \"},{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}],\"enable_thinking\":false}",
                  "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
                  "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}\n</tools>\n\nIf you choose...");
    /* continue_final_message: rendered as the whole conversation, then cut where the final
     * message's content ends, as apply_chat_template(continue_final_message=True) cuts it */
    expect_render("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"In the beginning\"}],"
                  "\"continue_final_message\":true}",
                  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nIn the beginning");
    expect_render("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"Yea\",\"reasoning_content\":\"r\"},"
                  "{\"role\":\"user\",\"content\":\"and?\"},{\"role\":\"assistant\",\"content\":\"And\",\"reasoning_content\":\"s\"}],"
                  "\"continue_final_message\":true,\"add_generation_prompt\":false}",
                  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nYea<|im_end|>\n<|im_start|>user\nand?<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\ns\n</think>\n\nAnd");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"continue_final_message\": true}", "final assistant");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \"y\"}], "
                 "\"continue_final_message\": true, \"add_generation_prompt\": true}", "exclusive");
    expect_error("{\"messages\": []}", "no messages");
    expect_error("{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}", "no user query");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"system\", \"content\": \"s\"}]}", "beginning");
    expect_error("{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}, {\"role\": \"user\", \"content\": \"x\"}]}", "robot");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "content type");
    expect_error("[1, 2", "not a JSON object");
    return tl_finish("chat");
}
