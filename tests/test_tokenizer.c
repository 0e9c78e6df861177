/* Tokenizer exactness against Hugging Face's tokenizers (golden ids in tests/data/tokenizer), the
 * special-token switch, invalid UTF-8, the streaming decoder and malformed tokenizer files. */
#include "qhexrt.h"
#include "testlib.h"
#include "util/hashmap.h"

#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

static const char *data_dir(void) {
    const char *d = getenv("QHX_DATA");
    return d ? d : "build/data";
}

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

static void golden_file(qhx_tokenizer *t, const char *file) {
    char *text = tl_read(file, NULL);
    CHECK(text != NULL, "cannot read %s", file);
    if (!text) return;
    int lines = 0, ok = 0, dec_ok = 0, stream_ok = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        /* jansson, not cJSON: the texts contain U+0000, which cJSON's C strings cannot hold */
        json_t *j = json_loads(line, JSON_ALLOW_NUL, NULL);
        json_t *jt = json_object_get(j, "text"), *jids = json_object_get(j, "ids"), *jd = json_object_get(j, "decoded");
        /* without a decoded field, decode must give the NFC form of the text back */
        utf8proc_uint8_t *nfc = NULL;
        const char *want_text = json_string_value(jd);
        size_t want_len = json_string_length(jd);
        if (!jd) {
            utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)json_string_value(jt), (utf8proc_ssize_t)json_string_length(jt),
                                              &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            want_text = (const char *)nfc;
            want_len = r > 0 ? (size_t)r : 0;
        }
        lines++;
        int32_t *ids;
        size_t n;
        if (qhx_tokenizer_encode(t, json_string_value(jt), json_string_length(jt), QHX_ENCODE_SPECIAL, &ids, &n)) {
            CHECK(0, "%s line %d: %s", file, lines, qhx_last_error());
            json_decref(j);
            continue;
        }
        int same = n == json_array_size(jids);
        for (size_t i = 0; same && i < n; i++) same = ids[i] == json_integer_value(json_array_get(jids, i));
        if (same) ok++;
        else if (ok + 5 > lines) {
            fprintf(stderr, "  mismatch %s line %d: %.80s\n   got:", file, lines, json_string_value(jt));
            for (size_t i = 0; i < n && i < 24; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n");
        }
        char *dec;
        size_t dlen;
        if (qhx_tokenizer_decode(t, ids, n, &dec, &dlen) == QHX_OK) {
            if (dlen == want_len && !memcmp(dec, want_text, dlen)) dec_ok++;
            /* streaming: concatenation equals decode, every chunk is whole UTF-8 */
            qhx_detok_stream st = {0};
            char chunk[512], *cat = malloc(dlen * 2 + 16);
            size_t cl = 0;
            int whole = 1;
            for (size_t i = 0; i < n; i++) {
                int k = qhx_detok_push(t, &st, ids[i], chunk, sizeof chunk);
                whole &= k >= 0 && valid_utf8(chunk, (size_t)k);
                if (k > 0) { memcpy(cat + cl, chunk, (size_t)k); cl += (size_t)k; }
            }
            int k = qhx_detok_flush(&st, chunk, sizeof chunk);
            if (k > 0) { memcpy(cat + cl, chunk, (size_t)k); cl += (size_t)k; }
            if (whole && (!valid_utf8(dec, dlen) || (cl == dlen && !memcmp(cat, dec, dlen)))) stream_ok++;
            else if (whole && valid_utf8(dec, dlen)) fprintf(stderr, "  stream mismatch line %d\n", lines);
            free(cat);
            free(dec);
        }
        free(ids);
        free(nfc);
        json_decref(j);
    }
    printf("  %s: encode %d/%d, decode %d/%d, stream %d/%d\n", file, ok, lines, dec_ok, lines, stream_ok, lines);
    CHECK(ok == lines && lines > 0, "%s: %d of %d encodings differ", file, lines - ok, lines);
    CHECK(dec_ok == lines, "%s: %d of %d decodings differ", file, lines - dec_ok, lines);
    CHECK(stream_ok == lines, "%s: streaming decode failed on %d lines", file, lines - stream_ok);
    free(text);
}

static void expect_ids(qhx_tokenizer *t, const char *text, int flags, const int32_t *want, size_t nwant, const char *what) {
    int32_t *ids;
    size_t n;
    qhx_status st = qhx_tokenizer_encode(t, text, strlen(text), flags, &ids, &n);
    int same = st == QHX_OK && n == nwant;
    for (size_t i = 0; same && i < n; i++) same = ids[i] == want[i];
    CHECK(same, "%s: status %d, %zu ids", what, st, n);
    free(ids);
}

