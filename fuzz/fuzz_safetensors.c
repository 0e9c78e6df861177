/* safetensors: an 8-byte header length, the JSON tensor table, then data (qhx_st_parse). */
#include "format/safetensors.h"
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    if (n < 8) return 0;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
    if (hlen > n - 8) return 0; /* qhx_st_open refuses these before parsing */
    qhx_safetensors st;
    memset(&st, 0, sizeof st);
    if (qhx_st_parse(&st, "fuzz", (const char *)p + 8, (size_t)hlen, p + 8 + hlen, n - 8 - hlen) == QHX_OK) qhx_st_close(&st);
    return 0;
}
