/* Constrained decoding's grammar engine (src/grammar/): GBNF read and matched byte by byte, its
 * refusals by name; JSON Schema against the official JSON-Schema-Test-Suite (draft 2020-12):
 * for every group whose keywords the engine enforces, each valid instance is accepted and each
 * invalid one refused, written compactly and pretty-printed; a schema with a keyword it cannot
 * enforce is refused naming it, never compiled into something weaker. Over the 151k Qwen
 * vocabulary, each valid instance is accepted token by token however the tokenizer could cut it
 * (its own encoding and random cuts into vocabulary pieces), and the mask agrees with the
 * per-token check on every token. */
#include "testlib.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer_internal.h"
#include "util/buf.h"
#include "util/json.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static qhx_grammar *gbnf(const char *text) {
    qhx_grammar *g = NULL;
    qhx_status rc = qhx_gbnf_compile(text, strlen(text), NULL, &g);
    CHECK(rc == QHX_OK, "%s: %s", text, qhx_last_error());
    return g;
}

/* 1: the whole text is a sentence; 0: a prefix of one, not whole; -1: refused */
static int match(const qhx_grammar *g, const char *text, size_t n) {
    qhx_gmatch *m;
    if (qhx_gmatch_new(g, &m)) return -2;
    int r = qhx_gmatch_accept(m, text, n) ? -1 : qhx_gmatch_can_end(m);
    qhx_gmatch_free(m);
    return r;
}

