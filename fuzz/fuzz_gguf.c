/* GGUF: the header, metadata and tensor directory (qhx_gguf_parse), every metadata value read as
 * each type, and the qwen35 configuration and tokenizer a model would build from it. */
#include "format/gguf.h"
#include "model/model.h"
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    qhx_gguf g;
    memset(&g, 0, sizeof g);
    if (qhx_gguf_parse(&g, "fuzz", p, n) == QHX_OK) {
        for (size_t i = 0; i < g.n_kv; i++) {
            char key[256];
            if (g.kv[i].key_len >= sizeof key) continue;
            memcpy(key, g.kv[i].key, g.kv[i].key_len);
            key[g.kv[i].key_len] = 0;
            int64_t iv;
            double fv;
            const char *s;
            size_t len;
            const qhx_gguf_kv *kv;
            qhx_gguf_int(&g, key, 1, &iv);
            qhx_gguf_float(&g, key, 1, &fv);
            qhx_gguf_string(&g, key, 1, &s, &len);
            if (qhx_gguf_array(&g, key, 1, QHX_GGUF_STRING, &kv) == QHX_OK && kv) {
                const unsigned char *c = kv->val;
                for (uint64_t k = 0; k < kv->arr_n; k++) qhx_gguf_next_string(&c, &len);
            }
        }
        qhx_config c;
        if (qhx_gguf_read_config(&c, &g) == QHX_OK) qhx_config_free(&c);
        qhx_tokenizer *t = NULL;
        if (qhx_gguf_read_tokenizer(&g, &t) == QHX_OK) qhx_tokenizer_free(t);
    }
    qhx_gguf_close(&g);
    return 0;
}