static void bad_tokenizer(const char *json, const char *needle) {
    qhx_tokenizer *t = NULL;
    char path[256];
    snprintf(path, sizeof path, "/tmp/qhx-badtok-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs(json, f);
    fclose(f);
    qhx_status st = qhx_tokenizer_load(path, &t);
    CHECK(st != QHX_OK && t == NULL, "malformed tokenizer accepted: %s", json);
    CHECK(strstr(qhx_last_error(), needle) && strstr(qhx_last_error(), path), "message '%s' lacks '%s'", qhx_last_error(), needle);
    remove(path);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Writes bytes[0, n) to path and loads it as a tokenizer: the load's status (the tokenizer, if
 * one loaded, freed). */
static qhx_status load_written(const char *path, const unsigned char *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return QHX_ERR_IO;
    fwrite(bytes, 1, n, f);
    fclose(f);
    qhx_tokenizer *t = NULL;
    const qhx_status rc = qhx_tokenizer_load(path, &t);
    qhx_tokenizer_free(t);
    return rc;
}

/* The ready-made tables of the compact form: an exported table is adopted; one with a key out of
 * place, a record out of order or out of bounds, or too full, is refused. */
static void hashmaps(void) {
    qhx_strmap m;
    CHECK(qhx_strmap_init(&m, 4) == 0, "strmap init");
    char key[32];
    int put = 0;
    for (int i = 0; i < 3000; i++) { /* grows several times */
        int n = snprintf(key, sizeof key, "k%d", i * 7919);
        put += qhx_strmap_put(&m, key, (size_t)n, i) == 0;
    }
    CHECK(put == 3000, "puts: %d/3000", put);
    CHECK(qhx_strmap_put(&m, "", 0, 77) == 0, "empty key");
    uint64_t *slots;
    uint32_t *rec;
    CHECK(qhx_strmap_export(&m, &slots, &rec) == 0, "export");
    qhx_strmap v;
    CHECK(qhx_strmap_view(&v, slots, m.mask, rec, m.rec_len, m.count) == 0, "view of an exported table refused");
    int found = 0;
    int32_t val;
    for (int i = 0; i < 3000; i++) {
        int n = snprintf(key, sizeof key, "k%d", i * 7919);
        found += qhx_strmap_get(&v, key, (size_t)n, &val) && val == i;
    }
    CHECK(found == 3000 && qhx_strmap_get(&v, "", 0, &val) && val == 77 && !qhx_strmap_get(&v, "nope", 4, &val),
          "view lookups: %d/3000", found);
    CHECK(qhx_strmap_put(&v, "x", 1, 1) == -1, "a view accepted a put");
    uint32_t first = 0;
    while (!slots[first]) first++;
    slots[first] ^= 1ull << 40; /* the tag no longer matches the key */
    CHECK(qhx_strmap_view(&v, slots, m.mask, rec, m.rec_len, m.count) == -1, "a wrong tag accepted");
    slots[first] ^= 1ull << 40;
    uint32_t empty = first;
    while (slots[empty]) empty++;
    slots[empty] = slots[first], slots[first] = 0; /* the key moved past a gap */
    CHECK(qhx_strmap_view(&v, slots, m.mask, rec, m.rec_len, m.count) == -1, "a misplaced key accepted");
    slots[first] = slots[empty], slots[empty] = 0;
    rec[1] += 4000; /* a key running past the records */
    CHECK(qhx_strmap_view(&v, slots, m.mask, rec, m.rec_len, m.count) == -1, "a record out of bounds accepted");
    rec[1] -= 4000;
    CHECK(qhx_strmap_view(&v, slots, m.mask, rec, m.rec_len, m.count + 1) == -1, "a wrong count accepted");
    CHECK(qhx_strmap_view(&v, slots, 15, rec, m.rec_len, 9) == -1, "an over-full table accepted");
    free(slots), free(rec);
    qhx_strmap_free(&m);

    qhx_u64map u;
    CHECK(qhx_u64map_init(&u, 1000) == 0, "u64map init");
    for (uint64_t k = 0; k < 1000; k++) qhx_u64map_put(&u, k << 32 | (k * 31), k);
    qhx_u64map w;
    CHECK(qhx_u64map_view(&w, u.slot, u.mask, u.count) == 0, "u64 view refused");
    uint64_t got;
    CHECK(qhx_u64map_get(&w, 5ull << 32 | 155, &got) && got == 5, "u64 view lookup");
    uint32_t i = 0;
    while (u.slot[i].key == UINT64_MAX) i++;
    uint32_t gap = i;
    while (u.slot[gap].key != UINT64_MAX) gap++;
    u.slot[gap] = u.slot[i], u.slot[i].key = UINT64_MAX;
    CHECK(qhx_u64map_view(&w, u.slot, u.mask, u.count) == -1, "a misplaced u64 key accepted");
    qhx_u64map_free(&u);
}

int main(void) {
    hashmaps();
    char path[512];
    const char *toks[] = {"qwen3", "qwen3-qwen35regex"};
    const char *sets[] = {"edge", "kjv", "multilingual"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/tokenizers/%s/tokenizer.json", data_dir(), toks[k]);
        qhx_tokenizer *t;
        if (qhx_tokenizer_load(path, &t)) { CHECK(0, "%s", qhx_last_error()); continue; }
        for (int s = 0; s < 3; s++) {
            snprintf(path, sizeof path, "tests/data/tokenizer/%s.%s.jsonl", toks[k], sets[s]);
            golden_file(t, path);
        }
        /* the compact form: written from the loaded tables, loaded back, every golden again */
        char cpath[600];
        snprintf(cpath, sizeof cpath, "%s/%s.qhxtok", data_dir(), toks[k]);
        CHECK(qhx_tokenizer_save_compact(t, cpath) == QHX_OK, "%s", qhx_last_error());
        snprintf(path, sizeof path, "%s/tokenizers/%s/tokenizer.json", data_dir(), toks[k]);
        double t0 = now_ms();
        qhx_tokenizer *tj, *tc;
        CHECK(qhx_tokenizer_load(path, &tj) == QHX_OK, "%s", qhx_last_error());
        double t1 = now_ms();
        CHECK(qhx_tokenizer_load(cpath, &tc) == QHX_OK, "%s", qhx_last_error());
        double t2 = now_ms();
        printf("  %s: load tokenizer.json %.0f ms, compact form %.0f ms\n", toks[k], t1 - t0, t2 - t1);
        qhx_tokenizer_free(tj);
        if (tc) {
            for (int s = 0; s < 3; s++) {
                snprintf(path, sizeof path, "tests/data/tokenizer/%s.%s.jsonl", toks[k], sets[s]);
                golden_file(tc, path);
            }
            CHECK(qhx_tokenizer_n_ids(tc) == qhx_tokenizer_n_ids(t), "compact n_ids %d vs %d", qhx_tokenizer_n_ids(tc), qhx_tokenizer_n_ids(t));
            qhx_tokenizer_free(tc);
        }
        /* a damaged compact file: truncated anywhere, or a future version, is refused by name */
        size_t clen;
        unsigned char *cbytes = tl_read(cpath, &clen);
        const size_t cuts[] = {4, 20, clen / 3, clen / 2, clen - 1};
        for (size_t i = 0; cbytes && i < 5; i++)
            CHECK(load_written(cpath, cbytes, cuts[i]) != QHX_OK && strstr(qhx_last_error(), cpath), "truncated at %zu: %s", cuts[i], qhx_last_error());
        if (cbytes) {
            cbytes[clen / 2] ^= 0x20; /* one damaged byte in the tables */
            CHECK(load_written(cpath, cbytes, clen) == QHX_ERR_FORMAT && strstr(qhx_last_error(), "checksum"), "%s", qhx_last_error());
            cbytes[clen / 2] ^= 0x20;
            cbytes[8] = 9; /* version */
            CHECK(load_written(cpath, cbytes, clen) == QHX_ERR_UNSUPPORTED && strstr(qhx_last_error(), "version 9"), "%s", qhx_last_error());
        }
        free(cbytes);
        if (k == 0) {
            /* special tokens: matched only when allowed; non-special added tokens always */
            expect_ids(t, "<|im_start|>user", QHX_ENCODE_SPECIAL, (int32_t[]){151644, 872}, 2, "special allowed");
            int32_t *ids;
            size_t n;
            qhx_tokenizer_encode(t, "<|im_start|>user", 16, 0, &ids, &n);
            int has = 0;
            for (size_t i = 0; i < n; i++) has |= ids[i] == 151644;
            CHECK(!has && n > 2, "special token matched without permission (%zu ids)", n);
            free(ids);
            expect_ids(t, "<think>", 0, (int32_t[]){151667}, 1, "non-special added token");
            /* invalid UTF-8 */
            CHECK(qhx_tokenizer_encode(t, "ab\xff" "cd", 5, 0, &ids, &n) == QHX_ERR_ARG, "invalid UTF-8 accepted");
            CHECK(strstr(qhx_last_error(), "offset 2") != NULL, "%s", qhx_last_error());
            CHECK(qhx_tokenizer_encode(t, "ab\xe2\x82", 4, 0, &ids, &n) == QHX_ERR_ARG, "truncated UTF-8 accepted");
            CHECK(qhx_tokenizer_encode(t, "ab\xff" "cd", 5, QHX_ENCODE_REPLACE_INVALID, &ids, &n) == QHX_OK, "%s", qhx_last_error());
            char *dec;
            if (qhx_tokenizer_decode(t, ids, n, &dec, NULL) == QHX_OK) {
                CHECK(!strcmp(dec, "ab\xef\xbf\xbd" "cd"), "replacement: '%s'", dec);
                free(dec);
            }
            free(ids);
            /* decode refuses unknown ids */
            CHECK(qhx_tokenizer_decode(t, (int32_t[]){5, 999999}, 2, &dec, NULL) == QHX_ERR_RANGE, "bad id decoded");
            CHECK(strstr(qhx_last_error(), "999999") != NULL, "%s", qhx_last_error());
            char out[64];
            qhx_detok_stream st = {0};
            CHECK(qhx_detok_push(t, &st, -1, out, sizeof out) == -1, "stream accepted a bad id");
            /* a long run without any split point must not be quadratic or crash */
            size_t big = 1 << 20;
            char *run = malloc(big + 1);
            memset(run, 'a', big);
            run[big] = 0;
            CHECK(qhx_tokenizer_encode(t, run, big, 0, &ids, &n) == QHX_OK && n > 0 && n < big, "long run");
            free(ids);
            free(run);
        }
        qhx_tokenizer_free(t);
    }
    /* the bundled model's own tokenizer: the golden prompt ids */
    qhx_tokenizer *kjv;
    if (qhx_tokenizer_load("models/q35-kjv", &kjv) == QHX_OK) {
        expect_ids(kjv, "In the beginning", 0, (int32_t[]){40, 77, 258, 2419}, 4, "kjv prompt0");
        qhx_tokenizer_free(kjv);
    } else CHECK(0, "%s", qhx_last_error());

    bad_tokenizer("{not json", "not a JSON object");
    bad_tokenizer("{\"added_tokens\": []}", "model");
    /* U+0000 escaped, in a vocab key and as a whole string; an escaped backslash before "u0000" is not one */
    bad_tokenizer("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\\u0000b\": 0}, \"merges\": []}}", "U+0000 in a string (at byte 38)");
    bad_tokenizer("{\"added_tokens\": [{\"id\": 0, \"content\": \"\\u0000\"}]}", "U+0000");
    bad_tokenizer("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\\\\u0000\": 0}, \"merges\": []}}", "byte 0x");
    bad_tokenizer("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "WordPiece");
    bad_tokenizer("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", "byte 0x");
    bad_tokenizer("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", "merge 0");
    bad_tokenizer("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}, \"merges\": []}}", "vocab entry 'a'");
    { /* 6000 merges, split over two threads: the lowest bad rank is named, in either half */
        const int bad_at[][2] = {{4500, 4501}, {100, 5000}};
        for (int k = 0; k < 2; k++) {
            char *json = malloc(6000 * 8 + 256), *p = json;
            p += sprintf(p, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [");
            for (int r = 0; r < 6000; r++)
                p += sprintf(p, "%s%s", r ? "," : "", r == bad_at[k][0] ? "\"a c\"" : r == bad_at[k][1] ? "\"ab\"" : "\"a b\"");
            sprintf(p, "]}}");
            char needle[32];
            snprintf(needle, sizeof needle, "merge %d ", bad_at[k][0]);
            bad_tokenizer(json, needle);
            free(json);
        }
    }
    qhx_tokenizer *t = NULL;
    CHECK(qhx_tokenizer_load("/nonexistent/tokenizer.json", &t) == QHX_ERR_IO && strstr(qhx_last_error(), "/nonexistent"), "missing file");
    return tl_finish("tokenizer");
}