static void test_gbnf(void) {
    struct { const char *g, *text; int want; } cases[] = {
        {"root ::= \"ab\" [0-9]+", "ab123", 1},
        {"root ::= \"ab\" [0-9]+", "ab", 0},
        {"root ::= \"ab\" [0-9]+", "a1", -1},
        {"root ::= \"ab\" [0-9]+", "ab12x", -1},
        {"root ::= x{2,3}\nx ::= \"xy\"", "xyxy", 1},
        {"root ::= x{2,3}\nx ::= \"xy\"", "xyxyxy", 1},
        {"root ::= x{2,3}\nx ::= \"xy\"", "xyxyxyxy", -1},
        {"root ::= \"ab\"{2}", "abab", 1},
        {"root ::= \"ab\"*", "aba", 0},
        {"root ::= (\"a\" | \"b\" \"c\")* \"d\"", "abcad", 1},
        {"root ::= [^a-z]+", "Ωé1", 1},
        {"root ::= [^a-z]+", "Ωa", -1},
        {"root ::= [α-ω]", "β", 1},
        {"root ::= [α-ω]", "Ω", -1},
        {"root ::= .", "\xF0\x9F\x98\x80", 1},
        {"root ::= .", "\xF0\x9F\x98", 0},
        {"root ::= .", "\xC0\x80", -1},              /* overlong */
        {"root ::= .", "\xED\xA0\x80", -1},          /* a surrogate */
        {"root ::= \"\\x41\\u00e9\\n\"", "A\xC3\xA9\n", 1},
        {"# a comment\nroot ::= a |\n  b # another\na ::= \"a\"\nb ::= \"b\"", "b", 1},
        {"root ::= ( \"a\"\n | \"b\" )", "b", 1},
        {"root ::= x\nx ::= \"(\" x? \")\"", "((()))", 1},
        {"root ::= x\nx ::= \"(\" x? \")\"", "(()", 0},
        {"root ::= \"\" | \"a\"", "", 1},
        /* a quantifier over a quantified element is one quantifier: (x+)+ = x+, (x?)? = x?, else x* */
        {"root ::= \"ab\"++", "ababab", 1},
        {"root ::= \"ab\"++", "", 0},
        {"root ::= [0-9]** \"x\"", "x", 1},
        {"root ::= (\"a\"+)* \"b\"", "b", 1},
        {"root ::= (\"a\"+)* \"b\"", "aaab", 1},
        {"root ::= (\"a\"?)+ \"b\"", "aab", 1},
        {"root ::= (\"a\"+)? \"b\"", "aab", 1},
        {"root ::= (\"a\"?)? \"b\"", "ab", 1},
        {"root ::= (\"a\"?)? \"b\"", "aab", -1},
        {"root ::= ((\"a\"+)+)+ \"b\"", "aaaab", 1},
        {"root ::= ((\"a\"+)+)+ \"b\"", "b", -1},
        {"root ::= (\"a\"+ \"c\")+ \"b\"", "aacacb", 1}, /* two elements: a group, as it was */
        {"root ::= (\"a\"+ | \"c\")+ \"b\"", "acab", 1},
        {"root ::= \"a\"+{2}", "aaa", 1},
        {"root ::= \"a\"{2}+", "aaa", 0},
        {"root ::= \"a\"{2}+", "aaaa", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        qhx_grammar *g = gbnf(cases[i].g);
        if (!g) continue;
        int got = match(g, cases[i].text, strlen(cases[i].text));
        CHECK(got == cases[i].want, "grammar %s on '%s': %d, want %d", cases[i].g, cases[i].text, got, cases[i].want);
        qhx_grammar_free(g);
    }
    /* an ambiguous grammar cannot grow a state without bound: past QHX_GMATCH_MAX_STACKS the text
     * is refused and the matcher says why, at once */
    {
        const char *amb = "root ::= (\"a\"{0,300}){0,300} \"b\"";
        qhx_grammar *g = gbnf(amb);
        qhx_gmatch *m;
        char run[300];
        memset(run, 'a', sizeof run);
        if (g && !qhx_gmatch_new(g, &m)) {
            CHECK(qhx_gmatch_accept(m, run, sizeof run) == -1 && qhx_gmatch_error(m) == QHX_ERR_RANGE &&
                      strstr(qhx_last_error(), "stacks"), "an ambiguous grammar: %s", qhx_last_error());
            qhx_gmatch_free(m);
        }
        qhx_grammar_free(g);
    }
    struct { const char *g, *msg; } bad[] = {
        {"root ::= root \"a\" | \"b\"", "'root' is left-recursive"},
        {"root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"", "'x' is left-recursive"},
        {"root ::= x", "rule 'x' is not defined"},
        {"a ::= \"x\"", "no rule named 'root'"},
        {"root ::= \"abc", "unterminated literal"},
        {"root ::= [a-", "unterminated character class"},
        {"root ::= [z-a]", "out of order"},
        {"root ::= (\"a\"", "expected )"},
        {"root ::= \"a\"{3,2}", "n < m"},
        {"root ::= \"a\"{5000}", "over 4096"},
        {"root ::= * \"a\"", "nothing before it"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"root ::= \"\\q\"", "unknown escape"},
        {"root = \"a\"", "expected ::="},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        qhx_grammar *g = NULL;
        qhx_status rc = qhx_gbnf_compile(bad[i].g, strlen(bad[i].g), NULL, &g);
        CHECK(rc == QHX_ERR_ARG && strstr(qhx_last_error(), bad[i].msg), "%s: %d '%s', want '%s'", bad[i].g, rc,
              qhx_last_error(), bad[i].msg);
        qhx_grammar_free(g);
    }
}

/* ---- the JSON-Schema-Test-Suite --------------------------------------------------------------- */

static const char *suite_dir(void) {
    static char dir[512];
    snprintf(dir, sizeof dir, "tests/data/json-schema-test-suite/tests/draft2020-12");
    return dir;
}

typedef struct {
    int groups, compiled, refused, instances;
} tally;

static qhx_tokenizer *qwen;

/* Every way of cutting text into vocabulary pieces is a way the model could write it: the
 * tokenizer's own encoding, and random cuts (any piece that matches next). */
static void check_tokens(const qhx_grammar *g, const char *text, size_t n, unsigned seed, const char *what) {
    int32_t *ids = NULL;
    size_t n_ids = 0;
    for (int way = 0; way < 3; way++) {
        if (way == 0) {
            if (qhx_tokenizer_encode(qwen, text, n, 0, &ids, &n_ids)) { CHECK(0, "encode %s", what); return; }
        } else {
            ids = malloc(sizeof *ids * (n + 1));
            n_ids = 0;
            for (size_t i = 0; i < n;) {
                int32_t cand[64];
                size_t len[64];
                int k = 0;
                for (size_t L = 1; L <= n - i && L <= 24 && k < 64; L++) {
                    int32_t id;
                    if (qhx_strmap_get(&qwen->vocab, text + i, L, &id)) cand[k] = id, len[k++] = L;
                }
                if (!k) break;
                seed = seed * 1103515245u + 12345u;
                int pick = (int)((seed >> 16) % (unsigned)k);
                ids[n_ids++] = cand[pick];
                i += len[pick];
            }
        }
        qhx_gmatch *m;
        if (qhx_gmatch_new(g, &m)) { free(ids); return; }
        int ok = 1;
        for (size_t i = 0; i < n_ids && ok; i++) {
            const uint64_t *mask = qhx_gmatch_mask(m);
            size_t len;
            const char *p = qhx_gmatch_piece(m, ids[i], &len);
            ok = mask && p && (mask[ids[i] >> 6] >> (ids[i] & 63) & 1) && qhx_gmatch_check(m, p, len) &&
                 !qhx_gmatch_accept(m, p, len);
            if (!ok) CHECK(0, "%s: token %zu (%d) of way %d refused", what, i, ids[i], way);
        }
        CHECK(!ok || qhx_gmatch_can_end(m), "%s: way %d not whole at the end", what, way);
        qhx_gmatch_free(m);
        free(ids);
        ids = NULL;
    }
}

/* The mask holds exactly the tokens the check accepts, on every token, along one instance. */
static void check_mask(const qhx_grammar *g, const char *text, size_t n, const char *what) {
    qhx_gmatch *m;
    if (qhx_gmatch_new(g, &m)) return;
    int n_ids = qhx_tokenizer_n_ids(qwen), bad = 0;
    for (size_t at = 0; at <= n && !bad; at += n / 3 + 1) {
        qhx_gmatch_reset(m);
        if (at && qhx_gmatch_accept(m, text, at < n ? at : n)) break;
        const uint64_t *mask = qhx_gmatch_mask(m);
        uint64_t *copy = malloc(sizeof *copy * ((size_t)n_ids / 64 + 1));
        memcpy(copy, mask, sizeof *copy * ((size_t)n_ids / 64 + 1));
        for (int32_t id = 0; id < n_ids; id++) {
            size_t len;
            const char *p = qhx_gmatch_piece(m, id, &len);
            int want = p && len && qhx_gmatch_check(m, p, len);
            if ((int)(copy[id >> 6] >> (id & 63) & 1) != want) bad++;
        }
        free(copy);
        CHECK(!bad, "%s: the mask after %zu bytes disagrees with the check on %d tokens", what, at, bad);
    }
    qhx_gmatch_free(m);
}

static void run_file(const char *file, tally *t, int tokens) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", suite_dir(), file);
    json_t *doc = tl_json(path);
    if (!doc) return;
    size_t gi;
    json_t *group;
    json_array_foreach(doc, gi, group) {
        t->groups++;
        char *schema = json_dumps(json_object_get(group, "schema"), JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
        qhx_grammar *g = NULL;
        qhx_status rc = qhx_grammar_from_json_schema(tokens ? qwen : NULL, schema, strlen(schema), &g);
        const char *desc = json_string_value(json_object_get(group, "description"));
        if (rc) {
            /* a refusal names what it cannot enforce */
            CHECK((rc == QHX_ERR_UNSUPPORTED || rc == QHX_ERR_ARG) && strstr(qhx_last_error(), "json schema: ") &&
                      strchr(qhx_last_error(), '\''),
                  "%s / %s: refused without naming a keyword: %s", file, desc, qhx_last_error());
            t->refused++;
            if (getenv("QHX_GRAMMAR_VERBOSE")) fprintf(stderr, "refused %s / %s: %s\n", file, desc, qhx_last_error());
            free(schema);
            continue;
        }
        t->compiled++;
        size_t ti;
        json_t *test;
        json_array_foreach(json_object_get(group, "tests"), ti, test) {
            json_t *data = json_object_get(test, "data");
            int valid = json_is_true(json_object_get(test, "valid"));
            /* Narrower than the standard, by choice: a leap second only as 23:59:60 UTC (the
             * exact rule, 23:59:60 after the offset, would take 2,880 alternatives). Refused. */
            const char *td = json_string_value(json_object_get(test, "description"));
            if (valid && strstr(file, "format/") && strstr(td, "leap second") && strstr(td, "offset") && !strstr(td, "zero")) valid = 0;
            for (int pretty = 0; pretty < 2; pretty++) {
                char *text = json_dumps(data, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER | (pretty ? JSON_INDENT(2) : JSON_COMPACT));
                int got = match(g, text, strlen(text));
                CHECK((got == 1) == valid, "%s / %s / %s (%s): %s, want %s\n  schema %s\n  data %s", file, desc,
                      json_string_value(json_object_get(test, "description")), pretty ? "pretty" : "compact",
                      got == 1 ? "accepted" : "refused", valid ? "accepted" : "refused", schema, text);
                if (tokens && valid && got == 1 && !pretty) {
                    char what[512];
                    snprintf(what, sizeof what, "%s / %s / %s", file, desc, json_string_value(json_object_get(test, "description")));
                    check_tokens(g, text, strlen(text), (unsigned)(gi * 131 + ti), what);
                    /* the mask against the check over the whole vocabulary: every group's
                     * first instance (quick tiers: every 8th group's) */
                    if (ti == 0 && (!tl_quick() || gi % 8 == 0)) check_mask(g, text, strlen(text), what);
                }
                free(text);
            }
            t->instances++;
        }
        qhx_grammar_free(g);
        free(schema);
    }
    json_decref(doc);
}

/* Ambiguity over the real vocabulary. Stacked quantifiers collapse (the parser), so twelve of them
 * mask as one does, after every byte: each level used to double a state's stacks, and the mask's
 * work with them. Nested repetitions through rules cannot collapse there: a mask that would step
 * past QHX_GMATCH_MASK_WORK stacks fails at once and says why, where it took minutes. */
static void test_ambiguity(void) {
    if (!qwen) return;
    qhx_grammar *one = NULL, *many = NULL, *rules = NULL;
    const char *g1 = "root ::= [^a-z]+", *g12 = "root ::= [^a-z]++++++++++++";
    char g_rules[512] = "root ::= r0\n";
    for (int i = 0; i < 11; i++) snprintf(g_rules + strlen(g_rules), 64, "r%d ::= r%d+\n", i, i + 1);
    strcat(g_rules, "r11 ::= [^a-z]+\n");
    if (qhx_gbnf_compile(g1, strlen(g1), qwen, &one) || qhx_gbnf_compile(g12, strlen(g12), qwen, &many) ||
        qhx_gbnf_compile(g_rules, strlen(g_rules), qwen, &rules)) {
        CHECK(0, "compile: %s", qhx_last_error());
    } else {
        qhx_gmatch *a, *b, *c;
        qhx_gmatch_new(one, &a), qhx_gmatch_new(many, &b), qhx_gmatch_new(rules, &c);
        const size_t words = ((size_t)qhx_tokenizer_n_ids(qwen) + 63) / 64;
        int same = 1, failed = 0;
        for (int k = 0; k < 4; k++) {
            const uint64_t *ma = qhx_gmatch_mask(a), *mb = qhx_gmatch_mask(b);
            same &= ma && mb && !memcmp(ma, mb, words * sizeof *ma);
            qhx_gmatch_accept(a, "1 ", 2), qhx_gmatch_accept(b, "1 ", 2);
        }
        if (!qhx_gmatch_mask(c)) failed = qhx_gmatch_error(c) == QHX_ERR_RANGE && strstr(qhx_last_error(), "too ambiguous");
        CHECK(same, "%s masks as %s", g12, g1);
        CHECK(failed, "twelve nested repetitions through rules: a mask fails as too ambiguous (%s)", qhx_last_error());
        qhx_gmatch_free(a), qhx_gmatch_free(b), qhx_gmatch_free(c);
    }
    qhx_grammar_free(one), qhx_grammar_free(many), qhx_grammar_free(rules);
}

/* The mask's shortcuts (a looping string state, a bounded string's runway with its pieces by
 * length) against the per-token check at every position of strings with and without a maxLength,
 * and of keys with other keys allowed beside the named ones. */
static void test_mask_shortcuts(void) {
    static const struct { const char *schema, *text; } cases[] = {
        {"{\"type\": \"string\", \"maxLength\": 12}", "\"ab c\u00e9\u4e2d\\\"d ef\""},
        {"{\"type\": \"string\", \"minLength\": 3, \"maxLength\": 40}", "\"Hello there, general Kenobi\""},
        {"{\"type\": \"string\"}", "\"a string that loops \u00e9\""},
        {"{\"type\": \"object\", \"properties\": {\"title\": {\"type\": \"string\", \"maxLength\": 5}}}", "{\"tix\": 1, \"title\": \"abcde\"}"},
        /* keys sharing a prefix, the walk leaving them for any other key at every depth */
        {"{\"type\": \"object\", \"properties\": {\"title\": {\"type\": \"string\"}, \"tile\": {\"type\": \"integer\"}, \"start\": {}}}",
         "{\"tz\": 1, \"tile\": 2}"},
        /* a string beside a literal: "__" leaves it for a string state that refuses the piece
         * `__":\n` (nothing may follow the string), which the walk must not let through */
        {"{\"anyOf\": [{\"const\": \"_a\"}, {\"type\": \"string\"}]}", "\"__x\""},
        /* a maxLength past what a runway counts (255) and past the longest piece */
        {"{\"type\": \"string\", \"maxLength\": 300}", "\"  many   spaces\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases && qwen; i++) {
        qhx_grammar *g = NULL;
        if (qhx_grammar_from_json_schema(qwen, cases[i].schema, strlen(cases[i].schema), &g)) { CHECK(0, "%s", qhx_last_error()); continue; }
        const size_t n = strlen(cases[i].text);
        CHECK(match(g, cases[i].text, n) == 1, "%s does not take %s", cases[i].schema, cases[i].text);
        qhx_gmatch *m;
        qhx_gmatch_new(g, &m);
        const int n_ids = qhx_tokenizer_n_ids(qwen);
        int bad = 0;
        for (size_t at = 0; at <= n && !bad; at++) {
            qhx_gmatch_reset(m);
            if (qhx_gmatch_accept(m, cases[i].text, at)) continue; /* inside a character */
            const uint64_t *mask = qhx_gmatch_mask(m);
            for (int32_t id = 0; id < n_ids && mask; id++) {
                size_t len;
                const char *p = qhx_gmatch_piece(m, id, &len);
                if ((int)(mask[id >> 6] >> (id & 63) & 1) != (p && len && qhx_gmatch_check(m, p, len))) bad++;
            }
            CHECK(!bad, "%s after %zu bytes of %s: the mask disagrees with the check on %d tokens", cases[i].schema, at, cases[i].text, bad);
        }
        qhx_gmatch_free(m);
        qhx_grammar_free(g);
    }
}

static void test_suite(void) {
    char tok_path[512];
    const char *data = getenv("QHX_DATA");
    snprintf(tok_path, sizeof tok_path, "%s/tokenizers/qwen3/tokenizer.json", data ? data : "build/data");
    CHECK(qhx_tokenizer_load(tok_path, &qwen) == QHX_OK, "%s: %s", tok_path, qhx_last_error());
    /* the keywords the engine enforces; token-level checks on them over the real vocabulary */
    static const char *const files[] = {
        "type.json", "properties.json", "required.json", "additionalProperties.json", "items.json",
        "prefixItems.json", "enum.json", "const.json", "anyOf.json", "oneOf.json", "allOf.json", "ref.json",
        "defs.json", "minItems.json", "maxItems.json", "minLength.json", "maxLength.json", "minimum.json",
        "maximum.json", "exclusiveMinimum.json", "exclusiveMaximum.json", "pattern.json", "boolean_schema.json",
        "default.json", "infinite-loop-detection.json", "optional/format/date.json", "optional/format/uuid.json",
        "optional/format/ipv4.json", "optional/format/time.json", "optional/format/date-time.json",
        /* keywords it refuses: each schema using them must be refused by name */
        "not.json", "if-then-else.json", "contains.json", "uniqueItems.json", "multipleOf.json",
        "patternProperties.json", "propertyNames.json", "minProperties.json", "maxProperties.json",
        "dependentRequired.json", "dependentSchemas.json", "unevaluatedProperties.json", "unevaluatedItems.json",
        "minContains.json", "maxContains.json", "refRemote.json", "dynamicRef.json", "anchor.json",
    };
    tally t = {0};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) run_file(files[i], &t, qwen != NULL);
    printf("json-schema-test-suite: %d groups, %d compiled (%d instances, each compact and pretty), %d refused by name\n",
           t.groups, t.compiled, t.instances, t.refused);
    CHECK(t.compiled >= 129 && t.instances >= 661, "only %d groups compiled", t.compiled);
}

/* $refs the suite leaves out: one definition reached both as a rule and merged beside a keyword
 * (the merge once read a definition the rule had emptied), and recursion through anyOf: after a
 * bracket it runs, before any input it is refused by the pointer that comes back. */
static void test_schema_refs(void) {
    struct { const char *schema, *text; int want; } cases[] = {
#define TWICE "{\"$defs\":{\"b\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}},\"type\":\"object\"," \
              "\"properties\":{\"x\":{\"$ref\":\"#/$defs/b\"},\"y\":{\"$ref\":\"#/$defs/b\",\"maxLength\":3}}}"
        {TWICE, "{\"y\":null}", 1},
        {TWICE, "{\"x\":\"abcd\",\"y\":\"abc\"}", 1},
        {TWICE, "{\"y\":5}", -1},
        {TWICE, "{\"y\":\"abcd\"}", -1},
        {TWICE, "{\"x\":[]}", -1},
#define TREE "{\"$defs\":{\"t\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}]}},\"$ref\":\"#/$defs/t\"}"
        {TREE, "[[null,[]],null]", 1},
        {TREE, "[[1]]", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        qhx_grammar *g = NULL;
        CHECK(qhx_grammar_from_json_schema(NULL, cases[i].schema, strlen(cases[i].schema), &g) == QHX_OK, "%s: %s",
              cases[i].schema, qhx_last_error());
        int got = g ? match(g, cases[i].text, strlen(cases[i].text)) : -3;
        CHECK(got == cases[i].want, "%s on %s: %d, want %d", cases[i].schema, cases[i].text, got, cases[i].want);
        qhx_grammar_free(g);
    }
    struct { const char *schema, *ptr; } cycles[] = {
        {"{\"$defs\":{\"n\":{\"type\":\"array\"}},\"$ref\":\"#\"}", "'#'"},
        {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "'#'"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"type\":\"string\"},{\"$ref\":\"#/$defs/a\"}]}},"
         "\"$ref\":\"#/$defs/a\"}", "'#/$defs/a'"},
        /* d leads to c through an array first, then to c before any input: c was a rule already */
        {"{\"$defs\":{\"d\":{\"anyOf\":[{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/c\"}},{\"$ref\":\"#/$defs/c\"}]},"
         "\"c\":{\"anyOf\":[{\"$ref\":\"#/$defs/d\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/d\"}", "'#/$defs/"},
    };
    for (size_t i = 0; i < sizeof cycles / sizeof *cycles; i++) {
        qhx_grammar *g = NULL;
        qhx_status rc = qhx_grammar_from_json_schema(NULL, cycles[i].schema, strlen(cycles[i].schema), &g);
        CHECK(rc == QHX_ERR_UNSUPPORTED && strstr(qhx_last_error(), "json schema: $ref ") &&
                  strstr(qhx_last_error(), cycles[i].ptr) && strstr(qhx_last_error(), "before reading anything"),
              "%s: %d %s", cycles[i].schema, rc, qhx_last_error());
        qhx_grammar_free(g);
    }
    /* a cycle through the 300th branch of an anyOf (leads counted past a byte), and the same
     * branches with none */
    qhx_buf many = {0}, none = {0};
    qhx_buf_puts(&many, "{\"anyOf\":["), qhx_buf_puts(&none, "{\"anyOf\":[");
    for (int i = 0; i < 299; i++) {
        char c[48];
        snprintf(c, sizeof c, "{\"const\":%d},", i);
        qhx_buf_puts(&many, c), qhx_buf_puts(&none, c);
    }
    qhx_buf_puts(&many, "{\"$ref\":\"#\"}]}"), qhx_buf_puts(&none, "{\"type\":\"null\"}]}");
    qhx_grammar *mg = NULL;
    CHECK(!many.oom && qhx_grammar_from_json_schema(NULL, many.s, many.len, &mg) == QHX_ERR_UNSUPPORTED &&
              strstr(qhx_last_error(), "$ref '#' comes back"), "300 branches, the last a cycle: %s", qhx_last_error());
    qhx_grammar_free(mg), mg = NULL;
    CHECK(!none.oom && qhx_grammar_from_json_schema(NULL, none.s, none.len, &mg) == QHX_OK && match(mg, "298", 3) == 1 &&
              match(mg, "299", 3) == -1, "300 branches: %s", qhx_last_error());
    qhx_grammar_free(mg);
    qhx_buf_free(&many), qhx_buf_free(&none);
    /* a tool's $defs are its own: two tools with a same-named definition */
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                        "\"$defs\":{\"v\":{\"type\":\"integer\"}},\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/v\"}}},"
                        "\"required\":[\"a\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"type\":\"object\","
                        "\"$defs\":{\"v\":{\"type\":\"boolean\"}},\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/v\"}}},"
                        "\"required\":[\"a\"]}}}]";
    char *gbnf = NULL;
    qhx_grammar *g = NULL;
    CHECK(qhx_tool_call_gbnf(tools, strlen(tools), NULL, 1, &gbnf) == QHX_OK && gbnf &&
              qhx_gbnf_compile(gbnf, strlen(gbnf), NULL, &g) == QHX_OK, "two tools' $defs: %s", qhx_last_error());
    const char *f_ok = "<tool_call>\n<function=f>\n<parameter=a>\n[1,2]\n</parameter>\n</function>\n</tool_call>";
    const char *g_ok = "<tool_call>\n<function=g>\n<parameter=a>\n[true]\n</parameter>\n</function>\n</tool_call>";
    const char *g_bad = "<tool_call>\n<function=g>\n<parameter=a>\n[1]\n</parameter>\n</function>\n</tool_call>";
    if (g) {
        CHECK(match(g, f_ok, strlen(f_ok)) == 1, "tool f with its integers");
        CHECK(match(g, g_ok, strlen(g_ok)) == 1, "tool g with its booleans");
        CHECK(match(g, g_bad, strlen(g_bad)) == -1, "tool g took f's definition");
    }
    qhx_grammar_free(g);
    free(gbnf);
}

/* A property name of 12,000 characters: "any other key" is a rule per character, so the grammar
 * has ~40,000 rules (fuzz_request found a 3,658-character one taking 26 s under ASan, when rules
 * were found by name in a list). The key maps to its type; a key one character longer or shorter
 * is another key, free. */
static void test_long_key(void) {
    enum { K = 12000 };
    char *key = malloc(K + 1), *schema = malloc(2 * K + 128), *text = malloc(2 * K + 64);
    memset(key, 'k', K), key[K] = 0;
    snprintf(schema, 2 * K + 128, "{\"type\":\"object\",\"properties\":{\"%s\":{\"type\":\"integer\"}},\"required\":[\"%s\"]}", key, key);
    char *g_text = NULL;
    qhx_grammar *g = NULL;
    CHECK(qhx_json_schema_to_gbnf(schema, strlen(schema), &g_text) == QHX_OK && qhx_gbnf_compile(g_text, strlen(g_text), NULL, &g) == QHX_OK,
          "a 12,000-character key: %s", qhx_last_error());
    const struct { const char *fmt; int want; } cases[] = {
        {"{\"%s\":5}", 1}, {"{\"%s\":\"five\"}", -1}, {"{\"%sk\":\"x\",\"%s\":5}", 1}, {"{\"%.11999s\":\"x\",\"%s\":5}", 1}, {"{\"%sk\":1}", -1},
    };
    for (size_t i = 0; g && i < sizeof cases / sizeof *cases; i++) {
        snprintf(text, 2 * K + 64, cases[i].fmt, key, key);
        CHECK(match(g, text, strlen(text)) == cases[i].want, "long key case %zu: want %d", i, cases[i].want);
    }
    qhx_grammar_free(g);
    free(g_text), free(key), free(schema), free(text);
}

/* ---- generation under a grammar, on the shipped model ----------------------------------------- */

typedef struct {
    char text[8192];
    size_t n;
    int32_t ids[512];
    size_t end[512];    /* where each token's text ends */
    int n_ids;
} collected;

static int collect(int32_t tok, const char *text, size_t len, void *user) {
    collected *c = user;
    if (tok >= 0 && c->n_ids < 512) c->ids[c->n_ids++] = tok;
    if (text && c->n + len < sizeof c->text) memcpy(c->text + c->n, text, len), c->n += len, c->text[c->n] = 0;
    if (tok >= 0 && c->n_ids <= 512) c->end[c->n_ids - 1] = c->n;
    return 0;
}

static const char *SCHEMA = "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 10},"
                            " \"n\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 99}, \"ok\": {\"type\": \"boolean\"}},"
                            " \"required\": [\"name\", \"n\", \"ok\"], \"additionalProperties\": false}";

/* The output is whole under the grammar and parses as JSON with the schema's members. */
static void check_output(const qhx_grammar *g, const collected *c, const char *what) {
    CHECK(match(g, c->text, c->n) == 1, "%s: the output is not whole under the grammar: '%s'", what, c->text);
    json_error_t e;
    json_t *j = json_loadb(c->text, c->n, 0, &e);
    CHECK(json_is_object(j) && json_is_string(json_object_get(j, "name")) && json_string_length(json_object_get(j, "name")) <= 10 &&
              json_is_integer(json_object_get(j, "n")) && json_integer_value(json_object_get(j, "n")) <= 99 &&
              json_is_boolean(json_object_get(j, "ok")) && json_object_size(j) == 3,
          "%s: not what the schema asks: '%s'", what, c->text);
    json_decref(j);
}

static void test_generate(void) {
    qhx_runtime *rt;
    qhx_model *m;
    qhx_session *s;
    if (tl_open("models/q35-kjv", "auto", &rt, &m, &s)) return;
    qhx_tokenizer *tok;
    qhx_model_tokenizer(m, &tok);
    qhx_grammar *g = NULL;
    CHECK(qhx_grammar_from_json_schema(tok, SCHEMA, strlen(SCHEMA), &g) == QHX_OK, "%s", qhx_last_error());
    int32_t *ids;
    size_t n;
    const char *prompt = "And God said, Let there be light";
    qhx_tokenizer_encode(tok, prompt, strlen(prompt), 0, &ids, &n);
    /* greedy; sampled with top-p (always masked); sampled plainly (a draw kept when allowed) */
    collected base[3] = {0};
    for (int sampled = 0; sampled < 3 && g; sampled++) {
        for (int draft = 0; draft < 2; draft++) {
            collected c = {0};
            qhx_generate_opts o = {.max_tokens = 300, .grammar = g, .draft = draft ? QHX_DRAFT_NGRAM : 0,
                                   .temperature = sampled ? 0.9f : 0, .top_p = sampled == 1 ? 0.95f : 0, .seed = 7};
            qhx_generate_result res;
            qhx_session_reset(s);
            qhx_status rc = qhx_generate(s, ids, (int)n, &o, collect, &c, &res);
            char what[64];
            snprintf(what, sizeof what, "%s%s", sampled == 2 ? "sampled" : sampled ? "sampled top-p" : "greedy",
                     draft ? " with ngram drafts" : "");
            CHECK(rc == QHX_OK && res.finish == QHX_FINISH_STOP, "%s: rc %d finish %d: %s", what, rc, res.finish, qhx_last_error());
            check_output(g, &c, what);
            if (!draft) base[sampled] = c;
            else CHECK(c.n_ids == base[sampled].n_ids && !memcmp(c.ids, base[sampled].ids, sizeof(int32_t) * (size_t)c.n_ids),
                       "%s: other tokens than without drafts", what);
        }
    }
    /* The draw kept when allowed is a draw from the masked distribution: its first token over
     * 1,500 seeds against the always-masked path (top_k = the vocabulary truncates nothing) */
    {
        const char *gb = "root ::= [A-Z] [a-z]*";
        qhx_grammar *cap = NULL;
        CHECK(qhx_grammar_from_gbnf(tok, gb, strlen(gb), &cap) == QHX_OK, "%s", qhx_last_error());
        qhx_model_info mi;
        qhx_model_get_info(m, &mi);
        enum { RUNS = 1500 };
        int *hist[2] = {calloc((size_t)mi.vocab_size, sizeof(int)), calloc((size_t)mi.vocab_size, sizeof(int))};
        qhx_snapshot *before = NULL; /* the prompt but its last token, evaluated once */
        qhx_session_reset(s);
        CHECK(!qhx_session_eval(s, ids, (int)n - 1, QHX_EVAL_SEQUENCE, NULL, NULL) && !qhx_session_snapshot(s, &before), "%s", qhx_last_error());
        for (int path = 0; path < 2 && cap && before; path++)
            for (int r = 0; r < RUNS; r++) {
                collected c = {0};
                qhx_generate_opts o = {.max_tokens = 1, .grammar = cap, .temperature = 1.5f, .seed = (uint64_t)r + 1,
                                       .top_k = path ? mi.vocab_size : 0};
                qhx_session_restore(s, before);
                if (qhx_generate(s, ids + n - 1, 1, &o, collect, &c, NULL) == QHX_OK && c.n_ids == 1) hist[path][c.ids[0]]++;
            }
        qhx_snapshot_free(before);
        /* two-sample chi-square over the tokens drawn: about its degrees of freedom when both
         * paths draw from one distribution; 4 standard deviations above fails */
        double chi2 = 0;
        int cells = 0;
        for (int i = 0; i < mi.vocab_size; i++) {
            int a = hist[0][i], b = hist[1][i];
            if (a + b) chi2 += (double)(a - b) * (a - b) / (a + b), cells++;
        }
        const double df = cells - 1, limit = df + 4 * sqrt(2 * df);
        CHECK(cells > 5 && chi2 < limit, "the kept draw and the masked draw differ: chi-square %.1f over %d tokens (limit %.1f)", chi2,
              cells, limit);
        printf("first capitalised word, 2 x %d draws: chi-square %.1f on %.0f degrees of freedom (limit %.1f)\n", RUNS, chi2, df, limit);
        free(hist[0]), free(hist[1]);
        qhx_grammar_free(cap);
    }
    /* grammar_after: free until the text appears, then the grammar; the free part is what an
     * unconstrained run writes */
    collected free_run = {0};
    qhx_generate_opts o = {.max_tokens = 12};
    qhx_session_reset(s);
    qhx_generate(s, ids, (int)n, &o, collect, &free_run, NULL);
    /* the trigger: the 2nd and 3rd tokens' text (it ends where a token does), then one ending
     * inside a token (the token that would end it with a rest the grammar refuses is not taken) */
    for (int mid = 0; mid < 2; mid++) {
        char trigger[64] = "";
        size_t from = free_run.end[0], to = free_run.end[2] - (size_t)mid;
        if (free_run.n_ids >= 3 && to > from && to - from < sizeof trigger) memcpy(trigger, free_run.text + from, to - from);
        CHECK(trigger[0], "the free run wrote too little: '%s'", free_run.text);
        collected after = {0};
        qhx_generate_opts oa = {.max_tokens = 300, .grammar = g, .grammar_after = trigger};
        qhx_session_reset(s);
        CHECK(qhx_generate(s, ids, (int)n, &oa, collect, &after, NULL) == QHX_OK, "grammar_after: %s", qhx_last_error());
        const char *hit = strstr(after.text, trigger);
        CHECK(mid || (hit && !strncmp(after.text, free_run.text, to)), "grammar_after '%s': the free part differs: '%s' / '%s'",
              trigger, after.text, free_run.text);
        if (hit) {
            collected rest = {0};
            rest.n = strlen(hit + strlen(trigger));
            memcpy(rest.text, hit + strlen(trigger), rest.n);
            check_output(g, &rest, "after the trigger");
        }
    }
    /* refusals: a grammar for another vocabulary, grammar_after alone */
    qhx_grammar *other = NULL;
    if (qwen && !qhx_grammar_from_json_schema(qwen, SCHEMA, strlen(SCHEMA), &other)) {
        qhx_generate_opts ob = {.max_tokens = 4, .grammar = other};
        qhx_session_reset(s);
        CHECK(qhx_generate(s, ids, (int)n, &ob, NULL, NULL, NULL) == QHX_ERR_ARG && strstr(qhx_last_error(), "another tokenizer"),
              "a grammar for another tokenizer: %s", qhx_last_error());
    }
    qhx_grammar_free(other);
    qhx_generate_opts oc = {.max_tokens = 4, .grammar_after = "x"};
    CHECK(qhx_generate(s, ids, (int)n, &oc, NULL, NULL, NULL) == QHX_ERR_ARG, "grammar_after without a grammar");
    free(ids);
    qhx_grammar_free(g);
    qhx_session_free(s);
    qhx_model_close(m);
    qhx_runtime_free(rt);
}

int main(void) {
    test_gbnf();
    test_suite();
    test_schema_refs();
    test_long_key();
    test_mask_shortcuts();
    test_ambiguity();
    test_generate();
    qhx_tokenizer_free(qwen);
    return tl_finish("test_grammar");
}
